"""The README's commands as a user runs them: `make reproduce` finds the committed quick-profile runs finished and
renders the tables, or trains into another runs folder; `make lab` starts (as root too) and prints its URL;
`make demo`, `make benchmark`, `make binary-benchmark` and `make test-portability` run at a small size.

Each target is run through make, with this interpreter (PYTHON=...) and without reinstalling .venv (-o STAMP), so
a test fails when a target's recipe or the variables it reads break. The full-size `make reproduce` from scratch
is .ci/run's (into a temporary runs folder); here it trains one run.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from reproduction import folder, paper_tables, parameters

ROOT = Path(__file__).resolve().parents[1]
STAMP = ".venv/.requirements-installed"  # the Makefile's $(STAMP): never remade here (no pip install in a test)
# The variables a make running these tests passes down (its command line's PYTEST_ARGS, RUNS_DIR, ...).
MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make_command(*args: str) -> list[str]:
    """`make <args>` run with this interpreter and the installed environment taken as up to date."""
    return ["make", "--no-print-directory", "-o", STAMP, f"PYTHON={sys.executable}", *args]


def make_env(**extra: str) -> dict:
    """This process's environment without an enclosing make's variables, plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES}, **extra}


def make(*args: str, timeout: float = 900, **extra: str) -> subprocess.CompletedProcess:
    """Run `make <args>` in the repository; its exit status and output (stdout and stderr together)."""
    return subprocess.run(make_command(*args), cwd=ROOT, env=make_env(**extra), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


def check(done: subprocess.CompletedProcess) -> str:
    """The output of a make that must have succeeded (the output is the failure message otherwise)."""
    assert done.returncode == 0, f"{done.args} exited {done.returncode}:\n{done.stdout[-4000:]}"
    return done.stdout


def load_script(name):
    """A module of scripts/ (command-line entry points), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def default_jobs(runs_dir=folder.RUNS_DIR) -> list:
    """The jobs `make reproduce` runs with no options: scripts/run_tables.py --all with its defaults."""
    args = load_script("run_tables").parse_args(["--all"])
    return paper_tables.make_jobs(paper_tables.read_paper_tables(), paper_tables.Selection(
        args.profile, args.dropout_reading, args.seed, args.mask_reading, args.dataset, runs_dir=runs_dir))


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def page_text(url: str, seconds: float) -> str:
    """The page at `url`, waiting up to `seconds` for the server to listen (Jupyter prints its URL a moment before
    it accepts connections)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=seconds) as page:
                return page.read().decode()
        except urllib.error.URLError as err:
            if not isinstance(err.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# ----------------------------------------------------------------------------------------------------------
# make reproduce
# ----------------------------------------------------------------------------------------------------------

def test_the_committed_quick_runs_are_every_run_make_reproduce_selects():
    """On a fresh clone `make reproduce` trains nothing (so it leaves the tree clean): every run it selects by
    default is a finished run of the current quick profile in outputs/runs/quick/, and each learned (the
    experiment notebook's check)."""
    jobs = default_jobs()
    assert {job.profile for job in jobs} == {"quick"} and len(jobs) == 50
    states = {job.key: folder.job_state(job).state for job in jobs}
    assert [key for key, state in states.items() if state != "finished"] == [], states
    errors = {job.key: folder.read_result(job.output_dir)["final"]["test_ebp_p"] for job in jobs}
    assert max(errors.values()) < parameters.NOT_LEARNING, errors


def test_reproduce_says_why_it_selects_its_runs_and_that_one_seed_gives_no_band():
    """The 50 runs of the default selection are Tables 2-4 with sampled dropout; the 18 analytic-reading runs of the
    committed quick profile are named as a selection of their own; one seed says "no band", three seeds say nothing."""
    reproduce, args = load_script("reproduce"), load_script("run_tables").parse_args(["--all"])
    note = reproduce.selection_note(args, len(default_jobs()))
    assert note.startswith("50 runs selected") and "the 18 dropout runs in the analytic reading" in note, note
    assert "--dropout-reading analytic" in note
    assert reproduce.seeds_note(args).startswith("one seed: no band")
    assert reproduce.seeds_note(load_script("run_tables").parse_args(["--all", "--seed", "0", "1", "2"])) is None


def dying_kernel_spec(folder: Path, counter: Path, die_at: tuple[int, ...]) -> Path:
    """A Jupyter data folder (for JUPYTER_PATH) whose python3 kernel exits at once at the `die_at`-th starts
    (counted in the file `counter`, from 1), as a kernel does that dies before replying to kernel_info, and is this
    interpreter's kernel otherwise."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "start.sh").write_text(
        f'n=$(( $(cat "{counter}" 2>/dev/null || echo 0) + 1 )); echo $n > "{counter}"\n'
        f'case " {" ".join(map(str, die_at))} " in *" $n "*) exit 1;; esac\n'
        f'exec "{sys.executable}" -m ipykernel_launcher -f "$1"\n')
    (spec / "kernel.json").write_text(json.dumps({"argv": ["sh", str(spec / "start.sh"), "{connection_file}"],
                                                  "display_name": "Python 3", "language": "python"}))
    return folder


def test_reproduce_trains_and_renders_in_the_runs_folder_it_is_given(tmp_path, real_data_dir):
    """RUNS_DIR sends both the training and the tables notebook's rendering elsewhere; outputs/runs is untouched.
    Notebook kernels that die before they start (a kernel spec that exits at its 1st and 3rd-5th starts): the
    first run's kernel is started again, and says so; the second run's never starts, so it fails after three
    tries. The tables are still rendered from what finished; the command says where they are, that the quick
    profile is a smoke test, how many runs failed and what to do, and exits non-zero."""
    quick = folder.RUNS_DIR / "quick"
    before = {p: p.stat().st_mtime_ns for p in quick.rglob("*")}
    kernels = dying_kernel_spec(tmp_path / "jupyter", tmp_path / "kernel-starts", die_at=(1, 3, 4, 5))
    done = make("reproduce", f"RUNS_DIR={tmp_path / 'runs'}", "RUN_ARGS=binary-200 real-200 --jobs 1",
                JUPYTER_PATH=str(kernels))
    out, tmp_path = done.stdout, tmp_path / "runs"
    assert done.returncode != 0, out
    assert "NOTE binary-200: the notebook's kernel died before it started (Kernel died before replying to " \
           "kernel_info): started 2 times, then it started" in out, out[-3000:]
    assert "FAILED real-200: RuntimeError: Kernel died before replying to kernel_info" in out, out[-3000:]
    result = json.loads((tmp_path / "quick" / "binary-200" / folder.RESULT_FILE).read_text())
    assert result["finished"] and result["n_train_images"] == parameters.PROFILES["quick"]["n_train"], out
    assert (tmp_path / "quick" / "tables.ipynb").is_file()
    tables = (tmp_path / "quick" / "tables.md").read_text()
    assert f"profile {parameters.profile_label('quick')}" in tables
    assert "Table 2: 1 of 18 runs finished, 17 not run" in tables, tables  # binary-200 alone, read from tmp_path
    assert (tmp_path / "quick-fashion-mnist" / "tables.md").is_file()
    assert {p: p.stat().st_mtime_ns for p in quick.rglob("*")} == before
    tail = out.strip().splitlines()[-10:]
    for line in (f"tables: {tmp_path / 'quick' / 'tables.md'}", f"figure: {tmp_path / 'quick' / 'agreement.png'}",
                 f"the executed tables notebook: {tmp_path / 'quick' / 'tables.ipynb'}"):
        assert line in tail, out[-3000:]
    assert any("is a smoke test, not the paper's protocol" in line for line in tail), out[-3000:]
    assert re.search(r"1 run failed: re-run `make reproduce` to resume them\n(make: \*\*\* .*\n?)?$", out), out[-3000:]


def test_what_reproduce_writes_for_the_quick_profile_is_ignored_by_git():
    """A fresh clone's `make reproduce` leaves `git status` clean: the quick profile's rendering is git-ignored
    (the paper profile's is committed, as the README says)."""
    written = ["outputs/runs/quick/tables.md", "outputs/runs/quick/summary.md", "outputs/runs/quick/agreement.png",
               "outputs/runs/quick/authors_code.md",
               "outputs/runs/quick/tables.ipynb", "outputs/runs/quick-fashion-mnist/tables.md",
               "outputs/runs/paper/tables.ipynb"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *written], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.split() == written, f"not ignored: {sorted(set(written) - set(done.stdout.split()))}"
    committed = ["outputs/runs/paper/tables.md", "outputs/runs/paper/summary.md", "outputs/runs/paper/agreement.png"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *committed], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.split() == [], f"the README's committed results are ignored: {done.stdout}"


# ----------------------------------------------------------------------------------------------------------
# make lab
# ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("uid, allow_root", [("0", True), ("1000", False)])
def test_lab_allows_root_only_when_run_as_root(tmp_path, uid, allow_root):
    """Jupyter refuses root without --allow-root, and a normal user needs none: the flag follows `id -u`."""
    fake = tmp_path / "id"
    fake.write_text(f"#!/bin/sh\necho {uid}\n")
    fake.chmod(0o755)
    out = check(make("-n", "lab", PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}"))
    command = next(line for line in out.splitlines() if "jupyter lab" in line and "echo" not in line)
    assert ("--allow-root" in command) == allow_root, command


def test_lab_starts_and_prints_the_url_to_open(tmp_path):
    """`make lab` as this user starts JupyterLab on the notebooks and prints a URL with its token that serves."""
    port = free_port()
    proc = subprocess.Popen(make_command("lab", f"LAB_ARGS=--no-browser --port={port} --ServerApp.port_retries=0"),
                            cwd=ROOT, env=make_env(JUPYTER_RUNTIME_DIR=str(tmp_path)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines, url = [], None
    try:
        deadline = time.monotonic() + 180
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break  # the server exited
            lines.append(line)
            found = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=\w+", line)
            url = found and found.group(0)
        assert url, "no URL printed:\n" + "".join(lines[-40:])
        assert "JupyterLab" in page_text(url, seconds=60)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()


# ----------------------------------------------------------------------------------------------------------
# make demo, benchmark, binary-benchmark, test-portability, at a small size
# ----------------------------------------------------------------------------------------------------------

def test_demo_trains_one_epoch_that_learns(real_data_dir):
    out = check(make("demo"))
    found = re.search(r"epoch 1: test error EBP-P ([\d.]+)%, EBP-D ([\d.]+)%", out)
    assert found, out
    assert float(found.group(1)) < 100 * parameters.NOT_LEARNING, out


def test_benchmark_agrees_and_writes_its_record(tmp_path, real_data_dir):
    record = tmp_path / "benchmark.json"
    check(make("benchmark", f"BENCHMARK_OUT={record}",
               "BENCHMARK_ARGS=--seconds 0.05 --project-seconds 0.01 --skip-epoch --allow-loaded"))
    result = json.loads(record.read_text())
    assert result["agreement"] and all(row["ok"] for row in result["agreement"])
    assert result["cases"] and result["whole_paper"]
    assert "one_epoch" not in result  # BENCHMARK_ARGS reached the script: no full epoch was trained


def test_binary_benchmark_writes_its_record(tmp_path, real_data_dir):
    record = tmp_path / "binary_inference.json"
    check(make("binary-benchmark", f"BINARY_BENCHMARK_OUT={record}",
               "BINARY_BENCHMARK_ARGS=--quick --n-train 500 --single-images 5 --rounds 1 --allow-loaded"))
    result = json.loads(record.read_text())
    assert len(result["cases"]) == 3 and result["training_protocol"]["n_train"] == 500 and result["quick"]
    assert isinstance(result["loaded"], bool) and result["machine"]["cpu_flags"] is not None
    assert all(case["mismatches"] == case["mismatches_numba_engine"] == case["mismatches_blas_engine"] == 0
               for case in result["cases"])
    assert result["hidden_layer"]["b1000"]["packed_us_per_image"] > 0 and result["targets"]


def test_portability_runs_the_tests_it_is_given_under_every_kernel_selection(tmp_path):
    record = tmp_path / "portability.json"
    check(make("test-portability", f"PORTABILITY_OUT={record}",
               "PYTEST_ARGS=tests/test_readme.py::test_splice_replaces_only_the_block"))
    configurations = json.loads(record.read_text())["configurations"]
    assert len(configurations) == len(load_script("portability").CONFIGURATIONS)
    assert all(c["exit_status"] == 0 and c["pytest"].startswith("1 passed") for c in configurations), configurations
