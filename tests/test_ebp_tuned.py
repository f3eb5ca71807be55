"""EBP tuned like its successors (successors.ebp in the harness reproduction.successors): its parameters, split,
class probabilities, trainer and records, and the per-image predictions every new run keeps."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import assert_resumes_to_the_same_record
from scipy import stats

import ebp_lib
from reproduction import backprop, records, run_files
from reproduction import successors as sc
from successors import ebp


def test_ebp_tuned_defaults_are_the_successors_protocol_with_eBPs_batch_and_grid():
    params = sc.make_parameters("ebp-tuned", "mnist", "800")
    ste = sc.make_parameters("ste", "mnist", "800")
    assert params["batch_size"] == 10 and params["preprocessing_grid"] == ["pixel", "unit", "pixel-floor"]
    assert params["grid"] == {"init_scale": [1.0, 784.0]} and params["fixed"] == {"keep": 1.0}
    assert sc.make_parameters("ebp-tuned-dropout", "mnist", "800")["fixed"] == {"keep": 0.8}
    same = ("grid_epochs", "max_epochs", "patience", "stop_patience", "n_validation", "n_train", "tune_seed")
    assert {k: params[k] for k in same} == {k: ste[k] for k in same}
    assert len(sc.grid_keys(params)) == 6 and sc.n_tuned(params) == 2
    assert sc.protocol_label(params) == "tuned"
    assert "no step size to halve" in sc.describe_protocol(params)
    assert "step sizes halved after 5 epochs" in sc.describe_protocol(ste)
    assert sc.run_dir(sc.make_parameters("ebp-tuned-dropout", "fashion-mnist", "800-800", seed=2)).parts[-2:] == (
        "fashion-mnist", "ebp-tuned-dropout-800-800-seed2")


def test_ebp_tuned_refuses_a_preprocessing_it_does_not_know():
    with pytest.raises(ValueError, match="must name some of"):
        sc.make_parameters("ebp-tuned", "mnist", "800", preprocessing_grid=["pixel", "global-floor"])
    with pytest.raises(ValueError, match="must name some of"):  # the successors keep theirs
        sc.make_parameters("ste", "mnist", "800", preprocessing_grid=["pixel-floor"])


def test_class_probabilities_normalise_the_likelihood_of_the_one_hot_targets():
    """p(c) ∝ Π_k Φ(y^c_k t_k) over the 10 one-vs-all targets, by brute force; its argmax is EBP-P's."""
    rng = np.random.default_rng(0)
    mu, sigma2 = rng.normal(0, 2, (50, 10)), rng.uniform(0.2, 3.0, (50, 10))
    t = mu / np.sqrt(sigma2)
    targets = np.where(np.eye(10) > 0, 1.0, -1.0)                         # row c: the target of class c
    likelihood = np.prod(stats.norm.cdf(targets[None, :, :] * t[:, None, :]), axis=2)
    expected = likelihood / likelihood.sum(axis=1, keepdims=True)
    p = ebp.class_probabilities(mu, sigma2)
    np.testing.assert_allclose(p, expected, rtol=1e-10, atol=1e-15)
    nu = ebp_lib.unit_mean(mu, sigma2)
    assert np.array_equal(p.argmax(axis=1), nu.argmax(axis=1))


def test_class_probabilities_stay_finite_where_phi_underflows():
    mu, sigma2 = np.array([[30.0, 25.0] + [-40.0] * 8]), np.ones((1, 10))  # Φ(−25) = 3e-138, Φ(−30) = 5e-198
    p = ebp.class_probabilities(mu, sigma2)
    assert np.all(np.isfinite(p)) and p[0, 0] == pytest.approx(1.0) and 0 < p[0, 1] < 1e-50


def test_the_split_is_the_successors_split_and_the_floor_caps_the_rare_pixels(real_data_dir):
    params = sc.make_parameters("ebp-tuned", "mnist", "800", n_train=3000, n_validation=1000)
    for name in ("pixel", "unit"):
        ours, theirs = ebp.load_split(params, name, real_data_dir), backprop.load_split(params, name, real_data_dir)
        for key in theirs:
            np.testing.assert_array_equal(ours[key], theirs[key])
    plain, floored = (ebp.load_split(params, name, real_data_dir) for name in ("pixel", "pixel-floor"))
    np.testing.assert_array_equal(plain["y_val"], floored["y_val"])
    assert np.abs(floored["x_fit"]).max() <= 255 / ebp.STD_FLOOR + 1e-4 < np.abs(plain["x_fit"]).max()


def test_an_epoch_trains_a_copy_and_a_checkpoint_round_trips(real_data_dir):
    params = sc.make_parameters("ebp-tuned-dropout", "mnist", "16", n_train=700, n_validation=200)
    data = sc.load_split(params, "pixel", real_data_dir)
    trainer = sc.make_trainer(params, {"preprocessing": "pixel", "init_scale": 784.0}, len(data["x_fit"]))
    start = trainer.initial()
    before = [layer.h.copy() for layer in start.layers]
    state, loss = trainer.train_epoch(start, data["x_fit"], data["y_fit"], 0, 1.0)
    assert loss is None and all(np.array_equal(a, layer.h) for a, layer in zip(before, start.layers))
    assert not np.array_equal(state.layers[0].h, start.layers[0].h)
    again, _ = trainer.train_epoch(start, data["x_fit"], data["y_fit"], 0, 1.0)   # masks seeded by (seed, epoch)
    assert all(np.array_equal(a.h, b.h) for a, b in zip(state.layers, again.layers))
    restored = trainer.from_arrays(trainer.to_arrays(state, "state"), "state")
    assert all(np.array_equal(a.h, b.h) and np.array_equal(a.b, b.b) for a, b in zip(state.layers, restored.layers))
    assert trainer.expected_headers("best") == {f"best/{n}{k}": (a.shape, np.dtype(np.float32))
                                                for k, layer in enumerate(state.layers)
                                                for n, a in (("h", layer.h), ("b", layer.b))}


SMALL = {"n_train": 700, "n_validation": 200, "grid_epochs": 1, "max_epochs": 3, "patience": 1,
         "stop_patience": 3, "preprocessing_grid": ["unit", "pixel-floor"]}


def test_an_interrupted_ebp_run_resumes_to_the_same_record_and_keeps_its_predictions(real_data_dir, tmp_path):
    params = sc.make_parameters("ebp-tuned-dropout", "mnist", "16", grid={"init_scale": [1.0, 784.0]}, **SMALL)
    quiet = {"echo": lambda *_: None, "allow_dirty": True}
    whole = sc.run(params, tmp_path / "whole", real_data_dir, **quiet)
    assert whole["finished"] and whole["protocol"] == "shortened" and len(whole["grid"]["points"]) == 4
    assert records.record_problems(whole) == []
    evaluation = whole["evaluation"]
    assert evaluation["packed"]["mismatches"] == 0 and set(evaluation["outputs"]) == {"predictive"}
    best = whole["history"][whole["best_epoch"] - 1]
    assert evaluation["packed"]["error"] == best["test_error"]
    # EBP-P in float64 at the end, float32 each epoch: the same but for near-ties (at most 2 of 10,000 images)
    assert abs(evaluation["outputs"]["predictive"]["test_error"] - best["test_error_ebp_p"]) <= 2e-4
    assert {"nll", "ece", "reliability"} <= set(evaluation["outputs"]["predictive"])
    assert whole["versions"].keys() >= {"numpy", "scipy", "numba"}
    predictions = run_files.load_predictions(tmp_path / "whole" / run_files.PREDICTIONS_FILE, 10000)
    labels = sc.load_split(params, "unit", real_data_dir)["y_test"]
    assert np.mean(predictions["deployed"] != labels) == evaluation["packed"]["error"]
    assert np.mean(predictions["predictive"] != labels) == evaluation["outputs"]["predictive"]["test_error"]
    assert_resumes_to_the_same_record(sc, params, whole, tmp_path / "part", real_data_dir)


def test_predictions_files_hold_uint8_classes_and_refuse_anything_else(tmp_path):
    path = tmp_path / "p.npz"
    run_files.save_predictions(path, {"deployed": np.arange(20) % 10, "predictive": np.zeros(20, int)})
    loaded = run_files.load_predictions(path, 20)
    assert loaded["deployed"].dtype == np.uint8 and list(loaded["deployed"][:12]) == [*range(10), 0, 1]
    with pytest.raises(run_files.PredictionsError, match="not uint8 classes"):
        run_files.load_predictions(path, 10000)
    for bad in ({"deployed": np.array([0, 10])}, {"deployed": np.array([0.5, 1.0])},
                {"a": np.zeros(3, int), "b": np.zeros(4, int)}):
        with pytest.raises(ValueError):
            run_files.save_predictions(tmp_path / "bad.npz", bad)
    np.savez(tmp_path / "pickled.npz", deployed=np.array([object()]))
    with pytest.raises(run_files.PredictionsError, match="not a predictions file"):
        run_files.load_predictions(tmp_path / "pickled.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(run_files.PredictionsError):
        run_files.load_predictions(tmp_path / "junk.npz")


def test_the_committed_successor_predictions_reproduce_their_recorded_errors(real_data_dir):
    """Every committed tuned successor run keeps its deployed net's predictions; they give its recorded error."""
    labels = {}
    folders = sorted(sc.OUTPUT_DIR.glob("tuned/*/*/result.json"))
    assert len(folders) >= 36
    for path in folders:
        record = records.read_record(path)
        dataset = record["parameters"]["dataset"]
        if dataset not in labels:
            labels[dataset] = sc.load_split(record["parameters"], "unit", real_data_dir)["y_test"]
        predicted = run_files.load_predictions(path.parent / run_files.PREDICTIONS_FILE, 10000)["deployed"]
        assert np.mean(predicted != labels[dataset]) == pytest.approx(record["evaluation"]["packed"]["error"],
                                                                        abs=1e-9), path


def test_the_runner_offers_ebp_tuned_but_runs_the_successors_by_default():
    import importlib.util
    spec = importlib.util.spec_from_file_location("run_successors", sc.REPO / "scripts" / "run_successors.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    args = script.parse_args([])
    assert args.method == ["ste", "bop", "bayesbinn"]
    jobs = script.select_jobs(script.parse_args(["--method", "ebp-tuned", "ebp-tuned-dropout", "--seed", "0", "1",
                                                 "2"]))
    assert len(jobs) == 2 * 2 * 2 * 3
    assert {p["method"] for p, _ in jobs} == {"ebp-tuned", "ebp-tuned-dropout"}
    assert list(itertools.islice((f.name for _, f in jobs), 2)) == ["ebp-tuned-800", "ebp-tuned-dropout-800"]
