"""Runs trained side by side (ebp_jax.group_epoch, reproduction/group.py, run_tables.py --engine jax --group-seeds).

A run trained in a group must be the run trained alone by engine="jax": tolerance zero, bit for bit, on this CPU
(float32). Not an accident of rounding: no operand of a product is shared by the group (ebp_jax._per_run,
ebp_jax.mean_input), so XLA computes each run's products as it does for the run alone; before that rewrite the
two differed by about 1e-7 after one epoch (float32 rounding, a few units in the last place). A GPU's libraries
may choose other kernels for a batch of products: there the two agree to float32 rounding, not necessarily bit
for bit. The runner's path is checked end to end on a tiny profile: records readable and labelled with the
engine, a group killed while one epoch's checkpoints were being written resumes with its runs at different epochs
and ends with every run exactly as trained alone; a finished group is skipped; `--engine` without
`--group-seeds` runs each notebook with that engine. Needs the real MNIST files ($EBP_DATA_DIR) where it trains
on MNIST.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import data, load_script

import ebp_data
import ebp_lib
import ebp_train
from reproduction import folder, group, paper_tables, parameters, records, runner

jax = pytest.importorskip("jax")
import ebp_jax  # noqa: E402  (after the skip: JAX is what these tests test)

SEEDS = (0, 1, 2)
TINY = {"name": "quick", "epochs": 3, "n_train": 300, "batch_size": 10}  # a "quick" profile of a few seconds
TIMINGS = ("train_seconds",)  # what differs between two trainings of one run: the clock


def assert_same_networks(a, b, what):
    for k, (x, y) in enumerate(zip(a.layers, b.layers)):
        assert np.array_equal(x.h, y.h) and np.array_equal(x.b, y.b), f"{what}: layer {k + 1} differs"


@pytest.mark.parametrize("weights, architecture, dropout, mask_reading", [
    ("binary", [30, 10], None, "absent"),
    ("real", [20, 15, 10], None, "absent"),           # a hidden layer of real weights: its Σ⟨W²⟩ (second_moment_sum)
    ("binary", [20, 15, 10], "sampled", "absent"),    # masks drawn before each call, run by run
    ("real", [20, 15, 10], "analytic", "absent"),
    ("binary", [("local", 5), 10], None, "absent"),   # a connectivity mask, shared by every run
    ("real", [("local", 5), ("local", 4), 10], "sampled", "held"),
])
def test_every_run_of_a_group_is_the_run_trained_alone(weights, architecture, dropout, mask_reading):
    """Three runs (seeds 0-2) of one configuration, two epochs of 305 images at batch 10 (30 minibatches in
    compiled calls and a remainder of 5 images, step by step), side by side (group_epoch) and each alone
    (ebp_train.train_epoch, engine="jax"): h and b identical, and each generator left in the same state."""
    x, y = data(305)

    def net(seed):
        return ebp_lib.init_network(architecture, weights, seed=seed, input_side=12, dropout=dropout,
                                    mask_reading=mask_reading)

    together, rngs = [net(seed) for seed in SEEDS], [np.random.default_rng(seed) for seed in SEEDS]
    for epoch in range(2):
        assert ebp_jax.group_epoch(together, x, y, 10, rngs, epoch) == [None] * len(SEEDS)
    for seed, grouped, rng in zip(SEEDS, together, rngs):
        alone, own = net(seed), np.random.default_rng(seed)
        for epoch in range(2):
            ebp_train.train_epoch(alone, x, y, 10, own, epoch, engine="jax")
        assert_same_networks(grouped, alone, f"seed {seed}")
        assert rng.bit_generator.state == own.bit_generator.state  # the same orders and masks were drawn
    assert not np.array_equal(together[0].layers[0].h, together[1].layers[0].h)  # three runs, not one


def test_a_run_that_is_not_finite_stops_as_alone_and_the_others_go_on():
    """A NaN bias in one run of three: that run stops before the step that fails, with the error it raises
    alone and its last finite parameters; the other two train on, exactly as alone."""
    x, y = data(40)
    nets = [ebp_lib.init_network([20, 15, 10], "binary", seed=seed, input_side=12) for seed in SEEDS]
    nets[1].layers[0].b[3] = np.nan
    errors = ebp_jax.group_epoch(nets, x, y, 10, [np.random.default_rng(seed) for seed in SEEDS])
    assert errors[0] is None and errors[2] is None
    alone = ebp_lib.init_network([20, 15, 10], "binary", seed=1, input_side=12)
    alone.layers[0].b[3] = np.nan
    with pytest.raises(FloatingPointError) as raised:
        ebp_train.train_epoch(alone, x, y, 10, np.random.default_rng(1), engine="jax")
    assert str(errors[1]) == str(raised.value) and "step 0 of epoch 1" in str(errors[1])
    for seed in (0, 2):
        other = ebp_lib.init_network([20, 15, 10], "binary", seed=seed, input_side=12)
        ebp_train.train_epoch(other, x, y, 10, np.random.default_rng(seed), engine="jax")
        assert_same_networks(nets[seed], other, f"seed {seed}")


def test_runs_of_other_configurations_or_engines_are_not_grouped(rows):
    runs = paper_tables.select_rows(rows, tables=[2], columns=["200"])  # binary-200 and real-200
    jobs = paper_tables.make_jobs(runs, paper_tables.Selection(TINY, seeds=SEEDS, engine="jax"))
    assert [[job.key for job in task] for task in group.group_jobs(jobs)] == [
        ["binary-200", "binary-200-seed1", "binary-200-seed2"], ["real-200", "real-200-seed1", "real-200-seed2"]]
    fast = paper_tables.make_jobs(runs, paper_tables.Selection(TINY, seeds=SEEDS))
    assert all(len(task) == 1 for task in group.group_jobs(fast))  # the fast engine trains each run alone
    assert all(job.engine is None and runner.notebook_parameters(job) == job.config.parameters()
               for job in fast)
    assert runner.notebook_parameters(jobs[0]) == {**jobs[0].config.parameters(), "engine": "jax"}


def test_group_seeds_needs_the_jax_engine(capsys):
    run_tables = load_script("run_tables")
    with pytest.raises(SystemExit):
        run_tables.parse_args(["binary-200", "--seed", "0", "1", "--group-seeds"])
    assert "--group-seeds trains runs side by side with the JAX engine: add --engine jax" in capsys.readouterr().err
    assert run_tables.parse_args(["binary-200"]).engine is None  # no --engine: the notebook's default engine


# ----------------------------------------------------------------------------------------------------------
# The runner's path, on MNIST
# ----------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_data(real_data_dir):
    return ebp_data.load_dataset("mnist", n_train=TINY["n_train"])


def alone(seed, data, epochs, checkpoint=None):
    """binary-200 trained alone by engine="jax", as the experiment notebook trains it."""
    net = ebp_lib.init_network(parameters.architecture_layers("200"), "binary", seed=seed)
    return ebp_train.fit(net, data, epochs, TINY["batch_size"], seed, checkpoint=checkpoint, engine="jax",
                       run_config=tiny_jobs(Path("."), [seed])[0].config.checkpoint_config())


def tiny_jobs(runs_dir, seeds=SEEDS, engine="jax"):
    row = paper_tables.select_rows(paper_tables.read_paper_tables(), tables=[2], columns=["200"],
                                   weights=["binary"])
    return paper_tables.make_jobs(row, paper_tables.Selection(TINY, seeds=seeds, engine=engine, runs_dir=runs_dir))


def test_a_run_trained_in_a_group_equals_the_run_trained_alone(tmp_path, tiny_data):
    """Seeds 0-2 of binary [784, 200, 10], 2 epochs of 300 MNIST images, trained together (train_together, no
    notebook): each checkpoint holds exactly the network (h and b, float32), history and generator state that
    ebp_train.fit with engine="jax" saves for the run alone. Tolerance zero."""
    jobs = [job.replace(config=job.config.replace(epochs=2)) for job in tiny_jobs(tmp_path / "group")]
    assert group.train_together(jobs) == {}
    for seed, job in zip(SEEDS, jobs):
        _, history = alone(seed, tiny_data, 2, tmp_path / f"alone-{seed}.npz")
        grouped, meta = ebp_lib.load_network(Path(job.output_dir) / folder.CHECKPOINT_FILE)
        single, single_meta = ebp_lib.load_network(tmp_path / f"alone-{seed}.npz")
        h = grouped.layers[0].h
        assert np.array_equal(h.astype(np.float32), h)  # computed in float32 (the network's dtype is float64)
        assert_same_networks(grouped, single, f"seed {seed}")
        assert meta["rng_state"] == single_meta["rng_state"] and meta["run"] == single_meta["run"]
        strip = lambda h: [{k: v for k, v in r.items() if k not in TIMINGS} for r in h]  # noqa: E731
        assert strip(meta["history"]) == strip(history)
        result = records.read_record(Path(job.output_dir) / folder.RESULT_FILE)  # written after every epoch
        assert result["engine"] == "jax" and not result["finished"] and result["epochs_done"] == 2


def interrupt_after(monkeypatch, checkpoints):
    """Stop train_together (as a kill would) before it writes checkpoint number `checkpoints` + 1."""
    written, end_epoch = [], ebp_train.end_epoch

    def counting(*args, **kwargs):
        if len(written) == checkpoints:
            raise KeyboardInterrupt("killed")
        written.append(1)
        return end_epoch(*args, **kwargs)
    monkeypatch.setattr(ebp_train, "end_epoch", counting)


def test_the_grouped_runner_resumes_an_interrupted_group_and_labels_the_engine(tmp_path, tiny_data, monkeypatch):
    """run_tables.py binary-200 --seed 0 1 2 --engine jax --group-seeds on a tiny quick profile (3 epochs, 300
    images). First the group is interrupted while it writes the checkpoints of epoch 2: seed 0 holds 2 epochs,
    seeds 1 and 2 hold 1. The command then resumes it (seeds 1 and 2 first), and every run ends with the history
    of the run trained alone by engine="jax", a result.json that records.read_record reads, engine "jax", the
    session it was interrupted in and the one it was resumed in. Run again, it skips all three. `--engine jax`
    alone (seed 3) executes the notebook with that engine."""
    monkeypatch.setitem(parameters.PROFILES, "quick", TINY)
    jobs = tiny_jobs(tmp_path)
    with monkeypatch.context() as patch:
        interrupt_after(patch, 4)  # epoch 1 of all three, epoch 2 of seed 0
        with pytest.raises(KeyboardInterrupt):
            group.train_together(jobs)
    assert [folder.job_state(job).epochs for job in jobs] == [2, 1, 1]
    assert all(not folder.is_locked(job.output_dir) for job in jobs)  # released as a killed process's are

    run_tables = load_script("run_tables")
    command = ["binary-200", "--runs-dir", str(tmp_path), "--engine", "jax", "--jobs", "1", "--progress-every",
               "1e9"]
    assert run_tables.main([*command, "--seed", *map(str, SEEDS), "--group-seeds"]) == 0
    for seed, job in zip(SEEDS, jobs):
        result = records.read_record(Path(job.output_dir) / folder.RESULT_FILE)
        _, history = alone(seed, tiny_data, TINY["epochs"])
        assert [{k: r[k] for k in r if k not in TIMINGS} for r in result["history"]] == [
            {k: r[k] for k in r if k not in TIMINGS} for r in history], f"seed {seed}"
        assert result["finished"] and result["engine"] == "jax" and result["parameters"] == job.config.parameters()
        assert [s["from_epoch"] for s in result["sessions"]] == [0, 2 if seed == 0 else 1, TINY["epochs"]]
        assert result["sessions"][1]["group"] == [j.key for j in jobs]  # the session that trained it together
        assert not (Path(job.output_dir) / folder.CHECKPOINT_FILE).exists()
        notebook = json.loads((Path(job.output_dir) / folder.EXECUTED_FILE).read_text())
        assert notebook["metadata"]["papermill"]["parameters"]["engine"] == "jax"

    stamps = [(Path(job.output_dir) / folder.EXECUTED_FILE).stat().st_mtime_ns for job in jobs]
    assert run_tables.main([*command, "--seed", *map(str, SEEDS), "--group-seeds"]) == 0
    assert stamps == [(Path(job.output_dir) / folder.EXECUTED_FILE).stat().st_mtime_ns for job in jobs]

    assert run_tables.main([*command, "--seed", "3"]) == 0  # one run, its notebook trains it with the JAX engine
    [single] = tiny_jobs(tmp_path, seeds=[3])
    result = records.read_record(Path(single.output_dir) / folder.RESULT_FILE)
    _, history = alone(3, tiny_data, TINY["epochs"])
    assert result["engine"] == "jax" and [r["test_ebp_p"] for r in result["history"]] == [
        r["test_ebp_p"] for r in history]
    assert [s.get("group") for s in result["sessions"]] == [None]
