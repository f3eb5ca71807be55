"""What a record can make the replay do: nothing but replay it. A record is checked whole before anything runs (its
parameter names and values, every commit a full id that this repository holds and its main branch reaches, passed
to git after its options), a commit is given only the parameters it knew, a replay is bounded in time, and a
verification vouches for the epochs it replayed and no others."""
from __future__ import annotations

import json
import subprocess
import time

import pytest
from helpers import cell_row, fake_result

from reproduction import folder, records, verify
from reproduction.paper_tables import read_paper_tables
from reproduction.results import load_results, render_table, table_cells

# The commit that trained the 68 quick records: its experiment notebook predates the update (real_update, now update)
QUICK_COMMIT = "fde3d32ff2ecbc52fe1a58cf3daebf4e35d85a0c"
# The commit that trained paper/binary-200-200: its notebook knew neither the mask reading nor the update
TABLE_2_COMMIT = "9854cab778a0c42275ee89bcfa78c3538b568425"
# The commit that trained the paper profile's authors-2015 runs: its notebook names the update real_update
AUTHORS_2015_COMMIT = "cc590e3ef8d1e98ff899e2f339ec1a8094eafa79"


@pytest.fixture(scope="module")
def rows():
    return read_paper_tables()


def _git(*args, repo=records.REPO) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def _head() -> str:
    try:
        return _git("rev-parse", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: there is no commit to replay")


def _write(run_dir, record) -> None:
    """`record` as result.json in `run_dir`, written as a hostile user would: without write_record's checks."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / folder.RESULT_FILE).write_text(json.dumps({k: v for k, v in record.items() if k != "profile"}))


def _finished(rows, commit, epochs=1, **params) -> dict:
    record = fake_result(cell_row(rows, 2, "B-EBP-P", "200"), epochs, 1000, "quick", 0.3, **params)
    record.update(git_commit=commit, sessions=[{"from_epoch": 0, "to_epoch": epochs, "wall_seconds": 1.0,
                                                "seconds_per_epoch": 1.0, "git_commit": commit}])
    return record


def test_a_parameter_name_carrying_code_runs_nothing(tmp_path, rows, capsys):
    """papermill writes each parameter name verbatim into the notebook: a name of `x = 1; import os; ...` would run
    its command. The record is refused before any export or kernel, naming the parameter."""
    marker = tmp_path / "ran"
    record = _finished(rows, _head())
    record["parameters"][f"x = 1\nimport os\nos.system('touch {marker}')\ny"] = 1
    run_dir = tmp_path / "quick" / "binary-200"
    _write(run_dir, record)
    assert verify.main([str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert not marker.exists() and "are not experiment parameters" in out and "not replayed" in out
    assert not (run_dir / folder.VERIFICATION_FILE).exists()


@pytest.mark.parametrize("commit", ["--output={target}", "HEAD", "a" * 39, "0" * 40])
def test_a_commit_field_is_never_an_option_nor_anything_but_a_commit_of_this_repository(tmp_path, rows, capsys,
                                                                                         commit):
    """A record's commit of '--output=FILE' made `git archive` create FILE; a branch name, an abbreviation, an id
    the repository lacks: each is refused, saying why, and nothing is written."""
    target = tmp_path / "clobbered"
    commit = commit.format(target=target)
    run_dir = tmp_path / "quick" / "binary-200"
    _write(run_dir, _finished(rows, commit))
    assert verify.main([str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert not target.exists() and not (run_dir / folder.VERIFICATION_FILE).exists()
    assert ("not a commit id (40 lowercase hex digits)" in out if commit != "0" * 40
            else "is not a commit of the repository" in out)


def test_a_commit_no_branch_of_main_reaches_is_not_replayed(tmp_path):
    """A commit of a deleted branch is still an object of the repository: resolve_commit refuses it (its code was
    never merged), and accepts one that main reaches."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "t@t"], ["config", "user.name", "t"],
                 ["commit", "-q", "--allow-empty", "-m", "on main"], ["checkout", "-q", "-b", "side"],
                 ["commit", "-q", "--allow-empty", "-m", "on a branch about to be deleted"]):
        _git(*args, repo=repo)
    side, merged = _git("rev-parse", "side", repo=repo), _git("rev-parse", "main", repo=repo)
    _git("checkout", "-q", "main", repo=repo)
    _git("branch", "-q", "-D", "side", repo=repo)
    assert _git("cat-file", "-t", side, repo=repo) == "commit"  # the object is still there
    with pytest.raises(verify.VerifyError, match="is not an ancestor of main or HEAD: its code was never merged"):
        verify.resolve_commit(side, repo)
    assert verify.resolve_commit(merged, repo) == merged


def _require(commit: str) -> None:
    try:
        _git("cat-file", "-e", f"{commit}^{{commit}}")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"this clone lacks commit {commit[:9]}")


def test_a_parameter_the_recorded_commit_did_not_know_fails_the_replay(tmp_path, capsys):
    """paper/binary-200-200 was trained by a commit whose notebook knew no update (under either name) and ignored
    names it did not know: a copy relabelled update=authors-2015 was replayed 'exact'. Now the replay fails, saying
    that commit cannot have trained it, and writes no verification."""
    _require(TABLE_2_COMMIT)
    source = records.REPO / "outputs" / "runs" / "paper" / "binary-200-200"
    record = records.read_record(source / folder.RESULT_FILE)
    assert {s["git_commit"] for s in record["sessions"]} == {TABLE_2_COMMIT}
    relabelled = {**record, "parameters": {**record["parameters"], "update": "authors-2015"}}
    run_dir = tmp_path / "paper" / "binary-200-200-authors-2015"
    _write(run_dir, relabelled)
    assert verify.main([str(run_dir)]) == 1
    assert ("has no parameter 'update', so it cannot have trained update='authors-2015'"
            in capsys.readouterr().out)
    assert not (run_dir / folder.VERIFICATION_FILE).exists()


def test_a_record_older_than_a_parameter_is_replayed_without_it():
    """The 68 quick records could not be replayed (ParameterError: real_update: unknown parameter): their commit is
    given only the parameters it knew, the update (at the default its code hard-wired) dropped, under neither
    name."""
    _require(QUICK_COMMIT)
    planned = verify.plan(records.REPO / "outputs" / "runs" / "quick" / "binary-200")
    assert planned["commit"] == QUICK_COMMIT and planned["dropped"] == ["update"]
    assert not {"update", "real_update"} & set(planned["parameters"]) and planned["parameters"]["n_train"] == 8000


def test_a_commit_before_a_parameters_rename_is_given_it_under_the_name_it_knew():
    """paper/binary-200-authors-2015 was trained by commit cc590e3, whose notebook assigns real_update: its replay
    gives it real_update='authors-2015', and no `update` (a name that notebook would refuse as unknown). A commit
    whose notebook knows `update` (this checkout's) is given that name."""
    _require(AUTHORS_2015_COMMIT)
    planned = verify.plan(records.REPO / "outputs" / "runs" / "paper" / "binary-200-authors-2015")
    assert planned["commit"] == AUTHORS_2015_COMMIT and planned["dropped"] == []
    assert planned["parameters"]["real_update"] == "authors-2015" and "update" not in planned["parameters"]
    record = planned["record"]
    assert record["parameters"]["update"] == "authors-2015" and "real_update" not in record["parameters"]
    today = verify.notebook_parameter_names(records.REPO / verify.NOTEBOOK)
    assert "update" in today and "real_update" not in today
    params, dropped = verify.replay_parameters(record, today, 1, "out")
    assert params["update"] == "authors-2015" and "real_update" not in params and dropped == []


def test_a_replay_that_never_returns_is_stopped_at_its_timeout():
    start = time.monotonic()
    with pytest.raises(verify.VerifyError, match="ran past its 1 s limit and was stopped"):
        verify.run_bounded(["sh", "-c", "sleep 60 & sleep 60"], {}, 1)
    assert time.monotonic() - start < 30


def _verification(result: dict, text: bytes, k: int) -> dict:
    keys = records.HISTORY_ERRORS["ebp"]
    history = [{"epoch": e["epoch"], "recorded": {key: e[key] for key in keys}, "replayed": {key: e[key] for key in keys},
                "largest_difference": 0.0} for e in result["history"][:k]]
    return {"format": 1, "kind": "replay", "result_sha256": folder.sha256(text), "commit": result["git_commit"],
            "epochs": k, "tolerance": 0.0015, "verdict": "exact", "history": history}


def test_a_replay_of_the_first_epoch_does_not_publish_a_record_edited_after_it(tmp_path, rows):
    """A finished run without its notebook, edited at epoch 3 and in its final numbers, replayed for 1 epoch (make
    verify's default): unverified, its number not in the table. Replayed for all its epochs it is published."""
    commit = "c" * 40
    record = _finished(rows, commit, epochs=3, curve=[0.5, 0.4, 0.0346])
    record["history"][2]["test_ebp_p"] = record["final"]["test_ebp_p"] = 0.0188
    run_dir = tmp_path / "quick" / "binary-200"
    _write(run_dir, record)
    text = (run_dir / folder.RESULT_FILE).read_bytes()
    records.write_json(run_dir / folder.VERIFICATION_FILE, _verification(record, text, 1))
    loaded = load_results(tmp_path)
    kind, why = loaded.rejected["quick/binary-200"]
    assert not list(loaded) and kind == "unverified" and "vouches for epochs 1-1 only, not for the 3" in why
    table = render_table(2, rows, table_cells(rows, loaded, "quick"), "quick")
    assert "1.88" not in table and "unverified result.json" in table
    records.write_json(run_dir / folder.VERIFICATION_FILE, _verification(record, text, 3))
    assert [r["run_dir"] for r in load_results(tmp_path)] == ["quick/binary-200"]


@pytest.mark.parametrize("forgery", ["two fields", "another commit", "another history", "a far replay",
                                     "a wide tolerance"])
def test_a_forged_verification_vouches_for_nothing(tmp_path, rows, forgery):
    """A verification of only result_sha256 and verdict 'exact' published a forged number; so would one naming
    another commit, holding another history, a replay beyond the tolerance under an 'exact' verdict, or a tolerance
    of its own. Each is unverified, naming what is wrong."""
    record = _finished(rows, "c" * 40, epochs=1)
    run_dir = tmp_path / "quick" / "binary-200"
    _write(run_dir, record)
    v = _verification(record, (run_dir / folder.RESULT_FILE).read_bytes(), 1)
    if forgery == "two fields":
        v = {"result_sha256": v["result_sha256"], "verdict": "exact"}
    elif forgery == "another commit":
        v["commit"] = "d" * 40
    elif forgery == "another history":
        v["history"][0]["recorded"]["test_ebp_p"] = 0.1
    elif forgery == "a far replay":
        v["history"][0]["replayed"]["test_ebp_p"] += 0.01
    else:
        v["tolerance"] = 0.5
        v["history"][0]["replayed"]["test_ebp_p"] += 0.01
    records.write_json(run_dir / folder.VERIFICATION_FILE, v)
    loaded = load_results(tmp_path)
    assert not list(loaded) and loaded.rejected["quick/binary-200"][0] == "unverified"
