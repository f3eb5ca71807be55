"""The harness of the tuned baselines: the backprop baseline (reproduction.backprop) and EBP's successors
(reproduction.successors), one protocol for both.

Both train at one protocol shape: a grid scored on a validation split, then the chosen point trained with a halving
schedule and early stopping, resumable, its test error that of the best-validation epoch. That protocol is written
here once: its values, validated once (TunedConfig: the split, batch, grid epochs, schedule and seed, every problem
listed at once), the split (load_split) and epoch order (epoch_order), the grid (grid_keys, score_point) and its
choice (choose_point), the schedule (schedule_step), and the one loop that runs it (run): grid, choice, resume,
epochs with halving and early stop, the best epoch's evaluation, the record. A baseline brings its adapter (a
Baseline: its parameters' record, its trainer and checkpoint) and a Trainer (initial state, one epoch, an error).
Also here: what a record's parameters give (expected, for records.record_problems), the fields every record of
theirs has (record), the folder a run resumes and the session that rewrites its record (open_run, Session), a
checkpoint resumed or set aside (resume), a run's progress for --list (run_state), and the scripts' command over
runs (command, run_jobs).
"""
from __future__ import annotations

import functools
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

import numpy as np

import ebp_checkpoint
import ebp_data
from reproduction import architectures, records
from reproduction.run_files import CHECKPOINT_FILE, RESULT_FILE, differences, move_aside

FULL_TRAIN = ebp_data.train_size()  # MNIST and Fashion-MNIST both have 60,000 training images
TRAIN_ERROR_IMAGES = 10000   # training error on the first 10,000 fit images, as EBP's runs record it
DATASETS = tuple(ebp_data.DATASETS)
PREPROCESSINGS = ("unit", "pixel", "global")  # ebp_data.standardise's, statistics of the fit part only
# The protocol's values every tuned baseline has, each validated by TunedConfig.
PROTOCOL_KEYS = ("preprocessing_grid", "batch_size", "grid_epochs", "max_epochs", "patience", "stop_patience",
                 "n_validation", "n_train", "seed")


# ----------------------------------------------------------------------------------------------------------
# The protocol's values: validated once, every problem listed
# ----------------------------------------------------------------------------------------------------------

def hidden_layers(architecture: str) -> tuple[int, ...]:
    """Hidden layer sizes of a dense architecture name as in the EBP runs ("800", "200-200"); ValueError for a
    name of another kind (reproduction.architectures.dense_sizes: the baselines are dense perceptrons)."""
    return architectures.dense_sizes(architecture)


def is_count(value, low: int = 1) -> bool:
    """Whether `value` is an integer (not a bool) of at least `low`."""
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= low


def positive_int(name: str, value) -> int:
    if not is_count(value):
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)


def check_choice(what: str, value, choices) -> None:
    """ValueError naming the choices if `value` (a run's `what`: dataset, method, ...) is not one of them."""
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; choose one of {list(choices)}")


def check_dataset(dataset: str) -> None:
    check_choice("dataset", dataset, DATASETS)


def check_overrides(overrides, overridable) -> None:
    """ValueError naming the overridable values if `overrides` names another."""
    unknown = set(overrides) - set(overridable)
    if unknown:
        raise ValueError(f"cannot override {sorted(unknown)}; overridable: {sorted(overridable)}")


def protocol_problems(dataset: str, p: dict, preprocessings, max_seed=None, seed_note="") -> tuple[dict, list[str]]:
    """(the protocol's values normalised, the problems found in them): counts positive, n_train at most the
    FULL_TRAIN images (None: all), n_validation below it, a batch no larger than the images trained on, a seed
    >= 0 (and at most `max_seed`, `seed_note` saying why), preprocessing_grid some of `preprocessings` (repeats
    dropped). A check that needs a bad value is skipped."""
    problems = [f"unknown dataset {dataset!r}; choose one of {list(DATASETS)}"] if dataset not in DATASETS else []
    counts = {}
    for name in ("n_validation", "batch_size", "grid_epochs", "max_epochs", "patience", "stop_patience"):
        if is_count(p[name]):
            counts[name] = int(p[name])
        else:
            problems.append(f"{name}={p[name]!r} must be a positive integer")
    n_images = FULL_TRAIN if p["n_train"] is None else p["n_train"]
    if not is_count(n_images):
        problems.append(f"n_train={n_images!r} must be a positive integer")
        n_images = None
    elif n_images > FULL_TRAIN:
        problems.append(f"n_train={n_images} exceeds the {FULL_TRAIN:,} training images of {dataset}")
        n_images = None
    n_validation, batch_size = counts.get("n_validation"), counts.get("batch_size")
    if n_images is not None and n_validation is not None:
        if n_validation >= n_images:
            problems.append(f"n_validation={n_validation} must be smaller than the {n_images} training images used")
        elif batch_size is not None and batch_size > n_images - n_validation:
            problems.append(f"batch_size={batch_size} exceeds the {n_images - n_validation} images trained on")
    seed = p["seed"]
    if max_seed is None and not is_count(seed, 0):
        problems.append(f"seed={seed!r} must be an integer >= 0")
    elif max_seed is not None and not (is_count(seed, 0) and seed <= max_seed):
        problems.append(f"seed={seed!r} must be an integer in 0..{max_seed:,}{seed_note}")
    grid = list(dict.fromkeys(p["preprocessing_grid"]))
    if not grid or not set(grid) <= set(preprocessings):
        problems.append(f"preprocessing_grid {p['preprocessing_grid']} must name some of {list(preprocessings)}")
    values = {**counts, "preprocessing_grid": grid, "seed": int(seed) if is_count(seed, 0) else seed,
              "n_train": None if n_images in (None, FULL_TRAIN) else int(n_images)}
    return values, problems


@dataclass(frozen=True)
class TunedConfig:
    """One tuned baseline's run, validated when it is built (ValueError listing every problem) and never changed
    after: `dataset`, the protocol's values (`protocol`, PROTOCOL_KEYS), the method's own parameters (`own`, which
    its adapter normalised, its problems in `problems`), and `layout`, the order of the record's parameters.
    `preprocessings` are the names preprocessing_grid may use, `max_seed` the largest seed (`seed_note`: why).
    parameters() is the dict a record holds."""
    dataset: str
    protocol: dict
    own: dict
    layout: tuple
    preprocessings: tuple = PREPROCESSINGS
    problems: tuple = field(default=(), compare=False)
    max_seed: int | None = None
    seed_note: str = ""

    def __post_init__(self):
        missing = set(PROTOCOL_KEYS) - set(self.protocol)
        if missing:
            raise ValueError(f"protocol values missing: {sorted(missing)}")
        values, problems = protocol_problems(self.dataset, dict(self.protocol), self.preprocessings, self.max_seed,
                                             self.seed_note)
        problems = [*problems, *self.problems]
        if problems:
            raise ValueError("; ".join(problems))
        object.__setattr__(self, "protocol", MappingProxyType(values))
        object.__setattr__(self, "own", MappingProxyType(dict(self.own)))
        fields = {"dataset": self.dataset, **values, **self.own}
        if set(self.layout) != set(fields):
            raise ValueError(f"layout {list(self.layout)} does not list the parameters {sorted(fields)}")

    def parameters(self) -> dict:
        """The run's parameters as its record holds them, in `layout`'s order."""
        fields = {"dataset": self.dataset, **self.protocol, **self.own}
        return {k: fields[k] for k in self.layout}


# ----------------------------------------------------------------------------------------------------------
# The protocol: the split, the epoch order, the grid and its choice, the schedule
# ----------------------------------------------------------------------------------------------------------

def load_split(params: dict, preprocessing: str, data_dir=None, std_floor: float = 0.0) -> dict[str, np.ndarray]:
    """Fit, validation and test arrays of a run: the last n_validation training images held out, the
    preprocessing's statistics (its standard deviations floored at `std_floor`) taken from the fit part only."""
    raw = ebp_data.load_raw(params["dataset"], data_dir)
    n_images = params["n_train"] or FULL_TRAIN
    images, labels = raw["train_images"][:n_images], raw["train_labels"][:n_images].astype(np.int64)
    n_fit = n_images - params["n_validation"]
    x_fit, x_rest = ebp_data.standardise(images[:n_fit], np.concatenate([images[n_fit:], raw["test_images"]]),
                                        preprocessing, std_floor, np.float32)
    return {"x_fit": x_fit, "y_fit": labels[:n_fit],
            "x_val": x_rest[:params["n_validation"]], "y_val": labels[n_fit:],
            "x_test": x_rest[params["n_validation"]:], "y_test": raw["test_labels"].astype(np.int64)}


def epoch_order(params: dict, n: int, epoch: int) -> np.ndarray:
    """The shuffled order of epoch `epoch` (0-based): a function of seed and epoch only, so that a resumed run
    visits the images exactly as an uninterrupted one, and the chosen grid point's epochs are the training's
    first epochs."""
    return np.random.default_rng([params["seed"], 1, epoch]).permutation(n)


def grid_keys(preprocessing_grid, grid: dict) -> list[dict]:
    """Every grid point: preprocessing x each hyperparameter of `grid` ({name: values}) in turn, as dicts."""
    points = [{"preprocessing": p} for p in preprocessing_grid]
    for name, values in grid.items():
        points = [{**point, name: v} for point in points for v in values]
    return points


def choose_point(points: list[dict], tie: str | None = None) -> dict:
    """The grid point with the lowest validation error after the last grid epoch (ties: the smaller `tie`, or
    the first listed)."""
    if not points:
        raise ValueError("no grid points to choose from")
    if tie is None:
        return min(points, key=lambda p: p["validation_error"][-1])
    return min(points, key=lambda p: (p["validation_error"][-1], p[tie]))


def schedule_step(state: dict, validation_error: float, params: dict, step: str = "learning_rate") -> bool:
    """After an epoch: keep a new best, or count an epoch without one; halve state[step] (the learning rate, or a
    factor of the step sizes) every `patience` such epochs; return True when training stops (`stop_patience`
    epochs without a new best, or `max_epochs`)."""
    if state["best_validation_error"] is None or validation_error < state["best_validation_error"]:
        state["best_validation_error"], state["best_epoch"], state["epochs_without_best"] = (
            validation_error, state["epoch"], 0)
    else:
        state["epochs_without_best"] += 1
        if state["epochs_without_best"] % params["patience"] == 0:
            state[step] /= 2
    return state["epochs_without_best"] >= params["stop_patience"] or state["epoch"] >= params["max_epochs"]


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
    else 0. Code changed under the batch stops it (exit status 2): the runs before stand, the rest would not be the
    code of their commit."""
    try:
        records.code_state(allow_dirty)
    except records.DirtyTreeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    failed = 0
    for params, folder in jobs:
        try:
            run(params, folder, data_dir=data_dir, allow_dirty=allow_dirty)
        except records.DirtyTreeError as err:
            print(f"error: {err}. Stopped before {params['dataset']} {folder.name}; the runs before it are kept",
                  file=sys.stderr)
            return 2
        except (ValueError, FloatingPointError) as err:  # one run's fault: report it, go on with the rest
            print(f"error: {err}", file=sys.stderr)
            failed += 1
            continue
        print(f"{params['dataset']} {folder.name}: {run_state(folder, params)}")
    return 1 if failed else 0


# ----------------------------------------------------------------------------------------------------------
# The loop every tuned baseline runs: its grid, the choice, the chosen point trained with its schedule
# ----------------------------------------------------------------------------------------------------------

class Trainer(Protocol):
    """One method, net and grid point as the loop trains it: its initial state, one epoch (state, x, y, the
    0-based epoch, the step size or factor it trains with) giving (new state, loss or None for a method that
    computes none), and the error of a state's deployed net on (x, y). A trainer may add more_errors(state, x, y),
    {name: error} of its other outputs (epoch_entry)."""

    def initial(self): ...

    def train_epoch(self, state, x, y, epoch: int, step: float): ...

    def error(self, state, x, y) -> float: ...


class Baseline:
    """What the loop (run) asks of a tuned baseline beside its Trainer; an adapter (reproduction.backprop,
    reproduction.successors) subclasses it. `step` names the quantity the schedule halves (in the checkpoint's
    schedule and each epoch's history), `step_label` names it in progress lines; `cpu_seconds`: whether epochs and
    grid points record the process's CPU seconds beside wall seconds; `tie`: choose_point's tie-break."""
    step, step_label, cpu_seconds, tie = "learning_rate", "rate", False, None

    def label(self, params: dict) -> str:
        raise NotImplementedError

    def grid_keys(self, params: dict) -> list[dict]:
        raise NotImplementedError

    def describe_point(self, point: dict) -> str:
        return str(point)

    def make_record(self, params, grid, history, schedule, finished, sessions, **extra) -> dict:
        raise NotImplementedError

    def load_split(self, params: dict, preprocessing: str, data_dir=None) -> dict:
        return load_split(params, preprocessing, data_dir)

    def make_trainer(self, params: dict, point: dict, n_fit: int) -> Trainer:
        raise NotImplementedError

    def first_step(self, point: dict) -> float:
        """The step the grid scores `point` with, and its training's first."""
        return 1.0

    def initial_schedule(self, params: dict, point: dict) -> dict:
        return {"epoch": 0, self.step: self.first_step(point), "best_epoch": None, "best_validation_error": None,
                "epochs_without_best": 0, "history": [], "finished": False}

    def save_checkpoint(self, path: Path, trainer, state, best, schedule: dict) -> None:
        raise NotImplementedError

    def load_checkpoint(self, path: Path, trainer) -> tuple:
        """(state, best state, schedule) of the checkpoint at `path`; ebp_checkpoint.CheckpointError if it cannot
        be resumed (resume sets it aside)."""
        raise NotImplementedError

    def diverged(self, trainer, state, loss) -> bool:
        """Whether an epoch's state or loss (None: the method computes none) says training diverged."""
        return loss is not None and not math.isfinite(loss)

    def divergence(self, epoch: int, step: float) -> str:
        return (f"the loss became non-finite in epoch {epoch}; the grid chose a step size too large for the full "
                f"run")

    def adopt_grid(self, params: dict, session, folder: Path, data_dir, echo, allow_dirty: bool) -> None:
        """Fill session.grid from another run's grid where this run uses that run's choice (none by default)."""

    def finish(self, trainer, best, data: dict, history: list[dict], best_epoch: int, folder: Path) -> dict:
        """The record's fields a finished run adds (the best epoch's evaluation; none by default)."""
        return {}


def timed(cpu: bool):
    """seconds(): wall (and, where `cpu`, the process's CPU) seconds since the call."""
    start, cpu_start = time.perf_counter(), time.process_time()
    return lambda: (time.perf_counter() - start, time.process_time() - cpu_start if cpu else None)


def score_point(baseline: Baseline, params: dict, data: dict, point: dict) -> dict:
    """Validation error of the deployed net after each of `grid_epochs` epochs at one grid point, from the run's
    initial state; a point whose state diverges scores 1.0 from then on and is marked so."""
    trainer = baseline.make_trainer(params, point, len(data["x_fit"]))
    state, errors, diverged = trainer.initial(), [], False
    seconds = timed(baseline.cpu_seconds)
    with np.errstate(over="ignore", invalid="ignore"):  # a diverging point's overflow is its score, not a fault
        for epoch in range(params["grid_epochs"]):
            if not diverged:
                state, loss = trainer.train_epoch(state, data["x_fit"], data["y_fit"], epoch,
                                                  baseline.first_step(point))
                diverged = baseline.diverged(trainer, state, loss)
            errors.append(1.0 if diverged else trainer.error(state, data["x_val"], data["y_val"]))
    wall, cpu = seconds()
    return {**point, "validation_error": errors, "diverged": diverged, "train_seconds": round(wall, 2),
            **({} if cpu is None else {"cpu_seconds": round(cpu, 2)})}


def run_grid(baseline: Baseline, params: dict, session: Session, data_for, echo) -> list[dict]:
    """Every grid point not yet in session.grid scored (score_point), the record rewritten after each."""
    label = baseline.label(params)
    for point in baseline.grid_keys(params):
        if any(all(p.get(k) == v for k, v in point.items()) for p in session.grid):
            continue
        result = score_point(baseline, params, data_for(point["preprocessing"]), point)
        session.grid.append(result)
        session.write([], None)
        echo(f"{label}: {baseline.describe_point(point)} -> validation error "
             f"{100 * result['validation_error'][-1]:.2f}%")
    return session.grid


def run(baseline: Baseline, params: dict, folder, data_dir=None, echo=print, allow_dirty: bool = False,
        stop_after_epochs: int | None = None) -> dict:
    """Train one run to the end (or `stop_after_epochs` more epochs), resuming what `folder` holds; returns the
    record written to folder/result.json.

    Checks the code state and the folder before writing anything (Session); then the grid (resumed per point),
    its choice, and the chosen point's training (resumed per epoch from checkpoint.npz; a bad checkpoint is set
    aside and training restarts), each epoch's step halved and training stopped by schedule_step; the state of
    the best-validation epoch kept, and a finished run's fields (Baseline.finish) added. The checkpoint is kept
    until the finished record is written, then removed."""
    folder = Path(folder)
    session = Session(folder, params, allow_dirty, baseline.make_record)
    if session.previous and session.previous.get("finished"):
        return session.previous
    label = baseline.label(params)
    data_for = one_split(lambda preprocessing: baseline.load_split(params, preprocessing, data_dir))
    baseline.adopt_grid(params, session, folder, data_dir, echo, allow_dirty)
    chosen = choose_point(run_grid(baseline, params, session, data_for, echo), baseline.tie)
    point = {k: chosen[k] for k in baseline.grid_keys(params)[0]}
    data = data_for(point["preprocessing"])
    trainer = baseline.make_trainer(params, point, len(data["x_fit"]))
    path = folder / CHECKPOINT_FILE
    state = best = trainer.initial()
    schedule = baseline.initial_schedule(params, point)
    state, best, schedule = resume(path, lambda p: baseline.load_checkpoint(p, trainer), echo) or (
        state, best, schedule)
    session.session["from_epoch"] = schedule["epoch"]
    stop_at = None if stop_after_epochs is None else schedule["epoch"] + stop_after_epochs
    while not schedule["finished"] and schedule["epoch"] != stop_at:
        seconds, step = timed(baseline.cpu_seconds), schedule[baseline.step]
        state, loss = trainer.train_epoch(state, data["x_fit"], data["y_fit"], schedule["epoch"], step)
        wall, cpu = seconds()
        if baseline.diverged(trainer, state, loss):
            raise FloatingPointError(f"{label}: {baseline.divergence(schedule['epoch'] + 1, step)}")
        schedule["epoch"] += 1
        more = getattr(trainer, "more_errors", None)
        entry = epoch_entry(schedule["epoch"], {baseline.step: step}, functools.partial(trainer.error, state), data,
                            loss, wall, cpu, more=None if more is None else functools.partial(more, state))
        schedule["history"].append(entry)
        schedule["finished"] = schedule_step(schedule, entry["validation_error"], params, baseline.step)
        if schedule["best_epoch"] == schedule["epoch"]:
            best = state
        baseline.save_checkpoint(path, trainer, state, best, schedule)
        session.write(schedule["history"], schedule)
        echo(f"{label} epoch {schedule['epoch']}: validation {100 * entry['validation_error']:.2f}%, test "
             f"{100 * entry['test_error']:.2f}% ({baseline.step_label} {step:g}, {wall:.1f} s)")
    extra = {} if not schedule["finished"] else baseline.finish(trainer, best, data, schedule["history"],
                                                                schedule["best_epoch"], folder)
    record = session.write(schedule["history"], schedule, finished=schedule["finished"], **extra)
    if schedule["finished"]:
        path.unlink(missing_ok=True)
    return record
