"""Replaying a run record: retrain its first k epochs with the code that ran it, and compare.

    python -m reproduction.verify RUN_FOLDER... [--epochs k]        (make verify RUNS="RUN_FOLDER...")

A record's provenance (its git_commit, what a session says of the machine's checkout) is written by the machine
that ran it; a replay demonstrates it. For each run folder: read result.json (its size checked first) and check it
whole before anything runs (check_record): its parameters exactly the experiment's names with valid values, the record
consistent with them, every commit it names a full 40-hex id; take the commit of the session that trained its first
k epochs and resolve it (git rev-parse --verify, the id after --end-of-options: a commit of this repository, reachable
from main or HEAD, never a deleted branch's); export that commit (git archive, the id after --: the repository's own
.git and work tree are not touched) into a temporary folder; execute that commit's experiment notebook with papermill
from the record's parameters as that commit knew them (replay_parameters: a parameter added later, at the default its
code hard-wired, is dropped; one at another value fails the replay, since that commit cannot have trained it), k
epochs, its engine, into a temporary output folder, with PYTHONPATH at the export so that the commit's code runs
(checked: the kernel's ebp_lib must come from the export), stopped after --timeout seconds; compare, epoch by epoch,
the four errors (test and training, EBP-P and EBP-D) with the record's. The verdict is "exact" when all are equal,
"agrees" when each differs by at most TOLERANCE, else "disagrees". verification.json, written into the run folder,
holds the commit, k, the machine, both histories, the verdict and the SHA-256 of the result.json it replayed. It
vouches for those k epochs only (folder.verification_problems checks its format, kind, commit, epochs and recorded
history against the record, and judges its numbers, not its verdict): a finished record without its executed notebook
is published only with a replay of all its epochs, and only while result.json is byte for byte the file replayed.

--check runs nothing and says, per record, which commit would replay it and which parameters it drops, or exactly
why it cannot be replayed; --sessions replays the first epoch of each stretch of a run (each entry of its sessions)
with the commit that trained it; --today retrains the first k epochs with this checkout's code (drift:
tests/test_drift.py).

The tolerance. The fast engine is float32, compiled by numba with fastmath, over BLAS: another CPU (AMD EPYC
against Intel Xeon AVX-512) runs other kernels and may round sums differently, and EBP's decisions (the sign of a
mean field) can amplify a rounding into a different weight. Measured on an Intel Xeon (AVX-512), one epoch at the
paper's protocol (60,000 images, batch 10, seed 0) replayed from commit 8e4c198 under the default kernels and under
OPENBLAS_CORETYPE=Haswell NUMBA_CPU_NAME=generic NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR":
paper/binary-block12 and paper/real-361-100 gave the recorded four errors exactly under both (KERNEL_SPREAD: 0).
No AMD machine was at hand, so TOLERANCE (15 of 10,000 images per error) is a stated bound, not a measured spread:
about the binomial standard error of a 4 % test error (0.2 points), far below what an edit that matters moves.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from reproduction.folder import (
    EXECUTED_FILE,
    REPLAY_TOLERANCE,
    RESULT_FILE,
    VERIFICATION_FILE,
    VERIFICATION_FORMAT,
    VERIFICATION_KIND,
    differences,
    first_epochs_commits,
    sha256,
)
from reproduction.parameters import DEFAULT_PARAMETERS, ParameterError, validate_engine, validate_parameters
from reproduction.records import (
    HISTORY_ERRORS,
    MAX_JSON_BYTES,
    RENAMED_PARAMETERS,
    REPO,
    RecordError,
    cpu_flags,
    cpu_model,
    git_state,
    package_versions,
    parse_json,
    parse_record,
    read_json,
    read_record,
    record_problems,
    write_json,
)

NOTEBOOK = "notebooks/experiment.ipynb"  # the experiment, relative to a commit's tree
# The most the replayed errors of an epoch may differ from the recorded ones (a fraction of the images: 0.0015 is 15
# of 10,000 test images) for a replay on other kernels to agree; equal numbers are "exact".
TOLERANCE = REPLAY_TOLERANCE
# Measured (module docstring): the largest |replayed − recorded| of the four epoch-1 errors per kernel selection.
KERNEL_SPREAD = {"paper/binary-block12": {"default": 0.0, "haswell-generic-noavx512": 0.0},
                 "paper/real-361-100": {"default": 0.0, "haswell-generic-noavx512": 0.0}}
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


class VerifyError(RuntimeError):
    """A run cannot be replayed (no record, no commit, a commit this repository lacks, a replay that failed)."""


# A commit is named by its full SHA-1: anything else in a record (an abbreviation, a branch, '--output=FILE') could
# mean another object, or an option to git.
COMMIT_ID = re.compile(r"[0-9a-f]{40}")
# The branch every replayed commit must be an ancestor of, or else of the checked-out HEAD (the code running the
# replay, e.g. a branch about to be merged): a commit on a deleted or foreign branch ran code nobody merged.
MAIN_BRANCH = "main"
# How long a replay may run before it is stopped (a cell that never returns must not hang the command): generous for
# the slowest paper-protocol epoch measured (a [784,800,800,10] net with sampled dropout, about 25 minutes on one
# core), plus the kernel's start.
SECONDS_PER_EPOCH, START_SECONDS = 3600, 600


def _git(repo, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)


def main_refs(repo=REPO) -> list[str]:
    """The refs a replayed commit must be reachable from (one of): MAIN_BRANCH where the repository has it, and HEAD."""
    found = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"refs/heads/{MAIN_BRANCH}")
    return ([MAIN_BRANCH] if found.returncode == 0 else []) + ["HEAD"]


def check_commit_id(commit, where: str) -> str:
    """`commit` if it is a full commit id (COMMIT_ID), else VerifyError naming `where`."""
    if not isinstance(commit, str) or not COMMIT_ID.fullmatch(commit):
        raise VerifyError(f"{where} is {commit!r:.80}, not a commit id (40 lowercase hex digits): nothing is "
                          f"replayed from it")
    return commit


def resolve_commit(commit, repo=REPO, where: str = "the commit") -> str:
    """`commit` once it is known to be a full commit id (check_commit_id) that names a commit object of `repo`
    (git rev-parse --verify, the id passed after --end-of-options) reachable from its main branch or its HEAD
    (main_refs: git merge-base --is-ancestor, after --); VerifyError saying which test failed and how to fix it."""
    commit = check_commit_id(commit, where)
    found = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{commit}^{{commit}}")
    if found.returncode != 0 or found.stdout.strip() != commit:
        raise VerifyError(f"{where} {commit} is not a commit of the repository at {repo}; fetch it first")
    refs = main_refs(repo)
    if not any(_git(repo, "merge-base", "--is-ancestor", "--", commit, ref).returncode == 0 for ref in refs):
        raise VerifyError(f"{where} {commit} is not an ancestor of {' or '.join(refs)}: its code was never merged (a "
                          f"deleted or foreign branch), so a replay would run code nobody reviewed")
    return commit


def replay_commit(record: dict, k: int) -> str:
    """The commit that trained the first `k` epochs of `record`: its sessions' (each names the commit it ran,
    from_epoch and to_epoch), which must be one commit; the record's git_commit for a record without sessions."""
    commits = first_epochs_commits(record, k)
    if None in commits or len(commits) != 1:
        raise VerifyError(f"its first {k} epochs were trained by {sorted(map(str, commits))}, not one known commit: "
                          f"there is no single code version to replay")
    return commits.pop()


def check_record(record: dict, k: int, where) -> None:
    """Refuse (VerifyError naming `where` and the field), before anything is exported or executed, a record that is
    not a consistent EBP record of at least `k` epochs: its parameters exactly the known names
    (parameters.DEFAULT_PARAMETERS) with valid values (validate_parameters), the record consistent with them
    (records.record_problems), its engine a known one, every commit it names a full commit id."""
    if record["method"] != "ebp":
        raise VerifyError(f"{where}: a {record['method']} run; only EBP runs replay")
    params = record["parameters"]
    unknown = sorted(set(params) - set(DEFAULT_PARAMETERS))
    if unknown:
        raise VerifyError(f"{where}: parameters {', '.join(repr(n)[:60] for n in unknown[:5])} are not experiment "
                          f"parameters (known: {', '.join(DEFAULT_PARAMETERS)}); nothing is replayed from it")
    try:
        valid = validate_parameters(params)
        validate_engine(record["engine"])
    except ParameterError as err:
        raise VerifyError(f"{where}: {err}") from None
    if valid != params:
        raise VerifyError(f"{where}: its parameters are not in normal form ({differences(params, valid)})")
    found = record_problems(record)
    if found:
        raise VerifyError(f"{where}: inconsistent record: " + "; ".join(found[:3]))
    if record["epochs_done"] < k:
        raise VerifyError(f"{where} holds {record['epochs_done']} epochs, fewer than the {k} asked")
    for i, session in enumerate(record["sessions"]):
        if session.get("git_commit") is not None:
            check_commit_id(session["git_commit"], f"{where}: sessions[{i}].git_commit")
    if record["git_commit"] is not None:
        check_commit_id(record["git_commit"], f"{where}: git_commit")


def export_commit(commit: str, dest: Path, repo=REPO) -> Path:
    """The tree of `commit` (a full id, resolve_commit) written into `dest` (git archive | tar): the code as it was,
    without touching the repository's .git or work tree. VerifyError if the repository cannot export it."""
    check_commit_id(commit, "the commit to export")
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", "--", commit], capture_output=True)
    if archive.returncode != 0:
        raise VerifyError(f"the repository at {repo} cannot export commit {commit} "
                          f"({archive.stderr.decode(errors='replace').strip()}); fetch it first")
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def replay_environment(code: Path, commit: str, extra: dict | None = None) -> dict:
    """The environment of the replay's processes: the commit's code first on PYTHONPATH (the shared environment
    may hold an editable install of another checkout), one thread per BLAS and numba (as the runner runs a job),
    the commit named for the record ($EBP_GIT_COMMIT: the export is no git checkout), and `extra`."""
    env = {**os.environ, "PYTHONPATH": str(code), "EBP_GIT_COMMIT": commit,
           **{var: "1" for var in THREAD_VARS}, **(extra or {})}
    return env


def code_origin(env: dict, code: Path) -> str:
    """Where a Python of `env` imports ebp_lib from; VerifyError unless inside `code` (the export)."""
    out = subprocess.run([sys.executable, "-c", "import ebp_lib, reproduction; print(ebp_lib.__file__)"],
                         env=env, capture_output=True, text=True, cwd=str(code / "notebooks"), timeout=START_SECONDS)
    origin = out.stdout.strip()
    if out.returncode != 0 or not Path(origin).resolve().is_relative_to(code.resolve()):
        raise VerifyError(f"the replay would not run the exported code: ebp_lib comes from {origin or out.stderr!r}")
    return origin


def parameter_names(source: str) -> set[str]:
    """The names the source of a `parameters` cell assigns at its top level (`name = value` lines)."""
    names = set()
    for line in source.splitlines():
        code = line.split("#")[0]
        if "=" in code and not line[:1].isspace():
            name = code.split("=", 1)[0].strip()
            if name.isidentifier():
                names.add(name)
    return names


def notebook_parameter_names(notebook) -> set[str]:
    """The names the tagged `parameters` cell of an experiment notebook (a path, or its parsed JSON) assigns (an
    older commit's may lack the engine option, the mask reading or the update)."""
    nb = read_json(notebook) if isinstance(notebook, (str, Path)) else notebook
    for cell in nb.get("cells", []) if isinstance(nb, dict) else []:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = cell["source"]
            return parameter_names("".join(source) if isinstance(source, list) else source)
    return set()


@functools.lru_cache(maxsize=256)
def committed_parameter_names(commit: str, repo=REPO) -> frozenset[str]:
    """notebook_parameter_names of `commit`'s experiment notebook, read from git without exporting the tree (a
    commit's tree never changes: kept for the next record of the same commit)."""
    shown = subprocess.run(["git", "-C", str(repo), "show", f"{check_commit_id(commit, 'the commit')}:{NOTEBOOK}"],
                           capture_output=True, timeout=60)
    if shown.returncode != 0:
        raise VerifyError(f"commit {commit} has no {NOTEBOOK}: there is no experiment to replay")
    return frozenset(notebook_parameter_names(parse_json(shown.stdout, f"{commit}:{NOTEBOOK}")))


def replay_parameters(record: dict, known: set[str], k: int, output_dir: str) -> tuple[dict, list[str]]:
    """The papermill parameters of a replay of `record`'s first `k` epochs by a commit whose parameters cell assigns
    `known`: each of the record's parameters that commit knew, under the name it knew (a parameter renamed since,
    records.RENAMED_PARAMETERS, under its earlier name; the rest, at today's default, are dropped: a parameter was
    added with the default that its earlier code hard-wired, as records.upgrade_record says of the mask reading and
    the update), the epochs, the output folder and the engine if it knew one; and the names dropped. VerifyError
    for a parameter it did not know whose value is not the default: that commit cannot have trained it, so the
    record is not what it ran."""
    earlier = {name: old for old, name in RENAMED_PARAMETERS.items()}
    params, dropped = {}, []
    for name, value in record["parameters"].items():
        if name in ("epochs", "output_dir"):
            continue
        if name in known:
            params[name] = value
        elif earlier.get(name) in known:
            params[earlier[name]] = value
        elif value == DEFAULT_PARAMETERS[name]:
            dropped.append(name)
        else:
            raise VerifyError(f"the recorded commit's experiment notebook has no parameter {name!r}, so it cannot "
                              f"have trained {name}={value!r}: the record claims a setting its code did not have")
    missing = {"epochs", "output_dir"} - known
    if missing:
        raise VerifyError(f"the recorded commit's experiment notebook assigns no {', '.join(sorted(missing))}")
    params.update(epochs=k, output_dir=output_dir)
    if "engine" in known:
        params["engine"] = record["engine"]
    return params, dropped


def run_bounded(command: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`command` run in a session of its own, its output captured; the whole session (papermill and its kernel)
    killed and VerifyError raised if it runs past `timeout` seconds."""
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise VerifyError(f"the replay ran past its {timeout:g} s limit and was stopped (raise it with "
                              f"--timeout)") from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def replay(record: dict, k: int, workdir: Path, commit: str, env_extra: dict | None = None,
           timeout: float | None = None) -> tuple[list, str]:
    """Execute `commit`'s experiment notebook for the first `k` epochs of `record` (its parameters, seed and
    engine, as that commit knew them: replay_parameters) in `workdir`, for at most `timeout` seconds (default:
    SECONDS_PER_EPOCH per epoch and START_SECONDS); (the replayed history, where its code came from)."""
    code = export_commit(commit, workdir / "code")
    env = replay_environment(code, commit, env_extra)
    origin = code_origin(env, code)
    notebook, out = code / NOTEBOOK, workdir / "run"
    params, _ = replay_parameters(record, notebook_parameter_names(notebook), k, str(out))
    ran = run_bounded([sys.executable, "-m", "papermill", str(notebook), str(workdir / EXECUTED_FILE),
                       "--cwd", str(notebook.parent), "-k", "python3", "--no-progress-bar",
                       "-y", json.dumps(params)], env, timeout or SECONDS_PER_EPOCH * k + START_SECONDS)
    try:
        history = read_record(out / RESULT_FILE)["history"]
    except (OSError, RecordError) as err:
        raise VerifyError(f"the replay wrote no record ({err}); papermill said: {ran.stderr.strip()[-600:]}") from None
    if len(history) < k:
        raise VerifyError(f"the replay trained {len(history)} of {k} epochs; papermill said: "
                          f"{ran.stderr.strip()[-600:]}")
    return history[:k], origin


def compare(recorded: list[dict], replayed: list[dict], tolerance: float = TOLERANCE) -> tuple[list[dict], str]:
    """Epoch by epoch, the four errors of the record and of the replay, with their largest difference; and the
    verdict: 'exact' (all equal), 'agrees' (each within `tolerance`) or 'disagrees'."""
    epochs, verdict = [], "exact"
    for ours, theirs in zip(recorded, replayed):
        keys = HISTORY_ERRORS["ebp"]
        diff = max(abs(ours[key] - theirs[key]) for key in keys)
        epochs.append({"epoch": ours["epoch"], "recorded": {key: ours[key] for key in keys},
                       "replayed": {key: theirs[key] for key in keys}, "largest_difference": round(diff, 6)})
        if diff > tolerance + 1e-12:
            verdict = "disagrees"
        elif diff > 0 and verdict == "exact":
            verdict = "agrees"
    return epochs, verdict


def read_record_bounded(path) -> tuple[bytes, dict]:
    """(bytes, record) of the result.json `path`, its size checked before a byte is read (records.MAX_JSON_BYTES)."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise RecordError(f"{path}: {size:,} bytes, more than the {MAX_JSON_BYTES:,} of any record; not read")
    text = path.read_bytes()
    return text, parse_record(text, path)


def plan(run_dir, k: int = 1, repo=REPO) -> dict:
    """What a replay of the first `k` epochs of the run in `run_dir` would run, found without executing anything:
    the record checked (check_record), its commit resolved (resolve_commit), the parameters that commit's notebook
    is given and those dropped (replay_parameters). VerifyError (or RecordError, OSError) saying exactly why the
    record cannot be replayed."""
    path = Path(run_dir) / RESULT_FILE
    text, record = read_record_bounded(path)
    check_record(record, k, path)
    commit = resolve_commit(replay_commit(record, k), repo, f"{path}: the commit of its first {k} epochs")
    params, dropped = replay_parameters(record, committed_parameter_names(commit, repo), k, "<replay folder>")
    return {"record": record, "text": text, "commit": commit, "parameters": params, "dropped": dropped}


def verify_run(run_dir, k: int = 1, tolerance: float = TOLERANCE, env_extra: dict | None = None,
               write: bool = True, timeout: float | None = None, repo=REPO) -> dict:
    """Replay the first `k` epochs of the run in `run_dir` and compare (module docstring); writes the
    verification record into the folder (unless not `write`) and returns it. Nothing runs before the record and
    its commit are checked (plan)."""
    run_dir = Path(run_dir)
    planned = plan(run_dir, k, repo)
    record, commit = planned["record"], planned["commit"]
    with tempfile.TemporaryDirectory(prefix="ebp-verify-") as tmp:
        replayed, origin = replay(record, k, Path(tmp), commit, env_extra, timeout)
    epochs, verdict = compare(record["history"][:k], replayed, tolerance)
    verification = {"format": VERIFICATION_FORMAT, "kind": VERIFICATION_KIND,
                    "result_sha256": sha256(planned["text"]), "commit": commit, "epochs": k,
                    "engine": record["engine"], "tolerance": tolerance, "verdict": verdict, "history": epochs,
                    "parameters_dropped": planned["dropped"],
                    "code_from": str(Path(origin).parent.name) + "/" + Path(origin).name,
                    "kernels": dict(env_extra or {}),
                    "machine": {"cpu_model": cpu_model(), "cpu_flags": cpu_flags(), **package_versions(
                        ("numpy", "numba", "papermill"))},
                    "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if write:
        write_json(run_dir / VERIFICATION_FILE, verification)
    return verification


def verify_sessions(run_dir, tolerance: float = TOLERANCE, timeout: float | None = None, repo=REPO) -> list[dict]:
    """The first epoch of every stretch of a run (each entry of its sessions: a start or a resumption at epoch f)
    replayed by the commit that trained it: epochs 1..f+1 retrained from the start with that commit's code (no
    checkpoint of epoch f is kept) and compared. [{session, from_epoch, commit, verdict or reason}]; writes
    nothing (verification.json vouches for a record's first epochs only, verify_run)."""
    run_dir = Path(run_dir)
    path = run_dir / RESULT_FILE
    _, record = read_record_bounded(path)
    check_record(record, 1, path)
    out = []
    for i, session in enumerate(record["sessions"]):
        f = session["from_epoch"]
        entry = {"session": i, "from_epoch": f, "commit": session.get("git_commit")}
        try:
            if f >= record["epochs_done"]:
                raise VerifyError(f"it trained no epoch (from epoch {f} of {record['epochs_done']})")
            commit = resolve_commit(session.get("git_commit"), repo, f"sessions[{i}].git_commit")
            with tempfile.TemporaryDirectory(prefix="ebp-verify-") as tmp:
                replayed, _ = replay(record, f + 1, Path(tmp), commit, None, timeout)
            epochs, entry["verdict"] = compare(record["history"][:f + 1], replayed, tolerance)
            entry["largest_difference"] = max(e["largest_difference"] for e in epochs)
        except VerifyError as err:
            entry["verdict"], entry["reason"] = "failed", str(err)
        out.append(entry)
    return out


def train_today(params: dict, engine: str, k: int) -> list[dict]:
    """The first `k` epochs of an experiment of `params` trained by this checkout's code, in this process, as the
    experiment notebook trains it (RunConfig, its data and network, ebp_train.fit): what a record of today's code
    would hold. Parameters pass through RunConfig.of, never into code."""
    import ebp_train
    from reproduction.parameters import RunConfig

    config = RunConfig.of({**params, "epochs": k, "output_dir": None})
    _, history = ebp_train.fit(config.network(), config.load_data(), k, config.batch_size, config.seed,
                               engine=validate_engine(engine), run_config=config.checkpoint_config())
    return history[:k]


def verify_today(run_dir, k: int = 1, tolerance: float = TOLERANCE) -> tuple[list[dict], str]:
    """The first `k` epochs of the record in `run_dir` (checked whole, check_record) retrained by today's code
    (train_today) and compared (compare): whether the code has drifted from what trained it. Writes nothing."""
    path = Path(run_dir) / RESULT_FILE
    _, record = read_record_bounded(path)
    check_record(record, k, path)
    return compare(record["history"][:k], train_today(record["parameters"], record["engine"], k), tolerance)


# The training images of a drift fixture (tests/test_drift.py): few enough that today's code trains one epoch of every
# variant in seconds.
FIXTURE_IMAGES = 500


def fixture_entry(run_dir, n_train: int = FIXTURE_IMAGES) -> dict:
    """A drift fixture of the record in `run_dir`, anchored to the record: its own first epoch (all its training
    images) retrained by today's code must equal the recorded one exactly (verify_today; VerifyError if not), and
    then its configuration on its first `n_train` training images is trained one epoch by the same code and the four
    errors kept. tests/test_drift.py trains the small one again and requires the same four numbers: a change of the
    code that moves any of them fails there in seconds, where the anchor takes a full epoch."""
    epochs, verdict = verify_today(run_dir, 1)
    if verdict != "exact":
        raise VerifyError(f"{run_dir}: today's code does not replay its first epoch exactly ({verdict}, largest "
                          f"difference {epochs[0]['largest_difference']}): no fixture from it")
    _, record = read_record_bounded(Path(run_dir) / RESULT_FILE)
    params = {k: v for k, v in record["parameters"].items() if k not in ("epochs", "output_dir")}
    small = train_today({**params, "n_train": n_train}, record["engine"], 1)[0]
    return {"record": "/".join(Path(run_dir).resolve().parts[-2:]), "record_commit": replay_commit(record, 1),
            "anchored_by": git_state()["git_commit"], "engine": record["engine"], "epoch_1_of_record":
            {key: record["history"][0][key] for key in HISTORY_ERRORS["ebp"]},
            "parameters": {**params, "n_train": n_train},
            "epoch_1": {key: small[key] for key in HISTORY_ERRORS["ebp"]}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reproduction.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_FOLDER", help="run folders, each holding a result.json")
    parser.add_argument("--epochs", type=int, default=1, metavar="k", help="epochs to replay (default 1)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help=f"stop a replay after this long (default {SECONDS_PER_EPOCH} s per epoch plus "
                             f"{START_SECONDS} s)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="run nothing: say for each record whether it can be replayed (its commit, the parameters "
                           "that commit is given and those dropped) or exactly why not")
    mode.add_argument("--today", action="store_true",
                      help="retrain the first k epochs with this checkout's code (in this process) instead of the "
                           "recorded commit's, and compare: has the code drifted? Writes nothing")
    mode.add_argument("--sessions", action="store_true",
                      help="replay the first epoch of each stretch of the run (each entry of its sessions) with the "
                           "commit that trained it; writes no verification.json")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    if args.timeout is not None and not args.timeout > 0:
        parser.error("--timeout must be a positive number of seconds")
    if args.check:
        return check_command(args.runs, args.epochs)
    if args.sessions:
        return sessions_command(args.runs, args.timeout)
    if args.today:
        return today_command(args.runs, args.epochs)
    verdicts = {}
    for run in args.runs:
        try:
            v = verify_run(run, args.epochs, timeout=args.timeout)
            worst = max(e["largest_difference"] for e in v["history"])
            print(f"{run}: {v['verdict']} (commit {v['commit'][:9]}, {args.epochs} epoch(s), largest difference "
                  f"{worst:.4f}, tolerance {v['tolerance']}); wrote {Path(run) / VERIFICATION_FILE}", flush=True)
            verdicts[run] = v["verdict"]
        except (OSError, RecordError, VerifyError, subprocess.SubprocessError) as err:
            print(f"{run}: not replayed: {err}", flush=True)
            verdicts[run] = "failed"
    agreed = sum(v in ("exact", "agrees") for v in verdicts.values())
    print(f"{agreed} of {len(verdicts)} records agreed with their replay "
          f"({sum(v == 'exact' for v in verdicts.values())} exactly); "
          f"{sum(v == 'disagrees' for v in verdicts.values())} disagreed, "
          f"{sum(v == 'failed' for v in verdicts.values())} could not be replayed")
    return 0 if agreed == len(verdicts) else 1


def check_command(runs, k: int) -> int:
    """--check: plan each run; one line each, and a count; 0 if every record can be replayed."""
    reasons = {}
    for run in runs:
        try:
            planned = plan(run, k)
            dropped = f", drops {', '.join(planned['dropped'])} (at their defaults)" if planned["dropped"] else ""
            print(f"{run}: replayable by commit {planned['commit'][:9]}{dropped}", flush=True)
        except (OSError, RecordError, VerifyError, subprocess.SubprocessError) as err:
            reasons[run] = str(err)
            print(f"{run}: not replayable: {err}", flush=True)
    print(f"{len(runs) - len(reasons)} of {len(runs)} records can be replayed; {len(reasons)} cannot (reasons above)")
    return 0 if not reasons else 1


def today_command(runs, k: int) -> int:
    """--today: verify_today of each run, one line each; 0 if every record agreed with today's code."""
    bad = 0
    for run in runs:
        try:
            epochs, verdict = verify_today(run, k)
            worst = max(e["largest_difference"] for e in epochs)
            print(f"{run}: {verdict} with today's code ({k} epoch(s), largest difference {worst:.4f})", flush=True)
        except (OSError, RecordError, VerifyError, ParameterError) as err:
            verdict = "failed"
            print(f"{run}: not replayed: {err}", flush=True)
        bad += verdict not in ("exact", "agrees")
    return 0 if not bad else 1


def sessions_command(runs, timeout) -> int:
    """--sessions: verify_sessions of each run, one line per stretch; 0 if every stretch agreed."""
    bad = 0
    for run in runs:
        try:
            entries = verify_sessions(run, timeout=timeout)
        except (OSError, RecordError, VerifyError) as err:
            print(f"{run}: not replayed: {err}", flush=True)
            bad += 1
            continue
        for e in entries:
            said = (f"{e['verdict']} (largest difference {e['largest_difference']:.4f})" if "reason" not in e
                    else f"not replayed: {e['reason']}")
            print(f"{run}: stretch from epoch {e['from_epoch']} (commit {str(e['commit'])[:9]}): {said}", flush=True)
            bad += e["verdict"] not in ("exact", "agrees")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
