"""Copy the rendered results summary (written by notebooks/tables.ipynb) into README.md, between its markers.

    python scripts/readme_tables.py            # rewrite README.md's results block from the rendered summary
    python scripts/readme_tables.py --check    # exit 1 if the README block differs from the rendered summary

One block, `summary`: how many cells of each table agree with the paper, and the paper's findings judged on its
numbers and ours (outputs/runs/paper/summary.md); the full tables stay in outputs/runs/paper/tables.md. The README
never carries hand-typed results: tests/test_readme.py runs the check.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BLOCKS = {"summary": Path("outputs/runs/paper/summary.md")}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


START, END = markers("summary")


def with_tables(readme: str, tables: str, name: str = "summary") -> str:
    """`readme` with everything between block `name`'s markers replaced by `tables`."""
    start, end = markers(name)
    if readme.count(start) != 1 or readme.count(end) != 1 or readme.index(start) > readme.index(end):
        raise ValueError(f"README.md must hold exactly one {start} ... {end} block")
    head, rest = readme.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{tables.strip()}\n{end}{tail}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the repository (README.md and outputs/)")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if they differ")
    args = parser.parse_args(argv)
    path = args.root / "README.md"
    readme = updated = path.read_text()
    for name, tables in BLOCKS.items():
        updated = with_tables(updated, (args.root / tables).read_text(), name)
        if args.check and updated != readme:
            print(f"README.md's {name} block does not show {tables}: run python scripts/readme_tables.py",
                  file=sys.stderr)
            return 1
    if not args.check:
        path.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
