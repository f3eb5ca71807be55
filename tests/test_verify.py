"""Records that replay: python -m reproduction.verify retrains a record's first epochs from the commit it names,
with that commit's code, and agrees with a faithful record, not with one whose first-epoch error was edited."""
from __future__ import annotations

import json
import subprocess

import pytest
from helpers import fake_result

from reproduction import folder, records, verify

TINY = {"architecture": "100", "weights": "binary", "n_train": 1000}  # one epoch in seconds


def _record(commit: str, history: list[dict]) -> dict:
    """A finished one-epoch record of TINY, trained (its session says) by `commit`, holding `history`."""
    record = {k: v for k, v in fake_result(TINY, 1, TINY["n_train"], "quick", 0.3).items() if k != "profile"}
    entry = {**history[0], "epoch": 1, "train_seconds": 1.0}
    record.update(history=[entry], final={k: entry[k] for k in records.HISTORY_ERRORS["ebp"]}, git_commit=commit,
                  sessions=[{"from_epoch": 0, "to_epoch": 1, "wall_seconds": 1.0, "seconds_per_epoch": 1.0,
                             "git_commit": commit}])
    return record


def _write(run_dir, record):
    run_dir.mkdir(parents=True, exist_ok=True)
    records.write_record(run_dir / folder.RESULT_FILE, record)


def test_a_faithful_record_replays_and_an_edited_one_does_not(tmp_path, real_data_dir, monkeypatch):
    head = subprocess.run(["git", "-C", str(records.REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout: there is no commit to replay")
    commit = head.stdout.strip()
    monkeypatch.setenv("EBP_DATA_DIR", str(real_data_dir))
    # the numbers HEAD's code gives for TINY: a replay of a record holding placeholders
    run_dir = tmp_path / "quick" / "binary-100"
    _write(run_dir, _record(commit, [{k: 0.5 for k in records.HISTORY_ERRORS["ebp"]}]))
    first = verify.verify_run(run_dir, 1, write=False)
    assert first["verdict"] == "disagrees" and first["commit"] == commit
    assert first["code_from"] == "code/ebp_lib.py"  # the export's code ran, not this checkout's or the venv's
    replayed = first["history"][0]["replayed"]

    _write(run_dir, _record(commit, [replayed]))
    faithful = verify.verify_run(run_dir, 1)
    assert faithful["verdict"] == "exact" and faithful["history"][0]["largest_difference"] == 0
    written = json.loads((run_dir / folder.VERIFICATION_FILE).read_text())
    assert written["result_sha256"] == folder.sha256((run_dir / folder.RESULT_FILE).read_bytes())

    edited = {**replayed, "test_ebp_p": round(replayed["test_ebp_p"] - 0.01, 4)}
    _write(run_dir, _record(commit, [edited]))
    assert verify.main([str(run_dir)]) == 1
    after = json.loads((run_dir / folder.VERIFICATION_FILE).read_text())
    assert after["verdict"] == "disagrees" and after["history"][0]["largest_difference"] == pytest.approx(0.01)


def test_compare_is_exact_within_tolerance_or_disagrees():
    keys = records.HISTORY_ERRORS["ebp"]
    ours = [{"epoch": 1, **{k: 0.1 for k in keys}}]
    assert verify.compare(ours, ours)[1] == "exact"
    near = [{"epoch": 1, **{k: 0.1 + verify.TOLERANCE for k in keys}}]
    assert verify.compare(ours, near)[1] == "agrees"
    far = [{"epoch": 1, **{k: 0.1 + 2 * verify.TOLERANCE for k in keys}}]
    assert verify.compare(ours, far)[1] == "disagrees"


def test_a_record_trained_by_two_commits_in_its_first_epochs_is_not_replayed():
    record = _record("a" * 40, [{k: 0.1 for k in records.HISTORY_ERRORS["ebp"]}])
    record["sessions"] = [{"from_epoch": 0, "git_commit": "a" * 40}, {"from_epoch": 1, "git_commit": "b" * 40}]
    assert verify.replay_commit(record, 1) == "a" * 40
    with pytest.raises(verify.VerifyError, match="not one known commit"):
        verify.replay_commit(record, 2)


def _committed_records() -> list:
    return sorted(p.parent for p in (records.REPO / "outputs" / "runs").glob("*/*/result.json"))


def test_every_committed_record_can_be_replayed_or_says_exactly_why_not(capsys):
    """--check runs nothing: for every committed EBP record it names the commit that would replay it and the
    parameters dropped (added after that commit, at the default it hard-wired), or why it cannot be replayed."""
    runs = _committed_records()
    if not runs or subprocess.run(["git", "-C", str(records.REPO), "rev-parse", "HEAD"],
                                  capture_output=True).returncode != 0:
        pytest.skip("no committed records, or not a git checkout")
    status = verify.main(["--check", *map(str, runs)])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(runs) + 1 and all(": replayable by commit " in line or ": not replayable: " in line
                                               for line in lines[:-1])
    assert lines[-1] == f"{len(runs)} of {len(runs)} records can be replayed; 0 cannot (reasons above)"
    assert status == 0


def test_sessions_replays_the_first_epoch_of_each_stretch_with_the_commit_that_trained_it(tmp_path, monkeypatch,
                                                                                           capsys):
    """A run trained in two stretches (epochs 1-2 by one commit, 3-4 by another): --sessions replays epochs 1..1
    with the first and 1..3 with the second (no checkpoint of epoch 2 is kept), each compared with the record; a
    stretch whose commit cannot be replayed says why."""
    curve = [0.5, 0.4, 0.3, 0.2]
    record = {k: v for k, v in fake_result(TINY, 4, TINY["n_train"], "quick", 0.3, epochs=4, curve=curve).items()
              if k != "profile"}
    record.update(finished=True, git_commit="b" * 40,
                  sessions=[{"from_epoch": 0, "to_epoch": 2, "wall_seconds": 1.0, "seconds_per_epoch": 1.0,
                             "git_commit": "a" * 40},
                            {"from_epoch": 2, "to_epoch": 4, "wall_seconds": 1.0, "seconds_per_epoch": 1.0,
                             "git_commit": "b" * 40}])
    run_dir = tmp_path / "quick" / "binary-100"
    _write(run_dir, record)
    asked = []

    def fake_replay(rec, k, workdir, commit, env_extra=None, timeout=None):
        asked.append((k, commit))
        return rec["history"][:k], "code/ebp_lib.py"
    monkeypatch.setattr(verify, "replay", fake_replay)
    monkeypatch.setattr(verify, "resolve_commit", lambda commit, repo=None, where="": verify.check_commit_id(
        commit, where) if commit != "a" * 40 else (_ for _ in ()).throw(verify.VerifyError("not on main")))
    assert verify.main(["--sessions", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert asked == [(3, "b" * 40)]
    assert "stretch from epoch 0 (commit aaaaaaaaa): not replayed: not on main" in out
    assert "stretch from epoch 2 (commit bbbbbbbbb): exact (largest difference 0.0000)" in out
