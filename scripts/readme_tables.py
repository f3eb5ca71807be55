"""Copy the rendered results (written by notebooks/tables.ipynb and successors.ipynb) into README.md and
docs/maths.md, between markers.

    python scripts/readme_tables.py            # rewrite every block from its rendered file
    python scripts/readme_tables.py --check    # exit 1 if a block differs from its rendered file

Three blocks. `summary` in README.md: how many cells of each table agree with the paper, and the paper's findings
judged on its numbers and ours (outputs/runs/paper/summary.md); the full tables stay in
outputs/runs/paper/tables.md. `successors` in README.md: EBP beside STE, Bop and BayesBiNN
(outputs/successors/tuned/summary.md, written by notebooks/successors.ipynb). `authors-code` in docs/maths.md: what
the authors' codes change, per row, paired with the spec's runs (outputs/runs/paper/authors_code.md). No document
carries hand-typed results:
tests/test_readme.py runs the check.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# block name: (the document that shows it, the rendered file it shows)
BLOCKS = {"summary": (Path("README.md"), Path("outputs/runs/paper/summary.md")),
          "successors": (Path("README.md"), Path("outputs/successors/tuned/summary.md")),
          "authors-code": (Path("docs/maths.md"), Path("outputs/runs/paper/authors_code.md"))}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


START, END = markers("summary")


def with_tables(readme: str, tables: str, name: str = "summary", document: str = "README.md") -> str:
    """`readme` with everything between block `name`'s markers replaced by `tables`."""
    start, end = markers(name)
    if readme.count(start) != 1 or readme.count(end) != 1 or readme.index(start) > readme.index(end):
        raise ValueError(f"{document} must hold exactly one {start} ... {end} block")
    head, rest = readme.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{tables.strip()}\n{end}{tail}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the repository (README.md, docs/ and outputs/)")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if they differ")
    args = parser.parse_args(argv)
    for name, (document, rendered) in BLOCKS.items():
        path = args.root / document
        text = path.read_text()
        updated = with_tables(text, (args.root / rendered).read_text(), name, str(document))
        if args.check and updated != text:
            print(f"{document}'s {name} block does not show {rendered}: run python scripts/readme_tables.py",
                  file=sys.stderr)
            return 1
        if not args.check and updated != text:
            path.write_text(updated)
    return 0

if __name__ == "__main__":
    sys.exit(main())
