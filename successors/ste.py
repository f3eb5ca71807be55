"""STE / BinaryConnect: real latent weights, their sign in the forward pass, the gradient passed straight through.

Courbariaux, Bengio & David (2015), "BinaryConnect: Training Deep Neural Networks with binary weights during
propagations", Algorithm 1 (deterministic binarisation), with the straight-through estimator of Bengio, Léonard &
Courville (2013) in the clipped form of Courbariaux et al. (2016):

    w_b = sign(w_r)                        forward and backward passes use the binary weights (+1 at 0)
    ∂C/∂w_r = ∂C/∂w_b · 1{|w_r| ≤ 1}       the gradient passed straight through, cancelled where |w_r| > 1:
                                           exactly the gradient of the surrogate htanh(w_r) = clip(w_r, −1, 1)
    w_r ← clip(w_r − η·Adam(∂C/∂w_r), −1, 1)   the latent update, clipped to [−1, 1]

The BN parameters and the output scale and bias (successors.mlp) take the same Adam step. Latent weights start
Glorot-uniform, U(±sqrt(6/(fan_in + fan_out))) (BinaryConnect's initialisation). η is multiplied by the
harness's schedule factor hyper["decay"]. Tuned: the learning rate η (and
the preprocessing, by the harness). Deployed: sign(w_r).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from successors import mlp

NAME = "ste"
GRID = {"learning_rate": [1e-4, 1e-3, 1e-2]}
FIXED = {}
ADAM = optax.scale_by_adam()


@jax.custom_vjp
def ste_sign(w):
    """sign(w) (+1 at 0) forward; the gradient straight through where |w| ≤ 1, zero elsewhere."""
    return mlp.binary(w)


def _ste_sign_fwd(w):
    return ste_sign(w), w


def _ste_sign_bwd(w, g):
    return (g * (jnp.abs(w) <= 1.0).astype(g.dtype),)


ste_sign.defvjp(_ste_sign_fwd, _ste_sign_bwd)


def init(key, sizes: tuple[int, ...], hyper: dict) -> dict:
    """Glorot-uniform latent weights, BN and output reals (mlp.init_real), running statistics, Adam's state."""
    latent = []
    for k, (n_in, n_out) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):
        bound = float(np.sqrt(6.0 / (n_in + n_out)))
        latent.append(jax.random.uniform(k, (n_in, n_out), jnp.float32, -bound, bound))
    params = {"latent": latent, "real": mlp.init_real(sizes)}
    return {**params, "stats": mlp.init_stats(sizes), "adam": ADAM.init(params)}


def step(state: dict, x, labels, key, hyper: dict, loss=mlp.loss):
    """One minibatch: the STE gradient, Adam on latent weights and reals, latent weights clipped to [−1, 1].
    `loss(weights, real, stats, x, labels) -> (value, stats)`: the net's (successors.mlp's unless given)."""
    def objective(params):
        return loss([ste_sign(w) for w in params["latent"]], params["real"], state["stats"], x, labels)

    params = {"latent": state["latent"], "real": state["real"]}
    (value, stats), grads = jax.value_and_grad(objective, has_aux=True)(params)
    params, adam = mlp.adam_step(ADAM, params, grads, state["adam"], hyper["learning_rate"] * hyper["decay"])
    latent = [jnp.clip(w, -1.0, 1.0) for w in params["latent"]]
    return {"latent": latent, "real": params["real"], "stats": stats, "adam": adam}, value


def deployed(state: dict) -> list:
    """The binary net's weights: sign(w_r)."""
    return [mlp.binary(w) for w in state["latent"]]
