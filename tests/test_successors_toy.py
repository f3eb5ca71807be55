"""successors.toy: STE and BayesBiNN on notebook 03b's toy net (3 inputs, H sign units, one output, ±1 weights):
the loss by hand, the exact mean-field predictive against enumeration of every net and against Monte Carlo, and
training runs that reproduce themselves and learn."""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from successors import bayesbinn, toy


def test_loss_by_hand():
    # W1 columns: unit 1 sees x1 + x2 + 1, unit 2 sees x1 - x2 - 1; W2 = (+1, -1); e^s = 2
    w = [jnp.array([[1.0, 1.0], [1.0, -1.0], [1.0, -1.0]]), jnp.array([[1.0], [-1.0]])]
    real = {"log_scale": jnp.log(2.0)}
    x = jnp.array([[0.5, 0.5, 1.0], [-2.0, 0.0, 1.0]])   # v = (+1, -1): a = 2; v = (-1, -1): a = 0
    y = jnp.array([1.0, -1.0])
    value, stats = toy.loss(w, real, {}, x, y)
    assert stats == {}
    assert float(value) == pytest.approx((np.log1p(np.exp(-4.0)) + np.log(2.0)) / 2, rel=1e-6)
    np.testing.assert_allclose(toy.deployed_probability(w, real, np.asarray(x)), [1 / (1 + np.exp(-4.0)), 0.5])


def test_mean_field_predictive_equals_the_sum_over_every_net():
    hidden = 3                                           # 9 + 3 weights: 4,096 nets
    rng = np.random.default_rng(0)
    lams = [rng.normal(0, 1.0, (3, hidden)), rng.normal(0, 1.0, (hidden, 1))]
    real = {"log_scale": np.log(0.7)}
    x = np.c_[rng.normal(size=(6, 2)), np.ones(6)]
    flat = np.concatenate([lam.ravel() for lam in lams])
    total = np.zeros(len(x))
    for signs in itertools.product((-1.0, 1.0), repeat=flat.size):
        w = np.array(signs)
        q = np.prod((1 + np.tanh(flat) * w) / 2)         # q(w) = Π sigmoid(2 λ_j w_j)
        total += q * toy.deployed_probability([w[:3 * hidden].reshape(3, hidden), w[3 * hidden:, None]], real, x)
    np.testing.assert_allclose(toy.mean_field_probability(lams, real, x), total, rtol=1e-12)


def test_monte_carlo_predictive_converges_to_the_mean_field_one():
    rng = np.random.default_rng(1)
    lams = [jnp.asarray(rng.normal(0, 0.8, (3, 5)), jnp.float32), jnp.asarray(rng.normal(0, 0.8, (5, 1)), jnp.float32)]
    real = {"log_scale": jnp.asarray(0.3)}
    x = np.c_[rng.normal(size=(8, 2)), np.ones(8)]
    exact = toy.mean_field_probability(lams, real, x)
    mc = toy.mc_probability(lams, real, x, jax.random.PRNGKey(0), 4000)
    assert np.abs(mc - exact).max() < 5 * 0.5 / np.sqrt(4000)   # 5 Monte Carlo standard deviations at most
    assert np.abs(mc - exact).max() > 0
    # a confident posterior (|λ| = 30: q is 0 or 1 in float32) is its mode
    sure = [30.0 * jnp.sign(lam) for lam in lams]
    np.testing.assert_allclose(toy.mean_field_probability(sure, real, x),
                               toy.deployed_probability(bayesbinn.deployed({"lam": sure}), real, x), rtol=1e-12)


@pytest.mark.parametrize("method,hyper", [("ste", {"learning_rate": 0.1}),
                                          ("bayesbinn", {**bayesbinn.FIXED, "alpha": 1e-2, "n_data": 60.0,
                                                         "tau": 1.0, "lambda_init": 15.0})])
@pytest.mark.parametrize("x64", [False, True])
def test_training_reproduces_itself_and_learns_a_line(method, hyper, x64):
    rng = np.random.default_rng(2)
    points = rng.uniform(-1, 1, (60, 2))
    x, y = np.c_[points, np.ones(60)], np.where(points @ [1.0, 1.0] + 1 > 0, 1.0, -1.0)  # a line a unit draws
    first, again = (toy.train(method, x, y, 3, hyper, seed=0, epochs=300, batch_size=20, x64=x64) for _ in range(2))
    for a, b in zip(jax.tree_util.tree_leaves(first), jax.tree_util.tree_leaves(again)):
        np.testing.assert_array_equal(a, b)
    assert first["real"]["log_scale"].dtype == (np.float64 if x64 else np.float32)
    p = toy.deployed_probability(toy.deployed(method, first), first["real"], x)
    assert np.mean((p > 0.5) != (y > 0)) < 0.1
    start = toy.train(method, x, y, 3, hyper, seed=0, epochs=0, batch_size=20, x64=x64)
    with jax.enable_x64(x64):   # a float64 state is read as it is
        trained, untrained = (float(toy.loss(toy.deployed(method, s), s["real"], {}, x, y)[0]) for s in (first, start))
    assert trained < untrained



def test_bayesbinn_starts_at_plus_or_minus_lambda_init_as_the_authors_do():
    # the authors' two-moons run: lamda_init=15, lamda_std=0, each sign with probability 1/2
    state = toy.init("bayesbinn", jax.random.PRNGKey(0), 50, {"lambda_init": 15.0})
    lam = np.concatenate([np.asarray(a).ravel() for a in state["lam"]])
    np.testing.assert_array_equal(np.abs(lam), 15.0)
    assert 0.3 < np.mean(lam > 0) < 0.7                  # 200 signs: a fair coin lands here with p > 0.99999


def test_noisy_probability_is_the_sum_over_the_units_noise():
    # against Monte Carlo over the unit noise: v_i = sign(x·W1_i + ε_i), y = sign(v·W2 + ε)
    rng = np.random.default_rng(3)
    w = [rng.choice([-1.0, 1.0], (3, 3)), rng.choice([-1.0, 1.0], (3, 1))]
    x = np.c_[rng.normal(size=(4, 2)), np.ones(4)]
    eps = rng.standard_normal((200_000, 4, 3))
    v = np.where(x @ w[0] + eps >= 0, 1.0, -1.0)
    mc = np.mean(v @ w[1][:, 0] + rng.standard_normal((200_000, 4)) >= 0, axis=0)
    exact = np.asarray(toy.noisy_probability([jnp.asarray(a) for a in w], jnp.asarray(x)))
    assert np.abs(mc - exact).max() < 5 * 0.5 / np.sqrt(200_000)


def test_bayesbinn_on_the_noisy_model_learns_a_line_and_rejects_an_unknown_model():
    rng = np.random.default_rng(2)
    points = rng.uniform(-1, 1, (60, 2))
    x, y = np.c_[points, np.ones(60)], np.where(points @ [1.0, 1.0] + 1 > 0, 1.0, -1.0)
    hyper = {**bayesbinn.FIXED, "alpha": 1e-2, "n_data": 60.0, "tau": 1.0, "lambda_init": 15.0}
    state = toy.train("bayesbinn", x, y, 3, hyper, seed=0, epochs=300, batch_size=20, model="noisy")
    p = np.asarray(toy.noisy_probability(toy.deployed("bayesbinn", state), jnp.asarray(x)))
    assert np.mean((p > 0.5) != (y > 0)) < 0.15
    with pytest.raises(ValueError, match="model must be one of"):
        toy.train("bayesbinn", x, y, 3, hyper, seed=0, epochs=1, batch_size=20, model="noise")
