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
runs of one configuration at once (`vmap` over their parameters, data orders and dropout masks), and
`group_epoch` trains ebp_lib networks that way, each run exactly as engine="jax" trains it alone: its own order
and masks from its own generator, and its own arithmetic, bit for bit on the CPU (tests/test_group.py), because
no operand of a product is shared by the group (_per_run, mean_input). The runner's --group-seeds uses it
(reproduction/group.py). Float32 matrix products use full float32 precision on every device
(`MATMUL_PRECISION`): GPUs would otherwise default to TF32.
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

# Each function that writes ebp_lib's equations again in JAX (to be compiled, differentiated and vmapped) and the
# readable function it computes (tests/test_jax.py checks every pair).
REFERENCES = {
    "weight_moments": "ebp_lib.weight_moments",
    "forward": "ebp_lib.forward",                     # μ and σ² of every layer, the training and the test pass
    "ebp_step": "ebp_lib.ebp_step",                   # jax.grad of ln P through `forward`, σ² frozen
    "ebp_p": "ebp_lib.output_ebp_p",                  # ν_L of `forward` at test time
    "ebp_d": "ebp_lib.output_ebp_d",                  # the sign network
}


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: a static argument of jit
class Structure:
    """What a step needs besides the parameters, fixed for a network: weight type, dropout reading and keep
    probability, each layer's connectivity mask (None: dense), whether masked weights are held, N, and each
    layer's convolution geometry (ebp_conv.Conv; None: a dense or locally connected layer)."""
    weights: str
    dropout: str | None
    keep: float
    masks: tuple
    held: bool
    norms: tuple
    convs: tuple = ()


_STRUCTURES: dict = {}  # one Structure per network configuration and dtype: see structure


def structure(net: ebp_lib.Network, dtype=None) -> Structure:
    """The Structure of an ebp_lib network (its masks and N as arrays of `dtype`, default the network's). The
    same object for every network of one configuration: jit compares static arguments by identity, so a new
    Structure per call would compile the step again for every epoch and every evaluation. ValueError for the
    authors' real-weight update: back-propagating through updated weights is not the gradient of one ln P, so this
    engine, which is that gradient, runs the spec's update only."""
    if net.real_update != "spec":
        raise ValueError(f"the jax engine trains real_update='spec' only, not {net.real_update!r}: use "
                         f"engine='fast' or 'reference' for the authors' real-weight update")
    dtype = np.dtype(dtype or net.layers[0].h.dtype)
    key = (net.weights, net.dropout, float(net.keep), net.mask_reading, net.real_update,
           net.input_side, repr(net.architecture), dtype.name)
    if key not in _STRUCTURES:
        _STRUCTURES[key] = Structure(
            net.weights, net.dropout, float(net.keep),
            tuple(None if layer.mask is None else jnp.asarray(layer.mask, dtype) for layer in net.layers),
            any(layer.held for layer in net.layers), tuple(jnp.asarray(layer.normaliser, dtype) for layer in net.layers),
            tuple(layer.conv for layer in net.layers))
    return _STRUCTURES[key]


def parameters(net: ebp_lib.Network, dtype=None) -> list[tuple[jax.Array, jax.Array]]:
    """[(h, b) per layer] of an ebp_lib network as JAX arrays of their own. Why copies: JAX reads a NumPy array
    after this returns (the transfer is asynchronous), so an update of the network in place (ebp_lib's steps) could
    otherwise reach the JAX array."""
    return [(jnp.asarray(np.array(layer.h, dtype)), jnp.asarray(np.array(layer.b, dtype))) for layer in net.layers]


def _per_run(constant, like):
    """`constant` (the same for every run: a connectivity mask, ones) as an array computed from a run's own `like`
    (0·like + constant, exact; XLA keeps 0·x for floats, as 0·NaN is NaN). Why: in a vmapped group an operand
    shared by all runs lets XLA merge the runs' products into one larger product (or rewrite a product with ones
    as a reduction), which sums in another order than the run's product alone; an operand of the run's own keeps
    each run's arithmetic that of the run alone (train_group)."""
    return 0.0 * like + constant


def weight_moments(h, mask, s: Structure):
    """⟨W⟩ and ⟨W²⟩ (binary: tanh h and 1; real: h and h² + 1), zero where a weight is absent. ⟨W²⟩ is None
    where it is 1 for every weight (binary, dense or with masked weights held): second_moment_sum then sums the
    inputs' ⟨v²⟩ alone."""
    mean, second = (jnp.tanh(h), None) if s.weights == "binary" else (h, h * h + 1.0)
    if mask is not None and not s.held:
        mean, second = mean * mask, _per_run(mask, h) if second is None else second * mask
    return mean, second


def matmul(a, b):
    """a @ b at MATMUL_PRECISION (full float32 on every device)."""
    return jnp.matmul(a, b, precision=MATMUL_PRECISION)


def second_moment_sum(v2, w2, m, batch: int):
    """Σ_i ⟨W²_ji⟩⟨v²_i⟩, the first term of every unit j's σ² (docs/maths.md §Forward pass), for a minibatch of
    `batch` inputs: `v2` is their ⟨v²⟩ (None: 1, a hidden layer's ±1 units without dropout), `w2` ⟨W²⟩ (None: 1)
    and `m` the layer's ⟨W⟩. Always a product, its ones made the run's own from `m` (_per_run): a plain sum over
    the inputs is a reduction, which XLA orders differently for one run and for a vmapped group (at 144 or 256
    inputs, not at 784, on this CPU)."""
    if v2 is None and w2 is None:
        return jnp.asarray(float(m.shape[1]), m.dtype)
    if w2 is None:
        return matmul(v2, _per_run(1.0, m[:1].T))
    return matmul(_per_run(jnp.ones((batch, m.shape[1]), m.dtype), m[:1]) if v2 is None else v2, w2.T)


def mean_input(nu, m, b):
    """⟨W⟩ν + b for a minibatch, as one product of [ν, 1] and [⟨W⟩, b]. Why: the gradient of b is then a column
    of the product that gives ⟨W⟩'s (Σ over the minibatch of Δ, summed as each run's own product); the gradient of
    a broadcast b is a reduction, which XLA orders differently for a vmapped group than for one run."""
    ones = jnp.ones((nu.shape[0], 1), nu.dtype)
    return matmul(jnp.concatenate([nu, ones], axis=1), jnp.concatenate([m, b[:, None]], axis=1).T)


def correlate(v, w, g):
    """ebp_conv.correlate with jax.lax.conv_general_dilated: (B, C·S·S) flat maps and a (channels, C·k·k) kernel
    → (B, channels·P) flat output maps, Σ_r w_{o,r} v_{p,r} ("valid", stride g.stride)."""
    maps = v.reshape(v.shape[0], g.in_channels, g.in_side, g.in_side)
    kernel = w.reshape(g.channels, g.in_channels, g.kernel, g.kernel)
    out = jax.lax.conv_general_dilated(maps, kernel, (g.stride, g.stride), "VALID",
                                       dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=MATMUL_PRECISION)
    return out.reshape(v.shape[0], g.units)


def conv_moments(nu, v2, nu2, m, b, w2, n, g):
    """μ and σ² of a convolutional layer (ebp_conv.moments), σ² frozen:

        μ = (⟨W⟩ ⋆ ν + b)/√N,   σ² = (⟨W²⟩ ⋆ ⟨v²⟩ − ⟨W⟩² ⋆ ν² + 1)/N

    ⟨W²⟩ = None: 1 (binary weights); ⟨v²⟩ = None: 1 (±1 units), where the first term is Σ_r ⟨W²_{o,r}⟩."""
    if v2 is None:
        second = float(g.fan_in) * jnp.ones_like(n) if w2 is None else jnp.repeat(w2.sum(axis=1), g.positions)
    else:
        second = correlate(v2, jnp.ones_like(m) if w2 is None else w2, g)
    sigma2 = jax.lax.stop_gradient((second - correlate(nu2, m * m, g) + 1.0) / n)
    return (correlate(nu, m, g) + jnp.repeat(b, g.positions)) / jnp.sqrt(n), sigma2


def forward(means, biases, seconds, x, input_scales, s: Structure):
    """The forward pass of ebp_lib.forward, layer by layer: yields μ and σ² of every layer,

        μ = (⟨W⟩ν + b)/√N,   σ² = (Σ⟨W²⟩⟨v²⟩ − Σ⟨W⟩²ν² + 1)/N,   ν = erf(μ/√(2σ²)) passed on,

    with every σ² frozen (stop_gradient: EBP's gradient holds the variances fixed; no effect on values).
    `input_scales[k]` multiplies layer k's inputs (None: nothing): a sampled dropout mask in training, the keep
    probability p at test time; ν → ν·m and ⟨v²⟩ → ⟨v²⟩·m² (m² = m for a 0/1 mask). The analytic dropout reading
    scales the image's ν² by ebp_lib.analytic_factor. A convolutional layer computes the same moments as
    convolutions (conv_moments)."""
    nu, v2, nu2 = x, x * x, x * x
    if s.dropout == "analytic":
        nu2 = ebp_lib.analytic_factor(s.keep) * nu2
    convs = s.convs or (None,) * len(s.norms)
    for k, (m, b, w2, n, g) in enumerate(zip(means, biases, seconds, s.norms, convs)):
        scale = input_scales[k]
        if scale is not None:
            nu = nu * scale
            v2 = scale * scale * jnp.ones_like(nu) if v2 is None else v2 * (scale * scale)
            nu2 = nu * nu
        if g is not None:
            mu, sigma2 = conv_moments(nu, v2, nu2, m, b, w2, n, g)
        else:
            sigma2 = jax.lax.stop_gradient((second_moment_sum(v2, w2, m, nu.shape[0]) - matmul(nu2, (m * m).T) + 1.0)
                                           / n)
            mu = mean_input(nu, m, b) / jnp.sqrt(n)
        yield mu, sigma2
        nu = erf(mu / jnp.sqrt(2.0 * sigma2))
        v2, nu2 = None, nu * nu


def log_likelihood(means, biases, seconds, x, y, input_masks, s: Structure):
    """ln P(y | x) = Σ ln Φ(yμ_L/σ_L) summed over the minibatch, as a function of the mean weights and biases, with
    every σ² frozen (stop_gradient), through `forward`; `input_masks` are the sampled dropout masks of every layer's
    inputs (None: no mask)."""
    *_, (mu, sigma2) = forward(means, biases, seconds, x, input_masks, s)
    return jnp.sum(log_ndtr(y * mu / jnp.sqrt(sigma2)))


def ebp_step(params, x, y, input_masks, s: Structure):
    """One EBP step: h += ∂ln P/∂⟨W⟩ (0 where a weight is masked out), b += ∂ln P/∂b, σ² frozen."""
    moments = [weight_moments(h, mask, s) for (h, _), mask in zip(params, s.masks)]
    means, seconds = [m for m, _ in moments], [w2 for _, w2 in moments]
    biases = [b for _, b in params]
    d_means, d_biases = jax.grad(log_likelihood, argnums=(0, 1))(means, biases, seconds, x, y, input_masks, s)
    return [(h + (dm if mask is None else dm * mask), b + db)
            for (h, b), dm, db, mask in zip(params, d_means, d_biases, s.masks)]


@partial(jax.jit, static_argnames=("s", "batch_size"))
def train_epoch(params, x, y, order, s: Structure, batch_size: int, masks=None):
    """EBP steps on x[order[0:B]], x[order[B:2B]], ... in one compiled call (lax.scan); len(order) must be a
    multiple of the batch size B. `masks`: with sampled dropout, each layer's input masks for every step, one
    boolean array (steps, B, inputs) per layer, drawn by the caller (draw_masks); None without."""
    batches = order.reshape(-1, batch_size)

    def step(carry, inputs):
        idx, step_masks = inputs
        input_masks = (None,) * len(s.norms) if step_masks is None else tuple(m.astype(x.dtype) for m in step_masks)
        return ebp_step(carry, x[idx], y[idx], input_masks, s), None

    params, _ = jax.lax.scan(step, params, (batches, masks))
    return params


@partial(jax.jit, static_argnames=("s", "batch_size"))
def train_group(group_params, x, y, orders, s: Structure, batch_size: int, masks=None):
    """train_epoch for several runs at once: `group_params`, `orders` (and `masks`) carry a leading run axis (one
    data order and one set of dropout masks per run). Each run's arithmetic is that of train_epoch on the run alone
    (see _per_run and mean_input; tests/test_jax.py and tests/test_group.py compare them bit for bit on the CPU)."""
    return jax.vmap(lambda p, o, m: train_epoch(p, x, y, o, s, batch_size, m))(group_params, orders, masks)


def stack_runs(runs: list) -> list:
    """[(h, b) per layer] of several runs -> the same with a leading run axis (train_group's layout)."""
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *runs)


def unstack_run(group_params, i: int) -> list:
    return jax.tree_util.tree_map(lambda a: a[i], group_params)


# ----------------------------------------------------------------------------------------------------------
# engine="jax": ebp_train's Engine interface (step, steps, outputs) in float32, like engine="fast"
# ----------------------------------------------------------------------------------------------------------

# Steps per compiled call with sampled dropout: the masks of one call are drawn beforehand and held in memory
# (600 steps of batch 10 on [784, 800, 800, 10]: 14 MB per run); without dropout a whole epoch is one call.
CHUNK_STEPS = 600

_step = jax.jit(ebp_step, static_argnames=("s",))


def _float32(net: ebp_lib.Network):
    return parameters(net, jnp.float32), structure(net, jnp.float32)


def _write_back(net: ebp_lib.Network, params) -> None:
    for layer, (h, b) in zip(net.layers, params):
        layer.h[...] = np.asarray(h, layer.h.dtype)
        layer.b[...] = np.asarray(b, layer.b.dtype)


def _finite(params) -> bool:
    return all(bool(jnp.isfinite(h).all() & jnp.isfinite(b).all()) for h, b in params)


def draw_masks(net: ebp_lib.Network, batch: int, steps: int, rng) -> tuple | None:
    """The sampled dropout masks of `steps` steps of minibatch `batch`, drawn from `rng` exactly as ebp_lib.forward
    draws them step after step (layer by layer, rng.random of each layer's input shape, kept where < keep), so
    every engine sees the same masks: one boolean array (steps, batch, inputs) per layer. None without sampled
    dropout (nothing is drawn)."""
    if net.dropout != "sampled":
        return None
    masks = [np.empty((steps, batch, width), bool) for width in net.sizes[:-1]]
    for t in range(steps):
        for layer_masks, width in zip(masks, net.sizes[:-1]):
            layer_masks[t] = rng.random((batch, width)) < net.keep
    return tuple(masks)


def _single_steps(net, params, s, x, y, batches, rng, step_name, masks=None, fresh=False):
    """Steps one minibatch at a time (a remainder, train_step, or locating a non-finite step): stops before the
    first step whose result is not finite (_stop), leaving the last finite parameters in `net`; if that is its first
    step and `params` are `net`'s own (`fresh`), `net` is left exactly as it was, not rounded to float32, as the
    fast engine leaves it. The dropout masks are `masks` (draw_masks' arrays for these steps) or, if None, drawn
    from `rng` step by step."""
    for k, idx in enumerate(batches):
        step_masks = draw_masks(net, len(idx), 1, rng) if masks is None else tuple(m[k:k + 1] for m in masks)
        input_masks = ((None,) * len(net.layers) if step_masks is None
                       else tuple(jnp.asarray(m[0], jnp.float32) for m in step_masks))
        new = _step(params, jnp.asarray(x[idx], jnp.float32), jnp.asarray(y[idx], jnp.float32), input_masks, s)
        if not _finite(new):
            if k or not fresh:
                _write_back(net, params)
            _stop(net, x[idx], y[idx], step_name(k))
        params = new
    return params


def _stop(net: ebp_lib.Network, x, y, step) -> None:
    """Raise the error the other engines raise for a step whose result is not finite (`net` holds the parameters
    before it): the fast engine's for a NaN/inf parameter, else the reference's (ebp_lib.backward's, naming the
    first layer whose Δ is not finite and why), or, where only float32 overflows, one naming the parameters."""
    bad = ebp_lib.nonfinite_parameters(net)
    if bad:
        raise FloatingPointError(f"non-finite {bad[0]} at step {step}: NaN/inf in {', '.join(bad)}, so Δ is not "
                                 f"finite (NaN) or the update is meaningless (inf); training stopped before the "
                                 f"update, so the parameters are those of the last finite step")
    fwd = ebp_lib.forward(net, x)
    ebp_lib.backward(net, fwd, y, step=step)  # raises the reference's error where its Δ is not finite
    raise FloatingPointError(f"non-finite parameters after step {step} (float32 overflow): "
                             f"{ebp_lib.nonfinite_origin(net, fwd)}; training stopped before that update, so the "
                             f"parameters are those of the last finite step")


def train_step(net: ebp_lib.Network, x, y, rng, step) -> None:
    """ebp_train.train_step on engine="jax": one float32 step, written back into `net`."""
    params, s = _float32(net)
    _write_back(net, _single_steps(net, params, s, x, y, [np.arange(len(x))], rng, lambda k: step, fresh=True))


def calls(n_steps: int, sampled: bool) -> list[tuple[int, int]]:
    """(first step, steps) of each compiled call an epoch of `n_steps` full minibatches takes: one call, or calls
    of CHUNK_STEPS steps with sampled dropout (whose masks are drawn before each call). A run alone and in a group
    take the same calls."""
    size = CHUNK_STEPS if sampled else max(n_steps, 1)
    return [(first, min(size, n_steps - first)) for first in range(0, n_steps, size)]


def train_steps(net: ebp_lib.Network, x, y, order, batch_size, rng, step_name) -> None:
    """The steps on the minibatches of x[order]: the full minibatches in compiled calls (train_epoch, calls), a
    remainder as one more step; a call whose result is not finite is replayed step by step (with the same masks)
    to stop where the reference stops."""
    params, s = _float32(net)
    x32, y32 = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
    n_steps = len(order) // batch_size
    for first, steps in calls(n_steps, net.dropout == "sampled"):
        idx = order[first * batch_size:(first + steps) * batch_size]
        masks = draw_masks(net, batch_size, steps, rng)
        trained = train_epoch(params, x32, y32, jnp.asarray(idx), s, batch_size, masks)
        if not _finite(trained):
            _single_steps(net, params, s, x, y, idx.reshape(steps, batch_size), rng,
                          lambda k, first=first: step_name(first + k), masks, fresh=first == 0)  # raises
        params = trained
    remainder = [order[n_steps * batch_size:]] if len(order) % batch_size else []
    _write_back(net, _single_steps(net, params, s, x, y, remainder, rng, lambda k: step_name(k + n_steps),
                                   fresh=n_steps == 0))



def group_epoch(nets: list, x, y, batch_size: int, rngs: list, epoch: int = 0) -> list:
    """One epoch of several runs of one configuration at once, each run trained exactly as
    ebp_train.train_epoch(net, x, y, batch_size, rng, epoch, engine="jax") trains it alone: its data order and then
    its dropout masks, call by call, drawn from its own generator in the same sequence, in the same compiled calls
    (calls), with the runs side by side in train_group. The nets are updated in place. A run whose parameters become
    non-finite is replayed alone and stops where it stops alone, holding its last finite step; the others go on.
    Returns one FloatingPointError (that run's) or None per run."""
    if len({id(structure(net, jnp.float32)) for net in nets}) != 1:
        raise ValueError("a group's runs must share one network configuration (architecture, weights, dropout, "
                         "mask reading)")
    for net in nets:
        ebp_lib.check_data(net, x, y, batch_size)
    s, n_steps = structure(nets[0], jnp.float32), len(x) // batch_size
    x32, y32 = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
    orders = [rng.permutation(len(x)) for rng in rngs]
    params = [parameters(net, jnp.float32) for net in nets]
    errors: list = [None] * len(nets)

    def step_name(first):  # as ebp_train.train_steps names a step
        return lambda k: f"{first + k} of epoch {epoch + 1} (batch size {batch_size})"

    def alone(i, batches, first, masks=None):  # steps of run i by itself: a remainder, or a replay
        try:
            params[i] = _single_steps(nets[i], params[i], s, x, y, batches, rngs[i], step_name(first), masks,
                                      fresh=first == 0)
        except FloatingPointError as err:  # _single_steps wrote the last finite step into the net
            errors[i] = err

    for i, net in enumerate(nets):  # as ebp_train.train_steps refuses a run alone
        try:
            ebp_lib.check_finite_parameters(net, step_name(0)(0))
        except FloatingPointError as err:
            errors[i] = err
    for first, steps in calls(n_steps, nets[0].dropout == "sampled"):
        live = [i for i, error in enumerate(errors) if error is None]
        idx = [orders[i][first * batch_size:(first + steps) * batch_size] for i in live]
        masks = [draw_masks(nets[i], batch_size, steps, rngs[i]) for i in live]
        stacked = None if nets[0].dropout != "sampled" else tuple(np.stack(layer) for layer in zip(*masks))
        trained = train_group(stack_runs([params[i] for i in live]), x32, y32, jnp.asarray(np.stack(idx)), s,
                              batch_size, stacked) if live else None
        for j, i in enumerate(live):
            run = unstack_run(trained, j)
            if _finite(run):
                params[i] = run
            else:
                alone(i, idx[j].reshape(steps, batch_size), first, masks[j])
    if len(x) % batch_size:
        for i in [i for i, error in enumerate(errors) if error is None]:
            alone(i, [orders[i][n_steps * batch_size:]], n_steps)
    for i, net in enumerate(nets):
        if errors[i] is None:
            _write_back(net, params[i])
    return errors


def ebp_p(params, x, s: Structure):
    """EBP-P: ν_L = erf(μ_L/√(2σ²_L)) of `forward` (ebp_lib.output_ebp_p), sampled dropout read at test time as
    the weights scaled by p."""
    moments = [weight_moments(h, mask, s) for (h, _), mask in zip(params, s.masks)]
    scales = [s.keep if s.dropout == "sampled" else None] * len(params)
    *_, (mu, sigma2) = forward([m for m, _ in moments], [b for _, b in params], [w2 for _, w2 in moments], x,
                               scales, s)
    return erf(mu / jnp.sqrt(2.0 * sigma2))


def ebp_d(params, x, s: Structure):
    """EBP-D: the sign network (ebp_lib.output_ebp_d) with W = sign(h) (binary) or h (real), 0 off a mask, the
    real bias, hidden units sign(u) (+1 at 0), a linear output; sampled dropout scales W by p."""
    scale = s.keep if s.dropout == "sampled" else 1.0
    v, last = x, len(params) - 1
    for k, ((h, b), mask, g) in enumerate(zip(params, s.masks, s.convs or (None,) * len(params))):
        w = jnp.sign(h) if s.weights == "binary" else h
        if g is not None:  # a convolution of the sign kernels (ebp_conv.sign_layer)
            u = scale * correlate(v, w, g) + jnp.repeat(b, g.positions)
        else:
            u = scale * matmul(v, (w if mask is None else w * mask).T) + b
        v = u if k == last else jnp.where(u >= 0, 1.0, -1.0).astype(u.dtype)
    return v


@partial(jax.jit, static_argnames=("s",))
def _outputs(params, x, s: Structure):
    """EBP-P and EBP-D of a batch (ebp_p, ebp_d)."""
    return ebp_p(params, x, s), ebp_d(params, x, s)


class float32_outputs:
    """The outputs context of engine="jax" (ebp_train.Engine): x ↦ (EBP-P, EBP-D) as numpy float32 arrays."""

    def __init__(self, net: ebp_lib.Network):
        self.params, self.s = _float32(net)

    def __enter__(self):
        return lambda x: tuple(np.asarray(o) for o in _outputs(self.params, jnp.asarray(x, jnp.float32), self.s))

    def __exit__(self, *exc):
        return False
