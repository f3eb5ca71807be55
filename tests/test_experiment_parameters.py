"""The experiment notebook's own validation cells, run the way papermill runs them: its cells in one namespace, with
`-p name value` injected as a cell right after the tagged `parameters` cell. A parameter that takes one of the
notebook's own names (`-p parameters 1`, `-p bound_before 1`, `-p json 1`) stops the notebook with a ParameterError
naming it and saying how to fix it, never with an AttributeError or TypeError from the notebook's code."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from reproduction import parameters


def validation_cells() -> tuple[list[str], list[str]]:
    """The code cells' sources up to the parameters cell, then from there to the validation cell (RunConfig.of)."""
    cells = json.loads(parameters.NOTEBOOK.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    tagged = next(i for i, c in enumerate(code) if "parameters" in c["metadata"].get("tags", []))
    checked = next(i for i, c in enumerate(code) if "RunConfig.of" in "".join(c["source"]))
    sources = ["".join(c["source"]) for c in code]
    return sources[:tagged + 1], sources[tagged + 1:checked + 1]


def run_validation(injected: str) -> dict:
    """The notebook's namespace after its validation cell, with `injected` run as papermill's parameters cell."""
    before, after = validation_cells()
    namespace: dict = {}
    for source in [*before, injected, *after]:
        exec(compile(source, "experiment.ipynb", "exec"), namespace)
    return namespace


def test_the_defaults_and_a_known_parameter_pass():
    assert run_validation("")["config"] == parameters.RunConfig()
    assert run_validation("epochs = 3\nengine = 'reference'\n")["config"].epochs == 3


@pytest.mark.parametrize("injected, message", [
    ("parameters = 1", "parameters: unknown parameter; correct its name or leave it out (known: dataset,"),
    ("json = 1", "json: unknown parameter; correct its name or leave it out"),
    ("epoch = 3", "epoch: unknown parameter; correct its name or leave it out"),
    ("bound_before = 1", "bound_before=1: the notebook's own name (what was bound before its parameters cell), "
                         "not a parameter: leave it out"),
])
def test_a_parameter_named_like_the_notebooks_own_names_is_refused_by_name(injected, message):
    with pytest.raises(parameters.ParameterError) as info:
        run_validation(injected)
    assert message in str(info.value), str(info.value)


def test_papermill_over_a_finished_runs_notebook_says_how_to_restore_it(tmp_path):
    """`papermill experiment.ipynb <run>/experiment.ipynb -p output_dir <run> ...` on a finished run: papermill
    writes its output notebook before any cell runs (so no cell can refuse before the run's notebook is replaced);
    the folder cell then refuses to train, its message names the restore command, and result.json is untouched."""
    run = tmp_path / "binary-200"
    shutil.copytree(parameters.REPO / "outputs" / "runs" / "quick" / "binary-200", run)
    record = (run / "result.json").read_bytes()
    done = subprocess.run([sys.executable, "-m", "papermill", str(parameters.NOTEBOOK), str(run / "experiment.ipynb"),
                           "-p", "output_dir", str(run), "-p", "epochs", "1", "--cwd", str(parameters.NOTEBOOK.parent)],
                          capture_output=True, text=True, cwd=parameters.REPO)
    assert done.returncode != 0 and "FinishedRunError" in done.stderr, done.stderr[-2000:]
    errors = [o for c in json.loads((run / "experiment.ipynb").read_text())["cells"] for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    message = errors[0]["evalue"]
    assert "it has just replaced the finished run's notebook" in message, message
    assert f"git restore --source=HEAD -- {run / 'experiment.ipynb'}" in message, message
    assert (run / "result.json").read_bytes() == record
