"""The README's results are the tables notebook's rendering, never typed by hand."""
import re

import pytest

from scripts import readme_tables


def test_readme_shows_the_rendered_summary():
    """The headline is the committed runs' (recomputed from the records) and every block shows its file."""
    assert readme_tables.main(["--check"]) == 0, "README.md's results differ from the rendered summary"


def test_headline_states_the_papers_numbers_beside_ours():
    """The paper's 2.12% and 1.66% beside our mean ± SD of the same cells, read from the records."""
    rows, variants = readme_tables.table_variants(readme_tables.REPO)
    text = (readme_tables.REPO / readme_tables.HEADLINE).read_text()
    for weights, key in readme_tables.HEADLINE_CELLS.items():
        cell = variants["main"][key]
        paper = next(r["paper_error"] for r in rows if (r["table"], r["row"], r["column"]) == key)
        assert f"| {weights} weights ({key[1]}) | {paper:.2f}% | **{cell.mean:.2f} ± {cell.sd:.2f}%** |" in text
    for opening in ("**Reproduced.**", "**Not reproduced.**", "**The paper's findings.**", "**Today's methods.**"):
        assert opening in text, opening


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
    only = ["--blocks-only", "--root", str(tmp_path)]
    assert readme_tables.main(["--check", *only]) == 0
    for name, (document, rendered) in readme_tables.BLOCKS.items():
        (tmp_path / rendered).write_text(f"{name} newer\n")
        assert readme_tables.main(["--check", *only]) == 1
        assert f"{name} block" in capsys.readouterr().err
        assert readme_tables.main(only) == 0  # rewrite, then the check passes
        assert f"{name} newer" in (tmp_path / document).read_text()
        assert readme_tables.main(["--check", *only]) == 0


README = readme_tables.REPO / "README.md"
FRONT_PAGE_BYTES = 16_000


def sections(text: str) -> list[str]:
    return [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]


def test_readme_is_a_front_page():
    """At most 16 KB; what it is, the headline and the glossary first, then the figure, a quickstart (demo, then
    the book) with its expected output and the data source beside the first command that needs the data, then
    the results; the detail lives in linked pages that exist."""
    text = README.read_text(encoding="utf-8")
    assert len(text.encode()) <= FRONT_PAGE_BYTES, f"README.md is {len(text.encode())} bytes: move detail out"
    order = sections(text)
    assert order.index("Quickstart") < order.index("Results in brief"), order
    headline, glossary = text.index("<!-- headline:start -->"), text.index("<!-- glossary:start -->")
    figure = text.index("![")
    quickstart = text.index("## Quickstart")
    assert headline < glossary < figure < quickstart, "the headline, the glossary, then the figure and quickstart"
    assert text.count("\n", 0, text.index("<!-- headline:end -->")) < 30, "the headline is not on the first screen"
    start = text.index("```", quickstart)
    commands = text[start:text.index("```", start + 3)]
    assert commands.index("make demo") < commands.index("make book"), commands
    assert "_build/html/book/index.html" in commands, "the book's landing page, not the redirect"
    data = text.index("**Data.**")
    assert quickstart < data < text.index("## Reproduce") and "EBP_DATA_DIR" in text[data:data + 600]
    for command in ("make demo", "make lab", "make test", "make reproduce"):
        assert command in text[data:data + 900], f"the offline note does not name {command}"
    assert "epoch 1: test error EBP-P" in text[quickstart:text.index("## Reproduce")], "no expected demo output"
    for link in ("docs/running.md", "docs/beyond_the_paper.md", "outputs/README.md", "outputs/runs/paper/summary.md"):
        assert f"]({link}" in text and (readme_tables.REPO / link).is_file(), link


GLOSSARY_TERMS = ("EBP-P", "EBP-D", "B- / R-", "BMNN", "band", "sampled / analytic", "absent / held", "seed")


def test_glossary_defines_the_terms_in_one_line_each():
    lines = [line for line in (readme_tables.REPO / "docs/glossary.md").read_text().splitlines() if line.strip()]
    assert len(lines) <= 10 and all(line.startswith("- **") for line in lines), lines
    for term in GLOSSARY_TERMS:
        assert any(term in line.split(":")[0] for line in lines), term


def prose_sentences(text: str) -> list[str]:
    """The sentences of a Markdown text's prose: code blocks, tables, headings, comments and images left out,
    code and maths spans counted as one word, list items and paragraphs ended as sentences."""
    text = re.sub(r"<!--.*?-->|```.*?```", " ", text, flags=re.S)
    text = "\n".join(line for line in text.splitlines()
                     if not line.lstrip().startswith(("|", "#", "![", ":", "(")) or line.startswith("(http"))
    text = re.sub(r"\]\([^)]*\)", "]", re.sub(r"\$[^$]*\$", "MATH", re.sub(r"`[^`]*`", "CODE", text)))
    found = []
    for paragraph in re.split(r"\n\s*\n|\n\s*[-*] |^[-*] |^> ", text, flags=re.M):
        for sentence in re.split(r"(?<=[.!?])(?:\*\*)?\s+(?=[A-Z0-9*(])", " ".join(paragraph.split())):
            if len(sentence.split()) >= 3:
                found.append(sentence)
    return found


def test_sentence_lengths_count_words():
    text = "One two three. Four five six seven!\n\n- **Eight.** Nine ten eleven. 12 thirteen fourteen"
    assert [len(s.split()) for s in prose_sentences(text)] == [3, 4, 3, 3]


FRONT_PAGES = ("README.md", "book/index.md", "outputs/runs/paper/headline.md", "docs/glossary.md")


@pytest.mark.parametrize("page", FRONT_PAGES)
def test_front_pages_are_plain(page):
    """README, the landing page and what they include: sentences of about 20 words on average, none over 40."""
    words = [len(s.split()) for s in prose_sentences((readme_tables.REPO / page).read_text(encoding="utf-8"))]
    long = [s for s in prose_sentences((readme_tables.REPO / page).read_text()) if len(s.split()) > 40]
    assert sum(words) / len(words) <= 21 and not long, (sum(words) / len(words), long)


def test_the_papers_tables_are_tables_in_the_maths_page():
    """docs/maths.md shows the paper's Tables 2-4 as Markdown tables holding every number of paper_tables.csv."""
    from reproduction import paper_tables

    text = (readme_tables.REPO / "docs/maths.md").read_text().split("## The paper's results")[1]
    cells = {}
    for block in re.split(r"\n(?=Table \d)", text)[1:]:
        table = int(block[6])
        header = None
        for line in block.splitlines():
            parts = [p.strip() for p in line.strip().strip("|").split("|")]
            if not line.startswith("|") or set(line) <= set("|-"):
                continue
            if parts[0].startswith(("one", "two", "hidden")):
                header = parts[1:]
            else:
                cells.update({(table, parts[0], c): float(v) for c, v in zip(header, parts[1:])})
    expected = {(r["table"], r["row"], r["column"]): r["paper_error"] for r in paper_tables.read_paper_tables()
                if r["dataset"] == "mnist"}
    assert cells == expected


def test_figure_caption_leaves_the_rule_to_the_tables_notebook():
    """The comparison rule is the tables notebook's to state (it may change); the caption says what the figure
    shows and where the rule is."""
    text = README.read_text(encoding="utf-8")
    caption = text[text.index("![") :].split("\n\n")[1]
    assert "run-to-run band" in caption and "notebooks/tables.ipynb" in caption, caption
    assert "standard error" not in caption, caption
