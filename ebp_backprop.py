"""A backpropagation baseline beside EBP (issue 17): tanh MLPs trained by scikit-learn, same data pipeline.

Cheng et al. (2015, §4, Table 2 discussion and its footnote) call EBP "comparable to standard BackPropagation" on
two backprop numbers they quote without code or protocol:

1. a tanh MLP with one hidden layer of 800 units and an "optimized learning rate": 2.13 % test error on MNIST;
2. 500 tanh units with "L1 and L2 error regularization" and Glorot-uniform initialisation
   (weights uniform in ±sqrt(6 / (fan_in + fan_out))): 1.65 %. This is the number printed by the deeplearning.net
   Theano MLP tutorial (`mlp.py`: 500 tanh units, learning rate 0.01, batch 20, cost = mean NLL
   + L1_reg·Σ|W| + L2_reg·ΣW² with L1_reg = 0.00 and L2_reg = 0.0001, 828 epochs on a 50,000/10,000 split with
   early stopping on the validation error); that the paper quotes it is our inference from the match.

Here both are trained with a maintained library (scikit-learn's `MLPClassifier`: tanh, plain SGD, softmax
cross-entropy, Glorot-uniform initialisation by default) on exactly EBP's inputs (`ebp_lib.load_dataset`,
per-pixel standardisation). scikit-learn has no L1 penalty for MLPs, so configuration 2 is run **with L2 only**;
in the tutorial the L1 coefficient is 0, so L2 only is what that number's code ran.

scikit-learn's penalty for a minibatch of B images is 0.5·alpha·ΣW²/B, added to the mean cross-entropy; the
tutorial's is L2_reg·ΣW². The same objective (and so the same minimiser) needs alpha = 2·L2_reg·B
(`sklearn_alpha`). Biases are not penalised in either.

The learning rate is chosen on a validation split carved from the training set (the last `n_validation` of the
training images; the standardisation statistics come from the rest), never on the test set (`tune_learning_rate`).
The protocol (`PROTOCOL`) is short by design (a 2-core machine): it is labelled "shortened" in every result and is
not the paper's (which the paper does not state) nor EBP's 120 epochs at batch 10.

Results are written like EBP's `result.json` (outputs/README.md): parameters, protocol, per-epoch history of test
and training error, final, seconds, versions, git commit, sessions. Training resumes from `checkpoint.pkl`
(the pickled estimator, its random state included) after every epoch; grid points resume per learning rate.
"""
from __future__ import annotations

import datetime as _dt
import json
import pickle
import socket
import time
from pathlib import Path

import numpy as np

import ebp_experiments as ex
import ebp_lib

REPO = Path(__file__).resolve().parent
OUTPUT_DIR = REPO / "outputs" / "backprop"
RESULT_FILE = "result.json"
CHECKPOINT_FILE = "checkpoint.pkl"
DATASETS = ("mnist", "fashion-mnist")
N_CLASSES = 10
FULL_TRAIN = 60000           # MNIST and Fashion-MNIST both have 60,000 training images
TRAIN_ERROR_IMAGES = 10000   # training error on the first 10,000 training images, as EBP's runs record it
EBP_PROTOCOL = {"epochs": 120, "batch_size": 10}  # the EBP runs' protocol (outputs/README.md)

# The protocol of this baseline: a learning-rate grid scored after `grid_epochs` on 50,000/10,000, then the
# chosen rate trained for `epochs` on all 60,000. Batch 20 as the tutorial behind the paper's 1.65 %.
PROTOCOL = {
    "batch_size": 20,
    "epochs": 20,
    "learning_rate_grid": [0.003, 0.01, 0.03, 0.1, 0.3],
    "grid_epochs": 5,
    "n_validation": 10000,
    "momentum": 0.0,        # plain SGD, as "standard backpropagation" and the tutorial
    "seed": 0,
}
OVERRIDABLE = set(PROTOCOL) | {"n_train"}

# Configurations: the paper's two quoted ones, then neighbours of every EBP Table 2 column (no regularisation).
# paper_error: the paper's quoted test error in %, with what the paper says it was.
CONFIGS = {
    "tanh-800": {"architecture": "800", "l2": 0.0, "paper_error": 2.13,
                 "paper_note": "tanh, one hidden layer of 800, optimized learning rate"},
    "tanh-500-l2": {"architecture": "500", "l2": 1e-4, "paper_error": 1.65,
                    "paper_note": "tanh, 500 hidden units, L1 + L2 regularisation, Glorot-uniform init "
                                  "(ours: L2 only, L2_reg = 1e-4 as the tutorial; sklearn has no L1)"},
    **{f"tanh-{a}": {"architecture": a, "l2": 0.0, "paper_error": None, "paper_note": None}
       for a in ("200", "400", "600", "1000", "200-200", "400-400", "600-600", "800-800")},
}
PAPER_CONFIGS = ("tanh-800", "tanh-500-l2")


# ----------------------------------------------------------------------------------------------------------
# Configuration and parameters
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


def sklearn_alpha(l2: float, batch_size: int) -> float:
    """scikit-learn's `alpha` giving the objective mean cross-entropy + l2·ΣW² (the tutorial's L2_reg).

    sklearn adds 0.5·alpha·ΣW²/B to a batch's mean loss (B images), so alpha = 2·l2·B.
    """
    return 2.0 * l2 * batch_size


def protocol_label(params: dict) -> str:
    """'ebp' only for EBP's protocol (all 60,000 images, 120 epochs, batch 10), otherwise 'shortened'."""
    full = (params["n_train"] is None and params["epochs"] >= EBP_PROTOCOL["epochs"]
            and params["batch_size"] == EBP_PROTOCOL["batch_size"])
    return "ebp" if full else "shortened"


def describe_protocol(params: dict) -> str:
    """One sentence for every result and table: how this run was trained."""
    grid = ", ".join(f"{r:g}" for r in params["learning_rate_grid"])
    n = "all training images" if params["n_train"] is None else f"the first {params['n_train']} training images"
    return (f"learning rate from {{{grid}}} by validation error after {params['grid_epochs']} epochs "
            f"(last {params['n_validation']} training images held out), then {params['epochs']} epochs on {n}; "
            f"plain SGD, batch {params['batch_size']}, constant rate, seed {params['seed']}")


def make_parameters(dataset: str, config: str, **overrides) -> dict:
    """The validated parameters of one run: a configuration of CONFIGS on a dataset, PROTOCOL unless overridden."""
    if dataset not in ebp_lib.DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {sorted(ebp_lib.DATASETS)}")
    if config not in CONFIGS:
        raise ValueError(f"unknown configuration {config!r}; choose one of {list(CONFIGS)}")
    unknown = set(overrides) - OVERRIDABLE
    if unknown:
        raise ValueError(f"cannot override {sorted(unknown)}; overridable: {sorted(OVERRIDABLE)}")
    p = {**PROTOCOL, "n_train": None, **{k: v for k, v in overrides.items() if v is not None}}
    grid = [float(r) for r in p["learning_rate_grid"]]
    if not grid or min(grid) <= 0 or len(set(grid)) != len(grid):
        raise ValueError(f"learning_rate_grid {grid} must be distinct positive rates")
    for name in ("batch_size", "epochs", "grid_epochs", "n_validation"):
        if int(p[name]) != p[name] or p[name] < 1:
            raise ValueError(f"{name}={p[name]!r} must be a positive integer")
    if p["n_train"] is not None and not p["n_validation"] < int(p["n_train"]):
        raise ValueError(f"n_validation={p['n_validation']} must be smaller than n_train={p['n_train']}")
    spec = CONFIGS[config]
    hidden_layers(spec["architecture"])
    return {"dataset": dataset, "config": config, "architecture": spec["architecture"], "activation": "tanh",
            "solver": "sgd", "loss": "softmax cross-entropy", "init": "glorot-uniform (sklearn default)",
            "l2": spec["l2"], "l1": 0.0, "alpha": sklearn_alpha(spec["l2"], int(p["batch_size"])),
            "batch_size": int(p["batch_size"]), "epochs": int(p["epochs"]), "learning_rate_grid": sorted(grid),
            "grid_epochs": int(p["grid_epochs"]), "n_validation": int(p["n_validation"]),
            "momentum": float(p["momentum"]), "seed": int(p["seed"]),
            "n_train": None if p["n_train"] is None else int(p["n_train"]), "preprocessing": "pixel",
            "dtype": "float32"}


def build_classifier(params: dict, learning_rate: float):
    """The scikit-learn MLP of a run: tanh hidden layers, softmax output, plain SGD at a constant rate.

    Trained one epoch per `partial_fit` call (which shuffles with the estimator's own random state), so the
    per-epoch errors can be recorded and the estimator pickled between epochs.
    """
    from sklearn.neural_network import MLPClassifier

    return MLPClassifier(hidden_layer_sizes=hidden_layers(params["architecture"]), activation="tanh",
                         solver="sgd", alpha=params["alpha"], batch_size=params["batch_size"],
                         learning_rate="constant", learning_rate_init=learning_rate,
                         momentum=params["momentum"], nesterovs_momentum=False, shuffle=True,
                         random_state=params["seed"], early_stopping=False)


# ----------------------------------------------------------------------------------------------------------
# Data: the validation split and the training/test data
# ----------------------------------------------------------------------------------------------------------

def validation_split(images: np.ndarray, labels: np.ndarray, n_validation: int, dtype=np.float32):
    """Split training images into fit and validation parts (the last `n_validation` held out) and standardise
    both per pixel with the fit part's statistics (`ebp_lib.standardise`, the EBP pipeline).

    Takes training images only: the test set is never seen while the learning rate is chosen.
    """
    n_fit = len(images) - n_validation
    if n_fit < 1 or n_validation < 1:
        raise ValueError(f"cannot hold out {n_validation} of {len(images)} images as validation")
    x_fit, x_val = ebp_lib.standardise(images[:n_fit], images[n_fit:], "pixel", 0.0, dtype)
    return x_fit, labels[:n_fit], x_val, labels[n_fit:]


def grid_data(params: dict, data_dir=None):
    """Fit and validation data of a run's learning-rate grid, from its dataset's training images only."""
    raw = ebp_lib.load_raw(params["dataset"], data_dir)
    images, labels = raw["train_images"], raw["train_labels"]
    if params["n_train"] is not None:
        images, labels = images[:params["n_train"]], labels[:params["n_train"]]
    return validation_split(images, labels, params["n_validation"], np.dtype(params["dtype"]))


def training_data(params: dict, data_dir=None) -> ebp_lib.Dataset:
    """Training and test data of the final run: exactly EBP's pipeline (per-pixel standardisation)."""
    return ebp_lib.load_dataset(params["dataset"], preprocessing="pixel", n_train=params["n_train"],
                                data_dir=data_dir, dtype=np.dtype(params["dtype"]))


# ----------------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------------

def error_rate(model, x: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of misclassified images, rounded to 1e-6 as EBP's results (1/10,000 is exact there)."""
    return round(float(np.mean(model.predict(x) != labels)), 6)


def train_epoch(model, x: np.ndarray, labels: np.ndarray) -> float:
    """One pass over the shuffled training set (one `partial_fit`); returns the seconds it took."""
    start = time.perf_counter()
    model.partial_fit(x, labels, classes=np.arange(N_CLASSES))
    return time.perf_counter() - start


def grid_point(params: dict, learning_rate: float, x_fit, y_fit, x_val, y_val) -> dict:
    """Train at one learning rate for `grid_epochs` epochs; the validation error after every epoch.

    A rate that makes SGD diverge (scikit-learn stops on non-finite weights) scores 1.0 and is marked so.
    """
    model = build_classifier(params, learning_rate)
    errors, seconds, diverged = [], 0.0, False
    for _ in range(params["grid_epochs"]):
        try:
            seconds += train_epoch(model, x_fit, y_fit)
        except ValueError as err:
            if "non-finite" not in str(err):
                raise
            diverged = True
            break
        errors.append(error_rate(model, x_val, y_val))
    if diverged:
        errors += [1.0] * (params["grid_epochs"] - len(errors))
    return {"learning_rate": learning_rate, "validation_error": errors, "diverged": diverged,
            "train_seconds": round(seconds, 2)}


def choose_rate(points: list[dict]) -> float:
    """The rate with the lowest validation error after the last grid epoch (ties: the smaller rate)."""
    if not points:
        raise ValueError("no grid points to choose from")
    return min(points, key=lambda p: (p["validation_error"][-1], p["learning_rate"]))["learning_rate"]


def tune_learning_rate(params: dict, x_fit, y_fit, x_val, y_val, done: list[dict] | None = None,
                       on_point=None) -> list[dict]:
    """Score every rate of the grid not already in `done` (resumption), calling on_point(points) after each."""
    points = list(done or [])
    for rate in params["learning_rate_grid"]:
        if any(p["learning_rate"] == rate for p in points):
            continue
        points.append(grid_point(params, rate, x_fit, y_fit, x_val, y_val))
        if on_point is not None:
            on_point(points)
    return sorted(points, key=lambda p: p["learning_rate"])


# ----------------------------------------------------------------------------------------------------------
# Provenance and result files (the same fields as scripts/run_tables.py writes for EBP runs)
# ----------------------------------------------------------------------------------------------------------

PACKAGES = ("numpy", "scipy", "scikit-learn", "joblib", "threadpoolctl")


def package_versions() -> dict:
    return ex.package_versions(PACKAGES)


_GIT_AT_START: dict | None = None


def process_git_state() -> dict:
    """git_state() when this process first asked: the code it runs was imported then, and a long runner would
    otherwise record a later HEAD (another agent's commit in a shared tree) for runs it trains with older code."""
    global _GIT_AT_START
    if _GIT_AT_START is None:
        _GIT_AT_START = ex.git_state()
    return dict(_GIT_AT_START)


def read_result(folder) -> dict | None:
    """The result.json in `folder`, or None if there is none or it is unreadable."""
    try:
        return json.loads((Path(folder) / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None


def run_dir(dataset: str, config: str, root=OUTPUT_DIR) -> Path:
    return Path(root) / dataset / config


class Run:
    """One run's folder: its parameters, grid, history and sessions, written to result.json after every step."""

    def __init__(self, folder, params: dict):
        self.folder, self.params = Path(folder), params
        previous = read_result(self.folder)
        if previous is not None and previous.get("parameters") != params:
            raise ValueError(f"{self.folder} holds a run with other parameters "
                             f"({_differences(previous.get('parameters') or {}, params)}); move that folder away "
                             f"or run with the same parameters to resume it")
        self.previous = previous or {}
        self.grid = list(self.previous.get("learning_rate_grid", {}).get("points", []))
        self.history: list[dict] = list(self.previous.get("history", []))  # until the checkpoint is read
        self.sessions = list(self.previous.get("sessions", []))
        self.started = time.time()
        self.session = {"started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        "host": socket.gethostname(), "cpu": ex.cpu_model(),
                        "from_grid_points": len(self.grid), "from_epoch": None,
                        **process_git_state(), "versions": package_versions()}

    @property
    def learning_rate(self) -> float | None:
        done = len(self.grid) == len(self.params["learning_rate_grid"])
        return choose_rate(self.grid) if done else None

    def write(self, finished: bool = False) -> dict:
        wall = time.time() - self.started
        session = {**self.session, "to_grid_points": len(self.grid), "to_epoch": len(self.history),
                   "wall_seconds": round(wall, 2)}
        n_images = self.params["n_train"] or FULL_TRAIN
        last = self.history[-1] if self.history else None
        grid = {"points": self.grid, "epochs": self.params["grid_epochs"],
                "n_fit": n_images - self.params["n_validation"], "n_validation": self.params["n_validation"],
                "chosen": self.learning_rate, "rule": "lowest validation error after the last grid epoch"}
        result = {
            "format": 1,
            "method": "backprop",
            "parameters": self.params,
            "protocol": protocol_label(self.params),
            "protocol_description": describe_protocol(self.params),
            "regularisation_note": ("L2 only (l2 = ΣW² coefficient, sklearn alpha = 2·l2·batch); the paper's "
                                    "configuration names L1 + L2, sklearn has no L1 for MLPs, and the tutorial "
                                    "the 1.65 % matches has L1_reg = 0") if self.params["l2"] else "none",
            "finished": bool(finished),
            "phase": "finished" if finished else ("final" if self.learning_rate is not None else "grid"),
            "learning_rate": self.learning_rate,
            "learning_rate_grid": grid,
            "epochs_done": len(self.history),
            "n_train_images": n_images,
            "train_error_images": min(n_images, TRAIN_ERROR_IMAGES),
            "final": None if last is None else {k: last[k] for k in ("test_error", "train_error")},
            "history": self.history,
            "train_seconds": round(sum(p["train_seconds"] for p in self.grid)
                                   + sum(r["train_seconds"] for r in self.history), 2),
            "wall_seconds": round(sum(s["wall_seconds"] for s in self.sessions) + wall, 2),
            "versions": package_versions(),
            "git_commit": self.session["git_commit"],
            "git_dirty": self.session["git_dirty"],
            "sessions": self.sessions + [session],
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        ex.write_json(self.folder / RESULT_FILE, result)  # a reader (the runner's --list) never sees half a file
        return result


def _differences(a: dict, b: dict) -> str:
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k)!r} there, {b.get(k)!r} asked" for k in keys)


def _save_checkpoint(folder: Path, model, history: list[dict]) -> None:
    ex.write_atomically(folder / CHECKPOINT_FILE, pickle.dumps({"model": model, "history": history}))


def _load_checkpoint(folder: Path):
    """The pickled estimator and history of an unfinished final run (our own file), or (None, [])."""
    path = folder / CHECKPOINT_FILE
    if not path.exists():
        return None, []
    state = pickle.loads(path.read_bytes())
    return state["model"], state["history"]


def is_finished(folder, params: dict) -> bool:
    result = read_result(folder)
    return bool(result and result.get("finished") and result.get("parameters") == params)


def run(params: dict, folder, data_dir=None, echo=print, stop_after_epochs: int | None = None) -> dict:
    """Train one run to the end (or `stop_after_epochs` more final epochs), resuming what is in `folder`.

    Phase 1: the learning-rate grid on the validation split (resumes per rate). Phase 2: the chosen rate on all
    training images, test and training error after every epoch (resumes per epoch from checkpoint.pkl, which is
    deleted when the run finishes). Returns the result written to folder/result.json.
    """
    folder = Path(folder)
    state = Run(folder, params)
    if state.previous.get("finished"):
        return state.previous
    state.write()
    if state.learning_rate is None:
        split = grid_data(params, data_dir)

        def record(points):
            state.grid = sorted(points, key=lambda p: p["learning_rate"])
            p = points[-1]
            echo(f"{params['dataset']} {params['config']}: rate {p['learning_rate']:g} -> validation error "
                 f"{100 * p['validation_error'][-1]:.2f}% after {params['grid_epochs']} epochs "
                 f"({p['train_seconds']:.0f} s)")
            state.write()

        state.grid = tune_learning_rate(params, *split, done=state.grid, on_point=record)
        del split
        echo(f"{params['dataset']} {params['config']}: chosen rate {state.learning_rate:g}")
    data = training_data(params, data_dir)
    model, state.history = _load_checkpoint(folder)
    if model is None and state.previous.get("epochs_done"):
        echo(f"{folder}: no {CHECKPOINT_FILE} to resume epoch {state.previous['epochs_done']} from; "
             f"training the chosen rate from epoch 0")
    if model is None:
        model = build_classifier(params, state.learning_rate)
    state.session["from_epoch"] = len(state.history)
    n_eval = min(len(data.x_train), TRAIN_ERROR_IMAGES)
    stop = params["epochs"] if stop_after_epochs is None else min(params["epochs"],
                                                                 len(state.history) + stop_after_epochs)
    while len(state.history) < stop:
        seconds = train_epoch(model, data.x_train, data.labels_train)
        record = {"epoch": len(state.history) + 1,
                  "test_error": error_rate(model, data.x_test, data.labels_test),
                  "train_error": error_rate(model, data.x_train[:n_eval], data.labels_train[:n_eval]),
                  "loss": round(float(model.loss_), 6), "train_seconds": round(seconds, 2)}
        state.history.append(record)
        _save_checkpoint(folder, model, state.history)
        echo(f"{params['dataset']} {params['config']} epoch {record['epoch']}/{params['epochs']}: test error "
             f"{100 * record['test_error']:.2f}%, train {100 * record['train_error']:.2f}% "
             f"(epoch took {seconds:.1f} s)")
        state.write()
    finished = len(state.history) >= params["epochs"]
    result = state.write(finished=finished)
    if finished:
        (folder / CHECKPOINT_FILE).unlink(missing_ok=True)
    return result


def run_state(folder, params: dict) -> str:
    """A short description of a run folder's progress, for the runner's --list."""
    result = read_result(folder)
    if result is None:
        return "not started"
    if result.get("parameters") != params:
        return "other parameters (not resumable with these)"
    if result.get("finished"):
        return f"finished: test error {100 * result['final']['test_error']:.2f}%"
    if result.get("learning_rate") is None:
        return f"grid {len(result['learning_rate_grid']['points'])}/{len(params['learning_rate_grid'])}"
    return f"epoch {result['epochs_done']}/{params['epochs']} at rate {result['learning_rate']:g}"


# ----------------------------------------------------------------------------------------------------------
# EBP against backprop (notebooks/comparison.ipynb): reads result.json files only
# ----------------------------------------------------------------------------------------------------------

TABLE2_ARCHITECTURES = ("200", "400", "600", "800", "1000", "200-200", "400-400", "600-600", "800-800")
EBP_OUTPUTS = (("binary", "test_ebp_p", "B-EBP-P"), ("binary", "test_ebp_d", "B-EBP-D"),
               ("real", "test_ebp_p", "R-EBP-P"), ("real", "test_ebp_d", "R-EBP-D"))
NOT_RUN = "not run yet"
ROW_ORDER = ("tanh-200", "tanh-400", "tanh-500-l2", "tanh-600", "tanh-800", "tanh-1000", "tanh-200-200",
             "tanh-400-400", "tanh-600-600", "tanh-800-800")


def _ebp_key(result: dict) -> tuple:
    """Most complete first: the paper's protocol finished, then training images seen, then finished; among
    equally complete runs seed 0, the baseline's only seed (never whichever seed happened to be read first)."""
    return (result.get("protocol") == "paper" and bool(result.get("finished")),
            result["epochs_done"] * result["n_train_images"], bool(result.get("finished")),
            result["parameters"].get("seed", 0) == 0)


def ebp_table2_results(results: list[dict], dataset: str) -> dict:
    """(architecture, weights) -> the most complete EBP run without dropout on `dataset` (Table 2's setting:
    per-pixel standardisation, reference initialisation), from result.json contents; seed 0 where several seeds
    are equally complete, so that EBP and backprop are compared one seed against one seed."""
    best = {}
    for r in results:
        p = r.get("parameters", {})
        if (r.get("method", "ebp") != "ebp" or p.get("dataset") != dataset or p.get("dropout") is not None
                or p.get("architecture") not in TABLE2_ARCHITECTURES or p.get("preprocessing") != "pixel"
                or p.get("std_floor") != 0 or p.get("init_scale") != 1 or not r.get("epochs_done")):
            continue
        key = (p["architecture"], p["weights"])
        if key not in best or _ebp_key(r) > _ebp_key(best[key]):
            best[key] = r
    return best


def backprop_results(results: list[dict], dataset: str) -> dict:
    """config -> the most complete backprop run on `dataset` (finished first, then epochs done)."""
    best = {}
    for r in results:
        p = r.get("parameters", {})
        if r.get("method") != "backprop" or p.get("dataset") != dataset:
            continue
        rank = (bool(r.get("finished")), r.get("epochs_done", 0))
        if p["config"] not in best or rank > (bool(best[p["config"]]["finished"]), best[p["config"]]["epochs_done"]):
            best[p["config"]] = r
    return best


def percent(fraction) -> str:
    """A stored error fraction as a percentage with 2 decimals (errors on 10,000 test images are exact there)."""
    return f"{100 * fraction:.2f}"


def ebp_cell(result: dict | None, output: str) -> str:
    """An EBP table cell: the test error, with how far the run got unless it is the paper's protocol, finished."""
    if result is None or not result.get("final"):
        return NOT_RUN
    text = percent(result["final"][output])
    if not (result.get("protocol") == "paper" and result.get("finished")):
        p = result["parameters"]
        text += f" ({result['epochs_done']}/{p['epochs']} ep, {result['n_train_images']:,} images)"
    return text


def backprop_cell(result: dict | None) -> str:
    """A backprop table cell: the test error after the last epoch run, with epochs if unfinished."""
    if result is None:
        return NOT_RUN
    if not result.get("final"):
        return f"{NOT_RUN} (learning-rate grid {len(result['learning_rate_grid']['points'])}/" \
               f"{len(result['parameters']['learning_rate_grid'])})"
    text = percent(result["final"]["test_error"])
    p = result["parameters"]
    if not result.get("finished"):
        text += f" ({result['epochs_done']}/{p['epochs']} ep)"
    if p["n_train"] is not None:
        text += f" ({p['n_train']:,} images)"
    return text


def architecture_label(architecture: str) -> str:
    sizes = hidden_layers(architecture)
    return str(sizes[0]) if len(sizes) == 1 else "[" + ", ".join(map(str, sizes)) + "]"


def comparison_rows(ebp_results: list[dict], bp_results: list[dict], dataset: str) -> list[list[str]]:
    """Rows of the comparison table of one dataset: architecture, the four EBP outputs, backprop (ours), the
    paper's quoted backprop number (MNIST only). The L2 configuration gets its own row beside 500 units."""
    ebp, bp = ebp_table2_results(ebp_results, dataset), backprop_results(bp_results, dataset)
    rows = []
    for config in ROW_ORDER:
        spec = CONFIGS[config]
        label = architecture_label(spec["architecture"])
        if spec["l2"]:
            label += ", L2 only (paper: L1 + L2)"
            ebp_cells = ["—"] * len(EBP_OUTPUTS)
        else:
            ebp_cells = [ebp_cell(ebp.get((spec["architecture"], w)), out) for w, out, _ in EBP_OUTPUTS]
        paper = f"{spec['paper_error']:.2f}" if spec["paper_error"] is not None and dataset == "mnist" else "—"
        rows.append([label, *ebp_cells, backprop_cell(bp.get(config)), paper])
    return rows


def comparison_table(ebp_results: list[dict], bp_results: list[dict], dataset: str) -> str:
    """The comparison of one dataset as a Markdown table (test error, %)."""
    header = ["hidden units", *[label for _, _, label in EBP_OUTPUTS], "backprop (ours)",
              "backprop quoted by the paper"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in comparison_rows(ebp_results, bp_results, dataset)]
    return "\n".join(lines)


def grid_table(bp_results: list[dict]) -> str:
    """Every backprop run's learning-rate grid: validation error (%) after the grid's last epoch per rate,
    the chosen rate, and the test error of the final training."""
    runs = [r for r in bp_results if r.get("method") == "backprop"]
    rates = sorted({p["learning_rate"] for r in runs for p in r["learning_rate_grid"]["points"]})
    header = ["dataset", "config", *[f"lr {r:g}" for r in rates], "chosen", "epochs", "test error", "train error"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in sorted(runs, key=lambda r: (DATASETS.index(r["parameters"]["dataset"]),
                                         list(CONFIGS).index(r["parameters"]["config"]))):
        val = {p["learning_rate"]: p["validation_error"][-1] for p in r["learning_rate_grid"]["points"]}
        final = r.get("final") or {}
        lines.append("| " + " | ".join([
            r["parameters"]["dataset"],
            r["parameters"]["config"] + (" (L2 only)" if r["parameters"]["l2"] else ""),
            *[percent(val[x]) if x in val else "—" for x in rates],
            "—" if r["learning_rate"] is None else f"{r['learning_rate']:g}",
            f"{r['epochs_done']}/{r['parameters']['epochs']}",
            percent(final["test_error"]) if final else "—", percent(final["train_error"]) if final else "—"]) + " |")
    return "\n".join(lines)


def width_series(ebp_results: list[dict], bp_results: list[dict], dataset: str) -> dict:
    """method -> {n_layers: [(width, test error %), ...]} for the test-error-vs-width figure."""
    ebp, bp = ebp_table2_results(ebp_results, dataset), backprop_results(bp_results, dataset)
    series = {}
    for weights, output, label in EBP_OUTPUTS:
        for (architecture, w), r in ebp.items():
            if w == weights and r.get("final"):
                sizes = hidden_layers(architecture)
                series.setdefault(label, {}).setdefault(len(sizes), []).append(
                    (sizes[0], 100 * r["final"][output]))
    for config, r in bp.items():
        if CONFIGS[config]["l2"] == 0 and r.get("final"):
            sizes = hidden_layers(CONFIGS[config]["architecture"])
            series.setdefault("backprop", {}).setdefault(len(sizes), []).append(
                (sizes[0], 100 * r["final"]["test_error"]))
    return {m: {n: sorted(points) for n, points in by_n.items()} for m, by_n in series.items()}


def plot_width(ax, ebp_results: list[dict], bp_results: list[dict], dataset: str) -> None:
    """Test error vs hidden units per layer: one colour per method, solid one hidden layer, dashed two; the L2
    backprop run and (MNIST) the paper's two quoted backprop numbers as separate markers."""
    colours = {"B-EBP-P": "tab:blue", "B-EBP-D": "tab:cyan", "R-EBP-P": "tab:red", "R-EBP-D": "tab:orange",
               "backprop": "black"}
    series = width_series(ebp_results, bp_results, dataset)
    for method, by_n in series.items():
        for n, points in sorted(by_n.items()):
            x, y = zip(*points)
            ax.plot(x, y, "o-" if n == 1 else "s--", color=colours[method], ms=6 if method == "backprop" else 4,
                    zorder=3 if method == "backprop" else 2, label=f"{method}, {n} hidden layer{'s' if n > 1 else ''}")
    l2 = backprop_results(bp_results, dataset).get("tanh-500-l2")
    if l2 is not None and l2.get("final"):
        ax.plot([500], [100 * l2["final"]["test_error"]], "D", color="black", mfc="white", zorder=3,
                label="backprop 500, L2 only (ours)")
    if dataset == "mnist":
        for config in PAPER_CONFIGS:
            spec = CONFIGS[config]
            ax.plot([hidden_layers(spec["architecture"])[0]], [spec["paper_error"]], "*", color="green", ms=12,
                    label="backprop quoted by the paper (800; 500 with L1 + L2)" if config == PAPER_CONFIGS[0]
                    else None)
    if not series:
        ax.text(0.5, 0.5, NOT_RUN, transform=ax.transAxes, ha="center")
    ax.set(title=dataset, xlabel="hidden units per layer", ylabel="test error (%)", xticks=[200, 400, 600, 800, 1000])


class Markdown:
    """Markdown that Jupyter renders, with the same text as its plain-text form (which nbval compares)."""

    def __init__(self, text: str):
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def headline(ebp_results: list[dict], bp_results: list[dict], dataset: str) -> str:
    """EBP's best one-hidden-layer result of each output against backprop at the paper's two sizes, in words."""
    ebp, bp = ebp_table2_results(ebp_results, dataset), backprop_results(bp_results, dataset)
    lines = []
    for config in PAPER_CONFIGS:
        spec, r = CONFIGS[config], bp.get(config)
        ours = _with_percent(backprop_cell(r))
        quoted = f"; the paper quotes {spec['paper_error']:.2f}%" if dataset == "mnist" else ""
        reg = ", L2 only" if spec["l2"] else ""
        lines.append(f"backprop {architecture_label(spec['architecture'])}{reg} (ours): {ours}{quoted}")
    for weights, output, label in EBP_OUTPUTS:
        runs = {a: r for (a, w), r in ebp.items() if w == weights and r.get("final")}
        if not runs:
            lines.append(f"{label}: {NOT_RUN}")
            continue
        best = min(runs, key=lambda a: (runs[a]["final"][output], TABLE2_ARCHITECTURES.index(a)))
        lines.append(f"{label}: at 800 hidden units {_with_percent(ebp_cell(runs.get('800'), output))}; best of "
                     f"Table 2 {_with_percent(ebp_cell(runs[best], output))} at {architecture_label(best)}")
    return "\n".join(lines)


def _with_percent(cell: str) -> str:
    """'2.22' -> '2.22%', '2.22 (59/120 ep)' -> '2.22% (59/120 ep)'; 'not run yet' unchanged."""
    number, _, rest = cell.partition(" ")
    try:
        float(number)
    except ValueError:
        return cell
    return f"{number}%" + (f" {rest}" if rest else "")


def width_figure(ebp_results: list[dict], bp_results: list[dict], y_max: dict | None = None):
    """One panel per dataset (plot_width), one legend below both; y_max cuts a panel's axis (dataset -> %)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DATASETS), figsize=(11, 4.8))
    handles = {}
    for ax, dataset in zip(axes, DATASETS):
        plot_width(ax, ebp_results, bp_results, dataset)
        top = (y_max or {}).get(dataset)
        ax.set_ylim(0, top if top is not None else max(1.0, 1.2 * ax.dataLim.ymax))
        handles.update(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return fig
