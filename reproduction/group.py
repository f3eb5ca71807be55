"""Runs that differ only in their seed, trained side by side in one task (scripts/run_tables.py --engine jax
--group-seeds).

A group is the runs of a batch that share every parameter but the seed, and the engine (group_jobs). run_group, a
worker's task, first trains them together with the JAX engine (train_together): epoch after epoch, one
ebp_jax.group_epoch call trains every run of the group (vmap over the runs), each run from its own generator (its
data order, its dropout masks) and with its own arithmetic, bit for bit what engine="jax" computes for the run
alone on the CPU (tests/test_group.py). After every epoch each run's checkpoint (ebp_train.end_epoch: fit's
checkpoint) and result.json (folder.EpochRecorder) are written, exactly what the experiment notebook writes after an
epoch. Then run_group executes each run's experiment notebook as any run's (runner.run_job, with the run option
engine="jax"): it finds the checkpoint holding every epoch, trains nothing, and checks and records the run as
always. So a grouped run has the same folder, result.json (engine "jax"), checkpoint, executed notebook and resume
as the run trained alone by `--engine jax`, and the same numbers.

Killed, a group leaves each run with its checkpoint after the last epoch it finished; runs may then be one epoch
apart (killed while one epoch's checkpoints were being written). Run again, the runs that lag train first, side by
side, until all are at the same epoch, then all together; as each run's epochs are those it trains alone, where the
group was interrupted changes nothing. A run the group cannot train (busy in another process, finished, stale,
inconsistent, a checkpoint of another engine, a step that is not finite) is left to its notebook, which handles it
as it handles any run: skips it, reports it, or trains it alone and stops with the same error.

A run's train_seconds per epoch is its share of the group's epoch: the group's training time over its runs.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import ebp_checkpoint
import ebp_train
from reproduction.folder import CHECKPOINT_FILE, EpochRecorder, RunBusyError, UnsafeLockError, open_output_dir
from reproduction.job import Job, job_environment
from reproduction.records import describe_error
from reproduction.runner import prepare_locked, run_job

GROUPED_ENGINES = ("jax",)  # the engines that train a group's runs side by side (ebp_jax.group_epoch)
N_TRAIN_EVAL = 10000  # training images evaluated after each epoch: fit's default, which the notebook uses


def group_key(job: Job) -> str:
    """What the runs of one group share: every parameter but the seed and the output folder, the engine (a job
    of another engine is never grouped: a group of its own), the notebook and the environment."""
    shared = {k: v for k, v in job.config.parameters().items() if k not in ("seed", "output_dir")}
    return json.dumps([shared, job.engine, job.notebook, job.environment,
                       None if job.engine in GROUPED_ENGINES else job.key], sort_keys=True)


def group_jobs(jobs: list[Job]) -> list[list[Job]]:
    """The jobs as groups (group_key), in the order of their first job; within a group, in job order."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(group_key(job), []).append(job)
    return list(groups.values())


@dataclass
class _Run:
    """A run of a group while it trains: its job, the lock of its folder, and fit's state (start_run)."""
    job: Job
    lock: object
    net: object = None
    history: list = None
    rng: object = None
    run: dict = None
    recorder: EpochRecorder = None


def _take(job: Job, left: dict) -> _Run | None:
    """Lock the run's folder and prepare it as run_job does (runner.prepare_locked); the run, holding its lock, if
    it is new or partial, else None with the reason in `left` (its notebook will skip or report it)."""
    try:
        _, lock = open_output_dir(job.output_dir)
    except (RunBusyError, UnsafeLockError, OSError) as err:
        left[job.key] = describe_error(err)
        return None
    try:
        prepared = prepare_locked(job)
    except Exception as err:
        lock.close()
        left[job.key] = describe_error(err)
        return None
    if prepared.get("status"):
        lock.close()
        left[job.key] = prepared["status"]
        return None
    return _Run(job, lock)


def _start(run: _Run, left: dict) -> bool:
    """The run's network, history and generator, new or from its checkpoint, as the notebook starts it (its
    RunConfig's network and checkpoint configuration, through ebp_train.start_run, which the notebook's fit calls);
    False, its lock released and the reason in `left`, if its checkpoint is refused (another engine or run,
    unreadable): its notebook reports that."""
    config, out = run.job.config, run.job.output_dir
    try:
        run.net, run.history, run.rng, run.run = ebp_train.start_run(
            config.network(), config.seed, config.batch_size, "jax", config.checkpoint_config(),
            out / CHECKPOINT_FILE)
    except (ebp_checkpoint.CheckpointError, ebp_checkpoint.CheckpointMismatchError) as err:
        run.lock.close()
        left[run.job.key] = describe_error(err)
        return False
    run.recorder = EpochRecorder(out, config, out / CHECKPOINT_FILE, engine="jax", echo=lambda *_: None)
    return True


def train_together(jobs: list[Job]) -> dict[str, str]:
    """Train the runs of one group (group_jobs) side by side to their last epoch, holding every run's lock, writing
    after every epoch each run's checkpoint and result.json as the notebook does. Runs at fewer epochs train first
    (see the module's docstring). Returns {key: why} for the runs it left to their notebook."""
    if any(job.engine not in GROUPED_ENGINES for job in jobs):
        raise ValueError(f"only runs of the engines {', '.join(GROUPED_ENGINES)} train together")
    left: dict[str, str] = {}
    runs = [run for run in (_take(job, left) for job in jobs) if run is not None]
    try:
        if not runs:
            return left
        config = runs[0].job.config  # the group's runs differ in their seed only (group_key)
        try:
            data = config.load_data()
        except Exception as err:  # its notebooks load the data again and report what fails
            for run in runs:
                left[run.job.key] = f"the group could not load its data ({describe_error(err)})"
            return left
        runs = [run for run in runs if _start(run, left)]
        for run in runs:  # the session's record in result.json names the runs it trained beside
            run.recorder.session["group"] = [other.job.key for other in runs]
        while True:
            todo = [run for run in runs if len(run.history) < config.epochs]
            if not todo:
                return left
            epoch = min(len(run.history) for run in todo)
            group = [run for run in todo if len(run.history) == epoch]
            start = time.perf_counter()
            errors = _group_epoch(group, data, epoch)
            seconds = (time.perf_counter() - start) / len(group)
            for run, error in zip(group, errors):
                if error is not None:  # its checkpoint holds the epochs before: the notebook stops where it stops
                    runs.remove(run)
                    run.lock.close()
                    left[run.job.key] = f"stopped in epoch {epoch + 1}: {error}"
                    continue
                record = ebp_train.end_epoch(run.net, data, seconds, run.history, run.rng, N_TRAIN_EVAL, "jax",
                                           run.job.output_dir / CHECKPOINT_FILE, run.run)
                run.recorder(record)
    finally:
        for run in runs:
            run.lock.close()


def _group_epoch(group: list[_Run], data, epoch: int) -> list:
    """One epoch of the runs of `group`, side by side (ebp_jax.group_epoch); one error or None per run."""
    import ebp_jax  # JAX is imported only where a group trains

    return ebp_jax.group_epoch([run.net for run in group], data.x_train, data.y_train,
                               group[0].job.config.batch_size, [run.rng for run in group], epoch)


def run_group(jobs: list[Job]) -> list[dict]:
    """A worker's task for one group: train its runs together (train_together), then execute each run's experiment
    notebook (runner.run_job), which records it. One outcome per job, in order; a run the group left to its notebook
    says why in its outcome's note. Should the group itself fail, each notebook trains its run alone."""
    try:
        with job_environment(jobs[0]):  # the data folder, threads, and JAX's memory (reproduction.job.JAX_VARS)
            left = train_together(jobs)
    except Exception as err:
        left = {job.key: f"the group failed ({describe_error(err)})" for job in jobs}
    outcomes = []
    for job in jobs:
        outcome = run_job(job)
        if job.key in left and outcome["status"] not in ("skipped", "busy"):
            why = f"not trained in its group: {left[job.key]}"
            outcome["note"] = f"{outcome['note']}; {why}" if outcome.get("note") else why
        outcomes.append(outcome)
    return outcomes
