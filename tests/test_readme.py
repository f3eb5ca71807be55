"""The README's results are the tables notebook's rendering, never typed by hand."""
import pytest

from scripts import readme_tables


def test_readme_shows_the_rendered_summary():
    assert readme_tables.main(["--check"]) == 0, "README.md's results differ from the rendered summary"


def test_splice_replaces_only_the_block():
    readme = f"intro\n{readme_tables.START}\nold\n{readme_tables.END}\noutro\n"
    assert readme_tables.with_tables(readme, "new\n") == f"intro\n{readme_tables.START}\nnew\n{readme_tables.END}\noutro\n"
    with pytest.raises(ValueError, match="exactly one"):
        readme_tables.with_tables("no markers", "new")


def test_check_names_a_stale_block(tmp_path, capsys):
    """Each block is checked against its own file: a stale block fails with its name; rewriting fixes it."""
    for name, rendered in readme_tables.BLOCKS.items():
        (tmp_path / rendered).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rendered).write_text(f"{name} rendered\n")
    blocks = "".join(f"{s}\n{name} rendered\n{e}\n" for name in readme_tables.BLOCKS
                     for s, e in [readme_tables.markers(name)])
    (tmp_path / "README.md").write_text(f"intro\n{blocks}outro\n")
    assert readme_tables.main(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / readme_tables.BLOCKS["summary"]).write_text("summary newer\n")
    assert readme_tables.main(["--check", "--root", str(tmp_path)]) == 1
    assert "summary block" in capsys.readouterr().err
    assert readme_tables.main(["--root", str(tmp_path)]) == 0  # rewrite, then the check passes
    assert "summary newer" in (tmp_path / "README.md").read_text()
    assert readme_tables.main(["--check", "--root", str(tmp_path)]) == 0
