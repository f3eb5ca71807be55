"""The book (`make book`): the notebooks and docs/maths.md built offline as HTML, then read page by page in a
real browser (headless Chromium).

The browser checks need Chromium and ChromeDriver (Debian: apt-get install chromium chromium-driver). Without
them they skip and say what to install, unless EBP_REQUIRE_BROWSER=1 (.ci/run sets it): then a missing browser
fails. The book is built once per session into a temporary folder from the working tree's notebooks.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import nbformat
import pytest

import ebp_analysis
from scripts import build_book
from tests.test_readme import prose_sentences

ROOT = Path(__file__).resolve().parents[1]

REQUIRE_BROWSER = os.environ.get("EBP_REQUIRE_BROWSER", "") not in ("", "0")
NUMBERED = re.compile(r"^\d\d[a-z]?_")   # 03b_... sits between 03 and 04
# TeX that MathJax would have replaced: \( \) \[ \] delimiters, $...$ or $$, an environment.
RAW_TEX = re.compile(r"\\[()\[\]]|\$\$|\$[^$\s][^$\n]*\$|\\begin\{")
# A Markdown table's separator row (|---|---| or ---|:---:; the book's smart quotes turn --- into —): a table
# shown as text instead of rendered.
TABLE_SEPARATOR = re.compile(r"\|\s*:?[-—–]+:?\s*\||:?-{3,}:?\s*\|\s*:?-{3,}")
# A separator row as a line of Markdown source, i.e. one table.
SEPARATOR_LINE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)+\|?\s*$", re.M)
# The pages a reader opens for the results: every table they print must be an HTML table.
RESULTS_PAGES = ("notebooks/tables", "notebooks/comparison")
LANDING_FIGURE = "agreement.png"
# Chrome's console lines for a resource that did not load.
LOAD_FAILURE = re.compile(r"Failed to load resource|net::ERR_|blocked by CORS|Not allowed to load", re.I)


def toc_pages() -> list[str]:
    """The book's documents in reading order, as book/_toc.yml lists them (root first)."""
    return build_book.toc_files(build_book.BOOK / "_toc.yml")


PAGES = toc_pages()


def source_of(page: str) -> Path:
    matches = [p for p in (ROOT / f"{page}.ipynb", ROOT / f"{page}.md") if p.is_file()]
    assert len(matches) == 1, f"{page}: expected one source file (.ipynb or .md), found {matches}"
    return matches[0]


def source_tables(page: str) -> int:
    """How many Markdown tables (separator rows) a page's source holds: a notebook's markdown cells and the
    Markdown its cells print, or a Markdown page's text."""
    source = source_of(page)
    if source.suffix == ".md":
        return len(SEPARATOR_LINE.findall(source.read_text(encoding="utf-8")))
    texts = []
    for cell in json.loads(source.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            texts.append("".join(cell["source"]))
        texts += ["".join(o["data"]["text/markdown"]) for o in cell.get("outputs", [])
                  if "text/markdown" in o.get("data", {})]
    return sum(len(SEPARATOR_LINE.findall(text)) for text in texts)


def markdown_and_figures(page: str) -> tuple[str, int]:
    """A page's markdown text (a notebook's markdown cells) and the number of figures its outputs hold."""
    source = source_of(page)
    if source.suffix == ".md":
        return source.read_text(encoding="utf-8"), 0
    cells = json.loads(source.read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    figures = sum(1 for c in cells for o in c.get("outputs", [])
                  if {"image/png", "image/jpeg", "image/svg+xml"} & set(o.get("data", {})))
    return text, figures


def test_toc_lists_every_notebook_in_reading_order():
    """Every notebook is in the book; 00-09 come first, in numeric order, then the reproduction notebooks."""
    notebooks = sorted(f"notebooks/{p.stem}" for p in (ROOT / "notebooks").glob("*.ipynb"))
    missing = [n for n in notebooks if n not in PAGES]
    assert not missing, f"notebooks missing from book/_toc.yml: {missing}"
    assert len(PAGES) == len(set(PAGES)), f"a page is listed twice in book/_toc.yml: {PAGES}"
    for page in PAGES:
        source_of(page)
    in_book = [p for p in PAGES if p in notebooks]
    numbered = [p for p in in_book if NUMBERED.match(Path(p).name)]
    assert numbered == sorted(numbered) and len(numbered) >= 10, f"numbered notebooks out of order: {numbered}"
    assert in_book[:len(numbered)] == numbered, f"a reproduction notebook comes before a numbered one: {in_book}"
    assert "docs/maths" in PAGES


def test_a_truncated_notebook_is_named_before_the_build(tmp_path, monkeypatch, capsys):
    """make book with a truncated notebook (and one without cells) fails at once, naming each file and how to
    restore it, instead of with Jupyter Book's traceback."""
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "_toc.yml").write_text("format: jb-book\nroot: notebooks/README\nparts:\n  - chapters:\n"
                                                "      - file: notebooks/good\n      - file: notebooks/cut\n"
                                                "      - file: notebooks/empty\n      - file: notebooks/strange\n")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "README.md").write_text("# Book\n")
    (tmp_path / "notebooks" / "good.ipynb").write_text(json.dumps(nbformat.v4.new_notebook()))
    (tmp_path / "notebooks" / "cut.ipynb").write_text('{"cells": [{"cell_type": "code", "sou')
    (tmp_path / "notebooks" / "empty.ipynb").write_text("[]")
    (tmp_path / "notebooks" / "strange.ipynb").write_text(json.dumps({"cells": [1, 2], "nbformat": 4}))  # JSON only
    monkeypatch.setattr(build_book, "ROOT", tmp_path)
    monkeypatch.setattr(build_book, "BOOK", tmp_path / "book")
    assert build_book.main(["--out", str(tmp_path / "out")]) == 1
    message = capsys.readouterr().err
    assert str(tmp_path / "notebooks" / "cut.ipynb") in message and "git checkout -- notebooks/cut.ipynb" in message
    assert str(tmp_path / "notebooks" / "empty.ipynb") in message and "good.ipynb" not in message
    assert str(tmp_path / "notebooks" / "strange.ipynb") in message
    assert not (tmp_path / "out").exists()  # Jupyter Book never ran


def test_remote_assets_are_found(tmp_path):
    """The offline check reports scripts, stylesheets and images from the web, and only those."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "page.html").write_text(
        '<html><head><script src="../_static/local.js"></script>'
        '<script src="https://cdn.example.org/mathjax/tex-chtml.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.org/font.css">'
        '<link rel="next" href="https://example.org/next.html">'
        '</head><body><img src="data:image/png;base64,AAAA"><img src="http://example.org/a.png">'
        '<a href="https://example.org/paper">a link is not a load</a></body></html>')
    found = build_book.remote_assets(tmp_path)
    assert found == ["sub/page.html: <script> https://cdn.example.org/mathjax/tex-chtml.js",
                     "sub/page.html: <link> //fonts.example.org/font.css",
                     "sub/page.html: <img> http://example.org/a.png"]


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    """The book built from the working tree by `make book` (Sphinx warnings are errors, a page that loads an
    asset from the web fails it), in a temporary folder; by the build script where make is missing."""
    out = tmp_path_factory.mktemp("book")
    if shutil.which("make") is None:
        return build_book.build(out)
    # This interpreter's environment, taken as installed (-o: no pip install from a test); no make flags
    # inherited from a make running the tests.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    result = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.requirements-installed",
                             f"PYTHON={sys.executable}", f"BOOK_OUT={out}", "book"],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"make book failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return out / "_build" / "html"


def test_book_is_built_offline(book):
    """Every page exists and loads nothing from the web; MathJax is the book's own copy."""
    assert build_book.remote_assets(book) == []
    for page in PAGES:
        html = (book / f"{page}.html").read_text(encoding="utf-8")
        scripts = re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', html, re.I)
        assert scripts, f"{page}.html loads no MathJax"
        for src in scripts:
            assert (book / page).parent.joinpath(src.split("?")[0]).resolve().is_file(), f"{page}.html: {src}"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    try:
        build_book.chromium_paths()
    except build_book.BrowserMissing as missing:
        if REQUIRE_BROWSER:
            pytest.fail(f"EBP_REQUIRE_BROWSER is set and {missing}")
        pytest.skip(str(missing))
    session = build_book.open_chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield session
    session.quit()


@cache
def element_ids(path: Path) -> frozenset[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return frozenset(re.findall(r'\b(?:id|name)="([^"]+)"', text))


# One pass over the typeset page: everything the checks below need, read in the browser.
READ_PAGE = r"""
const article = document.querySelector('article') || document.body;
const math = [...document.querySelectorAll('.math')];
const visible = document.body.cloneNode(true);
visible.querySelectorAll('script, style, pre, code, textarea, noscript, template, mjx-container')
       .forEach((e) => e.remove());
return {
  math: math.length,
  untypeset: math.filter((e) => !e.querySelector('mjx-container')).map((e) => e.textContent.slice(0, 80)),
  typeset_in_article: article.querySelectorAll('mjx-container').length,
  merror: [...document.querySelectorAll('mjx-merror')].map((e) => e.textContent.slice(0, 80)),
  text: visible.textContent,
  images: [...document.images].map((i) => ({src: i.src, ok: i.complete && i.naturalWidth > 0})),
  figures: article.querySelectorAll('img').length,
  links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
  nav: [...document.querySelectorAll('nav.bd-docs-nav a.reference')].map((a) => a.href),
  fetched: performance.getEntriesByType('resource').map((e) => e.name),
  tables: article.querySelectorAll('table').length,
  shown_figures: [...article.querySelectorAll('.cell_output img')].map((i) => [i.naturalWidth,
                                                                              i.getBoundingClientRect().width]),
  clipped: clipped(article),
};
"""

# The text column's overflow, measured in the browser: every shown element of the article that ends to the right
# of the column without a sideways-scrolling box around it, and every box that hides what overflows it sideways.
# Inline elements (words, inline maths) have no box width of their own and are judged by their containers.
CLIPPED = r"""
function clipped(column) {
  const right = column.getBoundingClientRect().right;
  // MathJax's copy of each formula for screen readers is a clipped 1 px box by design.
  const shown = (e) => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
                         return !e.closest('mjx-assistive-mml') && r.width > 0 && r.height > 0
                                && s.visibility !== 'hidden' && s.display !== 'inline'; };
  const scrolled = (e) => { for (let a = e.parentElement; a && a !== column; a = a.parentElement) {
                              if (['auto', 'scroll'].includes(getComputedStyle(a).overflowX)) return true; }
                            return false; };
  const name = (e) => `<${e.tagName.toLowerCase()} class="${e.getAttribute('class') || ''}"> `
                      + JSON.stringify(e.textContent.trim().slice(0, 60));
  const past = [...column.querySelectorAll('*')].filter((e) => shown(e) && !scrolled(e)
                                                         && e.getBoundingClientRect().right > right + 1);
  // Inside a formula MathJax clips its own parts (stretchy delimiters); the formula is judged as a whole.
  const hiding = [...column.querySelectorAll('*')].filter((e) => shown(e) && !e.parentElement.closest('mjx-container')
      && ['hidden', 'clip'].includes(getComputedStyle(e).overflowX) && e.scrollWidth > e.clientWidth + 1);
  return past.map((e) => `${name(e)} ends ${Math.round(e.getBoundingClientRect().right - right)} px past the column`)
      .concat(hiding.map((e) => `${name(e)} hides ${e.scrollWidth - e.clientWidth} px`));
}
"""


@pytest.mark.parametrize("page", PAGES)
def test_page_in_browser(browser, book, page):
    url = (book / f"{page}.html").as_uri()
    browser.get(url)
    build_book.wait_for_mathjax(browser)
    seen = browser.execute_script(CLIPPED + READ_PAGE)
    console = browser.get_log("browser")
    markdown, figures = markdown_and_figures(page)

    # The maths is typeset: every math element holds MathJax output, none is a TeX error, no TeX is left
    # in the text, and a page whose markdown has maths shows some.
    assert not seen["untypeset"], f"math left untypeset: {seen['untypeset'][:5]}"
    assert not seen["merror"], f"MathJax errors: {seen['merror'][:5]}"
    raw = [seen["text"][max(0, m.start() - 40):m.end() + 40] for m in RAW_TEX.finditer(seen["text"])]
    assert not raw, f"raw TeX in the visible text: {raw[:5]}"
    if RAW_TEX.search(markdown):
        assert seen["typeset_in_article"] > 0, "the page's markdown has maths but none is typeset"

    # Every table is an HTML table: no Markdown table syntax is left in the text (code blocks aside), and each
    # table of the source, whether typed in a markdown cell or printed by a cell, is a <table> on the page.
    raw_tables = [seen["text"][max(0, m.start() - 60):m.end() + 60] for m in TABLE_SEPARATOR.finditer(seen["text"])]
    assert not raw_tables, f"{len(raw_tables)} Markdown tables shown as text, e.g. {raw_tables[:3]}"
    assert seen["tables"] >= source_tables(page), \
        f"{source_tables(page)} tables in the source, {seen['tables']} <table> elements on the page"
    if page in RESULTS_PAGES:
        assert seen["tables"] > 0, "a results page without one HTML table"

    # Nothing runs past the text column or is cut off: wide tables and code scroll inside it, output wraps.
    assert not seen["clipped"], "clipped at the text column's right edge:\n  " + "\n  ".join(seen["clipped"][:8])

    # Every image loaded, and every figure of the notebook's outputs is on the page.
    broken = [i["src"] for i in seen["images"] if not i["ok"]]
    assert not broken, f"images that did not load: {broken}"
    assert seen["figures"] >= figures, f"{figures} figures in the notebook, {seen['figures']} on the page"

    # Every figure is shown at its own size or the full ebp_analysis.BOOK_COLUMN_PX: the column is still as wide
    # as tests/test_book_figures.py reckons when it measures the figures' text.
    shrunk = [f"{natural} px wide, shown {shown:.0f} px" for natural, shown in seen["shown_figures"]
              if shown < min(natural, ebp_analysis.BOOK_COLUMN_PX) - 1]
    assert not shrunk, (f"figures shrunk by a column narrower than {ebp_analysis.BOOK_COLUMN_PX} px "
                        f"(ebp_analysis.BOOK_COLUMN_PX is out of date): {shrunk}")

    # Every link into the book reaches a file of the book, and its anchor is on that page.
    bad = []
    for href in seen["links"]:
        parts = urlsplit(href)
        if parts.scheme != "file":
            continue
        target = Path(url2pathname(unquote(parts.path)))
        if not target.resolve().is_relative_to(book.resolve()):
            bad.append(f"{href} (outside the book)")
        elif target.is_dir():
            if not (target / "index.html").is_file():
                bad.append(f"{href} (folder without index.html)")
        elif not target.is_file():
            bad.append(f"{href} (no such file)")
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in element_ids(target):
            bad.append(f"{href} (no such anchor)")
    assert not bad, "broken links:\n  " + "\n  ".join(bad)

    # The navigation lists the book's pages in reading order.
    nav = [Path(url2pathname(unquote(urlsplit(h).path))).resolve().relative_to(book.resolve()).with_suffix("")
           .as_posix() for h in seen["nav"]]
    assert nav == PAGES, f"navigation {nav} differs from the reading order {PAGES}"

    # Nothing came from outside the book, and nothing failed to load.
    remote = [name for name in seen["fetched"] if not name.startswith(("file:", "data:", "blob:"))]
    assert not remote, f"fetched from outside the book: {remote}"
    failures = [e["message"] for e in console if e["level"] == "SEVERE" and LOAD_FAILURE.search(e["message"])]
    assert not failures, f"resources that failed to load: {failures}"


LANDING = r"""
const article = document.querySelector('article') || document.body;
return {
  figures: [...article.querySelectorAll('img')].map((i) => ({src: i.src, ok: i.complete && i.naturalWidth > 0,
                                                             width: i.getBoundingClientRect().width})),
  links: [...article.querySelectorAll('a[href]')].map((a) => a.href),
  text: article.textContent.replace(/\s+/g, ' ').replace(/[‘’]/g, "'"),
};
"""


def test_landing_page_shows_the_figure_the_headline_and_the_way_in(browser, book):
    """The first page a reader meets: the agreement figure, shown and readable; the headline counts as the
    tables notebook generated them (outputs/runs/paper/summary.md, the README's block); and a link to every
    other page of the book, in reading order (test_page_in_browser checks that every link resolves)."""
    landing = book / f"{PAGES[0]}.html"
    browser.get(landing.as_uri())
    build_book.wait_for_mathjax(browser)
    seen = browser.execute_script(LANDING)
    figures = [f for f in seen["figures"] if f["src"].endswith(LANDING_FIGURE)]
    assert figures and all(f["ok"] for f in figures), f"no loaded {LANDING_FIGURE} on the landing page: {seen['figures']}"
    assert figures[0]["width"] >= 400, f"the agreement figure is shown {figures[0]['width']:.0f} px wide"
    summary = (ROOT / "outputs" / "runs" / "paper" / "summary.md").read_text(encoding="utf-8")
    first_count = next(line for line in summary.splitlines() if line.startswith("- "))[2:].rstrip(".")
    assert re.sub(r"\s+", " ", first_count).replace("**", "") in seen["text"], \
        f"the landing page lacks the generated headline {first_count!r}"
    linked = []
    for href in seen["links"]:
        parts = urlsplit(href)
        if parts.scheme == "file":
            path = Path(url2pathname(unquote(parts.path))).resolve()
            if path.is_relative_to(book.resolve()) and path.suffix == ".html":
                linked.append(path.relative_to(book.resolve()).with_suffix("").as_posix())
    others = PAGES[1:]
    missing = [p for p in others if p not in linked]
    assert not missing, f"pages the landing page does not link to: {missing}"
    rest = iter(linked)
    assert all(page in rest for page in others), \
        f"the landing page does not list the pages in reading order: {linked}"


# The report pages whose answer comes first: an "In short" box on the first screen, and no code shown.
ANSWER_FIRST = ("notebooks/tables", "notebooks/comparison", "notebooks/successors", "notebooks/reproduction_evidence")

MEASURE = r"""
const article = document.querySelector('article') || document.body;
const column = article.getBoundingClientRect().width;
const top = (e) => e ? e.getBoundingClientRect().top + window.scrollY : null;
const heading = (words) => [...article.querySelectorAll('h2')].find((h) => h.textContent.includes(words));
const box = [...article.querySelectorAll('blockquote')].find((b) => b.textContent.includes('In short'));
const tables = [...article.querySelectorAll('table')];
return {
  screen: window.innerHeight,  // the first screen: what a 1280 x 900 window shows of the page
  height: document.documentElement.scrollHeight,
  first_table: top(tables[0]),
  first_table_text: tables.length ? tables[0].textContent.replace(/\s+/g, ' ') : '',
  in_short: top(box),
  glossary: top(heading('Glossary')), reading_order: top(heading('Reading order')),
  first_figure: top(article.querySelector('img')),
  shown_inputs: [...article.querySelectorAll('.cell_input')].filter((e) => e.offsetParent !== null && !e.closest('details:not([open])')
                                                                          && e.getBoundingClientRect().height > 0).length,
  // A table whose numbers do not fit: wider than its box (which then scrolls), or than the column.
  wide_tables: tables.filter((t) => Math.max(t.scrollWidth, t.parentElement.scrollWidth) > t.parentElement.clientWidth + 1
                                    || t.getBoundingClientRect().width > column + 1)
                     .map((t) => `${Math.max(t.scrollWidth, t.parentElement.scrollWidth)} px in `
                                 + `${t.parentElement.clientWidth}: ${t.textContent.trim().slice(0, 60)}`),
};
"""


def measure(browser, book, page) -> dict:
    browser.get((book / f"{page}.html").as_uri())
    build_book.wait_for_mathjax(browser)
    return browser.execute_script(MEASURE)


def test_landing_page_opens_with_the_headline_then_the_glossary_and_the_way_in(browser, book):
    """On the first screen the paper's headline numbers beside ours (the generated headline's table); the
    glossary before the first result of the figure and the counts; the reading order within two screens."""
    seen = measure(browser, book, PAGES[0])
    headline = (ROOT / "outputs" / "runs" / "paper" / "headline.md").read_text(encoding="utf-8")
    ours = re.findall(r"\*\*(\d+\.\d+ ± \d+\.\d+%)\*\*", headline)
    assert len(ours) == 2 and all(o in seen["first_table_text"] for o in ours), (ours, seen["first_table_text"])
    assert "2.12%" in seen["first_table_text"] and "1.66%" in seen["first_table_text"], seen["first_table_text"]
    assert seen["first_table"] < seen["screen"] - 100, f"the headline starts at {seen['first_table']:.0f} px"
    assert seen["glossary"] < seen["first_figure"], "the glossary comes after the first result"
    assert seen["reading_order"] < 2 * seen["screen"], f"the reading order starts at {seen['reading_order']:.0f} px"


@pytest.mark.parametrize("page", ANSWER_FIRST)
def test_report_page_opens_with_its_answer_and_hides_its_code(browser, book, page):
    """An "In short" box on the first screen and no code cell shown (hide-input / remove-input tags)."""
    seen = measure(browser, book, page)
    assert seen["in_short"] is not None and seen["in_short"] < seen["screen"] - 100, \
        f"In short box at {seen['in_short']} px, the first screen is {seen['screen']} px"
    assert seen["shown_inputs"] == 0, f"{seen['shown_inputs']} code cells shown"


@pytest.mark.parametrize("page", PAGES)
def test_tables_fit_the_column(browser, book, page):
    """Every table fits its column whole: none needs a sideways scroll to show a column of numbers."""
    seen = measure(browser, book, page)
    assert not seen["wide_tables"], "tables wider than the column:\n  " + "\n  ".join(seen["wide_tables"])


# Every "mean ± spread" of a table cell whose text the browser lays out on more than one line.
WRAPPED_SPREADS = r"""
const article = document.querySelector('article') || document.body;
const found = [];
for (const cell of article.querySelectorAll('td, th')) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const m of node.textContent.matchAll(/[-+−]?\d+(?:\.\d+)?%?\s*±\s*\d+(?:\.\d+)?%?/g)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
      if (lines.size > 1) found.push(`${m[0]} on ${lines.size} lines in "${cell.textContent.trim().slice(0, 40)}"`);
    }
  }
}
return found;
"""


@pytest.mark.parametrize("page", PAGES)
def test_a_number_and_its_spread_stay_on_one_line(browser, book, page):
    """"3.18 ± 0.05" in a narrow table column is never broken across lines (build_book.keep_spreads_whole)."""
    browser.get((book / f"{page}.html").as_uri())
    build_book.wait_for_mathjax(browser)
    wrapped = browser.execute_script(WRAPPED_SPREADS)
    assert not wrapped, f"{len(wrapped)} numbers broken across lines:\n  " + "\n  ".join(wrapped[:8])


def test_spreads_are_joined_in_table_cells_only(tmp_path):
    """The no-break spaces go into table cells, not into prose or code, and a second pass finds nothing to do."""
    page = tmp_path / "page.html"
    page.write_text('<p>3.18 ± 0.05</p><table><tr><td class="x">3.18 ± 0.05 (n = 3)</td><th>+0.30 ± 0.08%</th>'
                    '<td>a ± b</td></tr></table><pre>2.0 ± 1.0</pre>', encoding="utf-8")
    assert build_book.keep_spreads_whole(tmp_path) == 2
    assert page.read_text(encoding="utf-8") == (
        '<p>3.18 ± 0.05</p><table><tr><td class="x">3.18&#160;±&#160;0.05 (n = 3)</td><th>+0.30&#160;±&#160;0.08%</th>'
        '<td>a ± b</td></tr></table><pre>2.0 ± 1.0</pre>')
    assert build_book.keep_spreads_whole(tmp_path) == 0
    nested = tmp_path / "notebooks" / "successors.html"  # every page, in every folder of the book
    nested.parent.mkdir(parents=True)
    nested.write_text("<td>3.18 ± 0.05</td>", encoding="utf-8")
    assert build_book.keep_spreads_whole(tmp_path) == 1
    assert nested.read_text(encoding="utf-8") == "<td>3.18&#160;±&#160;0.05</td>"


# Words that name another page of the book: each such mention on a page I open to report is a link. A file name
# counts only where it is one of ours (the authors' `synthetic_data.ipynb` is not a page of the book).
CROSS_REFERENCE = re.compile(r"\b[Nn]otebooks? \d\d[a-z]?\b|`(?:notebooks/)?([\w./]+\.ipynb)`|`docs/\w+\.md`")
# The pages whose prose is checked: the report pages, the numbered notebooks and the experiment notebook.
LINKED_PAGES = ANSWER_FIRST + tuple(p for p in PAGES if NUMBERED.match(Path(p).name)) + ("notebooks/experiment",)


def unlinked_references(text: str) -> list[str]:
    """The mentions of another page in Markdown `text` that are not inside a Markdown link."""
    prose = re.sub(r"\[[^\]]*\]\([^)]*\)", "LINK", text)
    return [m.group(0) for m in CROSS_REFERENCE.finditer(prose)
            if not m.group(1) or (ROOT / "notebooks" / Path(m.group(1)).name).is_file()]


@pytest.mark.parametrize("page", LINKED_PAGES)
def test_cross_references_are_links(page):
    """"notebook 09", `tables.ipynb`, `docs/maths.md` in a page's prose are Markdown links (which
    test_page_in_browser then follows), not words."""
    text, _ = markdown_and_figures(page)
    assert not unlinked_references(text), unlinked_references(text)


def test_the_notebooks_readme_links_every_notebook_it_names():
    """notebooks/README.md (read on GitHub, not in the book) names each notebook as a link to its file, and every
    link to a notebook reaches one."""
    text = (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8")
    assert not unlinked_references(text), unlinked_references(text)
    targets = re.findall(r"\]\(([\w.]+\.ipynb)(?:#[\w-]*)?\)", text)
    assert len(set(targets)) >= 18 and all((ROOT / "notebooks" / t).is_file() for t in targets), targets


def in_short_box(page: str) -> str:
    """The Markdown a report page's "In short" cell prints (its input is removed from the book)."""
    cells = json.loads(source_of(page).read_text(encoding="utf-8"))["cells"]
    texts = ["".join(o["data"]["text/markdown"]) for c in cells for o in c.get("outputs", [])
             if "text/markdown" in o.get("data", {}) and "In short" in "".join(o["data"]["text/markdown"])]
    assert len(texts) == 1, f"{page}: {len(texts)} In short boxes"
    return texts[0]


@pytest.mark.parametrize("page", ANSWER_FIRST)
def test_in_short_box_is_short_and_plain(page):
    """At most five sentences, about 20 words each on average, none over 40."""
    words = [len(s.split()) for s in prose_sentences(in_short_box(page))]
    assert len(words) <= 5 and sum(words) / len(words) <= 21 and max(words) <= 40, words
