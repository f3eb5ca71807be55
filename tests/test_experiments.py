"""The experiment infrastructure (ebp_experiments, scripts/run_tables.py): parameter validation, the paper's
tables as data, the batch runner's row selection and seeds, skipping finished runs, resuming a run killed mid-way
(bit-identical to an uninterrupted run), failure reports, and the findings of notebooks/tables.ipynb.

Validation, selection and findings run in-process without notebooks. The runner tests execute
notebooks/experiment.ipynb through papermill exactly as scripts/run_tables.py does, on a tiny configuration
([784, 200, 10], 300 training images), and need the real MNIST files ($EBP_DATA_DIR). The runner's handling of
faults (corrupt checkpoints, full disks, edited results, ...) is tested in tests/test_runner_faults.py.
"""
from __future__ import annotations

import importlib.util
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ebp_experiments as ex
import ebp_lib

ROOT = Path(__file__).resolve().parents[1]


def load_script(name):
    """A module of scripts/ (command-line entry points), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cli = load_script("run_tables")
TINY = {"name": "tiny", "epochs": 3, "n_train": 300, "batch_size": 10}
# The kill test's run must outlive the ~2 s an orphaned worker and kernel may keep training after the runner is
# killed (each polls its parent once a second); a tiny epoch takes a fraction of a second on an idle machine.
KILL_EPOCHS = 30
RECORD_KEYS = ("epoch", "test_ebp_p", "test_ebp_d", "train_ebp_p", "train_ebp_d")  # all but timings


# ----------------------------------------------------------------------------------------------------------
# Parameter validation
# ----------------------------------------------------------------------------------------------------------

def test_defaults_are_valid_and_cheap():
    p = ex.validate_parameters({})
    assert p == {**ex.DEFAULT_PARAMETERS}
    assert p["n_train"] <= 2000 and p["epochs"] <= 2 and ex.protocol_label(p) == "shortened"


@pytest.mark.parametrize("name, value, message", [
    ("dataset", "cifar10", "choose one of mnist, fashion-mnist"),
    ("architecture", "800x800", "unknown architecture"),
    ("architecture", "block30", "block size 30"),
    ("architecture", "0-10", "neither a positive layer size"),
    ("architecture", 3.5, "give a name such as"),
    ("weights", "ternary", "choose one of binary, real"),
    ("dropout", "bernoulli", "choose None"),
    ("keep", 0.0, "in (0, 1]"),
    ("keep", 1.5, "in (0, 1]"),
    ("epochs", 0, "integer >= 1"),
    ("epochs", 2.0, "integer >= 1"),
    ("batch_size", True, "integer >= 1"),
    ("seed", -1, "integer >= 0"),
    ("n_train", 0, "1..60000"),
    ("n_train", 70000, "1..60000"),
    ("preprocessing", "zca", "choose one of pixel, global, unit"),
    ("std_floor", -1.0, ">= 0"),
    ("init_scale", 0, "positive"),
    ("init_scale", float("nan"), "positive"),
    ("output_dir", 5, "a path"),
])
def test_bad_parameter_is_named_with_what_is_allowed(name, value, message):
    with pytest.raises(ex.ParameterError) as info:
        ex.validate_parameters({name: value})
    text = str(info.value)
    assert f"{name}={value!r}" in text and message in text, text


def test_every_problem_is_reported_at_once_and_typos_are_errors():
    with pytest.raises(ex.ParameterError) as info:
        ex.validate_parameters({"epochs": 0, "weights": "ternary", "epoch": 5})
    text = str(info.value)
    assert "epochs=0" in text and "weights='ternary'" in text and "epoch: unknown parameter" in text


def test_normalisation_and_protocol_label():
    p = ex.validate_parameters({"architecture": 800, "dropout": "None", "n_train": None, "epochs": 120})
    assert p["architecture"] == "800" and p["dropout"] is None and ex.protocol_label(p) == "paper"
    assert ex.protocol_label({**p, "n_train": 60000}) == "paper"
    assert ex.protocol_label({**p, "epochs": 119}) == "shortened"
    assert ex.protocol_label({**p, "n_train": 59999}) == "shortened"


# ----------------------------------------------------------------------------------------------------------
# The paper's tables as data
# ----------------------------------------------------------------------------------------------------------

def test_paper_tables_are_complete_and_share_runs():
    rows = ex.read_paper_tables()
    assert [sum(r["table"] == t for r in rows) for t in (2, 3, 4)] == [36, 36, 28]
    assert len({(r["table"], r["row"], r["column"]) for r in rows}) == len(rows)
    by_run = {}
    for r in rows:
        by_run.setdefault(r["run_id"], []).append(r)
    assert len(by_run) == 50
    for run_id, pair in by_run.items():  # EBP-P and EBP-D of one weight type and column: one configuration
        assert sorted(r["row"][-1] for r in pair) == ["D", "P"], run_id
        assert len({(r["architecture"], r["weights"], r["dropout"], r["table"]) for r in pair}) == 1, run_id
        ex.validate_parameters({"architecture": pair[0]["architecture"], "weights": pair[0]["weights"]})
    cell = {(r["table"], r["row"], r["column"]): r for r in rows}
    assert cell[(2, "B-EBP-D", "[800,800]")]["paper_error"] == 27.06
    assert cell[(3, "R-EBP-P", "[800,800]")]["paper_error"] == 1.66
    assert cell[(4, "B-EBP-P", "256")]["architecture"] == "block13"  # the header's "266" is a misprint
    assert cell[(4, "R-EBP-D", "[361,100]")]["paper_error"] == 2.02


def test_paper_tables_match_the_spec():
    """Every number equals EBP_SPEC.md's (when the shared folder beside the repository is present)."""
    spec = ROOT.parent / "shared" / "EBP_SPEC.md"
    if not spec.exists():
        pytest.skip(f"{spec} not present")
    text = spec.read_text().split("## The paper's results")[1]
    rows = ex.read_paper_tables()
    for table in (2, 3, 4):
        block = text.split(f"Table {table},")[1].split("Table")[0]
        for label, numbers in re.findall(r"- ([BR]-EBP-[PD]) ([\d. |]+)", block):
            expected = [float(v) for v in numbers.replace("|", " ").split()]
            ours = [r["paper_error"] for r in rows if r["table"] == table and r["row"] == label]
            assert ours == expected, (table, label)


# ----------------------------------------------------------------------------------------------------------
# Selecting rows and making jobs
# ----------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rows():
    return ex.read_paper_tables()


def test_select_by_table_column_weights_and_run_id(rows):
    assert len(ex.select_rows(rows, tables=[2])) == 36
    assert len(ex.select_rows(rows, tables=[2, 4])) == 64
    assert {r["table"] for r in ex.select_rows(rows, columns=["200"])} == {2, 3}
    two = ex.select_rows(rows, tables=[3], columns=["[800,800]"])
    assert two == ex.select_rows(rows, tables=[3], columns=["800-800"]) and len(two) == 4
    assert len(ex.select_rows(rows, tables=[4], weights=["real"])) == 14
    by_id = ex.select_rows(rows, run_ids=["binary-200", "real-361-100", "real-800-dropout-sampled"])
    assert sorted({r["run_id"] for r in by_id}) == ["binary-200", "real-361-100", "real-800-dropout"]
    assert ex.select_rows(rows) == rows


@pytest.mark.parametrize("kwargs, message", [
    ({"tables": [5]}, "unknown table 5"), ({"columns": ["300"]}, "unknown column 300"),
    ({"run_ids": ["binary-201"]}, "unknown run id binary-201"), ({"weights": ["ternary"]}, "unknown weight type"),
])
def test_unknown_selection_is_an_error(rows, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ex.select_rows(rows, **kwargs)


def test_one_job_per_run_with_the_profile_and_the_dropout_reading(rows, tmp_path):
    jobs = ex.make_jobs(ex.select_rows(rows, tables=[2, 3], columns=["400"]), "paper", "sampled", tmp_path)
    assert [j["key"] for j in jobs] == ["binary-400", "real-400", "binary-400-dropout-sampled",
                                        "real-400-dropout-sampled"]
    assert jobs[0]["rows"] == ["Table 2 B-EBP-P 400", "Table 2 B-EBP-D 400"]
    p = jobs[2]["parameters"]
    assert (p["dropout"], p["keep"], p["epochs"], p["n_train"], p["batch_size"]) == ("sampled", 0.8, 120, None, 10)
    assert jobs[0]["parameters"]["dropout"] is None
    assert Path(jobs[0]["output_dir"]) == (tmp_path / "paper" / "binary-400").resolve()
    assert (Path(jobs[0]["notebook"]).parent / p["output_dir"]).resolve() == Path(jobs[2]["output_dir"])
    assert len(ex.make_jobs(ex.select_rows(rows, tables=[2]), "quick")) == 18


def test_command_line_needs_a_selection_and_lists_states(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.parse_args([])
    assert cli.main(["--table", "4", "--weights", "binary", "--list", "--runs-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 7 and all(" new " in line for line in listed)
    assert cli.main(["--column", "999", "--list"]) == 2
    with pytest.raises(SystemExit):
        cli.parse_args(["--all", "--seed", "-1"])


def test_seeds_get_their_own_folders_and_seed_0_keeps_the_old_names(rows, tmp_path, capsys):
    """--seed 0 1 2: seed 0 keeps the folder names of the committed results, the others get -seed<N>."""
    jobs = ex.make_jobs(ex.select_rows(rows, tables=[2, 3], columns=["200"], weights=["binary"]), "paper",
                        "sampled", tmp_path, seeds=[0, 1, 2])
    assert [j["key"] for j in jobs] == ["binary-200", "binary-200-seed1", "binary-200-seed2",
                                        "binary-200-dropout-sampled", "binary-200-dropout-sampled-seed1",
                                        "binary-200-dropout-sampled-seed2"]
    assert [j["parameters"]["seed"] for j in jobs] == [0, 1, 2] * 2
    assert Path(jobs[4]["output_dir"]) == (tmp_path / "paper" / "binary-200-dropout-sampled-seed1").resolve()
    assert cli.main(["--table", "4", "--column", "144", "--seed", "0", "3", "--list", "--runs-dir",
                     str(tmp_path)]) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert keys == ["binary-block17", "binary-block17-seed3", "real-block17", "real-block17-seed3"]


def test_tables_read_the_seed_from_each_result(rows):
    """A cell is filled by the seed asked for (0 by default), whatever other seeds were run."""
    row = ex.select_rows(rows, run_ids=["real-400"])[0]
    seed0 = fake_result(row, 120, None, "paper", 0.02)
    seed1 = fake_result(row, 120, None, "paper", 0.03)
    seed1["parameters"]["seed"] = 1
    assert ex.best_results([row], [seed1, seed0])["real-400"] is seed0
    assert ex.best_results([row], [seed0, seed1], seed=1)["real-400"] is seed1
    assert ex.best_results([row], [seed1]) == {} and ex.seeds_run([seed0, seed1]) == [0, 1]


def test_one_source_for_parameters_and_paper_runs(rows):
    """The defaults are the experiment notebook's parameters cell; the benchmark's whole-paper list is the runs of
    scripts/paper_tables.csv; job_cost counts weights with ebp_lib's layer sizes."""
    assert ex.DEFAULT_PARAMETERS == ex.notebook_parameters(ex.NOTEBOOK)
    assert list(ex.DEFAULT_PARAMETERS)[:3] == ["dataset", "architecture", "weights"]
    benchmark = load_script("benchmark")
    runs = benchmark.paper_runs()
    assert len(runs) == 50 == len({r["run_id"] for r in rows})
    assert {(r["table"], r["weights"], r["dropout"]) for r in runs} == {
        (t, w, d) for w in ("binary", "real") for t, d in ((2, None), (3, "analytic"), (4, None))}
    assert sum(r["architecture"] == [("local", 13), 10] for r in runs) == 2
    assert benchmark.name([("local", 13), 10]) == "[784, 256 local13, 10]"
    job = ex.make_jobs(ex.select_rows(rows, run_ids=["binary-block13"]), "paper")[0]
    assert ex.job_cost(job) == (784 * 256 + 256 * 10) * (60000 + 20000 / 3)
    record = benchmark.machine()  # the benchmark's machine record is ebp_experiments'
    assert record.keys() == ex.machine_record().keys() >= {"cpu_model", "cores", "numpy", "numba", "git_commit"}
    assert record["cpu_model"] == ex.cpu_model() and record["numpy"] == ex.package_versions()["numpy"]


# ----------------------------------------------------------------------------------------------------------
# The runner: kill mid-run, resume, skip, failures (executes the experiment notebook)
# ----------------------------------------------------------------------------------------------------------

def tiny_job(runs_dir, **changes):
    row = ex.select_rows(ex.read_paper_tables(), tables=[2], columns=["200"], weights=["binary"])
    return ex.make_jobs(row, {**TINY, **changes}, runs_dir=runs_dir)[0]


@pytest.fixture(scope="module")
def uninterrupted(real_data_dir):
    """The tiny configuration trained in one go, in this process."""
    data = ebp_lib.load_dataset("mnist", n_train=TINY["n_train"])
    net = ebp_lib.init_network(ebp_lib.paper_architecture("200"), "binary", seed=0)
    _, history = ebp_lib.fit(net, data, KILL_EPOCHS, TINY["batch_size"], seed=0)
    return [{k: r[k] for k in RECORD_KEYS} for r in history]


def _wait_for(condition, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def test_killed_runner_resumes_bit_identically_then_skips_and_reports_failures(tmp_path, uninterrupted):
    """Kill the runner (SIGKILL: no clean-up) after epoch 1; its orphaned worker and kernel must stop; the
    next batch resumes from the checkpoint (the history equals an uninterrupted run's bit for bit) next to a
    failing run reported with its notebook; a third batch skips the finished run without executing it."""
    job = tiny_job(tmp_path, epochs=KILL_EPOCHS)
    out = Path(job["output_dir"])
    runner = subprocess.Popen(
        [sys.executable, "-c", "import json, sys; import ebp_experiments as ex; "
         "ex.run_batch([json.loads(sys.argv[1])], n_jobs=1, progress_every=1e9)", json.dumps(job)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: (ex.read_result(out) or {}).get("epochs_done", 0) >= 1, 90, "epoch 1")
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    _wait_for(lambda: not ex.is_locked(out), 30, "the orphaned kernel to exit and release the run's lock")
    state = ex.job_state(job)
    state, done = state.state, state.epochs
    killed_at = ex.read_result(out)["epochs_done"]
    # fit saves the checkpoint just before result.json is rewritten, so a kill between the two leaves the
    # checkpoint one epoch ahead; the resumed run continues from the checkpoint
    assert state == "partial" and 1 <= done < KILL_EPOCHS and killed_at in (done, done - 1), (state, done, killed_at)

    # a run that fails inside the notebook: its checkpoint was trained by the other engine, which fit refuses
    bad = tiny_job(tmp_path / "bad", epochs=KILL_EPOCHS)
    bad["key"] = "binary-200-bad"
    other_engine = next(e for e in ebp_lib.ENGINES if e != ex.engine_name())
    net = ebp_lib.init_network(ex.architecture_layers("200"), "binary", seed=0)
    ebp_lib.fit(net, ebp_lib.load_dataset("mnist", n_train=TINY["n_train"]), 1, TINY["batch_size"], seed=0,
                checkpoint=Path(bad["output_dir"]) / ex.CHECKPOINT_FILE, n_train_eval=0, engine=other_engine,
                run_config=ex.run_config(bad["parameters"]))
    failed, outcome = ex.run_batch([bad, job], n_jobs=1, echo=lambda *_: None)
    assert outcome["status"] == "finished", outcome
    result = ex.read_result(out)
    assert [{k: r[k] for k in RECORD_KEYS} for r in result["history"]] == uninterrupted  # bit for bit
    assert [s["from_epoch"] for s in result["sessions"]] == [0, done]  # resumed: finished epochs not redone
    assert result["finished"] and result["protocol"] == "shortened" and result["git_commit"] is not None
    assert not (out / ex.CHECKPOINT_FILE).exists() and (out / ex.CURVE_FILE).exists()

    assert failed["status"] == "failed" and failed["error"].startswith("CheckpointMismatchError"), failed
    assert f"engine: checkpoint {other_engine!r}, this run {ex.engine_name()!r}" in failed["error"], failed
    assert Path(failed["notebook"]) == Path(bad["output_dir"]) / "experiment.ipynb"
    assert Path(failed["notebook"]).exists()
    report = ex.summary([bad, job], [failed, outcome])
    assert "FAILED binary-200-bad" in report and failed["notebook"] in report

    stamp = (out / "experiment.ipynb").stat().st_mtime_ns
    [again] = ex.run_batch([job], n_jobs=1, echo=lambda *_: None)
    assert again["status"] == "skipped" and (out / "experiment.ipynb").stat().st_mtime_ns == stamp
    assert ex.job_state(tiny_job(tmp_path, epochs=4)).state == "stale"  # another configuration is rerun


# ----------------------------------------------------------------------------------------------------------
# Reading results back (notebooks/tables.ipynb)
# ----------------------------------------------------------------------------------------------------------

def fake_result(row_or_params, epochs_done, n, profile, final, epochs=None):
    params = ex.validate_parameters({"architecture": row_or_params["architecture"],
                                     "weights": row_or_params["weights"], "epochs": epochs or epochs_done,
                                     "n_train": n})
    history = [{"epoch": e + 1, "test_ebp_p": final, "test_ebp_d": final} for e in range(epochs_done)]
    return {"parameters": params, "protocol": ex.protocol_label(params), "finished": epochs is None,
            "epochs_done": epochs_done, "n_train_images": n or 60000, "profile": profile,
            "final": {"test_ebp_p": final, "test_ebp_d": final}, "history": history}


def test_the_most_complete_run_is_preferred(rows):
    row = ex.select_rows(rows, run_ids=["real-400"])[0]
    quick = fake_result(row, 3, 6000, "quick", 0.05)
    partial_paper = fake_result(row, 2, None, "paper", 0.04, epochs=120)
    paper = fake_result(row, 120, None, "paper", 0.02)
    other = fake_result({"architecture": "400", "weights": "binary"}, 120, None, "paper", 0.5)
    assert ex.best_results([row], [quick, other])["real-400"] is quick
    assert ex.best_results([row], [quick, partial_paper])["real-400"] is partial_paper
    assert ex.best_results([row], [paper, quick, partial_paper])["real-400"] is paper
    assert ex.provenance(partial_paper) == "paper, 2/120 ep, 60k"


def test_findings_on_the_papers_own_numbers_hold(rows):
    """Fed the paper's numbers as 'ours', every finding holds and agrees; with nothing run, 'not yet run'."""
    best = {r["run_id"]: {"final": {}} for r in rows}
    for r in rows:
        best[r["run_id"]]["final"][f"test_{r['output']}"] = r["paper_error"] / 100
    verdicts = ex.check_findings(rows, best)
    assert [v["verdict"] for v in verdicts] == ["agree"] * 5, verdicts
    assert verdicts[1]["paper"] == "holds (32/36 comparisons)"
    assert [v["verdict"] for v in ex.check_findings(rows, {})] == ["not yet run"] * 5


def test_committed_only_reads_what_git_holds(tmp_path, rows):
    """Runs in progress in the working tree do not change what the committed tables notebook reads."""
    row = ex.select_rows(rows, run_ids=["real-400"])[0]
    runs = tmp_path / "outputs" / "runs"
    committed = runs / "quick" / "real-400" / ex.RESULT_FILE
    committed.parent.mkdir(parents=True)
    committed.write_text(json.dumps(fake_result(row, 3, 6000, "quick", 0.05)))
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "results"], check=True)
    in_progress = runs / "paper" / "real-400" / ex.RESULT_FILE
    in_progress.parent.mkdir(parents=True)
    in_progress.write_text(json.dumps(fake_result(row, 2, None, "paper", 0.04, epochs=120)))
    committed.write_text(json.dumps(fake_result(row, 3, 6000, "quick", 0.07)))  # changed, not committed
    head = ex.load_results(runs, committed_only=True)
    assert [(r["run_dir"], r["final"]["test_ebp_p"]) for r in head] == [("quick/real-400", 0.05)]
    disk = ex.load_results(runs)
    assert [(r["run_dir"], r["final"]["test_ebp_p"]) for r in disk] == [("paper/real-400", 0.04),
                                                                       ("quick/real-400", 0.07)]


def test_a_run_finished_by_another_runner_meanwhile_is_not_retrained(tmp_path):
    """Two runners with overlapping selections: when the second reaches a run the first has finished since
    the batch was planned, it skips it instead of training it again over the finished result."""
    job = tiny_job(tmp_path)
    out = Path(job["output_dir"])
    out.mkdir(parents=True)
    result = fake_result(job["parameters"], TINY["epochs"], TINY["n_train"], "tiny", 0.1)
    result["parameters"] = job["parameters"]
    (out / "result.json").write_text(json.dumps(result))
    outcome = ex.run_job(job)
    assert outcome["status"] == "skipped"
    assert not (out / "experiment.ipynb").exists()  # the notebook was not executed
    assert json.loads((out / "result.json").read_text()) == result


def test_findings_compare_only_runs_of_the_same_protocol(rows):
    """A 3-epoch quick run must not be compared with a 120-epoch paper run: each protocol is judged on its own,
    and the verdict comes from the most complete one."""
    def result(row, profile, error):
        epochs, n = (120, None) if profile == "paper" else (3, 6000)
        return fake_result(row, epochs, n, profile, error)
    picked = {r["run_id"]: r for r in rows if r["table"] == 2 and r["column"] in ("800", "[800,800]")}
    best = {}
    for run_id, row in picked.items():
        # the one-layer runs at the paper's protocol (low error), the two-layer ones only quick (high error):
        # mixed, "two layers beat one" would fail; within the quick protocol alone there is nothing to compare
        best[run_id] = result(row, "paper", 0.02) if row["column"] == "800" else result(row, "quick", 0.3)
    verdict = ex.check_findings(rows, best)[0]
    assert verdict["verdict"] == "not yet run" and verdict["ours"] == "-", verdict
    # one-layer runs at the quick protocol too: now the quick protocol can test it (0.3 < 0.4: holds)
    quick_one = {run_id: result(row, "quick", 0.4) for run_id, row in picked.items() if row["column"] == "800"}
    verdict = ex.check_findings(rows, {**best, **quick_one})[0]
    assert verdict["verdict"] == "agree" and verdict["ours"].startswith("quick, 3 ep: holds (2/2"), verdict


def test_coverage_summarises_each_protocol_on_its_own(rows):
    """ours − paper is averaged within a protocol: a quick run's +8 points never dilutes a paper run's −0.2."""
    table2 = [r for r in rows if r["table"] == 2]
    paper_run, quick_run = table2[0]["run_id"], next(r["run_id"] for r in table2 if r["run_id"] != table2[0]["run_id"])
    best = {paper_run: fake_result(next(r for r in table2 if r["run_id"] == paper_run), 120, None, "paper", 0.01),
            quick_run: fake_result(next(r for r in table2 if r["run_id"] == quick_run), 3, 6000, "quick", 0.5)}
    line = ex.coverage(rows, best).splitlines()[0]
    assert line.startswith("Table 2: 2 of 18 runs have results; paper, 120 ep, 60k: ours − paper over 2 cells"), line
    assert "; quick, 3 ep, 6k: ours − paper over 2 cells" in line
