"""The network every successor method trains: ±1 weights, sign hidden units, batch normalisation, 10 classes.

The nets are the paper's, [784, 800, 10] and [784, 800, 800, 10] (any hidden sizes work). Layer l computes

    a_l = h_{l-1} W_l                                  (W_l ∈ {−1, +1}^{n_{l-1} x n_l}; h_0 = x, the pixels)
    y_l = γ_l (a_l − m_l) / sqrt(v_l + ε) + β_l        (batch normalisation, Ioffe & Szegedy 2015)
    h_l = sign(y_l)  (+1 at 0)                          (hidden layers)
    z   = e^{s} a_L + b                                 (output: one positive scale e^s, a real bias per class)

Batch normalisation. BinaryConnect (Courbariaux et al. 2015), Bop (Helwegen et al. 2019) and BayesBiNN (Meng et
al. 2020) all train their binary nets with batch normalisation, and without it a sum of 800 terms ±1 has no
useful scale, so every hidden layer here has an affine BN (γ, β real, trained by Adam in every method; m, v the
batch's mean and variance in training, their running averages, momentum BN_MOMENTUM, at test time). It costs the
deployed net nothing: for γ > 0, sign(y) = sign(a + (β·sd/γ − m)) and for γ < 0, sign(y) = sign(−a + (m − β·sd/γ))
(sd = sqrt(v + ε)), a real threshold per unit and, where γ < 0, the unit's weights negated (successors.evaluate
folds it into ebp_binary's packed form). The output layer has no per-class BN: a scale per class could not be
folded into ±1 weights and one argmax; one shared scale e^s (a softmax temperature) and a bias per class can
(argmax(e^s a + b) = argmax(a + b e^{−s})).

Hidden units are sign() in the forward pass and pass their gradient straight through where |y| ≤ 1 (the "hard
tanh" surrogate of Courbariaux et al. 2016 and of Bop's and BayesBiNN's binary-activation nets): every method's
net is then exactly the ±1 network that ebp_binary infers with XNOR + popcount.

Weights enter `forward` as arrays: ±1 (STE's sign(w), Bop's w, BayesBiNN's mode or samples) or real
(BayesBiNN's relaxed sample tanh((λ + δ)/τ), its mean tanh(λ)). The trained reals are a dict `real`
(gamma1, beta1, ..., log_scale, bias); the BN running statistics a dict `stats` (mean1, var1, ...).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

N_CLASSES = 10
N_INPUTS = 784
BN_EPSILON = 1e-4     # ε in sqrt(v + ε) (PyTorch's default is 1e-5; a little more keeps float32 folding exact)
BN_MOMENTUM = 0.15    # running ← (1 − momentum)·running + momentum·batch (PyTorch's convention): 0.15 in both
                      # BinaryConnect's MNIST code (mnist.py, alpha = .15) and BayesBiNN's (--bnmomentum 0.15)


def layer_sizes(hidden: tuple[int, ...]) -> tuple[int, ...]:
    """(784, hidden..., 10)."""
    return (N_INPUTS, *hidden, N_CLASSES)


def weight_shapes(sizes) -> list[tuple[int, ...]]:
    """The weight arrays' shapes, input side first: (n_{l-1}, n_l) per layer of the dense net's layer sizes, or a
    successors.cnn.CNN's own (its convolutions' kernels (channels, C, k, k)): the one switch every method's init
    reads, so that the methods train either net unchanged."""
    if hasattr(sizes, "weight_shapes"):
        return sizes.weight_shapes()
    return list(zip(sizes[:-1], sizes[1:]))


def fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan-in, fan-out) of a weight array: (n_in, n_out) of a dense one; (C·k·k, channels·k·k) of a kernel
    (channels, C, k, k), as BinaryConnect's Conv2DLayer counts them for its Glorot factor (binary_connect.py)."""
    if len(shape) == 2:
        return int(shape[0]), int(shape[1])
    receptive = int(np.prod(shape[2:]))
    return int(shape[1]) * receptive, int(shape[0]) * receptive


def init_real(sizes) -> dict:
    """BN γ = 1, β = 0 per hidden unit; output scale e^s = 1/sqrt(n_L) (logits of unit variance at random ±1
    weights) and bias 0. A successors.cnn.CNN brings its own (per channel)."""
    if hasattr(sizes, "init_real"):
        return sizes.init_real()
    real = {}
    for l, n in enumerate(sizes[1:-1], start=1):
        real[f"gamma{l}"] = jnp.ones(n, jnp.float32)
        real[f"beta{l}"] = jnp.zeros(n, jnp.float32)
    real["log_scale"] = jnp.asarray(-0.5 * np.log(sizes[-2]), jnp.float32)
    real["bias"] = jnp.zeros(sizes[-1], jnp.float32)
    return real


def init_stats(sizes) -> dict:
    """BN running means 0 and variances 1 per hidden unit (a successors.cnn.CNN's own per channel)."""
    if hasattr(sizes, "init_stats"):
        return sizes.init_stats()
    stats = {}
    for l, n in enumerate(sizes[1:-1], start=1):
        stats[f"mean{l}"] = jnp.zeros(n, jnp.float32)
        stats[f"var{l}"] = jnp.ones(n, jnp.float32)
    return stats


@jax.custom_vjp
def sign_htanh(y):
    """sign(y) (+1 at 0) forward; gradient 1{|y| ≤ 1} backward (the derivative of htanh(y) = clip(y, −1, 1))."""
    return jnp.where(y >= 0, 1.0, -1.0).astype(y.dtype)


def _sign_htanh_fwd(y):
    return sign_htanh(y), y


def _sign_htanh_bwd(y, g):
    return (g * (jnp.abs(y) <= 1.0).astype(g.dtype),)


sign_htanh.defvjp(_sign_htanh_fwd, _sign_htanh_bwd)


def batch_norm(a, real: dict, stats: dict, l: int, train: bool):
    """y = γ (a − m)/sqrt(v + ε) + β with the batch's (train) or the running (test) m, v; also the running
    statistics after this batch (unchanged at test time)."""
    if train:
        mean, var = a.mean(axis=0), a.var(axis=0)
        new = {f"mean{l}": (1 - BN_MOMENTUM) * stats[f"mean{l}"] + BN_MOMENTUM * jax.lax.stop_gradient(mean),
               f"var{l}": (1 - BN_MOMENTUM) * stats[f"var{l}"] + BN_MOMENTUM * jax.lax.stop_gradient(var)}
    else:
        mean, var, new = stats[f"mean{l}"], stats[f"var{l}"], {}
    y = real[f"gamma{l}"] * (a - mean) / jnp.sqrt(var + BN_EPSILON) + real[f"beta{l}"]
    return y, new


def forward(weights: list, real: dict, stats: dict, x, train: bool):
    """Logits z (n, 10) of the net with weight matrices `weights` (input side first), and the BN running
    statistics after this batch (train) or `stats` unchanged (test)."""
    h, new_stats = x, dict(stats)
    for l, w in enumerate(weights[:-1], start=1):
        y, new = batch_norm(h @ w, real, stats, l, train)
        new_stats.update(new)
        h = sign_htanh(y)
    return jnp.exp(real["log_scale"]) * (h @ weights[-1]) + real["bias"], new_stats


def cross_entropy(z, labels):
    """Mean over the batch of −ln softmax(z)_y."""
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), labels[:, None], axis=1))


def loss(weights: list, real: dict, stats: dict, x, labels):
    """Training loss (BN on batch statistics) and the running statistics after the batch."""
    z, new_stats = forward(weights, real, stats, x, train=True)
    return cross_entropy(z, labels), new_stats


def softmax(z) -> np.ndarray:
    """softmax over classes, in float64 numpy."""
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def binary(w):
    """sign(w) ∈ {−1, +1} (+1 at 0), the deployed weights of every method."""
    return jnp.where(w >= 0, 1.0, -1.0).astype(jnp.float32)


def batches(x: np.ndarray, labels: np.ndarray, order: np.ndarray, batch_size: int):
    """(n_batches, batch, 784) images and (n_batches, batch) labels in `order`; a last partial batch is dropped
    (the order changes every epoch, so every image is used)."""
    n = len(order) // batch_size * batch_size
    idx = order[:n].reshape(-1, batch_size)
    return jnp.asarray(x[idx]), jnp.asarray(labels[idx])


@jax.jit
def eval_logits(weights: list, real: dict, stats: dict, x):
    """Test-time logits: BN on its running statistics."""
    return forward(weights, real, stats, x, train=False)[0]


def predict_logits(weights: list, real: dict, stats: dict, x: np.ndarray, chunk: int = 5000) -> np.ndarray:
    """eval_logits as float32 numpy, in chunks of `chunk` images."""
    return np.concatenate([np.asarray(eval_logits(weights, real, stats, jnp.asarray(x[i:i + chunk])))
                           for i in range(0, len(x), chunk)])


def run_epoch(step, state: dict, xb, yb, key, hyper: dict):
    """One epoch of `step(state, x, labels, key, hyper) -> (state, loss)` over the batches xb, yb (lax.scan, one
    compiled loop); batch i draws its randomness from fold_in(key, i). Returns the state and the mean loss."""
    def body(carry, inputs):
        i, x, labels = inputs
        new, value = step(carry, x, labels, jax.random.fold_in(key, i), hyper)
        return new, value
    state, losses = jax.lax.scan(body, state, (jnp.arange(len(xb)), xb, yb))
    return state, losses.mean()


def adam_step(adam, real: dict, grads: dict, opt, learning_rate):
    """real ← real − η·Adam(grads) (optax.scale_by_adam: Kingma & Ba 2015 with β1 0.9, β2 0.999, ε 1e-8)."""
    updates, opt = adam.update(grads, opt, real)
    return jax.tree_util.tree_map(lambda p, u: p - learning_rate * u, real, updates), opt
