"""The experiment infrastructure (ebp_experiments, scripts/run_tables.py): parameter validation, the paper's
tables as data, the batch runner's row selection, seeds and mask readings, skipping finished runs, resuming a run
killed mid-way (bit-identical to an uninterrupted run), failure reports, and what notebooks/tables.ipynb shows: cells
pooled over seeds (mean ± SD, last-10-epoch mean), one profile at a time, and the paper's findings judged with a
tolerance.

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
    ("mask_reading", "partial", "choose 'absent'"),
    ("mask_reading", "held", "has no locally connected layer"),  # the default architecture "200" is dense
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


def test_mask_reading_is_a_parameter_of_spatial_runs():
    """held is valid for a spatial architecture; run_config records it only when it is not the default, so the
    checkpoints written before the option existed (all absent) stay resumable; a result without the parameter
    (written before it existed) is the same configuration as one with the default."""
    held = ex.validate_parameters({"architecture": "block13", "mask_reading": "held"})
    assert ex.run_config(held)["mask_reading"] == "held"
    absent = ex.validate_parameters({"architecture": "block13"})
    assert absent["mask_reading"] == "absent" and "mask_reading" not in ex.run_config(absent)
    assert "(non-connected weights held)" in ex.describe(held) and "non-connected" not in ex.describe(
        ex.validate_parameters({}))
    old = {k: v for k, v in absent.items() if k != "mask_reading"}
    assert ex.same_configuration(old, absent) and not ex.same_configuration(old, held)


def test_normalisation_and_protocol_label():
    p = ex.validate_parameters({"architecture": 800, "dropout": "None", "n_train": None, "epochs": 120})
    assert p["architecture"] == "800" and p["dropout"] is None and ex.protocol_label(p) == "paper"
    assert ex.protocol_label({**p, "n_train": 60000}) == "paper"
    assert ex.protocol_label({**p, "epochs": 119}) == "shortened"
    assert ex.protocol_label({**p, "n_train": 59999}) == "shortened"
    assert ex.protocol_label({**p, "epochs": 200}) == "extended"  # beyond the paper: labelled, never "paper"
    assert ex.protocol_label({**p, "epochs": 200, "n_train": 59999}) == "shortened"


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


def test_held_mask_reading_is_for_table_4_and_gets_its_own_folders(rows, tmp_path, capsys):
    """--mask-reading held: Table 4 runs go to <run>-held (after the dropout reading, before the seed); other tables
    are refused with a message saying what to select; the folder names work as run ids."""
    table4 = ex.select_rows(rows, tables=[4], columns=["256"], weights=["binary"])
    jobs = ex.make_jobs(table4, "paper", runs_dir=tmp_path, seeds=[0, 2], mask_reading="held")
    assert [j["key"] for j in jobs] == ["binary-block13-held", "binary-block13-held-seed2"]
    assert jobs[0]["parameters"]["mask_reading"] == "held" and ex.run_config(jobs[0]["parameters"])["mask_reading"]
    assert ex.make_jobs(table4, "paper", runs_dir=tmp_path)[0]["parameters"]["mask_reading"] == "absent"
    with pytest.raises(ValueError, match="applies to Table 4 .* only.*Table 2.*select --table 4"):
        ex.make_jobs(ex.select_rows(rows, columns=["200", "144"]), "paper", mask_reading="held")
    assert ex.select_rows(rows, run_ids=["binary-block13-held"]) == table4
    assert cli.main(["--all", "--mask-reading", "held", "--list", "--runs-dir", str(tmp_path)]) == 2
    assert "select --table 4" in capsys.readouterr().err
    assert cli.main(["--table", "4", "--mask-reading", "held", "--list", "--runs-dir", str(tmp_path)]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert len(listed) == 14 and all(key.endswith("-held") for key in listed)
    assert cli.parse_args(["--all"]).dropout_reading == "sampled"  # the reading Table 3 shows first


def test_a_data_set_gets_its_own_folder_and_mnist_keeps_the_old_ones(rows, tmp_path, capsys):
    """--dataset fashion-mnist trains the same runs (names, seeds, readings) on Fashion-MNIST, in
    <profile>-fashion-mnist/; MNIST, the default, keeps <profile>/ (the committed results); a data set the
    experiments do not know is refused, naming the known ones."""
    table = ex.select_rows(rows, tables=[2, 3], columns=["200"], weights=["binary"])
    mnist = ex.make_jobs(table, "paper", "sampled", tmp_path, seeds=[0, 1])
    assert ex.make_jobs(table, "paper", "sampled", tmp_path, seeds=[0, 1], dataset="mnist") == mnist
    fashion = ex.make_jobs(table, "paper", "sampled", tmp_path, seeds=[0, 1], dataset="fashion-mnist")
    assert [j["key"] for j in fashion] == [j["key"] for j in mnist] == [
        "binary-200", "binary-200-seed1", "binary-200-dropout-sampled", "binary-200-dropout-sampled-seed1"]
    assert Path(mnist[0]["output_dir"]) == (tmp_path / "paper" / "binary-200").resolve()
    assert Path(fashion[3]["output_dir"]) == (tmp_path / "paper-fashion-mnist" / "binary-200-dropout-sampled-seed1"
                                             ).resolve()
    assert {j["dataset"] for j in fashion} == {j["parameters"]["dataset"] for j in fashion} == {"fashion-mnist"}
    assert ex.run_config(fashion[0]["parameters"])["dataset"] == "fashion-mnist"  # a checkpoint records it
    notebook_dir = Path(fashion[0]["notebook"]).parent
    assert (notebook_dir / fashion[0]["parameters"]["output_dir"]).resolve() == Path(fashion[0]["output_dir"])
    held = ex.make_jobs(ex.select_rows(rows, tables=[4], columns=["144"], weights=["real"]), TINY, runs_dir=tmp_path,
                        mask_reading="held", dataset="fashion-mnist")
    assert Path(held[0]["output_dir"]) == (tmp_path / "tiny-fashion-mnist" / "real-block17-held").resolve()
    with pytest.raises(ValueError, match="unknown data set 'cifar'; choose one of mnist, fashion-mnist"):
        ex.make_jobs(table, "paper", dataset="cifar")
    assert [ex.split_results_folder(ex.results_folder(p, d)) for p, d in
            [("paper", "mnist"), ("paper", "fashion-mnist"), ("tiny", "fashion-mnist")]] == [
        ("paper", "mnist"), ("paper", "fashion-mnist"), ("tiny", "fashion-mnist")]
    assert ex.split_results_folder("fashion-mnist") == ("fashion-mnist", "mnist")  # no profile: not a suffix

    assert cli.parse_args(["--all"]).dataset == "mnist"
    with pytest.raises(SystemExit):
        cli.parse_args(["--all", "--dataset", "cifar"])
    assert cli.main(["--table", "4", "--weights", "binary", "--list", "--dataset", "fashion-mnist", "--runs-dir",
                     str(tmp_path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 7 and all(" new " in line for line in listed)


def _fake_checkpoint(job, dataset):
    """A one-epoch checkpoint of `job`'s network, recording `dataset` in its run configuration (as ebp_lib.fit
    writes it), without training."""
    import numpy as np

    params = {**job["parameters"], "dataset": dataset}
    net = ebp_lib.init_network(ex.architecture_layers(params["architecture"]), params["weights"], params["seed"])
    run = {"seed": params["seed"], "batch_size": params["batch_size"], **ex.run_config(params)}
    history = [{"epoch": 1, "test_ebp_p": 0.2, "test_ebp_d": 0.2}]
    ebp_lib.save_network(Path(job["output_dir"]) / ex.CHECKPOINT_FILE, net, run=run, history=history,
                         rng_state=np.random.default_rng(0).bit_generator.state)


def test_a_run_of_one_data_set_is_never_a_finished_run_of_the_other(rows, tmp_path):
    """A finished Fashion-MNIST result finishes its own run only: the MNIST run of the same name stays new; copied
    into the MNIST folder it is stale (retrained), never skipped as finished; a Fashion-MNIST checkpoint in the
    MNIST folder makes the run inconsistent (left alone), naming both data sets."""
    table = ex.select_rows(rows, run_ids=["binary-200"])
    mnist = ex.make_jobs(table, TINY, runs_dir=tmp_path)[0]
    fashion = ex.make_jobs(table, TINY, runs_dir=tmp_path, dataset="fashion-mnist")[0]
    result = fake_result(fashion["parameters"], TINY["epochs"], TINY["n_train"], "tiny", 0.15,
                         dataset="fashion-mnist")
    Path(fashion["output_dir"]).mkdir(parents=True)
    (Path(fashion["output_dir"]) / ex.RESULT_FILE).write_text(json.dumps(result))
    assert ex.job_state(fashion).state == "finished" and ex.job_state(mnist).state == "new"
    Path(mnist["output_dir"]).mkdir(parents=True)
    (Path(mnist["output_dir"]) / ex.RESULT_FILE).write_text(json.dumps(result))
    assert ex.job_state(mnist).state == "stale"
    (Path(mnist["output_dir"]) / ex.RESULT_FILE).unlink()
    _fake_checkpoint(mnist, "fashion-mnist")
    state = ex.job_state(mnist)
    assert state.state == "inconsistent"
    assert "dataset: checkpoint 'fashion-mnist', these parameters 'mnist'" in state.problems


def test_a_result_written_before_mask_readings_is_still_finished(rows, tmp_path):
    """The committed results have no mask_reading parameter: the runner must skip them as finished (the
    default reading), not retrain them as stale."""
    job = ex.make_jobs(ex.select_rows(rows, run_ids=["binary-block13"]), TINY, runs_dir=tmp_path)[0]
    result = fake_result(job["parameters"], TINY["epochs"], TINY["n_train"], "tiny", 0.1)
    result["parameters"] = {k: v for k, v in job["parameters"].items() if k != "mask_reading"}
    Path(job["output_dir"]).mkdir(parents=True)
    (Path(job["output_dir"]) / ex.RESULT_FILE).write_text(json.dumps(result))
    assert ex.job_state(job).state == "finished"
    held = ex.make_jobs(ex.select_rows(rows, run_ids=["binary-block13"]), TINY, runs_dir=tmp_path,
                        mask_reading="held")[0]
    assert ex.job_state(held).state == "new"  # its own folder


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
        # generous limits: only a hang should fail; a loaded 2-core machine took over 90 s to start the kernel,
        # load the compiled engine and train epoch 1 (the portability run of 2026-11-27, beside two training jobs)
        _wait_for(lambda: (ex.read_result(out) or {}).get("epochs_done", 0) >= 1, 300, "epoch 1")
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    _wait_for(lambda: not ex.is_locked(out), 120, "the orphaned kernel to exit and release the run's lock")
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


def test_a_held_run_trains_the_held_network(tmp_path, real_data_dir, rows):
    """The runner passes mask_reading to the notebook, which passes it to init_network: a one-epoch held run of
    block 13 on 1,000 images gives exactly the errors of the same held network trained in this process (and not
    those of the absent one), records the reading in its result, and fills Table 4's held variant only."""
    tiny = {"name": "tiny", "epochs": 1, "n_train": 1000, "batch_size": 10}  # fewer: above the 50% check
    [job] = ex.make_jobs(ex.select_rows(rows, run_ids=["binary-block13"]), tiny, runs_dir=tmp_path,
                         mask_reading="held")
    [outcome] = ex.run_batch([job], n_jobs=1, echo=lambda *_: None)
    assert outcome["status"] == "finished", outcome
    result = ex.read_result(job["output_dir"])
    assert Path(job["output_dir"]).name == "binary-block13-held" and result["parameters"]["mask_reading"] == "held"
    data = ebp_lib.load_dataset("mnist", n_train=1000)
    expected = {}
    for reading in ("held", "absent"):
        net = ebp_lib.init_network(ex.architecture_layers("block13"), "binary", seed=0, mask_reading=reading)
        expected[reading] = ebp_lib.fit(net, data, 1, 10, seed=0)[1][-1]
    assert expected["held"]["test_ebp_p"] != expected["absent"]["test_ebp_p"]
    assert result["final"] == {k: expected["held"][k] for k in result["final"]}
    results = ex.load_results(tmp_path)
    assert ex.table_cells(rows, results, "tiny", mask_reading="absent") == {}
    held = ex.table_cells(rows, results, "tiny", mask_reading="held")
    assert sorted(held) == [(4, "B-EBP-D", "256"), (4, "B-EBP-P", "256")]


# ----------------------------------------------------------------------------------------------------------
# Reading results back (notebooks/tables.ipynb)
# ----------------------------------------------------------------------------------------------------------

def fake_result(row_or_params, epochs_done, n, profile, final, epochs=None, seed=0, curve=None, **params):
    """A result.json as EpochRecorder writes it; the test error after every epoch is `final` (both outputs), or
    `curve` (one value per epoch done) when given."""
    params = ex.validate_parameters({"architecture": row_or_params["architecture"],
                                     "weights": row_or_params["weights"], "epochs": epochs or epochs_done,
                                     "n_train": n, "seed": seed, **params})
    curve = curve or [final] * epochs_done
    history = [{"epoch": e + 1, "test_ebp_p": v, "test_ebp_d": v} for e, v in enumerate(curve)]
    return {"parameters": params, "protocol": ex.protocol_label(params), "finished": epochs is None,
            "epochs_done": epochs_done, "n_train_images": n or 60000, "profile": profile,
            "final": {"test_ebp_p": curve[-1], "test_ebp_d": curve[-1]}, "history": history}


def cell_row(rows, table, label, column):
    return next(r for r in rows if (r["table"], r["row"], r["column"]) == (table, label, column))


def write_result(runs_dir, key, result):
    """Write `result` as outputs/runs/<its profile>/<key>/result.json under runs_dir."""
    path = Path(runs_dir) / result["profile"] / key / ex.RESULT_FILE
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(result))


def test_each_profile_is_shown_on_its_own_and_the_most_complete_run_fills_a_cell(rows):
    """A quick run never fills the paper profile's cells (and the reverse); within a profile a finished run beats
    an unfinished one, which still fills the cell (marked with its epochs) until then."""
    row = cell_row(rows, 2, "R-EBP-P", "400")
    quick = fake_result(row, 3, 6000, "quick", 0.05)
    partial = fake_result(row, 2, None, "paper", 0.04, epochs=120)
    paper = fake_result(row, 120, None, "paper", 0.02)
    other = fake_result({"architecture": "400", "weights": "binary"}, 120, None, "paper", 0.5)
    key = ex.cell_key(row)
    assert ex.table_cells([row], [quick, other], "paper") == {}
    quick_cells = ex.table_cells([row], [quick, partial, paper], "quick")
    assert quick_cells[key].pooled == [quick]
    assert "2.29 / 5.00 (+2.71); last 3: 5.00 |" in ex.render_table(2, rows, quick_cells, "quick")  # 3 epochs only
    cell = ex.table_cells([row], [quick, partial], "paper")[key]
    assert cell.pooled == [partial] and not cell.finished
    assert "2.29 / 4.00 (+1.71) · 2/120 ep" in ex.render_table(2, rows, {key: cell}, "paper")
    assert ex.table_cells([row], [paper, quick, partial], "paper")[key].pooled == [paper]
    assert ex.provenance(partial) == "paper, 2/120 ep, 60k"


def test_dropout_and_mask_readings_fill_their_own_variants(rows):
    """Table 3 cells take the asked dropout reading, Table 4 cells the asked mask reading; a result written before
    mask readings existed (no mask_reading) is the absent reading; dense tables ignore the mask reading."""
    t3, t4, t2 = cell_row(rows, 3, "B-EBP-P", "200"), cell_row(rows, 4, "B-EBP-P", "256"), cell_row(rows, 2, "B-EBP-P", "200")
    sampled = fake_result(t3, 120, None, "paper", 0.03, dropout="sampled")
    analytic = fake_result(t3, 120, None, "paper", 0.04, dropout="analytic")
    absent = fake_result(t4, 120, None, "paper", 0.035)
    del absent["parameters"]["mask_reading"]
    held = fake_result(t4, 120, None, "paper", 0.065, mask_reading="held")
    dense = fake_result(t2, 120, None, "paper", 0.033)
    results = [sampled, analytic, absent, held, dense]
    main = ex.table_cells(rows, results, "paper", "sampled", "absent")
    assert [main[ex.cell_key(r)].pooled[0] for r in (t3, t4, t2)] == [sampled, absent, dense]
    other = ex.table_cells(rows, results, "paper", "analytic", "held")
    assert [other[ex.cell_key(r)].pooled[0] for r in (t3, t4, t2)] == [analytic, held, dense]
    assert "held at h = 0" in ex.render_table(4, rows, other, "paper", mask_reading="held")
    assert "sampled dropout" in ex.render_table(3, rows, main, "paper", "sampled")


def test_seeds_are_pooled_as_mean_and_sd_beside_the_last_ten_epochs(rows, tmp_path):
    """Folders <run>, <run>-seed1, <run>-seed2 of one configuration, finished: the cell shows their mean ± SD and
    n = 3, and the mean over seeds of each run's mean test error over its last 10 epochs (111-120); a seed still
    training (seed 3) is named beside the cell, not pooled. The table's title names the profile and the seeds."""
    row = cell_row(rows, 2, "B-EBP-P", "200")
    for seed, last in [(0, 0.030), (1, 0.032), (2, 0.034)]:  # epochs 111-119 at 3.1%, epoch 120 at `last`
        curve = [0.05] * 110 + [0.031] * 9 + [last]
        write_result(tmp_path, ex.run_key("binary-200", seed=seed), fake_result(row, 120, None, "paper", None,
                                                                               seed=seed, curve=curve))
    write_result(tmp_path, "binary-200-seed3", fake_result(row, 40, None, "paper", 0.04, epochs=120, seed=3))
    write_result(tmp_path, "binary-200-quick", fake_result(row, 3, 6000, "quick", 0.2))
    results = ex.load_results(tmp_path)
    assert ex.seeds_run(results) == [0, 1, 2, 3]
    cells = ex.table_cells(rows, results, "paper")
    cell = cells[ex.cell_key(row)]
    assert cell.seeds == [0, 1, 2] and [ex.seed_of(r) for r in cell.others] == [3] and cell.finished
    assert cell.mean == pytest.approx(3.2) and cell.sd == pytest.approx(0.2)
    last, last_sd = cell.last_epochs
    assert last == pytest.approx(3.11) and last_sd == pytest.approx(0.02)
    se = 100 * (0.032 * 0.968 / 10000) ** 0.5
    assert cell.uncertainty == pytest.approx((0.2 ** 2 + se ** 2) ** 0.5)
    text = ex.render_table(2, rows, cells, "paper")
    assert "| 200 | 3.46 / 3.20 ± 0.20 (n = 3) (-0.26); last 10: 3.11 ± 0.02 · seed 3: 40/120 ep |" in text
    assert "profile paper (120 epochs on all 60,000 training images, batch 10); seeds 0, 1, 2 (3 per cell in " \
           "2 cells; mean ± SD over seeds)" in text
    one = ex.table_cells(rows, [r for r in results if ex.seed_of(r) == 0], "paper")
    assert one[ex.cell_key(row)].sd is None and "seed 0 (one run per cell)" in ex.render_table(2, rows, one, "paper")
    assert "| 200 | 3.46 / 3.00 (-0.46); last 10: 3.09 |" in ex.render_table(2, rows, one, "paper")


def test_an_extended_run_is_paired_with_the_paper_run_it_prolongs(rows, tmp_path):
    """An extended run (200 epochs) is paired with the finished paper-profile run of its configuration and seed,
    not with another seed's; the table gives the error after epoch 120 and after epoch 200, the last-10 means
    ending there and the trend over the last 40 epochs; retraced_epochs counts the epochs identical to the twin."""
    row = cell_row(rows, 3, "B-EBP-D", "[800,800]")
    params = {"dropout": "sampled", "keep": 0.8}
    falling = [0.30 - 0.001 * e for e in range(120)]            # 0.1 points lower every epoch up to epoch 120
    extended = fake_result(row, 200, None, "extended", None, curve=falling + [0.181] * 80, **params)
    twin = fake_result(row, 120, None, "paper", None, curve=falling, **params)
    other_seed = fake_result(row, 120, None, "paper", None, seed=1, curve=falling, **params)  # read first
    for key, result in [("binary-800-800-dropout-sampled", extended), ("binary-800-800-dropout-sampled", twin),
                        ("binary-800-800-dropout-sampled-seed1", other_seed)]:
        write_result(tmp_path, key, result)
    pairs = ex.prolonged_runs(ex.load_results(tmp_path))
    assert len(pairs) == 1 and ex.seed_of(pairs[0][1]) == 0 and pairs[0][1]["profile"] == "paper"
    assert ex.prolonged_runs([r for r in ex.load_results(tmp_path) if r["profile"] != "paper"])[0][1] is None
    assert ex.retraced_epochs(*pairs[0]) == 120
    drifted = {**twin, "history": twin["history"][:50] + [{**twin["history"][50], "test_ebp_d": 0.5}]}
    assert ex.retraced_epochs(extended, drifted) == 50
    assert ex.twin_agreement(extended, drifted) == ("identical to its paper-profile twin for 50 of the 51 epochs both "
                                                    "ran; over those epochs their test errors differ by at most 25.00 "
                                                    "points (trained on unrecorded CPUs; the twin on unrecorded CPUs)")
    assert ex.trend(twin, "ebp_d") == pytest.approx(-1.0) and ex.trend(extended, "ebp_d") == pytest.approx(0.0)
    table = ex.settling_table(pairs)
    # epoch 120: 18.10; epochs 111-120: 18.55 on average; epoch 200 and its last 10: 18.10
    assert "| binary [800,800], sampled dropout, seed 0 | EBP-D | 18.10 | 18.55 | -1.00 | 18.10 (epoch 200) | " \
           "18.10 | +0.00 |" in table
    assert ex.settling_table([]) == "No run of the extended profile has been committed yet."


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




# ----------------------------------------------------------------------------------------------------------
# The paper's findings, judged with a tolerance
# ----------------------------------------------------------------------------------------------------------

def test_a_comparison_is_decided_only_beyond_two_standard_errors():
    """d = worse − better against 2·sqrt(u_better² + u_worse²): supports, contradicts or within tolerance; a side
    may be the best of several cells or a fixed error (u = 0); a missing cell leaves it not run."""
    values = {"a": (2.0, 0.1), "b": (2.5, 0.1), "c": (2.2, 0.1), "d": (1.9, 0.3)}
    judge = lambda better, worse: ex.judge(ex.Comparison("x", better, worse), values)  # noqa: E731
    assert judge(("a",), ("b",))["status"] == "supports"  # d = 0.5 > 2·sqrt(0.02) = 0.28
    assert judge(("b",), ("a",))["status"] == "contradicts"
    assert judge(("a",), ("c",))["status"] == "within tolerance"  # d = 0.2 < 0.28
    assert judge(("d",), ("b",))["status"] == "within tolerance"  # d = 0.6 < 2·sqrt(0.1) = 0.63: the SD counts
    best = judge(("b", "c"), ("a", "d"))  # best 2.2 (c) against best 1.9 (d)
    assert best["better"][2] == "c" and best["worse"][2] == "d" and best["d"] == pytest.approx(-0.3)
    fixed = judge(("a",), 2.25)
    assert fixed["status"] == "supports" and fixed["tolerance"] == pytest.approx(0.2)
    assert judge(("a", "missing"), ("b",))["status"] == "not run yet"


def test_every_and_most_verdicts():
    """every: agree only if every comparison supports, disagree if any contradicts; most: agree if more than
    half support, disagree if at least half contradict; anything else inconclusive."""
    values = {"lo": (1.0, 0.01), "hi": (2.0, 0.01), "mid": (1.0, 0.01)}
    sup, con, tie = ex.Comparison("s", ("lo",), ("hi",)), ex.Comparison("c", ("hi",), ("lo",)), \
        ex.Comparison("t", ("lo",), ("mid",))
    gone = ex.Comparison("g", ("lo",), ("absent",))

    def word(quantifier, *comparisons):
        return ex.verdict(ex.Finding("f", "here", quantifier, comparisons), values)["verdict"]
    assert [word("every", sup, sup), word("every", sup, con), word("every", sup, tie), word("every", sup, gone)] == \
        ["agree", "disagree", "inconclusive", "inconclusive"]
    assert [word("most", sup, sup, con), word("most", sup, con), word("most", sup, tie, tie), word("most", gone)] == \
        ["agree", "disagree", "inconclusive", "not run yet"]
    v = ex.verdict(ex.Finding("f", "here", "every", (sup, con, tie, gone)), values)
    assert ex.describe_verdict(v) == "disagree (1 ✓, 1 ✗, 1 ~, 1 not run of 4)"


PAPER_VERDICTS = ["inconclusive", "agree", "inconclusive", "inconclusive", "agree", "inconclusive", "inconclusive",
                  "agree", "agree", "inconclusive", "inconclusive", "inconclusive"]


def paper_as_ours(rows, drop=()):
    """Cells holding the paper's own numbers as finished single-seed runs (except the run ids in `drop`)."""
    cells = {}
    for r in rows:
        if r["run_id"] not in drop:
            result = fake_result(r, 120, None, "paper", r["paper_error"] / 100)
            cells[ex.cell_key(r)] = ex.Cell(r, [result])
    return cells


def test_the_papers_own_numbers_judged_by_the_same_rule(rows):
    """The paper's numbers with their binomial SE: (2), (5) and the width of B-EBP-D hold; every other finding is
    inconclusive (e.g. dropout improves 13 of its 36 cells beyond tolerance, none is worse beyond it), and its own
    Table 2 contradicts Summary (3) in 3 of 8 comparisons. Fed the same numbers as ours (one seed each), our
    verdicts are the paper's; with nothing run, every finding is 'not run yet'."""
    findings = ex.paper_findings()
    assert len(findings) == 12 and findings[4].title.startswith("(5) Spatial filtering does not improve BMNNs")
    paper = [ex.verdict(f, ex.paper_values(rows)) for f in findings]
    assert [v["verdict"] for v in paper] == PAPER_VERDICTS
    assert ex.describe_verdict(paper[6]) == "inconclusive (13 ✓, 0 ✗, 23 ~ of 36)"
    assert ex.describe_verdict(paper[2]) == "inconclusive (2 ✓, 3 ✗, 3 ~ of 8)"
    assert paper[4]["judged"][0]["d"] == pytest.approx(3.56 - 2.37)  # best binary: Table 4 B-EBP-D 225, Table 2
    mine = [ex.verdict(f, ex.our_values(paper_as_ours(rows))) for f in findings]
    assert [v["counts"] for v in mine] == [v["counts"] for v in paper]
    assert [ex.verdict(f, {})["verdict"] for f in findings] == ["not run yet"] * 12


def test_seed_spread_widens_the_tolerance(rows):
    """The same two means are decided with one seed (binomial SE only) and within tolerance when three seeds
    per cell spread them (SD 0.5): Summary (5) on the best binary cells of Tables 2 and 4."""
    t2, t4 = cell_row(rows, 2, "B-EBP-P", "800"), cell_row(rows, 4, "B-EBP-P", "256")
    finding = ex.paper_findings()[4]
    cells = paper_as_ours(rows)

    def with_seeds(row, errors):
        return ex.Cell(row, [fake_result(row, 120, None, "paper", e / 100, seed=s) for s, e in enumerate(errors)])
    one = {**cells, ex.cell_key(t2): with_seeds(t2, [2.0]), ex.cell_key(t4): with_seeds(t4, [2.6])}
    three = {**cells, ex.cell_key(t2): with_seeds(t2, [1.5, 2.0, 2.5]), ex.cell_key(t4): with_seeds(t4, [2.1, 2.6, 3.1])}
    assert ex.verdict(finding, ex.our_values(one))["verdict"] == "agree"
    judged = ex.verdict(finding, ex.our_values(three))
    assert judged["verdict"] == "inconclusive" and judged["judged"][0]["d"] == pytest.approx(0.6)
    assert judged["judged"][0]["tolerance"] > 2 * (2 * 0.5 ** 2) ** 0.5


def test_unfinished_runs_do_not_count_in_findings(rows):
    """A run still training is shown in its table but left out of the findings: its comparisons are not run."""
    cells = paper_as_ours(rows)
    row = cell_row(rows, 4, "B-EBP-D", "225")
    cells[ex.cell_key(row)] = ex.Cell(row, [fake_result(row, 30, None, "paper", 0.0356, epochs=120)])
    judged = ex.verdict(ex.paper_findings()[4], ex.our_values(cells))
    assert judged["verdict"] == "not run yet"


def test_findings_summary_and_details_show_each_variant_where_it_matters(rows):
    """The summary has one line per finding, the paper's verdict and ours per variant ('same' where a variant's
    reading does not touch the finding's tables); the details list the comparisons that are not ✓ everywhere."""
    main = paper_as_ours(rows)
    held = paper_as_ours(rows, drop={r["run_id"] for r in rows if r["table"] == 4})
    variants = {"main": main, "Table 3 analytic": main, "Table 4 held": held}
    summary = ex.findings_summary(rows, variants).splitlines()
    assert len(summary) == 2 + 12 and summary[0].startswith("| finding | every/most | paper's numbers | ours |")
    line5 = next(line for line in summary if line.startswith("| (5) "))
    assert line5.endswith("| **agree (1 ✓, 0 ✗, 0 ~ of 1)** | same | **not run yet** |"), line5
    degrade = next(line for line in summary if line.startswith("| Without dropout"))
    assert degrade.endswith("| same | same |")
    details = ex.finding_details(ex.paper_findings()[6], rows, variants)
    assert "| B-EBP-P 200: Table 3 < Table 2 | ~ -0.14 (tol 0.52) | ~ -0.14 (tol 0.52) | ~ -0.14 (tol 0.52) |" \
        in details
    assert "| 13 more comparisons | ✓ | ✓ | ✓ |" in details and "Table 4 held" not in details


def test_coverage_counts_finished_running_and_missing_runs(rows):
    row = cell_row(rows, 2, "B-EBP-P", "200")
    cells = {ex.cell_key(row): ex.Cell(row, [fake_result(row, 120, None, "paper", 0.0336)])}
    running = cell_row(rows, 2, "R-EBP-P", "400")
    cells[ex.cell_key(running)] = ex.Cell(running, [fake_result(running, 7, None, "paper", 0.03, epochs=120)])
    line = ex.coverage(rows, cells, 2, " (x)")
    assert line == ("Table 2 (x): 1 of 18 runs finished, in progress: real-400 7/120 ep, 16 not run; ours − paper "
                    "over 1 cells: mean -0.10, from -0.10 to -0.10 points"), line


# ----------------------------------------------------------------------------------------------------------
# MNIST beside Fashion-MNIST (the tables notebook's Fashion-MNIST part)
# ----------------------------------------------------------------------------------------------------------

def test_results_are_read_back_per_data_set_and_a_misplaced_one_is_an_error(rows, tmp_path):
    """load_results gives a Fashion-MNIST run its profile (the folder less -fashion-mnist); results_of keeps one
    profile and data set; an EBP result in the folder of another data set stops the reading, naming the file and
    where it belongs."""
    row = cell_row(rows, 2, "B-EBP-P", "200")
    write_result(tmp_path, "binary-200", fake_result(row, 120, None, "paper", 0.03))
    fashion = fake_result(row, 120, None, "paper-fashion-mnist", 0.12, dataset="fashion-mnist")
    write_result(tmp_path, "binary-200", fashion)
    results = ex.load_results(tmp_path)
    assert [(r["profile"], r["run_dir"]) for r in results] == [("paper", "paper-fashion-mnist/binary-200"),
                                                              ("paper", "paper/binary-200")]  # sorted by path
    assert [r["final"]["test_ebp_p"] for r in ex.results_of(results, "paper", "fashion-mnist")] == [0.12]
    assert [r["final"]["test_ebp_p"] for r in ex.results_of(results, "paper")] == [0.03]
    write_result(tmp_path, "real-200", {**fashion, "profile": "paper"})  # a Fashion-MNIST run in paper/
    with pytest.raises(ValueError, match=r"paper/real-200/result.json was trained on fashion-mnist but lies in "
                                         r"paper/, the folder of mnist runs; move its run folder to "
                                         r"paper-fashion-mnist/"):
        ex.load_results(tmp_path)


def test_fashion_mnist_tables_beside_mnist_with_missing_runs(rows):
    """The rows of another data set have no paper number; each data set's results fill only its own cells; the
    side-by-side table shows 'MNIST / Fashion-MNIST (difference)', 'not run yet' where a run is missing and the
    epochs of a run in progress; coverage counts runs without comparing to the paper."""
    fashion_rows = ex.dataset_rows(rows, "fashion-mnist")
    assert {r["dataset"] for r in fashion_rows} == {"fashion-mnist"} and all(
        r["paper_error"] is None for r in fashion_rows)
    assert ex.dataset_rows(rows, "mnist") == rows
    row = cell_row(rows, 2, "B-EBP-P", "200")
    results = [fake_result(row, 120, None, "paper", 0.0324),
               fake_result(row, 120, None, "paper", 0.1250, dataset="fashion-mnist"),
               fake_result(cell_row(rows, 2, "R-EBP-P", "400"), 30, None, "paper", 0.11, epochs=120,
                           dataset="fashion-mnist")]
    mnist, fashion = ex.table_cells(rows, results), ex.table_cells(fashion_rows, results)
    assert [round(c.mean, 2) for c in mnist.values()] == [3.24, 3.24]  # EBP-P and EBP-D of the MNIST run only
    assert sorted(round(c.mean, 2) for c in fashion.values()) == [11.0, 11.0, 12.5, 12.5]
    table = ex.render_dataset_table(2, rows, {"mnist": mnist, "fashion-mnist": fashion}, "paper")
    assert table.startswith("**Table 2: 1D input, no dropout** — profile paper (120 epochs on all 60,000 "
                            "training images, batch 10); MNIST: seed 0 (one run per cell); Fashion-MNIST: seed 0 "
                            "(one run per cell). Test error % after the last epoch, MNIST / Fashion-MNIST "
                            "(Fashion-MNIST − MNIST)."), table
    assert "| 200 | 3.24 / 12.50 (+9.26) | 3.24 / 12.50 (+9.26) | not run yet / not run yet |" in table
    assert "| 400 | not run yet / not run yet | not run yet / not run yet | not run yet / 11.00 · 30/120 ep |" in table
    assert "3.46" not in table  # no paper number
    empty = ex.render_dataset_table(4, rows, {"mnist": {}, "fashion-mnist": {}}, "paper", mask_reading="absent")
    assert "MNIST: no runs yet; Fashion-MNIST: no runs yet" in empty and empty.count("not run yet / not run yet") == 28
    assert ex.coverage(fashion_rows, fashion, 2) == ("Table 2: 1 of 18 runs finished, in progress: real-400 "
                                                     "30/120 ep, 16 not run")


def test_findings_are_judged_on_fashion_mnist_with_its_own_bar(rows):
    """The same findings and rule on each data set, with the data set's "works well" bar (5% MNIST, 15%
    Fashion-MNIST); with no Fashion-MNIST run finished every verdict there is 'not run yet'; the details of another
    data set have no paper column."""
    assert ex.paper_findings()[0].title.startswith("(1) BMNNs trained by EBP work well (best B-EBP-P below 5%)")
    fashion_findings = ex.paper_findings("fashion-mnist")
    assert fashion_findings[1].comparisons[0] == ex.Comparison("Table 2: B-EBP-P 200 < 15%",
                                                               ((2, "B-EBP-P", "200"),), 15.0)
    assert [f.comparisons[1:] for f in fashion_findings[2:]] == [f.comparisons[1:] for f in ex.paper_findings()[2:]]
    with pytest.raises(ValueError, match="unknown data set 'cifar'"):
        ex.paper_findings("cifar")
    summary = ex.findings_by_dataset({"mnist": paper_as_ours(rows), "fashion-mnist": {}}).splitlines()
    assert summary[0] == ("| finding | every/most | ours, MNIST (works well: < 5%) | ours, Fashion-MNIST (works "
                          "well: < 15%) |") and len(summary) == 2 + 12
    assert all(line.endswith("| **not run yet** |") for line in summary[2:])
    assert summary[2].endswith("| **inconclusive (5 ✓, 0 ✗, 1 ~ of 6)** | **not run yet** |"), summary[2]
    fashion_rows = ex.dataset_rows(rows, "fashion-mnist")
    b200 = cell_row(fashion_rows, 2, "B-EBP-P", "200")
    fashion = {ex.cell_key(b200): ex.Cell(b200, [fake_result(b200, 120, None, "paper", 0.125,
                                                             dataset="fashion-mnist")])}
    judged = ex.verdict(fashion_findings[1], ex.our_values(fashion))
    assert judged["counts"] == {"supports": 1, "contradicts": 0, "within tolerance": 0, "not run yet": 1}
    details = ex.finding_details(fashion_findings[1], fashion_rows, {"Fashion-MNIST": fashion})
    assert "| comparison | ours |" in details and "| Table 2: B-EBP-P 200 < 15% | ✓ +2.50 (tol 0.66) |" in details
    assert "| Table 3: B-EBP-P 200 < 15% | · not run yet |" in details  # a short list shows every line
    d200 = cell_row(fashion_rows, 2, "B-EBP-D", "200")  # the same run's EBP-D output
    fashion[ex.cell_key(d200)] = ex.Cell(d200, fashion[ex.cell_key(b200)].pooled)
    long = ex.finding_details(fashion_findings[10], fashion_rows, {"Fashion-MNIST": fashion}).splitlines()
    assert long[-2:] == ["| Table 2 200: B-EBP-P < B-EBP-D | ~ +0.00 (tol 0.94) |",
                         "| 49 comparisons not run yet | · |"], long  # a partial grid's unrun comparisons, counted
