"""BayesBiNN: a mean-field Bernoulli posterior over ±1 weights, trained by the Bayesian learning rule.

Meng, Bachmann & Khan (ICML 2020), "Training Binary Neural Networks using the Bayesian Learning Rule", §3-4 and
Algorithm 1 (written here as we implement it, derived from their equations):

Posterior. Each weight has q(w) ∝ exp(λ w), w ∈ {−1, +1}: a Bernoulli with q(w = +1) = sigmoid(2λ), natural
parameter λ and mean parameter μ = E_q[w] = tanh(λ). The prior is of the same form with λ_0 (FIXED: 0, uniform).

Objective and rule. Minimise E_q[Σ_{n=1}^N ℓ_n(w)] + KL(q ‖ prior). The Bayesian learning rule (Khan & Rue)
for this exponential family is natural-gradient descent in λ, i.e. gradient descent in μ:

    λ ← (1 − α) λ + α (λ_0 − ∇_μ E_q[Σ_n ℓ_n(w)])

Relaxation. ∇_μ of an expectation over discrete w is estimated with the Gumbel-softmax (Concrete) relaxation
at temperature τ (their eq. 8): ε ~ U(0, 1), δ = ½ ln(ε / (1 − ε)),

    w_r = tanh((λ + δ) / τ)

As τ → 0, w_r → sign(λ + δ), which is +1 with probability P(δ > −λ) = sigmoid(2λ): an exact sample of q. With
E_q[Σ_n ℓ_n] ≈ N ℓ̄(w_r) (ℓ̄: the minibatch's mean loss) and g = ∂ℓ̄/∂w_r, the chain rule through
∂w_r/∂λ = (1 − w_r²)/τ and ∂μ/∂λ = 1 − μ² gives

    ∇_μ E_q[Σ_n ℓ_n] ≈ N s ⊙ g,   s = (1 − w_r²) / (τ (1 − μ²))

so that one step (one relaxed sample per minibatch) is

    λ ← (1 − α) λ + α (λ_0 − N s ⊙ g)                                    (`natural_step`)

Numerics: in float32 a sample at τ = 1e-10 is exactly ±1, so 1 − w_r² = 0 and every s would vanish; we add
EPS_S = 1e-10 to both 1 − w_r² and 1 − μ² (a saturated sample then has s = EPS_S / (τ (1 − μ² + EPS_S)), which
at τ = EPS_S is 1/(1 − μ² + EPS_S): 1 at μ = 0, at most 1/EPS_S), and compute 1 − tanh² as sech² (`sech2`),
which does not cancel to 0 (or, under XLA's rewrites, to 0/0) in float32.

Everything else, as in successors.mlp: the relaxed weights w_r enter the forward pass, the hidden units are
sign() with the hard-tanh straight-through gradient, and the real BN parameters and output scale and bias are
point estimates trained by Adam (fixed rate FIXED["adam_learning_rate"]; α and that rate are multiplied by the
harness's schedule factor hyper["decay"]). As in the authors' optimizer (github.com/team-approx-bayes/BayesBiNN,
optimizers/BayesBiNN.py line 72, with main_mnist.py's --lamda 10 and --lamda-std 0), λ starts at ±λ_init, each
sign with probability 1/2, λ_init = FIXED["lambda_init"] = 10. Tuned: α, whose grid holds the authors' MNIST rate
1e-4 (main_mnist.py --lr) (and the preprocessing, by the harness); τ = 1e-10 (--temperature), λ_init = 10 and one
relaxed sample per step (--train-samples 1) are fixed at the authors' MNIST values, as are the prior λ_0 = 0 and
the absent momentum (--momentum 0.0). Where our setting differs from theirs (their MLP has three hidden layers of
2048 ReLU units, dropout 0.2, BN without learned scale and shift, cosine annealing over 500 epochs; their float32
1 − tanh²(λ) is 0 for |λ| ≳ 9, so their s is 1/τ there where ours is 1/(sech²λ + EPS_S)), notebooks/successors.ipynb
lists it.

Outputs. Deployed: the mode sign(λ) (+1 at 0), a ±1 net. Predictive (their "Bayes"): the Monte Carlo average of
softmax outputs over S nets w ~ q (`mc_probabilities`); as S → ∞ it is the mean-field predictive
Σ_w q(w) p(y | x, w) (`enumerated_probabilities`, for nets small enough to enumerate). Mean net: weights μ = tanh(λ).
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from successors import mlp

NAME = "bayesbinn"
GRID = {"alpha": [1e-5, 1e-4, 1e-3]}
FIXED = {"tau": 1e-10, "adam_learning_rate": 1e-3, "lambda_prior": 0.0, "lambda_init": 10.0}
EPS_S = 1e-10
ADAM = optax.scale_by_adam()


def init(key, sizes: tuple[int, ...], hyper: dict) -> dict:
    """λ = ±lambda_init (each sign with probability 1/2), BN and output reals, running statistics, Adam's state for
    the reals."""
    shapes = mlp.weight_shapes(sizes)
    lam = [hyper["lambda_init"] * jnp.where(jax.random.bernoulli(k, 0.5, shape), 1.0, -1.0).astype(jnp.float32)
           for k, shape in zip(jax.random.split(key, len(shapes)), shapes)]
    real = mlp.init_real(sizes)
    return {"lam": lam, "real": real, "stats": mlp.init_stats(sizes), "adam": ADAM.init(real)}


def gumbel_delta(key, shape, dtype=jnp.float32):
    """δ = ½ ln(ε / (1 − ε)), ε ~ U(0, 1): the logistic noise of the relaxation (in λ's dtype, in `step`)."""
    eps = jax.random.uniform(key, shape, dtype, 1e-7, 1.0 - 1e-7)
    return 0.5 * jnp.log(eps / (1.0 - eps))


def relaxed(lam, delta, tau):
    """w_r = tanh((λ + δ) / τ)."""
    return jnp.tanh((lam + delta) / tau)


def sech2(x):
    """1 − tanh²(x) = 4 e^{−2|x|} / (1 + e^{−2|x|})², without the cancellation of 1 − tanh² in float32."""
    e = jnp.exp(-2.0 * jnp.abs(x))
    return 4.0 * e / (1.0 + e) ** 2


def scale_s(lam, delta, tau):
    """s = (1 − w_r² + EPS_S) / (τ (1 − μ² + EPS_S)), w_r = tanh((λ + δ)/τ), μ = tanh(λ); 1 − tanh² as sech2."""
    return (sech2((lam + delta) / tau) + EPS_S) / (sech2(lam) + EPS_S) / tau


def natural_step(lam, delta, g, alpha, tau, n_data, lambda_prior):
    """λ ← (1 − α) λ + α (λ_0 − N s ⊙ g), s = scale_s(λ, δ, τ) of the sample whose gradient is g."""
    return (1.0 - alpha) * lam + alpha * (lambda_prior - n_data * scale_s(lam, delta, tau) * g)


def step(state: dict, x, labels, key, hyper: dict, loss=mlp.loss):
    """One minibatch: one relaxed sample, its gradient, the natural-parameter step on λ, Adam on the reals.
    `loss(weights, real, stats, x, labels) -> (value, stats)`: the net's (successors.mlp's unless given)."""
    keys = jax.random.split(key, len(state["lam"]))
    deltas = [gumbel_delta(k, lam.shape, lam.dtype) for k, lam in zip(keys, state["lam"])]
    w_r = [relaxed(lam, delta, hyper["tau"]) for lam, delta in zip(state["lam"], deltas)]
    (value, stats), (gw, gr) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        w_r, state["real"], state["stats"], x, labels)
    alpha = hyper["alpha"] * hyper["decay"]
    lam = [natural_step(lam, delta, g, alpha, hyper["tau"], hyper["n_data"], hyper["lambda_prior"])
           for lam, delta, g in zip(state["lam"], deltas, gw)]
    real, adam = mlp.adam_step(ADAM, state["real"], gr, state["adam"], hyper["adam_learning_rate"] * hyper["decay"])
    return {"lam": lam, "real": real, "stats": stats, "adam": adam}, value


def deployed(state: dict) -> list:
    """The binary net's weights: the posterior's mode sign(λ)."""
    return [mlp.binary(lam) for lam in state["lam"]]


def mean_weights(state: dict) -> list:
    """The mean net's real weights μ = tanh(λ) (not a ±1 net)."""
    return [jnp.tanh(lam) for lam in state["lam"]]


def sample(key, lams: list) -> list:
    """One net w ~ q: each weight +1 with probability sigmoid(2λ) = (1 + tanh λ)/2."""
    return [jnp.where(jax.random.bernoulli(k, jax.nn.sigmoid(2.0 * lam)), 1.0, -1.0).astype(jnp.float32)
            for k, lam in zip(jax.random.split(key, len(lams)), lams)]


def mc_probabilities(state: dict, x: np.ndarray, key, n_samples: int, predict=mlp.predict_logits) -> np.ndarray:
    """The Monte Carlo predictive (1/S) Σ_s softmax(z(x; w_s)), w_s ~ q, BN on its running statistics.
    `predict(weights, real, stats, x)`: the net's test-time logits (successors.mlp's unless given)."""
    total = 0.0
    for k in jax.random.split(key, n_samples):
        logits = predict(sample(k, state["lam"]), state["real"], state["stats"], x)
        total = total + mlp.softmax(logits)
    return total / n_samples


def predictive_outputs(state: dict, x: np.ndarray, key, n_samples: int, predict=mlp.predict_logits) -> dict:
    """The outputs beside the deployed net (successors.registry): the Monte Carlo predictive over `n_samples` nets
    w ~ q (mc_probabilities) and the mean net's softmax (mean_weights), `predict` giving the net's logits."""
    return {"predictive": mc_probabilities(state, x, key, n_samples, predict),
            "mean": mlp.softmax(predict(mean_weights(state), state["real"], state["stats"], x))}


def enumerated_probabilities(state: dict, x: np.ndarray) -> np.ndarray:
    """The mean-field predictive Σ_w q(w) softmax(z(x; w)) by enumerating every ±1 net (2^(number of weights)
    nets: a net of a few weights only)."""
    lams = [np.asarray(lam, np.float64) for lam in state["lam"]]
    n = sum(lam.size for lam in lams)
    if n > 16:
        raise ValueError(f"{n} weights: 2^{n} nets are too many to enumerate; use mc_probabilities")
    flat_lam = np.concatenate([lam.ravel() for lam in lams])
    total = 0.0
    for signs in itertools.product((-1.0, 1.0), repeat=n):
        w = np.array(signs)
        q = np.prod(1.0 / (1.0 + np.exp(-2.0 * flat_lam * w)))   # q(w) = Π sigmoid(2 λ_i w_i)
        parts = np.split(w, np.cumsum([lam.size for lam in lams])[:-1])
        weights = [jnp.asarray(p.reshape(lam.shape), jnp.float32) for p, lam in zip(parts, lams)]
        logits = mlp.predict_logits(weights, state["real"], state["stats"], x)
        total = total + q * mlp.softmax(logits)
    return total
