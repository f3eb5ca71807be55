"""Running jobs: one job executes the experiment notebook with papermill; a batch runs jobs on a Dask cluster.

run_job trains one run (a job of reproduction.paper_tables.make_jobs) by executing notebooks/experiment.ipynb
into the run's folder, after locking and checking that folder (reproduction.folder). run_batch plans a batch
(skipping finished runs, leaving inconsistent ones and finished runs of other parameters alone), runs the rest on
local worker processes or an existing Dask cluster, with a timeout per run, shows progress, and survives Ctrl-C,
SIGTERM and kills: rerunning the same batch resumes every run from its checkpoint. scripts/run_tables.py is the
command line.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from reproduction.folder import (
    CHECKPOINT_FILE,
    EXECUTED_FILE,
    LOCK_FILE,
    RESULT_FILE,
    RunBusyError,
    UnsafeLockError,
    is_locked,
    job_state,
    move_aside,
    open_output_dir,
    read_result,
    remove_temporaries,
    sha256,
)
from reproduction.job import Job, job_cost, job_environment, notebook_parameters
from reproduction.parameters import NOTEBOOK, same_configuration
from reproduction.records import RecordError, describe_error, read_record, write_atomically, write_record

# The states of a run folder (folder.job_state) that a batch leaves alone and reports: a finished run that
# disagrees with its evidence, of other parameters, without its evidence, or of a record format newer than this code.
LEFT_ALONE = ("inconsistent", "stale", "unverified", "newer")

# A notebook kernel that dies or stays silent before answering kernel_info (a loaded machine) has run no cell, so
# starting it again is safe; a bounded number of tries keeps a kernel that can never start from looping.
KERNEL_START_TRIES = 3
_KERNEL_NEVER_STARTED = re.compile(r"Kernel died before replying to kernel_info|Kernel didn't respond in \d+ seconds")


def kernel_never_started(error: BaseException | None) -> bool:
    """Whether papermill's `error` says the notebook's kernel died before it started (no cell ran)."""
    return (error is not None and not hasattr(error, "ename")
            and _KERNEL_NEVER_STARTED.search(str(error)) is not None)


def execute_notebook(notebook: str, output: Path, tries: int = KERNEL_START_TRIES, **papermill_args):
    """papermill.execute_notebook(notebook, output, ...), started again (at most `tries` times in all) while its
    kernel dies before it starts. Returns (the exception it ended with, or None; a sentence saying it was
    retried, or None)."""
    import papermill

    attempts, first = 0, None
    while True:
        attempts += 1
        try:
            papermill.execute_notebook(notebook, str(output), **papermill_args)
            error = None
        except Exception as err:
            error = err
        if not kernel_never_started(error) or attempts >= tries:
            break
        first = first or str(error).strip().splitlines()[0]
        Path(output).unlink(missing_ok=True)  # the notebook of a kernel that never started: nothing ran
    if attempts == 1:
        return error, None
    ended = "it never started" if kernel_never_started(error) else "then it started"
    return error, f"the notebook's kernel died before it started ({first}): started {attempts} times, {ended}"


def run_job(job: Job) -> dict:
    """Execute notebooks/experiment.ipynb for `job` into <output_dir>/experiment.ipynb with papermill.

    The job's configuration (`config`, a RunConfig) was validated when make_jobs built it and is passed on as it
    is. Before any work the folder is locked and checked (job_state: a finished run
    is skipped, a finished run of other parameters (stale) and an inconsistent one are left alone, a corrupt
    checkpoint or result.json is moved aside and the run restarts without it). The notebook is executed into a
    temporary beside experiment.ipynb and renamed over it at the end, so a failed write (a full disk) never
    replaces a good notebook with a truncated one. A finished run's checkpoint is deleted only once job_state has
    found the result, the checkpoint and the executed notebook in agreement; a failed or inconsistent run keeps
    it. Returns an outcome dict with status skipped, busy, stale, inconsistent, finished or failed (and `error`,
    `notebook`, `note`, `files`).
    """
    out = job.output_dir
    executed = out / EXECUTED_FILE
    start = time.time()
    outcome = {"key": job.key, "notebook": str(executed), "host": socket.gethostname()}

    def failed(error):
        return {**outcome, "status": "failed", "error": error, "notebook": notebook_of(job),
                "seconds": time.time() - start}

    try:
        prepared = _prepare_folder(job)
    except RunBusyError:
        return {**outcome, "status": "busy", "error": "another process is training this run now"}
    except UnsafeLockError as err:
        return failed(str(err))
    except OSError as err:  # a read-only or full folder: its path and errno
        return failed(describe_error(err, out))
    if prepared.get("status"):
        return {**outcome, **prepared}
    outcome.update(prepared)

    tmp = out / f".experiment-{os.getpid()}.tmp.ipynb"
    with job_environment(job):
        error, retried = execute_notebook(job.notebook, tmp, parameters=notebook_parameters(job),
                                          kernel_name="python3", cwd=str(Path(job.notebook).parent),
                                          progress_bar=False, log_output=False)
    if retried:
        outcome["note"] = "; ".join(filter(None, [outcome.get("note"), retried]))
    if getattr(error, "ename", None) == RunBusyError.__name__:  # lost a lock race: the winner's notebook stays
        tmp.unlink(missing_ok=True)
        return {**outcome, "status": "busy", "error": "another process is training this run now"}
    if error is not None and not hasattr(error, "ename"):
        # papermill itself failed (e.g. writing the notebook to a full disk): its temporary may be truncated
        tmp.unlink(missing_ok=True)
        kept = f"{executed} was kept as it was" if executed.exists() else "no notebook was kept"
        return failed(f"{describe_error(error, tmp)}; the temporary was removed and {kept}")
    # the notebook ran to its end or to a cell's exception: papermill wrote it completely
    problem = _keep_notebook(tmp, executed, Path(job.notebook).parents[1])
    if error is not None:
        return failed(describe_error(error) + ("" if problem is None else f"; {problem}"))
    if problem is not None:
        return failed(problem)
    state = job_state(job)  # the result, the checkpoint and the notebook just written, checked against each other
    if state.state == "inconsistent":
        return {**outcome, "status": "inconsistent", "error": "; ".join(state.problems),
                "files": [str(f) for f in state.files], "seconds": time.time() - start}
    if state.state != "finished":
        return failed(f"the notebook ran but {out / RESULT_FILE} is not a finished run of these parameters "
                      f"(the folder's state: {state.state})")
    (out / CHECKPOINT_FILE).unlink(missing_ok=True)  # checked: it agrees with the finished result
    (out / LOCK_FILE).unlink(missing_ok=True)  # released when the kernel ended; nothing to keep
    try:
        result = record_notebook_digest(out)
    except (OSError, RecordError) as err:
        return failed(f"{describe_error(err, out / RESULT_FILE)}; the run finished, but {RESULT_FILE} does not "
                      f"record its notebook's digest")
    return {**outcome, "status": "finished", "epochs": result["epochs_done"], "final": result["final"],
            "seconds": time.time() - start}


def record_notebook_digest(out: Path) -> dict:
    """Add the SHA-256 of a finished run's executed notebook to its result.json (notebook_sha256), so that a
    notebook replaced afterwards (papermill writing over it, say) is named as replaced (folder.evidence_problems);
    returns the record."""
    result = read_record(out / RESULT_FILE)
    result["notebook_sha256"] = sha256((out / EXECUTED_FILE).read_bytes())
    write_record(out / RESULT_FILE, result)
    return result


def _prepare_folder(job: Job) -> dict:
    """Holding the folder's lock: look again (another runner may have finished the run since the batch was
    planned), clear leftover temporaries, move corrupt files aside. Returns a final outcome (status) or notes."""
    _, lock = open_output_dir(job.output_dir)
    try:
        return prepare_locked(job)
    finally:
        lock.close()


def prepare_locked(job: Job) -> dict:
    """_prepare_folder's work, for a caller that holds the folder's lock (reproduction.group keeps it to train)."""
    out = job.output_dir
    state, notes = job_state(job), {}
    if state.state == "corrupt":
        moved = [f"{f} (unreadable) -> {move_aside(f).name}" for f in state.files]
        lost_epochs = out / CHECKPOINT_FILE in state.files
        state = job_state(job)  # what the folder holds without them
        if lost_epochs and state.state == "new" and (out / RESULT_FILE).exists():
            # the epochs of its unfinished result went with the checkpoint: the run restarts from epoch 0, and
            # its progress must not show the old result's epochs until the first new one is written
            moved.append(f"{out / RESULT_FILE} (its epochs were in that checkpoint) -> "
                         f"{move_aside(out / RESULT_FILE, 'restarted').name}")
        notes = {"note": "moved aside: " + ", ".join(moved)
                 + ("" if state.state == "finished" else "; the run restarted without it")}
    if state.state == "finished":
        # job_state found the result, the checkpoint and the executed notebook in agreement: the checkpoint of
        # a finished run has no further use
        (out / CHECKPOINT_FILE).unlink(missing_ok=True)
        return {"status": "skipped", "epochs": state.epochs, "final": read_result(out)["final"], **notes}
    if state.state in LEFT_ALONE:
        return {"status": state.state, "error": "; ".join(state.problems), "files": [str(f) for f in state.files],
                **notes}
    remove_temporaries(out)
    return notes


def _keep_notebook(tmp: Path, executed: Path, root: Path) -> str | None:
    """Make papermill's finished temporary `tmp` the run's executed notebook, with papermill's absolute paths
    made relative to the repository `root`; None if done, else what went wrong (the old notebook then stays
    and the temporary is removed)."""
    import nbformat

    try:
        nb = nbformat.read(tmp, as_version=4)
    except Exception as err:
        tmp.unlink(missing_ok=True)
        return f"papermill left no readable notebook ({type(err).__name__}: {err}); {executed} was not replaced"
    meta = nb.metadata.get("papermill", {})
    if meta.get("input_path") and Path(meta["input_path"]).is_relative_to(root):
        meta["input_path"] = Path(meta["input_path"]).relative_to(root).as_posix()
    meta["output_path"] = executed.relative_to(root).as_posix() if executed.is_relative_to(root) else str(executed)
    text = nbformat.writes(nb)
    try:
        write_atomically(executed, text if text.endswith("\n") else text + "\n")
    except OSError as err:
        return describe_error(err)
    finally:
        tmp.unlink(missing_ok=True)
    return None


def _progress(job: Job) -> tuple[int, float | None]:
    """(epochs done, wall seconds per epoch in the current session) from the job's partial result.json; for a run
    trained in a group (its session names the group), its share of the group's epoch."""
    result = read_result(job.output_dir)
    if not result or not result["sessions"] or not same_configuration(result["parameters"], job.config.parameters()):
        return 0, None
    session = result["sessions"][-1]
    if session["to_epoch"] <= session["from_epoch"]:
        return result["epochs_done"], None
    return result["epochs_done"], session["seconds_per_epoch"] / max(1, len(session.get("group") or ()))


def format_seconds(seconds: float) -> str:
    """A duration as a person reads it: '42 s', '17 min' or '2.5 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def status_line(elapsed: float, todo: list[Job], outcomes: dict, running: list[Job], workers: int) -> str:
    """'[elapsed] k/n runs done (f failed) | running: key epoch e/E ... | about T left', counting only the
    batch's runs to do (`todo`), not the ones skipped or busy at the start."""
    keys = {job.key for job in todo}
    done = {k: o for k, o in outcomes.items() if k in keys}
    parts, rate_num, rate_den, remaining = [], 0.0, 0.0, 0.0
    for job in running:
        epochs, per_epoch = _progress(job)
        parts.append(f"{job.key} epoch {epochs}/{job.config.epochs}")
        if per_epoch:
            rate_num, rate_den = rate_num + per_epoch, rate_den + job_cost(job)
    waiting = [j for j in todo if j.key not in done and j not in running]
    failed = sum(1 for o in done.values() if o["status"] == "failed")
    line = (f"[{format_seconds(elapsed):>6}] {len(done)}/{len(todo)} runs done"
            f"{f' ({failed} failed)' if failed else ''} | running: {', '.join(parts) or '-'}")
    if rate_den:
        rate = rate_num / rate_den  # seconds per unit of job_cost, from the epochs seen so far
        for job in running + waiting:
            epochs, _ = _progress(job)
            remaining += (job.config.epochs - epochs) * job_cost(job) * rate
        line += f" | about {format_seconds(remaining / max(1, min(workers, len(running) + len(waiting))))} left"
    return line


def plan_batch(jobs: list[Job], echo=print) -> tuple[dict, list[Job]]:
    """(outcomes of the jobs that need no run: skipped, busy, stale, inconsistent; the jobs to run). Planning
    reads and never writes: a finished run's leftover checkpoint is removed by run_job, holding the folder's lock,
    after checking it once more. Every decision is echoed, stale, corrupt and inconsistent ones with their files."""
    outcomes, todo = {}, []
    for job in jobs:
        state, out = job_state(job), job.output_dir
        if state.state == "finished" and not (out / CHECKPOINT_FILE).exists():
            outcomes[job.key] = {"key": job.key, "status": "skipped", "epochs": state.epochs,
                                    "final": read_result(out)["final"]}
        elif is_locked(out):
            outcomes[job.key] = {"key": job.key, "status": "busy",
                                    "error": "another process is training this run now"}
        elif state.state in LEFT_ALONE:
            outcomes[job.key] = {"key": job.key, "status": state.state,
                                    "error": "; ".join(state.problems), "files": [str(f) for f in state.files]}
            echo(f"  {job.key}: {state.state}, left alone ({'; '.join(state.problems)}; files: "
                 f"{', '.join(map(str, state.files))})")
        else:
            todo.append(job)
            note = {"partial": f"resuming after epoch {state.epochs}", "new": "new",
                    "finished": "finished; its checkpoint agrees with the result and will be removed",
                    "corrupt": "unreadable " + ", ".join(map(str, state.files)) + ": it will be moved aside to "
                               "<name>.corrupt-<time> and the run restarted without it"}[state.state]
            echo(f"  {job.key}: {note}")
    count = lambda *statuses: sum(o["status"] in statuses for o in outcomes.values())  # noqa: E731
    echo(f"{len(jobs)} runs selected: {count('skipped')} already finished (skipped), {count('busy')} busy "
         f"elsewhere, {count(*LEFT_ALONE)} inconsistent, stale, unverified or of a newer format (left alone), "
         f"{len(todo)} to run")
    return outcomes, todo


# What a worker of an existing cluster must manage before it is given a run: import this project (installed in
# its environment, e.g. pip install -e <repository>) and papermill, and see the experiment notebook at the path
# the jobs name (the repository at the same path as here). Sent as source to exec, which every worker can
# unpickle: a function of this package would kill a worker that cannot import it, and leave its task waiting.
WORKER_PROBE = """
import os
import papermill
import reproduction.runner
if not os.path.isfile({notebook!r}):
    raise FileNotFoundError("no experiment notebook at {notebook}: the workers must see this repository at that path")
"""
WORKER_WAIT = 60.0  # seconds an existing cluster may go without a worker that can run the jobs before they fail


class ClusterError(RuntimeError):
    """No worker of the Dask cluster can run the jobs (none connected, or none can import the project)."""


def _remote_workers(client, scheduler: str, notebook: str, worker_wait: float, echo) -> list[str]:
    """The addresses of the workers of the cluster at `scheduler` that can run jobs (WORKER_PROBE), after waiting
    up to `worker_wait` seconds for one to connect; the others are named with their error. ClusterError if none."""
    try:
        client.wait_for_workers(1, timeout=worker_wait)
    except TimeoutError:
        raise ClusterError(f"no Dask worker connected to the scheduler at {scheduler} within {worker_wait:.0f} s; "
                           f"start one on a cluster machine: dask worker {scheduler}") from None
    answers = client.run(exec, WORKER_PROBE.format(notebook=notebook), on_error="return")
    good = [worker for worker, answer in answers.items() if not isinstance(answer, BaseException)]
    bad = [f"{worker}: {describe_error(answer)}" for worker, answer in answers.items()
           if isinstance(answer, BaseException)]
    for line in bad:
        echo(f"  Dask worker {line}: it is given no run")
    if not good:
        raise ClusterError(f"no Dask worker at {scheduler} can run this project ({'; '.join(bad)}); install it in "
                           f"the workers' environment (pip install -e <repository>, the repository at the same path "
                           f"as here) and restart them")
    return good


def _start_cluster(scheduler: str | None, n_workers: int, echo, notebook: str = str(NOTEBOOK),
                   worker_wait: float = WORKER_WAIT):
    """A Dask client: on the scheduler at `scheduler`, else on a new local cluster of `n_workers` processes,
    one thread each. Returns (client, workers, close): the workers to send runs to (None: any), and close;
    close(interrupted=True) stops the running jobs at once. ClusterError if no worker of `scheduler` can run the
    experiment `notebook`."""
    import logging

    import distributed

    if scheduler:
        client = distributed.Client(scheduler, timeout=30)
        echo(f"sending runs to the Dask cluster at {scheduler}")
        try:
            workers = _remote_workers(client, scheduler, notebook, worker_wait, echo)
        except BaseException:
            client.close()
            raise

        def close_remote(interrupted=False):
            # a remote worker cannot be told to stop a running notebook: the jobs already running go on to
            # their end (or until their workers are stopped); none of the queued ones starts
            client.close()
        return client, workers, close_remote
    # The worker processes inherit an ignored SIGINT: Ctrl-C is the runner's to handle (it ends the workers and,
    # with them, the notebook kernels, which exit when their parent dies).
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
    try:
        cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                           memory_limit=0, dashboard_address=":0", silence_logs=logging.ERROR)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    client = distributed.Client(cluster)
    client.run(_discard_stderr)
    echo(f"running in {n_workers} local worker process(es)")

    def close(interrupted=False):
        if interrupted:  # now: a graceful close lets each worker finish its task for another 4 s or so
            import multiprocessing

            for process in multiprocessing.active_children():
                if process.name.startswith("Dask Worker process"):
                    process.terminate()
        client.close()
        cluster.close()
    return client, None, close


def _discard_stderr() -> None:
    """In a local worker process: send its stderr, which the notebook kernels it starts inherit, to /dev/null.
    Kernels log noise there ("Kernel is running over TCP without encryption"); a job's failure comes back in
    its outcome and its executed notebook."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def _main_thread() -> bool:
    """Whether this is the main thread (only it may install signal handlers)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum, frame):
    """SIGTERM handler: stop the batch as Ctrl-C does."""
    raise KeyboardInterrupt(f"signal {signum}")


# A run's timeout (run_timeout): TIMEOUT_FACTOR times the wall time its remaining epochs should take at
# SECONDS_PER_COST per unit of job_cost, plus TIMEOUT_BASE for starting a kernel, compiling the engine and loading
# the data. SECONDS_PER_COST is about 4 times the median of the committed paper-profile runs (2.6e-10 s, their
# wall_seconds per epoch over job_cost), so only a run that hangs or lost its worker reaches the timeout.
SECONDS_PER_COST = 1e-9
TIMEOUT_FACTOR = 5
TIMEOUT_BASE = 900.0
# The reference engine (ebp_lib's numpy, float64) is this many times slower an epoch than the fast one: binary-200
# took 87-120 s an epoch against about 2.3 s, both on a loaded 2-core AMD EPYC. Other engines count as the fast one.
ENGINE_SLOWDOWN = {"reference": 50.0}


def run_timeout(job: Job) -> float:
    """Seconds the runner waits for `job` once sent to a worker before failing it (run_batch's run_timeout
    overrides it): a bound from its cost estimate, job_cost, for the epochs it has left, times its engine's
    ENGINE_SLOWDOWN."""
    epochs_left = max(0, job.config.epochs - _progress(job)[0])
    slowdown = ENGINE_SLOWDOWN.get(job.engine, 1.0)
    return TIMEOUT_BASE + TIMEOUT_FACTOR * epochs_left * job_cost(job) * SECONDS_PER_COST * slowdown


def _workers_alive(client, workers: list[str]) -> bool:
    """Whether any of `workers` is still connected to the client's scheduler."""
    try:
        return bool(set(client.scheduler_info(n_workers=-1)["workers"]) & set(workers))
    except Exception:
        return False


@dataclass
class Batch:
    """A batch while it runs: `outcomes` by job key, the `queue` of tasks not yet sent (a task: one job, or a group
    trained side by side), the `running` tasks by their future with their `deadlines` (time, limit in seconds),
    and the empty-cluster watch (`checked`: when it last asked the scheduler; `lonely_since`: since when no usable
    worker is connected)."""
    outcomes: dict
    queue: list
    echo: object = print
    running: dict = field(default_factory=dict)
    deadlines: dict = field(default_factory=dict)
    checked: float = 0.0
    lonely_since: float | None = None

    def fail(self, job: Job, error: str) -> None:
        self.outcomes[job.key] = {"key": job.key, "status": "failed", "error": error,
                                     "notebook": notebook_of(job)}
        self.echo(f"  {job.key}: failed ({error})")

    def running_jobs(self) -> list[Job]:
        return [job for task in self.running.values() for job in task]


def plan_tasks(todo: list[Job], grouping, echo) -> list[list[Job]]:
    """The tasks of the jobs to run: one each, or with `grouping` the JAX engine's jobs that differ only in their
    seed in one task (grouping.group_jobs), said so."""
    if grouping is None:
        return [[job] for job in todo]
    tasks = grouping.group_jobs(todo)
    for task in tasks:
        if len(task) > 1:
            echo(f"  trained together (engine {task[0].engine}): {', '.join(job.key for job in task)}")
    return tasks


def submit(batch: Batch, client, workers, window: int, grouping, run_timeout_s: float | None) -> None:
    """Send queued tasks until `window` run at once, each with its deadline (run_timeout summed over its jobs, or
    `run_timeout_s`), to `workers` only where the cluster is an existing one."""
    while batch.queue and len(batch.running) < window:
        task = batch.queue.pop(0)
        if len(task) > 1:
            function, argument, name = grouping.run_group, task, f"group-{task[0].key}"
        else:
            function, argument, name = run_job, task[0], f"run-{task[0].key}"
        future = client.submit(function, argument, pure=False, key=f"{name}-{os.urandom(4).hex()}",
                               **({} if workers is None else {"workers": workers, "allow_other_workers": False}))
        limit = run_timeout_s or sum(run_timeout(job) for job in task)
        batch.running[future], batch.deadlines[future] = task, (time.time() + limit, limit)


def collect(batch: Batch) -> bool:
    """Record the outcomes of the tasks done (a worker's exception fails each job of its task); whether any was."""
    done = [f for f in batch.running if f.done()]
    for future in done:
        task = batch.running.pop(future)
        try:
            answers = future.result()
            answers = answers if isinstance(answers, list) else [answers]
        except Exception as err:
            answers = [{"key": job.key, "status": "failed", "error": f"worker error: {describe_error(err)}",
                        "notebook": notebook_of(job)} for job in task]
        for job, outcome in zip(task, answers):
            batch.outcomes[job.key] = outcome
            batch.echo(f"  {job.key}: {outcome['status']}"
                       + (f" ({outcome['note']})" if outcome.get("note") else "")
                       + (f" ({outcome['error']})" if outcome["status"] in ("failed", *LEFT_ALONE) else ""))
    return bool(done)


def expire(batch: Batch, now: float, run_timeout_s: float | None) -> bool:
    """Fail (and cancel) every running task past its deadline, naming the timeout; whether any was."""
    late = [f for f in batch.running if now > batch.deadlines[f][0]]
    for future in late:
        task, limit = batch.running.pop(future), batch.deadlines[future][1]
        future.cancel()
        for job in task:
            origin = "given by --run-timeout" if run_timeout_s else "from its cost estimate; --run-timeout changes it"
            batch.fail(job, f"no answer from its Dask worker within {format_seconds(limit)} (the timeout of this "
                            f"{'group' if len(task) > 1 else 'run'}, {origin}): the worker hung, died or was lost; "
                            f"if it is still training, it holds the run's lock and a later batch resumes the run")
    return bool(late)


def watch_workers(batch: Batch, now: float, client, workers: list[str], scheduler: str, worker_wait: float) -> bool:
    """On an existing cluster, every 5 s: once none of `workers` has been connected for `worker_wait` seconds,
    fail the running and queued tasks, saying why; whether it did."""
    if now - batch.checked < 5:
        return False
    batch.checked = now
    batch.lonely_since = None if _workers_alive(client, workers) else (batch.lonely_since or now)
    if batch.lonely_since is None or now - batch.lonely_since < worker_wait:
        return False
    why = (f"none of the Dask workers that could run it ({', '.join(workers)}) has been connected to {scheduler} "
           f"for {worker_wait:.0f} s: they died or left")
    for future in list(batch.running):
        future.cancel()
        for job in batch.running.pop(future):
            batch.fail(job, why)
    for job in [job for task in batch.queue for job in task]:
        batch.fail(job, why)
    batch.queue = []
    return True


def run_batch(jobs: list[Job], n_jobs: int | None = None, scheduler: str | None = None,
              progress_every: float = 30.0, echo=print, run_timeout_s: float | None = None,
              worker_wait: float = WORKER_WAIT, grouping=None) -> list[dict]:
    """Run `jobs`: finished ones are skipped, others resume from their checkpoint. Returns one outcome per
    job (status skipped, busy, stale, inconsistent, finished, failed, or interrupted by Ctrl-C/SIGTERM), in job
    order.

    The jobs run on a Dask cluster: `n_jobs` local worker processes (default: the number of cores) on a
    distributed.LocalCluster, or the existing cluster at `scheduler` (its workers must run this project's
    environment, with this package installed, and see the repository and the data folder at the same paths;
    the workers that cannot are named and given no run). At most `n_jobs` tasks are sent at once (on a cluster:
    by default as many as its workers have threads), in table order. A task is one job, or with `grouping` (the
    module reproduction.group, passed in so that this module does not import it: it imports this one) the jobs of
    the JAX engine that differ only in their seed, trained side by side in one task (grouping.group_jobs, run by
    grouping.run_group; each run's files are those it would have alone). The runner never waits forever:
    a task without an answer after its timeout (run_timeout summed over its jobs, or `run_timeout_s` seconds)
    fails, as do the tasks of a cluster left without a usable worker for `worker_wait` seconds; the batch goes on.
    """
    outcomes, todo = plan_batch(jobs, echo)
    if not todo:
        return [outcomes[j.key] for j in jobs]
    batch = Batch(outcomes, plan_tasks(todo, grouping, echo), echo)
    start, last = time.time(), 0.0
    handle_sigterm = _main_thread()
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_interrupt) if handle_sigterm else None
    close, interrupted = None, False
    try:
        n_local = min(n_jobs or os.cpu_count() or 1, len(batch.queue))
        try:
            client, workers, close = _start_cluster(scheduler, n_local, echo, todo[0].notebook, worker_wait)
        except ClusterError as err:
            for job in todo:
                batch.fail(job, str(err))
            return [outcomes[j.key] for j in jobs]
        if workers is None:
            window = n_local
        else:
            threads = client.nthreads()
            window = n_jobs or max(1, sum(threads.get(w, 0) for w in workers))
        while batch.queue or batch.running:
            changed = collect(batch)
            now = time.time()
            changed = expire(batch, now, run_timeout_s) or changed
            if workers is not None:
                changed = watch_workers(batch, now, client, workers, scheduler, worker_wait) or changed
            submit(batch, client, workers, window, grouping, run_timeout_s)
            if changed or time.time() - last >= progress_every:
                echo(status_line(time.time() - start, todo, outcomes, batch.running_jobs(), window))
                last = time.time()
            time.sleep(0.5)
    except KeyboardInterrupt:
        interrupted = True
        echo("interrupted: stopping the running jobs (their checkpoints are kept; rerun the same command to "
             "resume)")
        for job in todo:
            outcomes.setdefault(job.key, {"key": job.key, "status": "interrupted",
                                             "epochs": _progress(job)[0]})
    finally:
        if handle_sigterm:
            signal.signal(signal.SIGTERM, previous_sigterm)
        if close is not None:
            close(interrupted)
    return [outcomes[j.key] for j in jobs]


def notebook_of(job: Job) -> str:
    """The executed notebook to read for a failed job: its run's, or a note that there is none yet."""
    executed = job.output_dir / EXECUTED_FILE
    return str(executed) if executed.exists() else f"none yet ({executed} was not written)"


def exit_status(outcomes: list[dict]) -> int:
    """130 if interrupted, 1 if a run failed or was left alone (LEFT_ALONE), else 0 (skipped and busy runs are
    not failures)."""
    if any(o["status"] == "interrupted" for o in outcomes):
        return 130
    return 1 if any(o["status"] in ("failed", *LEFT_ALONE) for o in outcomes) else 0


def summary(jobs: list[Job], outcomes: list[dict]) -> str:
    """The end-of-batch report: one line per run, then every failure with the path of its notebook, and every
    inconsistent run with its files."""
    lines = [f"{'run':<32} {'status':<12} {'epochs':>6} {'EBP-P %':>8} {'EBP-D %':>8}  rows"]
    for job, o in zip(jobs, outcomes):
        final = o.get("final") or {}
        p = f"{100 * final['test_ebp_p']:.2f}" if final else "-"
        d = f"{100 * final['test_ebp_d']:.2f}" if final else "-"
        lines.append(f"{job.key:<32} {o['status']:<12} {o.get('epochs', '-')!s:>6} {p:>8} {d:>8}  "
                     f"{'; '.join(job.cells)}")
    counts = {s: sum(o["status"] == s for o in outcomes) for s in
              ("finished", "skipped", "failed", *LEFT_ALONE, "busy", "interrupted")}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "nothing to do")
    for o in outcomes:
        if o.get("note"):
            lines.append(f"NOTE {o['key']}: {o['note']}")
        if o["status"] == "failed":
            error = str(o.get("error", "?")).replace("\n", "\n       ")
            lines.append(f"FAILED {o['key']}: {error}\n       notebook: {o.get('notebook', '?')}")
        if o["status"] == "inconsistent":
            lines.append(f"INCONSISTENT {o['key']}: {o.get('error', '?')}\n       files: "
                         f"{', '.join(o.get('files', []))}\n       none is touched: restore the result that "
                         f"matches the others, or move the run's folder aside to retrain it")
        if o["status"] in ("stale", "unverified", "newer"):
            lines.append(f"{o['status'].upper()} {o['key']}: {o.get('error', '?')}")
    return "\n".join(lines)
