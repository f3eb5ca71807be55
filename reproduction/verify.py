"""Replaying a run record: retrain its first k epochs with the code that ran it, and compare.

    python -m reproduction.verify RUN_FOLDER... [--epochs k]        (make verify RUNS="RUN_FOLDER...")

A record's provenance (its git_commit, what a session says of the machine's checkout) is written by the machine
that ran it; a replay demonstrates it. For each run folder: read result.json; take the commit of the session that
trained its first k epochs; export that commit (git archive: the repository's own .git and work tree are not
touched) into a temporary folder; execute that commit's experiment notebook with papermill from the record's
parameters and seed, k epochs, its engine, into a temporary output folder, with PYTHONPATH at the export so that
the commit's code runs (checked: the kernel's ebp_lib must come from the export); compare, epoch by epoch, the four
errors (test and training, EBP-P and EBP-D) with the record's. The verdict is "exact" when all are equal, "agrees"
when each differs by at most TOLERANCE, else "disagrees". verification.json, written into the run folder, holds
the commit, k, the machine, both histories, the verdict and the SHA-256 of the result.json it replayed: a finished
record without its executed notebook is published only with such a record (folder.evidence_problems), and only
while result.json is byte for byte the file replayed.

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
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from reproduction.folder import EXECUTED_FILE, RESULT_FILE, VERIFICATION_FILE, sha256
from reproduction.records import (
    HISTORY_ERRORS,
    REPO,
    RecordError,
    cpu_flags,
    cpu_model,
    package_versions,
    parse_record,
    read_json,
    write_json,
)

VERIFICATION_FORMAT = 1
# The most the replayed errors of an epoch may differ from the recorded ones (a fraction of the images: 0.0015 is 15
# of 10,000 test images) for a replay on other kernels to agree; equal numbers are "exact".
TOLERANCE = 0.0015
# Measured (module docstring): the largest |replayed − recorded| of the four epoch-1 errors per kernel selection.
KERNEL_SPREAD = {"paper/binary-block12": {"default": 0.0, "haswell-generic-noavx512": 0.0},
                 "paper/real-361-100": {"default": 0.0, "haswell-generic-noavx512": 0.0}}
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


class VerifyError(RuntimeError):
    """A run cannot be replayed (no record, no commit, a commit this repository lacks, a replay that failed)."""


def replay_commit(record: dict, k: int) -> str:
    """The commit that trained the first `k` epochs of `record`: its sessions' (each names the commit it ran,
    from_epoch and to_epoch), which must be one commit; the record's git_commit for a record without sessions."""
    commits = {s.get("git_commit") for s in record["sessions"] if s["from_epoch"] < k}
    commits = commits or {record["git_commit"]}
    if None in commits or len(commits) != 1:
        raise VerifyError(f"its first {k} epochs were trained by {sorted(map(str, commits))}, not one known commit: "
                          f"there is no single code version to replay")
    return commits.pop()


def export_commit(commit: str, dest: Path, repo=REPO) -> Path:
    """The tree of `commit` written into `dest` (git archive | tar): the code as it was, without touching the
    repository's .git or work tree. VerifyError if the repository does not hold the commit."""
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit], capture_output=True)
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
                         env=env, capture_output=True, text=True, cwd=str(code / "notebooks"))
    origin = out.stdout.strip()
    if out.returncode != 0 or not Path(origin).resolve().is_relative_to(code.resolve()):
        raise VerifyError(f"the replay would not run the exported code: ebp_lib comes from {origin or out.stderr!r}")
    return origin


def notebook_parameter_names(notebook: Path) -> set[str]:
    """The names the tagged `parameters` cell of an experiment notebook assigns (an older commit's may lack the
    engine option)."""
    nb = read_json(notebook)
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = "".join(cell["source"])
            return {line.split("=", 1)[0].strip() for line in source.splitlines() if "=" in line.split("#")[0]}
    return set()


def replay(record: dict, k: int, workdir: Path, commit: str, env_extra: dict | None = None) -> tuple[list, str]:
    """Execute `commit`'s experiment notebook for the first `k` epochs of `record` (its parameters, seed and
    engine) in `workdir`; (the replayed history, where its code came from)."""
    code = export_commit(commit, workdir / "code")
    env = replay_environment(code, commit, env_extra)
    origin = code_origin(env, code)
    notebook, out = code / "notebooks" / "experiment.ipynb", workdir / "run"
    params = {**record["parameters"], "epochs": k, "output_dir": str(out)}
    if "engine" in notebook_parameter_names(notebook):
        params["engine"] = record["engine"]
    ran = subprocess.run([sys.executable, "-m", "papermill", str(notebook), str(workdir / EXECUTED_FILE),
                          "--cwd", str(notebook.parent), "-k", "python3", "--no-progress-bar",
                          "-y", json.dumps(params)], env=env, capture_output=True, text=True)
    try:
        history = parse_record((out / RESULT_FILE).read_bytes(), out / RESULT_FILE)["history"]
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


def verify_run(run_dir, k: int = 1, tolerance: float = TOLERANCE, env_extra: dict | None = None,
               write: bool = True) -> dict:
    """Replay the first `k` epochs of the run in `run_dir` and compare (module docstring); writes the
    verification record into the folder (unless not `write`) and returns it."""
    run_dir = Path(run_dir)
    text = (run_dir / RESULT_FILE).read_bytes()
    record = parse_record(text, run_dir / RESULT_FILE)
    if record["method"] != "ebp":
        raise VerifyError(f"{run_dir / RESULT_FILE}: a {record['method']} run; only EBP runs replay")
    if record["epochs_done"] < k:
        raise VerifyError(f"{run_dir / RESULT_FILE} holds {record['epochs_done']} epochs, fewer than the {k} asked")
    commit = replay_commit(record, k)
    with tempfile.TemporaryDirectory(prefix="ebp-verify-") as tmp:
        replayed, origin = replay(record, k, Path(tmp), commit, env_extra)
    epochs, verdict = compare(record["history"][:k], replayed, tolerance)
    verification = {"format": VERIFICATION_FORMAT, "kind": "replay", "result_sha256": sha256(text),
                    "commit": commit, "epochs": k, "engine": record["engine"], "tolerance": tolerance,
                    "verdict": verdict, "history": epochs,
                    "code_from": str(Path(origin).parent.name) + "/" + Path(origin).name,
                    "kernels": dict(env_extra or {}),
                    "machine": {"cpu_model": cpu_model(), "cpu_flags": cpu_flags(), **package_versions(
                        ("numpy", "numba", "papermill"))},
                    "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if write:
        write_json(run_dir / VERIFICATION_FILE, verification)
    return verification


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reproduction.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_FOLDER", help="run folders, each holding a result.json")
    parser.add_argument("--epochs", type=int, default=1, metavar="k", help="epochs to replay (default 1)")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    verdicts = {}
    for run in args.runs:
        try:
            v = verify_run(run, args.epochs)
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


if __name__ == "__main__":
    sys.exit(main())
