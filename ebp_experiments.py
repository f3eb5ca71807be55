"""Experiments and tables: what notebooks/experiment.ipynb, notebooks/tables.ipynb and the scripts share.

One experiment is one execution of notebooks/experiment.ipynb (train one configuration, write its result); the
paper's Tables 2-4 are 50 such runs, listed once in scripts/paper_tables.csv. This module holds, in order:

1. Parameters of one experiment: their names and defaults are the `parameters` cell of experiment.ipynb (read
   from there, so they live in one place), validation, the run configuration a checkpoint must match.
2. Records: machine and package versions, git state, and the one atomic file write everything here uses.
3. The output folder of one run: its lock, result.json (EpochRecorder), and the check of a result against its
   checkpoint (a run is new, partial, finished, stale, corrupt or inconsistent).
4. The paper's runs: scripts/paper_tables.csv, selecting rows, one job per run and seed.
5. Running jobs: run_job executes the notebook with papermill; run_batch runs jobs on a Dask cluster (a local
   distributed.LocalCluster, or an existing scheduler), shows progress and survives Ctrl-C and kills.
6. Reading results back for the tables notebook: one profile's cells (seeds pooled as mean ± SD, the last-10-epoch
   mean), tables under each dropout and mask reading, the paper's findings judged with a tolerance, coverage, plots;
   the same tables and findings for MNIST beside Fashion-MNIST (runs in outputs/runs/<profile>-fashion-mnist/).

scripts/run_tables.py is the command line over sections 4-5; outputs/README.md describes the files a run writes.
"""
from __future__ import annotations

import ast
import contextlib
import csv
import datetime as _dt
import io
import json
import math
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import ebp_lib

REPO = Path(__file__).resolve().parent
NOTEBOOK = REPO / "notebooks" / "experiment.ipynb"
TABLES_CSV = REPO / "scripts" / "paper_tables.csv"
RUNS_DIR = REPO / "outputs" / "runs"

RESULT_FILE = "result.json"
CHECKPOINT_FILE = "checkpoint.npz"
EXECUTED_FILE = "experiment.ipynb"
LOCK_FILE = ".lock"
CURVE_FILE = "learning_curve.png"

# quick: a tenth of the training set for 3 epochs (minutes per table); paper: the paper's protocol (all 60,000
# training images, 120 epochs; batch 10 as in the authors' code). Seeds are chosen per batch (make_jobs).
PROFILES = {
    "quick": {"name": "quick", "epochs": 3, "n_train": 6000, "batch_size": 10},
    "paper": {"name": "paper", "epochs": 120, "n_train": None, "batch_size": 10},
    # beyond the paper's protocol: where runs still falling at epoch 120 settle (the same seed draws the same
    # orders and masks, so its first 120 epochs retrace the paper profile's run)
    "extended": {"name": "extended", "epochs": 200, "n_train": None, "batch_size": 10},
}
DROPOUT_READINGS = ("analytic", "sampled")  # analytic = the authors' code (notebooks/07_dropout.ipynb)
PAPER_EPOCHS, FULL_TRAIN = 120, 60000
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


# ----------------------------------------------------------------------------------------------------------
# 1. Parameters of one experiment
# ----------------------------------------------------------------------------------------------------------

def notebook_parameters(path=NOTEBOOK) -> dict:
    """{name: default} of the cell tagged `parameters` in a notebook: its assignments of literal values."""
    cells = json.loads(Path(path).read_text())["cells"]
    source = next(("".join(c["source"]) for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])),
                  None)
    if source is None:
        raise ValueError(f"{path} has no cell tagged 'parameters'")
    defaults = {}
    for statement in ast.parse(source).body:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)):
            raise ValueError(f"{path}: the parameters cell may only assign literal values to names "
                             f"(line {statement.lineno})")
        defaults[statement.targets[0].id] = ast.literal_eval(statement.value)
    return defaults


DEFAULT_PARAMETERS = notebook_parameters()  # the one place the parameters and their defaults are written
DATASETS = ("mnist", "fashion-mnist")
WEIGHTS = ("binary", "real")
PREPROCESSINGS = ("pixel", "global", "unit")
MASK_READINGS = ebp_lib.MASK_READINGS  # absent (default) or held: docs/maths.md §Spatial filtering
# What a checkpoint must have been trained with to be resumed, besides what ebp_lib.fit compares itself (the
# network, seed, batch size, engine): passed to fit as run_config and stored in the checkpoint.
RUN_CONFIG_KEYS = ("dataset", "architecture", "weights", "dropout", "keep", "n_train", "preprocessing",
                   "std_floor", "init_scale")


class ParameterError(ValueError):
    """One or more experiment parameters are invalid; the message lists every problem."""


def given_parameters(namespace: dict, names_before: set) -> dict:
    """The experiment's parameters as a notebook's global `namespace` holds them: every known parameter, and
    every other name bound since `names_before` was taken (before the parameters cell), so that a name papermill
    injected but the parameters cell does not know (`-p epoch 3`) reaches validate_parameters and is refused.
    Names starting with "_" are IPython's own (_i3, _3, ...)."""
    return {name: value for name, value in namespace.items()
            if name in DEFAULT_PARAMETERS or (name not in names_before and not name.startswith("_"))}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def architecture_layers(name) -> list:
    """The layer list of a paper architecture name ("200", "800-800", "block13", "361-100"), validated."""
    layers = ebp_lib.paper_architecture(str(name))
    ebp_lib.check_architecture(layers, 28)  # block sizes must fit the 28x28 image
    return layers


def is_spatial(name) -> bool:
    """Whether a paper architecture name has a locally connected layer (Table 4: "block13", "361-100")."""
    return any(isinstance(spec, (tuple, list)) for spec in architecture_layers(name))


def validate_parameters(params: dict) -> dict:
    """Check every parameter of one experiment and return them normalised; raise ParameterError listing all
    problems at once. Unknown names are errors too (a typo must not silently fall back to a default)."""
    p, problems = dict(params), []
    for name in sorted(set(p) - set(DEFAULT_PARAMETERS)):
        problems.append(f"{name}: unknown parameter (known: {', '.join(DEFAULT_PARAMETERS)})")
    for name in DEFAULT_PARAMETERS:
        p.setdefault(name, DEFAULT_PARAMETERS[name])

    def bad(name, why):
        problems.append(f"{name}={p[name]!r}: {why}")

    if p["dataset"] not in DATASETS:
        bad("dataset", f"choose one of {', '.join(DATASETS)}")
    if _is_int(p["architecture"]):
        p["architecture"] = str(p["architecture"])  # papermill -p architecture 200 gives an int
    if not isinstance(p["architecture"], str):
        bad("architecture", "give a name such as '200', '800-800', 'block13' or '361-100'")
    else:
        try:
            architecture_layers(p["architecture"])
        except ValueError as err:
            bad("architecture", str(err))
    if p["weights"] not in WEIGHTS:
        bad("weights", f"choose one of {', '.join(WEIGHTS)}")
    if p["mask_reading"] not in MASK_READINGS:
        bad("mask_reading", "choose 'absent' (non-connected weights do not exist) or 'held' (the paper's full "
                            "matrix: they stay posteriors at h = 0)")
    elif p["mask_reading"] == "held" and not any(problem.startswith("architecture=") for problem in problems) \
            and not is_spatial(p["architecture"]):
        bad("mask_reading", f"architecture {p['architecture']!r} has no locally connected layer, so there is "
                            "nothing to hold; 'held' applies to spatial architectures (block13, 361-100)")
    if isinstance(p["dropout"], str) and p["dropout"].lower() in ("none", "off", ""):
        p["dropout"] = None
    if p["dropout"] not in (None, *DROPOUT_READINGS):
        bad("dropout", "choose None (no dropout), 'analytic' (the authors' code) or 'sampled' (Bernoulli masks)")
    if not _is_number(p["keep"]) or not 0 < p["keep"] <= 1:
        bad("keep", "the dropout keep probability must be a number in (0, 1]")
    for name, low in (("epochs", 1), ("batch_size", 1), ("seed", 0)):
        if not _is_int(p[name]) or p[name] < low:
            bad(name, f"must be an integer >= {low}")
    if p["n_train"] is not None and (not _is_int(p["n_train"]) or not 1 <= p["n_train"] <= FULL_TRAIN):
        bad("n_train", f"must be None (all {FULL_TRAIN:,} training images) or an integer in 1..{FULL_TRAIN}")
    if p["preprocessing"] not in PREPROCESSINGS:
        bad("preprocessing", f"choose one of {', '.join(PREPROCESSINGS)}")
    if not _is_number(p["std_floor"]) or p["std_floor"] < 0:
        bad("std_floor", "must be a number >= 0")
    if not _is_number(p["init_scale"]) or p["init_scale"] <= 0:
        bad("init_scale", "must be a positive number (1.0 = the reference initialisation)")
    if p["output_dir"] is not None and not isinstance(p["output_dir"], (str, os.PathLike)):
        bad("output_dir", "must be None (a temporary folder) or a path")
    if problems:
        raise ParameterError("invalid experiment parameters:\n  - " + "\n  - ".join(problems))
    if p["output_dir"] is not None:
        p["output_dir"] = str(p["output_dir"])
    p["keep"], p["std_floor"], p["init_scale"] = float(p["keep"]), float(p["std_floor"]), float(p["init_scale"])
    return p


def run_config(params: dict) -> dict:
    """The settings a checkpoint of this experiment records and a resumed run must share (ebp_lib.fit's
    run_config): data set and its preprocessing, training images, network and initialisation, dropout, and the
    mask reading where it is not the default (as ebp_lib records it in the network: checkpoints written before
    the option existed, all of the default reading, stay resumable)."""
    config = {name: params[name] for name in RUN_CONFIG_KEYS}
    if params.get("mask_reading", "absent") != "absent":
        config["mask_reading"] = params["mask_reading"]
    return config


def protocol_label(params: dict) -> str:
    """'paper' for the paper's protocol (all 60,000 training images, 120 epochs), 'extended' for more epochs on
    all of them (beyond the paper's protocol), else 'shortened'."""
    full = params["n_train"] in (None, FULL_TRAIN)
    if full and params["epochs"] == PAPER_EPOCHS:
        return "paper"
    return "extended" if full and params["epochs"] > PAPER_EPOCHS else "shortened"


def describe(params: dict) -> str:
    """One deterministic line saying what the experiment trains (no paths)."""
    dropout = "no dropout" if params["dropout"] is None else f"{params['dropout']} dropout, p = {params['keep']}"
    n = f"{params['n_train']:,}" if params["n_train"] is not None else f"all {FULL_TRAIN:,}"
    masks = (f" (non-connected weights {params['mask_reading']})" if is_spatial(params["architecture"]) else "")
    return (f"{params['dataset']}, {params['weights']} weights, architecture {params['architecture']} "
            f"{architecture_layers(params['architecture'])}{masks}, {dropout}; {n} training images "
            f"({params['preprocessing']} standardisation), {params['epochs']} epochs, batch size "
            f"{params['batch_size']}, seed {params['seed']}, init scale {params['init_scale']:g}; "
            f"protocol: {protocol_label(params)}")


def engine_name() -> str:
    """The engine experiments train with: ebp_lib's default ("fast" before ebp_lib named its default)."""
    return getattr(ebp_lib, "DEFAULT_ENGINE", "fast")


# ----------------------------------------------------------------------------------------------------------
# 2. Records: machine, versions, git; atomic writes
# ----------------------------------------------------------------------------------------------------------

PACKAGES = ("numpy", "scipy", "numba", "matplotlib", "papermill", "ipykernel")


def package_versions(names=PACKAGES) -> dict:
    """{"python": version, package: version or None} for the packages `names`."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    """The processor's name (float32 sums in the compiled engine depend on its vector width)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_state(root=REPO, paths=(".", ":(exclude)outputs")) -> dict:
    """The commit checked out in `root` and whether tracked files among `paths` (default: all code, outputs/
    not counted) differ from it: git_commit, git_dirty, git_changed (up to 20 paths). Without a git checkout
    (a copy of the tree on another machine) the commit is $EBP_GIT_COMMIT if set."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    unknown = {"git_commit": os.environ.get("EBP_GIT_COMMIT"), "git_dirty": None}
    try:
        head = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no", "--", *paths)
    except (OSError, subprocess.SubprocessError):
        return unknown
    if head.returncode != 0:
        return unknown
    changed = [line[3:] for line in status.stdout.splitlines()]
    return {"git_commit": head.stdout.strip(), "git_dirty": bool(changed), "git_changed": changed[:20]}


def machine_record(packages=("numpy", "scipy", "numba"), git_paths=(".", ":(exclude)outputs")) -> dict:
    """Where and with what something ran: CPU model and cores, platform, Python and `packages` versions, the BLAS
    libraries loaded (threadpoolctl), the UTC date, and the git state of `git_paths` (git_state)."""
    from threadpoolctl import threadpool_info

    return {"cpu_model": cpu_model(), "cores": os.cpu_count(), **package_versions(packages),
            "blas": [{k: i.get(k) for k in ("internal_api", "version", "num_threads")} for i in threadpool_info()
                     if i.get("user_api") == "blas"],
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "platform": platform.platform(), **git_state(REPO, git_paths)}


def write_atomically(path, data: bytes | str) -> None:
    """Write `data` to `path` so that a reader only ever sees the old file or the complete new one: write a
    temporary beside it, then rename. On failure (a full disk, a read-only folder) the temporary is removed,
    the old file stays, and the OSError keeps its errno and names `path`."""
    path = Path(path)
    data = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            view = memoryview(data)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OSError(err.errno, f"could not write {path}: {err.strerror or err}") from err


def write_json(path, data: dict) -> None:
    """write_atomically, as indented JSON (the runner may read result.json at any moment)."""
    write_atomically(path, json.dumps(data, indent=1) + "\n")


def save_figure(fig, path, **savefig_kwargs) -> None:
    """fig.savefig(path) through write_atomically (a full disk never leaves half an image)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix[1:], **savefig_kwargs)
    write_atomically(path, buffer.getvalue())


def describe_error(err: BaseException, path=None) -> str:
    """One message for a failure: a notebook's exception as 'Name: value', an OSError with its errno and the
    file (`path` when the error itself names none: a failed write reports only 'No space left on device')."""
    if hasattr(err, "ename"):  # papermill's PapermillExecutionError: the notebook's own exception
        return f"{err.ename}: {err.evalue}"
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, OSError) and not err.filename and path is not None and str(path) not in text:
        text += f" (while writing {path})"
    return text


# ----------------------------------------------------------------------------------------------------------
# 3. The output folder of one run: lock, result.json, and the check of a result against its checkpoint
# ----------------------------------------------------------------------------------------------------------

class RunBusyError(RuntimeError):
    """Another process is training into this output folder (it holds the folder's lock)."""


def open_output_dir(output_dir):
    """Create the output folder (a new temporary one for None) and lock it for this process.

    Returns (path, lock handle); keep the handle open while training. The lock (an flock, released when the
    process dies) stops two processes from training into the same checkpoint; RunBusyError if another holds it.
    """
    import fcntl

    path = Path(tempfile.mkdtemp(prefix="ebp-experiment-")) if output_dir is None else Path(output_dir)
    path.mkdir(parents=True, exist_ok=True)
    handle = open(path / LOCK_FILE, "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise RunBusyError(f"another process is already training into {path} (it holds {path / LOCK_FILE}); "
                           f"wait for it to finish or stop it") from None
    return path, handle


def is_locked(path) -> bool:
    """Whether some live process holds the lock of output folder `path`."""
    import fcntl

    lock = Path(path) / LOCK_FILE
    if not lock.exists():
        return False
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def epochs_in_checkpoint(checkpoint) -> int:
    """How many epochs a checkpoint of ebp_lib.fit holds (0 if there is none); CheckpointError if unreadable."""
    if not Path(checkpoint).exists():
        return 0
    return len(ebp_lib.read_network_meta(checkpoint)["history"])


def read_result(path) -> dict | None:
    """The result.json in folder `path`, or None if there is none (or it is unreadable)."""
    try:
        return json.loads((Path(path) / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None


class EpochRecorder:
    """The on_epoch callback of ebp_lib.fit: prints a progress line and rewrites result.json after every epoch
    (finished: false), so the runner can show progress and an interrupted run still has its learning curve."""

    def __init__(self, output_dir, params: dict, checkpoint, engine: str | None = None, echo=print):
        self.path, self.params, self.echo = Path(output_dir), params, echo
        self.engine = engine or engine_name()
        self.history = ebp_lib.read_network_meta(checkpoint)["history"] if Path(checkpoint).exists() else []
        self.start_epoch, self.started = len(self.history), time.time()
        previous = read_result(self.path) if self.start_epoch else None  # only a resumed run continues it
        self.sessions = list(previous.get("sessions", [])) if previous else []
        self.session = {"started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        "host": socket.gethostname(), "cpu": cpu_model(), "from_epoch": self.start_epoch,
                        **git_state(), "versions": package_versions()}

    def __call__(self, record: dict) -> None:
        self.history.append(record)
        e = record["epoch"]
        self.echo(f"epoch {e}/{self.params['epochs']}: test error EBP-P {100 * record['test_ebp_p']:.2f}%, "
                  f"EBP-D {100 * record['test_ebp_d']:.2f}% (epoch took {record['train_seconds']:.1f} s)")
        self.write(self.history, finished=False)

    def write(self, history: list[dict], finished: bool) -> dict:
        """Write result.json for `history` and return its contents."""
        wall = time.time() - self.started
        session = {**self.session, "to_epoch": len(history), "wall_seconds": round(wall, 2),
                   "seconds_per_epoch": round(wall / max(1, len(history) - self.start_epoch), 2)}
        n_images = self.params["n_train"] or FULL_TRAIN
        last = history[-1] if history else None
        result = {
            "format": 1,
            "parameters": self.params,
            "protocol": protocol_label(self.params),
            "finished": bool(finished and len(history) >= self.params["epochs"]),
            "epochs_done": len(history),
            "n_train_images": n_images,
            "train_error_images": min(n_images, 10000),  # fit's default n_train_eval
            "final": None if last is None else {k: last[k] for k in
                                                ("test_ebp_p", "test_ebp_d", "train_ebp_p", "train_ebp_d")},
            "history": history,
            "train_seconds": round(sum(r["train_seconds"] for r in history), 2),
            "wall_seconds": round(sum(s["wall_seconds"] for s in self.sessions) + wall, 2),
            "engine": self.engine,
            "versions": package_versions(),
            "git_commit": self.session["git_commit"],
            "git_dirty": self.session["git_dirty"],
            "sessions": self.sessions + [session],
        }
        write_json(self.path / RESULT_FILE, result)
        return result


HISTORY_KEYS = ("epoch", "test_ebp_p", "test_ebp_d")  # what a result and its checkpoint must agree on


def checkpoint_meta(checkpoint) -> dict:
    """The metadata of a checkpoint (ebp_lib.read_network_meta) once all of it has been read: a flipped byte in
    the weights fails their CRC only when they are read. CheckpointError, naming the file, if unreadable."""
    ebp_lib.load_network(checkpoint)
    return ebp_lib.read_network_meta(checkpoint)


def checkpoint_settings(meta: dict) -> dict:
    """The experiment parameters a checkpoint was trained with, from its metadata (ebp_lib.read_network_meta):
    the network's weights, dropout and keep always; the run configuration, seed and batch size where saved
    (checkpoints written before ebp_lib stored `run` record only the network, seed and batch size)."""
    network = meta["config"]
    settings = {"weights": network["weights"], "dropout": network["dropout"], "keep": network["keep"],
                "mask_reading": network.get("mask_reading", "absent")}
    run = meta.get("run") or {}
    settings.update({k: v for k, v in run.items() if k in RUN_CONFIG_KEYS or k in ("seed", "batch_size")})
    for key in ("seed", "batch_size"):
        if key not in settings and key in meta:
            settings[key] = meta[key]
    return settings


def run_problems(params: dict, result: dict | None, meta: dict | None) -> list[str]:
    """Whatever disagrees between a run's parameters, its result.json and its checkpoint's metadata (either of
    the last two may be None): an edited result or a checkpoint of another run. Empty when all agree."""
    problems = []
    if result is not None:
        done, history = result.get("epochs_done"), result.get("history") or []
        if done != len(history):
            problems.append(f"result.json says {done} epochs done but holds {len(history)} epochs of history")
        if result.get("finished") and done != result["parameters"].get("epochs"):
            problems.append(f"result.json is marked finished after {done} of its "
                            f"{result['parameters'].get('epochs')} epochs")
    if meta is None:
        return problems
    settings = checkpoint_settings(meta)
    sources = [("these parameters", params)] + ([("result.json", result["parameters"])] if result else [])
    for source, values in sources:
        for name, value in settings.items():
            if name in values and values[name] != value:
                problems.append(f"{name}: checkpoint {value!r}, {source} {values[name]!r}")
    if result is not None:
        saved, done = meta["history"], result.get("epochs_done") or 0
        # fit saves the checkpoint just before on_epoch rewrites result.json: a run killed between the two has
        # a checkpoint one epoch ahead; a finished result and a checkpoint left beside it hold the same epochs
        allowed = (done,) if result.get("finished") else (done, done + 1)
        if len(saved) not in allowed:
            problems.append(f"the checkpoint holds {len(saved)} epochs, result.json "
                            f"{'finished after ' if result.get('finished') else ''}{done}")
        common = min(len(saved), len(result.get("history") or []))

        def first_epochs(records):
            return [{k: r.get(k) for k in HISTORY_KEYS} for r in records[:common]]
        if first_epochs(saved) != first_epochs(result["history"]):
            problems.append("the checkpoint's history and result.json's differ")
    return problems


@dataclass
class RunState:
    """What a run's folder holds: state is new, partial, finished, stale (a finished result of another
    configuration), corrupt (an unreadable checkpoint or result.json: `files`) or inconsistent (a result and
    its checkpoint disagree: `problems`); epochs done."""
    state: str
    epochs: int = 0
    problems: list = field(default_factory=list)
    files: list = field(default_factory=list)


def job_state(job: dict) -> RunState:
    """The state of a job's output folder (reads result.json and the whole checkpoint, never writes)."""
    out = Path(job["output_dir"])
    result_path, checkpoint = out / RESULT_FILE, out / CHECKPOINT_FILE
    result = meta = None
    corrupt = []
    if result_path.exists():
        try:
            result = json.loads(result_path.read_text())
            if not isinstance(result, dict) or not {"parameters", "epochs_done", "history"} <= set(result):
                raise ValueError("not a result file: parameters, epochs_done or history missing")
        except (OSError, ValueError) as err:
            corrupt.append((result_path, f"cannot read {result_path} ({type(err).__name__}: {err})"))
            result = None
    if checkpoint.exists():
        try:
            meta = checkpoint_meta(checkpoint)
        except ebp_lib.CheckpointError as err:
            corrupt.append((checkpoint, str(err)))
    if corrupt:
        return RunState("corrupt", 0, [why for _, why in corrupt], [path for path, _ in corrupt])
    problems = run_problems(job["parameters"], result, meta)
    if problems:
        files = [p for p, present in ((result_path, result), (checkpoint, meta)) if present is not None]
        return RunState("inconsistent", 0, problems, files)
    if result is not None and result.get("finished"):
        if same_configuration(result["parameters"], job["parameters"]):
            return RunState("finished", result["epochs_done"])
        return RunState("stale")
    if meta is not None:
        return RunState("partial", len(meta["history"]))
    return RunState("new")


def same_configuration(a: dict, b: dict) -> bool:
    """Whether two parameter sets train the same network the same way (the output folder aside). A parameter
    missing from one of them (a result written before the parameter existed) had its default: mask_reading."""
    return all(a.get(k, default) == b.get(k, default) for k, default in DEFAULT_PARAMETERS.items()
               if k != "output_dir")


def move_aside(path) -> Path:
    """Rename an unreadable file to <name>.corrupt-<UTC time> beside it (kept for inspection); the new path."""
    path = Path(path)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    os.replace(path, target)
    return target


def remove_temporaries(out) -> list[Path]:
    """Delete what an interrupted writer left in a run's folder (call it holding the folder's lock): the
    temporaries of write_atomically, ebp_lib.save_network and run_job's notebook."""
    out = Path(out)
    leftovers = [p for pattern in (".*.tmp", f"{CHECKPOINT_FILE}.tmp.npz", ".experiment-*.tmp.ipynb")
                 for p in out.glob(pattern)]
    for path in leftovers:
        path.unlink(missing_ok=True)
    return leftovers


# ----------------------------------------------------------------------------------------------------------
# 4. The paper's tables as data, and the runs that reproduce them
# ----------------------------------------------------------------------------------------------------------

TABLE_TITLES = {2: "Table 2: 1D input, no dropout", 3: "Table 3: 1D input, dropout p = 0.8",
                4: "Table 4: spatial filtering (local receptive fields), no dropout"}
ROW_LABELS = ("B-EBP-P", "B-EBP-D", "R-EBP-P", "R-EBP-D")


def read_paper_tables(path=TABLES_CSV) -> list[dict]:
    """The rows of scripts/paper_tables.csv: table, row (e.g. B-EBP-P), column (e.g. 200, [200,200], 144),
    paper_error (percent), output (ebp_p/ebp_d), run_id, dataset, architecture, weights, dropout, keep."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["table"], row["paper_error"] = int(row["table"]), float(row["paper_error"])
        row["keep"] = float(row["keep"]) if row["keep"] else None
    return rows


def paper_runs(rows: list[dict] | None = None, reading: str = "analytic") -> list[dict]:
    """One entry per run among the table rows `rows` (default: all of them; EBP-P and EBP-D share a run), in
    table order: run_id, key (the run's folder name), table, column, dataset, architecture (a paper name),
    weights, dropout (None or `reading`), keep, and the table cells it fills."""
    if reading not in DROPOUT_READINGS:
        raise ValueError(f"unknown dropout reading {reading!r}; choose one of {', '.join(DROPOUT_READINGS)}")
    runs = {}
    for row in read_paper_tables() if rows is None else rows:
        cell = f"Table {row['table']} {row['row']} {row['column']}"
        if row["run_id"] in runs:
            runs[row["run_id"]]["cells"].append(cell)
            continue
        dropout = reading if row["dropout"] == "yes" else None
        runs[row["run_id"]] = {
            "run_id": row["run_id"], "key": run_key(row["run_id"], dropout), "table": row["table"],
            "column": row["column"], "dataset": row["dataset"], "architecture": row["architecture"],
            "weights": row["weights"], "dropout": dropout, "keep": row["keep"] or 0.8, "cells": [cell]}
    return list(runs.values())


def _column_key(label: str) -> str:
    """'[200,200]', '200-200' and '200,200' all name the same column."""
    return label.strip().strip("[]").replace(" ", "").replace("-", ",")


def select_rows(rows: list[dict], tables=None, columns=None, run_ids=None, weights=None) -> list[dict]:
    """The table rows matching every filter given (None = no filter). Unknown values raise ValueError,
    naming what exists, so a typo never selects nothing silently."""
    def check(asked, known, what):
        unknown = [a for a in asked if a not in known]
        if unknown:
            raise ValueError(f"unknown {what} {', '.join(map(str, unknown))}; known: {', '.join(map(str, known))}")

    out = rows
    if tables:
        check([int(t) for t in tables], sorted({r["table"] for r in rows}), "table")
        out = [r for r in out if r["table"] in {int(t) for t in tables}]
    if columns:
        wanted = {_column_key(c) for c in columns}
        check(sorted(wanted), sorted({_column_key(r["column"]) for r in rows}, key=lambda c: (len(c), c)), "column")
        out = [r for r in out if _column_key(r["column"]) in wanted]
    if run_ids:
        known = {r["run_id"] for r in rows}
        aliases = {f"{r['run_id']}-{reading}": r["run_id"] for r in rows if r["dropout"] == "yes"
                   for reading in DROPOUT_READINGS}  # the folder names of dropout runs work too
        aliases.update({f"{r['run_id']}-held": r["run_id"] for r in rows if r["table"] == 4})  # and held ones
        check([i for i in run_ids if i not in aliases], sorted(known), "run id")
        wanted = {aliases.get(i, i) for i in run_ids}
        out = [r for r in out if r["run_id"] in wanted]
    if weights:
        check(list(weights), list(WEIGHTS), "weight type")
        out = [r for r in out if r["weights"] in weights]
    return out


def check_dataset(dataset: str) -> str:
    """`dataset` if it is a data set the experiments know (DATASETS), else ValueError naming them."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown data set {dataset!r}; choose one of {', '.join(DATASETS)}")
    return dataset


def results_folder(profile: str, dataset: str = "mnist") -> str:
    """The folder under outputs/runs/ holding one profile's runs on one data set: the profile's name for MNIST
    (the folders committed before the data set could be chosen keep their names), <profile>-<dataset> for the
    others, e.g. paper-fashion-mnist. One folder per profile and data set, so two data sets never share a run."""
    return profile if check_dataset(dataset) == "mnist" else f"{profile}-{dataset}"


def split_results_folder(name: str) -> tuple[str, str]:
    """(profile, data set) of a folder named by results_folder: 'paper-fashion-mnist' -> ('paper',
    'fashion-mnist'); a name without a data set suffix is an MNIST folder ('paper' -> ('paper', 'mnist'))."""
    for dataset in DATASETS:
        if dataset != "mnist" and name.endswith(f"-{dataset}") and len(name) > len(dataset) + 1:
            return name[:-len(dataset) - 1], dataset
    return name, "mnist"


def dataset_rows(rows: list[dict], dataset: str) -> list[dict]:
    """The table rows (read_paper_tables) with their data set replaced by `dataset`: the same runs, trained on
    another data set. The paper's numbers are MNIST's, so on another data set a row has no paper_error (None)."""
    check_dataset(dataset)
    return [{**row, "dataset": dataset, "paper_error": row["paper_error"] if row["dataset"] == dataset else None}
            for row in rows]


def run_key(run_id: str, dropout: str | None = None, seed: int = 0, mask_reading: str = "absent") -> str:
    """The folder name of a run: its run id, plus the dropout reading (`dropout`) for dropout runs, plus -held
    for spatial runs with the held mask reading, plus -seed<N> for seeds other than 0 (seed 0 and the absent
    reading keep the names of the runs committed before seeds and mask readings could be chosen)."""
    return (run_id + (f"-{dropout}" if dropout else "") + ("-held" if mask_reading == "held" else "")
            + (f"-seed{seed}" if seed else ""))


def check_mask_reading(rows: list[dict], mask_reading: str) -> None:
    """The held mask reading exists for Table 4 only (the other tables' networks have no masks): ValueError,
    saying what to select, if `rows` hold cells of other tables."""
    if mask_reading not in MASK_READINGS:
        raise ValueError(f"unknown mask reading {mask_reading!r}; choose one of {', '.join(MASK_READINGS)}")
    others = sorted({r["table"] for r in rows} - {4})
    if mask_reading == "held" and others:
        raise ValueError(f"the held mask reading applies to Table 4 (spatial filtering) only, but the selection "
                         f"holds runs of Table {', '.join(map(str, others))}, whose layers have no masks: "
                         f"select --table 4")


def make_jobs(rows: list[dict], profile="quick", reading: str = "analytic", runs_dir=RUNS_DIR,
              seeds=(0,), data_dir=None, mask_reading: str = "absent", dataset: str | None = None) -> list[dict]:
    """One job per run among `rows` and seed (EBP-P and EBP-D rows share a run), in table order, seeds inner.

    `profile` is a name in PROFILES or a dict like them (tests use tiny custom ones). The data folder (`data_dir`,
    else $EBP_DATA_DIR if set) travels inside the job (`env`), so that workers on other machines or started
    from other shells read the same files. `mask_reading` "held" (Table 4 rows only: check_mask_reading) trains
    the spatial layers with the paper's non-connected weights held at h = 0, into folders ending in -held.
    `dataset` (None: the rows' own, MNIST) trains the same runs on another data set, into
    <runs_dir>/<results_folder(profile, dataset)>/<run>/ (e.g. paper-fashion-mnist/binary-200).
    """
    check_mask_reading(rows, mask_reading)
    if dataset is not None:
        rows = dataset_rows(rows, dataset)
    profile = PROFILES[profile] if isinstance(profile, str) else profile
    data_dir = data_dir or os.environ.get(ebp_lib.DATA_ENV_VAR)
    env = {ebp_lib.DATA_ENV_VAR: str(Path(data_dir).resolve())} if data_dir else {}
    jobs = []
    for run in paper_runs(rows, reading):
        for seed in seeds:
            key = run_key(run["run_id"], run["dropout"], seed, mask_reading)
            out = Path(runs_dir) / results_folder(profile["name"], run["dataset"]) / key
            params = validate_parameters({
                "dataset": run["dataset"], "architecture": run["architecture"], "weights": run["weights"],
                "mask_reading": mask_reading,
                "dropout": run["dropout"], "keep": run["keep"], "epochs": profile["epochs"],
                "batch_size": profile["batch_size"], "seed": seed, "n_train": profile["n_train"],
                "output_dir": os.path.relpath(out, NOTEBOOK.parent)})
            jobs.append({"key": key, "run_id": run["run_id"], "seed": seed, "profile": profile["name"],
                         "dataset": run["dataset"],
                         "output_dir": str(out.resolve()), "notebook": str(NOTEBOOK), "parameters": params,
                         "rows": list(run["cells"]), "env": dict(env)})
    return jobs


# ----------------------------------------------------------------------------------------------------------
# 5. Running jobs: one job executes the experiment notebook; a batch runs jobs on a Dask cluster
# ----------------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def job_environment(job: dict):
    """Set the job's environment (its data folder; one BLAS thread) for the notebook kernel it starts, and
    restore the previous values afterwards (a worker thread may run other jobs later)."""
    wanted = {**{var: "1" for var in THREAD_VARS}, **job.get("env", {})}
    previous = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_job(job: dict) -> dict:
    """Execute notebooks/experiment.ipynb for `job` into <output_dir>/experiment.ipynb with papermill.

    Before any work: the parameters are validated, the folder is locked and checked (a finished run is skipped,
    an inconsistent one is left alone, a corrupt checkpoint or result.json is moved aside and the run restarts
    without it). The notebook is executed into a temporary beside experiment.ipynb and renamed over it at the
    end, so a failed write (a full disk) never replaces a good notebook with a truncated one. A finished run's
    checkpoint is deleted; a failed one keeps it for the next attempt. Returns an outcome dict with status
    skipped, busy, inconsistent, finished or failed (and `error`, `notebook`, `note`).
    """
    out = Path(job["output_dir"])
    executed = out / EXECUTED_FILE
    start = time.time()
    outcome = {"key": job["key"], "notebook": str(executed), "host": socket.gethostname()}

    def failed(error):
        return {**outcome, "status": "failed", "error": error, "seconds": time.time() - start}

    try:
        validate_parameters(job["parameters"])  # unknown or invalid parameters fail before any work
    except ParameterError as err:
        return failed(str(err))
    try:
        prepared = _prepare_folder(job)
    except RunBusyError:
        return {**outcome, "status": "busy", "error": "another process is training this run now"}
    except OSError as err:  # a read-only or full folder: its path and errno
        return failed(describe_error(err, out))
    if prepared.get("status"):
        return {**outcome, **prepared}
    outcome.update(prepared)

    import papermill

    tmp = out / f".experiment-{os.getpid()}.tmp.ipynb"
    error = None
    try:
        with job_environment(job):
            papermill.execute_notebook(job["notebook"], str(tmp), parameters=job["parameters"],
                                       kernel_name="python3", cwd=str(Path(job["notebook"]).parent),
                                       progress_bar=False, log_output=False)
    except Exception as err:  # noqa: BLE001 - any failure is reported with the notebook's path
        error = err
    if getattr(error, "ename", None) == RunBusyError.__name__:  # lost a lock race: the winner's notebook stays
        tmp.unlink(missing_ok=True)
        return {**outcome, "status": "busy", "error": "another process is training this run now"}
    if error is not None and not hasattr(error, "ename"):
        # papermill itself failed (e.g. writing the notebook to a full disk): its temporary may be truncated
        tmp.unlink(missing_ok=True)
        kept = f"{executed} was kept as it was" if executed.exists() else "no notebook was kept"
        return failed(f"{describe_error(error, tmp)}; the temporary was removed and {kept}")
    # the notebook ran to its end or to a cell's exception: papermill wrote it completely
    problem = _keep_notebook(tmp, executed, Path(job["notebook"]).parents[1])
    if error is not None:
        return failed(describe_error(error) + ("" if problem is None else f"; {problem}"))
    if problem is not None:
        return failed(problem)
    result = read_result(out) or {}
    if not result.get("finished"):
        return failed("the notebook ran but result.json is not marked finished")
    (out / CHECKPOINT_FILE).unlink(missing_ok=True)
    (out / LOCK_FILE).unlink(missing_ok=True)  # released when the kernel ended; nothing to keep
    return {**outcome, "status": "finished", "epochs": result["epochs_done"], "final": result["final"],
            "seconds": time.time() - start}


def _prepare_folder(job: dict) -> dict:
    """Holding the folder's lock: look again (another runner may have finished the run since the batch was
    planned), clear leftover temporaries, move corrupt files aside. Returns a final outcome (status) or notes."""
    out = Path(job["output_dir"])
    path, lock = open_output_dir(out)
    try:
        state = job_state(job)
        if state.state == "finished":  # a finished run has no use for its checkpoint
            (out / CHECKPOINT_FILE).unlink(missing_ok=True)
            return {"status": "skipped", "epochs": state.epochs, "final": read_result(out)["final"]}
        if state.state == "inconsistent":
            return {"status": "inconsistent", "error": "; ".join(state.problems),
                    "files": [str(f) for f in state.files]}
        remove_temporaries(out)
        if state.state == "corrupt":
            moved = [f"{f} -> {move_aside(f).name}" for f in state.files]
            return {"note": "moved aside (unreadable): " + ", ".join(moved) + "; the run restarted without it"}
        return {}
    finally:
        lock.close()


def _keep_notebook(tmp: Path, executed: Path, root: Path) -> str | None:
    """Make papermill's finished temporary `tmp` the run's executed notebook, with papermill's absolute paths
    made relative to the repository `root`; None if done, else what went wrong (the old notebook then stays
    and the temporary is removed)."""
    import nbformat

    try:
        nb = nbformat.read(tmp, as_version=4)
    except Exception as err:  # noqa: BLE001 - missing, or unreadable
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


def job_cost(job: dict) -> float:
    """Relative cost of one epoch: images seen × weights (dense, as the engine multiplies dense matrices);
    evaluation (10,000 test + up to 10,000 training images, forward only) counted at a third per image."""
    sizes = ebp_lib.check_architecture(architecture_layers(job["parameters"]["architecture"]))
    weights = sum(a * b for a, b in zip(sizes, sizes[1:]))
    n = job["parameters"]["n_train"] or FULL_TRAIN
    return weights * (n + (10000 + min(n, 10000)) / 3)


def _progress(job: dict) -> tuple[int, float | None]:
    """(epochs done, wall seconds per epoch in the current session) from the job's partial result.json."""
    result = read_result(job["output_dir"])
    if not result or not same_configuration(result.get("parameters", {}), job["parameters"]):
        return 0, None
    session = result["sessions"][-1]
    return result["epochs_done"], session["seconds_per_epoch"] if session["to_epoch"] > session["from_epoch"] else None


def format_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def status_line(elapsed: float, todo: list[dict], outcomes: dict, running: list[dict], workers: int) -> str:
    """'[elapsed] k/n runs done (f failed) | running: key epoch e/E ... | about T left', counting only the
    batch's runs to do (`todo`), not the ones skipped or busy at the start."""
    keys = {job["key"] for job in todo}
    done = {k: o for k, o in outcomes.items() if k in keys}
    parts, rate_num, rate_den, remaining = [], 0.0, 0.0, 0.0
    for job in running:
        epochs, per_epoch = _progress(job)
        parts.append(f"{job['key']} epoch {epochs}/{job['parameters']['epochs']}")
        if per_epoch:
            rate_num, rate_den = rate_num + per_epoch, rate_den + job_cost(job)
    waiting = [j for j in todo if j["key"] not in done and j not in running]
    failed = sum(1 for o in done.values() if o["status"] == "failed")
    line = (f"[{format_seconds(elapsed):>6}] {len(done)}/{len(todo)} runs done"
            f"{f' ({failed} failed)' if failed else ''} | running: {', '.join(parts) or '-'}")
    if rate_den:
        rate = rate_num / rate_den  # seconds per unit of job_cost, from the epochs seen so far
        for job in running + waiting:
            epochs, _ = _progress(job)
            remaining += (job["parameters"]["epochs"] - epochs) * job_cost(job) * rate
        line += f" | about {format_seconds(remaining / max(1, min(workers, len(running) + len(waiting))))} left"
    return line


def plan_batch(jobs: list[dict], echo=print) -> tuple[dict, list[dict]]:
    """(outcomes of the jobs that need no run: skipped, busy, inconsistent; the jobs to run). Finished runs'
    checkpoints are deleted; every other decision is echoed, corrupt and inconsistent ones with their files."""
    outcomes, todo = {}, []
    for job in jobs:
        state, out = job_state(job), Path(job["output_dir"])
        if state.state == "finished":
            (out / CHECKPOINT_FILE).unlink(missing_ok=True)
            outcomes[job["key"]] = {"key": job["key"], "status": "skipped", "epochs": state.epochs,
                                    "final": read_result(out)["final"]}
        elif is_locked(out):
            outcomes[job["key"]] = {"key": job["key"], "status": "busy",
                                    "error": "another process is training this run now"}
        elif state.state == "inconsistent":
            outcomes[job["key"]] = {"key": job["key"], "status": "inconsistent",
                                    "error": "; ".join(state.problems), "files": [str(f) for f in state.files]}
            echo(f"  {job['key']}: inconsistent, left alone ({'; '.join(state.problems)}; files: "
                 f"{', '.join(map(str, state.files))})")
        else:
            todo.append(job)
            note = {"partial": f"resuming after epoch {state.epochs}", "new": "new",
                    "stale": "rerun (finished result of another configuration)",
                    "corrupt": "unreadable " + ", ".join(map(str, state.files)) + ": it will be moved aside to "
                               "<name>.corrupt-<time> and the run restarted without it"}[state.state]
            echo(f"  {job['key']}: {note}")
    count = lambda status: sum(o["status"] == status for o in outcomes.values())  # noqa: E731
    echo(f"{len(jobs)} runs selected: {count('skipped')} already finished (skipped), {count('busy')} busy "
         f"elsewhere, {count('inconsistent')} inconsistent (left alone), {len(todo)} to run")
    return outcomes, todo


def _start_cluster(scheduler: str | None, n_workers: int, echo):
    """A Dask client: on the scheduler at `scheduler`, else on a new local cluster of `n_workers` processes,
    one thread each. Returns (client, close); close(interrupted=True) stops the running jobs at once."""
    import logging

    import distributed

    if scheduler:
        import cloudpickle

        module = sys.modules[__name__]
        cloudpickle.register_pickle_by_value(module)  # the workers need not import this module themselves
        client = distributed.Client(scheduler)
        echo(f"sending runs to the Dask cluster at {scheduler}")

        def close_remote(interrupted=False):
            # a remote worker cannot be told to stop a running notebook: the jobs already running go on to
            # their end (or until their workers are stopped); none of the queued ones starts
            client.close()
            cloudpickle.unregister_pickle_by_value(module)
        return client, close_remote
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
    return client, close


def _discard_stderr() -> None:
    """In a local worker process: send its stderr, which the notebook kernels it starts inherit, to /dev/null.
    Kernels log noise there ("Kernel is running over TCP without encryption"); a job's failure comes back in
    its outcome and its executed notebook."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_batch(jobs: list[dict], n_jobs: int | None = None, scheduler: str | None = None,
              progress_every: float = 30.0, echo=print) -> list[dict]:
    """Run `jobs`: finished ones are skipped, others resume from their checkpoint. Returns one outcome per
    job (status skipped, busy, inconsistent, finished, failed, or interrupted by Ctrl-C/SIGTERM), in job order.

    The jobs run on a Dask cluster: `n_jobs` local worker processes (default: the number of cores) on a
    distributed.LocalCluster, or the existing cluster at `scheduler` (its workers must see this repository and
    the data folder at the same paths). At most `n_jobs` jobs are submitted at once, in table order.
    """
    outcomes, todo = plan_batch(jobs, echo)
    if not todo:
        return [outcomes[j["key"]] for j in jobs]
    window = n_jobs or (len(todo) if scheduler else os.cpu_count() or 1)
    start, queue, running, last = time.time(), list(todo), {}, 0.0
    handle_sigterm = _main_thread()
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_interrupt) if handle_sigterm else None
    close, interrupted = None, False
    try:
        client, close = _start_cluster(scheduler, min(window, len(todo)), echo)
        while queue or running:
            changed = False
            for future in [f for f in running if f.done()]:
                job = running.pop(future)
                try:
                    outcome = future.result()
                except Exception as err:  # noqa: BLE001 - a worker died: report it, keep going
                    outcome = {"key": job["key"], "status": "failed",
                               "error": f"worker error: {describe_error(err)}",
                               "notebook": str(Path(job["output_dir"]) / EXECUTED_FILE)}
                outcomes[job["key"]] = outcome
                changed = True
                echo(f"  {job['key']}: {outcome['status']}" + (f" ({outcome['note']})" if outcome.get("note") else "")
                     + (f" ({outcome['error']})" if outcome["status"] in ("failed", "inconsistent") else ""))
            while queue and len(running) < window:
                job = queue.pop(0)
                running[client.submit(run_job, job, pure=False)] = job
            if changed or time.time() - last >= progress_every:
                echo(status_line(time.time() - start, todo, outcomes, list(running.values()), window))
                last = time.time()
            time.sleep(0.5)
    except KeyboardInterrupt:
        interrupted = True
        echo("interrupted: stopping the running jobs (their checkpoints are kept; rerun the same command to "
             "resume)")
        for job in todo:
            outcomes.setdefault(job["key"], {"key": job["key"], "status": "interrupted",
                                             "epochs": _progress(job)[0]})
    finally:
        if handle_sigterm:
            signal.signal(signal.SIGTERM, previous_sigterm)
        if close is not None:
            close(interrupted)
    return [outcomes[j["key"]] for j in jobs]


def exit_status(outcomes: list[dict]) -> int:
    """130 if interrupted, 1 if a run failed or was left alone as inconsistent, else 0 (skipped and busy
    runs are not failures)."""
    if any(o["status"] == "interrupted" for o in outcomes):
        return 130
    return 1 if any(o["status"] in ("failed", "inconsistent") for o in outcomes) else 0


def summary(jobs: list[dict], outcomes: list[dict]) -> str:
    """The end-of-batch report: one line per run, then every failure with the path of its notebook, and every
    inconsistent run with its files."""
    lines = [f"{'run':<32} {'status':<12} {'epochs':>6} {'EBP-P %':>8} {'EBP-D %':>8}  rows"]
    for job, o in zip(jobs, outcomes):
        final = o.get("final") or {}
        p = f"{100 * final['test_ebp_p']:.2f}" if final else "-"
        d = f"{100 * final['test_ebp_d']:.2f}" if final else "-"
        lines.append(f"{job['key']:<32} {o['status']:<12} {o.get('epochs', '-')!s:>6} {p:>8} {d:>8}  "
                     f"{'; '.join(job['rows'])}")
    counts = {s: sum(o["status"] == s for o in outcomes) for s in
              ("finished", "skipped", "failed", "inconsistent", "busy", "interrupted")}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "nothing to do")
    for o in outcomes:
        if o.get("note"):
            lines.append(f"NOTE {o['key']}: {o['note']}")
        if o["status"] == "failed":
            error = str(o.get("error", "?")).replace("\n", "\n       ")
            lines.append(f"FAILED {o['key']}: {error}\n       notebook: {o.get('notebook', '?')}")
        if o["status"] == "inconsistent":
            lines.append(f"INCONSISTENT {o['key']}: {o.get('error', '?')}\n       files: "
                         f"{', '.join(o.get('files', []))}\n       neither is touched: restore the result that "
                         f"matches the checkpoint, or move both aside to retrain the run")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------
# 6. Reading results back (notebooks/tables.ipynb)
# ----------------------------------------------------------------------------------------------------------

def _committed_results(runs_dir) -> dict[str, str]:
    """{path relative to runs_dir: text} of every result.json committed under runs_dir (HEAD's version)."""
    runs_dir = Path(runs_dir).resolve()
    top = subprocess.run(["git", "-C", str(runs_dir), "rev-parse", "--show-toplevel"], capture_output=True,
                         text=True, check=True).stdout.strip()
    prefix = runs_dir.relative_to(Path(top).resolve()).as_posix()
    listing = subprocess.run(["git", "-C", top, "ls-tree", "-r", "HEAD", "--", prefix], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    blobs = {line.split("\t", 1)[1]: line.split()[2] for line in listing
             if line.endswith("/" + RESULT_FILE) and line.split("\t", 1)[1].count("/") == prefix.count("/") + 3}
    if not blobs:
        return {}
    data = subprocess.run(["git", "-C", top, "cat-file", "--batch"], capture_output=True, check=True,
                          input=("\n".join(blobs.values()) + "\n").encode()).stdout
    out, pos = {}, 0
    for path in blobs:  # each object comes back as "<sha> blob <size>\n<contents>\n", in the order asked
        header_end = data.index(b"\n", pos)
        size = int(data[pos:header_end].split()[2])
        out[Path(path).relative_to(prefix).as_posix()] = data[header_end + 1:header_end + 1 + size].decode()
        pos = header_end + 1 + size + 1
    return out


def load_results(runs_dir=RUNS_DIR, committed_only: bool = False) -> list[dict]:
    """Every result.json under runs_dir (finished or not), sorted by path, each with its `profile` (the folder
    above the run's, less its data set suffix: split_results_folder) and `run_dir` (relative to runs_dir) added.
    An EBP result lying in the folder of another data set than it was trained on is an error (ValueError naming
    the file): a misplaced result must not pass for a run of its folder's data set.

    committed_only: read the versions committed to git (HEAD) instead of the files on disk, so runs in
    progress in the working tree do not change what a committed, CI-checked notebook shows.
    """
    texts = None
    if committed_only:
        try:
            texts = _committed_results(runs_dir)
        except (OSError, subprocess.CalledProcessError):  # not a git checkout (e.g. an archive): read the disk
            texts = None
    if texts is None:
        texts = {path.relative_to(runs_dir).as_posix(): path.read_text()
                 for path in Path(runs_dir).glob(f"*/*/{RESULT_FILE}")}
    out = []
    for relative in sorted(texts):
        try:
            result = json.loads(texts[relative])
        except ValueError:
            continue
        if result.get("epochs_done"):
            folder, run = relative.split("/")[:2]
            result["profile"], result["run_dir"] = split_results_folder(folder)[0], f"{folder}/{run}"
            check_results_folder(result, folder, Path(runs_dir) / relative)
            out.append(result)
    return out


def check_results_folder(result: dict, folder: str, path) -> None:
    """ValueError if an EBP result (`path`) was trained on another data set than its folder (results_folder)
    stands for. Results of other methods (the backprop baseline, read by the same functions from
    outputs/backprop/<dataset>/) have their own layout and are not checked."""
    trained = result.get("parameters", {}).get("dataset")
    if result.get("method", "ebp") != "ebp" or trained is None:
        return
    profile, expected = split_results_folder(folder)
    if trained != expected:
        raise ValueError(f"{path} was trained on {trained} but lies in {folder}/, the folder of {expected} runs; "
                         f"move its run folder to {results_folder(profile, trained)}/")


def results_of(results: list[dict], profile: str, dataset: str = "mnist") -> list[dict]:
    """The results (load_results) of one profile trained on one data set."""
    return [r for r in results if r["profile"] == profile and r["parameters"]["dataset"] == dataset]


# Which results fill a table: one profile (the tables notebook's `profile`), and for Table 3 the dropout reading,
# for Table 4 the mask reading. Table 3 shows the sampled reading first, the paper's text (Sect. 4: "p = 0.8 for
# both hidden units and input units", after Srivastava et al.); the analytic one is the authors' code.
READING_TITLES = {"sampled": "sampled dropout: Bernoulli masks on the inputs and hidden units (the paper's text)",
                  "analytic": "analytic dropout: the input's variance term only (the authors' code)"}
MASK_TITLES = {"absent": "weights outside each unit's block absent",
               "held": "weights outside each unit's block held at h = 0 (the paper's full matrix)"}
TEST_IMAGES = 10000     # every error is a fraction of the 10,000 test images (MNIST and Fashion-MNIST alike)
LAST_EPOCHS = 10        # the last-epochs mean beside the paper's rule (the error after the last epoch)


def seed_of(result: dict) -> int:
    """The seed a result was trained with (results written before seeds could be chosen are seed 0)."""
    return result["parameters"].get("seed", 0)


def matches(row: dict, result: dict, reading: str = "sampled", seed: int | None = 0,
            mask_reading: str = "absent") -> bool:
    """Whether a result was trained in the configuration of a table row (with the paper's defaults for the
    data: MNIST, per-pixel standardisation, reference initialisation), with seed `seed` (None: any seed), the
    dropout reading `reading` (Table 3) and the mask reading `mask_reading` (Table 4; the other tables have no
    masks, so only results of the default reading fill them)."""
    p = result["parameters"]
    dropout = reading if row["dropout"] == "yes" else None
    masks = mask_reading if row["table"] == 4 else "absent"
    return (p["dataset"] == row["dataset"] and p["architecture"] == row["architecture"]
            and p["weights"] == row["weights"] and p["dropout"] == dropout
            and (dropout is None or p["keep"] == row["keep"]) and p.get("mask_reading", "absent") == masks
            and p["preprocessing"] == "pixel" and p["std_floor"] == 0 and p["init_scale"] == 1
            and (seed is None or seed_of(result) == seed))


def completeness(result: dict) -> tuple:
    """Sort key, larger = more complete: the paper's protocol finished, then training images seen, then
    finished over unfinished, then the paper profile over others."""
    paper_done = result["protocol"] == "paper" and result["finished"]
    return (paper_done, result["epochs_done"] * result["n_train_images"], result["finished"],
            result["profile"] == "paper")


def seeds_run(results: list[dict]) -> list[int]:
    """The seeds that results were trained with, sorted."""
    return sorted({seed_of(r) for r in results})


def provenance(result: dict) -> str:
    """How a number was produced, short: profile, epochs done (of planned), training images."""
    n = result["n_train_images"]
    size = f"{n // 1000}k" if n % 1000 == 0 else f"{n:,}"
    epochs = f"{result['epochs_done']}" + ("" if result["finished"] else f"/{result['parameters']['epochs']}")
    return f"{result['profile']}, {epochs} ep, {size}"


def binomial_se(error: float, n: int = TEST_IMAGES) -> float:
    """The binomial standard error sqrt(e(1 − e)/n) of a test error `error` in percent, in percent."""
    e = error / 100
    return 100 * math.sqrt(max(e * (1 - e), 0.0) / n)


def last_epochs_mean(result: dict, output: str, k: int = LAST_EPOCHS) -> float:
    """Mean test error (percent) of `output` (ebp_p or ebp_d) over the last k epochs of a run (all of them if
    it has fewer): epochs 111-120 of a paper-protocol run."""
    tail = result["history"][-k:]
    return 100 * sum(h[f"test_{output}"] for h in tail) / len(tail)


def _mean_sd(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


@dataclass
class Cell:
    """Our numbers for one table cell (one output of one configuration). `pooled`: one result per seed, all of
    the most complete protocol among the seeds (same epochs done and training images, all finished or none);
    `others`: the other seeds' most complete results (unfinished ones), shown but not pooled."""
    row: dict
    pooled: list
    others: list = field(default_factory=list)

    @property
    def seeds(self) -> list[int]:
        return [seed_of(r) for r in self.pooled]

    @property
    def errors(self) -> list[float]:
        """The paper's rule for each seed: the test error (percent) after the last epoch."""
        return [100 * r["final"][f"test_{self.row['output']}"] for r in self.pooled]

    @property
    def mean(self) -> float:
        return _mean_sd(self.errors)[0]

    @property
    def sd(self) -> float | None:
        """The standard deviation over seeds (None for one seed)."""
        return _mean_sd(self.errors)[1]

    @property
    def last_epochs(self) -> tuple[float, float | None]:
        """(mean, SD over seeds) of each seed's mean test error over its last LAST_EPOCHS epochs."""
        return _mean_sd([last_epochs_mean(r, self.row["output"]) for r in self.pooled])

    @property
    def finished(self) -> bool:
        return all(r["finished"] for r in self.pooled)

    @property
    def uncertainty(self) -> float:
        """One standard error of the cell's error, in points: the binomial SE of the 10,000 test images,
        combined with the SD over seeds where there are several (u² = SD² + SE²: the seeds' spread is that of
        training, the SE that of the test set, which every seed shares)."""
        return math.sqrt((self.sd or 0.0) ** 2 + binomial_se(self.mean) ** 2)


def cell_key(row: dict) -> tuple:
    """(table, row, column) of a table row, e.g. (3, "B-EBP-P", "[200,200]")."""
    return row["table"], row["row"], row["column"]


def table_cells(rows: list[dict], results: list[dict], profile: str = "paper", reading: str = "sampled",
                mask_reading: str = "absent") -> dict:
    """cell_key -> Cell for every table row that has a result of `profile` in the given dropout and mask
    readings (absent when none exists yet). Per seed the most complete result counts; the seeds whose result
    shares the most complete protocol are pooled (a seed still training is listed, not pooled). Only results of
    the rows' data set fill them (matches): dataset_rows(rows, "fashion-mnist") gives the Fashion-MNIST cells."""
    if reading not in DROPOUT_READINGS:
        raise ValueError(f"unknown dropout reading {reading!r}; choose one of {', '.join(DROPOUT_READINGS)}")
    if mask_reading not in MASK_READINGS:
        raise ValueError(f"unknown mask reading {mask_reading!r}; choose one of {', '.join(MASK_READINGS)}")
    mine = [r for r in results if r["profile"] == profile]
    cells = {}
    for row in rows:
        per_seed = {}
        for result in mine:
            if matches(row, result, reading, None, mask_reading):
                seed = seed_of(result)
                if seed not in per_seed or completeness(result) > completeness(per_seed[seed]):
                    per_seed[seed] = result
        if not per_seed:
            continue
        top = max(per_seed.values(), key=completeness)

        def protocol(r):
            return r["finished"], r["epochs_done"], r["n_train_images"]
        ordered = [per_seed[s] for s in sorted(per_seed)]
        cells[cell_key(row)] = Cell(row, [r for r in ordered if protocol(r) == protocol(top)],
                                    [r for r in ordered if protocol(r) != protocol(top)])
    return cells


def ours(row: dict, cells: dict) -> float | None:
    """Our test error (percent, mean over the pooled seeds) for a table row, or None if not run yet."""
    cell = cells.get(cell_key(row))
    return None if cell is None else cell.mean


def profile_label(profile: str) -> str:
    """A profile with its protocol, e.g. 'paper (120 epochs on all 60,000 training images)'."""
    known = PROFILES.get(profile)
    if known is None:
        return profile
    n = f"all {FULL_TRAIN:,}" if known["n_train"] is None else f"the first {known['n_train']:,}"
    return f"{profile} ({known['epochs']} epochs on {n} training images, batch {known['batch_size']})"


def seeds_label(cells: list[Cell]) -> str:
    """Which seeds fill the cells, e.g. 'seed 0 (one per cell)' or 'seeds 0, 1, 2 (3 per cell in 12 cells, 1 in 20)'."""
    if not cells:
        return "no runs yet"
    seeds = sorted({s for c in cells for s in c.seeds})
    counts = {}
    for c in cells:
        counts[len(c.pooled)] = counts.get(len(c.pooled), 0) + 1
    if len(counts) == 1 and 1 in counts:
        return f"seed {seeds[0]} (one run per cell)"
    parts = [f"{n} per cell in {k} cells" for n, k in sorted(counts.items(), reverse=True)]
    return f"seeds {', '.join(map(str, seeds))} ({'; '.join(parts)}; mean ± SD over seeds)"


def table_title(table: int, reading: str | None = None, mask_reading: str | None = None) -> str:
    """The title of one rendered table: the paper's, plus the reading it shows."""
    title = TABLE_TITLES[table]
    if table == 3 and reading:
        title += f", {READING_TITLES[reading]}"
    if table == 4 and mask_reading:
        title += f", {MASK_TITLES[mask_reading]}"
    return title


def _cell_text(row: dict, cell: Cell | None, last_label: str) -> str:
    paper = row["paper_error"]
    if cell is None:
        return f"{paper:.2f} / not run yet"
    text = f"{paper:.2f} / {cell.mean:.2f}"
    if cell.sd is not None:
        text += f" ± {cell.sd:.2f} (n = {len(cell.pooled)})"
    text += f" ({cell.mean - paper:+.2f})"
    if cell.finished:
        last, last_sd = cell.last_epochs
        text += f"; {last_label}: {last:.2f}" + ("" if last_sd is None else f" ± {last_sd:.2f}")
    else:
        text += f" · {cell.pooled[0]['epochs_done']}/{cell.pooled[0]['parameters']['epochs']} ep"
    for other in cell.others:
        text += f" · seed {seed_of(other)}: {other['epochs_done']}/{other['parameters']['epochs']} ep"
    return text


def render_table(table: int, rows: list[dict], cells: dict, profile: str, reading: str | None = None,
                 mask_reading: str | None = None) -> str:
    """One paper table as Markdown, transposed (one line per architecture, one column per output), labelled
    with its reading, profile and seeds. Every cell: 'paper / ours (ours − paper); last 10: mean of the last
    ten epochs', ours ± SD over seeds (n) where several; an unfinished run shows its epochs done."""
    rows = [r for r in rows if r["table"] == table]
    columns = list(dict.fromkeys(r["column"] for r in rows))
    by_cell = {(r["column"], r["row"]): r for r in rows}
    mine = [cells[cell_key(r)] for r in rows if cell_key(r) in cells]
    k = min([LAST_EPOCHS] + [r["epochs_done"] for c in mine if c.finished for r in c.pooled])  # 3 for quick
    lines = [f"**{table_title(table, reading, mask_reading)}** — profile {profile_label(profile)}; "
             f"{seeds_label(mine)}. Test error %, paper / ours (ours − paper); last {k}: our mean "
             f"over the last {k} epochs (the paper reports the error after the last epoch).",
             "", "| hidden | " + " | ".join(ROW_LABELS) + " |", "|---" * (len(ROW_LABELS) + 1) + "|"]
    for column in columns:
        entries = [_cell_text(by_cell[(column, label)], cells.get(cell_key(by_cell[(column, label)])), f"last {k}")
                   for label in ROW_LABELS]
        lines.append(f"| {column} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


def coverage(rows: list[dict], cells: dict, table: int, label: str = "") -> str:
    """One line on a table's runs in `cells`: how many are finished, in progress or not run, and ours − paper
    (percentage points) over its finished cells."""
    mine = [r for r in rows if r["table"] == table]
    runs = list(dict.fromkeys(r["run_id"] for r in mine))
    state = {run: "not run" for run in runs}
    for r in mine:  # a run's EBP-P and EBP-D cells come from the same results
        cell = cells.get(cell_key(r))
        if cell is not None:
            state[r["run_id"]] = ("finished" if cell.finished else
                                  f"{cell.pooled[0]['epochs_done']}/{cell.pooled[0]['parameters']['epochs']} ep")
    finished = [run for run in runs if state[run] == "finished"]
    running = [f"{run} {state[run]}" for run in runs if state[run] not in ("finished", "not run")]
    line = (f"Table {table}{label}: {len(finished)} of {len(runs)} runs finished"
            + (f", in progress: {', '.join(running)}" if running else "")
            + (f", {sum(state[run] == 'not run' for run in runs)} not run" if len(finished) + len(running) < len(runs)
               else ""))
    diffs = [cells[cell_key(r)].mean - r["paper_error"] for r in mine  # rows of another data set have no paper number
             if cell_key(r) in cells and cells[cell_key(r)].finished and r["paper_error"] is not None]
    if diffs:
        line += (f"; ours − paper over {len(diffs)} cells: mean {sum(diffs) / len(diffs):+.2f}, from "
                 f"{min(diffs):+.2f} to {max(diffs):+.2f} points")
    return line


# ----------------------------------------------------------------------------------------------------------
# The same tables on two data sets: MNIST against Fashion-MNIST (no paper column: the paper ran MNIST only)
# ----------------------------------------------------------------------------------------------------------

DATASET_NAMES = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST"}


def _ours_text(cell: Cell | None) -> str:
    """Our error of one cell, short: 'not run yet', '12.34', '12.34 ± 0.10 (n = 3)', '12.34 · 29/120 ep'."""
    if cell is None:
        return "not run yet"
    text = f"{cell.mean:.2f}" + ("" if cell.sd is None else f" ± {cell.sd:.2f} (n = {len(cell.pooled)})")
    if not cell.finished:
        text += f" · {cell.pooled[0]['epochs_done']}/{cell.pooled[0]['parameters']['epochs']} ep"
    return text


def render_dataset_table(table: int, rows: list[dict], cells_by_dataset: dict, profile: str,
                         reading: str | None = None, mask_reading: str | None = None) -> str:
    """One paper table as Markdown with our errors on two data sets side by side ({dataset: cells}, e.g. MNIST
    then Fashion-MNIST; table_cells of each) and no paper column: 'first / second (second − first)', the
    difference where both runs are finished; a cell with no run says 'not run yet'. `rows` give the table's
    layout (the cell keys are the same on every data set)."""
    (first, a), (second, b) = cells_by_dataset.items()
    names = [DATASET_NAMES.get(d, d) for d in (first, second)]
    rows = [r for r in rows if r["table"] == table]
    columns = list(dict.fromkeys(r["column"] for r in rows))
    seeds = "; ".join(f"{name}: {seeds_label([c[cell_key(r)] for r in rows if cell_key(r) in c])}"
                      for name, c in zip(names, (a, b)))
    lines = [f"**{table_title(table, reading, mask_reading)}** — profile {profile_label(profile)}; {seeds}. Test "
             f"error % after the last epoch, {names[0]} / {names[1]} ({names[1]} − {names[0]}).",
             "", "| hidden | " + " | ".join(ROW_LABELS) + " |", "|---" * (len(ROW_LABELS) + 1) + "|"]
    keys = {(r["column"], r["row"]): cell_key(r) for r in rows}
    for column in columns:
        entries = []
        for label in ROW_LABELS:
            one, two = a.get(keys[(column, label)]), b.get(keys[(column, label)])
            text = f"{_ours_text(one)} / {_ours_text(two)}"
            if one is not None and two is not None and one.finished and two.finished:
                text += f" ({two.mean - one.mean:+.2f})"
            entries.append(text)
        lines.append(f"| {column} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------
# The paper's findings, judged with a tolerance on its numbers and on ours
# ----------------------------------------------------------------------------------------------------------
# A finding is a list of comparisons, each the claim "value(better) < value(worse)", where a side is one cell,
# the best (lowest) of several cells, or (the worse side only) a fixed error in percent. A comparison supports
# the claim when the difference d = worse − better exceeds its tolerance 2·sqrt(u_better² + u_worse²)
# (u: Cell.uncertainty for ours, the binomial SE for the paper's single runs), contradicts it when d < −tolerance,
# and is within tolerance otherwise. A finding about "every" configuration agrees when every comparison supports
# it and disagrees when any contradicts it; one about "most" agrees when more than half support it and disagrees
# when at least half contradict it; anything else (and a comparison whose cells are not all run) is inconclusive.

WORKS_WELL = 5.0  # "works well": below 5% test error, below any linear classifier on MNIST (7.6-12%, LeCun 1998)
# The same bar on each data set: under any linear classifier there. On Fashion-MNIST the best linear classifier of
# Xiao, Rasul & Vollgraf's (2017) scikit-learn benchmark, logistic regression, errs on about 16% of the test set.
WORKS_WELL_BY_DATASET = {"mnist": WORKS_WELL, "fashion-mnist": 15.0}
ONE_LAYER = ("200", "400", "600", "800", "1000")
TWO_LAYER = ("[200,200]", "[400,400]", "[600,600]", "[800,800]")


@dataclass(frozen=True)
class Comparison:
    """The claim value(better) < value(worse): `better` a tuple of cell keys (the best of them), `worse` a tuple of
    cell keys or a number (percent). `label` names it in the tables."""
    label: str
    better: tuple
    worse: tuple | float


@dataclass(frozen=True)
class Finding:
    """One of the paper's claims: its wording, where the paper makes it, every/most, its comparisons."""
    title: str
    source: str
    quantifier: str
    comparisons: tuple

    @property
    def tables(self) -> set:
        """The tables whose cells the comparisons read."""
        sides = [c.better for c in self.comparisons] + [c.worse for c in self.comparisons
                                                        if isinstance(c.worse, tuple)]
        return {key[0] for side in sides for key in side}


def _cells(table, rows_labels, columns) -> tuple:
    return tuple((table, r, c) for r in rows_labels for c in columns)


def paper_findings(dataset: str = "mnist") -> list[Finding]:
    """The paper's findings: its Summary (1)-(5) (Sect. 4), the other half of (5) from its Conclusions, and the
    claims of its text that the issue lists (dropout in every configuration, B-EBP-D and width, real against
    binary, EBP-P against EBP-D, two layers against one). "Works well" is the bar of `dataset`
    (WORKS_WELL_BY_DATASET); every other comparison is between cells, the same on any data set."""
    works_well = WORKS_WELL_BY_DATASET[check_dataset(dataset)]
    binary, real, outputs = ("B-EBP-P", "B-EBP-D"), ("R-EBP-P", "R-EBP-D"), ("P", "D")
    all_columns = ONE_LAYER + TWO_LAYER
    t4_columns = ("144", "169", "196", "225", "256", "289", "[361,100]")
    columns = {2: all_columns, 3: all_columns, 4: t4_columns}
    pairs = list(zip(ONE_LAYER, TWO_LAYER))
    return [
        Finding(f"(1) BMNNs trained by EBP work well (best B-EBP-P below {works_well:g}%), though not as well as "
                "real weights (best R-EBP-P below best B-EBP-P)", "Summary (1)", "every", tuple(
                    [Comparison(f"Table {t}: best B-EBP-P < {works_well:g}%", _cells(t, ["B-EBP-P"], columns[t]),
                                works_well) for t in (2, 3, 4)]
                    + [Comparison(f"Table {t}: best R-EBP-P < best B-EBP-P", _cells(t, ["R-EBP-P"], columns[t]),
                                  _cells(t, ["B-EBP-P"], columns[t])) for t in (2, 3, 4)])),
        Finding(f"(2) EBP works on BMNNs with a fan-in of a few hundred: B-EBP-P of [784, 200, 10] below "
                f"{works_well:g}%", "Summary (2)", "every", tuple(
                    Comparison(f"Table {t}: B-EBP-P 200 < {works_well:g}%", ((t, "B-EBP-P", "200"),), works_well)
                    for t in (2, 3))),
        Finding("(3) With EBP-D, two-hidden-layer BMNNs outperform one-hidden-layer ones", "Summary (3)", "most",
                tuple(Comparison(f"Table {t}: B-EBP-D {two} < {one}", ((t, "B-EBP-D", two),), ((t, "B-EBP-D", one),))
                      for t in (2, 3) for one, two in pairs)),
        Finding("(4) Dropout significantly improves BMNNs", "Summary (4)", "most", tuple(
            Comparison(f"{r} {c}: Table 3 < Table 2", ((3, r, c),), ((2, r, c),)) for r in binary
            for c in all_columns)),
        Finding("(5) Spatial filtering does not improve BMNNs: the best binary error of Table 4 is above Table 2's",
                "Summary (5)", "every", (
                    Comparison("best binary, Table 2 < Table 4", _cells(2, binary, all_columns),
                               _cells(4, binary, t4_columns)),)),
        Finding("(5′) Spatial filtering improves real-weight networks: the best real error of Table 4 is below "
                "Table 2's", "Conclusions; Sect. 4", "every", (
                    Comparison("best real, Table 4 < Table 2", _cells(4, real, t4_columns),
                               _cells(2, real, all_columns)),)),
        Finding("Dropout improves every configuration (Table 3 below Table 2 in every cell)", "Sect. 4, Effects of "
                "Dropout", "every", tuple(Comparison(f"{r} {c}: Table 3 < Table 2", ((3, r, c),), ((2, r, c),))
                                          for r in ROW_LABELS for c in all_columns)),
        Finding("Without dropout, B-EBP-D degrades with width in two-layer nets", "Sect. 4, Table 2", "every",
                tuple(Comparison(f"Table 2: B-EBP-D {a} < {b}", ((2, "B-EBP-D", a),), ((2, "B-EBP-D", b),))
                      for a, b in zip(TWO_LAYER, TWO_LAYER[1:]))),
        Finding("With dropout, B-EBP-D no longer degrades with width: [800,800] below [200,200]",
                "Sect. 4, Effects of Dropout", "every", (
                    Comparison("Table 3: B-EBP-D [800,800] < [200,200]", ((3, "B-EBP-D", "[800,800]"),),
                               ((3, "B-EBP-D", "[200,200]"),)),)),
        Finding("Real weights beat binary weights in every structure", "Sect. 4, Table 2", "every", tuple(
            Comparison(f"Table {t} {c}: R-EBP-{o} < B-EBP-{o}", ((t, f"R-EBP-{o}", c),), ((t, f"B-EBP-{o}", c),))
            for t in (2, 3, 4) for c in columns[t] for o in outputs)),
        Finding("EBP-P beats EBP-D", "Sect. 4, Table 2", "most", tuple(
            Comparison(f"Table {t} {c}: {w}-EBP-P < {w}-EBP-D", ((t, f"{w}-EBP-P", c),), ((t, f"{w}-EBP-D", c),))
            for t in (2, 3, 4) for c in columns[t] for w in "BR")),
        Finding("With EBP-P, two hidden layers beat one of the same width", "Sect. 4, Table 2", "most", tuple(
            Comparison(f"Table {t}: {w}-EBP-P {two} < {one}", ((t, f"{w}-EBP-P", two),), ((t, f"{w}-EBP-P", one),))
            for t in (2, 3) for w in "BR" for one, two in pairs)),
    ]


def paper_values(rows: list[dict]) -> dict:
    """cell_key -> (the paper's error, its binomial SE): one run per cell, so no seed spread is known. Rows of
    another data set than the paper's (dataset_rows) have no paper number and no entry."""
    return {cell_key(r): (r["paper_error"], binomial_se(r["paper_error"])) for r in rows
            if r["paper_error"] is not None}


def our_values(cells: dict) -> dict:
    """cell_key -> (our mean error over seeds, Cell.uncertainty), for cells whose runs are finished."""
    return {key: (cell.mean, cell.uncertainty) for key, cell in cells.items() if cell.finished}


def _side(side, values):
    """(value, uncertainty, the cell it came from) of one side of a comparison, None if a cell is missing."""
    if not isinstance(side, tuple):
        return float(side), 0.0, None
    if any(key not in values for key in side):
        return None
    key = min(side, key=lambda k: values[k][0])
    return values[key][0], values[key][1], key


def judge(comparison: Comparison, values: dict) -> dict:
    """One comparison on one set of values: status (supports, contradicts, within tolerance, not run yet), the
    difference d = worse − better (points), its tolerance, and the cells each side came from."""
    better, worse = _side(comparison.better, values), _side(comparison.worse, values)
    if better is None or worse is None:
        return {"status": "not run yet"}
    d, tolerance = worse[0] - better[0], 2 * math.sqrt(better[1] ** 2 + worse[1] ** 2)
    status = "supports" if d > tolerance else "contradicts" if d < -tolerance else "within tolerance"
    return {"status": status, "d": d, "tolerance": tolerance, "better": better, "worse": worse}


def verdict(finding: Finding, values: dict) -> dict:
    """A finding judged on one set of values: verdict (agree, disagree, inconclusive, not run yet), the count
    of each status, and the judged comparisons in order."""
    judged = [judge(c, values) for c in finding.comparisons]
    counts = {s: sum(j["status"] == s for j in judged)
              for s in ("supports", "contradicts", "within tolerance", "not run yet")}
    n = len(judged)
    if counts["not run yet"] == n:
        word = "not run yet"
    elif finding.quantifier == "every":
        word = "agree" if counts["supports"] == n else "disagree" if counts["contradicts"] else "inconclusive"
    else:
        word = ("agree" if 2 * counts["supports"] > n else "disagree" if 2 * counts["contradicts"] >= n
                else "inconclusive")
    return {"verdict": word, "counts": counts, "judged": judged}


def describe_verdict(v: dict) -> str:
    """'agree (5 ✓, 0 ✗, 1 ~ of 6)': the verdict and how many comparisons support it (✓), contradict it (✗), are
    within tolerance (~) or not run yet."""
    c, n = v["counts"], sum(v["counts"].values())
    if v["verdict"] == "not run yet":
        return "not run yet"
    missing = f", {c['not run yet']} not run" if c["not run yet"] else ""
    return f"{v['verdict']} ({c['supports']} ✓, {c['contradicts']} ✗, {c['within tolerance']} ~{missing} of {n})"


def findings_summary(rows: list[dict], variants: dict, findings: list[Finding] | None = None) -> str:
    """Markdown: one line per finding, judged on the paper's numbers and on ours in each variant ({label: cells};
    the first is the tables' main reading; a later variant is shown only for findings that read a table its
    readings change: Table 3 for a dropout reading, Table 4 for a mask reading, as named by VARIANT_TABLES)."""
    findings = paper_findings() if findings is None else findings
    paper = paper_values(rows)
    labels = list(variants)
    lines = ["| finding | every/most | paper's numbers | " + " | ".join(_ours_header(k, label) for k, label in
                                                                      enumerate(labels)) + " |",
             "|---" * (3 + len(labels)) + "|"]
    for f in findings:
        entries = []
        for k, label in enumerate(labels):
            touched = k == 0 or VARIANT_TABLES.get(label, set()) & f.tables
            entries.append(f"**{describe_verdict(verdict(f, our_values(variants[label])))}**" if touched else "same")
        lines.append(f"| {f.title} ({f.source}) | {f.quantifier} | {describe_verdict(verdict(f, paper))} | "
                     + " | ".join(entries) + " |")
    return "\n".join(lines)


# The tables a variant's reading changes (findings_summary and finding_details show a variant's verdict only for
# findings that read one of them); the notebook names its variants with these labels.
VARIANT_TABLES = {"Table 3 analytic": {3}, "Table 4 held": {4}}
def _ours_header(k: int, label: str) -> str:
    """The column of our verdicts: 'ours' for the main variant (the first), 'ours, <label>' for the others."""
    return "ours" if k == 0 else f"ours, {label}"


STATUS_MARKS = {"supports": "✓", "contradicts": "✗", "within tolerance": "~", "not run yet": "·"}


def _judged_text(j: dict) -> str:
    if j["status"] == "not run yet":
        return "· not run yet"
    return f"{STATUS_MARKS[j['status']]} {j['d']:+.2f} (tol {j['tolerance']:.2f})"


def finding_details(finding: Finding, rows: list[dict], variants: dict, max_lines: int = 12) -> str:
    """Markdown: the comparisons that carry a finding's verdicts, one line each: d = worse − better with its
    tolerance and a mark (✓ supports, ✗ contradicts, ~ within tolerance, · not run yet), for the paper's numbers
    (where `rows` have them: not for another data set) and ours (variants as in findings_summary). Beyond
    `max_lines` comparisons, those marked ✓ everywhere, and those not run in any column (a data set whose grid is
    partly trained), are counted in a last line each rather than listed."""
    labels = [label for k, label in enumerate(variants)
              if k == 0 or VARIANT_TABLES.get(label, set()) & finding.tables]
    paper = paper_values(rows)  # empty for another data set than the paper's: no paper column then
    columns = ([("paper", paper)] if paper else []) + [(_ours_header(k, label), our_values(variants[label]))
                                                      for k, label in enumerate(labels)]
    judged = [[judge(c, values) for _, values in columns] for c in finding.comparisons]
    lines = [f"**{finding.title}** ({finding.source}; {finding.quantifier}) — d = worse − better, points",
             "", "| comparison | " + " | ".join(name for name, _ in columns) + " |",
             "|---" * (1 + len(columns)) + "|"]
    hidden = {"supports": 0, "not run yet": 0}
    for comparison, row in zip(finding.comparisons, judged):
        same = {j["status"] for j in row}
        if len(finding.comparisons) > max_lines and len(same) == 1 and same <= set(hidden):
            hidden[same.pop()] += 1
            continue
        lines.append(f"| {comparison.label} | " + " | ".join(_judged_text(j) for j in row) + " |")
    if hidden["supports"]:
        lines.append(f"| {hidden['supports']} more comparisons | " + " | ".join("✓" for _ in columns) + " |")
    if hidden["not run yet"]:
        lines.append(f"| {hidden['not run yet']} comparisons not run yet | " + " | ".join("·" for _ in columns) + " |")
    return "\n".join(lines)


def findings_by_dataset(cells_by_dataset: dict) -> str:
    """Markdown: one line per paper finding, judged on our numbers of each data set ({dataset: cells}) by the
    same rule (verdict), each with its own "works well" bar (paper_findings(dataset)); the findings' wording is
    the first data set's."""
    per_dataset = {d: paper_findings(d) for d in cells_by_dataset}
    headers = [f"ours, {DATASET_NAMES.get(d, d)} (works well: < {WORKS_WELL_BY_DATASET[d]:g}%)"
               for d in cells_by_dataset]
    lines = ["| finding | every/most | " + " | ".join(headers) + " |", "|---" * (2 + len(headers)) + "|"]
    first = next(iter(per_dataset.values()))
    for k, finding in enumerate(first):
        entries = [f"**{describe_verdict(verdict(per_dataset[d][k], our_values(cells)))}**"
                   for d, cells in cells_by_dataset.items()]
        lines.append(f"| {finding.title} ({finding.source}) | {finding.quantifier} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


def _log_error_axis(ax) -> None:
    """A log y axis for test errors in percent, ticks written 2, 3, 20, 30 rather than 2 × 10⁰, 2 × 10¹."""
    from matplotlib.ticker import FormatStrFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))


def plot_learning_curves(ax, rows: list[dict], cells: dict, table: int, weights: str) -> None:
    """Test error (%) of EBP-P (solid) and EBP-D (dashed) against epoch, one colour per column of `table`: the
    first pooled seed of each cell (the title says which profile)."""
    runs = list(dict.fromkeys((r["column"], cell_key(r)) for r in rows
                              if r["table"] == table and r["weights"] == weights and r["output"] == "ebp_p"))
    profiles = set()
    for k, (column, key) in enumerate(runs):
        cell = cells.get(key)
        if cell is None:
            continue
        result = cell.pooled[0]
        profiles.add(result["profile"])
        epochs = [h["epoch"] for h in result["history"]]
        color = f"C{k % 10}"
        ax.plot(epochs, [100 * h["test_ebp_p"] for h in result["history"]], "-", color=color, label=column)
        ax.plot(epochs, [100 * h["test_ebp_d"] for h in result["history"]], "--", color=color)
    ax.set(xlabel="epoch", ylabel="test error (%)",
           title=f"Table {table}, {weights} ({', '.join(sorted(profiles)) or 'not yet run'})")
    ax.xaxis.get_major_locator().set_params(integer=True)
    if profiles:
        _log_error_axis(ax)
        ax.legend(fontsize=7, ncol=2)
    else:
        ax.text(0.5, 0.5, "not yet run", ha="center", va="center", transform=ax.transAxes, color="grey")


# Beyond the paper's protocol: runs of the extended profile prolong a paper-profile run (same configuration and
# seed, more epochs), to show where a curve still falling at epoch 120 settles.

def prolonged_runs(results: list[dict]) -> list[tuple[dict, dict | None]]:
    """(extended result, the finished paper-profile result it prolongs, or None) for every result of the
    extended profile (load_results): the twin has the same configuration and seed and the paper's 120 epochs."""
    paper = [r for r in results if r["profile"] == "paper" and r["finished"]]
    pairs = []
    for result in (r for r in results if r["profile"] == "extended"):
        at_120 = {**result["parameters"], "epochs": PAPER_EPOCHS}
        pairs.append((result, next((p for p in paper if same_configuration(at_120, p["parameters"])), None)))
    return pairs


def retraced_epochs(result: dict, twin: dict) -> int:
    """How many leading epochs of `result` have exactly the test and training errors of `twin`'s (the same
    seed draws the same orders and masks, so a prolonged run retraces its twin until rounding differs)."""
    keys = ("test_ebp_p", "test_ebp_d", "train_ebp_p", "train_ebp_d")
    n = 0
    for a, b in zip(result["history"], twin["history"]):
        if any(a.get(k) != b.get(k) for k in keys):
            break
        n += 1
    return n


def twin_agreement(result: dict, twin: dict) -> str:
    """One sentence: how long a prolonged run retraces its twin, how far apart their test errors come over the
    epochs both ran, and the CPUs each trained on (rounding, which differs between CPUs, is what parts them)."""
    common = list(zip(result["history"], twin["history"]))
    gap = max((100 * abs(a[f"test_{o}"] - b[f"test_{o}"]) for a, b in common for o in ("ebp_p", "ebp_d")),
              default=0.0)

    def cpus(r):
        return ", ".join(sorted({s.get("cpu", "?") for s in r.get("sessions", [])})) or "unrecorded CPUs"
    return (f"identical to its paper-profile twin for {retraced_epochs(result, twin)} of the {len(common)} epochs "
            f"both ran; over those epochs their test errors differ by at most {gap:.2f} points (trained on "
            f"{cpus(result)}; the twin on {cpus(twin)})")


def run_name(params: dict) -> str:
    """A run's configuration in words, e.g. "binary [800,800], sampled dropout, seed 0"."""
    return (f"{params['weights']} [{params['architecture'].replace('-', ',')}], {params['dropout'] or 'no'} dropout, "
            f"seed {params['seed']}")


def error_at(result: dict, output: str, epoch: int) -> float:
    """Test error (percent) of `output` (ebp_p or ebp_d) after `epoch` (counted from 1)."""
    return 100 * result["history"][epoch - 1][f"test_{output}"]


def trend(result: dict, output: str, k: int = 40) -> float:
    """Least-squares slope of the test error of `output` over the last k epochs, in points per 10 epochs:
    about zero once a curve has settled, negative while it still falls."""
    tail = result["history"][-k:]
    if len(tail) < 2:
        return 0.0
    fit = statistics.linear_regression([h["epoch"] for h in tail], [100 * h[f"test_{output}"] for h in tail])
    return 10 * fit.slope


def settling_table(pairs: list[tuple[dict, dict | None]]) -> str:
    """Markdown: for each prolonged run (prolonged_runs) and output, the error after epoch 120 and after its
    last epoch, the last-10-epoch means ending there, and the trend (trend) over the last 40 epochs of each."""
    if not pairs:
        return "No run of the extended profile has been committed yet."
    lines = ["| run | output | epoch 120 | last 10 to 120 | trend to 120 | last epoch | last 10 to it | "
             "trend to it |", "|---|---|---|---|---|---|---|---|"]
    for result, _ in pairs:
        last = result["epochs_done"]
        at_120 = {**result, "history": result["history"][:PAPER_EPOCHS]}
        name = run_name(result["parameters"])
        for output in ("ebp_p", "ebp_d"):
            label = "EBP-P" if output == "ebp_p" else "EBP-D"
            early = (f"{error_at(result, output, PAPER_EPOCHS):.2f} | {last_epochs_mean(at_120, output):.2f} | "
                     f"{trend(at_120, output):+.2f}" if last >= PAPER_EPOCHS else "· | · | ·")
            lines.append(f"| {name} | {label} | {early} | {error_at(result, output, last):.2f} (epoch {last}) | "
                         f"{last_epochs_mean(result, output):.2f} | {trend(result, output):+.2f} |")
    return "\n".join(lines)


def plot_prolonged(ax, result: dict, twin: dict | None) -> None:
    """Test error (%) against epoch of a prolonged run, EBP-P solid and EBP-D dashed, over its paper-profile
    twin (grey, drawn wider: where the two coincide only the coloured line shows), with the paper's last epoch
    marked."""
    for output, style in (("ebp_p", "-"), ("ebp_d", "--")):
        label = "EBP-P" if output == "ebp_p" else "EBP-D"
        if twin is not None:
            ax.plot([h["epoch"] for h in twin["history"]], [100 * h[f"test_{output}"] for h in twin["history"]],
                    style, color="0.7", lw=4, label=f"{label}, paper profile")
        ax.plot([h["epoch"] for h in result["history"]], [100 * h[f"test_{output}"] for h in result["history"]],
                style, color="C0" if output == "ebp_p" else "C3", lw=1.2, label=f"{label}, extended profile")
    ax.axvline(PAPER_EPOCHS, color="k", ls=":", lw=1)
    ax.text(PAPER_EPOCHS, 0.98, "the paper's last epoch ", transform=ax.get_xaxis_transform(), ha="right", va="top",
            fontsize=8)
    ax.set(xlabel="epoch", ylabel="test error (%)", title=run_name(result["parameters"]))
    _log_error_axis(ax)
    ax.legend(fontsize=7, loc="center right")
