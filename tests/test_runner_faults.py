"""The runner and the experiment notebook under faults (issue 13, faults 1-7), one test (or more) per fault; each
fails if the handling it covers is removed.

1. resuming with other data settings is refused, naming both values;
2. an empty, truncated or byte-flipped checkpoint is reported (path, run) while planning and moved aside when
   the batch runs, which proceeds;
3. a write that fails (full disk, read-only folder) is reported with its path and errno, leaves no temporary,
   and never replaces a good result.json or executed notebook;
4. unknown papermill parameters fail before any work, in the notebook and in the runner;
5. the data folder travels inside a job to Dask workers (a real distributed.LocalCluster);
6. a result.json and its checkpoint are checked against each other (edited results are left alone);
7. the loser of a lock race is busy (not failed), the exit status, the progress count.

Tests that execute the notebook use a tiny configuration ([784, 200, 10], a few hundred MNIST images) and need
the real data files ($EBP_DATA_DIR); nothing here downloads.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ebp_experiments as ex
import ebp_lib

ROOT = Path(__file__).resolve().parents[1]
TINY = {"name": "tiny", "epochs": 2, "n_train": 300, "batch_size": 10}
# One epoch that passes the notebook's check (EBP-P test error below 50%): 1,000 images (24.7% here; 300 give 62%)
ONE_EPOCH = {"epochs": 1, "n_train": 1000}
DISCARD = "http://127.0.0.1:9"  # nothing listens: a kernel that tried to download would fail at once


def tiny_job(runs_dir, **profile):
    row = ex.select_rows(ex.read_paper_tables(), tables=[2], columns=["200"], weights=["binary"])
    return ex.make_jobs(row, {**TINY, **profile}, runs_dir=runs_dir)[0]


@pytest.fixture(scope="module")
def tiny_data(real_data_dir):
    return ebp_lib.load_dataset("mnist", n_train=TINY["n_train"])


def train_in_process(job, data, epochs):
    """Train a job's configuration for `epochs` epochs in this process as the notebook does (checkpoint after
    every epoch, result.json rewritten by the recorder): a genuine partial run when epochs < its epochs."""
    params, out = job["parameters"], Path(job["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / ex.CHECKPOINT_FILE
    recorder = ex.EpochRecorder(out, params, checkpoint, echo=lambda *_: None)
    net = ebp_lib.init_network(ex.architecture_layers(params["architecture"]), params["weights"], params["seed"])
    ebp_lib.fit(net, data, epochs, params["batch_size"], params["seed"], checkpoint=checkpoint, n_train_eval=0,
                on_epoch=recorder, engine=recorder.engine, run_config=ex.run_config(params))
    return out


def execute(parameters, output, **kwargs):
    """The experiment notebook executed by papermill, as a user would run it."""
    import papermill

    return papermill.execute_notebook(str(ex.NOTEBOOK), str(output), parameters=parameters, kernel_name="python3",
                                      cwd=str(ex.NOTEBOOK.parent), progress_bar=False, **kwargs)


def leftovers(folder):
    """Temporaries in a run's folder (what a failed write might leave)."""
    return sorted(p.name for p in Path(folder).iterdir() if ".tmp" in p.name)


# ----------------------------------------------------------------------------------------------------------
# 1. Resume with other data settings
# ----------------------------------------------------------------------------------------------------------

def test_resuming_with_other_data_settings_is_refused_naming_both(tmp_path, real_data_dir):
    """The issue's scenario: papermill twice into one output_dir, first MNIST (500 images, 1 epoch), then
    Fashion-MNIST with global standardisation on 1,000 images for 2 epochs. The second is refused before
    training, naming each setting with both values, and the first run's files are left as they were."""
    import papermill

    out = tmp_path / "run"
    execute({"n_train": 500, "epochs": 1, "output_dir": str(out)}, tmp_path / "first.ipynb")
    first = (out / ex.RESULT_FILE).read_bytes()
    checkpoint = (out / ex.CHECKPOINT_FILE).read_bytes()
    with pytest.raises(papermill.PapermillExecutionError) as info:
        execute({"dataset": "fashion-mnist", "preprocessing": "global", "n_train": 1000, "epochs": 2,
                 "output_dir": str(out)}, tmp_path / "second.ipynb")
    assert info.value.ename == "CheckpointMismatchError", info.value
    lines = info.value.evalue.splitlines()
    for name, saved, wanted in [("dataset", "'mnist'", "'fashion-mnist'"), ("preprocessing", "'pixel'", "'global'"),
                                ("n_train", "500", "1000")]:
        assert any(line.strip().startswith(f"- {name}:") and saved in line and wanted in line for line in lines), \
            (name, info.value.evalue)
    assert str(out / ex.CHECKPOINT_FILE) in info.value.evalue
    assert (out / ex.RESULT_FILE).read_bytes() == first and (out / ex.CHECKPOINT_FILE).read_bytes() == checkpoint


# ----------------------------------------------------------------------------------------------------------
# 2. Corrupt checkpoints
# ----------------------------------------------------------------------------------------------------------

def damage(path, how):
    """Empty, truncate to half, or flip one byte in the middle of the first layer's weights of a checkpoint."""
    data = bytearray(path.read_bytes())
    if how == "empty":
        data = b""
    elif how == "truncated":
        data = data[:len(data) // 2]
    else:  # a flipped byte inside h0.npy's data: the metadata entry stays readable, the CRC of h0 does not
        info = zipfile.ZipFile(path).getinfo("h0.npy")
        header = data[info.header_offset:info.header_offset + 30]
        start = info.header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30],
                                                                                                  "little")
        data[start + info.compress_size // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["empty", "truncated", "flipped"])
def test_a_corrupt_checkpoint_is_named_while_planning(tmp_path, tiny_data, how, capsys):
    job = tiny_job(tmp_path / "runs")
    out = train_in_process(job, tiny_data, 1)
    damage(out / ex.CHECKPOINT_FILE, how)
    state = ex.job_state(job)  # no traceback: the state says what is wrong and where
    assert state.state == "corrupt" and state.files == [out / ex.CHECKPOINT_FILE], state
    assert str(out / ex.CHECKPOINT_FILE) in state.problems[0]
    outcomes, todo = ex.plan_batch([job], echo=print)
    assert todo == [job] and outcomes == {}
    said = capsys.readouterr().out
    assert f"{job['key']}: unreadable {out / ex.CHECKPOINT_FILE}" in said and "moved aside" in said


def test_list_reports_a_corrupt_checkpoint_with_its_path(tmp_path):
    """run_tables.py --list on a selection holding a truncated checkpoint: the run is listed as corrupt, with
    the file, and the other runs are listed too."""
    folder = tmp_path / "quick" / "binary-200"
    folder.mkdir(parents=True)
    (folder / ex.CHECKPOINT_FILE).write_bytes(b"PK\x03\x04 half a zip file")
    done = subprocess.run([sys.executable, "scripts/run_tables.py", "--table", "2", "--column", "200", "--list",
                           "--runs-dir", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:2] == ["binary-200", "corrupt"], done.stdout
    assert str((folder / ex.CHECKPOINT_FILE).resolve()) in lines[1]
    assert [line.split()[:2] for line in lines if not line.startswith(" ")][1] == ["real-200", "new"]


def test_a_batch_moves_a_corrupt_checkpoint_aside_restarts_that_run_and_proceeds(tmp_path, tiny_data):
    bad = tiny_job(tmp_path / "runs", epochs=3)
    out = train_in_process(bad, tiny_data, 1)
    damage(out / ex.CHECKPOINT_FILE, "truncated")
    damaged = (out / ex.CHECKPOINT_FILE).read_bytes()
    other = tiny_job(tmp_path / "other", **ONE_EPOCH)
    other["key"] = "binary-200-other"  # keys name a batch's runs (folders under one runs_dir)
    said = []
    outcomes = ex.run_batch([bad, other], n_jobs=1, echo=said.append)
    assert [o["status"] for o in outcomes] == ["finished", "finished"], outcomes
    [aside] = out.glob(f"{ex.CHECKPOINT_FILE}.corrupt-*")
    assert aside.read_bytes() == damaged  # kept for inspection, under a name that says why
    assert "moved aside" in outcomes[0]["note"] and aside.name in outcomes[0]["note"]
    assert any(aside.name in line for line in said), said
    assert "moved aside" in ex.summary([bad, other], outcomes)
    result = ex.read_result(out)
    assert result["finished"] and [s["from_epoch"] for s in result["sessions"]] == [0]  # from scratch


# ----------------------------------------------------------------------------------------------------------
# 3. Full disk, read-only folder
# ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("failing, code", [("write", errno.ENOSPC), ("open", errno.EROFS)])
def test_a_failed_write_names_path_and_errno_and_keeps_the_good_result(tmp_path, monkeypatch, failing, code):
    """result.json rewritten by the recorder on a full disk (the write fails half-way) or in a read-only folder
    (the temporary cannot be created): OSError with the errno naming result.json; the previous result.json is
    intact; no temporary is left behind. (Running as root, a real read-only folder would be writable.)"""
    params = ex.validate_parameters({"epochs": 2, "n_train": 300})
    recorder = ex.EpochRecorder(tmp_path, params, tmp_path / ex.CHECKPOINT_FILE, echo=lambda *_: None)
    record = {"epoch": 1, "test_ebp_p": 0.2, "test_ebp_d": 0.25, "train_ebp_p": 0.1, "train_ebp_d": 0.15,
              "train_seconds": 0.5}
    recorder(record)
    good = (tmp_path / ex.RESULT_FILE).read_bytes()

    real_write, real_open = os.write, os.open

    def half_then_full(fd, data):
        real_write(fd, bytes(data)[:len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def read_only(path, flags, *args, **kwargs):
        if flags & os.O_WRONLY:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, failing, half_then_full if failing == "write" else read_only)
    with pytest.raises(OSError) as info:
        recorder({**record, "epoch": 2})
    monkeypatch.undo()
    assert info.value.errno == code and str(tmp_path / ex.RESULT_FILE) in str(info.value), info.value
    assert (tmp_path / ex.RESULT_FILE).read_bytes() == good
    assert leftovers(tmp_path) == []


def test_a_full_disk_while_papermill_writes_keeps_the_good_notebook(tmp_path, monkeypatch, real_data_dir):
    """Papermill rewrites the executed notebook after every cell; the disk fills up half-way through one of those
    writes. The run is reported failed with errno 28 and the file being written; experiment.ipynb from before
    stays byte for byte; no temporary is left; the error is not a NotJSONError about a truncated notebook."""
    from papermill.iorw import LocalHandler

    job = tiny_job(tmp_path / "runs", **ONE_EPOCH)
    out = Path(job["output_dir"])
    out.mkdir(parents=True)
    previous = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n'
    (out / ex.EXECUTED_FILE).write_text(previous)
    calls = []
    real_write = LocalHandler.write

    def fills_up(self, buf, path):
        calls.append(path)
        if len(calls) < 4:
            return real_write(self, buf, path)
        with open(path, "w") as f:
            f.write(buf[:len(buf) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(LocalHandler, "write", fills_up)
    outcome = ex.run_job(job)
    assert outcome["status"] == "failed", outcome
    assert "[Errno 28]" in outcome["error"] and str(out) in outcome["error"], outcome
    assert "NotJSONError" not in outcome["error"]
    assert (out / ex.EXECUTED_FILE).read_text() == previous
    assert leftovers(out) == [] and all(".tmp" in Path(p).name for p in calls)


def test_a_read_only_runs_dir_is_reported_with_path_and_errno(tmp_path, monkeypatch):
    job = tiny_job(tmp_path / "runs")

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    outcome = ex.run_job(job)
    assert outcome["status"] == "failed", outcome
    assert "[Errno 30]" in outcome["error"] and job["output_dir"] in outcome["error"], outcome


# ----------------------------------------------------------------------------------------------------------
# 4. Unknown parameters
# ----------------------------------------------------------------------------------------------------------

def test_papermill_with_a_misspelled_parameter_fails_before_any_work(tmp_path, real_data_dir):
    """`papermill experiment.ipynb out.ipynb -p epoch 3`: the notebook stops at validation, naming the unknown
    name, before its output folder is created or any data loaded."""
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "papermill", str(ex.NOTEBOOK), str(tmp_path / "out.ipynb"),
                           "-p", "epoch", "3", "-p", "output_dir", str(out), "--cwd", str(ex.NOTEBOOK.parent)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    assert "ParameterError" in done.stderr and "epoch: unknown parameter" in done.stderr, done.stderr[-2000:]
    assert not out.exists()
    executed = json.loads((tmp_path / "out.ipynb").read_text())
    ran = [c for c in executed["cells"] if c["cell_type"] == "code" and c.get("execution_count")]
    assert "validate_parameters" in "".join(ran[-1]["source"])  # the last cell run: the validation


def test_the_notebook_sees_exactly_the_names_it_was_given():
    names_before = {"In", "Out", "ex"}
    namespace = {"In": [], "Out": {}, "ex": ex, "_i3": "", **ex.DEFAULT_PARAMETERS, "epoch": 3}
    assert ex.given_parameters(namespace, names_before) == {**ex.DEFAULT_PARAMETERS, "epoch": 3}
    with pytest.raises(ex.ParameterError, match="epoch: unknown parameter"):
        ex.validate_parameters(ex.given_parameters(namespace, names_before))
    # run again from the parameters cell on (the names already existed): still every known parameter
    assert ex.given_parameters({**namespace, "epoch": 3}, set(namespace) - {"epoch"}) == {
        **ex.DEFAULT_PARAMETERS, "epoch": 3}


def test_the_runner_refuses_unknown_parameters_before_executing(tmp_path):
    job = tiny_job(tmp_path / "runs")
    job["parameters"]["epoch"] = 3
    outcome = ex.run_job(job)
    assert outcome["status"] == "failed" and "epoch: unknown parameter" in outcome["error"], outcome
    assert not Path(job["output_dir"]).exists()


# ----------------------------------------------------------------------------------------------------------
# 5. The data folder reaches Dask workers
# ----------------------------------------------------------------------------------------------------------

def test_the_data_dir_travels_with_the_job_to_a_dask_worker(tmp_path, monkeypatch, real_data_dir):
    """A LocalCluster whose worker has no $EBP_DATA_DIR (and no way to download): the job's own data folder
    (--data-dir) is what its notebook reads."""
    import distributed

    if any((ebp_lib.CACHE_DIR / "mnist").glob("train-images*")):
        pytest.skip(f"{ebp_lib.CACHE_DIR / 'mnist'} holds MNIST: a worker would find it without being told where")
    data = tmp_path / "data"
    data.mkdir()
    (data / "mnist").symlink_to(real_data_dir / "mnist")
    job = ex.make_jobs(ex.select_rows(ex.read_paper_tables(), run_ids=["binary-200"]),
                       {**TINY, **ONE_EPOCH}, runs_dir=tmp_path / "runs",
                       data_dir=data)[0]
    assert job["env"] == {ebp_lib.DATA_ENV_VAR: str(data.resolve())}
    monkeypatch.delenv(ebp_lib.DATA_ENV_VAR)
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(proxy, DISCARD)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        [outcome] = ex.run_batch([job], n_jobs=1, scheduler=cluster.scheduler_address, echo=lambda *_: None)
    assert outcome["status"] == "finished", outcome
    assert ebp_lib.DATA_ENV_VAR not in os.environ  # the job's environment was applied only while it ran


# ----------------------------------------------------------------------------------------------------------
# 6. A result and its checkpoint are checked against each other
# ----------------------------------------------------------------------------------------------------------

@pytest.fixture
def partial_run(tmp_path, tiny_data):
    """A run trained 1 of its 2 epochs: result.json unfinished, checkpoint of 1 epoch."""
    job = tiny_job(tmp_path / "runs")
    out = train_in_process(job, tiny_data, 1)
    return job, out


def edit_result(out, change):
    result = json.loads((out / ex.RESULT_FILE).read_text())
    change(result)
    (out / ex.RESULT_FILE).write_text(json.dumps(result))


def test_an_unfinished_run_marked_finished_by_hand_is_left_alone(partial_run):
    job, out = partial_run
    assert ex.job_state(job).state == "partial"
    edit_result(out, lambda r: r.update(finished=True))
    edited, checkpoint = (out / ex.RESULT_FILE).read_bytes(), (out / ex.CHECKPOINT_FILE).read_bytes()
    state = ex.job_state(job)
    assert state.state == "inconsistent" and state.files == [out / ex.RESULT_FILE, out / ex.CHECKPOINT_FILE]
    assert "result.json is marked finished after 1 of its 2 epochs" in state.problems, state
    [outcome] = ex.run_batch([job], n_jobs=1, echo=lambda *_: None)
    assert outcome["status"] == "inconsistent" and ex.exit_status([outcome]) == 1
    assert (out / ex.RESULT_FILE).read_bytes() == edited and (out / ex.CHECKPOINT_FILE).read_bytes() == checkpoint
    assert not (out / ex.EXECUTED_FILE).exists()  # nothing was trained over it
    report = ex.summary([job], [outcome])
    assert str(out / ex.RESULT_FILE) in report and str(out / ex.CHECKPOINT_FILE) in report


def test_a_finished_result_beside_a_shorter_checkpoint_is_inconsistent(partial_run, tiny_data):
    """Even with epochs_done and the planned epochs edited to match, the checkpoint's history says otherwise."""
    job, out = partial_run
    edit_result(out, lambda r: (r.update(finished=True), r["parameters"].update(epochs=1)))
    job["parameters"]["epochs"] = 1
    assert ex.job_state(job).state == "finished"  # consistent: a run of 1 epoch that finished
    edit_result(out, lambda r: (r.update(epochs_done=2), r["history"].append({**r["history"][0], "epoch": 2}),
                                r["parameters"].update(epochs=2)))
    job["parameters"]["epochs"] = 2
    state = ex.job_state(job)
    assert state.state == "inconsistent" and "the checkpoint holds 1 epochs, result.json finished after 2" in \
        state.problems, state


def test_edited_parameters_of_an_unfinished_run_are_noticed(partial_run):
    job, out = partial_run
    edit_result(out, lambda r: r["parameters"].update(preprocessing="global"))
    state = ex.job_state(job)
    assert state.state == "inconsistent" and "preprocessing: checkpoint 'pixel', result.json 'global'" in \
        state.problems, state


def test_an_edited_history_is_noticed(partial_run):
    job, out = partial_run
    edit_result(out, lambda r: r["history"][0].update(test_ebp_p=0.01))
    assert ex.job_state(job).problems == ["the checkpoint's history and result.json's differ"]


def test_a_checkpoint_one_epoch_ahead_is_a_kill_between_the_two_writes(partial_run, tiny_data):
    """fit saves the checkpoint, then on_epoch rewrites result.json: a run killed between the two is partial."""
    job, out = partial_run
    one_epoch = (out / ex.RESULT_FILE).read_bytes()
    train_in_process(job, tiny_data, 2)
    (out / ex.RESULT_FILE).write_bytes(one_epoch)
    state = ex.job_state(job)
    assert (state.state, state.epochs) == ("partial", 2), state


def test_a_checkpoint_without_run_configuration_is_compared_on_what_it_records(tmp_path, tiny_data):
    """Checkpoints written before ebp_lib stored the run (two are committed) record the network, seed and batch
    size: those are compared; a seed edited into result.json is noticed."""
    job = tiny_job(tmp_path / "runs")
    out = train_in_process(job, tiny_data, 1)
    net, meta = ebp_lib.load_network(out / ex.CHECKPOINT_FILE)
    ebp_lib.save_network(out / ex.CHECKPOINT_FILE, net, seed=0, batch_size=10, history=meta["history"],
                         rng_state=meta["rng_state"])
    assert "run" not in ebp_lib.read_network_meta(out / ex.CHECKPOINT_FILE)
    assert ex.job_state(job).state == "partial"
    edit_result(out, lambda r: r["parameters"].update(seed=3))
    assert "seed: checkpoint 0, result.json 3" in ex.job_state(job).problems


# ----------------------------------------------------------------------------------------------------------
# 7. Lock race, exit status, progress count
# ----------------------------------------------------------------------------------------------------------

def test_the_loser_of_a_lock_race_is_busy_and_leaves_the_winners_notebook(tmp_path, monkeypatch, real_data_dir):
    """Another process takes the run's lock after the runner has looked (the runner's own look is skipped
    here): the notebook's kernel cannot lock the folder; the outcome is busy, not failed, and the winner's
    executed notebook is untouched."""
    job = tiny_job(tmp_path / "runs", **ONE_EPOCH)
    out, lock = ex.open_output_dir(job["output_dir"])
    winners = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n'
    (out / ex.EXECUTED_FILE).write_text(winners)
    try:
        monkeypatch.setattr(ex, "_prepare_folder", lambda job: {})
        outcome = ex.run_job(job)
    finally:
        lock.close()
    assert outcome["status"] == "busy", outcome
    assert (out / ex.EXECUTED_FILE).read_text() == winners and leftovers(out) == []
    assert ex.exit_status([outcome]) == 0


def test_a_locked_run_is_busy_before_the_notebook_starts(tmp_path):
    job = tiny_job(tmp_path / "runs")
    _, lock = ex.open_output_dir(job["output_dir"])
    try:
        assert ex.run_job(job)["status"] == "busy"
    finally:
        lock.close()


def test_exit_status():
    assert ex.exit_status([{"status": s} for s in ("finished", "skipped", "busy")]) == 0
    assert ex.exit_status([{"status": "busy"}, {"status": "failed"}]) == 1
    assert ex.exit_status([{"status": "inconsistent"}]) == 1
    assert ex.exit_status([{"status": "failed"}, {"status": "interrupted"}]) == 130


def test_progress_counts_only_the_runs_to_do(tmp_path):
    """One run skipped as finished, one to run: the progress line says 0/1, then 1/1, never 2/1."""
    skipped, todo = tiny_job(tmp_path / "a"), tiny_job(tmp_path / "b")
    skipped["key"] = "skipped-run"
    outcomes = {"skipped-run": {"status": "skipped"}}
    assert " 0/1 runs done " in ex.status_line(1.0, [todo], outcomes, [todo], 1)
    outcomes[todo["key"]] = {"status": "finished"}
    assert " 1/1 runs done " in ex.status_line(2.0, [todo], outcomes, [], 1)
