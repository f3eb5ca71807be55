"""scripts/time_notebooks.py: each notebook runs under the suite's strict nbval with a cold numba cache; a failing
notebook is recorded as failed and makes the exit status 1; a missing path is refused before anything runs."""
import json

import nbformat
import pytest
from helpers import load_script


def _notebook(path, printed: str):
    """A one-cell notebook whose stored output of print(1 + 1) is `printed`."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(1 + 1)", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    nb.cells = [cell]
    nbformat.write(nb, path)
    return path


def test_a_passing_and_a_failing_notebook_are_timed_and_recorded(tmp_path):
    script = load_script("time_notebooks")
    good, bad = _notebook(tmp_path / "good.ipynb", "2\n"), _notebook(tmp_path / "bad.ipynb", "3\n")
    out = tmp_path / "times.json"
    assert script.main([str(good), str(bad), "--out", str(out), "--allow-loaded"]) == 1
    record = json.loads(out.read_text())
    assert record["notebooks"]["good.ipynb"]["passed"] is True
    assert record["notebooks"]["bad.ipynb"]["passed"] is False and "output_tail" in record["notebooks"]["bad.ipynb"]
    assert all(e["seconds"] > 0 for e in record["notebooks"].values())
    assert record["load_average_at_start"] is not None and "cpu_model" in record


def test_a_missing_notebook_is_refused_before_any_run(tmp_path, capsys):
    with pytest.raises(SystemExit):
        load_script("time_notebooks").main([str(tmp_path / "nope.ipynb"), "--out", str(tmp_path / "t.json")])
    assert "no such notebook" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
