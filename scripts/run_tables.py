#!/usr/bin/env python
"""Regenerate the paper's Tables 2-4: run notebooks/experiment.ipynb once per table run, with papermill.

Every number of the paper's Tables 2, 3 and 4 is a row of scripts/paper_tables.csv, with the configuration
that reproduces it. EBP-P and EBP-D come from the same trained network, so the two rows share a run id and
are produced by one run. This script executes the experiment notebook for a selection of runs, in parallel
over local cores (or on an existing Dask cluster), skipping runs already finished and resuming interrupted
ones from their checkpoint. Results land in outputs/runs/<profile>/<run>/ (see outputs/README.md).

Examples (from the repository root; `python` is the project's interpreter, e.g. .venv/bin/python):

  python scripts/run_tables.py --all                       # every run, quick profile, all local cores
  python scripts/run_tables.py --table 2 --jobs 1          # Table 2 only, one worker
  python scripts/run_tables.py --table 3 --column 200 800  # two columns of Table 3
  python scripts/run_tables.py binary-200 real-800-800     # runs by id (see --list)
  python scripts/run_tables.py --all --profile paper       # the full protocol: 60,000 images, 120 epochs
  python scripts/run_tables.py --all --list                # show what would run and each run's state
  python scripts/run_tables.py --all --profile paper --scheduler tcp://host:8786   # on a Dask cluster

Killing the runner (Ctrl-C, SIGTERM, or the machine going away) loses at most the epoch in progress of each
running job: rerun the same command and it skips finished runs and resumes the others from their checkpoint.

Besides the runner, this module holds what the two notebooks share: parameter validation and result files
for notebooks/experiment.ipynb, and reading results back for notebooks/tables.ipynb.
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "experiment.ipynb"
TABLES_CSV = REPO / "scripts" / "paper_tables.csv"
RUNS_DIR = REPO / "outputs" / "runs"

if str(REPO) not in sys.path:  # ebp_lib sits at the repository root
    sys.path.insert(0, str(REPO))

RESULT_FILE = "result.json"
CHECKPOINT_FILE = "checkpoint.npz"
LOCK_FILE = ".lock"
CURVE_FILE = "learning_curve.png"

# quick: a tenth of the training set for 3 epochs (minutes per table); paper: the paper's protocol
# (spec §Data protocol: all 60,000 training images, 120 epochs; batch 10 as in the authors' code).
PROFILES = {
    "quick": {"name": "quick", "epochs": 3, "n_train": 6000, "batch_size": 10, "seed": 0},
    "paper": {"name": "paper", "epochs": 120, "n_train": None, "batch_size": 10, "seed": 0},
}
DROPOUT_READINGS = ("analytic", "sampled")  # analytic = the authors' code (spec §Data protocol, dropout)
PAPER_EPOCHS, FULL_TRAIN = 120, 60000
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")

# ----------------------------------------------------------------------------------------------------------
# Parameters of one experiment (the `parameters` cell of notebooks/experiment.ipynb)
# ----------------------------------------------------------------------------------------------------------

DEFAULT_PARAMETERS = {
    "dataset": "mnist", "architecture": "200", "weights": "binary", "dropout": None, "keep": 0.8,
    "epochs": 2, "batch_size": 10, "seed": 0, "n_train": 2000, "preprocessing": "pixel", "std_floor": 0.0,
    "init_scale": 1.0, "output_dir": None,
}
DATASETS = ("mnist", "fashion-mnist")
WEIGHTS = ("binary", "real")
PREPROCESSINGS = ("pixel", "global", "unit")


class ParameterError(ValueError):
    """One or more experiment parameters are invalid; the message lists every problem."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def architecture_layers(name) -> list:
    """The layer list of a paper architecture name ("200", "800-800", "block13", "361-100"), validated."""
    import ebp_lib

    layers = ebp_lib.paper_architecture(str(name))
    ebp_lib.check_architecture(layers, 28)  # block sizes must fit the 28x28 image
    return layers


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


def protocol_label(params: dict) -> str:
    """'paper' for the paper's protocol (all 60,000 training images, 120 epochs), else 'shortened'."""
    full = params["n_train"] in (None, FULL_TRAIN)
    return "paper" if full and params["epochs"] == PAPER_EPOCHS else "shortened"


def describe(params: dict) -> str:
    """One deterministic line saying what the experiment trains (no paths)."""
    dropout = "no dropout" if params["dropout"] is None else f"{params['dropout']} dropout, p = {params['keep']}"
    n = f"{params['n_train']:,}" if params["n_train"] is not None else f"all {FULL_TRAIN:,}"
    return (f"{params['dataset']}, {params['weights']} weights, architecture {params['architecture']} "
            f"{architecture_layers(params['architecture'])}, {dropout}; {n} training images "
            f"({params['preprocessing']} standardisation), {params['epochs']} epochs, batch size "
            f"{params['batch_size']}, seed {params['seed']}, init scale {params['init_scale']:g}; "
            f"protocol: {protocol_label(params)}")


# ----------------------------------------------------------------------------------------------------------
# The output folder of one experiment: lock, checkpoint history, result.json
# ----------------------------------------------------------------------------------------------------------

def open_output_dir(output_dir):
    """Create the output folder (a new temporary one for None) and lock it for this process.

    Returns (path, lock handle); keep the handle open while training. The lock (an flock, released when the
    process dies) stops two processes from training into the same checkpoint.
    """
    import fcntl

    path = Path(tempfile.mkdtemp(prefix="ebp-experiment-")) if output_dir is None else Path(output_dir)
    path.mkdir(parents=True, exist_ok=True)
    handle = open(path / LOCK_FILE, "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise RuntimeError(f"another process is already training into {path} (it holds {path / LOCK_FILE}); "
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


def checkpoint_history(checkpoint) -> list[dict]:
    """The per-epoch history saved in a checkpoint of ebp_lib.fit ([] if there is none)."""
    import numpy as np

    if not Path(checkpoint).exists():
        return []
    with np.load(checkpoint) as f:  # reads only the metadata entry, not the weights
        return json.loads(str(f["meta"]))["history"]


def compact_checkpoint(checkpoint) -> bool:
    """Rewrite a checkpoint of ebp_lib.fit with float32 arrays when that loses nothing; True if it did.

    The fast engine rounds h and b to float32 after every call, so its float64 checkpoints hold float32 values:
    storing them as float32 halves the file (10 MB -> 5 MB for [800, 800]) and load_network casts them back to
    exactly the same float64 numbers, so resuming stays bit-identical. Arrays that are not exactly float32
    (e.g. from engine="reference") keep their dtype.
    """
    import numpy as np

    with np.load(checkpoint) as f:
        arrays = {name: f[name] for name in f.files}
    small = {name: a.astype(np.float32) if a.dtype == np.float64 and np.array_equal(a.astype(np.float32), a)
             else a for name, a in arrays.items()}
    if all(small[name] is arrays[name] for name in arrays):
        return False
    tmp = Path(checkpoint).with_name(Path(checkpoint).name + ".tmp.npz")
    np.savez(tmp, **small)
    os.replace(tmp, checkpoint)  # atomic, as ebp_lib.save_network
    return True


def read_result(path) -> dict | None:
    """The result.json in folder `path`, or None if there is none (or it is unreadable)."""
    try:
        return json.loads((Path(path) / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)  # atomic: the runner may read it at any moment


def package_versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("numpy", "scipy", "numba", "matplotlib", "papermill", "ipykernel"):
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


def git_state(root=REPO) -> dict:
    """The commit checked out in `root` and whether tracked code differs from it (outputs/ not counted).
    Without a git checkout (a copy of the tree on another machine) the commit is $EBP_GIT_COMMIT if set."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    unknown = {"git_commit": os.environ.get("EBP_GIT_COMMIT"), "git_dirty": None}
    try:
        head = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)outputs")
    except (OSError, subprocess.SubprocessError):
        return unknown
    if head.returncode != 0:
        return unknown
    changed = [line[3:] for line in status.stdout.splitlines()]
    return {"git_commit": head.stdout.strip(), "git_dirty": bool(changed), "git_changed": changed[:20]}


def engine_name() -> str:
    """The engine ebp_lib.fit uses by default ('plain' before fit had an engine argument)."""
    import inspect

    import ebp_lib

    engine = inspect.signature(ebp_lib.fit).parameters.get("engine")
    return "plain" if engine is None else str(engine.default)


class EpochRecorder:
    """The on_epoch callback of ebp_lib.fit: prints a progress line and rewrites result.json after every epoch
    (finished: false), so the runner can show progress and an interrupted run still has its learning curve;
    stores the checkpoint fit has just saved as float32 where that is exact (compact_checkpoint)."""

    def __init__(self, output_dir, params: dict, checkpoint, echo=print):
        self.path, self.params, self.echo, self.checkpoint = Path(output_dir), params, echo, Path(checkpoint)
        self.history = checkpoint_history(checkpoint)
        self.start_epoch, self.started = len(self.history), time.time()
        previous = read_result(self.path) if self.start_epoch else None  # only a resumed run continues it
        self.sessions = list(previous.get("sessions", [])) if previous else []
        self.session = {"started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        "host": socket.gethostname(), "cpu": cpu_model(), "from_epoch": self.start_epoch,
                        **git_state(), "versions": package_versions()}

    def __call__(self, record: dict) -> None:
        self.history.append(record)
        if self.checkpoint.exists():  # fit has just saved it
            compact_checkpoint(self.checkpoint)
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
            "engine": engine_name(),
            "versions": package_versions(),
            "git_commit": self.session["git_commit"],
            "git_dirty": self.session["git_dirty"],
            "sessions": self.sessions + [session],
        }
        _write_json(self.path / RESULT_FILE, result)
        return result


# ----------------------------------------------------------------------------------------------------------
# The paper's tables as data, and the runs that reproduce them
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
        check([i for i in run_ids if i not in aliases], sorted(known), "run id")
        wanted = {aliases.get(i, i) for i in run_ids}
        out = [r for r in out if r["run_id"] in wanted]
    if weights:
        check(list(weights), list(WEIGHTS), "weight type")
        out = [r for r in out if r["weights"] in weights]
    return out


def run_key(row: dict, reading: str = "analytic") -> str:
    """The folder name of a row's run: its run id, plus the dropout reading for dropout runs."""
    return f"{row['run_id']}-{reading}" if row["dropout"] == "yes" else row["run_id"]


def make_jobs(rows: list[dict], profile="quick", reading: str = "analytic", runs_dir=RUNS_DIR) -> list[dict]:
    """One job per run id among `rows` (EBP-P and EBP-D rows share a run), in table order.

    `profile` is a name in PROFILES or a dict like them (tests use tiny custom ones).
    """
    if reading not in DROPOUT_READINGS:
        raise ValueError(f"unknown dropout reading {reading!r}; choose one of {', '.join(DROPOUT_READINGS)}")
    profile = PROFILES[profile] if isinstance(profile, str) else profile
    jobs, seen = [], {}
    for row in rows:
        if row["run_id"] in seen:
            seen[row["run_id"]]["rows"].append(f"Table {row['table']} {row['row']} {row['column']}")
            continue
        key = run_key(row, reading)
        out = Path(runs_dir) / profile["name"] / key
        params = validate_parameters({
            "dataset": row["dataset"], "architecture": row["architecture"], "weights": row["weights"],
            "dropout": reading if row["dropout"] == "yes" else None, "keep": row["keep"] or 0.8,
            "epochs": profile["epochs"], "batch_size": profile["batch_size"], "seed": profile["seed"],
            "n_train": profile["n_train"], "output_dir": os.path.relpath(out, NOTEBOOK.parent)})
        job = {"key": key, "run_id": row["run_id"], "profile": profile["name"], "output_dir": str(out.resolve()),
               "notebook": str(NOTEBOOK), "parameters": params,
               "rows": [f"Table {row['table']} {row['row']} {row['column']}"]}
        seen[row["run_id"]] = job
        jobs.append(job)
    return jobs


def same_configuration(a: dict, b: dict) -> bool:
    """Whether two parameter sets train the same network the same way (the output folder aside)."""
    return all(a.get(k) == b.get(k) for k in DEFAULT_PARAMETERS if k != "output_dir")


def job_state(job: dict) -> tuple[str, int]:
    """('finished' | 'partial' | 'new' | 'stale', epochs done) of a job from its output folder.

    'stale': a finished result of another configuration (e.g. the profile changed); it is rerun.
    """
    out = Path(job["output_dir"])
    result = read_result(out)
    if result and result.get("finished"):
        if same_configuration(result["parameters"], job["parameters"]):
            return "finished", result["epochs_done"]
        return "stale", 0
    done = len(checkpoint_history(out / CHECKPOINT_FILE)) if (out / CHECKPOINT_FILE).exists() else 0
    return ("partial" if done else "new"), done


# ----------------------------------------------------------------------------------------------------------
# One job: execute the experiment notebook (the same function runs in a local process or on a Dask worker)
# ----------------------------------------------------------------------------------------------------------

def run_job(job: dict) -> dict:
    """Execute notebooks/experiment.ipynb for `job` into <output_dir>/experiment.ipynb with papermill.

    One BLAS thread per job. A finished run's checkpoint is deleted (the result keeps the learning curve);
    a failed run keeps it, so the next attempt resumes. Returns an outcome dict (status finished/failed).
    """
    import papermill

    for var in THREAD_VARS:
        os.environ[var] = "1"
    out = Path(job["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    executed = out / "experiment.ipynb"
    start = time.time()
    outcome = {"key": job["key"], "notebook": str(executed), "host": socket.gethostname()}
    # Look again now: another runner may have finished or started this run since the batch was planned (a
    # finished run has no checkpoint, so executing it again would retrain it from scratch over its result).
    state, epochs = job_state(job)
    if state == "finished":
        return {**outcome, "status": "skipped", "epochs": epochs, "final": read_result(out)["final"]}
    if is_locked(out):
        return {**outcome, "status": "busy", "error": "another process is training this run now"}
    try:
        papermill.execute_notebook(job["notebook"], str(executed), parameters=job["parameters"],
                                   kernel_name="python3", cwd=str(Path(job["notebook"]).parent),
                                   progress_bar=False, log_output=False)
    except Exception as err:  # noqa: BLE001 - any failure is reported with the notebook's path
        message = f"{getattr(err, 'ename', type(err).__name__)}: {getattr(err, 'evalue', err)}"
        _relative_papermill_paths(executed, Path(job["notebook"]).parents[1])
        return {**outcome, "status": "failed", "error": message.strip().splitlines()[-1][:300],
                "seconds": time.time() - start}
    _relative_papermill_paths(executed, Path(job["notebook"]).parents[1])
    result = read_result(out) or {}
    if result.get("finished"):
        (out / CHECKPOINT_FILE).unlink(missing_ok=True)
        (out / LOCK_FILE).unlink(missing_ok=True)  # released when the kernel ended; nothing to keep
        return {**outcome, "status": "finished", "epochs": result["epochs_done"], "final": result["final"],
                "seconds": time.time() - start}
    return {**outcome, "status": "failed", "error": "the notebook ran but result.json is not marked finished",
            "seconds": time.time() - start}


def _relative_papermill_paths(executed: Path, root: Path) -> None:
    """Papermill records absolute input/output paths in the executed notebook; make them relative to the
    repository so committed notebooks do not depend on where it was cloned."""
    import nbformat

    if not executed.exists():
        return
    nb = nbformat.read(executed, as_version=4)
    meta = nb.metadata.get("papermill", {})
    for key in ("input_path", "output_path"):
        if meta.get(key) and Path(meta[key]).is_relative_to(root):
            meta[key] = Path(meta[key]).relative_to(root).as_posix()
    nbformat.write(nb, executed)


def _worker_init() -> None:
    """Local worker processes: one BLAS thread; Ctrl-C is handled by the runner; the kernels' stderr (log noise
    such as "kernel running over TCP") is discarded; exit if the runner dies (the notebook kernel then exits
    too: ipykernel watches its parent), so no orphan keeps training."""
    import threading

    for var in THREAD_VARS:
        os.environ[var] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # the kernels' log noise; failures come back through the outcome and the notebook
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


# ----------------------------------------------------------------------------------------------------------
# Batch: run jobs, show progress, summarise
# ----------------------------------------------------------------------------------------------------------

def job_cost(job: dict) -> float:
    """Relative cost of one epoch: images seen × weights (dense, as the engine multiplies dense matrices);
    evaluation (10,000 test + up to 10,000 training images, forward only) counted at a third per image."""
    layers, width, side, weights = architecture_layers(job["parameters"]["architecture"]), 784, 28, 0
    for spec in layers:
        units = (side - spec[1] + 1) ** 2 if isinstance(spec, (tuple, list)) else spec
        side = side - spec[1] + 1 if isinstance(spec, (tuple, list)) else None
        weights, width = weights + units * width, units
    n = job["parameters"]["n_train"] or FULL_TRAIN
    return weights * (n + (10000 + min(n, 10000)) / 3)


def _progress(job: dict) -> tuple[int, float | None]:
    """(epochs done, wall seconds per epoch in the current session) from the job's partial result.json."""
    result = read_result(job["output_dir"])
    if not result or not same_configuration(result.get("parameters", {}), job["parameters"]):
        return 0, None
    session = result["sessions"][-1]
    return result["epochs_done"], session["seconds_per_epoch"] if session["to_epoch"] > session["from_epoch"] else None


def _format_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _status_line(start, jobs, done, running, workers) -> str:
    """'[elapsed] k/n runs done (f failed) | running: key epoch e/E ... | about T left'."""
    parts, rate_num, rate_den = [], 0.0, 0.0
    remaining = 0.0
    for job in running:
        epochs, per_epoch = _progress(job)
        parts.append(f"{job['key']} epoch {epochs}/{job['parameters']['epochs']}")
        if per_epoch:
            rate_num, rate_den = rate_num + per_epoch, rate_den + job_cost(job)
    waiting = [j for j in jobs if j["key"] not in done and j not in running]
    failed = sum(1 for o in done.values() if o["status"] == "failed")
    line = (f"[{_format_seconds(time.time() - start):>6}] {len(done)}/{len(jobs)} runs done"
            f"{f' ({failed} failed)' if failed else ''} | running: {', '.join(parts) or '-'}")
    if rate_den:
        rate = rate_num / rate_den  # seconds per unit of job_cost, from the epochs seen so far
        for job in running + waiting:
            epochs, _ = _progress(job)
            remaining += (job["parameters"]["epochs"] - epochs) * job_cost(job) * rate
        line += f" | about {_format_seconds(remaining / max(1, min(workers, len(running) + len(waiting))))} left"
    return line


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_batch(jobs: list[dict], n_jobs: int | None = None, scheduler: str | None = None,
              progress_every: float = 30.0, echo=print) -> list[dict]:
    """Run `jobs`: finished ones are skipped, others resume from their checkpoint. Returns one outcome per
    job (status skipped, busy, finished, failed, or interrupted by Ctrl-C/SIGTERM), in job order.

    Locally, `n_jobs` worker processes (default: the number of cores). With `scheduler` (a Dask address), the
    same run_job is submitted to that cluster (workers must see this repository at the same path).
    """
    outcomes, todo = {}, []
    for job in jobs:
        state, epochs = job_state(job)
        if state == "finished":
            (Path(job["output_dir"]) / CHECKPOINT_FILE).unlink(missing_ok=True)
            outcomes[job["key"]] = {"key": job["key"], "status": "skipped", "epochs": epochs,
                                    "final": read_result(job["output_dir"])["final"]}
        elif is_locked(job["output_dir"]):
            outcomes[job["key"]] = {"key": job["key"], "status": "busy",
                                    "error": "another process is training this run now"}
        else:
            todo.append(job)
            note = {"partial": f"resuming after epoch {epochs}", "new": "new",
                    "stale": "rerun (finished result of another configuration)"}[state]
            echo(f"  {job['key']}: {note}")
    echo(f"{len(jobs)} runs selected: {sum(o['status'] == 'skipped' for o in outcomes.values())} already "
         f"finished (skipped), {sum(o['status'] == 'busy' for o in outcomes.values())} busy elsewhere, "
         f"{len(todo)} to run")
    if not todo:
        return [outcomes[j["key"]] for j in jobs]

    if scheduler:
        import cloudpickle
        import distributed

        cloudpickle.register_pickle_by_value(sys.modules[run_job.__module__])  # workers need not import us
        client = distributed.Client(scheduler)
        submit, window = (lambda job: client.submit(run_job, job, pure=False)), n_jobs or len(todo)
        echo(f"sending {len(todo)} runs to the Dask cluster at {scheduler}")
        shutdown = client.close
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        window = n_jobs or os.cpu_count() or 1
        executor = ProcessPoolExecutor(max_workers=window, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_worker_init)
        submit = lambda job: executor.submit(run_job, job)  # noqa: E731
        echo(f"running {len(todo)} runs in {min(window, len(todo))} local worker process(es)")

        def shutdown():
            processes = list((getattr(executor, "_processes", None) or {}).values())
            executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:  # a killed worker's kernel exits by itself (it watches its parent)
                if process.is_alive():
                    process.terminate()

    start, queue, running, last = time.time(), list(todo), {}, 0.0
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        while queue or running:
            changed = False
            for future in [f for f in running if f.done()]:
                job = running.pop(future)
                try:
                    outcome = future.result()
                except Exception as err:  # noqa: BLE001 - a worker died: report it, keep going
                    outcome = {"key": job["key"], "status": "failed", "error": f"worker error: {err!r}",
                               "notebook": str(Path(job["output_dir"]) / "experiment.ipynb")}
                outcomes[job["key"]] = outcome
                changed = True
                echo(f"  {job['key']}: {outcome['status']}"
                     + (f" ({outcome['error']})" if outcome["status"] == "failed" else ""))
            while queue and len(running) < window:
                job = queue.pop(0)
                running[submit(job)] = job
            if changed or time.time() - last >= progress_every:
                echo(_status_line(start, todo, outcomes, list(running.values()), window))
                last = time.time()
            time.sleep(0.5)
    except KeyboardInterrupt:
        echo("interrupted: stopping the running jobs (their checkpoints are kept; rerun the same command to "
             "resume)")
        for job in todo:
            outcomes.setdefault(job["key"], {"key": job["key"], "status": "interrupted",
                                             "epochs": _progress(job)[0]})
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        shutdown()
    return [outcomes[j["key"]] for j in jobs]


def summary(jobs: list[dict], outcomes: list[dict]) -> str:
    """The end-of-batch report: one line per run, then every failure with the path of its notebook."""
    lines = [f"{'run':<32} {'status':<11} {'epochs':>6} {'EBP-P %':>8} {'EBP-D %':>8}  rows"]
    for job, o in zip(jobs, outcomes):
        final = o.get("final") or {}
        p = f"{100 * final['test_ebp_p']:.2f}" if final else "-"
        d = f"{100 * final['test_ebp_d']:.2f}" if final else "-"
        lines.append(f"{job['key']:<32} {o['status']:<11} {o.get('epochs', '-')!s:>6} {p:>8} {d:>8}  "
                     f"{'; '.join(job['rows'])}")
    failed = [o for o in outcomes if o["status"] == "failed"]
    counts = {s: sum(o["status"] == s for o in outcomes) for s in
              ("finished", "skipped", "failed", "busy", "interrupted")}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "nothing to do")
    for o in failed:
        lines.append(f"FAILED {o['key']}: {o.get('error', '?')}\n       notebook: {o.get('notebook', '?')}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------
# Reading results back (notebooks/tables.ipynb)
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
    """Every result.json under runs_dir (finished or not), sorted by path, each with its `profile` (the
    folder above the run's) and `run_dir` (relative to runs_dir) added.

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
            profile, run = relative.split("/")[:2]
            result["profile"], result["run_dir"] = profile, f"{profile}/{run}"
            out.append(result)
    return out


def matches(row: dict, result: dict, reading: str = "analytic") -> bool:
    """Whether a result was trained in the configuration of a table row (with the paper's defaults for the
    data: MNIST, per-pixel standardisation, reference initialisation)."""
    p = result["parameters"]
    dropout = reading if row["dropout"] == "yes" else None
    return (p["dataset"] == row["dataset"] and p["architecture"] == row["architecture"]
            and p["weights"] == row["weights"] and p["dropout"] == dropout
            and (dropout is None or p["keep"] == row["keep"])
            and p["preprocessing"] == "pixel" and p["std_floor"] == 0 and p["init_scale"] == 1)


def completeness(result: dict) -> tuple:
    """Sort key, larger = more complete: the paper's protocol finished, then training images seen, then
    finished over unfinished, then the paper profile over others."""
    paper_done = result["protocol"] == "paper" and result["finished"]
    return (paper_done, result["epochs_done"] * result["n_train_images"], result["finished"],
            result["profile"] == "paper")


def best_results(rows: list[dict], results: list[dict], reading: str = "analytic") -> dict:
    """run_id -> the most complete matching result (absent when no run exists yet)."""
    best = {}
    for row in rows:
        candidates = [r for r in results if matches(row, r, reading)]
        if candidates:
            best[row["run_id"]] = max(candidates, key=completeness)
    return best


def provenance(result: dict) -> str:
    """How a number was produced, short: profile, epochs done (of planned), training images."""
    n = result["n_train_images"]
    size = f"{n // 1000}k" if n % 1000 == 0 else f"{n:,}"
    epochs = f"{result['epochs_done']}" + ("" if result["finished"] else f"/{result['parameters']['epochs']}")
    return f"{result['profile']}, {epochs} ep, {size}"


def ours(row: dict, best: dict) -> float | None:
    """Our test error (percent) for a table row, or None if not run yet."""
    result = best.get(row["run_id"])
    return None if result is None else 100 * result["final"][f"test_{row['output']}"]


def render_table(table: int, rows: list[dict], best: dict) -> str:
    """One paper table as Markdown, transposed (one line per architecture, one column per output): every
    cell 'paper / ours (difference) · profile, epochs, training images'."""
    rows = [r for r in rows if r["table"] == table]
    columns = list(dict.fromkeys(r["column"] for r in rows))
    cell = {(r["column"], r["row"]): r for r in rows}
    lines = [f"**{TABLE_TITLES[table]}** — test error %, paper / ours (ours − paper) · how ours was produced",
             "", "| hidden | " + " | ".join(ROW_LABELS) + " |", "|---" * (len(ROW_LABELS) + 1) + "|"]
    for column in columns:
        out = []
        for label in ROW_LABELS:
            row = cell[(column, label)]
            value = ours(row, best)
            if value is None:
                out.append(f"{row['paper_error']:.2f} / not yet run")
            else:
                out.append(f"{row['paper_error']:.2f} / {value:.2f} ({value - row['paper_error']:+.2f}) · "
                           f"{provenance(best[row['run_id']])}")
        lines.append(f"| {column} | " + " | ".join(out) + " |")
    return "\n".join(lines)


# The paper's qualitative findings, each a predicate over a table of errors errors[(table, row, column)]
# (percent): it returns (holds, evidence) or None when none of the cells it needs exist.

ONE_TWO = [("200", "[200,200]"), ("400", "[400,400]"), ("600", "[600,600]"), ("800", "[800,800]")]


def _count(errors, pairs):
    """(how many pairs (a, b) of cells have error a < b, how many pairs were compared), over the pairs of cells
    that both have an error."""
    pairs = [(errors[a], errors[b]) for a, b in pairs if a in errors and b in errors]
    return (sum(a < b for a, b in pairs), len(pairs)) if pairs else None


def finding_two_layers(errors):
    """EBP-P: two hidden layers [w,w] beat one layer of w, at the same width (Tables 2 and 3)."""
    counted = _count(errors, [((t, r, two), (t, r, one)) for t in (2, 3)
                              for r in ("B-EBP-P", "R-EBP-P") for one, two in ONE_TWO])
    return None if counted is None else (2 * counted[0] > counted[1], counted)


def finding_dropout(errors):
    """Dropout (Table 3) gives a lower error than no dropout (Table 2) in most cells."""
    counted = _count(errors, [((3, r, c), (2, r, c)) for r in ROW_LABELS
                              for c in {k[2] for k in errors if k[0] in (2, 3)}])
    return None if counted is None else (2 * counted[0] > counted[1], counted)


def finding_wide_binary_d(errors):
    """Without dropout, B-EBP-D degrades for wide two-layer nets: worse at [800,800] than at [200,200],
    and further behind B-EBP-P there (Table 2)."""
    need = [(2, "B-EBP-D", "[200,200]"), (2, "B-EBP-D", "[800,800]"), (2, "B-EBP-P", "[200,200]"),
            (2, "B-EBP-P", "[800,800]")]
    if any(k not in errors for k in need):
        return None
    d200, d800, p200, p800 = (errors[k] for k in need)
    return (d800 > d200 and d800 - p800 > d200 - p200,
            f"B-EBP-D {d200:.2f} → {d800:.2f}, gap to B-EBP-P {d200 - p200:.2f} → {d800 - p800:.2f}")


def finding_dropout_wide_binary_d(errors):
    """With dropout, B-EBP-D does not degrade for wide two-layer nets: no worse at [800,800] than at [200,200]
    (Table 3; the paper's B-EBP-D falls from 3.97% to 2.68% there)."""
    need = [(3, "B-EBP-D", "[200,200]"), (3, "B-EBP-D", "[800,800]")]
    if any(k not in errors for k in need):
        return None
    d200, d800 = (errors[k] for k in need)
    return d800 <= d200, f"B-EBP-D {d200:.2f} → {d800:.2f}"


def finding_real_beats_binary(errors):
    """Real weights beat binary weights (same table, column and output) in most cells."""
    counted = _count(errors, [((t, "R" + r[1:], c), (t, r, c)) for (t, r, c) in list(errors)
                              if r.startswith("B")])
    return None if counted is None else (2 * counted[0] > counted[1], counted)


FINDINGS = [("Two hidden layers beat one (EBP-P, same width)", finding_two_layers, 16),
            ("Dropout helps (Table 3 below Table 2)", finding_dropout, 36),
            ("B-EBP-D degrades for wide two-layer nets without dropout", finding_wide_binary_d, 4),
            ("With dropout, B-EBP-D does not degrade for wide two-layer nets", finding_dropout_wide_binary_d, 2),
            ("Real weights beat binary weights", finding_real_beats_binary, 50)]


def _evidence(value, n_expected) -> str:
    if isinstance(value, tuple):
        k, n = value
        return f"{k}/{n} comparisons" + ("" if n >= n_expected else f", {n} of {n_expected} available")
    return str(value)


def check_findings(rows: list[dict], best: dict) -> list[dict]:
    """Each finding evaluated on the paper's numbers and on ours: agree / disagree / not yet run.

    Ours is evaluated separately within each protocol (profile, epochs done, training images): a 3-epoch run
    says nothing against a 120-epoch one. The verdict comes from the most complete protocol that can test it."""
    paper = {(r["table"], r["row"], r["column"]): r["paper_error"] for r in rows}
    mine, protocol = {}, {}
    for r in rows:
        key, result = (r["table"], r["row"], r["column"]), best.get(r["run_id"])
        if result is not None and ours(r, best) is not None:
            mine[key] = ours(r, best)
            protocol[key] = (result.get("n_train_images") or 0, result.get("epochs_done") or 0,
                             result.get("profile"))
    groups = sorted(set(protocol.values()), reverse=True)  # most training first
    out = []
    for title, predicate, n_expected in FINDINGS:
        theirs = predicate(paper)
        tested = [(g, predicate({k: v for k, v in mine.items() if protocol[k] == g}))
                  for g in groups]
        tested = [(g, t) for g, t in tested if t is not None]
        verdict = "not yet run" if not tested else ("agree" if tested[0][1][0] == theirs[0] else "disagree")
        out.append({"finding": title, "paper": f"{'holds' if theirs[0] else 'fails'} "
                    f"({_evidence(theirs[1], n_expected)})",
                    "ours": "; ".join(f"{g[2]}, {g[1]} ep: {'holds' if t[0] else 'fails'} "
                                      f"({_evidence(t[1], n_expected)})" for g, t in tested) or "-",
                    "verdict": verdict})
    return out


def coverage(rows: list[dict], best: dict) -> str:
    """Per table: how many runs exist, and ours − paper (percentage points) over the cells run, separately for
    each protocol (a 3-epoch difference and a 120-epoch one say different things)."""
    lines = []
    for table in sorted({r["table"] for r in rows}):
        cells = [r for r in rows if r["table"] == table]
        runs = sorted({r["run_id"] for r in cells})
        line = f"Table {table}: {sum(run in best for run in runs)} of {len(runs)} runs have results"
        by_protocol = {}
        for r in cells:
            if ours(r, best) is not None:
                by_protocol.setdefault(provenance(best[r["run_id"]]), []).append(ours(r, best) - r["paper_error"])
        paper_first = sorted(by_protocol.items(), key=lambda item: (not item[0].startswith("paper"), item[0]))
        for label, diffs in paper_first:
            line += (f"; {label}: ours − paper over {len(diffs)} cells: mean {sum(diffs) / len(diffs):+.2f}, "
                     f"from {min(diffs):+.2f} to {max(diffs):+.2f} points")
        lines.append(line)
    return "\n".join(lines)


def plot_learning_curves(ax, rows: list[dict], best: dict, table: int, weights: str) -> None:
    """Test error (%) of EBP-P (solid) and EBP-D (dashed) against epoch, one colour per column of `table`."""
    runs = list(dict.fromkeys((r["column"], r["run_id"]) for r in rows
                              if r["table"] == table and r["weights"] == weights))
    profiles = set()
    for k, (column, run_id) in enumerate(runs):
        result = best.get(run_id)
        if result is None:
            continue
        profiles.add(result["profile"])
        epochs = [h["epoch"] for h in result["history"]]
        color = f"C{k % 10}"
        ax.plot(epochs, [100 * h["test_ebp_p"] for h in result["history"]], "-", color=color, label=column)
        ax.plot(epochs, [100 * h["test_ebp_d"] for h in result["history"]], "--", color=color)
    ax.set(xlabel="epoch", ylabel="test error (%)",
           title=f"Table {table}, {weights} ({', '.join(sorted(profiles)) or 'not yet run'})")
    ax.xaxis.get_major_locator().set_params(integer=True)
    if profiles:
        from matplotlib.ticker import FormatStrFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))  # 20, 30, 40 rather than 2 × 10¹
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.legend(fontsize=7, ncol=2)
    else:
        ax.text(0.5, 0.5, "not yet run", ha="center", va="center", transform=ax.transAxes, color="grey")


# ----------------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="run_tables.py", description=__doc__.split("\nBesides the runner")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Profiles: quick = %(q)s; paper = %(p)s (the paper's protocol).\nResults: "
               "outputs/runs/<profile>/<run>/{experiment.ipynb, result.json, learning_curve.png} and, while a "
               "run is unfinished, checkpoint.npz (deleted once it finishes). Exit status 1 if any run "
               "failed, 130 if interrupted.\n" % {
                   "q": "{epochs} epochs on the first {n_train:,} training images".format(**PROFILES["quick"]),
                   "p": "{epochs} epochs on all 60,000 training images".format(**PROFILES["paper"])})
    parser.add_argument("run_ids", nargs="*", metavar="RUN_ID",
                        help="runs by id, e.g. binary-200, real-800-800-dropout, binary-block13 (see --list)")
    parser.add_argument("--all", action="store_true", help="every run of Tables 2, 3 and 4")
    parser.add_argument("--table", nargs="+", type=int, metavar="N", help="only these tables (2, 3, 4)")
    parser.add_argument("--column", nargs="+", metavar="COL",
                        help="only these columns, e.g. 200 [800,800] 800-800 144 361-100")
    parser.add_argument("--weights", nargs="+", choices=WEIGHTS, help="only binary or only real weights")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick", help="default: quick")
    parser.add_argument("--dropout-reading", choices=DROPOUT_READINGS, default="analytic",
                        help="how dropout enters EBP for Table 3 runs (default analytic: the authors' code; "
                             "recorded in each result and in the run's folder name)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="runs at once (default: the number of local cores; with --scheduler: all)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="an existing Dask scheduler (e.g. tcp://10.0.0.5:8786) to run the jobs on instead "
                             "of local processes; its workers must see this repository at the same path")
    parser.add_argument("--runs-dir", type=Path, default=RUNS_DIR, help="default: outputs/runs")
    parser.add_argument("--data-dir", type=Path,
                        help="folder holding mnist/ (sets EBP_DATA_DIR for the notebooks)")
    parser.add_argument("--progress-every", type=float, default=30.0, metavar="SECONDS",
                        help="print a progress line at least this often (default 30)")
    parser.add_argument("--list", action="store_true",
                        help="list the selected runs and their state (new, partial, running, finished, stale) and "
                             "epochs done; run nothing")
    args = parser.parse_args(argv)
    if not (args.all or args.table or args.column or args.run_ids or args.weights):
        parser.error("choose what to run: --all, --table, --column, --weights and/or run ids")
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        rows = select_rows(read_paper_tables(), args.table, args.column, args.run_ids, args.weights)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not rows:
        print("error: these filters select no table cell", file=sys.stderr)
        return 2
    if args.data_dir:
        os.environ["EBP_DATA_DIR"] = str(args.data_dir.resolve())
    jobs = make_jobs(rows, args.profile, args.dropout_reading, args.runs_dir)
    if args.list:
        for job in jobs:
            state, epochs = job_state(job)
            state = "running" if state != "finished" and is_locked(job["output_dir"]) else state
            print(f"{job['key']:<32} {state:<8} {epochs:>3}/{job['parameters']['epochs']} epochs  "
                  f"{'; '.join(job['rows'])}")
        return 0
    print(f"profile {args.profile}: {PROFILES[args.profile]['epochs']} epochs, "
          f"{PROFILES[args.profile]['n_train'] or FULL_TRAIN:,} training images; dropout reading "
          f"{args.dropout_reading}; results in {args.runs_dir / args.profile}")
    outcomes = run_batch(jobs, args.jobs, args.scheduler, args.progress_every)
    print(summary(jobs, outcomes))
    if any(o["status"] == "interrupted" for o in outcomes):
        return 130
    return 1 if any(o["status"] == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
