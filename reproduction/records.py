"""Records of where and with what something ran, the run records (result.json), and the one way files are written.

Every record the reproduction writes says which machine, packages and code produced it (machine_record,
git_state), and every file it writes is written whole or not at all (write_atomically): a reader, or a runner
polling a result.json, never sees half a file. The runner, the experiment notebook, the backprop baseline and
the scripts (benchmark, portability, binary inference, EBP-D gap) all use these functions.

A run's result.json, of every method (EBP runs, the backprop baseline), is a run record: one versioned format
(RECORD_FORMAT, RECORD_FIELDS), one writer (write_record), one reader (read_record), and one upgrader for older
formats (upgrade_record), and one consistency check (record_problems), which dispatches on the record's method to
what that method reads in its parameters (EXPECTED: reproduction.folder for EBP runs, reproduction.backprop and
reproduction.successors for the tuned baselines).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import io
import json
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

from ebp_checkpoint import MAX_JSON_DEPTH, json_depth

REPO = Path(__file__).resolve().parents[1]  # the repository: git_state's default and the runs' home

PACKAGES = ("numpy", "scipy", "numba", "matplotlib", "papermill", "ipykernel")  # the versions a run records


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


# The files whose state decides what a run computes: the modules and scripts, the experiment notebook and the pinned
# environment. Docs, teaching notebooks, tests and outputs/ may differ from the commit without changing a result.
RUN_CODE_PATHS = (":(glob)**/*.py", ":(exclude)tests", ":(exclude)outputs", "notebooks/experiment.ipynb",
                  "pyproject.toml", "requirements.txt")

# Set to 1 (run_tables.py --allow-dirty does) to let a run of the paper's or a longer protocol start from code that
# differs from its commit; the record's git_dirty and git_changed then say so.
ALLOW_DIRTY_VAR = "EBP_ALLOW_DIRTY"


class DirtyTreeError(RuntimeError):
    """The code to run differs from its commit, so a result could not say which code produced it."""


def code_state(allow_dirty: bool, root=REPO) -> dict:
    """git_state of the code a run executes (RUN_CODE_PATHS); refuses (DirtyTreeError, naming the changed files)
    when it differs from its commit, unless allow_dirty, which the returned state then carries."""
    state = git_state(root, RUN_CODE_PATHS)
    if state.get("git_dirty") and not allow_dirty:
        raise DirtyTreeError(f"the code differs from commit {state['git_commit']} ({', '.join(state['git_changed'])})"
                             "; commit it first, or pass --allow-dirty for a development run (recorded as such)")
    return {**state, "allowed_dirty": bool(allow_dirty and state.get("git_dirty"))}


def machine_record(packages=("numpy", "scipy", "numba"), git_paths=(".", ":(exclude)outputs")) -> dict:
    """Where and with what something ran: CPU model and cores, platform, Python and `packages` versions, the BLAS
    libraries loaded (threadpoolctl), the UTC date, and the git state of `git_paths` (git_state)."""
    from threadpoolctl import threadpool_info

    return {"cpu_model": cpu_model(), "cores": os.cpu_count(), **package_versions(packages),
            "blas": [{k: i.get(k) for k in ("internal_api", "version", "num_threads")} for i in threadpool_info()
                     if i.get("user_api") == "blas"],
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "platform": platform.platform(), **git_state(REPO, git_paths)}


# ----------------------------------------------------------------------------------------------------------
# Timings: the machine they ran on, and whether it was busy (one guard for every benchmark script)
# ----------------------------------------------------------------------------------------------------------

# The instruction-set extensions that decide which kernels run: AVX2 / AVX-512 for BLAS and numba's vectorised
# loops, AVX-512 VPOPCNTDQ for counting the bits of 8 words in one instruction (the XNOR-popcount kernels).
TIMING_CPU_FLAGS = ("popcnt", "avx2", "fma", "avx512f", "avx512bw", "avx512_vpopcntdq")
# A timing is "loaded" when the 1-minute load average exceeds this many runnable processes per core: beyond it
# other jobs hold every core and the measured code shares one with them (its speed is then not the machine's).
LOAD_PER_CORE_LIMIT = 1.0


class LoadedMachineError(SystemExit):
    """A benchmark refused to measure, or to write its record, on a loaded machine (exit status 1, message on
    stderr). A SystemExit so that a script needs no handler of its own: the guard's message is what the user sees."""


def cpu_flags(names=TIMING_CPU_FLAGS, cpuinfo="/proc/cpuinfo") -> dict | None:
    """{flag: present} for the extensions `names`, from the first `flags` line of /proc/cpuinfo; None where it
    cannot be read (not Linux)."""
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith("flags"):
                present = set(line.split(":", 1)[1].split())
                return {name: name in present for name in names}
    except OSError:
        pass
    return None


def load_average() -> list[float] | None:
    """os.getloadavg() (1, 5 and 15 minutes) as a list, None where the platform has none."""
    try:
        return list(os.getloadavg())
    except (AttributeError, OSError):
        return None


def add_allow_loaded_option(parser) -> None:
    """The --allow-loaded flag of every benchmark script (timing_record, finish_timing_record)."""
    parser.add_argument("--allow-loaded", action="store_true",
                        help=f"measure and write the record even when the 1-minute load average exceeds "
                             f"{LOAD_PER_CORE_LIMIT:g} per core; the record then says \"loaded\": true and must not "
                             f"be quoted as the machine's speed")


def _judge_load(record: dict, load, when: str, own_processes: int, allow_loaded: bool) -> None:
    """Record the load average `load` taken `when` ("start" or "end"), mark the record loaded if its 1-minute value
    exceeds the limit (plus `own_processes`, the benchmark's own busy processes, which count in it at the end), and
    refuse (LoadedMachineError) or warn loudly."""
    record[f"load_average_at_{when}"] = load
    limit = LOAD_PER_CORE_LIMIT * (record.get("cores") or 1) + own_processes
    busy = load is not None and load[0] > limit
    record["loaded"] = bool(record.get("loaded")) or busy
    if not busy:
        return
    message = (f"the 1-minute load average at the {when} was {load[0]:.2f}, above {limit:g} ({LOAD_PER_CORE_LIMIT:g} "
               f"per core on {record.get('cores')} cores" + (f", plus {own_processes} of this benchmark's own"
                                                             if own_processes else "") + ")")
    if not allow_loaded:
        raise LoadedMachineError(f"refusing to {'measure' if when == 'start' else 'write the record'}: {message}; "
                                 f"other jobs share the cores and the timings would not be this machine's. Run it "
                                 f"on an idle machine, or pass --allow-loaded to record a loaded measurement "
                                 f"(marked \"loaded\": true).")
    bar = "!" * 100
    print(f"{bar}\nWARNING: LOADED MACHINE: {message}. The record says \"loaded\": true; do not quote these "
          f"timings.\n{bar}", file=sys.stderr, flush=True)


def timing_record(packages=("numpy", "scipy", "numba"), git_paths=(".", ":(exclude)outputs"),
                  allow_loaded: bool = False, load=None) -> dict:
    """machine_record, with the CPU's flags (cpu_flags) and the load average before the timings start.

    Refuses (LoadedMachineError) when the 1-minute load average exceeds LOAD_PER_CORE_LIMIT per core, unless
    allow_loaded: then the record says "loaded": true and a loud warning goes to stderr. `load` replaces the
    measured load average (tests). Call finish_timing_record when the timings are done."""
    record = {**machine_record(packages, git_paths), "cpu_flags": cpu_flags(), "load_limit_per_core":
              LOAD_PER_CORE_LIMIT, "loaded": False}
    _judge_load(record, load_average() if load is None else list(load), "start", 0, allow_loaded)
    return record


def finish_timing_record(record: dict, allow_loaded: bool = False, own_processes: int = 1, load=None) -> bool:
    """Add the load average after the timings to a timing_record and judge it as at the start, counting the
    benchmark's `own_processes` busy processes (they raise the load average it reads); returns record["loaded"].
    Refuses (LoadedMachineError) to let a loaded measurement be written unless allow_loaded."""
    _judge_load(record, load_average() if load is None else list(load), "end", own_processes, allow_loaded)
    return record["loaded"]


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
# Run records: result.json of every kind of run, one writer (write_record), one reader (read_record)
# ----------------------------------------------------------------------------------------------------------

RECORD_FORMAT = 4  # the version of result.json that write_record writes and every reader receives
# EBP runs (reproduction.folder.EpochRecorder), the backprop baseline, and EBP's successors (reproduction.successors)
RECORD_KINDS = ("ebp", "backprop", "successor")
HISTORY_ERRORS = {"ebp": ("test_ebp_p", "test_ebp_d", "train_ebp_p", "train_ebp_d"),
                  "backprop": ("test_error", "validation_error", "train_error"),
                  "successor": ("test_error", "validation_error", "train_error")}

_NUMBER, _NONE = (int, float), type(None)
# Every field of a record, with its type, per method; a record missing one or holding another type is unreadable.
RECORD_FIELDS = {
    "ebp": {"format": int, "method": str, "parameters": dict, "protocol": str, "finished": bool,
            "epochs_done": int, "n_train_images": int, "train_error_images": int, "final": (dict, _NONE),
            "history": list, "train_seconds": _NUMBER, "wall_seconds": _NUMBER, "engine": str, "versions": dict,
            "git_commit": (str, _NONE), "git_dirty": (bool, _NONE), "sessions": list},
    "backprop": {"format": int, "method": str, "parameters": dict, "protocol": str, "protocol_description": str,
                 "finished": bool, "phase": str, "grid": dict, "epochs_done": int, "best_epoch": (int, _NONE),
                 "stopped_early": bool, "n_train_images": int, "n_validation_images": int, "final": (dict, _NONE),
                 "history": list, "train_seconds": _NUMBER, "git_commit": (str, _NONE), "git_dirty": (bool, _NONE),
                 "versions": dict, "sessions": list},
}
RECORD_FIELDS["successor"] = {**RECORD_FIELDS["backprop"], "evaluation": (dict, _NONE)}
# What every session (one start or resumption of a run) records, per method: the runner's progress reads them.
SESSION_FIELDS = {"ebp": {"from_epoch": int, "to_epoch": int, "wall_seconds": _NUMBER, "seconds_per_epoch": _NUMBER},
                  "backprop": {"to_epoch": int, "wall_seconds": _NUMBER},
                  "successor": {"to_epoch": int, "wall_seconds": _NUMBER}}


class RecordError(ValueError):
    """A result.json that cannot be read as a run record: not JSON, an unknown format, or a field missing or of
    the wrong type. The message names the file and the field."""


class NewerRecordError(RecordError):
    """A record of a format newer than this code's (RECORD_FORMAT): written by a newer version of the project. It
    is refused and left alone, never taken for a corrupt file."""


# ----------------------------------------------------------------------------------------------------------
# Reading JSON the project wrote: bounded before parsing, every failure naming the file
# ----------------------------------------------------------------------------------------------------------

# Far above any file the project writes (a 120-epoch record is ~30 kB, an executed notebook with its figure ~200 kB,
# nesting at most ~8 levels), far below what would exhaust memory or Python's recursion limit (about 1,000 levels).
MAX_JSON_BYTES = 64 * 2 ** 20


class JSONFileError(ValueError):
    """A JSON file the project wrote that cannot be read: too large, nested too deep, not UTF-8 or not JSON. The
    message names the file."""


def parse_json(data: bytes | str, where, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH):
    """The JSON text `data` (of the file `where`) parsed, once its size and nesting are known to be within
    `max_bytes` and `max_depth`; JSONFileError naming `where` if it is not (too large, too deep, not UTF-8, not
    JSON)."""
    data = data.encode() if isinstance(data, str) else data
    if len(data) > max_bytes:
        raise JSONFileError(f"{where}: {len(data):,} bytes, more than the {max_bytes:,} of any file the project "
                            f"writes; not read")
    depth = json_depth(data)
    if depth > max_depth:
        raise JSONFileError(f"{where}: nested {depth} levels deep, more than the {max_depth} of any file the "
                            f"project writes; not read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JSONFileError(f"{where}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise JSONFileError(f"{where}: not JSON ({err})") from None


def read_json(path, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH):
    """The JSON file `path` parsed (parse_json), its size checked before it is read and at most `max_bytes` + 1 bytes
    of it read; JSONFileError naming the file if it cannot be read or is not bounded JSON, FileNotFoundError if there
    is none."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:  # refused by its size, before a byte of it is read
                raise JSONFileError(f"{path}: {size:,} bytes, more than the {max_bytes:,} of any file the project "
                                    f"writes; not read")
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise JSONFileError(f"{path}: cannot be read ({err.strerror or err})") from None
    return parse_json(data, path, max_bytes, max_depth)


def _type_ok(value, kind) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:  # True is an int to Python, not to a record
        return False
    return isinstance(value, kinds)


def upgrade_record(data: dict) -> dict:
    """A record of an older format as the current one (RECORD_FORMAT); records of the current format unchanged.
    The only place that knows older formats: every reader gets the current one (read_record), and
    `python -m reproduction.results upgrade FILE...` rewrites files once (upgrade_files).

    Format 1 (EBP runs only; written before a record named its method): gains method "ebp", and parameters without
    a mask_reading gain mask_reading "absent", the only reading there was when they ran. Formats 1 and 2 (EBP
    runs): parameters without a real_update gain real_update "spec", the only update there was. Each is placed
    where the experiment's parameters have it (after `weights`, then after `mask_reading`). Formats 1 to 3 (EBP
    runs): each parameter of RENAMED_PARAMETERS takes its new name, in its place. Backprop records of formats 2 and
    3, and successor records of format 3, are those of format 4."""
    if data.get("format") not in (1, 2, 3) or data.get("method", "ebp") not in RECORD_KINDS:
        return data
    method = data.get("method", "ebp")
    data = {"format": RECORD_FORMAT, "method": method, **{k: v for k, v in data.items() if k not in ("format",
                                                                                               "method")}}
    params = data.get("parameters")
    if method == "ebp" and isinstance(params, dict):
        params = _insert_after(params, "weights", "mask_reading", "absent")
        params = _insert_after(params, "mask_reading", "real_update", "spec")
        data["parameters"] = {RENAMED_PARAMETERS.get(k, k): v for k, v in params.items()}
    return data


# The EBP parameters renamed at format 4, {earlier name: name}: "real_update" also names a binary update
# (authors-2015). Records of earlier formats are upgraded (upgrade_record); a replay by a commit before the rename
# gives its notebook the earlier name (reproduction.verify.replay_parameters).
RENAMED_PARAMETERS = {"real_update": "update"}


def _insert_after(params: dict, after: str, name: str, value) -> dict:
    """`params` with `name` = `value` placed after the key `after` (at the end without it), if it has no `name`."""
    if name in params:
        return params
    items = list(params.items())
    at = next((i + 1 for i, (k, _) in enumerate(items) if k == after), len(items))
    return dict(items[:at] + [(name, value)] + items[at:])


def check_record_fields(data, where) -> dict:
    """`data` (a parsed result.json, upgraded) if it has every field of its method's record with the right type,
    else RecordError naming `where` and the field."""
    if not isinstance(data, dict):
        raise RecordError(f"{where}: not a run record (a JSON {type(data).__name__}, not an object)")
    if _type_ok(data.get("format"), int) and data["format"] > RECORD_FORMAT:
        raise NewerRecordError(f"{where}: this record was written by a newer version of the project (record format "
                               f"{data['format']}; this code reads up to {RECORD_FORMAT}); it is left alone: update "
                               f"the code (git pull) to read it")
    if data.get("format") != RECORD_FORMAT:
        raise RecordError(f"{where}: format {data.get('format')!r} is not a run record format this code reads "
                          f"({RECORD_FORMAT}, or older ones upgrade_record knows)")
    method = data.get("method")
    if method not in RECORD_KINDS:
        raise RecordError(f"{where}: method {method!r} is not one of {', '.join(RECORD_KINDS)}")
    for name, kind in RECORD_FIELDS[method].items():
        if name not in data:
            raise RecordError(f"{where}: field {name} is missing")
        if not _type_ok(data[name], kind):
            raise RecordError(f"{where}: field {name} is a {type(data[name]).__name__} ({data[name]!r:.60})")
    digest = data.get("notebook_sha256")  # optional: the executed notebook of a finished run (runner.run_job)
    if digest is not None and not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise RecordError(f"{where}: field notebook_sha256 is not a SHA-256 digest ({digest!r:.60})")
    for i, entry in enumerate(data["history"]):
        if not isinstance(entry, dict) or not _type_ok(entry.get("epoch"), int):
            raise RecordError(f"{where}: history[{i}] is not an epoch record")
        for key in HISTORY_ERRORS[method]:
            if not _type_ok(entry.get(key), (float, int, _NONE)):
                raise RecordError(f"{where}: history[{i}].{key} is not a number ({entry.get(key)!r:.60})")
    for i, session in enumerate(data["sessions"]):
        for name, kind in SESSION_FIELDS[method].items():
            if not isinstance(session, dict) or not _type_ok(session.get(name), kind):
                raise RecordError(f"{where}: sessions[{i}].{name} is missing or not a number")
    return data


def parse_record(text: str | bytes, where) -> dict:
    """A result.json's text as a record of the current format (upgraded if older), its fields checked
    (check_record_fields); RecordError naming `where` if it is not one. Consistency between fields is
    record_problems' job."""
    try:
        data = parse_json(text, where)
    except JSONFileError as err:
        raise RecordError(str(err)) from None
    return check_record_fields(upgrade_record(data) if isinstance(data, dict) else data, where)


def read_record(path) -> dict:
    """The run record in file `path` (read_json, then as parse_record); RecordError naming the file if it cannot be
    read or is not a record, FileNotFoundError if there is none."""
    try:
        data = read_json(path)
    except JSONFileError as err:
        raise RecordError(str(err)) from None
    return check_record_fields(upgrade_record(data) if isinstance(data, dict) else data, path)


class Expected(NamedTuple):
    """What a run record's parameters give, as its method reads them (EXPECTED): the complete, valid parameters,
    the fields they determine (protocol, image counts, ...), the final errors (those of the history's
    `final_source`), the epochs a finished run trained (`planned_epochs`, or at most that if it `may_stop_early`)
    and the problems only that method looks for."""
    parameters: dict
    derived: dict
    final: dict | None
    final_source: str
    planned_epochs: int
    may_stop_early: bool
    problems: tuple = ()


# How each method reads a record's parameters, the one registry of the record checks: {method: (module, function)},
# the function (of a record) giving Expected, or the list of problems that stop it (parameters it cannot read).
# Named, not imported: this module, below them all, imports none of them until a record of theirs is checked.
EXPECTED = {"ebp": ("reproduction.folder", "ebp_expected"), "backprop": ("reproduction.backprop", "backprop_expected"),
            "successor": ("reproduction.successors", "successor_expected")}


def expected_check(method: str):
    """The function that reads `method`'s records' parameters (EXPECTED), its module imported on first use;
    RecordError if the registry names none, or a module or function that is not there."""
    module, name = EXPECTED.get(method, (None, None))
    try:
        return getattr(importlib.import_module(module), name)
    except (TypeError, ImportError, AttributeError):
        raise RecordError(f"no check of {method} records: {module}.{name} (records.EXPECTED) is not there") from None


def record_problems(data: dict) -> list[str]:
    """Whatever disagrees within one record (of the current format, check_record_fields), whatever its method:
    its parameters are not the complete, valid set its method reads in them (EXPECTED); a field they determine
    (protocol, training images, ...) says something else; the final errors are not those of the history's epoch
    they come from; epochs done, their numbering, a finished run's epochs; an error outside [0, 1]; and the method's
    own problems. Each problem names its field. Empty when the record is consistent. RecordError if the registry
    (EXPECTED) names no check of the record's method that can be imported."""
    method = data["method"]
    expected = expected_check(method)(data)
    if not isinstance(expected, Expected):
        return list(expected)
    params = data["parameters"]
    problems = [f"parameters.{k}: {params.get(k, '(missing)')!r}, normalised {v!r}"
                for k, v in expected.parameters.items() if k not in params or params[k] != v]
    problems += [f"{name}: {data[name]!r}, but its parameters give {value!r}"
                 for name, value in expected.derived.items() if data[name] != value]
    history = data["history"]
    if data["epochs_done"] != len(history):
        problems.append(f"epochs_done: {data['epochs_done']}, but the history holds {len(history)} epochs")
    numbers = [entry["epoch"] for entry in history]
    if numbers != list(range(1, len(history) + 1)):
        problems.append(f"history: epochs numbered {numbers[:5]}..., not 1..{len(history)}")
    for i, entry in enumerate(history):
        for key in HISTORY_ERRORS[method]:
            if entry[key] is not None and not 0 <= entry[key] <= 1:
                problems.append(f"history[{i}].{key}: {entry[key]!r} is not an error rate in [0, 1]")
    if data["final"] != expected.final:
        ours, theirs = data["final"] or {}, expected.final or {}
        keys = [k for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)] or ["(all)"]
        problems += [f"final.{k}: {ours.get(k)!r}, but the history's {expected.final_source} has {theirs.get(k)!r}"
                     for k in keys]
    planned = expected.planned_epochs
    if data["finished"] and (len(history) > planned if expected.may_stop_early else len(history) != planned):
        problems.append(f"finished: true after {len(history)} of its {planned} epochs")
    elif len(history) > planned:  # an unfinished record cannot have trained past its plan
        problems.append(f"epochs_done: {len(history)}, more than the {planned} its parameters plan")
    return problems + list(expected.problems)


def write_record(path, data: dict) -> None:
    """The one writer of run records: check `data` (its fields, and their consistency, record_problems) and write
    it whole (write_json). RecordError, naming the file and the field, if the record is not one: a writer's bug,
    caught before the file."""
    check_record_fields(data, path)
    found = record_problems(data)
    if found:
        raise RecordError(f"{path}: refusing to write an inconsistent record: " + "; ".join(found))
    write_json(path, data)


def upgrade_files(paths, echo=print) -> list[Path]:
    """Rewrite each result.json among `paths` that is of an older format as the current one (upgrade_record), after
    checking the upgraded record (record_problems, as write_record does); the files
    already current are left as they are. Every file is read and checked before any is written: RecordError naming
    each bad file (missing, unreadable, not a record, inconsistent once upgraded), and nothing rewritten. Returns
    the rewritten paths."""
    upgraded, bad = {}, []
    for path in map(Path, paths):
        try:
            if not path.is_file():
                bad.append(f"{path}: no such result file")
                continue
            data = read_json(path)
            if isinstance(data, dict) and data.get("format") == RECORD_FORMAT:
                continue
            record = check_record_fields(upgrade_record(data) if isinstance(data, dict) else data, path)
            found = record_problems(record)
            if found:
                bad.append(f"{path}: inconsistent after upgrading: " + "; ".join(found))
                continue
            upgraded[path] = record
        except (RecordError, JSONFileError) as err:
            bad.append(str(err))
        except OSError as err:
            bad.append(f"{path}: cannot be read ({err.strerror or err})")
    if bad:
        raise RecordError(f"{len(bad)} of {len(paths)} files cannot be upgraded, so none was rewritten:\n  "
                          + "\n  ".join(bad))
    for path, record in upgraded.items():
        write_json(path, record)
        echo(f"upgraded {path} to format {RECORD_FORMAT}")
    return list(upgraded)
