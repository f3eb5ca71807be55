"""The README's results are the tables notebook's rendering, never typed by hand."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import readme_tables  # noqa: E402


def test_readme_shows_the_rendered_tables():
    assert readme_tables.main(["--check"]) == 0, "README.md's results differ from outputs/runs/paper/tables.md"


def test_splice_replaces_only_the_block():
    readme = f"intro\n{readme_tables.START}\nold\n{readme_tables.END}\noutro\n"
    assert readme_tables.with_tables(readme, "new\n") == f"intro\n{readme_tables.START}\nnew\n{readme_tables.END}\noutro\n"
    with pytest.raises(ValueError, match="exactly one"):
        readme_tables.with_tables("no markers", "new")
