"""EBP as automatic differentiation with frozen variances: the training step in JAX (docs/maths.md §EBP as a
gradient).

EBP's increments are the gradient of the mean-field network's log-likelihood,

    ln P(y | x) = Σ_k ln Φ(y_k μ_{L,k} / σ_{L,k}),

with respect to the mean weights ⟨W⟩ and the biases b, computed through the forward pass (docs/maths.md §Forward
pass) with every σ² held fixed. The chain rule then produces the backward pass by itself: ∂ln Φ(yμ/σ)/∂μ is the
output Δ, dν/dμ = 2N(0|μ,σ²) is the factor 2 that the paper's Algorithm 1 drops, and ∂μ/∂⟨W⟩ = ν_prev/√N gives
the increments δh = Σ_batch Δ ν_prev/√N. So

    h ← h + ∂ln P/∂⟨W⟩,   b ← b + ∂ln P/∂b       (with stop_gradient on every σ²)

is the whole training step: backprop on the mean network with no learning rate, applied to the natural
parameters h. `ebp_step` is that program; tests/test_jax.py asserts it equals ebp_lib's step to rounding.

`train_epoch` runs an epoch as one compiled call (`lax.scan` over minibatches); `train_group` runs several
runs of one configuration at once (`vmap` over their parameters and data orders). Float32 matrix products use
full float32 precision on every device (`MATMUL_PRECISION`): GPUs would otherwise default to TF32.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erf, log_ndtr

import ebp_lib

MATMUL_PRECISION = jax.lax.Precision.HIGHEST


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: a static argument of jit
class Structure:
    """What a step needs besides the parameters, fixed for a network: weight type, dropout reading and keep
    probability, each layer's connectivity mask (None: dense), whether masked weights are held, and N."""
    weights: str
    dropout: str | None
    keep: float
    masks: tuple
    held: bool
    norms: tuple


def structure(net: ebp_lib.Network, dtype=None) -> Structure:
    """The Structure of an ebp_lib network (its masks and N as arrays of `dtype`, default the network's).
    ValueError for the authors' real-weight update: back-propagating through updated weights is not the gradient
    of one ln P, so this engine, which is that gradient, runs the spec's update only."""
    if net.real_update != "spec":
        raise ValueError(f"the jax engine trains real_update='spec' only, not {net.real_update!r}: use "
                         f"engine='fast' or 'reference' for the authors' real-weight update")
    dtype = dtype or net.layers[0].h.dtype
    return Structure(net.weights, net.dropout, float(net.keep),
                     tuple(None if layer.mask is None else jnp.asarray(layer.mask, dtype) for layer in net.layers),
                     any(layer.held for layer in net.layers),
                     tuple(jnp.asarray(layer.normaliser, dtype) for layer in net.layers))


def parameters(net: ebp_lib.Network, dtype=None) -> list[tuple[jax.Array, jax.Array]]:
    """[(h, b) per layer] of an ebp_lib network as JAX arrays."""
    return [(jnp.asarray(layer.h, dtype), jnp.asarray(layer.b, dtype)) for layer in net.layers]


def weight_moments(h, mask, s: Structure):
    """⟨W⟩ and ⟨W²⟩ (binary: tanh h and 1; real: h and h² + 1), zero where a weight is absent."""
    mean, second = (jnp.tanh(h), jnp.ones_like(h)) if s.weights == "binary" else (h, h * h + 1.0)
    if mask is not None and not s.held:
        mean, second = mean * mask, second * mask
    return mean, second


def _matmul(a, b):
    return jnp.matmul(a, b, precision=MATMUL_PRECISION)


def log_likelihood(means, biases, seconds, x, y, input_masks, s: Structure):
    """ln P(y | x) summed over the minibatch, as a function of the mean weights and biases, with σ² frozen.

    The forward pass is ebp_lib.forward's: μ = (⟨W⟩ν + b)/√N, σ² = (Σ⟨W²⟩⟨v²⟩ − Σ⟨W⟩²ν² + 1)/N,
    ν = erf(μ/√(2σ²)); `input_masks` are the sampled dropout masks of every layer's inputs (None: no mask).
    """
    nu, v2, nu2 = x, x * x, x * x
    if s.dropout == "analytic":
        nu2 = (1.0 - 4.0 * s.keep * (1.0 - s.keep)) * nu2
    last = len(means) - 1
    for k, (m, b, w2, n) in enumerate(zip(means, biases, seconds, s.norms)):
        if input_masks[k] is not None:
            nu = nu * input_masks[k]
            v2 = input_masks[k] if v2 is None else v2 * input_masks[k]
            nu2 = nu * nu
        second = jnp.sum(w2, axis=1) if v2 is None else _matmul(v2, w2.T)
        sigma2 = jax.lax.stop_gradient((second - _matmul(nu2, (m * m).T) + 1.0) / n)
        mu = (_matmul(nu, m.T) + b) / jnp.sqrt(n)
        if k == last:
            return jnp.sum(log_ndtr(y * mu / jnp.sqrt(sigma2)))
        nu = erf(mu / jnp.sqrt(2.0 * sigma2))
        v2, nu2 = None, nu * nu


def ebp_step(params, x, y, input_masks, s: Structure):
    """One EBP step: h += ∂ln P/∂⟨W⟩ (0 where a weight is masked out), b += ∂ln P/∂b, σ² frozen."""
    moments = [weight_moments(h, mask, s) for (h, _), mask in zip(params, s.masks)]
    means, seconds = [m for m, _ in moments], [w2 for _, w2 in moments]
    biases = [b for _, b in params]
    d_means, d_biases = jax.grad(log_likelihood, argnums=(0, 1))(means, biases, seconds, x, y, input_masks, s)
    return [(h + (dm if mask is None else dm * mask), b + db)
            for (h, b), dm, db, mask in zip(params, d_means, d_biases, s.masks)]


@partial(jax.jit, static_argnames=("s", "batch_size"))
def train_epoch(params, x, y, order, s: Structure, batch_size: int):
    """One epoch as one compiled call: EBP steps on x[order[0:B]], x[order[B:2B]], ... (lax.scan). Without
    sampled dropout (its masks come from the caller's generator, see ebp_step); len(order) must be a multiple of
    the batch size."""
    batches = order.reshape(-1, batch_size)

    def step(carry, idx):
        return ebp_step(carry, x[idx], y[idx], (None,) * len(s.norms), s), None

    params, _ = jax.lax.scan(step, params, batches)
    return params


@partial(jax.jit, static_argnames=("s", "batch_size"))
def train_group(group_params, x, y, orders, s: Structure, batch_size: int):
    """One epoch of several runs at once: `group_params` and `orders` carry a leading run axis (one data order
    per run); each run's steps are exactly those train_epoch takes for it alone."""
    return jax.vmap(lambda p, o: train_epoch(p, x, y, o, s, batch_size))(group_params, orders)


def stack_runs(runs: list) -> list:
    """[(h, b) per layer] of several runs -> the same with a leading run axis (train_group's layout)."""
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *runs)


def unstack_run(group_params, i: int) -> list:
    return jax.tree_util.tree_map(lambda a: a[i], group_params)


# ----------------------------------------------------------------------------------------------------------
# engine="jax": ebp_lib's Engine interface (step, steps, outputs) in float32, like engine="fast"
# ----------------------------------------------------------------------------------------------------------

_step = jax.jit(ebp_step, static_argnames=("s",))


def _float32(net: ebp_lib.Network):
    return parameters(net, jnp.float32), structure(net, jnp.float32)


def _write_back(net: ebp_lib.Network, params) -> None:
    for layer, (h, b) in zip(net.layers, params):
        layer.h[...] = np.asarray(h, layer.h.dtype)
        layer.b[...] = np.asarray(b, layer.b.dtype)


def _finite(params) -> bool:
    return all(bool(jnp.isfinite(h).all() & jnp.isfinite(b).all()) for h, b in params)


def _draw_masks(net: ebp_lib.Network, batch: int, rng) -> tuple:
    """The sampled dropout masks of one step, drawn from `rng` exactly as ebp_lib.forward draws them (layer by
    layer, rng.random of each layer's input shape), so both engines see the same masks."""
    if net.dropout != "sampled":
        return (None,) * len(net.layers)
    return tuple(jnp.asarray(rng.random((batch, width)) < net.keep, jnp.float32) for width in net.sizes[:-1])


def _single_steps(net, params, s, x, y, batches, rng, step_name):
    """Steps one minibatch at a time (sampled dropout, or locating a non-finite step): stops before the first
    step whose result is not finite, with the reference engine's error (ebp_lib.backward's message)."""
    for k, idx in enumerate(batches):
        new = _step(params, jnp.asarray(x[idx], jnp.float32), jnp.asarray(y[idx], jnp.float32),
                    _draw_masks(net, len(idx), rng), s)
        if not _finite(new):
            _write_back(net, params)
            fwd = ebp_lib.forward(net, x[idx])
            raise FloatingPointError(f"non-finite parameters after step {step_name(k)}: "
                                     f"{ebp_lib.nonfinite_origin(net, fwd)}; training stopped before that update, "
                                     f"so the parameters are those of the last finite step")
        params = new
    return params


def train_step(net: ebp_lib.Network, x, y, rng, step) -> None:
    """ebp_lib's train_step on engine="jax": one float32 step, written back into `net`."""
    params, s = _float32(net)
    _write_back(net, _single_steps(net, params, s, x, y, [np.arange(len(x))], rng, lambda k: step))


def train_steps(net: ebp_lib.Network, x, y, order, batch_size, rng, step_name) -> None:
    """The steps on the minibatches of x[order]: without sampled dropout the full minibatches run as one
    lax.scan (train_epoch) and a remainder as one more step; a non-finite result is replayed step by step to stop
    where the reference stops."""
    params, s = _float32(net)
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if net.dropout == "sampled":
        return _write_back(net, _single_steps(net, params, s, x, y, batches, rng, step_name))
    n_full = len(order) // batch_size * batch_size
    x32, y32 = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
    trained = train_epoch(params, x32, y32, jnp.asarray(order[:n_full]), s, batch_size) if n_full else params
    if not _finite(trained):
        trained = _single_steps(net, params, s, x, y, batches[:n_full // batch_size], rng, step_name)
    _write_back(net, _single_steps(net, trained, s, x, y, batches[n_full // batch_size:], rng,
                                   lambda k: step_name(k + n_full // batch_size)))


@partial(jax.jit, static_argnames=("s",))
def _outputs(params, x, s: Structure):
    """EBP-P (ν_L of the forward pass, test-time dropout scaling) and EBP-D (the sign network) of a batch."""
    moments = [weight_moments(h, mask, s) for (h, _), mask in zip(params, s.masks)]
    scale = s.keep if s.dropout == "sampled" else 1.0
    nu, v2 = x, x * x
    nu2 = (1.0 - 4.0 * s.keep * (1.0 - s.keep)) * v2 if s.dropout == "analytic" else v2
    v = x
    last = len(params) - 1
    for k, ((h, b), (m, w2), mask, n) in enumerate(zip(params, moments, s.masks, s.norms)):
        if s.dropout == "sampled":
            nu = scale * nu
            v2 = scale ** 2 * (jnp.ones_like(nu) if v2 is None else v2)
            nu2 = nu * nu
        second = jnp.sum(w2, axis=1) if v2 is None else _matmul(v2, w2.T)
        sigma2 = (second - _matmul(nu2, (m * m).T) + 1.0) / n
        mu = (_matmul(nu, m.T) + b) / jnp.sqrt(n)
        nu, v2 = erf(mu / jnp.sqrt(2.0 * sigma2)), None
        nu2 = nu * nu
        w = jnp.sign(h) if s.weights == "binary" else h
        u = scale * _matmul(v, (w if mask is None else w * mask).T) + b
        v = u if k == last else jnp.where(u >= 0, 1.0, -1.0).astype(u.dtype)
    return nu, v


class _JaxOutputs:
    """ebp_lib's outputs context for engine="jax": x ↦ (EBP-P, EBP-D) as numpy float32 arrays."""

    def __init__(self, net: ebp_lib.Network):
        self.params, self.s = _float32(net)

    def __enter__(self):
        return lambda x: tuple(np.asarray(o) for o in _outputs(self.params, jnp.asarray(x, jnp.float32), self.s))

    def __exit__(self, *exc):
        return False


def engine() -> ebp_lib.Engine:
    """engine="jax" for ebp_lib (ENGINES): training and evaluation in float32 JAX."""
    return ebp_lib.Engine(train_step, train_steps, _JaxOutputs)
