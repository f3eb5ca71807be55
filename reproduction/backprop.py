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
from pathlib import Path

import numpy as np

import ebp_checkpoint
from reproduction import backprop_mlp as mlp
from reproduction import records, tuned
from reproduction.run_files import CHECKPOINT_FILE  # noqa: F401  (the scripts and tests name it bp.CHECKPOINT_FILE)

REPO = Path(__file__).resolve().parents[1]
OUTPUT_DIR = REPO / "outputs" / "backprop"
DATASETS = tuned.DATASETS
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
PREPROCESSINGS = tuned.PREPROCESSINGS

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

hidden_layers = tuned.hidden_layers
# The order of a record's parameters (tuned.TunedConfig.parameters).
LAYOUT = ("dataset", "config", "architecture", "activation", "loss", "init", "l2", "optimizer", "momentum",
          "batch_size", "preprocessing_grid", "learning_rate_grid", "grid_epochs", "max_epochs", "patience",
          "stop_patience", "n_validation", "n_train", "seed", "dtype")


def _rates(values) -> tuple[list[float], list[str]]:
    """(the learning rates sorted, the problems with them)."""
    try:
        rates = sorted(float(r) for r in values)
    except (TypeError, ValueError):
        rates = []
    if not rates or len(set(rates)) != len(rates) or not all(math.isfinite(r) and r > 0 for r in rates):
        return rates, [f"learning_rate_grid {values} must be distinct finite positive rates"]
    return rates, []


def make_config(dataset: str, config: str, **overrides) -> tuned.TunedConfig:
    """The configuration of one run (PROTOCOL unless overridden), every value checked and every problem listed
    (ValueError), so that a bad command line fails here, before a folder or file exists."""
    tuned.check_dataset(dataset)
    tuned.check_choice("configuration", config, CONFIGS)
    tuned.check_overrides(overrides, OVERRIDABLE)
    p = {**PROTOCOL, "n_train": None, **{k: v for k, v in overrides.items() if v is not None}}
    problems = []
    momentum = float(p["momentum"])
    if not 0.0 <= momentum < 1.0:
        problems.append(f"momentum={p['momentum']!r} must lie in [0, 1)")
    rates, found = _rates(p["learning_rate_grid"])
    spec = CONFIGS[config]
    hidden_layers(spec["architecture"])
    own = {"config": config, "architecture": spec["architecture"], "activation": "tanh",
           "loss": "softmax cross-entropy", "init": "glorot-uniform weights, zero biases", "l2": spec["l2"],
           "optimizer": "sgd-nesterov", "momentum": momentum, "learning_rate_grid": rates, "dtype": "float32"}
    return tuned.TunedConfig(dataset, {k: p[k] for k in tuned.PROTOCOL_KEYS}, own, LAYOUT,
                             problems=(*problems, *found))


def make_parameters(dataset: str, config: str, **overrides) -> dict:
    """The parameters of one run as its record holds them (make_config's)."""
    return make_config(dataset, config, **overrides).parameters()


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

load_split = tuned.load_split  # the validation split, preprocessed with statistics of the fit part only


# ----------------------------------------------------------------------------------------------------------
# Training: the grid, then the chosen point with its schedule and early stopping
# ----------------------------------------------------------------------------------------------------------

def initial_state(params: dict) -> tuple[dict, dict]:
    """The run's initial weights (from its seed) and zero velocities."""
    sizes = (784, *hidden_layers(params["architecture"]), mlp.N_CLASSES)
    weights = mlp.init_mlp(sizes, np.random.default_rng([params["seed"], 0]))
    return weights, {name: np.zeros_like(a) for name, a in weights.items()}


epoch_order, schedule_step = tuned.epoch_order, tuned.schedule_step


def grid_keys(params: dict) -> list[dict]:
    """Every grid point: preprocessing x learning rate."""
    return tuned.grid_keys(params["preprocessing_grid"], {"learning_rate": params["learning_rate_grid"]})


def choose_point(points: list[dict]) -> dict:
    """The grid point with the lowest validation error after the last grid epoch (ties: the smaller rate)."""
    return tuned.choose_point(points, tie="learning_rate")


class Trainer:
    """The tanh MLP of a run at one learning rate (tuned.Trainer): a state is (weights, velocities), trained in
    place with Nesterov momentum."""

    def __init__(self, params: dict, point: dict, n_fit: int):
        self.params = params

    def initial(self) -> tuple[dict, dict]:
        return initial_state(self.params)

    def train_epoch(self, state, x, y, epoch: int, rate: float):
        weights, velocity = state
        p = self.params
        cross_entropy = mlp.train_epoch(weights, velocity, x, y, epoch_order(p, len(x), epoch), p["batch_size"],
                                        rate, p["momentum"], p["l2"])
        return state, cross_entropy

    def error(self, state, x, y) -> float:
        return mlp.error_rate(state[0], x, y)


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


class Backprop(tuned.Baseline):
    """The backprop baseline as the tuned loop runs it (tuned.run): the grid's rate is the training's first, halved
    by the schedule; its checkpoint holds weights, velocities and the schedule (parameters included)."""
    tie = "learning_rate"

    def label(self, params):
        return f"{params['dataset']} {params['config']} seed {params['seed']}"

    def grid_keys(self, params):
        return grid_keys(params)

    def describe_point(self, point):
        return f"{point['preprocessing']}, rate {point['learning_rate']:g}"

    def make_record(self, *args, **extra):
        return make_record(*args, **extra)

    def make_trainer(self, params, point, n_fit):
        return Trainer(params, point, n_fit)

    def first_step(self, point):
        return point["learning_rate"]

    def initial_schedule(self, params, point):
        return {"parameters": params, **super().initial_schedule(params, point)}

    def save_checkpoint(self, path, trainer, state, best, schedule):
        save_checkpoint(path, *state, schedule)

    def load_checkpoint(self, path, trainer):
        weights, velocity, schedule = load_checkpoint(path, trainer.params)
        return (weights, velocity), None, schedule

    def diverged(self, trainer, state, loss):
        return not all(np.isfinite(a).all() for a in state[0].values())

    def divergence(self, epoch, rate):
        return f"weights became non-finite in epoch {epoch} at rate {rate:g}; the grid chose a rate too large for the " \
               f"full run"


BACKPROP = Backprop()


def run(params: dict, folder, data_dir=None, echo=print, allow_dirty: bool = False,
        stop_after_epochs: int | None = None) -> dict:
    """Train one run to the end (or `stop_after_epochs` more epochs), resuming what `folder` holds (tuned.run).
    Returns the record written to folder/result.json."""
    return tuned.run(BACKPROP, params, folder, data_dir, echo, allow_dirty, stop_after_epochs)


def run_state(folder, params: dict) -> str:
    """A short description of a run folder's progress, for the runner's --list (tuned.run_state)."""
    return tuned.run_state(folder, params, len(grid_keys(params)), lambda result: (
        f"finished: test error {100 * result['final']['test_error']:.2f}% at epoch {result['best_epoch']} "
        f"of {result['epochs_done']}"))
