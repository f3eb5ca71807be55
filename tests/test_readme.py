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
    for name, (document, rendered) in readme_tables.BLOCKS.items():
        for path, text in [(rendered, f"{name} rendered\n"), (document, "intro\n")]:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(text)
    for name, (document, _) in readme_tables.BLOCKS.items():
        start, end = readme_tables.markers(name)
        with open(tmp_path / document, "a") as f:
            f.write(f"{start}\n{name} rendered\n{end}\noutro\n")
    assert readme_tables.main(["--check", "--root", str(tmp_path)]) == 0
    for name, (document, rendered) in readme_tables.BLOCKS.items():
        (tmp_path / rendered).write_text(f"{name} newer\n")
        assert readme_tables.main(["--check", "--root", str(tmp_path)]) == 1
        assert f"{name} block" in capsys.readouterr().err
        assert readme_tables.main(["--root", str(tmp_path)]) == 0  # rewrite, then the check passes
        assert f"{name} newer" in (tmp_path / document).read_text()
        assert readme_tables.main(["--check", "--root", str(tmp_path)]) == 0


README = readme_tables.REPO / "README.md"
FRONT_PAGE_BYTES = 16_000


def sections(text: str) -> list[str]:
    return [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]


def test_readme_is_a_front_page():
    """At most 16 KB; what it is and the figure first, then a quickstart (demo, then the book) with its expected
    output and the data source beside the first command that needs the data, then the results; the detail lives
    in linked pages that exist."""
    text = README.read_text(encoding="utf-8")
    assert len(text.encode()) <= FRONT_PAGE_BYTES, f"README.md is {len(text.encode())} bytes: move detail out"
    order = sections(text)
    assert order.index("Quickstart") < order.index("Results in brief"), order
    figure = text.index("![")
    quickstart = text.index("## Quickstart")
    assert figure < quickstart, "the figure comes before the quickstart"
    start = text.index("```", quickstart)
    commands = text[start:text.index("```", start + 3)]
    assert commands.index("make demo") < commands.index("make book"), commands
    data = text.index("**Data.**")
    assert quickstart < data < text.index("## Reproduce") and "EBP_DATA_DIR" in text[data:data + 600]
    assert "epoch 1: test error EBP-P" in text[quickstart:text.index("## Reproduce")], "no expected demo output"
    assert text.index("<!-- summary:start -->") > text.index("## Results in brief")
    for link in ("docs/running.md", "docs/beyond_the_paper.md", "outputs/README.md"):
        assert f"]({link}" in text and (readme_tables.REPO / link).is_file(), link


def test_figure_caption_leaves_the_rule_to_the_tables_notebook():
    """The comparison rule is the tables notebook's to state (it may change); the caption says what the figure
    shows and where the rule is."""
    text = README.read_text(encoding="utf-8")
    caption = text[text.index("![") :].split("\n\n")[1]
    assert "run-to-run band" in caption and "notebooks/tables.ipynb" in caption, caption
    assert "standard error" not in caption, caption
