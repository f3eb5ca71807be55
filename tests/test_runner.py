"""The runner (reproduction.runner) executing the experiment notebook through papermill exactly as
scripts/run_tables.py does, on a tiny configuration ([784, 200, 10], a few hundred training images): a runner
killed mid-run resumes bit-identically, finished runs are skipped, failures are reported with their notebook, a
held run trains the held network. Needs the real MNIST files ($EBP_DATA_DIR). The runner's handling of faults
(corrupt checkpoints, full disks, edited results, ...) is tested in tests/test_runner_faults.py.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, TINY, fake_notebook, fake_result

import ebp_data
import ebp_lib
import ebp_train
from reproduction import folder, paper_tables, parameters, results, run_files, runner

# The kill test's run must outlive the ~2 s an orphaned worker and kernel may keep training after the runner is
# killed (each polls its parent once a second); a tiny epoch takes a fraction of a second on an idle machine.
KILL_EPOCHS = 30
RECORD_KEYS = ("epoch", "test_ebp_p", "test_ebp_d", "train_ebp_p", "train_ebp_d")  # all but timings


def tiny_job(runs_dir, **changes):
    row = paper_tables.select_rows(paper_tables.read_paper_tables(), tables=[2], columns=["200"], weights=["binary"])
    return paper_tables.make_jobs(row, paper_tables.Selection({**TINY, **changes}, runs_dir=runs_dir))[0]


@pytest.fixture(scope="module")
def uninterrupted(real_data_dir):
    """The tiny configuration trained in one go, in this process."""
    data = ebp_data.load_dataset("mnist", n_train=TINY["n_train"])
    net = ebp_lib.init_network(parameters.paper_architecture("200"), "binary", seed=0)
    _, history = ebp_train.fit(net, data, KILL_EPOCHS, TINY["batch_size"], seed=0)
    return [{k: r[k] for k in RECORD_KEYS} for r in history]


def _wait_for(condition, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.alone  # its waits are timed: a second xdist worker beside it could stretch them past their limits
def test_killed_runner_resumes_bit_identically_then_skips_and_reports_failures(tmp_path, uninterrupted):
    """Kill the runner (SIGKILL: no clean-up) after epoch 1; its orphaned worker and kernel must stop; the
    next batch resumes from the checkpoint (the history equals an uninterrupted run's bit for bit) next to a
    failing run reported with its notebook; a third batch skips the finished run without executing it."""
    job = tiny_job(tmp_path, epochs=KILL_EPOCHS)
    out = Path(job.output_dir)
    process = subprocess.Popen(
        [sys.executable, "-c", "import json, sys; from reproduction import job, runner; "
         "runner.run_batch([job.Job.of(json.loads(sys.argv[1]))], n_jobs=1, progress_every=1e9)",
         json.dumps(job.to_dict())],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # generous limits: only a hang should fail; a loaded 2-core machine took over 90 s to start the kernel,
        # load the compiled engine and train epoch 1 (the portability run of 2026-11-27, beside two training jobs)
        _wait_for(lambda: (folder.read_result(out) or {}).get("epochs_done", 0) >= 1, 300, "epoch 1")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    _wait_for(lambda: not folder.is_locked(out), 120, "the orphaned kernel to exit and release the run's lock")
    state = folder.job_state(job)
    state, done = state.state, state.epochs
    killed_at = folder.read_result(out)["epochs_done"]
    # fit saves the checkpoint just before result.json is rewritten, so a kill between the two leaves the
    # checkpoint one epoch ahead; the resumed run continues from the checkpoint
    assert state == "partial" and 1 <= done < KILL_EPOCHS and killed_at in (done, done - 1), (state, done, killed_at)

    # a run that fails inside the notebook: its checkpoint was trained by the other engine, which fit refuses
    bad = tiny_job(tmp_path / "bad", epochs=KILL_EPOCHS)
    bad = bad.replace(key="binary-200-bad")
    other_engine = next(e for e in ebp_train.ENGINES if e != ebp_train.DEFAULT_ENGINE)
    net = ebp_lib.init_network(parameters.architecture_layers("200"), "binary", seed=0)
    ebp_train.fit(net, ebp_data.load_dataset("mnist", n_train=TINY["n_train"]), 1, TINY["batch_size"], seed=0,
                checkpoint=Path(bad.output_dir) / folder.CHECKPOINT_FILE, n_train_eval=0, engine=other_engine,
                run_config=bad.config.checkpoint_config())
    failed, outcome = runner.run_batch([bad, job], n_jobs=1, echo=lambda *_: None)
    assert outcome["status"] == "finished", outcome
    result = folder.read_result(out)
    assert [{k: r[k] for k in RECORD_KEYS} for r in result["history"]] == uninterrupted  # bit for bit
    assert [s["from_epoch"] for s in result["sessions"]] == [0, done]  # resumed: finished epochs not redone
    assert result["finished"] and result["protocol"] == "shortened" and result["git_commit"] is not None
    assert not (out / folder.CHECKPOINT_FILE).exists() and (out / folder.CURVE_FILE).exists()
    # the predicted class of every test image, per output, counts the recorded final errors
    labels = ebp_data.load_dataset("mnist", n_train=TINY["n_train"]).labels_test
    predicted = run_files.load_predictions(out / folder.PREDICTIONS_FILE, len(labels))
    assert {k: np.mean(p != labels) for k, p in predicted.items()} == {
        "predictive": result["final"]["test_ebp_p"], "deployed": result["final"]["test_ebp_d"]}

    assert failed["status"] == "failed" and failed["error"].startswith("CheckpointMismatchError"), failed
    assert f"engine: checkpoint {other_engine!r}, this run {ebp_train.DEFAULT_ENGINE!r}" in failed["error"], failed
    assert Path(failed["notebook"]) == Path(bad.output_dir) / "experiment.ipynb"
    assert Path(failed["notebook"]).exists()
    report = runner.summary([bad, job], [failed, outcome])
    assert "FAILED binary-200-bad" in report and failed["notebook"] in report

    stamp = (out / "experiment.ipynb").stat().st_mtime_ns
    [again] = runner.run_batch([job], n_jobs=1, echo=lambda *_: None)
    assert again["status"] == "skipped" and (out / "experiment.ipynb").stat().st_mtime_ns == stamp
    assert folder.job_state(tiny_job(tmp_path, epochs=4)).state == "stale"  # another configuration is rerun


def test_a_held_run_trains_the_held_network(tmp_path, real_data_dir, rows):
    """The runner passes mask_reading to the notebook, which passes it to init_network: a one-epoch held run of
    block 13 on 1,000 images gives exactly the errors of the same held network trained in this process (and not
    those of the absent one), records the reading in its result, and fills Table 4's held variant only."""
    tiny = {"name": "tiny", "epochs": 1, "n_train": 1000, "batch_size": 10}  # fewer: above the 50% check
    [job] = paper_tables.make_jobs(paper_tables.select_rows(rows, run_ids=["binary-block13"]),
                                   paper_tables.Selection(tiny, runs_dir=tmp_path, mask_reading="held"))
    [outcome] = runner.run_batch([job], n_jobs=1, echo=lambda *_: None)
    assert outcome["status"] == "finished", outcome
    result = folder.read_result(job.output_dir)
    assert Path(job.output_dir).name == "binary-block13-held" and result["parameters"]["mask_reading"] == "held"
    data = ebp_data.load_dataset("mnist", n_train=1000)
    expected = {}
    for reading in ("held", "absent"):
        layers = parameters.architecture_layers("block13")
        net = ebp_lib.init_network(layers, "binary", seed=0, mask_reading=reading)
        expected[reading] = ebp_train.fit(net, data, 1, 10, seed=0)[1][-1]
    assert expected["held"]["test_ebp_p"] != expected["absent"]["test_ebp_p"]
    assert result["final"] == {k: expected["held"][k] for k in result["final"]}
    loaded = results.load_results(tmp_path)
    assert results.table_cells(rows, loaded, "tiny", mask_reading="absent") == {}
    held = results.table_cells(rows, loaded, "tiny", mask_reading="held")
    assert sorted(held) == [(4, "B-EBP-D", "256"), (4, "B-EBP-P", "256")]


def test_a_run_finished_by_another_runner_meanwhile_is_not_retrained(tmp_path):
    """Two runners with overlapping selections: when the second reaches a run the first has finished since
    the batch was planned, it skips it instead of training it again over the finished result."""
    job = tiny_job(tmp_path)
    out = Path(job.output_dir)
    out.mkdir(parents=True)
    result = fake_result(job.config.parameters(), TINY["epochs"], TINY["n_train"], "tiny", 0.1)
    result["parameters"] = job.config.parameters()
    (out / "result.json").write_text(json.dumps(result))
    (out / "experiment.ipynb").write_text(json.dumps(fake_notebook(result)))  # its evidence
    evidence = (out / "experiment.ipynb").read_bytes()
    outcome = runner.run_job(job)
    assert outcome["status"] == "skipped"
    assert (out / "experiment.ipynb").read_bytes() == evidence  # the notebook was not executed
    assert json.loads((out / "result.json").read_text()) == result



