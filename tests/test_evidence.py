"""Nothing published without its evidence, nothing a file can do stops the batch: what a hostile or careless user
can do to a finished run folder (delete or replace its executed notebook, forge its numbers, nest JSON 100,000
deep, write a newer format) is named, loses nothing, publishes no number, and leaves the other runs alone."""
from __future__ import annotations

import json

import pytest
from helpers import cell_row, fake_notebook, fake_result, write_result

from reproduction import folder, parameters, records, runner
from reproduction.folder import EXECUTED_FILE, RESULT_FILE, VERIFICATION_FILE, job_state, sha256
from reproduction.paper_tables import read_paper_tables
from reproduction.results import load_results, render_table, table_cells


@pytest.fixture(scope="module")
def rows():
    return read_paper_tables()


def _job(run_dir, result):
    from reproduction.job import Job

    config = parameters.RunConfig.of({**result["parameters"], "output_dir": str(run_dir)})
    return Job(run_dir.name, "paper", config, notebook="experiment.ipynb")


def _finished(tmp_path, rows, key="binary-200", seed=0, error=0.0346):
    result = fake_result(cell_row(rows, 2, "B-EBP-P", "200"), 120, None, "paper", error, seed=seed)
    write_result(tmp_path, key, result)
    return tmp_path / "paper" / key, {k: v for k, v in result.items() if k != "profile"}


def _forge(run_dir, error=0.0188):
    """Set the last epoch's and the final EBP-P error of a record to `error`: a consistent, forged record."""
    record = json.loads((run_dir / RESULT_FILE).read_text())
    record["history"][-1]["test_ebp_p"] = record["final"]["test_ebp_p"] = error
    (run_dir / RESULT_FILE).write_text(json.dumps(record))
    return record


def test_a_forged_record_without_its_notebook_is_unverified_never_a_number(tmp_path, rows):
    """Delete the executed notebook, forge the final error: the tables say 'unverified', the runner leaves the run
    alone and says how to restore or re-verify it; a copied folder with another seed adds no seed."""
    run_dir, _ = _finished(tmp_path, rows)
    (run_dir / EXECUTED_FILE).unlink()
    record = _forge(run_dir)
    seed1 = tmp_path / "paper" / "binary-200-seed1"
    seed1.mkdir()
    (seed1 / RESULT_FILE).write_text(json.dumps({**record, "parameters": {**record["parameters"], "seed": 1}}))
    loaded = load_results(tmp_path)
    assert not list(loaded)
    assert loaded.rejected["paper/binary-200"][0] == "unverified"
    assert loaded.rejected["paper/binary-200-seed1"][0] == "unverified"
    table = render_table(2, rows, table_cells(rows, loaded, "paper"), "paper")
    assert "1.88" not in table and "3.46 / unverified result.json · unverified result.json (seed 1)" in table
    state = job_state(_job(run_dir, record))
    assert state.state == "unverified" and state.files == [run_dir / RESULT_FILE]
    assert "git restore --source=HEAD" in state.problems[0] and "python -m reproduction.verify" in state.problems[0]
    outcomes, todo = runner.plan_batch([_job(run_dir, record)], echo=lambda *_: None)
    assert not todo and outcomes[run_dir.name]["status"] == "unverified"
    assert runner.exit_status(list(outcomes.values())) == 1


def _verification(run_dir, verdict="exact", epochs=None):
    """A verification record of the result.json in `run_dir` as reproduction.verify writes it: its first `epochs`
    (default all) replayed exactly, by the commit its record names."""
    record = json.loads((run_dir / RESULT_FILE).read_text())
    k = epochs or record["epochs_done"]
    keys = records.HISTORY_ERRORS["ebp"]
    history = [{"epoch": e["epoch"], "recorded": {key: e[key] for key in keys},
                "replayed": {key: e[key] for key in keys}, "largest_difference": 0.0} for e in record["history"][:k]]
    return {"format": 1, "kind": "replay", "verdict": verdict, "commit": record["git_commit"], "epochs": k,
            "tolerance": folder.REPLAY_TOLERANCE, "history": history,
            "result_sha256": sha256((run_dir / RESULT_FILE).read_bytes())}


def test_a_replay_vouches_for_exactly_the_record_it_replayed(tmp_path, rows):
    """A verification record of this very result.json, replaying every epoch it reports, stands in for a missing
    notebook (and the record is marked replayed); after an edit of result.json, with a disagreeing replay, a replay
    of fewer epochs than the record reports, or a two-field verification, it vouches for nothing."""
    run_dir, record = _finished(tmp_path, rows)
    (run_dir / EXECUTED_FILE).unlink()
    records.write_json(run_dir / VERIFICATION_FILE, _verification(run_dir))
    loaded = load_results(tmp_path)
    assert loaded[0]["replayed"] and job_state(_job(run_dir, record)).state == "finished"
    table = render_table(2, rows, table_cells(rows, loaded, "paper"), "paper")
    assert "| 200 | 3.46 / 3.46 (+0.00) ⟲; last 10: 3.46 |" in table and "⟲: a run of the cell was replayed" in table
    records.write_json(run_dir / VERIFICATION_FILE, _verification(run_dir, "disagrees"))
    assert load_results(tmp_path).rejected["paper/binary-200"][0] == "unverified"
    records.write_json(run_dir / VERIFICATION_FILE, {k: v for k, v in _verification(run_dir).items()
                                                     if k in ("result_sha256", "verdict")})
    assert load_results(tmp_path).rejected["paper/binary-200"][0] == "unverified"
    records.write_json(run_dir / VERIFICATION_FILE, _verification(run_dir, epochs=1))
    kind, why = load_results(tmp_path).rejected["paper/binary-200"]
    assert kind == "unverified" and "vouches for epochs 1-1 only, not for the 120" in why
    records.write_json(run_dir / VERIFICATION_FILE, _verification(run_dir))
    _forge(run_dir)
    kind, why = load_results(tmp_path).rejected["paper/binary-200"]
    assert kind == "unverified"
    assert job_state(_job(run_dir, record)).state == "unverified"


def test_a_notebook_replaced_after_the_run_is_named_as_replaced_with_how_to_restore(tmp_path, rows):
    """What a refused `papermill experiment.ipynb <finished run>/experiment.ipynb -p epochs 1` leaves: the
    notebook of another (unfinished) run over the finished one's. The record's notebook_sha256 names it as
    replaced; the run is inconsistent (not published, not retrained) and the message says how to restore it."""
    run_dir, record = _finished(tmp_path, rows)
    record["notebook_sha256"] = sha256((run_dir / EXECUTED_FILE).read_bytes())
    records.write_record(run_dir / RESULT_FILE, record)
    assert job_state(_job(run_dir, record)).state == "finished"
    other = fake_notebook(fake_result(record["parameters"], 1, None, "paper", 0.2))
    other["cells"][0]["outputs"] = []  # refused in its first cells: it printed no table and no final line
    (run_dir / EXECUTED_FILE).write_text(json.dumps(other))
    state = job_state(_job(run_dir, record))
    assert state.state == "inconsistent" and "replaced after the run finished" in state.problems[0]
    assert f"git restore --source=HEAD -- {run_dir / EXECUTED_FILE}" in state.problems[0]
    assert load_results(tmp_path).rejected["paper/binary-200"][0] == "inconsistent"


def test_the_runner_records_the_digest_of_a_finished_runs_notebook(tmp_path, rows):
    run_dir, record = _finished(tmp_path, rows)
    written = runner.record_notebook_digest(run_dir)
    assert written["notebook_sha256"] == sha256((run_dir / EXECUTED_FILE).read_bytes())
    assert records.read_record(run_dir / RESULT_FILE) == written


DEEP = b"[" * 100_000


@pytest.mark.parametrize("victim", [RESULT_FILE, EXECUTED_FILE])
def test_one_deeply_nested_file_is_named_and_stops_nothing(tmp_path, rows, victim):
    """A result.json or executed notebook of '[' x 100,000: named, its run not published; the other runs load,
    plan and list as before."""
    run_dir, record = _finished(tmp_path, rows)
    good_dir, good = _finished(tmp_path, rows, "binary-200-seed1", seed=1)
    (run_dir / victim).write_bytes(DEEP)
    loaded = load_results(tmp_path)
    assert [r["run_dir"] for r in loaded] == ["paper/binary-200-seed1"]
    kind, why = loaded.rejected["paper/binary-200"]
    assert "nested 100000 levels deep" in why and (str(run_dir / victim) in why or victim in why)
    state = job_state(_job(run_dir, record))
    assert state.state in ("corrupt", "inconsistent") and "nested 100000 levels deep" in " ".join(state.problems)
    outcomes, todo = runner.plan_batch([_job(run_dir, record), _job(good_dir, good)], echo=lambda *_: None)
    assert outcomes["binary-200-seed1"]["status"] == "skipped"


def test_checkpoint_metadata_nested_deep_is_a_checkpoint_error_naming_the_file(tmp_path):
    import numpy as np

    import ebp_checkpoint

    path = tmp_path / "checkpoint.npz"
    np.savez(path, meta=np.array("[" * 100_000), h0=np.zeros(2))
    with pytest.raises(ebp_checkpoint.CheckpointError, match=f"{path}.*nested 100000 levels deep"):
        ebp_checkpoint.read_network_meta(path)


def test_a_record_of_a_newer_format_is_refused_and_left_alone(tmp_path, rows):
    """A format newer than this code's: the run is 'newer' (not corrupt): nothing moved aside, nothing retrained,
    the tables name it."""
    run_dir, record = _finished(tmp_path, rows)
    newer = {**record, "format": records.RECORD_FORMAT + 1}
    (run_dir / RESULT_FILE).write_text(json.dumps(newer))
    before = sorted(p.name for p in run_dir.iterdir())
    state = job_state(_job(run_dir, record))
    assert state.state == "newer" and "written by a newer version of the project" in state.problems[0]
    assert runner.prepare_locked(_job(run_dir, record))["status"] == "newer"
    assert sorted(p.name for p in run_dir.iterdir()) == before
    assert load_results(tmp_path).rejected["paper/binary-200"][0] == "newer-format"


def test_the_upgrader_checks_every_file_before_writing_any_and_names_each_bad_one(tmp_path, rows):
    run_dir, record = _finished(tmp_path, rows)
    old = tmp_path / "ok.json"
    old.write_text(json.dumps({**record, "format": 2, "parameters": {k: v for k, v in record["parameters"].items()
                                                                      if k != "update"}}))
    bad = {"text.json": b"not json", "list.json": b"[1, 2]", "deep.json": DEEP, "latin1.json": b'{"a": "\xe9"}'}
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
    before = old.read_bytes()
    paths = [old, *(tmp_path / name for name in bad)]
    with pytest.raises(records.RecordError) as info:
        records.upgrade_files(paths, echo=lambda *_: None)
    message = str(info.value)
    assert "4 of 5 files cannot be upgraded" in message and old.read_bytes() == before
    for name, why in [("text.json", "not JSON"), ("list.json", "not a run record"),
                      ("deep.json", "nested 100000 levels deep"), ("latin1.json", "not UTF-8")]:
        assert f"{tmp_path / name}: {why}" in message, message


def test_papermill_writing_over_a_finished_runs_notebook_is_told_how_to_restore_it(tmp_path, rows):
    """`papermill experiment.ipynb <run>/experiment.ipynb -p output_dir <run> -p epochs 1` has written its output
    notebook over the run's before the notebook's folder cell runs; that cell's refusal says so and how to
    restore it (the residual: the bytes are gone from the folder until restored from git)."""
    run_dir, record = _finished(tmp_path, rows)
    (run_dir / EXECUTED_FILE).write_text(json.dumps({"cells": [], "metadata": {}}))  # papermill's first write
    with pytest.raises(folder.FinishedRunError) as info:
        folder.check_output_dir(run_dir, parameters.RunConfig.of({**record["parameters"], "epochs": 1}))
    message = str(info.value)
    assert "finished run of other parameters" in message and "it has just replaced" in message
    assert f"git restore --source=HEAD -- {run_dir / EXECUTED_FILE}" in message
