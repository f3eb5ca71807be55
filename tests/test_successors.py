"""EBP's successors (package successors, reproduction.successors): each method's rule against its equations, by
hand on nets small enough to write out; the deployed net through packed inference; the harness's records."""
from __future__ import annotations

import math
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_resumes_to_the_same_record

from reproduction import records
from reproduction import successors as sc
from reproduction.folder import read_result
from successors import bayesbinn, bop, evaluate, mlp, ste


def tiny_net(sizes=(2, 2, 3), seed=0):
    """A net of a few weights with BN running statistics, its first BN scale γ < 0 (the others > 0)."""
    rng = np.random.default_rng(seed)
    real = mlp.init_real(sizes)
    signs = np.where(np.arange(sizes[1]) == 0, -1.0, 1.0)
    real["gamma1"] = jnp.asarray(signs * rng.uniform(0.5, 2.0, sizes[1]), jnp.float32)
    real["beta1"] = jnp.asarray(rng.normal(0, 0.5, sizes[1]), jnp.float32)
    real["bias"] = jnp.asarray(rng.normal(0, 0.5, sizes[-1]), jnp.float32)
    stats = {"mean1": jnp.asarray(rng.normal(0, 0.3, sizes[1]), jnp.float32),
             "var1": jnp.asarray(rng.uniform(0.5, 2.0, sizes[1]), jnp.float32)}
    return real, stats


# ----------------------------------------------------------------------------------------------------------
# STE: its gradient is that of the surrogate clip(w, -1, 1)
# ----------------------------------------------------------------------------------------------------------

def test_ste_gradient_equals_the_gradient_of_the_clipped_identity_surrogate():
    real, stats = tiny_net((4, 3, 3))
    rng = np.random.default_rng(1)
    latent = [jnp.asarray(rng.uniform(-1.6, 1.6, s), jnp.float32) for s in ((4, 3), (3, 3))]
    x, y = jnp.asarray(rng.normal(size=(8, 4)), jnp.float32), jnp.asarray(rng.integers(0, 3, 8))

    def through_ste(ws):
        return mlp.loss([ste.ste_sign(w) for w in ws], real, stats, x, y)[0]

    def surrogate(ws):  # value L(sign w), gradient L'(sign w) · d clip(w)/dw
        return mlp.loss([mlp.binary(w) + jnp.clip(w, -1, 1) - jax.lax.stop_gradient(jnp.clip(w, -1, 1))
                         for w in ws], real, stats, x, y)[0]

    g_ste, g_sur = jax.grad(through_ste)(latent), jax.grad(surrogate)(latent)
    for a, b, w in zip(g_ste, g_sur, latent):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        assert np.all(np.asarray(a)[np.abs(np.asarray(w)) > 1] == 0)  # cancelled outside [-1, 1]
        assert np.any(np.asarray(a)[np.abs(np.asarray(w)) < 1] != 0)
    assert float(through_ste(latent)) == pytest.approx(float(surrogate(latent)), rel=1e-6)  # b + c - c rounds


def test_ste_step_clips_the_latent_weights():
    sizes = mlp.layer_sizes((5,))
    state = ste.init(jax.random.PRNGKey(0), sizes, {})
    x, y = jnp.ones((4, 784), jnp.float32), jnp.arange(4)
    new, _ = ste.step(state, x, y, None, {"learning_rate": 10.0, "decay": 1.0})
    assert all(float(jnp.abs(w).max()) <= 1.0 for w in new["latent"])
    assert any(float(jnp.abs(w).max()) == 1.0 for w in new["latent"])


# ----------------------------------------------------------------------------------------------------------
# Bop: the flip rule by hand
# ----------------------------------------------------------------------------------------------------------

def test_bop_flips_where_the_average_is_strong_and_agrees_with_the_weight():
    # γ = 0.5, τ = 0.1: m = 0.5·m0 + 0.5·g
    w = jnp.array([1.0, 1.0, -1.0, -1.0, 1.0])
    m0 = jnp.array([0.0, 0.2, 0.0, 0.0, 0.0])
    g = jnp.array([0.4, -0.5, -0.3, 0.1, 0.1])
    new_w, m = bop.flip(w, m0, g, 0.5, 0.1)
    # m = [0.2, -0.15, -0.15, 0.05, 0.05]
    np.testing.assert_allclose(m, [0.2, -0.15, -0.15, 0.05, 0.05], rtol=1e-6)
    # +1 with m = 0.2 > τ flips; +1 with m < 0 stays; -1 with m = -0.15 flips; |m| = 0.05 <= τ: both stay
    assert new_w.tolist() == [-1.0, 1.0, 1.0, -1.0, 1.0]


def test_bop_step_applies_the_flip_rule_to_the_loss_gradient():
    sizes = (784, 3, 10)
    state = bop.init(jax.random.PRNGKey(0), sizes, {})
    rng = np.random.default_rng(0)
    x, y = jnp.asarray(rng.normal(size=(16, 784)), jnp.float32), jnp.asarray(rng.integers(0, 10, 16))
    hyper = {"gamma": 0.3, "tau": 1e-4, "adam_learning_rate": 1e-3, "decay": 1.0}
    new, _ = bop.step(state, x, y, None, hyper)
    g = jax.grad(lambda ws: mlp.loss(ws, state["real"], state["stats"], x, y)[0])(state["w"])
    for w, m, gl, w1, m1 in zip(state["w"], state["m"], g, new["w"], new["m"]):
        expected_w, expected_m = bop.flip(w, m, gl, 0.3, 1e-4)
        np.testing.assert_array_equal(w1, expected_w)
        np.testing.assert_allclose(m1, expected_m, rtol=1e-6)
    assert sum(int(jnp.sum(a != b)) for a, b in zip(state["w"], new["w"])) > 0


# ----------------------------------------------------------------------------------------------------------
# BayesBiNN: the natural-parameter step by hand, and the predictive's limits
# ----------------------------------------------------------------------------------------------------------

def test_bayesbinn_natural_step_by_hand():
    lam, delta, g = jnp.array([0.5, -1.0]), jnp.array([0.1, 0.2]), jnp.array([0.3, -0.2])
    # τ = 1: w_r = tanh(0.6) = 0.537050, tanh(-0.8) = -0.664037; 1 - w_r² = 0.711578, 0.559055
    # μ = tanh(0.5) = 0.462117, tanh(-1) = -0.761594; 1 - μ² = 0.786448, 0.419974
    # s = 0.711578 / 0.786448 = 0.904800, 0.559055 / 0.419974 = 1.331165
    np.testing.assert_allclose(bayesbinn.scale_s(lam, delta, 1.0), [0.904800, 1.331165], rtol=1e-5)
    # α = 0.1, N = 10, λ0 = 0: λ = 0.9·0.5 - 0.1·10·0.904800·0.3 = 0.178560;
    #                          λ = 0.9·(-1) - 0.1·10·1.331165·(-0.2) = -0.633767
    new = bayesbinn.natural_step(lam, delta, g, 0.1, 1.0, 10.0, 0.0)
    np.testing.assert_allclose(new, [0.178560, -0.633767], rtol=1e-5)
    # the prior pulls λ towards λ0 by α·λ0: λ0 = 1 adds 0.1 to both
    np.testing.assert_allclose(bayesbinn.natural_step(lam, delta, g, 0.1, 1.0, 10.0, 1.0), new + 0.1, rtol=1e-5)


def test_bayesbinn_step_is_the_natural_step_at_its_relaxed_sample():
    sizes = (784, 3, 10)
    hyper = {"alpha": 0.01, "decay": 1.0, "n_data": 100.0, **bayesbinn.FIXED, "tau": 0.5, "lambda_init": 1.0}
    state = bayesbinn.init(jax.random.PRNGKey(0), sizes, hyper)
    rng = np.random.default_rng(0)
    x, y = jnp.asarray(rng.normal(size=(16, 784)), jnp.float32), jnp.asarray(rng.integers(0, 10, 16))
    key = jax.random.PRNGKey(3)
    new, _ = bayesbinn.step(state, x, y, key, hyper)
    deltas = [bayesbinn.gumbel_delta(k, lam.shape) for k, lam in zip(jax.random.split(key, 2), state["lam"])]
    w_r = [bayesbinn.relaxed(lam, d, 0.5) for lam, d in zip(state["lam"], deltas)]
    g = jax.grad(lambda ws: mlp.loss(ws, state["real"], state["stats"], x, y)[0])(w_r)
    for lam, d, gl, lam1 in zip(state["lam"], deltas, g, new["lam"]):
        np.testing.assert_allclose(lam1, bayesbinn.natural_step(lam, d, gl, 0.01, 0.5, 100.0, 0.0), rtol=1e-5,
                                   atol=1e-6)


def test_relaxed_sample_tends_to_a_sample_of_q_as_tau_goes_to_0():
    # limit: τ → 0 gives w_r = sign(λ + δ), which is +1 with probability sigmoid(2λ)
    lam = jnp.full(40000, 0.4)
    delta = bayesbinn.gumbel_delta(jax.random.PRNGKey(0), lam.shape)
    w = bayesbinn.relaxed(lam, delta, 1e-10)
    np.testing.assert_array_equal(w, jnp.sign(lam + delta))
    p = 1 / (1 + math.exp(-0.8))  # 0.68997
    assert abs(float(jnp.mean(w > 0)) - p) < 4 * math.sqrt(p * (1 - p) / 40000)


def test_mc_predictive_converges_to_the_enumerated_mean_field_predictive():
    sizes = (2, 2, 3)  # 4 + 6 weights: 1,024 nets to enumerate
    real, stats = tiny_net(sizes)
    lam = [jnp.asarray(np.random.default_rng(2).normal(0, 0.7, s), jnp.float32) for s in ((2, 2), (2, 3))]
    state = {"lam": lam, "real": real, "stats": stats}
    x = np.random.default_rng(3).normal(size=(5, 2)).astype(np.float32)
    exact = bayesbinn.enumerated_probabilities(state, x)
    np.testing.assert_allclose(exact.sum(axis=1), 1.0, rtol=1e-9)
    mc = bayesbinn.mc_probabilities(state, x, jax.random.PRNGKey(0), 3000)
    # each probability's Monte Carlo std is at most 0.5/sqrt(3000) = 0.009: 5 of them
    np.testing.assert_allclose(mc, exact, atol=0.046)
    assert np.abs(mc - exact).max() > 0  # a Monte Carlo estimate, not the enumeration itself


def test_confident_posterior_predictive_is_the_mode_nets_softmax():
    # limit: |λ| large (sigmoid(2λ) = 1 in float32): every sample is the mode sign(λ)
    sizes = (2, 2, 3)
    real, stats = tiny_net(sizes)
    signs = [np.where(np.random.default_rng(4).random(s) < 0.5, -1.0, 1.0) for s in ((2, 2), (2, 3))]
    state = {"lam": [jnp.asarray(30.0 * s, jnp.float32) for s in signs], "real": real, "stats": stats}
    x = np.random.default_rng(5).normal(size=(7, 2)).astype(np.float32)
    mode = mlp.softmax(mlp.predict_logits(bayesbinn.deployed(state), real, stats, x))
    np.testing.assert_allclose(bayesbinn.mc_probabilities(state, x, jax.random.PRNGKey(1), 5), mode, rtol=1e-12)
    np.testing.assert_allclose(bayesbinn.enumerated_probabilities(state, x), mode, rtol=1e-6)


# ----------------------------------------------------------------------------------------------------------
# The deployed net: BN folded into thresholds and signs, packed inference equal to the float evaluation
# ----------------------------------------------------------------------------------------------------------

def test_folded_packed_net_equals_the_float_net_unit_by_unit():
    sizes = (784, 40, 30, 10)
    rng = np.random.default_rng(6)
    real, stats = mlp.init_real(sizes), mlp.init_stats(sizes)
    for l, n in ((1, 40), (2, 30)):
        real[f"gamma{l}"] = jnp.asarray(rng.choice([-1, 1], n) * rng.uniform(0.2, 2, n), jnp.float32)
        real[f"beta{l}"] = jnp.asarray(rng.normal(0, 1, n), jnp.float32)
        stats[f"mean{l}"] = jnp.asarray(rng.normal(0, 3, n), jnp.float32)
        stats[f"var{l}"] = jnp.asarray(rng.uniform(1, 30, n), jnp.float32)
    real["bias"] = jnp.asarray(rng.normal(0, 1, 10), jnp.float32)
    weights = [jnp.asarray(rng.choice([-1.0, 1.0], s), jnp.float32) for s in zip(sizes[:-1], sizes[1:])]
    x = rng.normal(size=(400, 784)).astype(np.float32)
    y = rng.integers(0, 10, 400)
    check = evaluate.packed_check(weights, real, stats, x, y)
    assert check["mismatches"] == 0
    float_pred = evaluate.float_logits(weights, real, stats, x).argmax(axis=1)
    assert check["error"] == pytest.approx(np.mean(float_pred != y))
    # the float32 JAX evaluation agrees too, on all but near-ties (none expected here)
    assert np.array_equal(mlp.predict_logits(weights, real, stats, x).argmax(axis=1), float_pred)


def test_fold_refuses_latent_weights_and_a_zero_bn_scale():
    sizes = (784, 4, 10)
    real, stats = mlp.init_real(sizes), mlp.init_stats(sizes)
    latent = [jnp.full((784, 4), 0.3), jnp.ones((4, 10))]
    with pytest.raises(ValueError, match="other than ±1"):
        evaluate.fold(latent, real, stats)
    real["gamma1"] = jnp.array([1.0, 0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="γ is 0"):
        evaluate.fold([jnp.ones((784, 4)), jnp.ones((4, 10))], real, stats)


def test_nll_and_ece_by_hand():
    p = np.array([[0.9, 0.1], [0.6, 0.4]])
    labels = np.array([0, 1])
    assert evaluate.nll(p, labels) == pytest.approx(-(math.log(0.9) + math.log(0.4)) / 2)
    # confidences 0.9 (right) and 0.6 (wrong), in different bins: ECE = ½|1 - 0.9| + ½|0 - 0.6| = 0.35
    assert evaluate.reliability(p, labels)["ece"] == pytest.approx(0.35)


# ----------------------------------------------------------------------------------------------------------
# The harness
# ----------------------------------------------------------------------------------------------------------

def test_parameters_protocol_labels_and_bad_input():
    full = sc.make_parameters("bop", "mnist", "800")
    assert sc.protocol_label(full) == "tuned" and sc.n_tuned(full) == 3 and len(sc.grid_keys(full)) == 18
    assert sc.protocol_label(sc.make_parameters("bop", "mnist", "800", "smoke")) == "smoke"
    assert "SMOKE" in sc.describe_protocol(sc.make_parameters("ste", "mnist", "800", "smoke"))
    assert sc.run_dir(sc.make_parameters("ste", "fashion-mnist", "800-800", "smoke", seed=2)).parts[-3:] == (
        "smoke", "fashion-mnist", "ste-800-800-seed2")
    for args, message in [(("sgd", "mnist", "800"), "unknown method"), (("ste", "cifar", "800"), "unknown dataset"),
                          (("ste", "mnist", "8x"), "architecture"), (("ste", "mnist", "800", "fast"), "profile")]:
        with pytest.raises(ValueError, match=message):
            sc.make_parameters(*args)
    with pytest.raises(ValueError, match="grid"):
        sc.make_parameters("ste", "mnist", "800", grid={"gamma": [0.1]})
    with pytest.raises(ValueError, match="tune_seed"):
        sc.make_parameters("ste", "mnist", "800", tune_seed=-1)


# Each method's published MNIST (Bop: CIFAR-10) setting, from the authors' code (notebooks/successors.ipynb gives the
# files and lines): the grid recorded in every run's parameters must hold it, the fixed values must be it.
PUBLISHED = {
    "ste": ({"learning_rate": 1e-3}, {"latent_bound": 1.0, "glorot_lr_scale": 1.0}),  # BinaryConnect mnist.py
    "bop": ({"gamma": 1e-4, "tau": 1e-8}, {"adam_learning_rate": 1e-2}),  # rethinking-bnn-optimization bop_sec52
    "bayesbinn": ({"alpha": 1e-4}, {"tau": 1e-10, "lambda_init": 10.0, "lambda_prior": 0.0}),  # main_mnist.py
}
OTHER_PUBLISHED = [("bop", {"gamma": 1e-3, "tau": 1e-6}), ("bop", {"gamma": 1e-2, "tau": 1e-7}),  # bop set, Bop()
                   ("ste", {"learning_rate": 1e-4})]  # BayesBiNN's STE-Adam baseline (main_mnist.py --lr)


@pytest.mark.parametrize("method", sorted(PUBLISHED))
def test_recorded_grid_holds_and_fixed_values_are_the_published_setting(method):
    params = sc.make_parameters(method, "mnist", "800")
    tuned, fixed = PUBLISHED[method]
    points = sc.grid_keys(params)
    published = [{**tuned, **extra} for m, extra in [(method, {})] + OTHER_PUBLISHED if m == method]
    for setting in published:
        assert any(all(p[k] == v for k, v in setting.items()) for p in points), setting
    assert {k: params["fixed"][k] for k in fixed} == fixed
    assert "unit" in params["preprocessing_grid"] and params["batch_size"] == 100  # every method's published batch
    assert mlp.BN_MOMENTUM == 0.15 and mlp.BN_EPSILON == 1e-4  # BinaryConnect's and BayesBiNN's MNIST code


def test_ste_latent_weights_start_in_the_bound_and_step_by_the_glorot_factor():
    sizes = mlp.layer_sizes((5,))
    state = ste.init(jax.random.PRNGKey(0), sizes, dict(ste.FIXED))
    assert all(float(jnp.abs(w).max()) <= 1.0 and float(jnp.abs(w).max()) > 0.9 for w in state["latent"])
    rng = np.random.default_rng(0)
    x, y = jnp.asarray(rng.normal(size=(8, 784)), jnp.float32), jnp.asarray(rng.integers(0, 10, 8))
    state["latent"] = [0.5 * w for w in state["latent"]]  # away from the clip
    hyper = {"learning_rate": 1e-4, "decay": 1.0}
    plain, _ = ste.step(state, x, y, None, {**hyper, **ste.FIXED, "glorot_lr_scale": 0.0})
    scaled, _ = ste.step(state, x, y, None, {**hyper, **ste.FIXED})
    assert ste.glorot_factor(784, 800) == pytest.approx(32.496, abs=1e-3)
    for w0, a, b in zip(state["latent"], plain["latent"], scaled["latent"]):
        # float32 rounding of w0 + step: a few ulps of 0.5 (6e-8 each), times the factor
        np.testing.assert_allclose(b - w0, ste.glorot_factor(*w0.shape) * (a - w0), rtol=1e-3, atol=4e-6)
    for key in ("real",):  # the reals take the plain step either way
        for a, b in zip(jax.tree_util.tree_leaves(plain[key]), jax.tree_util.tree_leaves(scaled[key])):
            np.testing.assert_array_equal(a, b)


def test_bayesbinn_starts_at_plus_or_minus_lambda_init():
    state = bayesbinn.init(jax.random.PRNGKey(0), (784, 30, 10), dict(bayesbinn.FIXED))
    lam = np.concatenate([np.asarray(a).ravel() for a in state["lam"]])
    assert set(np.unique(lam)) == {-10.0, 10.0} and abs(np.mean(lam > 0) - 0.5) < 0.03


SMALL = {"n_train": 700, "n_validation": 200, "grid_epochs": 1, "max_epochs": 3, "patience": 1,
         "stop_patience": 3, "mc_samples": 2, "preprocessing_grid": ["unit"]}


@pytest.mark.parametrize("method,grid", [("bayesbinn", {"alpha": [1e-4, 1e-3]})])
def test_an_interrupted_run_resumes_to_the_same_record(real_data_dir, tmp_path, method, grid):
    params = sc.make_parameters(method, "mnist", "16", grid=grid, **SMALL)
    quiet = {"echo": lambda *_: None, "allow_dirty": True}
    whole = sc.run(params, tmp_path / "whole", real_data_dir, **quiet)
    assert whole["finished"] and whole["protocol"] == "shortened" and len(whole["grid"]["points"]) == 2
    assert whole["evaluation"]["packed"]["mismatches"] == 0
    assert set(whole["evaluation"]["outputs"]) == {"deployed", "predictive", "mean"}
    assert whole["final"]["test_error"] == whole["history"][whole["best_epoch"] - 1]["test_error"]
    assert (tmp_path / "whole" / sc.NET_FILE).exists() and not (tmp_path / "whole" / sc.CHECKPOINT_FILE).exists()
    assert_resumes_to_the_same_record(sc, params, whole, tmp_path / "part", real_data_dir)


def test_core_seconds_do_not_count_time_the_process_spends_waiting(real_data_dir, tmp_path, monkeypatch):
    """A run's CPU seconds are what its work cost, where its wall seconds also count a pause (or other jobs): an
    epoch that waits 0.4 s longer lasts 0.4 s more on the wall clock, not in core-seconds."""
    train_epoch = sc.Trainer.train_epoch

    def waiting(self, *args):
        time.sleep(0.4)
        return train_epoch(self, *args)

    monkeypatch.setattr(sc.Trainer, "train_epoch", waiting)
    params = sc.make_parameters("ste", "mnist", "16", grid={"learning_rate": [1e-3]}, **SMALL)
    record = sc.run(params, tmp_path, real_data_dir, echo=lambda *_: None, allow_dirty=True)
    history, evaluation = record["history"], record["evaluation"]
    assert all(h["train_seconds"] >= 0.4 > h["cpu_seconds"] + 0.2 for h in history)
    point = record["grid"]["points"][0]  # its first epoch compiles: CPU seconds that are the run's cost too
    assert point["train_seconds"] >= 0.4 and point["cpu_seconds"] > 0 and "cpu_seconds" not in record["grid"]["chosen"]
    best = record["best_epoch"]
    assert evaluation["cpu_seconds_to_best_epoch"] == pytest.approx(sum(h["cpu_seconds"] for h in history[:best]),
                                                                     abs=0.01 * best)
    assert evaluation["cpu_seconds_per_epoch"] == pytest.approx(np.median([h["cpu_seconds"] for h in history]),
                                                                 abs=0.001)


def test_other_seeds_train_at_the_point_chosen_by_the_grid_of_seed_0(real_data_dir, tmp_path):
    quiet = {"echo": lambda *_: None, "allow_dirty": True}
    small = {**SMALL, "max_epochs": 2}
    grid = {"gamma": [1e-4, 1e-3], "tau": [1e-6]}
    params = sc.make_parameters("bop", "mnist", "16", grid=grid, seed=1, tune_seed=0, **small)
    seed0 = sc.make_parameters("bop", "mnist", "16", grid=grid, tune_seed=0, **small)
    folder = tmp_path / "mnist" / sc.run_name(params)
    record = sc.run(params, folder, real_data_dir, **quiet)
    source = read_result(folder.parent / sc.run_name(seed0))  # the grid of seed 0, run first, no training yet
    assert source["parameters"] == seed0 and source["epochs_done"] == 0 and not source["finished"]
    assert record["finished"] and record["grid"]["points"] == source["grid"]["points"]
    assert record["grid"]["tuned_on_seed"] == 0 and record["grid"]["chosen"] == source["grid"]["chosen"]
    assert "grid run once, on seed 0" in record["protocol_description"] and records.record_problems(record) == []
    assert record["train_seconds"] == pytest.approx(sum(h["train_seconds"] for h in record["history"]), abs=0.02)
    finished0 = sc.run(seed0, folder.parent / sc.run_name(seed0), real_data_dir, **quiet)  # resumes after the grid
    assert finished0["finished"] and finished0["grid"]["points"] == source["grid"]["points"]
    assert "its choice used by every seed" in finished0["protocol_description"]
    assert sc.protocol_label(sc.make_parameters("bop", "mnist", "800", seed=1, tune_seed=0)) == "shortened"
    assert sc.protocol_label(sc.make_parameters("bop", "mnist", "800", seed=1)) == "tuned"


def test_runner_orders_runs_seed_0_first_and_mnist_800_first(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("run_successors", sc.REPO / "scripts" / "run_successors.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    jobs = script.select_jobs(script.parse_args(["--seed", "2", "0", "1", "--out", str(tmp_path)]))
    order = [(p["seed"], p["dataset"], p["architecture"], p["method"]) for p, _ in jobs]
    assert len(order) == 36 and order[:3] == [(0, "mnist", "800", m) for m in ("ste", "bop", "bayesbinn")]
    assert [s for s, *_ in order] == sorted(s for s, *_ in order)  # every seed-0 run before any other
    jobs = script.select_jobs(script.parse_args(["--seed", "0", "1", "2", "--tune-seed", "1", "--out", str(tmp_path)]))
    assert [p["seed"] for p, _ in jobs[:12]] == [1] * 12 and all(p["tune_seed"] == 1 for p, _ in jobs)


def test_the_sensitivity_profile_scores_the_grid_later_and_stops_later_and_says_so(tmp_path):
    import importlib.util
    params = sc.make_parameters("ste", "fashion-mnist", "800", "sensitivity", seed=1)
    tuned_params = sc.make_parameters("ste", "fashion-mnist", "800", seed=1)
    assert (params["grid_epochs"], params["stop_patience"], params["patience"]) == (10, 30, 5)
    assert {k: v for k, v in params.items() if k not in ("grid_epochs", "stop_patience", "profile")} == {
        k: v for k, v in tuned_params.items() if k not in ("grid_epochs", "stop_patience", "profile")}
    assert sc.protocol_label(params) == "sensitivity" and sc.protocol_label(tuned_params) == "tuned"
    assert sc.protocol_label(sc.make_parameters("ste", "fashion-mnist", "800", "sensitivity", max_epochs=50)) == \
        "shortened"
    assert sc.run_dir(params).parts[-3:] == ("sensitivity", "fashion-mnist", "ste-800-seed1")
    spec = importlib.util.spec_from_file_location("run_successors", sc.REPO / "scripts" / "run_successors.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (p, _), = script.select_jobs(script.parse_args(["--method", "ste", "--arch", "800", "--dataset", "mnist",
                                                    "--stop-patience", "40", "--patience", "8", "--out",
                                                    str(tmp_path)]))
    assert (p["stop_patience"], p["patience"]) == (40, 8)


def test_every_registered_method_has_the_face_the_harness_reads_and_the_registry_imports_none():
    """Each line of successors.registry names a module with the face its docstring lists (EBP's variants bring a
    Trainer in place of init / step); the command line parses the registry without importing JAX."""
    from successors import registry
    assert set(sc.methods()) == set(registry.METHODS) and registry.SUCCESSORS == ("ste", "bop", "bayesbinn")
    for name, module in sc.methods().items():
        assert module.NAME == name and isinstance(module.GRID, dict) and isinstance(module.FIXED, dict), name
        assert all(callable(getattr(module, f, None)) for f in ("init", "step", "deployed")) or hasattr(
            module, "Trainer"), name
    assert [n for n, m in sc.methods().items() if hasattr(m, "predictive_outputs")] == ["bayesbinn"]
    probe = "import sys; from successors import registry; print('jax' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=sc.REPO)
    assert done.stdout.split() == ["False"]
    with pytest.raises(ValueError, match="unknown method 'sgd'"):
        registry.method("sgd")
