"""Checks of EBP: the references that the tests and the notebooks compare ebp_lib's equations against.

Nothing here trains a network. Four kinds of reference, each for the notebook that uses it:
- exact enumeration of a tiny network (notebook 01): the Bayes posterior over every weight configuration, and
  its marginals, against EBP's closed-form update;
- Monte Carlo over posterior samples (notebooks 02, 04, 05, 06, 07), and the exact distribution of a sum of ±1
  terms (notebook 02): the central-limit forward pass against sampled and exact moments;
- finite differences (notebooks 03, 05, 07): Δ and the h increments are derivatives of ln P(v_L = y) with σ
  held fixed;
- the paper's printed Algorithm 1 with each of its misprints switched on or off (notebook 03), so a check can
  show where it fails (docs/maths.md §The printed Algorithm 1).
"""
from __future__ import annotations

import copy

import numpy as np
from scipy import special

from ebp_lib import (
    Layer,
    Network,
    Pass,
    backward,
    forward,
    gaussian_at_zero,
    hard_sign,
    increments,
    layer_moments,
    log_phi_ratio,
    mean_input,
    output_delta,
    sign_network,
    unit_mean,
    weight_moments,
)


def relative_error(estimate, reference) -> float:
    """‖estimate − reference‖ / ‖reference‖ (Frobenius norms over all entries)."""
    estimate, reference = np.asarray(estimate), np.asarray(reference)
    return float(np.linalg.norm(estimate - reference) / np.linalg.norm(reference))


# ----------------------------------------------------------------------------------------------------------
# Exact enumeration of a tiny binary network (notebook 01)
# ----------------------------------------------------------------------------------------------------------

def binary_configurations(n_weights: int) -> np.ndarray:
    """All 2^n vectors in {−1, +1}^n, one per row (to enumerate the weights of a tiny network)."""
    bits = (np.arange(2 ** n_weights)[:, None] >> np.arange(n_weights)[::-1]) & 1
    return 1.0 - 2.0 * bits


def unflatten_layers(flat: np.ndarray, shapes) -> list[np.ndarray]:
    """Cut the last axis of `flat` (…, Σ V_l K_l) into per-layer weight matrices (…, V_l, K_l), in layer order.
    shapes = [(V_1, K_1), (V_2, K_2), …]. Used to read enumerated configurations or a flat h as a network."""
    out, start = [], 0
    for v, k in shapes:
        out.append(flat[..., start:start + v * k].reshape(flat.shape[:-1] + (v, k)))
        start += v * k
    return out


def noisy_network_likelihood(weights: list[np.ndarray], biases: list[np.ndarray], x: np.ndarray,
                             y: np.ndarray) -> np.ndarray:
    """P(v_L = y | x, W) for many weight configurations of a tiny network of ±1 units, each unit adding unit
    Gaussian noise to its input: v_l = sign(W_l v_{l−1} + b_l + ε), ε ~ N(0, 1). This is the model whose
    σ² carries the "+1" of docs/maths.md §Forward pass (the bias as an input with weight variance 1), so P(v = +1) =
    Φ(W v + b). weights[l]: (C, V_l, K_l) for C configurations; x (K_0,); y (V_L,) ±1. Exact: sums over every
    state of every hidden layer (2^{V_l} of them), so for tiny networks only. Returns (C,)."""
    prob = np.ones((len(weights[0]), 1))                   # P(state of the previous layer): (C, S)
    states = np.asarray(x, dtype=float)[None, :]           # the input: one deterministic state
    for k, (w, b) in enumerate(zip(weights, biases)):
        u = np.einsum("cvk,sk->csv", w, states) + b       # (C, S, V): noiseless input of every unit
        if k == len(weights) - 1:
            return np.sum(prob * np.prod(special.ndtr(y * u), axis=2), axis=1)
        nxt = binary_configurations(w.shape[1])            # (T, V): every state of this layer
        step = np.prod(special.ndtr(u[:, :, None, :] * nxt[None, None]), axis=3)   # P(next state | state)
        prob = np.einsum("cs,cst->ct", prob, step)
        states = nxt


def marginal_natural_parameters(log_q: np.ndarray, configs: np.ndarray) -> np.ndarray:
    """h_i = ½ ln[P(W_i = +1) / P(W_i = −1)] for the distribution ∝ exp(log_q) over the rows of `configs`
    (C, n): the factor exp(h_i W_i) with the same marginal, so ⟨W_i⟩ = tanh h_i. With log_q = Σ_i h_i W_i +
    ln P(y | x, W) it is the exact mean-field ("Bayes-like", marginal-matching) update of docs/maths.md §Update before
    the central-limit and first-order approximations; with the full log posterior, its exact marginals."""
    plus = configs > 0
    masked = np.where(plus, log_q[:, None], -np.inf), np.where(~plus, log_q[:, None], -np.inf)
    return 0.5 * (special.logsumexp(masked[0], axis=0) - special.logsumexp(masked[1], axis=0))


def ebp_h_increment(h: np.ndarray, shapes, x: np.ndarray, y: np.ndarray, **misprints) -> np.ndarray:
    """EBP's closed-form update (docs/maths.md §Forward pass, §Backward pass, §Update) of the flat natural parameters h
    of a tiny binary network with zero biases, for one example (x, y): forward, backward, increments. The
    biases are held at 0 (not updated), so that the weights are the only unknowns, as in the enumerated model
    of noisy_network_likelihood. Returns the flat increment. Keyword arguments switch on misprints of the
    printed Algorithm 1 (those of algorithm1_step, e.g. factor_two=False; the values of MISPRINTS)."""
    net = Network([Layer(w.copy(), np.zeros(len(w))) for w in unflatten_layers(h, shapes)], "binary",
                  [v for v, _ in shapes])
    if misprints:
        incs = algorithm1_step(net, np.atleast_2d(x), np.atleast_2d(y), **misprints)[3]
    else:
        fwd = forward(net, np.atleast_2d(x))
        incs = increments(net, fwd, backward(net, fwd, np.atleast_2d(y)))
    return np.concatenate([inc.ravel() for inc in incs])


def exact_increment(h: np.ndarray, shapes, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The exact mean-field ("Bayes-like") increment of the flat h of a tiny binary network with zero biases, for
    one example: one exact Bayes step from the factorised posterior ∝ exp(Σ h_i W_i), over every weight
    configuration, projected back onto its marginals (marginal_natural_parameters), minus h. What
    ebp_h_increment approximates by a central limit and a first-order expansion (notebook 01)."""
    configs = binary_configurations(len(h))
    log_lik = np.log(noisy_network_likelihood(unflatten_layers(configs, shapes), [np.zeros(v) for v, _ in shapes],
                                              x, np.atleast_1d(y)))
    return marginal_natural_parameters(configs @ h + log_lik, configs) - h


def one_step_increments(shapes, n_trials: int, rng, scale: float = 1.0, variants=None) -> dict[str, np.ndarray]:
    """Exact and closed-form increments of one update for `n_trials` random (prior, example) pairs of a tiny
    binary network: flat h ~ N(0, scale²), input x ~ N(0, scale²) of size K_1, label y = ±1 per output unit.
    A small scale is weak evidence: the label moves each factor a little, the regime in which EBP's first-order
    expansion is accurate. `variants` maps names to misprint flags (algorithm1_step's; default MISPRINTS).
    Returns {"exact": (n_trials, n_weights), name: (n_trials, n_weights) for each variant}."""
    variants = MISPRINTS if variants is None else variants
    n_weights = sum(v * k for v, k in shapes)
    out = {"exact": [], **{name: [] for name in variants}}
    for _ in range(n_trials):
        h = scale * rng.standard_normal(n_weights)
        x, y = scale * rng.standard_normal(shapes[0][1]), rng.choice([-1.0, 1.0], size=shapes[-1][0])
        out["exact"].append(exact_increment(h, shapes, x, y))
        for name, flags in variants.items():
            out[name].append(ebp_h_increment(h, shapes, x, y, **flags))
    return {name: np.array(incs) for name, incs in out.items()}


def increment_agreement(exact: np.ndarray, approx: np.ndarray, shapes) -> list[tuple[float, float]]:
    """Per layer of weights: (correlation, mean |approx − exact| / mean |exact|) of two sets of flat increments
    (trials, n_weights), e.g. one_step_increments' "exact" and one variant."""
    layer_of = np.repeat(np.arange(len(shapes)), [v * k for v, k in shapes])
    out = []
    for k in range(len(shapes)):
        a, b = exact[:, layer_of == k].ravel(), approx[:, layer_of == k].ravel()
        out.append((float(np.corrcoef(a, b)[0, 1]), float(np.abs(b - a).mean() / np.abs(a).mean())))
    return out


def online_posteriors(h0: np.ndarray, shapes, xs: np.ndarray, ys: np.ndarray) -> dict[str, np.ndarray]:
    """Online learning of a tiny binary network (zero biases) from the examples (xs[n], ys[n]) in turn, from the
    factorised prior exp(Σ h0_i W_i), three ways (notebook 01):
      "exact"       Bayes' rule over every configuration (its marginals, as h);
      "mean field"  one exact Bayes step from the factorised posterior, then its marginals, after every example;
      "EBP"         ebp_h_increment after every example.
    Returns each one's flat h after 0, 1, …, n examples, (n + 1, n_weights), and "log_posterior", the exact
    unnormalised log posterior over the rows of binary_configurations after the last example."""
    configs = binary_configurations(len(h0))
    weights, biases = unflatten_layers(configs, shapes), [np.zeros(v) for v, _ in shapes]
    log_post, h_mf, h_ebp = configs @ h0, h0.copy(), h0.copy()
    history = {"exact": [h0.copy()], "mean field": [h0.copy()], "EBP": [h0.copy()]}
    for x, y in zip(xs, ys):
        log_lik = np.log(noisy_network_likelihood(weights, biases, x, np.atleast_1d(y)))
        log_post = log_post + log_lik
        h_mf = marginal_natural_parameters(configs @ h_mf + log_lik, configs)
        h_ebp = h_ebp + ebp_h_increment(h_ebp, shapes, x, np.atleast_1d(y))
        for name, h in (("exact", marginal_natural_parameters(log_post, configs)), ("mean field", h_mf),
                        ("EBP", h_ebp)):
            history[name].append(h.copy())
    return {**{name: np.array(hs) for name, hs in history.items()}, "log_posterior": log_post}


def predictive_plus(h: np.ndarray, shapes, x: np.ndarray, log_posterior: np.ndarray | None = None,
                    ebp: bool = False) -> np.ndarray:
    """P(y = +1 | x) of a tiny binary network with one output unit and zero biases, for every row of x (S, K_1):
    the Bayes average of noisy_network_likelihood over the distribution ∝ exp(log_posterior) over the
    configurations (default: the factorised one, log q = Σ h_i W_i); with ebp=True, EBP-P's (1 + ν_L)/2 from
    the forward pass of the factorised posterior h instead."""
    if ebp:
        net = Network([Layer(w.copy(), np.zeros(len(w))) for w in unflatten_layers(h, shapes)], "binary",
                      [v for v, _ in shapes])
        return (1.0 + forward(net, x).nu[-1][:, 0]) / 2.0
    configs = binary_configurations(len(h))
    weights, biases = unflatten_layers(configs, shapes), [np.zeros(v) for v, _ in shapes]
    posterior = special.softmax(configs @ h if log_posterior is None else log_posterior)
    return np.array([posterior @ noisy_network_likelihood(weights, biases, xt, np.ones(1)) for xt in x])


def joint_of_two(log_q: np.ndarray, i: int, j: int) -> np.ndarray:
    """P(W_i = a, W_j = b) for a, b ∈ {−1, +1} (rows a, columns b, −1 first) under the distribution ∝ exp(log_q)
    over the rows of binary_configurations (notebook 01's picture of the posterior of two weights)."""
    configs = binary_configurations(int(np.log2(len(log_q))))
    p = special.softmax(log_q)
    return np.array([[p[(configs[:, i] == a) & (configs[:, j] == b)].sum() for b in (-1, 1)] for a in (-1, 1)])


def noisy_teacher_labels(weights: list[np.ndarray], x: np.ndarray, rng) -> np.ndarray:
    """Labels (S, V_L) of the inputs x (S, K_1) drawn from the noisy network of noisy_network_likelihood with the
    given weights (each (V_l, K_l)) and zero biases: v_l = sign(W_l v_{l−1} + ε), ε ~ N(0, 1), layer by layer
    (notebook 01's teachers)."""
    v = x
    for w in weights:
        v = np.where(v @ w.T + rng.standard_normal((len(x), len(w))) > 0, 1.0, -1.0)
    return v


def tangent_secant_ratios(n_weights: int, n_trials: int, rng, h_scale: float = 1.5,
                          confident: float = 0.8) -> dict[bool, np.ndarray]:
    """Why EBP is less certain than exact Bayes (notebook 01 §5): for random perceptrons (h ~ N(0, h_scale²),
    x ~ N(0, 1), y = ±1), |EBP's increment| / |the exact-clamping increment| of every weight with
    |⟨W⟩| > `confident`, grouped by whether the example agrees with the weight's sign (True) or not (False).
    EBP's increment is the tangent of ln P(y | x, W_i = w) at w = ⟨W_i⟩ (ebp_h_increment); the exact-clamping one
    is the secant ½[ln Φ(·|W_i = +1) − ln Φ(·|W_i = −1)] with the same Gaussian (central-limit) sum of the other
    weights, so the two differ only by the first-order expansion."""
    ratios = {True: [], False: []}
    for _ in range(n_trials):
        h, x, y = h_scale * rng.standard_normal(n_weights), rng.standard_normal(n_weights), rng.choice([-1.0, 1.0])
        m = np.tanh(h)
        rest_mean = m @ x - m * x                                            # Σ_{j≠i} m_j x_j
        rest_sd = np.sqrt(((1 - m ** 2) * x ** 2).sum() - (1 - m ** 2) * x ** 2 + 1)
        secant = 0.5 * (special.log_ndtr(y * (rest_mean + x) / rest_sd) - special.log_ndtr(y * (rest_mean - x) / rest_sd))
        tangent = ebp_h_increment(h, [(1, n_weights)], x, np.array([y]))
        for i in np.flatnonzero(np.abs(m) > confident):
            ratios[bool(np.sign(secant[i]) == np.sign(m[i]))].append(abs(tangent[i]) / abs(secant[i]))
    return {agree: np.array(r) for agree, r in ratios.items()}


# Several passes (epochs) over the same examples, for many binary perceptrons at once (notebook 01 §9). Vectorised
# over tasks; one pass of perceptron_passes is online_posteriors on each task (tests/test_checks.py checks it).

def perceptron_log_likelihood(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """ln P(y_n | x_n, W) = ln Φ(y_n W·x_n) of the noisy perceptron (zero bias) for every example and every
    configuration W of binary_configurations(K): xs (T, n, K) inputs of T tasks, ys (T, n) ±1 labels.
    Returns (T, n, 2^K)."""
    configs = binary_configurations(xs.shape[-1])
    return special.log_ndtr(ys[..., None] * (xs @ configs.T))


def perceptron_passes(xs: np.ndarray, ys: np.ndarray, n_passes: int) -> dict[str, np.ndarray]:
    """n_passes passes over the examples (xs[t, n], ys[t, n]) of T binary perceptrons (zero bias, uniform prior
    h = 0), in the same order every pass, three ways:
      "exact"       Bayes' rule applied once per example per pass: after k passes the posterior
                    ∝ Π_n P(y_n | x_n, W)^k (the likelihood raised to the power k), as marginal h;
      "mean field"  one exact Bayes step from the factorised posterior, then its marginals, after every example;
      "EBP"         EBP's closed-form increment after every example (ebp_h_increment of a perceptron).
    Returns each one's h after 0, 1, …, n_passes passes, (n_passes + 1, T, K)."""
    configs = binary_configurations(xs.shape[-1])
    plus, minus = (configs > 0).astype(float), (configs < 0).astype(float)
    log_lik = perceptron_log_likelihood(xs, ys)

    def marginals(log_q):                       # h_i = ½ ln[P(W_i = +1) / P(W_i = −1)] of each task's q ∝ e^log_q
        p = special.softmax(log_q, axis=-1)
        return 0.5 * (np.log(p @ plus) - np.log(p @ minus))

    h_mf, h_ebp = np.zeros(xs.shape[::2]), np.zeros(xs.shape[::2])
    out = {"exact": [h_mf.copy()], "mean field": [h_mf.copy()], "EBP": [h_ebp.copy()]}
    for k in range(1, n_passes + 1):
        for n in range(xs.shape[1]):
            h_mf = marginals(h_mf @ configs.T + log_lik[:, n])
            x, y, m = xs[:, n], ys[:, n], np.tanh(h_ebp)
            sigma = np.sqrt(((1.0 - m * m) * x * x).sum(axis=1) + 1.0)    # docs/maths.md §Forward pass, N·σ²
            t = y * (m * x).sum(axis=1) / sigma
            h_ebp = h_ebp + (y / sigma * np.exp(log_phi_ratio(t)))[:, None] * x   # Δ·x/√N, the √N cancelled
        out["exact"].append(marginals(k * log_lik.sum(axis=1)))
        out["mean field"].append(h_mf.copy())
        out["EBP"].append(h_ebp.copy())
    return {name: np.array(hs) for name, hs in out.items()}


def perceptron_predictive(log_q: np.ndarray, x: np.ndarray) -> np.ndarray:
    """P(y = +1 | x) = Σ_W q(W) Φ(W·x) of T noisy perceptrons under the distributions q ∝ exp(log_q) (T, 2^K) over
    the configurations (log_q = h @ configs.T for a factorised one), for shared test inputs x (S, K). Returns (T, S)."""
    configs = binary_configurations(x.shape[-1])
    return special.softmax(log_q, axis=-1) @ special.ndtr(configs @ x.T)


def perceptron_ebp_p(h: np.ndarray, x: np.ndarray) -> np.ndarray:
    """EBP-P's P(y = +1 | x) = (1 + ν)/2 = Φ(μ/σ) of T perceptrons with factorised posteriors h (T, K), zero bias,
    for shared test inputs x (S, K): the central-limit predictive of the forward pass. Returns (T, S)."""
    m = np.tanh(h)
    return special.ndtr((m @ x.T) / np.sqrt((1.0 - m * m) @ (x * x).T + 1.0))


def confidence_and_accuracy(q: np.ndarray, p_true: np.ndarray) -> tuple[float, float, float]:
    """How a forecaster of P(y = +1) is calibrated against the true probabilities p_true (same shape): its mean
    confidence max(q, 1 − q), its expected accuracy (the true probability of the class it predicts) and its
    expected log-loss −[p ln q + (1 − p) ln(1 − q)], each averaged over all entries (q clipped to [1e−12, 1 − 1e−12],
    so that a forecast rounded to exactly 0 or 1 costs ln 10¹² rather than infinity). A calibrated forecaster has
    confidence = accuracy; an overconfident one, confidence > accuracy."""
    q = np.clip(q, 1e-12, 1.0 - 1e-12)
    confidence = np.maximum(q, 1.0 - q).mean()
    accuracy = np.where(q > 0.5, p_true, 1.0 - p_true).mean()
    log_loss = -(p_true * np.log(q) + (1.0 - p_true) * np.log1p(-q)).mean()
    return float(confidence), float(accuracy), float(log_loss)


# ----------------------------------------------------------------------------------------------------------
# Monte Carlo over the posterior, and exact sums of ±1 terms (notebooks 02, 04-07)
# ----------------------------------------------------------------------------------------------------------

def sample_weights(layer: Layer, weights: str, rng, n_samples: int) -> np.ndarray:
    """Draw (n_samples, V, K) weight matrices from the mean-field posterior (masked weights are 0).

    binary: W = +1 with probability (1 + tanh h)/2;  real: W = h + N(0, 1).
    """
    shape = (n_samples,) + layer.h.shape
    if weights == "binary":
        w = np.where(rng.random(shape) < 0.5 * (1.0 + np.tanh(layer.h)), 1.0, -1.0)
    else:
        w = layer.h + rng.standard_normal(shape)
    return w * layer.mask if layer.mask is not None else w


def monte_carlo_layer(layer: Layer, weights: str, nu_prev: np.ndarray, rng, n_samples: int = 20000,
                      deterministic_input: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sampled mean and variance of u = (W v + b)/sqrt(N) and the mean of sign(u), for one input.

    The weights come from the posterior; the input v is nu_prev itself (deterministic_input, the image) or
    independent ±1 units with means nu_prev (a hidden layer under the mean-field assumption). The bias is
    drawn as N(b, 1), docs/maths.md §Notation (an input fixed at 1 whose weight has variance 1: the "+1" in σ²).
    """
    w = sample_weights(layer, weights, rng, n_samples)
    if deterministic_input:
        v = np.broadcast_to(nu_prev, (n_samples, len(nu_prev)))
    else:
        v = np.where(rng.random((n_samples, len(nu_prev))) < 0.5 * (1.0 + nu_prev), 1.0, -1.0)
    bias = layer.b + rng.standard_normal((n_samples, len(layer.b)))
    u = (np.einsum("svk,sk->sv", w, v) + bias) / np.sqrt(layer.normaliser)
    return u.mean(axis=0), u.var(axis=0), np.where(u >= 0, 1.0, -1.0).mean(axis=0)


def monte_carlo_with_errors(layer: Layer, weights: str, nu_prev: np.ndarray, rng, n_samples: int = 20000,
                            n_batches: int = 10, deterministic_input: bool = True):
    """monte_carlo_layer run in `n_batches` equal batches (bounded memory): the estimates of E u, Var u and
    E sign u for every unit, and their standard errors from the spread of the batch estimates (batch means).
    Returns (mean, var, sign_mean), (se_mean, se_var, se_sign_mean), each an array over the layer's units."""
    runs = np.array([monte_carlo_layer(layer, weights, nu_prev, rng, n_samples // n_batches, deterministic_input)
                     for _ in range(n_batches)])                  # (batch, quantity, unit)
    mean, var, sign_mean = runs.mean(axis=0)
    var = var + runs[:, 0].var(axis=0)                            # pooled variance: within + between batches
    se = runs.std(axis=0, ddof=1) / np.sqrt(n_batches)
    return (mean, var, sign_mean), tuple(se)


def monte_carlo_layer_inputs(layer: Layer, weights: str, v: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """Sampled mean and variance (each (V,)) of u = (W v_s + b)/sqrt(N), where each row v_s of v (S, K) is
    one draw of a random input (e.g. the image under a dropout mask) and comes with its own draw of the
    weights (sample_weights) and of the bias (N(b, 1)) (notebook 07). Works in chunks to bound memory."""
    chunk = max(1, 2_000_000 // layer.h.size)
    total, total2 = np.zeros(len(layer.b)), np.zeros(len(layer.b))
    for start in range(0, len(v), chunk):
        vs = v[start:start + chunk]
        w = sample_weights(layer, weights, rng, len(vs))
        u = (np.einsum("svk,sk->sv", w, vs) + layer.b + rng.standard_normal((len(vs), len(layer.b))))
        u /= np.sqrt(layer.normaliser)
        total += u.sum(axis=0)
        total2 += (u * u).sum(axis=0)
    mean = total / len(v)
    return mean, total2 / len(v) - mean * mean


def monte_carlo_outputs(net: Network, x: np.ndarray, rng, n_samples: int = 500) -> np.ndarray:
    """Sampled ⟨v_L⟩ (B, V_L) of the Bayes average of sign networks, which EBP-P's ν_L approximates
    (notebook 06). Each sample draws one whole network from the mean-field posterior (every weight by
    sample_weights, every bias as N(b, 1), docs/maths.md §Notation) and runs v_l = sign(W_l v_{l−1} + b_l)
    through all layers, the output layer included. Networks with dropout are refused.
    """
    if net.dropout is not None:
        raise ValueError("monte_carlo_outputs samples networks without dropout")
    total = np.zeros((len(x), len(net.layers[-1].b)))
    for _ in range(n_samples):
        drawn = ((sample_weights(layer, net.weights, rng, 1)[0], layer.b) for layer in net.layers)
        total += hard_sign(sign_network(x, drawn, noise=rng.standard_normal)[-1])  # the output layer is ±1 too
    return total / n_samples


def pm1_sum_distribution(a: np.ndarray) -> np.ndarray:
    """Exact distribution of S = Σ_r s_r for independent s_r = ±1 with means a (V, K), one row per unit:
    P[v, j] = P(S = 2j − K), j = 0..K (a Poisson-binomial, by dynamic programming over r: O(V K²))."""
    a = np.atleast_2d(a)
    up = 0.5 * (1.0 + a)                                          # P(s_r = +1)
    dist = np.zeros((len(a), a.shape[1] + 1))
    dist[:, 0] = 1.0
    for r in range(a.shape[1]):                                   # add s_r: j (number of +1) stays or grows by 1
        q = up[:, r:r + 1]
        dist[:, 1:r + 2] = dist[:, 1:r + 2] * (1.0 - q) + dist[:, :r + 1] * q
        dist[:, :1] *= 1.0 - q
    return dist


def exact_sign_mean_pm1(a: np.ndarray, c: np.ndarray) -> np.ndarray:
    """E sign(S + c + ε) with S = Σ_r s_r as in pm1_sum_distribution and ε ~ N(0, 1) (the bias's unit
    variance): the exact mean of a hidden unit with binary weights and ±1 inputs, where a_r = ⟨W_r⟩ν_r
    and c = b. The reference for ν = 2Φ(μ/σ) − 1 without the central-limit approximation."""
    dist = pm1_sum_distribution(a)
    s = 2.0 * np.arange(dist.shape[1]) - (dist.shape[1] - 1)
    return np.sum(dist * special.erf((s + np.asarray(c)[:, None]) / np.sqrt(2.0)), axis=1)


def clt_unit_errors(n_inputs: int, kind: str, n_units: int, rng, h_std: float = 1.0) -> np.ndarray:
    """|ν − exact ⟨sign u⟩| for `n_units` hidden units with binary weights, fan-in n_inputs and ±1 inputs
    (notebook 02 §4): ν = 2Φ(μ/σ) − 1 of the central-limit forward pass (layer_moments, unit_mean) against
    exact_sign_mean_pm1. Biases are drawn so that μ/σ ~ N(0, 1), where ν is not saturated. Two kinds of unit:
      "symmetric": h ~ N(0, h_std²) and input means ν_r ~ U(−1, 1), so the terms' skews have random signs;
      "skewed":    inputs +1, weight means a_r = 0.5 (probability 2/3) or −0.95, so the skews add up."""
    if kind == "symmetric":
        h, nu_prev = h_std * rng.standard_normal((n_units, n_inputs)), rng.uniform(-1, 1, n_inputs)
    elif kind == "skewed":
        h, nu_prev = np.arctanh(np.where(rng.random((n_units, n_inputs)) < 2 / 3, 0.5, -0.95)), np.ones(n_inputs)
    else:
        raise ValueError(f"kind={kind!r}: choose 'symmetric' or 'skewed'")
    a = np.tanh(h) * nu_prev
    b = np.sqrt((1 - a ** 2).sum(axis=1) + 1) * rng.standard_normal(n_units) - a.sum(axis=1)
    mu, sigma2, _ = layer_moments(Layer(h, b), "binary", nu_prev[None], None, (nu_prev ** 2)[None])
    return np.abs(unit_mean(mu, sigma2)[0] - exact_sign_mean_pm1(a, b))


def exact_standardised_density(a: np.ndarray, z: np.ndarray) -> np.ndarray:
    """The exact density, at the points z, of the standardised input (u − μ)/σ of one unit whose input is
    S + c + ε: S a sum of independent ±1 terms with means a (K,), ε ~ N(0, 1), and c = −Σ a so that μ = 0
    (notebook 02's picture of the central limit at small fan-in). A mixture of unit Gaussians, one per value of S."""
    sd = np.sqrt((1 - a ** 2).sum() + 1)
    s = 2.0 * np.arange(len(a) + 1) - len(a) - a.sum()          # the values of S + c
    weights = pm1_sum_distribution(a[None])[0]
    return sd * (weights[:, None] * np.exp(-0.5 * (z * sd - s[:, None]) ** 2)).sum(axis=0) / np.sqrt(2 * np.pi)


def dropout_mask_moments(layer: Layer, weights: str, x: np.ndarray, keep: float):
    """Closed forms for sampled dropout on a first layer with a deterministic image x (K,) (notebook 07,
    docs/maths.md §Dropout). With Bernoulli(p) masks r on the pixels and m = ⟨W⟩, T = Σ_j (⟨W_j²⟩ − m_j²) x_j²:

        mean over masks and weights      μ        = (p Σ_j m_j x_j + b) / sqrt(N)
        variance over masks and weights  σ²_masks = (p T + p(1 − p) Σ_j m_j² x_j² + 1) / N   (total variance)
        the weight-scaled test network   σ²_test  = (p² T + 1) / N

    Returns (μ, σ²_masks, σ²_test), each (V,). σ²_test < σ²_masks: weight scaling gets the mean of the mask
    ensemble right and its variance wrong."""
    m, w2 = weight_moments(layer, weights)
    x2 = np.asarray(x) ** 2
    t, signal = (w2 - m * m) @ x2, (m * m) @ x2
    mu = (keep * (m @ x) + layer.b) / np.sqrt(layer.normaliser)
    return mu, (keep * t + keep * (1 - keep) * signal + 1) / layer.normaliser, (keep ** 2 * t + 1) / layer.normaliser


def within_standard_errors(sampled_mean, sampled_var, mu, sigma2, n_samples: int, k: float = 5.0) -> bool:
    """True if every sampled mean is within k standard errors σ/√n of μ and every sampled variance within k
    standard errors σ²·√(2/n) of σ² (the standard error of a variance estimate for Gaussian u): the test that
    a Monte Carlo estimate from n_samples draws agrees with a closed form (notebooks 05, 07)."""
    sigma2 = np.asarray(sigma2)
    return bool(np.all(np.abs(np.asarray(sampled_mean) - mu) < k * np.sqrt(sigma2 / n_samples))
                and np.all(np.abs(np.asarray(sampled_var) - sigma2) < k * sigma2 * np.sqrt(2.0 / n_samples)))


# ----------------------------------------------------------------------------------------------------------
# Finite differences: Δ and the h increments are derivatives of ln P(v_L = y), σ fixed (notebooks 03, 05, 07)
# ----------------------------------------------------------------------------------------------------------

def log_likelihood_from(net: Network, fwd: Pass, y: np.ndarray, k: int, mu: np.ndarray | None = None,
                        m: np.ndarray | None = None) -> float:
    """Σ_i ln Φ(y_i μ_{i,L}/σ_{i,L}) as a function of layer k's μ (or of its ⟨W⟩ = m), every σ held at the
    values of the forward pass `fwd` (docs/maths.md §Backward pass): the function whose derivatives Δ and the h
    increments are. Layers are numbered from 0. Sampled dropout masks of `fwd` are applied as in forward."""
    if m is not None:
        mu = mean_input(net.layers[k], fwd.inputs[k], m)
    for j in range(k + 1, len(net.layers)):
        nu = unit_mean(mu, fwd.sigma2[j - 1])
        if fwd.masks[j] is not None:
            nu = nu * fwd.masks[j]
        mu = mean_input(net.layers[j], nu, fwd.w_mean[j])
    return float(np.sum(special.log_ndtr(y * mu / np.sqrt(fwd.sigma2[-1]))))


def _central_difference(f, z: np.ndarray, eps: float) -> np.ndarray:
    """∂f/∂z for every entry of z by central differences (f(z + ε e) − f(z − ε e)) / 2ε; error O(ε²)."""
    grad = np.zeros_like(z)
    for idx in np.ndindex(z.shape):
        up, down = z.copy(), z.copy()
        up[idx] += eps
        down[idx] -= eps
        grad[idx] = (f(up) - f(down)) / (2.0 * eps)
    return grad


def numerical_deltas(net: Network, fwd: Pass, y: np.ndarray, eps: float = 1e-5) -> list[np.ndarray]:
    """Finite-difference reference for Δ: ∂ ln P(v_L = y)/∂μ_l of every layer, σ held fixed (docs/maths.md §Backward
    pass), from log_likelihood_from. One function evaluation per entry: for small networks only."""
    return [_central_difference(lambda mu, k=k: log_likelihood_from(net, fwd, y, k, mu=mu), fwd.mu[k], eps)
            for k in range(len(net.layers))]


def numerical_increments(net: Network, fwd: Pass, y: np.ndarray, eps: float = 1e-5) -> list[np.ndarray]:
    """Finite-difference reference for the h increments: ∂ ln P(v_L = y)/∂⟨W_l⟩ of every layer (docs/maths.md §Update),
    σ held fixed. For small networks only."""
    return [_central_difference(lambda m, k=k: log_likelihood_from(net, fwd, y, k, m=m), fwd.w_mean[k], eps)
            for k in range(len(net.layers))]


def directional_errors(net: Network, fwd: Pass, y: np.ndarray, incs: list[np.ndarray], seed: int = 0,
                       n_directions: int = 3, eps: float = 1e-4) -> list[float]:
    """A finite-difference check of h increments that scales to MNIST-sized layers (notebook 04): the increments
    of layer k predict the change of ln P(v_L = y) (σ fixed, summed over the minibatch, log_likelihood_from)
    along any direction D of its ⟨W⟩ as Σ_ij inc_ij D_ij. Compare that with the central difference
    (f(⟨W⟩ + εD) − f(⟨W⟩ − εD)) / 2ε for `n_directions` random Gaussian directions D (drawn from `seed`, the same
    for every call). Returns per layer ‖predicted − numerical‖ / ‖numerical‖ over the directions: at the
    finite-difference noise floor for the exact increments, 1/2 for a layer whose increments are halved."""
    rng, out = np.random.default_rng(seed), []
    for k, inc in enumerate(incs):
        predicted, numerical = [], []
        for _ in range(n_directions):
            d = rng.standard_normal(inc.shape)
            d = d * net.layers[k].mask if net.layers[k].mask is not None else d
            predicted.append(np.sum(inc * d))
            up = log_likelihood_from(net, fwd, y, k, m=fwd.w_mean[k] + eps * d)
            down = log_likelihood_from(net, fwd, y, k, m=fwd.w_mean[k] - eps * d)
            numerical.append((up - down) / (2.0 * eps))
        out.append(relative_error(predicted, numerical))
    return out


# ----------------------------------------------------------------------------------------------------------
# The paper's printed Algorithm 1, misprint by misprint (notebook 03; docs/maths.md §The printed Algorithm 1)
# ----------------------------------------------------------------------------------------------------------

def algorithm1_variant(net: Network, fwd: Pass, y: np.ndarray, factor_two: bool = True, use_nu: bool = True,
                       bias_in_normaliser: bool = True) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Δ and h increments of Algorithm 1 with each of the paper's three misprints switched on or off
    (docs/maths.md §The printed Algorithm 1), on top of the forward pass `fwd`:
      factor_two=False          drops the 2 of dν/dμ = 2N(0|μ,σ²) in the hidden Δ;
      use_nu=False              multiplies the h increment by μ_{j,l−1} instead of ν_{j,l−1} (x at layer 1);
      bias_in_normaliser=False  divides by sqrt(K) instead of sqrt(N) = sqrt(K + 1) in the backward pass.
    All True is ebp_lib's backward/increments; all False is the printed Δ and increments on a sqrt(K+1) forward
    pass (tests/test_engine.py). Fully connected
    networks without dropout masks only."""
    norm = [np.sqrt(layer.normaliser if bias_in_normaliser else layer.normaliser - 1) for layer in net.layers]
    deltas = [output_delta(y, fwd.mu[-1], fwd.sigma2[-1])]
    for k in range(len(net.layers) - 1, 0, -1):
        slope = (2.0 if factor_two else 1.0) * gaussian_at_zero(fwd.mu[k - 1], fwd.sigma2[k - 1])
        deltas.insert(0, slope * ((deltas[0] / norm[k]) @ fwd.w_mean[k]))
    incs = []
    for k, delta in enumerate(deltas):
        prev = fwd.inputs[k] if (use_nu or k == 0) else fwd.mu[k - 1]
        incs.append((delta / norm[k]).T @ prev)
    return deltas, incs


# Each misprint of the printed Algorithm 1 alone, the harmless √K convention, and the whole printed algorithm, as
# flags of algorithm1_step (docs/maths.md §The printed Algorithm 1; notebooks 01, 03, 04).
MISPRINTS = {
    "corrected": {},                                          # ebp_lib: sqrt(K + 1), the factor 2, ν
    "√K in both passes": {"sqrt_k": "both"},                  # the printed normaliser: a convention, no error
    "no factor 2": {"factor_two": False},                     # the printed hidden Δ
    "μ for ν": {"use_nu": False},                             # the printed h update
    "√K in Δ only": {"sqrt_k": "backward"},                   # a mismatch of the passes (not in the paper)
    "as printed": {"factor_two": False, "use_nu": False, "sqrt_k": "both"},   # the printed Algorithm 1
}


def with_fan_in_normaliser(net: Network) -> Network:
    """A copy of `net` whose units divide by sqrt(K), their fan-in, instead of sqrt(N) = sqrt(K + 1): the printed
    Algorithm 1's normaliser, to be used in both passes. The same network up to a scale of every unit's input:
    μ/σ, ν and the h increments are unchanged, Δ scales by sqrt(N/K) per layer (notebook 03 §7)."""
    out = copy.deepcopy(net)
    for layer in out.layers:
        layer.normaliser = layer.normaliser - 1
    return out


def algorithm1_step(net: Network, x: np.ndarray, y: np.ndarray, factor_two: bool = True, use_nu: bool = True,
                    sqrt_k: str = "neither") -> tuple[Network, Pass, list[np.ndarray], list[np.ndarray]]:
    """One step of Algorithm 1 on the minibatch (x, y), with the chosen misprints (the values of MISPRINTS):
      factor_two=False   the hidden Δ without the 2 of dν/dμ = 2N(0|μ,σ²);
      use_nu=False       the h increment with μ_{j,l−1} for ν_{j,l−1};
      sqrt_k="both"      sqrt(K) in the forward and the backward pass (the printed algorithm; a convention),
      sqrt_k="backward"  sqrt(K + 1) forward but sqrt(K) in Δ and the increments (a mismatch of the passes).
    Returns the network whose forward pass was used (a with_fan_in_normaliser copy for "both"), that pass, Δ and
    the h increments; the finite-difference reference must differentiate that network's forward pass."""
    if sqrt_k not in ("neither", "both", "backward"):
        raise ValueError(f"sqrt_k={sqrt_k!r}: choose 'neither' (sqrt(K+1) everywhere), 'both' (sqrt(K) in both "
                         f"passes) or 'backward' (sqrt(K) in the backward pass only)")
    used = with_fan_in_normaliser(net) if sqrt_k == "both" else net
    fwd = forward(used, x)
    deltas, incs = algorithm1_variant(used, fwd, y, factor_two, use_nu, bias_in_normaliser=sqrt_k != "backward")
    return used, fwd, deltas, incs


def misprint_errors(net: Network, x: np.ndarray, y: np.ndarray, variants=None,
                    eps: float = 1e-5) -> dict[str, dict[str, list[float]]]:
    """For each variant (default MISPRINTS): the relative error of every layer's Δ and h increments against
    finite differences (numerical_deltas, numerical_increments) of ln P(v_L = y) for that variant's own forward
    pass, {name: {"Δ": [layer 1, …], "Δh": [layer 1, …]}}. One function evaluation per entry: small networks."""
    variants = MISPRINTS if variants is None else variants
    references, out = {}, {}
    for name, flags in variants.items():
        used, fwd, deltas, incs = algorithm1_step(net, x, y, **flags)
        key = flags.get("sqrt_k") == "both"                  # two forward passes: sqrt(K + 1) or sqrt(K)
        if key not in references:
            references[key] = numerical_deltas(used, fwd, y, eps), numerical_increments(used, fwd, y, eps)
        ref_deltas, ref_incs = references[key]
        out[name] = {"Δ": [relative_error(a, r) for a, r in zip(deltas, ref_deltas)],
                     "Δh": [relative_error(a, r) for a, r in zip(incs, ref_incs)]}
    return out


def misprint_directional_errors(net: Network, x: np.ndarray, y: np.ndarray, variants=None, seed: int = 0,
                                n_directions: int = 3, eps: float = 1e-4) -> dict[str, list[float]]:
    """directional_errors of each variant's h increments (default MISPRINTS) on the minibatch (x, y), against its
    own forward pass, with the same random directions for every variant: the finite-difference check of
    notebook 04, cheap enough for a [784, 200, 10] network. {name: [layer 1, …]}."""
    variants = MISPRINTS if variants is None else variants
    out = {}
    for name, flags in variants.items():
        used, fwd, _, incs = algorithm1_step(net, x, y, **flags)
        out[name] = directional_errors(used, fwd, y, incs, seed, n_directions, eps)
    return out


def train_epoch_variant(net: Network, x: np.ndarray, y: np.ndarray, batch_size: int, rng, **misprints) -> None:
    """One epoch of EBP, in place, with misprints of Algorithm 1 switched on (algorithm1_step's flags): what each
    costs in training (notebook 04). The training set in a new random order from `rng`, one step per minibatch,
    increments summed; the bias moves by the variant's Δ over its own normaliser, as in ebp_lib.update. Without
    flags it is ebp_train.train_epoch(engine="reference") bit for bit. No dropout."""
    order = rng.permutation(len(x))
    for start in range(0, len(x), batch_size):
        idx = order[start:start + batch_size]
        used, _, deltas, incs = algorithm1_step(net, x[idx], y[idx], **misprints)
        for layer, norm, inc, delta in zip(net.layers, used.layers, incs, deltas):
            n = norm.normaliser - 1 if misprints.get("sqrt_k") == "backward" else norm.normaliser
            layer.h += inc
            layer.b += (delta / np.sqrt(n)).sum(axis=0)


# ----------------------------------------------------------------------------------------------------------
# Finite differences in the biases: the b line of ebp_lib.update (notebook 05)
# ----------------------------------------------------------------------------------------------------------

def log_likelihood_of_bias(net: Network, fwd: Pass, y: np.ndarray, k: int, b: np.ndarray) -> float:
    """Σ_i ln Φ(y_i μ_{i,L}/σ_{i,L}) as a function of layer k's bias b (layers numbered from 0), every σ and every
    ⟨W⟩ held at the values of the forward pass `fwd` (docs/maths.md §The same update as a gradient): b enters
    μ_k = (⟨W_k⟩ ν_{k−1} + b)/sqrt(N_k) for every image of the minibatch; log_likelihood_from does the rest."""
    mu = (fwd.inputs[k] @ fwd.w_mean[k].T + b) / np.sqrt(net.layers[k].normaliser)
    return log_likelihood_from(net, fwd, y, k, mu=mu)


def numerical_bias_increments(net: Network, fwd: Pass, y: np.ndarray, eps: float = 1e-5) -> list[np.ndarray]:
    """Finite-difference reference for the bias increments: ∂ ln P(v_L = y)/∂b_l of every layer, σ and ⟨W⟩ held
    fixed, by central differences of log_likelihood_of_bias. What ebp_lib.update should add to each layer's b:

        Δb_i = Σ_batch Δ_i / sqrt(N_i)      (docs/maths.md §Update)
    """
    return [_central_difference(lambda b, k=k: log_likelihood_of_bias(net, fwd, y, k, b), layer.b.astype(float), eps)
            for k, layer in enumerate(net.layers)]
