"""STE and BayesBiNN on the toy net of notebook 03b: their own steps (ste.step, bayesbinn.step), another net.

The net, for inputs x = (x1, x2, 1) and labels y = ±1:

    v = sign(x W1)             W1 ∈ {−1, +1}^{3 x H}; the constant input's weight is the unit's ±1 bias
    a = v W2                   W2 ∈ {−1, +1}^{H x 1}; for odd H, a is one of ±1, ±3, ..., ±H
    P(y = +1 | x) = sigmoid(e^s a)

the ±1 network of notebook 03b without its unit noise, plus one real, the output scale e^s (successors.mlp's
softmax temperature, for two classes: the softmax of (0, e^s a) is sigmoid(e^s a)). The scale sets the confidence
only: the deployed classifier is sign(a). Hidden units are mlp.sign_htanh (sign forward, the hard-tanh gradient
straight through). Unlike successors.mlp there is no batch normalisation (it would give every hidden unit a real
threshold, a finer boundary than the toy net's ±1 bias can draw) and no per-class output weights and bias (two
classes' ±1 columns differ by −2, 0 or 2, and their biases by a real: another, richer net).

`noisy_loss` is the other model: the same ±1 weights under notebook 03b's unit noise (every unit adds N(0, 1) to
its input; no output scale), the likelihood EBP itself approximates; `train(..., model="noisy")` uses it.

`train` runs a method's own `step` (the rule of successors.ste or successors.bayesbinn, unchanged) with `loss` of
this net. Outputs: `deployed_probability` (a ±1 net: STE's sign(w_r), BayesBiNN's mode sign(λ)) and, for
BayesBiNN, `mean_field_probability`: its predictive Σ_w q(w) P(y = +1 | x, w) summed exactly (the limit of the Monte
Carlo predictive, `bayesbinn.mc_probabilities`, as the number of samples grows), since given x the hidden units of
a mean-field net are independent and a is a sum of H independent ±1 terms.
"""
from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from successors import bayesbinn, mlp, ste

TOY_METHODS = {"ste": ste, "bayesbinn": bayesbinn}  # the successors the toy problem compares
ROWS = np.array(list(itertools.product([-1.0, 1.0], repeat=3)))   # the 8 possible weight rows of a hidden unit


def logits(weights: list, real: dict, x):
    """z = e^s · sign(x W1) W2, one per point (sign with the straight-through gradient)."""
    return jnp.exp(real["log_scale"]) * (mlp.sign_htanh(x @ weights[0]) @ weights[1])[:, 0]


def loss(weights: list, real: dict, stats: dict, x, y):
    """Mean −ln sigmoid(y z) over the batch, y = ±1; `stats` (none: no batch normalisation) passes through."""
    return jnp.mean(jax.nn.softplus(-y * logits(weights, real, x))), stats


def noisy_probability(weights: list, x):
    """P(y = +1 | x, W) of notebook 03b's model with unit noise: v_i = sign(x·W1_i + ε_i), y = sign(v·W2 + ε),
    every ε ~ N(0, 1). Given x the v_i are independent with P(v_i = +1) = Φ(x·W1_i), so the sum over the 2^H
    patterns v is exact: Σ_v P(v) Φ(v·W2). Smooth in real (relaxed) weights, as BayesBiNN's step needs."""
    q = jax.scipy.special.ndtr(x @ weights[0])                                  # (points, H)
    hidden = q.shape[1]
    patterns = jnp.asarray(list(itertools.product([-1.0, 1.0], repeat=hidden)), q.dtype)   # (2^H, H)
    p_v = jnp.prod(jnp.where(patterns[None] > 0, q[:, None, :], 1 - q[:, None, :]), axis=2)   # (points, 2^H)
    return p_v @ jax.scipy.special.ndtr(patterns @ weights[1][:, 0])


def noisy_loss(weights: list, real: dict, stats: dict, x, y):
    """Mean −ln P(y | x, W) under the unit-noise model (noisy_probability); `real` is unused (the model has no
    output scale: its output noise has variance 1), `stats` passes through."""
    p = jnp.clip(noisy_probability(weights, x), 1e-12, 1 - 1e-12)
    return -jnp.mean(jnp.where(y > 0, jnp.log(p), jnp.log1p(-p))), stats


LOSSES = {"noiseless": loss, "noisy": noisy_loss}


def init(method: str, key, hidden: int, hyper: dict, dtype=jnp.float32) -> dict:
    """The method's start on the (3, hidden, 1) net: STE's Glorot-uniform latent weights (as ste.init), or
    BayesBiNN's λ = ±lambda_init, each sign with probability 1/2 (as bayesbinn.init, the authors' rule:
    github.com/team-approx-bayes/BayesBiNN optimizers/BayesBiNN.py line 72; their two-moons run in
    synthetic_data.ipynb passes lamda_init=15, lamda_std=0); e^s = 1/sqrt(hidden) (mlp.init_real); Adam's state."""
    sizes = (3, hidden, 1)
    keys = jax.random.split(key, 2)
    real = {"log_scale": jnp.asarray(-0.5 * np.log(hidden), dtype)}
    if method == "ste":
        latent = [jax.random.uniform(k, s, dtype, -np.sqrt(6 / sum(s)), np.sqrt(6 / sum(s)))
                  for k, s in zip(keys, zip(sizes[:-1], sizes[1:]))]
        params = {"latent": latent, "real": real}
        return {**params, "stats": {}, "adam": ste.ADAM.init(params)}
    lam = [hyper["lambda_init"] * jnp.where(jax.random.bernoulli(k, 0.5, s), 1.0, -1.0).astype(dtype)
           for k, s in zip(keys, zip(sizes[:-1], sizes[1:]))]
    return {"lam": lam, "real": real, "stats": {}, "adam": bayesbinn.ADAM.init(real)}


@functools.partial(jax.jit, static_argnums=(0, 6))
def _run(method: str, state: dict, xb, yb, key, hyper: dict, model: str = "noiseless") -> dict:
    def body(carry, inputs):
        i, x, y = inputs
        return TOY_METHODS[method].step(carry, x, y, jax.random.fold_in(key, i), hyper, loss=LOSSES[model])
    return jax.lax.scan(body, state, (jnp.arange(len(xb)), xb, yb))[0]


def train(method: str, x: np.ndarray, y: np.ndarray, hidden: int, hyper: dict, seed: int, epochs: int,
          batch_size: int, x64: bool = False, model: str = "noiseless") -> dict:
    """`epochs` passes over (x, y) in minibatches of `batch_size` (a new random order each pass, a last partial
    batch dropped), each one `step` of `method` ("ste" or "bayesbinn"); the seed sets the start, the orders and
    the method's noise. `hyper`: the step's hyperparameters (floats; the step-size factor `decay` is 1).
    x64: train in float64 (under jax.enable_x64; the methods' random draws stay float32), so that the rounding of
    another CPU's instructions is less likely to change the run (the state is then float64).
    model: "noiseless" (`loss`, the net above) or "noisy" (`noisy_loss`, notebook 03b's unit-noise model)."""
    if model not in LOSSES:
        raise ValueError(f"model must be one of {sorted(LOSSES)}, got {model!r}")
    rng = np.random.default_rng(seed)
    n = len(x) // batch_size * batch_size
    idx = np.array([rng.permutation(len(x))[:n] for _ in range(epochs)], int).reshape(-1, batch_size)
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        hyper = {k: jnp.asarray(v, dtype) for k, v in {"decay": 1.0, **hyper}.items()}
        key_init, key_run = jax.random.split(jax.random.PRNGKey(seed))
        state = init(method, key_init, hidden, hyper, dtype)
        return _run(method, state, jnp.asarray(x[idx], dtype), jnp.asarray(y[idx], dtype), key_run, hyper, model)


def deployed(method: str, state: dict) -> list:
    """The ±1 net: STE's sign(w_r), BayesBiNN's mode sign(λ) (read under jax.enable_x64, so that the float64
    state of train(x64=True) is read as it is; the weights are ±1 float32 either way)."""
    with jax.enable_x64(True):
        return TOY_METHODS[method].deployed(state)


def deployed_probability(weights: list, real: dict, x: np.ndarray) -> np.ndarray:
    """P(y = +1 | x) of one ±1 net, float64: sigmoid(e^s · sign(x W1) W2)."""
    w1, w2 = (np.asarray(w, np.float64) for w in weights)
    a = np.where(x @ w1 >= 0, 1.0, -1.0) @ w2[:, 0]
    return 1 / (1 + np.exp(-np.exp(float(real["log_scale"])) * a))


def mean_field_probability(lams: list, real: dict, x: np.ndarray) -> np.ndarray:
    """Σ_w q(w) P(y = +1 | x, w) under q(w_j = +1) = sigmoid(2 λ_j), exactly: unit i's input row is one of 8,
    so r_i = P(v_i = +1) = Σ_rows q(row) 1{x·row ≥ 0}; u_i = W2_i v_i is +1 with probability
    p_i r_i + (1 − p_i)(1 − r_i); the count k of u_i = +1 is Poisson-binomial, and a = 2k − H."""
    lam1, lam2 = (np.asarray(lam, np.float64) for lam in lams)
    p1 = (1 + np.tanh(lam1)) / 2                                            # (3, H): q(W1 = +1)
    q_rows = np.prod(np.where(ROWS[:, :, None] > 0, p1, 1 - p1), axis=1)   # (8, H): q(row) per unit
    r = (x @ ROWS.T >= 0).astype(float) @ q_rows                           # (points, H)
    p2 = (1 + np.tanh(lam2[:, 0])) / 2
    u = p2 * r + (1 - p2) * (1 - r)
    hidden = u.shape[1]
    count = np.zeros((len(x), hidden + 1))
    count[:, 0] = 1.0
    for i in range(hidden):                                                # add unit i: k stays or grows by 1
        count[:, 1:] = count[:, 1:] * (1 - u[:, i:i + 1]) + count[:, :-1] * u[:, i:i + 1]
        count[:, 0] *= 1 - u[:, i]
    a = 2 * np.arange(hidden + 1) - hidden
    return count @ (1 / (1 + np.exp(-np.exp(float(real["log_scale"])) * a)))


def mc_probability(lams: list, real: dict, x: np.ndarray, key, n_samples: int) -> np.ndarray:
    """The Monte Carlo predictive: the mean of P(y = +1 | x, w) over n_samples nets w ~ q (bayesbinn.sample)."""
    w1, w2 = (np.asarray(w, np.float64) for w in
              jax.vmap(lambda k: bayesbinn.sample(k, lams))(jax.random.split(key, n_samples)))
    a = np.einsum("snh,sh->sn", np.where(np.einsum("nj,sjh->snh", x, w1) >= 0, 1.0, -1.0), w2[:, :, 0])
    return np.mean(1 / (1 + np.exp(-np.exp(float(real["log_scale"])) * a)), axis=0)
