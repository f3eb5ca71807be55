"""The backpropagation baseline beside EBP: tanh MLPs at a practitioner's protocol, resumable, recorded.

Cheng et al. (2015, §4 and the footnote to Table 2) call EBP "comparable to standard BackPropagation" on two
numbers quoted without code or protocol:

1. a tanh MLP with one hidden layer of 800 units and an "optimized learning rate": 2.13 % test error on MNIST;
2. 500 tanh units with "L1 and L2 error regularization" and Glorot-uniform initialisation: 1.65 %, the number of
   the deeplearning.net Theano MLP tutorial (500 tanh units, L1_reg = 0, L2_reg = 1e-4, early stopping on a
   50,000 / 10,000 split); that the paper quotes it is our inference from the match.

The baseline gets what a practitioner would give it (`PROTOCOL`), every choice made on a validation split and
never on the test set:

- the last `n_validation` (10,000) training images are held out; the network trains on the rest (50,000);
- a grid over input preprocessing ("unit": pixels/255; "pixel": EBP's per-pixel standardisation, which maps rare
  border pixels to values in the thousands) and learning rate, each scored by validation error after
  `grid_epochs` epochs from the run's initial weights;
- the chosen point trained with Nesterov momentum, the rate halved after `patience` epochs without a new best
  validation error, stopped after `stop_patience` such epochs or at `max_epochs` (EBP's 120); the test error
  reported is that of the epoch with the best validation error (early stopping), read from the per-epoch
  history, which records every epoch's test error but never uses it for a choice.

EBP trains on all 60,000 images; this baseline on 50,000 (the rest choose its rate, schedule and stopping epoch).
Configuration 2 is run with the tutorial's L2 penalty (L2_reg · ΣW², its L1 coefficient is 0).

Runs are resumable: the grid per point, training per epoch from `checkpoint.npz` (weights and velocities as
arrays, the schedule's state as JSON text; never a pickle). A result is labelled with the commit of the
code that ran; a run from a tree whose code differs from its commit is refused unless `allow_dirty` is set, and
then the record says so.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

import ebp_checkpoint
import ebp_data
from reproduction import backprop_mlp as mlp
from reproduction import records, tuned
from reproduction.folder import CHECKPOINT_FILE

REPO = Path(__file__).resolve().parents[1]
OUTPUT_DIR = REPO / "outputs" / "backprop"
DATASETS = ("mnist", "fashion-mnist")
FULL_TRAIN, TRAIN_ERROR_IMAGES = tuned.FULL_TRAIN, tuned.TRAIN_ERROR_IMAGES
RECORD_FORMAT = records.RECORD_FORMAT  # result.json is a run record of reproduction.records (method "backprop")

PROTOCOL = {
    "batch_size": 100,
    "momentum": 0.9,
    "preprocessing_grid": ["unit", "pixel"],
    "learning_rate_grid": [0.01, 0.03, 0.1, 0.3],
    "grid_epochs": 3,
    "max_epochs": 120,
    "patience": 5,
    "stop_patience": 15,
    "n_validation": 10000,
    "seed": 0,
}
OVERRIDABLE = set(PROTOCOL) | {"n_train"}
PREPROCESSINGS = ("unit", "pixel", "global")

# The paper's two quoted configurations, then one beside every EBP Table 2 column (no regularisation).
CONFIGS = {
    "tanh-800": {"architecture": "800", "l2": 0.0, "paper_error": 2.13,
                 "paper_note": "tanh, one hidden layer of 800, optimized learning rate"},
    "tanh-500-l2": {"architecture": "500", "l2": 1e-4, "paper_error": 1.65,
                    "paper_note": "tanh, 500 hidden units, L1 + L2 regularisation, Glorot-uniform init "
                                  "(ours: the tutorial's L2_reg = 1e-4; its L1_reg is 0)"},
    **{f"tanh-{a}": {"architecture": a, "l2": 0.0, "paper_error": None, "paper_note": None}
       for a in ("200", "400", "600", "1000", "200-200", "400-400", "600-600", "800-800")},
}
PAPER_CONFIGS = ("tanh-800", "tanh-500-l2")


# ----------------------------------------------------------------------------------------------------------
# Parameters: validated completely before any file is written
# ----------------------------------------------------------------------------------------------------------

def hidden_layers(architecture: str) -> tuple[int, ...]:
    """Hidden layer sizes of an architecture name as in the EBP runs ("800", "200-200")."""
    try:
        sizes = tuple(int(part) for part in str(architecture).split("-"))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise ValueError(f"architecture {architecture!r} is not hidden sizes joined by '-', e.g. '800' or '200-200'")
    return sizes


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)


def _rates(values) -> list[float]:
    rates = [float(r) for r in values]
    if not rates or len(set(rates)) != len(rates) or not all(math.isfinite(r) and r > 0 for r in rates):
        raise ValueError(f"learning_rate_grid {values} must be distinct finite positive rates")
    return sorted(rates)


def make_parameters(dataset: str, config: str, **overrides) -> dict:
    """The parameters of one run (PROTOCOL unless overridden), every value checked, so that a bad command line
    fails here, before a folder or file exists."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {list(DATASETS)}")
    if config not in CONFIGS:
        raise ValueError(f"unknown configuration {config!r}; choose one of {list(CONFIGS)}")
    unknown = set(overrides) - OVERRIDABLE
    if unknown:
        raise ValueError(f"cannot override {sorted(unknown)}; overridable: {sorted(OVERRIDABLE)}")
    p = {**PROTOCOL, "n_train": None, **{k: v for k, v in overrides.items() if v is not None}}
    n_images = FULL_TRAIN if p["n_train"] is None else _positive_int("n_train", p["n_train"])
    if n_images > FULL_TRAIN:
        raise ValueError(f"n_train={n_images} exceeds the {FULL_TRAIN:,} training images of {dataset}")
    n_validation = _positive_int("n_validation", p["n_validation"])
    if n_validation >= n_images:
        raise ValueError(f"n_validation={n_validation} must be smaller than the {n_images} training images used")
    batch_size = _positive_int("batch_size", p["batch_size"])
    if batch_size > n_images - n_validation:
        raise ValueError(f"batch_size={batch_size} exceeds the {n_images - n_validation} images trained on")
    momentum = float(p["momentum"])
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum={p['momentum']!r} must lie in [0, 1)")
    seed = p["seed"]
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed={seed!r} must be an integer >= 0")
    preprocessing = list(dict.fromkeys(p["preprocessing_grid"]))
    if not preprocessing or not set(preprocessing) <= set(PREPROCESSINGS):
        raise ValueError(f"preprocessing_grid {p['preprocessing_grid']} must name some of {list(PREPROCESSINGS)}")
    spec = CONFIGS[config]
    hidden_layers(spec["architecture"])
    return {"dataset": dataset, "config": config, "architecture": spec["architecture"], "activation": "tanh",
            "loss": "softmax cross-entropy", "init": "glorot-uniform weights, zero biases", "l2": spec["l2"],
            "optimizer": "sgd-nesterov", "momentum": momentum, "batch_size": batch_size,
            "preprocessing_grid": preprocessing, "learning_rate_grid": _rates(p["learning_rate_grid"]),
            "grid_epochs": _positive_int("grid_epochs", p["grid_epochs"]),
            "max_epochs": _positive_int("max_epochs", p["max_epochs"]),
            "patience": _positive_int("patience", p["patience"]),
            "stop_patience": _positive_int("stop_patience", p["stop_patience"]),
            "n_validation": n_validation, "n_train": None if n_images == FULL_TRAIN else n_images,
            "seed": int(seed), "dtype": "float32"}


def protocol_label(params: dict) -> str:
    """'fair' for PROTOCOL on all training images, whatever the seed; otherwise 'shortened'."""
    defaults = make_parameters(params["dataset"], params["config"], seed=params["seed"])
    return "fair" if params == defaults else "shortened"


def describe_protocol(params: dict) -> str:
    """One sentence for every result and table: how this run was trained."""
    n_images = params["n_train"] or FULL_TRAIN
    grid = ", ".join(f"{r:g}" for r in params["learning_rate_grid"])
    return (f"trained on {n_images - params['n_validation']:,} images, {params['n_validation']:,} held out for "
            f"validation; preprocessing in {{{', '.join(params['preprocessing_grid'])}}} x learning rate in "
            f"{{{grid}}} chosen by validation error after {params['grid_epochs']} epochs; SGD with Nesterov "
            f"momentum {params['momentum']:g}, batch {params['batch_size']}, rate halved after "
            f"{params['patience']} epochs without a new best validation error, stopped after "
            f"{params['stop_patience']} or at {params['max_epochs']} epochs; test error of the best validation epoch; "
            f"seed {params['seed']}")


def run_dir(dataset: str, config: str, seed: int = 0, root=OUTPUT_DIR) -> Path:
    """outputs/backprop/<dataset>/<config>[-seed<N>]: seed 0 keeps the bare name, as the EBP runs do."""
    return Path(root) / dataset / (config if seed == 0 else f"{config}-seed{seed}")


# ----------------------------------------------------------------------------------------------------------
# Data: the validation split, preprocessed with statistics of the fit part only
# ----------------------------------------------------------------------------------------------------------

def load_split(params: dict, preprocessing: str, data_dir=None) -> dict[str, np.ndarray]:
    """Fit, validation and test arrays of a run: the last n_validation training images held out, the
    preprocessing's statistics taken from the fit part only."""
    raw = ebp_data.load_raw(params["dataset"], data_dir)
    n_images = params["n_train"] or FULL_TRAIN
    images, labels = raw["train_images"][:n_images], raw["train_labels"][:n_images].astype(np.int64)
    n_fit = n_images - params["n_validation"]
    x_fit, x_rest = ebp_data.standardise(images[:n_fit], np.concatenate([images[n_fit:], raw["test_images"]]),
                                        preprocessing, 0.0, np.float32)
    return {"x_fit": x_fit, "y_fit": labels[:n_fit],
            "x_val": x_rest[:params["n_validation"]], "y_val": labels[n_fit:],
            "x_test": x_rest[params["n_validation"]:], "y_test": raw["test_labels"].astype(np.int64)}


# ----------------------------------------------------------------------------------------------------------
# Training: the grid, then the chosen point with its schedule and early stopping
# ----------------------------------------------------------------------------------------------------------

def initial_state(params: dict) -> tuple[dict, dict]:
    """The run's initial weights (from its seed) and zero velocities."""
    sizes = (784, *hidden_layers(params["architecture"]), mlp.N_CLASSES)
    weights = mlp.init_mlp(sizes, np.random.default_rng([params["seed"], 0]))
    return weights, {name: np.zeros_like(a) for name, a in weights.items()}


def epoch_order(params: dict, n: int, epoch: int) -> np.ndarray:
    """The shuffled order of epoch `epoch` (0-based): a function of seed and epoch only, so that a resumed run
    visits the images exactly as an uninterrupted one, and the chosen grid point's epochs are the training's
    first epochs."""
    return np.random.default_rng([params["seed"], 1, epoch]).permutation(n)


def grid_point(params: dict, data: dict, preprocessing: str, learning_rate: float) -> dict:
    """Validation error after each of `grid_epochs` epochs at one (preprocessing, rate); a rate that diverges
    (non-finite weights) scores 1.0 from then on and is marked so."""
    weights, velocity = initial_state(params)
    errors, diverged, start = [], False, time.perf_counter()
    with np.errstate(over="ignore", invalid="ignore"):
        for epoch in range(params["grid_epochs"]):
            if not diverged:
                order = epoch_order(params, len(data["x_fit"]), epoch)
                mlp.train_epoch(weights, velocity, data["x_fit"], data["y_fit"], order, params["batch_size"],
                                learning_rate, params["momentum"], params["l2"])
                diverged = not all(np.isfinite(a).all() for a in weights.values())
            errors.append(1.0 if diverged else mlp.error_rate(weights, data["x_val"], data["y_val"]))
    return {"preprocessing": preprocessing, "learning_rate": learning_rate, "validation_error": errors,
            "diverged": diverged, "train_seconds": round(time.perf_counter() - start, 2)}


def grid_keys(params: dict) -> list[tuple[str, float]]:
    return [(p, r) for p in params["preprocessing_grid"] for r in params["learning_rate_grid"]]


def choose_point(points: list[dict]) -> dict:
    """The grid point with the lowest validation error after the last grid epoch (ties: the smaller rate)."""
    if not points:
        raise ValueError("no grid points to choose from")
    return min(points, key=lambda p: (p["validation_error"][-1], p["learning_rate"]))


def schedule_step(state: dict, validation_error: float, params: dict) -> bool:
    """After an epoch: keep a new best, or count an epoch without one; halve the rate every `patience` such
    epochs; return True when training stops (`stop_patience` epochs without a new best, or `max_epochs`)."""
    if state["best_validation_error"] is None or validation_error < state["best_validation_error"]:
        state["best_validation_error"], state["best_epoch"], state["epochs_without_best"] = (
            validation_error, state["epoch"], 0)
    else:
        state["epochs_without_best"] += 1
        if state["epochs_without_best"] % params["patience"] == 0:
            state["learning_rate"] /= 2
    return state["epochs_without_best"] >= params["stop_patience"] or state["epoch"] >= params["max_epochs"]


# ----------------------------------------------------------------------------------------------------------
# Checkpoint: arrays and JSON text in one .npz, read without pickle and checked against the run
# ----------------------------------------------------------------------------------------------------------

def save_checkpoint(path: Path, weights: dict, velocity: dict, state: dict) -> None:
    """Weights, velocities and the schedule's state (its JSON metadata, history included) in one .npz, atomically
    (ebp_checkpoint.write_checkpoint, the EBP checkpoints' format)."""
    arrays = {**{f"weights/{k}": v for k, v in weights.items()}, **{f"velocity/{k}": v for k, v in velocity.items()}}
    ebp_checkpoint.write_checkpoint(path, arrays, state)


def load_checkpoint(path: Path, params: dict) -> tuple[dict, dict, dict]:
    """(weights, velocity, schedule state) of `path`, checked against the run's parameters: names, shapes and
    dtypes of every array from their headers before any is read (ebp_checkpoint.open_checkpoint: a header that
    declares a huge array allocates nothing), then finiteness. Raises ebp_checkpoint.CheckpointError, the error of
    every checkpoint of the project, naming the file and the fault."""
    expected, _ = initial_state(params)
    with ebp_checkpoint.open_checkpoint(path) as (state, npz, headers):
        if not isinstance(state, dict) or state.get("parameters") != params:
            raise ebp_checkpoint.CheckpointError(f"{path}: checkpoint of another run (its parameters differ from "
                                                 f"this run's)")
        for group in ("weights", "velocity"):
            for name, ref in expected.items():
                shape, dtype, _ = headers.get(f"{group}/{name}", (None, None, None))
                if shape != ref.shape or dtype != ref.dtype:
                    raise ebp_checkpoint.CheckpointError(
                        f"{path}: {group}/{name} is missing or has the wrong shape or dtype "
                        f"({dtype}{list(shape or [])}; expected {ref.dtype}{list(ref.shape)})")
        groups = {g: {k: npz[f"{g}/{k}"] for k in expected} for g in ("weights", "velocity")}
    for group, arrays in groups.items():
        for name, a in arrays.items():
            if not np.isfinite(a).all():
                raise ebp_checkpoint.CheckpointError(f"{path}: {group}/{name} holds non-finite values")
    return groups["weights"], groups["velocity"], state


# ----------------------------------------------------------------------------------------------------------
# The run: its record (result.json, rewritten after every step) and its loop
# ----------------------------------------------------------------------------------------------------------

PACKAGES = ("numpy", "threadpoolctl")


def backprop_expected(data: dict) -> records.Expected | list[str]:
    """What a backprop run record's parameters give (records.record_problems checks the record against it): the
    parameters make_parameters gives, the protocol, description and image counts they give, the final errors of the
    best-validation epoch, at most max_epochs epochs (tuned.expected)."""
    return tuned.expected(data, lambda p: make_parameters(p.get("dataset"), p.get("config"),
                                                          **{k: p.get(k) for k in OVERRIDABLE}),
                          protocol_label, describe_protocol)


records.EXPECTED["backprop"] = backprop_expected


def make_record(params: dict, grid: list[dict], history: list[dict], state: dict | None, finished: bool,
                sessions: list[dict]) -> dict:
    """The result.json of a run (tuned.record): parameters, protocol, the grid and its choice, per-epoch history,
    and the final errors of the best-validation epoch."""
    chosen = choose_point(grid) if len(grid) == len(grid_keys(params)) else None
    best = history[state["best_epoch"] - 1] if state and state.get("best_epoch") else None
    return tuned.record("backprop", params, (protocol_label(params), describe_protocol(params)),
                        {"points": grid, "rule": "lowest validation error after the last grid epoch",
                         "chosen": None if chosen is None else {k: chosen[k] for k in ("preprocessing",
                                                                                         "learning_rate")}},
                        history, best, finished, sessions, PACKAGES)


def run(params: dict, folder, data_dir=None, echo=print, allow_dirty: bool = False,
        stop_after_epochs: int | None = None) -> dict:
    """Train one run to the end (or `stop_after_epochs` more epochs), resuming what `folder` holds.

    Checks the code state and the folder before writing anything; then the grid (resumes per point) and the
    training (resumes per epoch from checkpoint.npz; a bad checkpoint is set aside and training restarts).
    Returns the record written to folder/result.json. The checkpoint is kept until the finished record is
    written, then removed.
    """
    folder = Path(folder)
    session = tuned.Session(folder, params, allow_dirty, make_record)
    if session.previous and session.previous.get("finished"):
        return session.previous
    grid, write = session.grid, session.write
    label = f"{params['dataset']} {params['config']} seed {params['seed']}"
    data_for = tuned.one_split(lambda preprocessing: load_split(params, preprocessing, data_dir))
    for preprocessing, rate in grid_keys(params):
        if any((p["preprocessing"], p["learning_rate"]) == (preprocessing, rate) for p in grid):
            continue
        point = grid_point(params, data_for(preprocessing), preprocessing, rate)
        grid.append(point)
        write([], None)
        echo(f"{label}: {preprocessing}, rate {rate:g} -> validation error {100 * point['validation_error'][-1]:.2f}%")
    chosen = choose_point(grid)
    data = data_for(chosen["preprocessing"])
    path = folder / CHECKPOINT_FILE
    weights, velocity = initial_state(params)
    state = {"parameters": params, "epoch": 0, "learning_rate": chosen["learning_rate"], "best_epoch": None,
             "best_validation_error": None, "epochs_without_best": 0, "history": [], "finished": False}
    weights, velocity, state = tuned.resume(path, lambda p: load_checkpoint(p, params), echo) or (
        weights, velocity, state)
    session.session["from_epoch"] = state["epoch"]
    stop_at = None if stop_after_epochs is None else state["epoch"] + stop_after_epochs
    while not state["finished"] and state["epoch"] != stop_at:
        start = time.perf_counter()
        order = epoch_order(params, len(data["x_fit"]), state["epoch"])
        rate = state["learning_rate"]
        cross_entropy = mlp.train_epoch(weights, velocity, data["x_fit"], data["y_fit"], order,
                                        params["batch_size"], rate, params["momentum"], params["l2"])
        seconds = time.perf_counter() - start
        if not all(np.isfinite(a).all() for a in weights.values()):
            raise FloatingPointError(f"{label}: weights became non-finite in epoch {state['epoch'] + 1} at rate "
                                     f"{rate:g}; the grid chose a rate too large for the full run")
        state["epoch"] += 1
        entry = tuned.epoch_entry(state["epoch"], {"learning_rate": rate},
                                  lambda x, y: mlp.error_rate(weights, x, y), data, cross_entropy, seconds)
        state["history"].append(entry)
        state["finished"] = schedule_step(state, entry["validation_error"], params)
        save_checkpoint(path, weights, velocity, state)
        write(state["history"], state)
        echo(f"{label} epoch {state['epoch']}: validation {100 * entry['validation_error']:.2f}%, test "
             f"{100 * entry['test_error']:.2f}% (rate {rate:g}, {seconds:.1f} s)")
    record = write(state["history"], state, finished=state["finished"])
    if state["finished"]:
        path.unlink(missing_ok=True)
    return record


def run_state(folder, params: dict) -> str:
    """A short description of a run folder's progress, for the runner's --list (tuned.run_state)."""
    return tuned.run_state(folder, params, len(grid_keys(params)), lambda result: (
        f"finished: test error {100 * result['final']['test_error']:.2f}% at epoch {result['best_epoch']} "
        f"of {result['epochs_done']}"))
