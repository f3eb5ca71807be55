"""Every numbered notebook has the shape the series promises a reader: one `parameters` cell (papermill can
parametrise it), at least one figure in its committed outputs, a summary, and exercises each with its own
revealable solution."""
import json
import re
from pathlib import Path

import pytest

# 00_ ... 10_, and a lettered notebook between two numbers (03b_ comes after 03_ and before 04_)
NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


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
