"""The harness of the tuned baselines: the backprop baseline (reproduction.backprop) and EBP's successors
(reproduction.successors).

Both train at one protocol shape: a grid scored on a validation split, then the chosen point trained with a halving
schedule and early stopping, resumable, its test error that of the best-validation epoch. What their runs do alike
is written here once: what a record's parameters give (expected, for records.record_problems), the fields every
record of theirs has (record), the folder a run resumes and the session that rewrites its record (open_run, Session),
the one data split kept in memory (one_split), a checkpoint resumed or set aside (resume), a run's progress for
--list (run_state), and the scripts' command over runs (command, run_jobs). What differs stays with each: the
parameters, the grid's points, the trainer and its checkpoint.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import ebp_checkpoint
from reproduction import records
from reproduction.folder import RESULT_FILE, differences, move_aside

FULL_TRAIN = 60000           # MNIST and Fashion-MNIST both have 60,000 training images
TRAIN_ERROR_IMAGES = 10000   # training error on the first 10,000 fit images, as EBP's runs record it


def expected(data: dict, read_parameters, protocol_label, describe_protocol) -> records.Expected | list[str]:
    """What a tuned baseline's record gives (records.EXPECTED): its parameters as `read_parameters` (the method's
    make_parameters on a record's parameters) validates them, the protocol, its description and the image counts
    they give, the final errors of the best-validation epoch, at most max_epochs epochs; or the problem that stops
    the check (parameters that do not validate, a best epoch outside the history)."""
    try:
        valid = read_parameters(data["parameters"])
    except (ValueError, TypeError) as err:
        return [f"parameters: {err}"]
    n_images = valid["n_train"] or FULL_TRAIN
    derived = {"protocol": protocol_label(valid), "protocol_description": describe_protocol(valid),
               "n_train_images": n_images - valid["n_validation"], "n_validation_images": valid["n_validation"]}
    best = data["best_epoch"]
    if best is not None and not 1 <= best <= len(data["history"]):
        return [f"best_epoch: {best}, but the history holds {len(data['history'])} epochs"]
    final = None if best is None else {k: data["history"][best - 1].get(k)
                                       for k in records.HISTORY_ERRORS[data["method"]]}
    return records.Expected(valid, derived, final, "best-validation epoch", valid["max_epochs"], may_stop_early=True)


def record(method: str, params: dict, protocol: tuple[str, str], grid: dict, history: list[dict],
           best: dict | None, finished: bool, sessions: list[dict], packages, grid_seconds: bool = True,
           **extra) -> dict:
    """The result.json of a tuned baseline's run: parameters, `protocol` (its label and description), `grid` (its
    points, rule and choice), per-epoch history, the final errors of the `best` (best-validation) epoch, the
    method's `extra` fields after them, and the sessions. train_seconds counts the grid's training only where
    `grid_seconds` (a run that adopts another run's grid did not train it)."""
    n_images = params["n_train"] or FULL_TRAIN
    return {
        "format": records.RECORD_FORMAT, "method": method, "parameters": params,
        "protocol": protocol[0], "protocol_description": protocol[1],
        "finished": bool(finished),
        "phase": "finished" if finished else ("training" if grid["chosen"] else "grid"),
        "grid": grid,
        "epochs_done": len(history), "best_epoch": None if best is None else best["epoch"],
        "stopped_early": bool(finished and len(history) < params["max_epochs"]),
        "n_train_images": n_images - params["n_validation"], "n_validation_images": params["n_validation"],
        "final": None if best is None else {k: best[k] for k in records.HISTORY_ERRORS[method]},
        **extra, "history": history,
        "train_seconds": round(sum(p["train_seconds"] for p in grid["points"]) * grid_seconds
                               + sum(h["train_seconds"] for h in history), 2),
        "git_commit": sessions[-1]["git_commit"], "git_dirty": any(s.get("git_dirty") for s in sessions),
        "versions": records.package_versions(packages), "sessions": sessions,
    }


def open_run(folder: Path, params: dict) -> dict | None:
    """The previous record of `folder` if it is this run's (or None); ValueError for an unreadable record or a
    folder of another run."""
    try:
        previous = records.read_record(folder / RESULT_FILE)
    except FileNotFoundError:
        previous = None
    except records.NewerRecordError as err:  # left alone: a newer version of the project reads it
        raise ValueError(str(err)) from None
    except records.RecordError as err:
        raise ValueError(f"{err}; move it aside to rerun this run") from None
    saved = (previous or {}).get("parameters") or {}
    if previous is not None and saved != params:
        raise ValueError(f"{folder} holds a run with other parameters "
                         f"({differences(saved, params, sorted({*saved, *params}))}); move that folder away or run "
                         f"with the same parameters to resume it")
    return previous


def new_session(code: dict) -> dict:
    """The record of one start or resumption of a run: when, on which CPU, from which code."""
    return {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": records.cpu_model(), **code}


class Session:
    """One start or resumption of a run in `folder`: the code state checked (records.code_state) and the folder's
    previous record read (open_run: None for a new run) before anything is written; `grid`, the grid points scored
    so far (the caller appends new ones); `session`, the entry of this start or resumption;
    write(history, state, finished, **extra) rewrites folder/result.json with make_record(params, grid, history,
    state, finished, sessions, **extra)."""

    def __init__(self, folder, params: dict, allow_dirty: bool, make_record):
        code = records.code_state(allow_dirty)
        self.folder, self.params, self.make_record = Path(folder), params, make_record
        self.previous = open_run(self.folder, params)
        self.sessions = list((self.previous or {}).get("sessions", []))
        self.session = new_session(code)
        self.started = time.time()
        self.grid = list((self.previous or {}).get("grid", {}).get("points", []))

    def write(self, history: list[dict], state, finished: bool = False, **extra) -> dict:
        current = {**self.session, "wall_seconds": round(time.time() - self.started, 2), "to_epoch": len(history)}
        record = self.make_record(self.params, self.grid, history, state, finished, self.sessions + [current],
                                  **extra)
        self.folder.mkdir(parents=True, exist_ok=True)
        records.write_record(self.folder / RESULT_FILE, record)
        return record


def one_split(load):
    """data_for(preprocessing): load(preprocessing), kept until another preprocessing is asked for (one split of
    the data in memory at a time)."""
    cache: dict[str, dict] = {}

    def data_for(preprocessing):
        if preprocessing not in cache:
            cache.clear()
            cache[preprocessing] = load(preprocessing)
        return cache[preprocessing]
    return data_for


def resume(path: Path, load, echo):
    """load(path) if a checkpoint lies at `path`, else None; a checkpoint that does not load (CheckpointError) is
    moved aside and said so through `echo`, and None returned: training restarts from epoch 0."""
    if path.exists():
        try:
            return load(path)
        except ebp_checkpoint.CheckpointError as err:
            echo(f"{err}; moved aside to {move_aside(path).name}, training restarts from epoch 0")
    return None


def epoch_entry(epoch: int, step: dict, error, data: dict, loss: float | None, seconds: float,
                cpu_seconds: float | None = None, more=None) -> dict:
    """One epoch of a run's history: its number, `step` (the step size it trained with, e.g. {"learning_rate": r}),
    the validation, test and training error (the first TRAIN_ERROR_IMAGES fit images) as error(x, y) gives them, the
    training loss (None for a method whose epoch computes none), wall seconds and, where given, the process's CPU
    seconds (core-seconds: unlike wall time, not stretched by other work on the machine nor by a paused process).
    more(x, y), if given, is {name: error} of the net's other outputs (EBP-P beside EBP-D), recorded as
    "<split>_error_<name>"."""
    n_eval = min(len(data["x_fit"]), TRAIN_ERROR_IMAGES)
    splits = {"validation": (data["x_val"], data["y_val"]), "test": (data["x_test"], data["y_test"]),
              "train": (data["x_fit"][:n_eval], data["y_fit"][:n_eval])}
    errors = {f"{split}_error": error(x, y) for split, (x, y) in splits.items()}
    if more is not None:
        errors.update({f"{split}_error_{name}": value for split, (x, y) in splits.items()
                       for name, value in more(x, y).items()})
    return {"epoch": epoch, **step, **errors,
            "loss": None if loss is None else round(loss, 6), "train_seconds": round(seconds, 2),
            **({} if cpu_seconds is None else {"cpu_seconds": round(cpu_seconds, 2)})}


def run_state(folder, params: dict, n_grid: int, finished) -> str:
    """A short description of a run folder's progress, for the scripts' --list; `n_grid` grid points in all,
    `finished(result)` what a finished run says."""
    try:
        result = records.read_record(Path(folder) / RESULT_FILE)
    except FileNotFoundError:
        return "not started"
    except records.NewerRecordError:
        return "result.json of a newer format (left alone: update the code to read it)"
    except records.RecordError as err:
        return f"unreadable result.json ({str(err).removeprefix(str(Path(folder) / RESULT_FILE) + ': ')})"
    if result.get("parameters") != params:
        return "other parameters (not resumable with these)"
    if result.get("finished"):
        return finished(result)
    if result["grid"]["chosen"] is None:
        return f"grid {len(result['grid']['points'])}/{n_grid}"
    return f"epoch {result['epochs_done']}/{params['max_epochs']} (at most)"


def command(args, select_jobs, run, run_state, name_width: int) -> int:
    """The scripts' main once their arguments `args` are parsed: the runs select_jobs(args) picks (exit status 2
    naming a bad choice), listed with their progress if args.list, else run (run_jobs)."""
    try:
        jobs = select_jobs(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.list:
        for params, folder in jobs:
            print(f"{params['dataset']:>13} {folder.name:<{name_width}} {run_state(folder, params)}")
        return 0
    return run_jobs(jobs, run, run_state, args.allow_dirty, args.data_dir)


def run_jobs(jobs, run, run_state, allow_dirty: bool, data_dir=None) -> int:
    """The scripts' loop: refuse a dirty tree unless `allow_dirty` (exit status 2), then run every (params, folder)
    of `jobs` with `run`, a run's fault (ValueError, FloatingPointError) reported and the rest run; 1 if any failed,
    else 0."""
    try:
        records.code_state(allow_dirty)
    except records.DirtyTreeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    failed = 0
    for params, folder in jobs:
        try:
            run(params, folder, data_dir=data_dir, allow_dirty=allow_dirty)
        except (ValueError, FloatingPointError) as err:  # one run's fault: report it, go on with the rest
            print(f"error: {err}", file=sys.stderr)
            failed += 1
            continue
        print(f"{params['dataset']} {folder.name}: {run_state(folder, params)}")
    return 1 if failed else 0
