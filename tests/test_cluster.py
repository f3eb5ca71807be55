"""Runs on a real Dask cluster (reproduction.runner.run_batch with a scheduler address, run_tables.py --scheduler):
`dask scheduler` and `dask worker` subprocesses on localhost, started as a user starts them on cluster machines,
from another folder and without PYTHONPATH or EBP_DATA_DIR (the project is installed in the workers' environment:
this virtual environment, where it is installed editable). A run gives the same result as on local cores; a
worker that cannot import the project or dies fails its runs with a message within a bounded time, and the
batch ends. Needs the real MNIST files ($EBP_DATA_DIR), which reach the workers inside the jobs.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import ebp_data
import ebp_lib
import ebp_train
from reproduction import folder, paper_tables, parameters, runner

DASK = Path(sys.executable).with_name("dask")
ONE_EPOCH = {"name": "tiny", "epochs": 1, "n_train": 1000, "batch_size": 10}  # passes the notebook's 50% check
# A worker preload that hides the project from the worker, as if it were not installed in its environment.
HIDE_PROJECT = '''
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in (getattr(f, "__module__", "") or "").lower()]
for name in [m for m in sys.modules if m.split(".")[0] == "reproduction" or m.startswith("ebp_")]:
    del sys.modules[name]
'''


def clean_env() -> dict:
    """This process's environment less PYTHONPATH and EBP_DATA_DIR: what a worker on another machine has."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", ebp_data.DATA_ENV_VAR)}


def start(args, cwd: Path, name: str) -> subprocess.Popen:
    """`dask <args>` in folder `cwd`, in its own process group, its output logged to cwd/<name>.log."""
    log = open(cwd / f"{name}.log", "w")
    return subprocess.Popen([str(DASK), *args], cwd=cwd, env=clean_env(), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(process: subprocess.Popen, sig=signal.SIGTERM) -> None:
    """End a process started by `start`, and its children (a worker's nanny, its worker process)."""
    try:
        os.killpg(process.pid, sig)
        process.wait(20)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def cluster_dir(tmp_path):
    """A folder outside the repository from which the scheduler and workers are started."""
    path = tmp_path / "cluster"
    path.mkdir()
    return path


@pytest.fixture
def scheduler(cluster_dir, real_data_dir):
    """The address of a `dask scheduler` on localhost."""
    process = start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
                     "scheduler.json"], cluster_dir, "scheduler")
    try:
        end = time.time() + 60
        while not (cluster_dir / "scheduler.json").exists():
            assert process.poll() is None and time.time() < end, (cluster_dir / "scheduler.log").read_text()
            time.sleep(0.2)
        time.sleep(0.2)  # the file is written whole, but give the writer its moment
        yield json.loads((cluster_dir / "scheduler.json").read_text())["address"]
    finally:
        stop(process)


def worker(cluster_dir: Path, address: str, name: str = "worker", *extra) -> subprocess.Popen:
    return start(["worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard", "--host", "127.0.0.1",
                  "--name", name, *extra], cluster_dir, name)


def tiny_jobs(runs_dir, real_data_dir, run_ids=("binary-200",), **profile):
    rows = paper_tables.select_rows(paper_tables.read_paper_tables(), run_ids=list(run_ids))
    return paper_tables.make_jobs(rows, paper_tables.Selection({**ONE_EPOCH, **profile}, runs_dir=runs_dir,
                                                               data_dir=real_data_dir))


def test_a_run_on_a_real_cluster_gives_what_local_cores_give(tmp_path, cluster_dir, scheduler, real_data_dir):
    """One worker started from another folder without PYTHONPATH or EBP_DATA_DIR trains the run (the data folder
    travels inside the job), to exactly the errors the same configuration gets in this process, which is what a
    local core computes (tests/test_runner.py holds the notebook to it bit for bit)."""
    process = worker(cluster_dir, scheduler)
    try:
        [job] = tiny_jobs(tmp_path / "runs", real_data_dir)
        said = []
        [outcome] = runner.run_batch([job], scheduler=scheduler, echo=said.append, worker_wait=60)
    finally:
        stop(process)
    assert outcome["status"] == "finished", (outcome, said)
    assert f"sending runs to the Dask cluster at {scheduler}" in said
    result = folder.read_result(job.output_dir)
    data = ebp_data.load_dataset("mnist", n_train=ONE_EPOCH["n_train"])
    net = ebp_lib.init_network(parameters.paper_architecture("200"), "binary", seed=0)
    _, history = ebp_train.fit(net, data, 1, 10, seed=0)
    assert result["final"] == {k: history[-1][k] for k in result["final"]}
    assert not (Path(job.output_dir) / folder.CHECKPOINT_FILE).exists()


def test_a_worker_that_cannot_import_the_project_fails_the_runs_at_once(tmp_path, cluster_dir, scheduler,
                                                                         real_data_dir):
    """A worker whose environment lacks the project is named with its ModuleNotFoundError and given no run (a
    task of this package would kill it and wait forever); with no other worker every run fails at once."""
    (cluster_dir / "hide_project.py").write_text(HIDE_PROJECT)
    process = worker(cluster_dir, scheduler, "no-project", "--preload", str(cluster_dir / "hide_project.py"))
    try:
        jobs = tiny_jobs(tmp_path / "runs", real_data_dir, run_ids=("binary-200", "real-200"))
        start_time, said = time.time(), []
        outcomes = runner.run_batch(jobs, scheduler=scheduler, echo=said.append, worker_wait=60)
        took = time.time() - start_time
        alive = process.poll() is None
    finally:
        stop(process)
    assert [o["status"] for o in outcomes] == ["failed", "failed"], outcomes
    for outcome in outcomes:
        assert "can run this project" in outcome["error"] and "No module named 'reproduction'" in outcome["error"]
        assert "pip install -e" in outcome["error"]
    assert any("ModuleNotFoundError" in line and "given no run" in line for line in said), said
    assert took < 60 and alive, (took, alive)  # bounded, and the worker was not killed by a task it cannot load


@pytest.mark.alone  # it times a killed worker's end: a second xdist worker beside it could stretch that
def test_a_worker_that_dies_fails_its_run_within_a_bounded_time(tmp_path, cluster_dir, scheduler, real_data_dir):
    """The only worker is killed while it trains (SIGKILL to it and its nanny): once no worker that could run the
    jobs has been connected for `worker_wait` seconds, the running run and the one queued behind it fail, naming
    why, and the batch ends instead of printing '0/2 runs done' forever."""
    process = worker(cluster_dir, scheduler)
    jobs = tiny_jobs(tmp_path / "runs", real_data_dir, run_ids=("binary-200", "real-200"), epochs=40, n_train=300)
    outcomes, said = [], []
    thread = threading.Thread(target=lambda: outcomes.extend(
        runner.run_batch(jobs, scheduler=scheduler, echo=said.append, worker_wait=5)))
    thread.start()
    try:
        end = time.time() + 300  # generous: only a hang should fail; the kernel starts slowly on a loaded machine
        while (folder.read_result(jobs[0].output_dir) or {}).get("epochs_done", 0) < 1:
            assert thread.is_alive() and time.time() < end, (outcomes, said)
            time.sleep(0.2)
    finally:
        stop(process, signal.SIGKILL)
    killed = time.time()
    thread.join(120)
    assert not thread.is_alive(), "the runner still waits for a dead worker"
    assert time.time() - killed < 60
    assert [o["status"] for o in outcomes] == ["failed", "failed"], outcomes
    assert all("died or left" in o["error"] for o in outcomes), outcomes
    # the killed run keeps its checkpoint: a later batch resumes it
    folder_state = folder.job_state(jobs[0])
    assert folder_state.state in ("partial", "new"), folder_state
