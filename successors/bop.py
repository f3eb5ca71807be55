"""Bop: binary weights without latent weights, flipped when the averaged gradient is strong and agrees.

Helwegen, Widdicombe, Geiger, Zhang, Lin & Nusselder (2019), "Latent Weights Do Not Exist: Rethinking Binarized
Neural Network Optimization", Algorithm 1. Per binary weight w ∈ {−1, +1}, with g_t = ∂L/∂w at the current
binary net (the activations' gradient through their hard-tanh straight-through estimator, successors.mlp):

    m_t = (1 − γ) m_{t−1} + γ g_t                     an exponential moving average of the gradient (m_0 = 0)
    w_t = −w_{t−1}  if |m_t| > τ and sign(m_t) = sign(w_{t−1}),   else w_{t−1}

A weight flips when the gradient has pushed it, consistently (γ: adaptivity rate) and strongly (τ: threshold),
towards the other sign: a positive gradient on w = +1 says the loss falls as w decreases. The BN parameters and
the output scale and bias are real and, as in the authors' code, trained by Adam of rate FIXED["adam_learning_rate"]
= 1e-2 (github.com/plumerai/rethinking-bnn-optimization, bnn_optimization/models/binarynet.py, hparams sets `bop`
and `bop_sec52`: `fp_optimizer=tf.keras.optimizers.Adam(0.01)`); γ and that rate are both multiplied by the
harness's schedule factor hyper["decay"]. Initial weights: ±1 with probability 1/2. Tuned: γ, τ (and the
preprocessing, by the harness); the grid holds every published setting: (γ, τ) = (1e-4, 1e-8) (paper §5.2 and the
`bop_sec52` set; Larq's `Bop` defaults), (1e-3, 1e-6) (the `bop` set of §5.1) and (1e-2, 1e-7) (the default of
the authors' bnn_optimization/optimizers.py). Deployed: w itself.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from successors import mlp

NAME = "bop"
GRID = {"gamma": [1e-4, 1e-3, 1e-2], "tau": [1e-8, 1e-7, 1e-6]}
FIXED = {"adam_learning_rate": 1e-2}
ADAM = optax.scale_by_adam()


def init(key, sizes: tuple[int, ...], hyper: dict) -> dict:
    """Random ±1 weights, zero gradient averages m, BN and output reals, running statistics, Adam's state."""
    shapes = mlp.weight_shapes(sizes)
    w = [jnp.where(jax.random.bernoulli(k, 0.5, shape), 1.0, -1.0).astype(jnp.float32)
         for k, shape in zip(jax.random.split(key, len(shapes)), shapes)]
    real = mlp.init_real(sizes)
    return {"w": w, "m": [jnp.zeros_like(a) for a in w], "real": real, "stats": mlp.init_stats(sizes),
            "adam": ADAM.init(real)}


def flip(w, m, g, gamma, tau):
    """Algorithm 1 of Helwegen et al. for one weight array: the new moving average and the new weights."""
    m = (1.0 - gamma) * m + gamma * g
    flips = (jnp.abs(m) > tau) & (jnp.sign(m) == jnp.sign(w))
    return jnp.where(flips, -w, w), m


def step(state: dict, x, labels, key, hyper: dict, loss=mlp.loss):
    """One minibatch: gradients at the binary net, Bop on the weights, Adam on the reals.
    `loss(weights, real, stats, x, labels) -> (value, stats)`: the net's (successors.mlp's unless given)."""
    (value, stats), (gw, gr) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        state["w"], state["real"], state["stats"], x, labels)
    gamma = hyper["gamma"] * hyper["decay"]  # the harness's schedule halves γ and Adam's rate together
    new = [flip(w, m, g, gamma, hyper["tau"]) for w, m, g in zip(state["w"], state["m"], gw)]
    real, adam = mlp.adam_step(ADAM, state["real"], gr, state["adam"], hyper["adam_learning_rate"] * hyper["decay"])
    return {"w": [w for w, _ in new], "m": [m for _, m in new], "real": real, "stats": stats, "adam": adam}, value


def deployed(state: dict) -> list:
    """The binary net's weights: w."""
    return list(state["w"])
