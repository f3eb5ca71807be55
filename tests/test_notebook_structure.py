"""Every numbered notebook has the shape the series promises a reader: one `parameters` cell (papermill can
parametrise it), at least one figure in its committed outputs, a summary, and exercises each with its own
revealable solution."""
import importlib.util
import json
import re
from pathlib import Path

import pytest

# 00_ ... 10_, and a lettered notebook between two numbers (03b_ comes after 03_ and before 04_)
ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def _cells(path):
    return json.loads(path.read_text())["cells"]


def _exercises_and_solutions(cells) -> tuple[int, int]:
    """Numbered items (lines `N. ` outside <details> blocks) and <details> blocks in the markdown after `## Exercises`."""
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    after = text.split("\n## Exercises", 1)[1]
    outside = re.sub(r"<details>.*?</details>", "", after, flags=re.S)
    return len(re.findall(r"^\d+\. ", outside, flags=re.M)), after.count("<details>")


def test_the_series_is_numbered_without_gaps():
    numbers = sorted({int(p.name[:2]) for p in NOTEBOOKS})
    assert numbers == list(range(len(numbers))) and len(numbers) >= 10


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_numbered_notebook_has_parameters_a_figure_a_summary_and_a_solution_per_exercise(path):
    cells = _cells(path)
    assert all("id" in c for c in cells), "a cell without an id (nbformat 4.5 requires one; nbformat.validator.normalize)"
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1 and tagged[0]["cell_type"] == "code", "exactly one code cell tagged `parameters`"
    assert any("image/png" in o.get("data", {}) for c in cells if c["cell_type"] == "code" for o in c["outputs"]), \
        "no figure among the committed outputs"
    headers = [line for c in cells if c["cell_type"] == "markdown" for line in "".join(c["source"]).splitlines()
               if line.startswith("## ")]
    assert "## Summary" in headers and "## Exercises" in headers
    exercises, solutions = _exercises_and_solutions(cells)
    assert exercises >= 1 and solutions == exercises, (exercises, solutions)


def _sentence_counts():
    spec = importlib.util.spec_from_file_location("sentence_lengths", ROOT / "scripts" / "sentence_lengths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {path.stem: module.notebook_counts(path) for path in NOTEBOOKS}


def test_the_prose_keeps_short_sentences():
    # scripts/sentence_lengths.py's rules: maths and code spans one word each, list items prose, tables dropped
    counts = _sentence_counts()
    means = {name: sum(c) / len(c) for name, c in counts.items()}
    every = [n for c in counts.values() for n in c]
    assert sum(every) / len(every) <= 22, f"series: {sum(every) / len(every):.1f} words a sentence (at most 22)"
    long = {name: round(m, 1) for name, m in means.items() if m > 25}
    assert not long, f"notebooks averaging over 25 words a sentence: {long}"
