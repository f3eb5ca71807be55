"""Copy the rendered tables (written by notebooks/tables.ipynb) into README.md, between its two markers.

    python scripts/readme_tables.py            # rewrite README.md's results block from outputs/runs/paper/tables.md
    python scripts/readme_tables.py --check    # exit 1 if the README's block differs from the rendered tables

The README never carries hand-typed results: tests/test_readme.py runs the check.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START, END = "<!-- tables:start -->", "<!-- tables:end -->"


def with_tables(readme: str, tables: str) -> str:
    """`readme` with everything between the markers replaced by `tables`."""
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise ValueError(f"README.md must hold exactly one {START} ... {END} block")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{tables.strip()}\n{END}{tail}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=Path, default=REPO / "outputs" / "runs" / "paper" / "tables.md")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if they differ")
    args = parser.parse_args(argv)
    readme, tables = args.readme.read_text(), args.tables.read_text()
    updated = with_tables(readme, tables)
    if args.check:
        if updated != readme:
            print(f"{args.readme} does not show {args.tables}: run python scripts/readme_tables.py", file=sys.stderr)
            return 1
        return 0
    args.readme.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
