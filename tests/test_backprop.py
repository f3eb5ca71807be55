"""The backpropagation baseline: its gradients, its protocol, its records and checkpoints."""
from __future__ import annotations

import json

import numpy as np
import pytest

from reproduction import backprop as bp
from reproduction import backprop_mlp as mlp
from reproduction import records
from reproduction.folder import RESULT_FILE
from scripts import run_backprop

SMALL = {"n_train": 1200, "n_validation": 400, "batch_size": 50, "grid_epochs": 1, "max_epochs": 4,
         "patience": 1, "stop_patience": 2, "learning_rate_grid": [0.05, 0.2], "preprocessing_grid": ["unit"]}


def test_gradients_equal_finite_differences_of_the_loss():
    """float64 central differences of `loss` against `gradients`, every array of a [5, 4, 3, 10] tanh net with an
    L2 penalty: relative error below 1e-6 (the differences' own error is about 1e-9 here)."""
    rng = np.random.default_rng(0)
    params = mlp.init_mlp((5, 4, 3, 10), rng, dtype=np.float64)
    params = {k: v + 0.1 * rng.standard_normal(v.shape) for k, v in params.items()}  # nonzero biases too
    x, labels = rng.standard_normal((7, 5)), rng.integers(0, 10, 7)
    grads, cross_entropy = mlp.gradients(params, x, labels, l2=0.01)
    assert cross_entropy == pytest.approx(mlp.loss(params, x, labels) , rel=1e-12)
    eps = 1e-6
    for name, value in params.items():
        numeric = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            saved = value[index]
            value[index] = saved + eps
            up = mlp.loss(params, x, labels, 0.01)
            value[index] = saved - eps
            down = mlp.loss(params, x, labels, 0.01)
            value[index] = saved
            numeric[index] = (up - down) / (2 * eps)
        assert np.max(np.abs(grads[name] - numeric)) <= 1e-6 * max(1.0, np.max(np.abs(numeric))), name


def test_nesterov_step_matches_its_formula():
    params, velocity = {"W1": np.array([1.0, 2.0])}, {"W1": np.array([0.5, -0.5])}
    grads = {"W1": np.array([0.1, 0.2])}
    mlp.nesterov_step(params, velocity, grads, learning_rate=0.1, momentum=0.9)
    v = 0.9 * np.array([0.5, -0.5]) - 0.1 * np.array([0.1, 0.2])
    np.testing.assert_allclose(velocity["W1"], v)
    np.testing.assert_allclose(params["W1"], np.array([1.0, 2.0]) + 0.9 * v - 0.1 * np.array([0.1, 0.2]))


def test_schedule_halves_the_rate_and_stops_on_patience():
    params = bp.make_parameters("mnist", "tanh-200", patience=2, stop_patience=4, max_epochs=100)
    state = {"epoch": 0, "learning_rate": 1.0, "best_epoch": None, "best_validation_error": None,
             "epochs_without_best": 0}
    stops, rates = [], []
    for error in (0.5, 0.4, 0.45, 0.41, 0.42, 0.43):
        state["epoch"] += 1
        stops.append(bp.schedule_step(state, error, params))
        rates.append(state["learning_rate"])
    assert state["best_epoch"] == 2 and state["best_validation_error"] == 0.4
    assert rates == [1.0, 1.0, 1.0, 0.5, 0.5, 0.25]
    assert stops == [False] * 5 + [True]


@pytest.mark.parametrize("overrides, message", [
    ({"n_train": 70000}, "exceeds the 60,000"), ({"learning_rate_grid": [float("nan")]}, "finite positive"),
    ({"learning_rate_grid": [float("inf")]}, "finite positive"), ({"seed": -1}, "seed=-1"),
    ({"batch_size": 100000}, "batch_size=100000 exceeds"), ({"n_validation": 60000}, "must be smaller"),
    ({"momentum": 1.0}, "momentum"), ({"preprocessing_grid": ["zca"]}, "preprocessing_grid"),
])
def test_bad_parameters_are_refused_before_any_file_is_written(overrides, message, tmp_path, capsys):
    with pytest.raises(ValueError, match=message):
        bp.make_parameters("mnist", "tanh-200", **overrides)
    argv = {"n_train": ["--n-train", "70000"], "seed": ["--seed", "-1"], "batch_size": ["--batch-size", "100000"],
            "learning_rate_grid": ["--grid", str(overrides.get("learning_rate_grid", [0])[0])]}
    key = next(iter(overrides))
    if key in argv:
        assert run_backprop.main(["tanh-200", "--dataset", "mnist", "--out", str(tmp_path), *argv[key]]) == 2
        assert message.split()[0] in capsys.readouterr().err
        assert not any(tmp_path.iterdir())


def test_protocol_label_is_fair_only_for_the_full_protocol():
    assert bp.protocol_label(bp.make_parameters("mnist", "tanh-800", seed=2)) == "fair"
    assert bp.protocol_label(bp.make_parameters("mnist", "tanh-800", max_epochs=20)) == "shortened"
    assert bp.protocol_label(bp.make_parameters("mnist", "tanh-800", n_train=60000)) == "fair"


@pytest.fixture
def small_run(real_data_dir, tmp_path):
    params = bp.make_parameters("mnist", "tanh-200", **SMALL)
    return params, tmp_path / "run", real_data_dir


def test_a_run_records_grid_history_and_the_best_validation_epoch(small_run):
    params, folder, data_dir = small_run
    record = bp.run(params, folder, data_dir, echo=lambda *_: None, allow_dirty=True)
    assert record["finished"] and record["format"] == bp.RECORD_FORMAT and record["protocol"] == "shortened"
    assert len(record["grid"]["points"]) == 2 and record["n_train_images"] == 800
    best = min(record["history"], key=lambda h: (h["validation_error"], h["epoch"]))
    assert record["best_epoch"] == best["epoch"] and record["final"]["test_error"] == best["test_error"]
    chosen = record["grid"]["chosen"]
    point = next(p for p in record["grid"]["points"] if p["learning_rate"] == chosen["learning_rate"])
    assert record["history"][0]["validation_error"] == point["validation_error"][0]  # same first epoch
    assert not (folder / bp.CHECKPOINT_FILE).exists()
    assert json.loads((folder / RESULT_FILE).read_text()) == record


def test_an_interrupted_run_resumes_to_the_same_record(small_run, tmp_path):
    params, folder, data_dir = small_run
    whole = bp.run(params, tmp_path / "whole", data_dir, echo=lambda *_: None, allow_dirty=True)
    partial = bp.run(params, folder, data_dir, echo=lambda *_: None, allow_dirty=True, stop_after_epochs=2)
    assert not partial["finished"] and (folder / bp.CHECKPOINT_FILE).exists()
    resumed = bp.run(params, folder, data_dir, echo=lambda *_: None, allow_dirty=True)
    strip = [{k: v for k, v in h.items() if k != "train_seconds"} for h in whole["history"]]
    assert [{k: v for k, v in h.items() if k != "train_seconds"} for h in resumed["history"]] == strip
    assert resumed["final"] == whole["final"]


@pytest.mark.parametrize("damage", ["truncate", "flip", "shape", "pickle", "huge", "deep"])
def test_a_bad_checkpoint_is_named_set_aside_and_the_run_restarts(small_run, damage):
    params, folder, data_dir = small_run
    bp.run(params, folder, data_dir, echo=lambda *_: None, allow_dirty=True, stop_after_epochs=2)
    path = folder / bp.CHECKPOINT_FILE
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":  # a flipped byte inside an array: caught by the zip member's CRC
        raw = bytearray(data)
        raw[len(raw) // 3] ^= 0xFF
        path.write_bytes(bytes(raw))
    elif damage == "shape":
        with np.load(path) as npz:
            arrays = dict(npz)
        arrays["weights/W1"] = arrays["weights/W1"][:1]
        np.savez(path, **arrays)
    elif damage == "pickle":  # an object array can only be read by unpickling: refused, never executed
        with np.load(path) as npz:
            arrays = dict(npz)
        arrays["meta"] = np.array([{"evil": 1}], dtype=object)
        np.savez(path, **arrays)
    elif damage == "huge":  # a header declaring a 200,000 x 200,000 array (149 GiB): refused before allocating
        import io
        import zipfile

        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                      "shape": (200000, 200000)})
        with np.load(path) as npz:
            arrays = {k: v for k, v in npz.items() if k != "weights/W1"}
        np.savez(path, **arrays)
        with zipfile.ZipFile(path, "a") as z:
            z.writestr("weights/W1.npy", header.getvalue() + b"\0" * 64)
    else:  # metadata nested 100,000 deep: refused before the JSON parser recurses
        with np.load(path) as npz:
            arrays = dict(npz)
        arrays["meta"] = np.array("[" * 100000)
        np.savez(path, **arrays)
    messages = []
    record = bp.run(params, folder, data_dir, echo=messages.append, allow_dirty=True)
    assert record["finished"] and record["sessions"][-1]["from_epoch"] == 0
    assert any(str(path) in m and "moved aside" in m for m in messages), messages
    assert len(list(folder.glob(f"{bp.CHECKPOINT_FILE}.corrupt-*"))) == 1


def test_a_folder_of_another_run_is_refused_and_left_alone(small_run):
    params, folder, data_dir = small_run
    bp.run(params, folder, data_dir, echo=lambda *_: None, allow_dirty=True, stop_after_epochs=1)
    before = (folder / RESULT_FILE).read_bytes()
    other = {**params, "seed": 5}
    with pytest.raises(ValueError, match="other parameters.*seed"):
        bp.run(other, folder, data_dir, allow_dirty=True)
    assert (folder / RESULT_FILE).read_bytes() == before


def test_the_baseline_reads_and_checks_its_runs_as_the_ebp_runs_are(small_run):
    """One run-folder machinery for both methods: a backprop run folder is read by the reader of every run folder
    (reproduction.folder.read_result), its record passes and an edited one fails the one check the tables use
    (records.record_problems), and a checkpoint of another run is refused with the checkpoint error of the project
    (ebp_checkpoint.CheckpointError), naming the file."""
    import ebp_checkpoint
    from reproduction import folder as run_folder

    params, folder, data_dir = small_run
    record = bp.run(params, folder, data_dir, echo=lambda *_: None, allow_dirty=True, stop_after_epochs=1)
    assert run_folder.read_result(folder) == record and records.record_problems(record) == []
    edited = {**record, "n_train_images": 60000}
    assert records.record_problems(edited) == ["n_train_images: 60000, but its parameters give 800"]
    with pytest.raises(ebp_checkpoint.CheckpointError, match="checkpoint of another run") as info:
        bp.load_checkpoint(folder / run_folder.CHECKPOINT_FILE, {**params, "seed": 5})
    assert type(info.value) is ebp_checkpoint.CheckpointError and str(folder) in str(info.value)


def test_dirty_code_is_refused_unless_allowed(monkeypatch, tmp_path):
    monkeypatch.setattr(bp.records, "git_state", lambda *a, **k: {"git_commit": "abc", "git_dirty": True,
                                                                    "git_changed": ["ebp_lib.py"]})
    with pytest.raises(bp.records.DirtyTreeError, match="ebp_lib.py.*--allow-dirty"):
        bp.run(bp.make_parameters("mnist", "tanh-200", **SMALL), tmp_path / "x")
    assert not (tmp_path / "x").exists()
    assert bp.records.code_state(allow_dirty=True)["allowed_dirty"] is True


def test_comparison_pools_seeds_and_only_fair_finished_runs():
    from reproduction import comparison

    def record(seed, error, protocol="fair", finished=True):
        return {"method": "backprop", "protocol": protocol, "finished": finished,
                "parameters": {"dataset": "mnist", "config": "tanh-800", "seed": seed},
                "final": {"test_error": error}}

    runs = [record(0, 0.0184), record(1, 0.0170), record(2, 0.0150, protocol="shortened"),
            record(3, 0.0100, finished=False)]
    pooled = comparison.backprop_results(runs, "mnist")["tanh-800"]
    assert [r["parameters"]["seed"] for r in pooled] == [0, 1]
    assert comparison.summary_text(comparison.backprop_errors(pooled)) == "1.77 ± 0.10 (n = 2)"
    row = next(r for r in comparison.comparison_rows([], runs, "mnist") if r[0] == "800")
    assert row[5:] == ["1.77 ± 0.10 (n = 2)", "2.13"] and row[1] == comparison.NOT_RUN


def test_a_checkpoint_that_does_not_load_is_moved_aside_for_both_tuned_baselines(tmp_path):
    """tuned.resume, which the backprop baseline and the successors both resume through: a checkpoint that does not
    load is moved aside, said, and training restarts (None); none there is None; one that loads is returned."""
    import ebp_checkpoint
    from reproduction import tuned

    path, said = tmp_path / "checkpoint.npz", []

    def broken(p):
        raise ebp_checkpoint.CheckpointError(f"{p}: damaged")
    assert tuned.resume(path, broken, said.append) is None and said == []
    path.write_bytes(b"not a checkpoint")
    assert tuned.resume(path, broken, said.append) is None
    assert not path.exists() and len(list(tmp_path.iterdir())) == 1
    assert said == [f"{path}: damaged; moved aside to {next(tmp_path.iterdir()).name}, training restarts from epoch 0"]
    path.write_bytes(b"fine")
    assert tuned.resume(path, lambda p: ("weights", p.read_bytes()), said.append) == ("weights", b"fine")


def test_table2_ebp_excludes_the_mechanism_profiles():
    """A run of the paper's protocol with one setting changed (parameters.MECHANISMS: batch 1, pixels/255) is not a
    Table 2 run: the comparison would count it as one more seed of the paper's."""
    from reproduction import comparison
    from reproduction.parameters import RunConfig

    def record(**change):
        params = RunConfig(architecture="800", epochs=120, n_train=None, **change).parameters()
        return {"method": "ebp", "protocol": "paper", "finished": True, "parameters": params}

    assert comparison.is_table2_ebp(record(), "mnist")
    assert not comparison.is_table2_ebp(record(batch_size=1), "mnist")
    assert not comparison.is_table2_ebp(record(preprocessing="unit"), "mnist")
    assert not comparison.is_table2_ebp({**record(), "profile": "paper-f64", "engine": "reference"}, "mnist")
