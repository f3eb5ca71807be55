"""Words per sentence in the Markdown prose of the numbered notebooks.

    python scripts/sentence_lengths.py [notebook ...]      (default: notebooks/[0-9][0-9]*_*.ipynb)

Counting rules: a maths span ($...$ or $$...$$), a code span (`...`) and a link's text each count as one word;
fenced code blocks, table rows, headings and HTML tags are not prose and are dropped; a list item is prose (it
ends a sentence where it ends). A sentence ends at '.', '?' or '!' followed by a space and a capital, a digit
or a maths span, at a blank line, and at the end of a list item; common abbreviations (e.g., i.e., vs., cf.) do
not end one. Prints each notebook's mean words per sentence and the series' mean over all sentences.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "cf.", "et al.", "Eq.", "eq.", "Fig.", "No.", "approx.")


def prose(markdown: str) -> list[str]:
    """The prose blocks of one Markdown cell (paragraphs and list items), spans replaced by one token each."""
    text = re.sub(r"```.*?```", "\n\n", markdown, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " MATH ", text, flags=re.S)
    text = re.sub(r"\$[^$]+\$", " MATH ", text)
    text = re.sub(r"`[^`]+`", " CODE ", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", " LINK ", text)
    text = re.sub(r"<[^>]+>", " ", text)
    for abbreviation in ABBREVIATIONS:
        text = text.replace(abbreviation, abbreviation.replace(".", ""))
    blocks, current = [], []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("|"):
            blocks.append(" ".join(current))
            current = []
        elif re.match(r"^([-*+]|\d+\.)\s", stripped):
            blocks.append(" ".join(current))
            current = [re.sub(r"^([-*+]|\d+\.)\s+", "", stripped)]
        else:
            current.append(stripped)
    blocks.append(" ".join(current))
    return [b for b in blocks if b.strip()]


def sentences(block: str) -> list[int]:
    """Word counts of the sentences of one prose block."""
    parts = re.split(r"(?<=[.?!])\s+(?=[A-Z0-9(]|MATH|CODE|LINK)", block)
    counts = [len(re.findall(r"[\w'’\-−±√]+", p)) for p in parts]
    return [c for c in counts if c > 0]


def notebook_counts(path: Path) -> list[int]:
    cells = json.loads(path.read_text())["cells"]
    return [n for c in cells if c["cell_type"] == "markdown"
            for block in prose("".join(c["source"])) for n in sentences(block)]


def main(paths: list[str]) -> None:
    files = [Path(p) for p in paths] or sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    every = []
    for path in files:
        counts = notebook_counts(path)
        every += counts
        print(f"{path.name:38s} {len(counts):5d} sentences {sum(counts) / len(counts):5.1f} words each")
    print(f"{'series':38s} {len(every):5d} sentences {sum(every) / len(every):5.1f} words each")


if __name__ == "__main__":
    main(sys.argv[1:])
