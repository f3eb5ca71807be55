"""Build the notebooks and docs/maths.md as a static HTML book (Jupyter Book 1.x), offline.

    python scripts/build_book.py [--out DIR]      (`make book`; DIR defaults to .cache/book)
    python scripts/build_book.py --screenshot PAGE PNG
        then a screenshot of one page in headless Chromium, scrolled to PAGE's #anchor if it has one
        (outputs/book_screenshot.png is notebooks/04_binary_weights.html#how-the-posterior-sharpens)

The book's configuration and reading order are book/_config.yml and book/_toc.yml; the source folder is the
repository root, so every page is read where it lives. Notebooks are rendered from their committed outputs and
never executed. Sphinx warnings are errors (a broken cross-reference or a missing image fails the build). After
the build, every page is checked for a script, stylesheet, image or frame loaded from the web: the book must
open with no network, MathJax included (it is served from the book's own _static/mathjax).
Prints the path of the book's landing page, _build/html/book/index.html (Jupyter Book writes _build/html/index.html
as a redirect to it, which some browsers do not follow from a file).

The browser helpers (open_chromium, wait_for_mathjax) are shared with tests/test_book.py. They run the system's
Chromium through its ChromeDriver (Debian: apt-get install chromium chromium-driver) and never download a
browser; Chromium is started with no background networking, so opening the book sends nothing off the machine.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import nbformat

from reproduction.records import read_json

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
DEFAULT_OUT = ROOT / ".cache" / "book"

# An address that leaves the machine: a scheme other than file (http:, https:, ftp:, ...) or protocol-relative.
_REMOTE = re.compile(r"^\s*(//|[a-z][a-z0-9+.-]*:)", re.IGNORECASE)
_LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")


def jupyter_book_command() -> list[str]:
    """The jupyter-book console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("jupyter-book")
    if not script.exists():
        raise SystemExit(f"{script} not found: install the pinned requirements (pip install -r requirements.txt)")
    return [str(script)]


def toc_files(toc: Path) -> list[str]:
    """The documents book/_toc.yml lists (root first), as paths relative to the source folder, without suffix."""
    import yaml

    entries = yaml.safe_load(toc.read_text(encoding="utf-8"))
    files, stack = [entries["root"]], list(entries.get("chapters", []))
    for part in entries.get("parts", []):
        stack += part.get("chapters", [])
    while stack:
        entry = stack.pop(0)
        files += [entry["file"]] if "file" in entry else []
        stack[:0] = entry.get("sections", [])
    return files


def check_notebooks(root: Path | None = None, toc: Path | None = None) -> None:
    """RuntimeError naming every notebook of the book that is not a readable notebook (truncated, not JSON, no
    cells), and how to restore it, before Jupyter Book stops on it with a traceback that does not name it."""
    root, toc = root or ROOT, toc or BOOK / "_toc.yml"
    problems = []
    for name in toc_files(toc):
        path = root / f"{name}.ipynb"
        if not path.is_file():
            continue
        try:  # bounded read (a huge file is refused by its size), then nbformat's own schema
            notebook = read_json(path)
            if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
                raise ValueError("it has no list of cells")
            nbformat.validate(nbformat.from_dict(notebook))
        except (ValueError, RecursionError, nbformat.ValidationError) as error:
            problems.append(f"{path}: not a readable notebook ({type(error).__name__}: {str(error)[:200]}); "
                            f"restore it (git checkout -- {name}.ipynb) or execute it again")
    if problems:
        raise RuntimeError("the book cannot be built:\n  " + "\n  ".join(problems))


def build(out: Path = DEFAULT_OUT) -> Path:
    """Build the book under `out` (out/_build/html) and return the html folder; raise on a failed build (first
    for a notebook that cannot be read, check_notebooks)."""
    check_notebooks()
    out = Path(out).resolve()
    command = jupyter_book_command() + [
        "build", "-W", "--keep-going",
        "--config", str(BOOK / "_config.yml"), "--toc", str(BOOK / "_toc.yml"),
        "--path-output", str(out), str(ROOT),
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"jupyter-book build failed (exit {result.returncode}):\n"
                           f"{result.stdout[-6000:]}\n{result.stderr[-6000:]}")
    html = out / "_build" / "html"
    if not (html / "index.html").is_file():
        raise RuntimeError(f"jupyter-book reported success but wrote no {html / 'index.html'}")
    keep_spreads_whole(html)
    return html


# A number with its spread in a table cell ("3.18 ± 0.05", "+0.30 ± 0.08%"): the spaces around ± become no-break
# spaces, so that a narrow column breaks a cell between its numbers, never inside one (tests/test_book.py measures
# it in Chromium). Only table cells: code and prose keep their plain spaces (a copied code line stays ASCII-spaced).
SPREAD = re.compile(r"(?<=[\d%]) ± (?=\d)")
TABLE_CELL = re.compile(r"(<t[dh]\b[^>]*>)(.*?)(</t[dh]>)", re.S)
NO_BREAK_SPREAD = "&#160;±&#160;"


def keep_spreads_whole(html_dir: Path) -> int:
    """Join every "mean ± spread" of every page's table cells with no-break spaces (SPREAD), in place; the number
    of spreads joined."""
    joined = 0
    for page in sorted(Path(html_dir).rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        new = TABLE_CELL.sub(lambda cell: cell.group(1) + SPREAD.sub(NO_BREAK_SPREAD, cell.group(2)) + cell.group(3),
                             text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            joined += sum(len(SPREAD.findall(cell.group(2))) for cell in TABLE_CELL.finditer(text))
    return joined


def landing_page(html: Path) -> Path:
    """The book's root page (book/_toc.yml's root), the page to open: not the redirect index.html."""
    return Path(html) / f"{toc_files(BOOK / '_toc.yml')[0]}.html"


class _Assets(HTMLParser):
    """Collects the addresses a page loads by itself: scripts, stylesheets and preloads, images, frames, media."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "link" and set(a.get("rel", "").lower().split()) & {
                "stylesheet", "preload", "modulepreload", "icon", "shortcut", "prefetch", "manifest"}:
            self.loaded.append((tag, a.get("href", "")))
        elif tag in ("script", "img", "iframe", "source", "audio", "video", "embed") and "src" in a:
            self.loaded.append((tag, a["src"]))
        elif tag == "object" and "data" in a:
            self.loaded.append((tag, a["data"]))


def remote_assets(html_dir: Path) -> list[str]:
    """'page: <tag> address' for every asset that a page of the book would fetch from the web."""
    found = []
    for page in sorted(Path(html_dir).rglob("*.html")):
        parser = _Assets()
        parser.feed(page.read_text(encoding="utf-8"))
        for tag, address in parser.loaded:
            if _REMOTE.match(address) and not address.strip().lower().startswith(_LOCAL_SCHEMES):
                found.append(f"{page.relative_to(html_dir)}: <{tag}> {address}")
    return found


INSTALL_BROWSER = ("install Debian's Chromium and its driver: apt-get install chromium chromium-driver "
                   "(or set EBP_CHROMIUM and EBP_CHROMEDRIVER to a Chromium and a matching ChromeDriver)")


class BrowserMissing(RuntimeError):
    """No Chromium or no ChromeDriver on this machine."""


def chromium_paths() -> tuple[str, str]:
    """(chromium, chromedriver): $EBP_CHROMIUM / $EBP_CHROMEDRIVER, else the first found on PATH."""
    browser = os.environ.get("EBP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("EBP_CHROMEDRIVER") or shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", browser), ("chromedriver", driver))
               if not path or not Path(path).is_file()]
    if missing:
        raise BrowserMissing(f"no {' and no '.join(missing)} found: {INSTALL_BROWSER}")
    return browser, driver


def open_chromium(profile_dir: Path, width: int = 1280, height: int = 900):
    """A headless Chromium with a fresh profile in the empty folder profile_dir, driven by selenium through the
    system ChromeDriver (Selenium Manager never runs: the driver's path is given). Its console is recorded
    (driver.get_log("browser")). The caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", "--no-first-run", "--hide-scrollbars", f"--window-size={width},{height}",
                 f"--user-data-dir={profile_dir}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    session = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    session.set_script_timeout(120)
    session.set_page_load_timeout(120)
    return session


def wait_for_mathjax(session) -> None:
    """Wait until MathJax has typeset the loaded page; raise if the page has no MathJax."""
    # MathJax's script is deferred: on a loaded machine it may not have run yet when the page reports loaded.
    error = session.execute_async_script(
        "const done = arguments[arguments.length - 1], start = Date.now();"
        "(function wait() {"
        "  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {"
        "    window.MathJax.startup.promise.then(() => done(null), (e) => done('MathJax failed: ' + e)); return; }"
        "  if (Date.now() - start > 30000) { done('MathJax is not loaded on this page (waited 30 s)'); return; }"
        "  setTimeout(wait, 100); })();")
    if error:
        raise RuntimeError(f"{session.current_url}: {error}")


def screenshot(html_dir: Path, page: str, png: Path) -> Path:
    """Open `page` (a path under html_dir, optionally with #anchor, scrolled to it) and save a PNG of the window."""
    path, _, anchor = page.partition("#")
    target = Path(html_dir).resolve() / path
    if not target.is_file():
        raise FileNotFoundError(target)
    with tempfile.TemporaryDirectory(prefix="ebp-chromium-") as profile:
        _screenshot(open_chromium(Path(profile), width=1400, height=1100), target, anchor, Path(png))
    # A 256-colour palette keeps a page of text and plots sharp at a third of the size of the full-colour PNG.
    from PIL import Image

    with Image.open(png) as image:
        image.convert("RGB").quantize(colors=256).save(png, optimize=True)
    return Path(png)


def _screenshot(session, target: Path, anchor: str, png: Path) -> None:
    try:
        # Scrolled by script once MathJax has typeset (typesetting moves the text), and loaded without the
        # fragment, which the theme would highlight as the link's target.
        session.get(target.as_uri())
        wait_for_mathjax(session)
        if anchor and not session.execute_script(
                "const e = document.getElementById(arguments[0]); if (e) e.scrollIntoView(); return !!e;", anchor):
            raise ValueError(f"{target} has no element with id {anchor!r}")
        png.parent.mkdir(parents=True, exist_ok=True)
        session.save_screenshot(str(png))
    finally:
        session.quit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="build folder (default: .cache/book)")
    parser.add_argument("--screenshot", nargs=2, metavar=("PAGE", "PNG"),
                        help="after the build, save a screenshot of PAGE (relative to the html folder) as PNG")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        html = build(args.out)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    remote = remote_assets(html)
    if remote:
        print("the book loads assets from the web (it must open offline):\n  " + "\n  ".join(remote),
              file=sys.stderr)
        return 1
    print(f"book built in {time.perf_counter() - start:.0f} s; open its landing page {landing_page(html)}")
    if args.screenshot:
        page, png = args.screenshot
        try:
            print(f"screenshot: {screenshot(html, page, Path(png))}")
        except BrowserMissing as error:
            print(error, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
