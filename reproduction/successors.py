"""EBP's successors beside it: STE / BinaryConnect, Bop and BayesBiNN (package successors) at a practitioner's
protocol, on the paper's nets, resumable and recorded as the backprop baseline is (reproduction.backprop). EBP
itself runs at the same protocol as methods "ebp-tuned" and "ebp-tuned-dropout" (successors.ebp: its own
trainer, preprocessings and defaults, batch 10 and a grid over preprocessing x initial scale; the rules below
unchanged): "EBP, tuned like the successors", beside the paper-protocol EBP runs.

The protocol (`PROTOCOL`, with each method's grid `successors.<method>.GRID`), every choice made on a validation
split of the training set and never on the test set:

- the last `n_validation` (10,000) training images are held out; the net trains on the rest (50,000);
- a grid over input preprocessing ("pixel": EBP's per-pixel standardisation; "unit": pixels/255, which with BN
  after the first layer is equivalent to the authors' global or per-pixel centring) and the method's own
  hyperparameters (STE: Adam's rate; Bop: γ, τ; BayesBiNN: α), each grid holding the authors' published MNIST (or,
  for Bop, which has none, CIFAR-10) setting (notebooks/successors.ipynb tabulates ours against theirs), each point
  scored by the validation error of its deployed ±1 net after `grid_epochs` epochs from the run's initial state;
- every seed runs its own grid (`tune_seed` None). The cheaper standard alternative, `tune_seed` = 0, runs the
  grid once per method, dataset and net, on seed 0, and the other seeds train at the point it chose (their records
  copy its grid and say so); at the measured costs (notebooks/successors.ipynb: about 8.5 core-hours for all 36 runs
  at most, the grids about 1.4 of them) it is not needed, and is recorded as a different protocol ("shortened");
- the chosen point trained with batch `batch_size`, its step sizes halved (hyper["decay"]) after `patience`
  epochs without a new best validation error, stopped after `stop_patience` such epochs or at `max_epochs`
  (EBP's 120); the state of the best-validation epoch is kept and evaluated at the end.

The same protocol trains the successors on EBP's CNNs (successors.cnn: ±1 kernels, BN per channel, sign units;
an architecture "lenet", "wide" or its c<k>x<channels>s<stride> name, recorded by that name) as profile "cnn":
`max_epochs` 30, the budget of EBP's CNN runs (outputs/runs/named-e30), everything else as above. Their deployed
net is folded per channel and run packed by ebp_binary_conv (successors.cnn_evaluate), saved by
ebp_binary_conv_format; their records live under outputs/successors/cnn (or smoke).

Every epoch records the validation, test and training error (first 10,000 fit images) of the deployed net, the
test error never used for a choice. At the end the best epoch's net is evaluated (successors.evaluate): its test
error through ebp_binary's packed inference and its mismatches with the float64 evaluation of the unfolded net,
NLL, ECE and reliability bins of its softmax; for BayesBiNN also the Monte Carlo predictive over `mc_samples` nets
w ~ q and the mean net. Times: training seconds per epoch (evaluation excluded) and to the best epoch, the grid's
seconds, each as wall time and as the process's CPU time (core-seconds: with one thread, what an idle core would
take, whatever else the machine runs), and the epochs to reach TARGET_ERROR (test error, the quantity EBP's records hold per epoch).

Every finished run keeps its outputs' predicted class per test image (PREDICTIONS_FILE, uint8, no pickle:
run_files.save_predictions), what a paired analysis over images and seeds needs (reproduction.paired).

Runs are resumable: the grid per point (in result.json), training per epoch from checkpoint.npz (ebp_checkpoint:
arrays and one JSON metadata text; array headers checked against the run before any data is read; no pickle).
A result is labelled with its code's commit; a tree that differs from it is refused unless allow_dirty.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
from pathlib import Path

import numpy as np

import ebp_checkpoint
import ebp_data
from reproduction import records, tuned
from reproduction.run_files import (
    PREDICTIONS_FILE,
    RunBusyError,
    UnsafeLockError,
    open_output_dir,
    read_result,
    save_predictions,
)

REPO = Path(__file__).resolve().parents[1]
OUTPUT_DIR = REPO / "outputs" / "successors"
RESULT_FILE, CHECKPOINT_FILE, NET_FILE = tuned.RESULT_FILE, tuned.CHECKPOINT_FILE, "binary_net.npz"
DATASETS = tuned.DATASETS
ARCHITECTURES = ("800", "800-800")  # the paper's nets [784, 800, 10] and [784, 800, 800, 10]; others accepted
FULL_TRAIN, TRAIN_ERROR_IMAGES = tuned.FULL_TRAIN, tuned.TRAIN_ERROR_IMAGES
# "epochs to reach": the first epoch at or below the data set's target test error (ebp_data.DATASETS)
TARGET_ERROR = {name: facts["target_error"] for name, facts in ebp_data.DATASETS.items()}

PROTOCOL = {"batch_size": 100, "preprocessing_grid": ["pixel", "unit"], "grid_epochs": 3, "max_epochs": 120,
            "patience": 5, "stop_patience": 15, "n_validation": 10000, "n_train": None, "mc_samples": 20,
            "seed": 0, "tune_seed": None}
# A profile that proves the pipeline end to end in minutes; its records say protocol "smoke" and live under
# outputs/successors/smoke: a smoke number is never a result.
PROFILES = {"tuned": {}, "smoke": {"n_train": 3000, "n_validation": 1000, "grid_epochs": 1, "max_epochs": 3,
                                   "patience": 1, "stop_patience": 2, "mc_samples": 4}}
# The protocol's sensitivity: the grid scored after 10 epochs, not 3 (a cell whose choice a 3-epoch score may
# favour a fast start), and training stopped after 30 epochs without a new best, not 15 (a method that looks cut
# short); the halving every `patience` epochs as in PROTOCOL. Records say protocol "sensitivity" and live under
# outputs/successors/sensitivity, beside, never in place of, the tuned runs.
PROFILES["sensitivity"] = {"grid_epochs": 10, "stop_patience": 30}
# The successors on EBP's CNNs (successors.cnn: an ebp_conv_catalogue name or a c<k>x<channels>s<stride> name): the
# tuned protocol at the maximum epoch budget of EBP's CNN runs (30 epochs of 60,000 images, outputs/runs/named-e30),
# not EBP's 120 of the dense nets; grid, halving, early stop and best-validation epoch unchanged. A CNN trains at
# this profile (its default) or at the smoke profile; its records live under outputs/successors/cnn.
PROFILES["cnn"] = {"max_epochs": 30}
OVERRIDABLE = set(PROTOCOL) | {"grid"}
# The order of a record's parameters (tuned.TunedConfig.parameters).
LAYOUT = ("method", "dataset", "architecture", "profile", "network", "batch_size", "preprocessing_grid", "grid",
          "fixed", "grid_epochs", "max_epochs", "patience", "stop_patience", "n_validation", "n_train", "mc_samples",
          "seed", "tune_seed", "dtype")
# Bounds that a command line cannot pass (far beyond any net or seed of the protocol): a 10^9-unit layer would
# exhaust memory, a seed beyond 32 bits overflow JAX's PRNGKey, both after the run's folder exists.
MAX_HIDDEN, MAX_LAYERS, MAX_SEED = 100_000, 16, 2 ** 31 - 3
CHECKPOINT_FORMAT = 1  # of a successor checkpoint's metadata; one without "format" is of format 1


@functools.cache
def methods() -> dict:
    """{name: module} of the methods of successors.registry (imported on first use: JAX starts slowly)."""
    from successors import registry
    return {name: registry.method(name) for name in registry.METHODS}


def make_parameters(method: str, dataset: str, architecture: str, profile: str | None = None, **overrides) -> dict:
    """The parameters of one run (PROTOCOL, the profile, then overrides), every value checked and every problem
    listed (tuned.TunedConfig), so that a bad command line fails before a folder or file exists. Profile None: "cnn"
    for a CNN (recorded by its grammar name, "lenet" → "c5x6s2-c5x16s2-100"), "tuned" for a dense net."""
    from successors import cnn
    tuned.check_choice("method", method, methods())
    tuned.check_dataset(dataset)
    conv = cnn.is_cnn(architecture)
    architecture = cnn.resolve(architecture)
    profile = profile or ("cnn" if conv else "tuned")
    tuned.check_choice("profile", profile, PROFILES)
    if conv != (profile == "cnn") and profile != "smoke":
        raise ValueError(f"profile {profile!r} is for {'dense nets' if conv else 'CNNs'}: a CNN trains at profile 'cnn' "
                         f"(the tuned protocol at EBP's CNN budget of 30 epochs) or 'smoke', a dense net at the others")
    tuned.check_overrides(overrides, OVERRIDABLE)
    module = methods()[method]
    # a method may bring its own defaults (EBP: batch 10, its preprocessings); the profile and overrides win
    p = {**PROTOCOL, **getattr(module, "PROTOCOL", {}), **PROFILES[profile],
         **{k: v for k, v in overrides.items() if v is not None}}
    problems = []
    grid = {k: sorted(float(v) for v in values) for k, values in (p.get("grid") or module.GRID).items()}
    if set(grid) != set(module.GRID) or not all(grid.values()) or not all(
            math.isfinite(v) and v > 0 for values in grid.values() for v in values):
        problems.append(f"grid {p.get('grid')} must give positive values for exactly {sorted(module.GRID)}")
    if conv and hasattr(methods()[method], "Trainer"):
        raise ValueError(f"method {method!r} trains dense nets only; EBP's CNNs are scripts/run_architecture.py's runs")
    sizes = [getattr(layer, "units", layer) for layer in cnn.network(architecture).hidden] if conv else \
        tuned.hidden_layers(architecture)
    if max(sizes) > MAX_HIDDEN or len(sizes) > MAX_LAYERS:
        problems.append(f"architecture {architecture!r}: at most {MAX_LAYERS} hidden layers of at most "
                        f"{MAX_HIDDEN:,} units (the paper's nets have 800)")
    if not tuned.is_count(p["mc_samples"]):
        problems.append(f"mc_samples={p['mc_samples']!r} must be a positive integer")
    tune_seed = p["tune_seed"]
    if tune_seed is not None and not tuned.is_count(tune_seed, 0):
        problems.append(f"tune_seed={tune_seed!r} must be an integer >= 0 or None (every seed runs its grid)")
    own = {"method": method, "architecture": str(architecture), "profile": profile,
           "network": cnn.NETWORK if conv else getattr(
               module, "NETWORK", "±1 weights, sign hidden units (hard-tanh STE), affine BN per hidden layer (momentum "
               "0.15, ε 1e-4), output e^s·(W h) + b, softmax cross-entropy (successors.mlp)"),
           "grid": grid, "fixed": dict(module.FIXED),
           "mc_samples": int(p["mc_samples"]) if tuned.is_count(p["mc_samples"]) else p["mc_samples"],
           "tune_seed": None if tune_seed is None else int(tune_seed), "dtype": "float32"}
    preprocessings = tuple(getattr(module, "PREPROCESSINGS", None) or tuned.PREPROCESSINGS)
    config = tuned.TunedConfig(dataset, {k: p[k] for k in tuned.PROTOCOL_KEYS}, own, LAYOUT, preprocessings,
                               tuple(problems), MAX_SEED, " (JAX's keys are 32-bit, and a run also uses seed + 2)")
    return config.parameters()


def protocol_label(params: dict) -> str:
    """'tuned' for PROTOCOL on all training images (any seed), 'sensitivity' and 'cnn' for those profiles as they
    stand, 'smoke' for the smoke profile, else 'shortened'."""
    if params["profile"] == "smoke":
        return "smoke"
    defaults = make_parameters(params["method"], params["dataset"], params["architecture"], params["profile"],
                               seed=params["seed"])
    return params["profile"] if params == defaults else "shortened"


def grid_keys(params: dict) -> list[dict]:
    """Every grid point: preprocessing x the method's hyperparameters, as dicts."""
    return tuned.grid_keys(params["preprocessing_grid"], params["grid"])


def adopts_grid(params: dict) -> bool:
    """Whether this run trains at the point chosen by the grid of the run of seed `tune_seed` (not its own)."""
    return params["tune_seed"] is not None and params["seed"] != params["tune_seed"]


def tuning_params(params: dict) -> dict:
    """The parameters of the run whose grid this run uses: its own, or those of seed `tune_seed`."""
    return {**params, "seed": params["tune_seed"]} if adopts_grid(params) else params


def n_tuned(params: dict) -> int:
    """How many hyperparameters the grid chooses (those with more than one value)."""
    return sum(len(v) > 1 for v in [params["preprocessing_grid"], *params["grid"].values()])


def describe_protocol(params: dict) -> str:
    """One sentence for every result and table: how this run was trained."""
    from successors import cnn
    n_images = params["n_train"] or FULL_TRAIN
    grid = " x ".join([f"preprocessing in {{{', '.join(params['preprocessing_grid'])}}}"] +
                      [f"{k} in {{{', '.join(f'{v:g}' for v in vs)}}}" for k, vs in params["grid"].items()])
    fixed = ", ".join(f"{k} {v:g}" for k, v in params["fixed"].items()) or "none"
    steps = (f"step sizes halved after {params['patience']} epochs without a new best validation error"
             if getattr(methods()[params["method"]], "STEP_SIZES", True) else "no step size to halve")
    if params["tune_seed"] is None:
        where = "grid run on this seed"
    elif adopts_grid(params):
        where = f"grid run once, on seed {params['tune_seed']}, its choice used here"
    else:
        where = "grid run once, on this seed, its choice used by every seed"
    return (f"{params['method']} on {cnn.network_text(params['architecture'])}; trained on "
            f"{n_images - params['n_validation']:,} images, {params['n_validation']:,} held out for validation; "
            f"{grid} ({n_tuned(params)} tuned) chosen by the deployed net's validation error after "
            f"{params['grid_epochs']} epochs ({where}); fixed: {fixed}; batch {params['batch_size']}, {steps}, "
            f"stopped after {params['stop_patience']} or at {params['max_epochs']} epochs; errors of the best "
            f"validation epoch; "
            f"seed {params['seed']}" + ("; SMOKE PROFILE: a pipeline check, not a result" if
                                        params["profile"] == "smoke" else ""))


def run_name(params: dict) -> str:
    """<method>-<architecture>[-seed<N>]."""
    return f"{params['method']}-{params['architecture']}" + ("" if params["seed"] == 0 else f"-seed{params['seed']}")


def run_dir(params: dict, root=OUTPUT_DIR) -> Path:
    """outputs/successors/<profile>/<dataset>/<method>-<architecture>[-seed<N>]."""
    return Path(root) / params["profile"] / params["dataset"] / run_name(params)


# ----------------------------------------------------------------------------------------------------------
# Training: the method's state as a flat list of arrays (checkpoints), one compiled epoch, the deployed net
# ----------------------------------------------------------------------------------------------------------

@functools.cache
def compiled_epoch(method: str, net=None):
    """One compiled epoch per method and CNN (successors.mlp.run_epoch), shared by every grid point and run: the
    hyperparameters are traced arguments, so a new point or a halved step size does not compile again. `net`: a
    successors.cnn.CNN, whose loss the method's step takes, or None for the dense net."""
    import jax

    from successors import mlp
    step = methods()[method].step
    return jax.jit(functools.partial(mlp.run_epoch, step if net is None else functools.partial(step, loss=net.loss)))


class Trainer:
    """One method, net and grid point: its initial state, compiled epoch and evaluations (a method module may bring
    its own class of this interface as `Trainer`: make_trainer)."""

    def __init__(self, params: dict, point: dict, n_fit: int):
        import jax

        from successors import cnn, mlp
        self.jax, self.mlp, self.params = jax, mlp, params
        self.module = methods()[params["method"]]
        self.net = cnn.network(params["architecture"]) if cnn.is_cnn(params["architecture"]) else None
        self.sizes = self.net or mlp.layer_sizes(tuned.hidden_layers(params["architecture"]))  # a CNN: its shapes
        self.predict = mlp.predict_logits if self.net is None else self.net.predict_logits
        self.hyper = {**{k: v for k, v in point.items() if k != "preprocessing"}, **params["fixed"],
                      "decay": 1.0, "n_data": float(n_fit)}
        self.epoch_fn = compiled_epoch(params["method"], self.net)

    def initial(self):
        return self.module.init(self.jax.random.PRNGKey(self.params["seed"]), self.sizes, self.hyper)

    def train_epoch(self, state, x, y, epoch: int, decay: float):
        order = tuned.epoch_order(self.params, len(x), epoch)
        xb, yb = self.mlp.batches(x, y, order, self.params["batch_size"])
        key = self.jax.random.fold_in(self.jax.random.PRNGKey(self.params["seed"] + 1), epoch)
        state, loss = self.epoch_fn(state, xb, yb, key, {**self.hyper, "decay": decay})
        return self.jax.block_until_ready(state), float(loss)

    def error(self, state, x, y) -> float:
        logits = self.predict(self.module.deployed(state), state["real"], state["stats"], x)
        return round(float(np.mean(logits.argmax(axis=1) != y)), 6)

    def to_arrays(self, state, prefix: str) -> dict:
        leaves = self.jax.tree_util.tree_leaves(state)
        return {f"{prefix}/{i}": np.asarray(a) for i, a in enumerate(leaves)}

    def from_arrays(self, arrays: dict, prefix: str):
        template, tree = self.jax.tree_util.tree_flatten(self.initial())
        return self.jax.tree_util.tree_unflatten(tree, [self.jax.numpy.asarray(arrays[f"{prefix}/{i}"])
                                                         for i in range(len(template))])

    def expected_headers(self, prefix: str) -> dict:
        leaves = self.jax.tree_util.tree_leaves(self.initial())
        return {f"{prefix}/{i}": (tuple(np.shape(a)), np.asarray(a).dtype) for i, a in enumerate(leaves)}


def make_trainer(params: dict, point: dict, n_fit: int):
    """The trainer of `params`' method at `point`: the method module's own Trainer (EBP's, successors.ebp) or the
    JAX one above."""
    return getattr(methods()[params["method"]], "Trainer", Trainer)(params, point, n_fit)


def load_split(params: dict, preprocessing: str, data_dir=None) -> dict:
    """The run's fit, validation and test arrays (tuned.load_split, or the method module's own load_split for
    the preprocessings it adds)."""
    return getattr(methods()[params["method"]], "load_split", tuned.load_split)(params, preprocessing, data_dir)


def choose_point(points: list[dict]) -> dict:
    """The grid point with the lowest validation error after the last grid epoch (ties: the first listed)."""
    return tuned.choose_point(points)


# ----------------------------------------------------------------------------------------------------------
# Checkpoint: the state and the best epoch's state as arrays, the schedule as JSON (ebp_checkpoint)
# ----------------------------------------------------------------------------------------------------------

def save_checkpoint(path: Path, trainer: Trainer, state, best, schedule: dict) -> None:
    arrays = {**trainer.to_arrays(state, "state"), **trainer.to_arrays(best, "best")}
    ebp_checkpoint.write_checkpoint(path, arrays, {"format": CHECKPOINT_FORMAT, "parameters": trainer.params,
                                                   "schedule": schedule})


def schedule_problems(schedule) -> list[str]:
    """Why a checkpoint's schedule (run's loop state: epoch, decay, best epoch and its validation error, epochs
    without a best, history, finished) cannot be resumed: a field missing or of the wrong type, a history not of
    epochs 1..epoch, a best epoch outside it."""
    if not isinstance(schedule, dict):
        return ["its schedule is not an object"]
    epoch, best, history = schedule.get("epoch"), schedule.get("best_epoch"), schedule.get("history")
    problems = []
    if type(epoch) is not int or epoch < 0:
        return [f"schedule.epoch {epoch!r:.40} is not a count of epochs"]
    if not _number(schedule.get("decay")) or not schedule["decay"] > 0:
        problems.append("schedule.decay is not a positive number")
    if type(schedule.get("epochs_without_best")) is not int or schedule["epochs_without_best"] < 0:
        problems.append("schedule.epochs_without_best is not a count")
    if type(schedule.get("finished")) is not bool:
        problems.append("schedule.finished is not true or false")
    if not isinstance(history, list) or len(history) != epoch or not all(
            isinstance(h, dict) and h.get("epoch") == i + 1 for i, h in enumerate(history)):
        problems.append(f"schedule.history does not hold epochs 1..{epoch}")
    if best is None:
        if epoch and schedule.get("best_validation_error") is not None:
            problems.append("schedule.best_validation_error without a best epoch")
    elif type(best) is not int or not 1 <= best <= epoch or not _number(schedule.get("best_validation_error"), 0, 1):
        problems.append(f"schedule.best_epoch {best!r:.40} is not an epoch of 1..{epoch} with its validation error")
    return problems


def _read_checkpoint(path: Path, trainer: Trainer) -> tuple[dict, dict]:
    """load_checkpoint's reading: (metadata, arrays), every check made before the arrays' data is read."""
    expected = {**trainer.expected_headers("state"), **trainer.expected_headers("best")}
    with ebp_checkpoint.open_checkpoint(path) as (meta, f, headers):
        version = meta.get("format", 1) if isinstance(meta, dict) else None
        if type(version) is int and version > CHECKPOINT_FORMAT:
            raise ebp_checkpoint.NewerCheckpointError(
                f"{path}: this checkpoint was written by a newer version of the project (format {version}; this code "
                f"reads up to {CHECKPOINT_FORMAT}); it is left alone: update the code (git pull) to resume it")
        if version != 1:
            raise ebp_checkpoint.CheckpointError(f"{path}: format {version!r:.40} is not a successor checkpoint's")
        found = schedule_problems(meta.get("schedule"))
        if found:
            raise ebp_checkpoint.CheckpointError(f"{path}: " + "; ".join(found))
        if meta.get("parameters") != trainer.params:
            raise ebp_checkpoint.CheckpointError(f"{path}: checkpoint of another run (its parameters differ)")
        for name, (shape, dtype) in expected.items():
            if name not in headers or headers[name][:2] != (shape, dtype):
                raise ebp_checkpoint.CheckpointError(f"{path}: array {name} is missing or not {dtype}{list(shape)}")
        return meta, {name: f[name] for name in expected}


def load_checkpoint(path: Path, trainer: Trainer):
    """(state, best state, schedule) of `path`: the metadata's format, schedule (schedule_problems), parameters and
    every array's header (name, shape, dtype) checked against the run before its data is read, then finiteness of
    λ/weights. CheckpointError (ebp_checkpoint's) naming the file and the fault; ValueError for a checkpoint of a
    newer format (left alone, not moved aside)."""
    try:
        meta, arrays = _read_checkpoint(path, trainer)
    except ebp_checkpoint.NewerCheckpointError as err:  # a ValueError, not a CheckpointError: never moved aside
        raise ValueError(str(err)) from None
    if not all(np.isfinite(a).all() for a in arrays.values() if a.dtype.kind == "f"):
        raise ebp_checkpoint.CheckpointError(f"{path}: holds non-finite values")
    return trainer.from_arrays(arrays, "state"), trainer.from_arrays(arrays, "best"), meta["schedule"]


# ----------------------------------------------------------------------------------------------------------
# The final evaluation of the best epoch's net
# ----------------------------------------------------------------------------------------------------------

def successor_outputs(trainer: Trainer, best, x: np.ndarray, y: np.ndarray, net_path: Path) -> tuple[dict, dict, dict]:
    """(packed, probabilistic, predictions) of a successor's best state on the test images: the deployed net
    through packed inference (written to `net_path`; 0 mismatches expected), the NLL / ECE of its softmax and of
    the method's other outputs (its predictive_outputs: BayesBiNN's predictive and mean net), and the per-image
    predicted classes of each."""
    from successors import cnn_evaluate, evaluate, mlp
    params, module = trainer.params, trainer.module
    weights = module.deployed(best)
    predictions: dict = {}
    packed = cnn_evaluate.deployed_check(trainer.net, weights, best, x, y, predictions, net_path)
    outputs = {"deployed": mlp.softmax(trainer.predict(weights, best["real"], best["stats"], x))}
    if hasattr(module, "predictive_outputs"):  # BayesBiNN's predictive and mean net (successors.registry)
        outputs.update(module.predictive_outputs(best, x, trainer.jax.random.PRNGKey(params["seed"] + 2),
                                                 params["mc_samples"], trainer.predict))
    probabilistic = {}
    for name, p in outputs.items():
        bins = evaluate.reliability(p, y)
        probabilistic[name] = {"test_error": round(evaluate.error(p, y), 6), "nll": round(evaluate.nll(p, y), 6),
                               "ece": round(bins["ece"], 6), "reliability": bins}
        if name != "deployed":
            predictions[name] = np.asarray(p).argmax(axis=1)
    return packed, probabilistic, predictions


def evaluate_best(trainer: Trainer, best, data: dict, history: list[dict], best_epoch: int, folder: Path) -> dict:
    """The best epoch's outputs on the test images (the trainer's evaluate_outputs, EBP's, or successor_outputs):
    its deployed net through packed inference (0 mismatches expected) and the quality of its probabilistic outputs;
    times and epochs to TARGET_ERROR. Writes the packed net to folder/NET_FILE and every output's per-image
    predicted classes to folder/PREDICTIONS_FILE (run_files.save_predictions)."""
    params = trainer.params
    x, y = data["x_test"], data["y_test"]
    outputs = getattr(trainer, "evaluate_outputs", functools.partial(successor_outputs, trainer))
    packed, probabilistic, predictions = outputs(best, x, y, folder / NET_FILE)
    net_sha256 = hashlib.sha256((folder / NET_FILE).read_bytes()).hexdigest()  # the report checks the file by it
    save_predictions(folder / PREDICTIONS_FILE, predictions)
    seconds = [h["train_seconds"] for h in history]
    cpu_seconds = [h.get("cpu_seconds") for h in history]
    target = TARGET_ERROR[params["dataset"]]
    reached = next((h["epoch"] for h in history if h["test_error"] <= target), None)
    return {"best_epoch": best_epoch, "packed": packed, "outputs": probabilistic,
            "seconds_per_epoch": round(float(np.median(seconds)), 3),
            "seconds_to_best_epoch": round(sum(seconds[:best_epoch]), 2),
            **({} if None in cpu_seconds else {
                "cpu_seconds_per_epoch": round(float(np.median(cpu_seconds)), 3),
                "cpu_seconds_to_best_epoch": round(sum(cpu_seconds[:best_epoch]), 2)}),
            "target_error": target, "epochs_to_target": reached, "n_tuned": n_tuned(trainer.params),
            "net_file": NET_FILE, "predictions_file": PREDICTIONS_FILE, "net_sha256": net_sha256}


# ----------------------------------------------------------------------------------------------------------
# The run: its record (result.json, rewritten after every step) and its loop
# ----------------------------------------------------------------------------------------------------------

PACKAGES = ("numpy", "jax", "jaxlib", "optax")


def _number(value, low=0.0, high=math.inf) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and low <= value <= high


RELIABILITY_BINS = 15  # successors.evaluate.ECE_BINS: the report pools the runs' bins one by one


def _output_problems(name: str, output) -> list[str]:
    """Why one probabilistic output of an evaluation (`outputs.<name>`) is not one evaluate_best writes."""
    where = f"evaluation.outputs.{name}"
    if not isinstance(output, dict):
        return [f"{where}: not an object"]
    problems = [f"{where}.{k}: {output.get(k)!r:.40} is not a number >= 0" for k in ("test_error", "nll", "ece")
                if not _number(output.get(k))]
    bins = output.get("reliability")
    n = bins.get("bins") if isinstance(bins, dict) else None
    if type(n) is not int or n != RELIABILITY_BINS or not _number(bins.get("ece")) or not all(
            isinstance(bins.get(k), list) and len(bins[k]) == n for k in ("count", "confidence", "accuracy")) or not all(
            type(c) is int and c >= 0 and (c == 0 or (_number(f) and _number(a)))
            for c, f, a in zip(bins["count"], bins["confidence"], bins["accuracy"])):
        problems.append(f"{where}.reliability: not a reliability record ({RELIABILITY_BINS} bins of count, "
                        f"confidence and accuracy, and their ece)")
    return problems


def evaluation_problems(data: dict) -> list[str]:
    """Why a finished successor record's evaluation (evaluate_best's) cannot be used, each naming its field: any field
    the report reads missing or of the wrong type, and its numbers not the record's own: the best epoch's, the
    packed net's error and the deployed net's equal to final.test_error (the best epoch's test error, itself the
    history's: record_problems), no mismatch between packed and float inference, a net digest of 64 hex digits."""
    e, final = data["evaluation"], data["final"] or {}
    if not isinstance(e, dict):
        return ["evaluation: a finished run has none"]
    packed, outputs = e.get("packed"), e.get("outputs")
    if not isinstance(packed, dict) or not isinstance(outputs, dict) or not {"deployed", "predictive"} & set(outputs):
        return ["evaluation: its packed results or its outputs (deployed, predictive) are missing"]
    problems = [p for name, output in outputs.items() for p in _output_problems(name, output)]
    if problems:
        return problems
    for name in ("seconds_per_epoch", "seconds_to_best_epoch", "target_error"):
        if not _number(e.get(name)):
            problems.append(f"evaluation.{name}: {e.get(name)!r:.40} is not a number >= 0")
    for name in ("cpu_seconds_per_epoch", "cpu_seconds_to_best_epoch"):
        if name in e and not _number(e[name]):
            problems.append(f"evaluation.{name}: {e[name]!r:.40} is not a number >= 0")
    if e.get("best_epoch") != data["best_epoch"]:
        problems.append(f"evaluation.best_epoch: {e.get('best_epoch')!r:.40}, but the record's is {data['best_epoch']}")
    if not (e.get("epochs_to_target") is None or type(e.get("epochs_to_target")) is int) or \
            type(e.get("n_tuned")) is not int:
        problems.append("evaluation.epochs_to_target / n_tuned: not integers")
    if packed.get("mismatches") != 0:
        problems.append("evaluation.packed.mismatches: the packed net disagrees with the float evaluation")
    test_error = final.get("test_error")
    deployed = [("outputs.deployed.test_error", outputs["deployed"]["test_error"])] if "deployed" in outputs else []
    for where, value in [("packed.error", packed.get("error"))] + deployed:
        if not _number(value, 0, 1) or test_error is None or abs(value - test_error) > 1e-6:
            problems.append(f"evaluation.{where}: {value!r:.40}, but the best epoch's test error (final.test_error, "
                            f"its history) is {test_error!r}")
    digest = e.get("net_sha256")
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64
                                   and all(c in "0123456789abcdef" for c in digest)):
        problems.append(f"evaluation.net_sha256: {digest!r:.80} is not a SHA-256 digest")
    if e.get("net_file") != NET_FILE:
        problems.append(f"evaluation.net_file: {e.get('net_file')!r:.40}, not {NET_FILE}")
    return problems


def successor_expected(data: dict) -> records.Expected | list[str]:
    """What a successor run record's parameters give (records.record_problems checks the record against it): as a
    backprop record's (tuned.expected), and a finished run's evaluation usable and holding the record's own numbers
    (evaluation_problems)."""
    found = tuned.expected(data, lambda p: make_parameters(p.get("method"), p.get("dataset"), p.get("architecture"),
                                                           p.get("profile"), **{k: p.get(k) for k in OVERRIDABLE}),
                           protocol_label, describe_protocol)
    if isinstance(found, records.Expected) and data["finished"]:
        found = found._replace(problems=tuple(evaluation_problems(data)))
    return found



def make_record(params, grid, history, schedule, finished, sessions, evaluation=None) -> dict:
    """The result.json of a run (tuned.record), with the final evaluation of its best epoch."""
    chosen = choose_point(grid) if len(grid) == len(grid_keys(params)) else None
    best = history[schedule["best_epoch"] - 1] if schedule and schedule.get("best_epoch") else None
    return tuned.record("successor", params, (protocol_label(params), describe_protocol(params)),
                        {"points": grid, "rule": "lowest validation error of the deployed net after the last grid epoch",
                         "tuned_on_seed": tuning_params(params)["seed"],
                         "chosen": None if chosen is None else {k: v for k, v in chosen.items() if k not in (
                             "validation_error", "diverged", "train_seconds", "cpu_seconds")}},
                        history, best, finished, sessions,
                        getattr(methods()[params["method"]], "PACKAGES", PACKAGES), grid_seconds=not adopts_grid(params),
                        evaluation=evaluation)


def adopted_grid(params: dict, source, data_dir, echo, allow_dirty: bool) -> list[dict]:
    """The grid points of the run of seed `tune_seed` (folder `source`, beside this run's), its grid run first
    (run(..., stop_after_epochs=0): the grid only, its record saying so) where it is not complete."""
    source_params = tuning_params(params)
    record = read_result(source)
    if record is None or record.get("parameters") != source_params or (
            record["grid"]["chosen"] is None and not record.get("finished")):
        record = run(source_params, source, data_dir, echo, allow_dirty, stop_after_epochs=0)
    points = record["grid"]["points"]
    if len(points) != len(grid_keys(source_params)):
        raise ValueError(f"{source}: the grid of seed {source_params['seed']} is incomplete")
    return [dict(p) for p in points]


def run(params: dict, folder=None, data_dir=None, echo=print, allow_dirty: bool = False,
        stop_after_epochs: int | None = None) -> dict:
    """Train one run to the end (or `stop_after_epochs` more epochs), resuming what `folder` holds; returns the
    record written to folder/result.json. The checkpoint is removed once the finished record is written. One
    process at a time trains into a folder (its flock, as an EBP run's: folder.open_output_dir); a run another
    process holds, or a failed write (a full disk: what was done stays, rerun to resume), is a ValueError naming it,
    so that a batch reports it and goes on."""
    folder = Path(folder or run_dir(params))
    try:
        _, lock = open_output_dir(folder)
    except (RunBusyError, UnsafeLockError) as err:
        raise ValueError(str(err)) from None
    try:
        return _run_locked(params, folder, data_dir, echo, allow_dirty, stop_after_epochs)
    except OSError as err:
        raise ValueError(f"{folder}: {err}; what was done is kept (result.json and the checkpoint of the last "
                         f"epoch): free the space and run again to resume") from err
    finally:
        lock.close()


class Successor(tuned.Baseline):
    """A successor (or EBP at their protocol) as the tuned loop runs it (tuned.run): the schedule halves a factor
    `decay` of the method's step sizes; the checkpoint holds the state and the best epoch's state; a run of
    another seed than `tune_seed` adopts that seed's grid; a finished run's best epoch is evaluated."""
    step, step_label, cpu_seconds = "decay", "decay", True

    def label(self, params):
        return f"{params['dataset']} {params['method']}-{params['architecture']} seed {params['seed']}"

    def grid_keys(self, params):
        return grid_keys(params)

    def make_record(self, *args, **extra):
        return make_record(*args, **extra)

    def load_split(self, params, preprocessing, data_dir=None):
        return load_split(params, preprocessing, data_dir)

    def make_trainer(self, params, point, n_fit):
        return make_trainer(params, point, n_fit)

    def save_checkpoint(self, path, trainer, state, best, schedule):
        save_checkpoint(path, trainer, state, best, schedule)

    def load_checkpoint(self, path, trainer):
        return load_checkpoint(path, trainer)

    def adopt_grid(self, params, session, folder, data_dir, echo, allow_dirty):
        if adopts_grid(params) and len(session.grid) < len(grid_keys(params)):
            session.grid = adopted_grid(params, folder.parent / run_name(tuning_params(params)), data_dir, echo,
                                        allow_dirty)
            session.write([], None)
            echo(f"{self.label(params)}: the grid of seed {params['tune_seed']} chose {choose_point(session.grid)}")

    def finish(self, trainer, best, data, history, best_epoch, folder):
        return {"evaluation": evaluate_best(trainer, best, data, history, best_epoch, folder)}


SUCCESSOR = Successor()


def _run_locked(params: dict, folder: Path, data_dir, echo, allow_dirty: bool, stop_after_epochs: int | None) -> dict:
    """run's work, holding the folder's lock (tuned.run)."""
    return tuned.run(SUCCESSOR, params, folder, data_dir, echo, allow_dirty, stop_after_epochs)


def run_state(folder, params: dict) -> str:
    """A short description of a run folder's progress, for the script's --list (tuned.run_state); a record of this
    run that is inconsistent (a malformed evaluation included) says so, naming its first problem."""
    result = read_result(folder)
    if result is not None and result.get("parameters") == params:
        problems = records.record_problems(result)
        if problems:
            return f"inconsistent result.json ({problems[0]})"
    return tuned.run_state(folder, params, len(grid_keys(params)), lambda result: (
        f"finished: test error {100 * result['evaluation']['packed']['error']:.2f}% (packed) at epoch "
        f"{result['best_epoch']} of {result['epochs_done']}"))


# ----------------------------------------------------------------------------------------------------------
# Evidence of a finished run's reported error: the saved net, by its digest or scored again
# ----------------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def _test_split(key: str, data_dir=None):
    """(x_test, y_test) of the split (load_split) of the run whose parameters and preprocessing `key` holds (JSON),
    kept for the next run of the same split."""
    params, preprocessing = json.loads(key)
    data = load_split(params, preprocessing, data_dir)
    return data["x_test"], data["y_test"]


def rescore(record: dict, folder, data_dir=None) -> float:
    """The test error of the packed net saved in folder/NET_FILE (ebp_binary.predict on the run's test split, with
    the preprocessing its grid chose): what evaluation.packed.error must be."""
    import ebp_binary
    import ebp_binary_format

    p = record["parameters"]
    own = hasattr(methods()[p["method"]], "load_split")  # a method's own split may read more of its parameters
    split = p if own else {k: p[k] for k in ("method", "dataset", "n_train", "n_validation")}
    x, y = _test_split(json.dumps([split, record["grid"]["chosen"]["preprocessing"]], sort_keys=True), data_dir)
    if p["architecture"][0] == "c":  # a CNN (successors.cnn): its own format and packed inference
        import ebp_binary_conv
        import ebp_binary_conv_format
        packed = ebp_binary_conv_format.load_cnn(Path(folder) / NET_FILE)
        return float(np.mean(ebp_binary_conv.predict(packed, x, engine="auto") != y))
    packed = ebp_binary_format.load_packed(Path(folder) / NET_FILE)
    return float(np.mean(ebp_binary.predict(packed, x, engine="auto") != y))


def net_problems(record: dict, folder, data_dir=None) -> list[str]:
    """Why the net saved beside a finished successor record (folder/NET_FILE) does not vouch for its reported
    error: missing or unreadable, its digest not evaluation.net_sha256 where the record holds one, else (records
    written before the digest) its re-scored test error (rescore) not evaluation.packed.error."""
    path = Path(folder) / NET_FILE
    evaluation = record["evaluation"]
    try:
        if evaluation.get("net_sha256") is not None:
            if path.stat().st_size > records.MAX_JSON_BYTES:  # far above a [784,800,800,10] net's ~0.2 MB
                return [f"{path}: {path.stat().st_size:,} bytes, more than any saved net; not read"]
            if hashlib.sha256(path.read_bytes()).hexdigest() != evaluation["net_sha256"]:
                return [f"{path}: not the net its record evaluated (its digest is not evaluation.net_sha256)"]
            return []
        error = rescore(record, folder, data_dir)
    except FileNotFoundError:
        return [f"{path}: missing: the record's test error has no net behind it"]
    except (OSError, ValueError) as err:
        return [f"{path}: cannot be scored ({type(err).__name__}: {err})"]
    if abs(error - evaluation["packed"]["error"]) > 1e-9:
        return [f"evaluation.packed.error: {evaluation['packed']['error']}, but {path} scores {error:.4f} on the test "
                f"images"]
    return []
