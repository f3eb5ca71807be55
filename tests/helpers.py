"""Fakes shared by the tests of the reproduction package: result.json files as the experiment notebook writes
them, table rows by cell, and the scripts of scripts/ imported from their files. Not a test module."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from reproduction import folder, parameters, records

ROOT = Path(__file__).resolve().parents[1]
TINY = {"name": "tiny", "epochs": 3, "n_train": 300, "batch_size": 10}  # a profile of a few seconds per run


def load_script(name):
    """A module of scripts/ (command-line entry points), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_result(row_or_params, epochs_done, n, profile, final, epochs=None, seed=0, curve=None, **params):
    """A result.json as EpochRecorder writes it (a complete, consistent run record); the test error after every
    epoch is `final` (both outputs), or `curve` (one value per epoch done) when given. `profile` is not part of a
    record: load_results adds it, and write_result takes the folder from it."""
    params = parameters.validate_parameters({"architecture": row_or_params["architecture"],
                                     "weights": row_or_params["weights"], "epochs": epochs or epochs_done,
                                     "n_train": n, "seed": seed, **params})
    curve = curve or [final] * epochs_done
    history = [{"epoch": e + 1, "test_ebp_p": v, "test_ebp_d": v, "train_ebp_p": v / 2, "train_ebp_d": v / 2,
                "train_seconds": 1.0} for e, v in enumerate(curve)]
    n_images = n or 60000
    return {"format": records.RECORD_FORMAT, "method": "ebp", "parameters": params,
            "protocol": parameters.protocol_relative_to_paper(params), "finished": epochs is None,
            "epochs_done": epochs_done, "n_train_images": n_images, "train_error_images": min(n_images, 10000),
            "final": {k: history[-1][k] for k in records.HISTORY_ERRORS["ebp"]} if history else None,
            "history": history, "train_seconds": float(epochs_done), "wall_seconds": 2.0 * epochs_done,
            "engine": "fast", "versions": {}, "git_commit": None, "git_dirty": None, "sessions": [],
            "profile": profile}


def cell_row(rows, table, label, column):
    return next(r for r in rows if (r["table"], r["row"], r["column"]) == (table, label, column))


def fake_notebook(result: dict) -> dict:
    """An executed experiment notebook (nbformat JSON) printing what the notebook prints of a finished run
    `result`: its table of errors after every epoch and its final line, with papermill's parameters."""
    rows = ["epoch  test EBP-P  test EBP-D  train EBP-P  train EBP-D"]
    rows += [f"{r['epoch']:>5} " + " ".join(folder.percent(r[k]) for k in records.HISTORY_ERRORS["ebp"])
             for r in result["history"]]
    final = result["final"]
    line = (f"final test error after {result['epochs_done']} epochs on {result['n_train_images']:,} images: "
            f"EBP-P {folder.percent(final['test_ebp_p'])}%, EBP-D {folder.percent(final['test_ebp_d'])}% "
            f"(protocol: {result['protocol']}, finished: {result['finished']})")
    return {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout",
                                                         "text": "\n".join(rows + [line]) + "\n"}]}],
            "metadata": {"papermill": {"parameters": {**result["parameters"]}}}, "nbformat": 4}


def write_result(runs_dir, key, result, notebook=True):
    """Write `result` (less its `profile`) as outputs/runs/<its profile>/<key>/result.json under runs_dir, and for
    a finished EBP run (unless not `notebook`) the executed notebook that vouches for it (fake_notebook)."""
    path = Path(runs_dir) / result["profile"] / key / folder.RESULT_FILE
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({k: v for k, v in result.items() if k != "profile"}))
    if notebook and result.get("method") == "ebp" and result.get("finished"):
        path.with_name(folder.EXECUTED_FILE).write_text(json.dumps(fake_notebook(result)))
