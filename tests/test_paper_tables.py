"""The paper's tables as data and the jobs that reproduce them (reproduction.paper_tables), through the command
line of scripts/run_tables.py: the 100 cells and 50 runs, row selection, one job per run and seed, the folders of
seeds, mask readings and data sets, and the state a job's folder is in (reproduction.folder.job_state)."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from helpers import ROOT, TINY, fake_notebook, fake_result, load_script

import ebp_data
import ebp_lib
from reproduction import folder, parameters, runner
from reproduction.job import Job
from reproduction.paper_tables import Selection, make_jobs, read_paper_tables, select_rows

cli = load_script("run_tables")


# ----------------------------------------------------------------------------------------------------------
# The paper's tables as data
# ----------------------------------------------------------------------------------------------------------

def test_paper_tables_are_complete_and_share_runs():
    rows = read_paper_tables()
    assert [sum(r["table"] == t for r in rows) for t in (2, 3, 4)] == [36, 36, 28]
    assert len({(r["table"], r["row"], r["column"]) for r in rows}) == len(rows)
    by_run = {}
    for r in rows:
        by_run.setdefault(r["run_id"], []).append(r)
    assert len(by_run) == 50
    for run_id, pair in by_run.items():  # EBP-P and EBP-D of one weight type and column: one configuration
        assert sorted(r["row"][-1] for r in pair) == ["D", "P"], run_id
        assert len({(r["architecture"], r["weights"], r["dropout"], r["table"]) for r in pair}) == 1, run_id
        parameters.validate_parameters({"architecture": pair[0]["architecture"], "weights": pair[0]["weights"]})
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
    rows = read_paper_tables()
    for table in (2, 3, 4):
        block = text.split(f"Table {table},")[1].split("Table")[0]
        for label, numbers in re.findall(r"- ([BR]-EBP-[PD]) ([\d. |]+)", block):
            expected = [float(v) for v in numbers.replace("|", " ").split()]
            ours = [r["paper_error"] for r in rows if r["table"] == table and r["row"] == label]
            assert ours == expected, (table, label)


# ----------------------------------------------------------------------------------------------------------
# Selecting rows and making jobs
# ----------------------------------------------------------------------------------------------------------

def test_select_by_table_column_weights_and_run_id(rows):
    assert len(select_rows(rows, tables=[2])) == 36
    assert len(select_rows(rows, tables=[2, 4])) == 64
    assert {r["table"] for r in select_rows(rows, columns=["200"])} == {2, 3}
    two = select_rows(rows, tables=[3], columns=["[800,800]"])
    assert two == select_rows(rows, tables=[3], columns=["800-800"]) and len(two) == 4
    assert len(select_rows(rows, tables=[4], weights=["real"])) == 14
    by_id = select_rows(rows, run_ids=["binary-200", "real-361-100", "real-800-dropout-sampled"])
    assert sorted({r["run_id"] for r in by_id}) == ["binary-200", "real-361-100", "real-800-dropout"]
    assert select_rows(rows) == rows


@pytest.mark.parametrize("kwargs, message", [
    ({"tables": [5]}, "unknown table 5"), ({"columns": ["300"]}, "unknown column 300"),
    ({"run_ids": ["binary-201"]}, "unknown run id binary-201"), ({"weights": ["ternary"]}, "unknown weight type"),
])
def test_unknown_selection_is_an_error(rows, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        select_rows(rows, **kwargs)


def test_one_job_per_run_with_the_profile_and_the_dropout_reading(rows, tmp_path):
    jobs = make_jobs(select_rows(rows, tables=[2, 3], columns=["400"]), Selection("paper", "sampled", runs_dir=tmp_path))
    assert [j.key for j in jobs] == ["binary-400", "real-400", "binary-400-dropout-sampled",
                                        "real-400-dropout-sampled"]
    assert jobs[0].cells == ("Table 2 B-EBP-P 400", "Table 2 B-EBP-D 400")
    p = jobs[2].config.parameters()
    assert (p["dropout"], p["keep"], p["epochs"], p["n_train"], p["batch_size"]) == ("sampled", 0.8, 120, None, 10)
    assert jobs[0].config.dropout is None
    assert Path(jobs[0].output_dir) == (tmp_path / "paper" / "binary-400").resolve()
    assert (Path(jobs[0].notebook).parent / p["output_dir"]).resolve() == Path(jobs[2].output_dir)
    assert len(make_jobs(select_rows(rows, tables=[2]), Selection("quick"))) == 18


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
    jobs = make_jobs(select_rows(rows, tables=[2, 3], columns=["200"], weights=["binary"]),
                     Selection("paper", "sampled", seeds=[0, 1, 2], runs_dir=tmp_path))
    assert [j.key for j in jobs] == ["binary-200", "binary-200-seed1", "binary-200-seed2",
                                        "binary-200-dropout-sampled", "binary-200-dropout-sampled-seed1",
                                        "binary-200-dropout-sampled-seed2"]
    assert [j.config.seed for j in jobs] == [0, 1, 2] * 2
    assert Path(jobs[4].output_dir) == (tmp_path / "paper" / "binary-200-dropout-sampled-seed1").resolve()
    assert cli.main(["--table", "4", "--column", "144", "--seed", "0", "3", "--list", "--runs-dir",
                     str(tmp_path)]) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert keys == ["binary-block17", "binary-block17-seed3", "real-block17", "real-block17-seed3"]


def test_held_mask_reading_is_for_table_4_and_gets_its_own_folders(rows, tmp_path, capsys):
    """--mask-reading held: Table 4 runs go to <run>-held (after the dropout reading, before the seed); other tables
    are refused with a message saying what to select; the folder names work as run ids."""
    table4 = select_rows(rows, tables=[4], columns=["256"], weights=["binary"])
    jobs = make_jobs(table4, Selection("paper", runs_dir=tmp_path, seeds=[0, 2], mask_reading="held"))
    assert [j.key for j in jobs] == ["binary-block13-held", "binary-block13-held-seed2"]
    assert jobs[0].config.mask_reading == "held"
    assert jobs[0].config.checkpoint_config()["mask_reading"] == "held"
    assert make_jobs(table4, Selection("paper", runs_dir=tmp_path))[0].config.mask_reading == "absent"
    with pytest.raises(ValueError, match="applies to Table 4 .* only.*Table 2.*select --table 4"):
        make_jobs(select_rows(rows, columns=["200", "144"]), Selection("paper", mask_reading="held"))
    assert select_rows(rows, run_ids=["binary-block13-held"]) == table4
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
    table = select_rows(rows, tables=[2, 3], columns=["200"], weights=["binary"])
    mnist = make_jobs(table, Selection("paper", "sampled", seeds=[0, 1], runs_dir=tmp_path))
    assert make_jobs(table, Selection("paper", "sampled", [0, 1], dataset="mnist", runs_dir=tmp_path)) == mnist
    fashion = make_jobs(table, Selection("paper", "sampled", [0, 1], dataset="fashion-mnist", runs_dir=tmp_path))
    assert [j.key for j in fashion] == [j.key for j in mnist] == [
        "binary-200", "binary-200-seed1", "binary-200-dropout-sampled", "binary-200-dropout-sampled-seed1"]
    assert Path(mnist[0].output_dir) == (tmp_path / "paper" / "binary-200").resolve()
    assert Path(fashion[3].output_dir) == (tmp_path / "paper-fashion-mnist" / "binary-200-dropout-sampled-seed1"
                                             ).resolve()
    assert {j.config.dataset for j in fashion} == {"fashion-mnist"}
    assert fashion[0].config.checkpoint_config()["dataset"] == "fashion-mnist"  # a checkpoint records it
    notebook_dir = Path(fashion[0].notebook).parent
    assert (notebook_dir / fashion[0].config.output_dir).resolve() == Path(fashion[0].output_dir)
    held = make_jobs(select_rows(rows, tables=[4], columns=["144"], weights=["real"]),
                     Selection(TINY, runs_dir=tmp_path, mask_reading="held", dataset="fashion-mnist"))
    assert Path(held[0].output_dir) == (tmp_path / "tiny-fashion-mnist" / "real-block17-held").resolve()
    with pytest.raises(ValueError, match="unknown data set 'cifar'; choose one of mnist, fashion-mnist"):
        Selection("paper", dataset="cifar")
    assert [folder.split_results_folder(folder.results_folder(p, d)) for p, d in
            [("paper", "mnist"), ("paper", "fashion-mnist"), ("tiny", "fashion-mnist")]] == [
        ("paper", "mnist"), ("paper", "fashion-mnist"), ("tiny", "fashion-mnist")]
    assert folder.split_results_folder("fashion-mnist") == ("fashion-mnist", "mnist")  # no profile: not a suffix

    assert cli.parse_args(["--all"]).dataset == "mnist"
    with pytest.raises(SystemExit):
        cli.parse_args(["--all", "--dataset", "cifar"])
    assert cli.main(["--table", "4", "--weights", "binary", "--list", "--dataset", "fashion-mnist", "--runs-dir",
                     str(tmp_path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 7 and all(" new " in line for line in listed)


def _fake_checkpoint(job, dataset):
    """A one-epoch checkpoint of `job`'s network, recording `dataset` in its run configuration (as ebp_train.fit
    writes it), without training."""
    import numpy as np

    params = {**job.config.parameters(), "dataset": dataset}
    layers = parameters.architecture_layers(params["architecture"])
    net = ebp_lib.init_network(layers, params["weights"], params["seed"])
    run = {"seed": params["seed"], "batch_size": params["batch_size"], **parameters.RunConfig.of(params).checkpoint_config()}
    history = [{"epoch": 1, "test_ebp_p": 0.2, "test_ebp_d": 0.2}]
    ebp_lib.save_network(Path(job.output_dir) / folder.CHECKPOINT_FILE, net, run=run, history=history,
                         rng_state=np.random.default_rng(0).bit_generator.state)


def test_a_run_of_one_data_set_is_never_a_finished_run_of_the_other(rows, tmp_path):
    """A finished Fashion-MNIST result finishes its own run only: the MNIST run of the same name stays new; copied
    into the MNIST folder it is stale (left alone, never trained over), never skipped as finished; a Fashion-MNIST
    checkpoint in the MNIST folder makes the run inconsistent (left alone), naming both data sets."""
    table = select_rows(rows, run_ids=["binary-200"])
    mnist = make_jobs(table, Selection(TINY, runs_dir=tmp_path))[0]
    fashion = make_jobs(table, Selection(TINY, runs_dir=tmp_path, dataset="fashion-mnist"))[0]
    result = fake_result(fashion.config.parameters(), TINY["epochs"], TINY["n_train"], "tiny", 0.15,
                         dataset="fashion-mnist")
    Path(fashion.output_dir).mkdir(parents=True)
    (Path(fashion.output_dir) / folder.RESULT_FILE).write_text(json.dumps(result))
    (Path(fashion.output_dir) / folder.EXECUTED_FILE).write_text(json.dumps(fake_notebook(result)))  # its evidence
    assert folder.job_state(fashion).state == "finished" and folder.job_state(mnist).state == "new"
    Path(mnist.output_dir).mkdir(parents=True)
    (Path(mnist.output_dir) / folder.RESULT_FILE).write_text(json.dumps(result))
    (Path(mnist.output_dir) / folder.EXECUTED_FILE).write_text(json.dumps(fake_notebook(result)))
    assert folder.job_state(mnist).state == "stale"
    (Path(mnist.output_dir) / folder.RESULT_FILE).unlink()
    (Path(mnist.output_dir) / folder.EXECUTED_FILE).unlink()
    _fake_checkpoint(mnist, "fashion-mnist")
    state = folder.job_state(mnist)
    assert state.state == "inconsistent"
    assert "parameters.dataset: checkpoint.npz 'fashion-mnist', these parameters 'mnist'" in state.problems


def test_a_result_of_the_first_format_is_a_finished_run_of_the_default_reading(rows, tmp_path):
    """A result.json of format 1 (no method; from before the held reading, no mask_reading parameter) reads as the
    current format through the one upgrader: the runner skips it as a finished run of the default reading, not
    as stale."""
    job = make_jobs(select_rows(rows, run_ids=["binary-block13"]), Selection(TINY, runs_dir=tmp_path))[0]
    result = fake_result(job.config.parameters(), TINY["epochs"], TINY["n_train"], "tiny", 0.1)
    del result["method"], result["profile"]
    result["format"], result["parameters"] = 1, {k: v for k, v in job.config.parameters().items()
                                                      if k != "mask_reading"}
    Path(job.output_dir).mkdir(parents=True)
    (Path(job.output_dir) / folder.RESULT_FILE).write_text(json.dumps(result))
    (Path(job.output_dir) / folder.EXECUTED_FILE).write_text(json.dumps(fake_notebook(result)))  # its evidence
    assert folder.job_state(job).state == "finished"
    held = make_jobs(select_rows(rows, run_ids=["binary-block13"]), Selection(TINY, runs_dir=tmp_path, mask_reading="held"))[0]
    assert folder.job_state(held).state == "new"  # its own folder


def test_the_benchmark_times_the_table_runs_and_job_cost_counts_weights(rows):
    """The benchmark's whole-paper list is the runs of the paper's tables (table_runs); job_cost counts weights
    with ebp_lib's layer sizes."""
    benchmark = load_script("benchmark")
    runs = benchmark.paper_runs()
    assert len(runs) == 50 == len({r["run_id"] for r in rows})
    assert {(r["table"], r["weights"], r["dropout"]) for r in runs} == {
        (t, w, d) for w in ("binary", "real") for t, d in ((2, None), (3, "analytic"), (4, None))}
    assert sum(r["architecture"] == [("local", 13), 10] for r in runs) == 2
    assert benchmark.name([("local", 13), 10]) == "[784, 256 local13, 10]"
    job = make_jobs(select_rows(rows, run_ids=["binary-block13"]), Selection("paper"))[0]
    assert runner.job_cost(job) == (784 * 256 + 256 * 10) * (60000 + 20000 / 3)


def test_a_reference_engine_run_is_given_time_for_its_slower_epochs(rows, tmp_path):
    """The float64 mechanism's binary-200 run (reference engine, 87-120 s an epoch measured) gets a timeout above
    its 120 epochs at 90 s each, which the fast engine's bound (about 2.3 s an epoch) would cut short."""
    pick = select_rows(rows, run_ids=["binary-200"])
    slow = make_jobs(pick, Selection("paper-f64", runs_dir=tmp_path))[0]
    fast = make_jobs(pick, Selection("paper", runs_dir=tmp_path))[0]
    assert slow.engine == "reference" and fast.engine is None
    assert runner.run_timeout(fast) < 120 * 90 < runner.run_timeout(slow)


def test_a_job_is_validated_once_frozen_and_keeps_one_output_dir(rows, tmp_path):
    """A job's folder is its configuration's output_dir read from the notebook's folder (one place); a job is
    refused with every problem named, cannot be changed in place, and its plain form (JSON) gives the same job."""
    job = make_jobs(select_rows(rows, run_ids=["binary-200"]), Selection(TINY, runs_dir=tmp_path,
                                                                         data_dir=tmp_path))[0]
    assert job.output_dir == (tmp_path / "tiny" / "binary-200").resolve()
    assert job.environment == {ebp_data.DATA_ENV_VAR: str(tmp_path.resolve())}
    assert Job.of(json.loads(json.dumps(job.to_dict()))) == job
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.key = "other"
    with pytest.raises(ValueError, match=r"key='a/b'.*\n.*config=.*output_dir.*\n.*engine='gpu'"):
        Job("a/b", "tiny", job.config.replace(output_dir=None), engine="gpu")
    with pytest.raises(ValueError, match="unknown profile 'papr'; choose one of quick, paper"):
        Selection("papr")
    with pytest.raises(ValueError, match=r"seeds=\(0, -1\): give one or more integers >= 0"):
        Selection(TINY, seeds=[0, -1])
