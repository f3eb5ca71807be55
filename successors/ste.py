"""STE / BinaryConnect: real latent weights, their sign in the forward pass, the gradient passed straight through.

Courbariaux, Bengio & David (2015), "BinaryConnect: Training Deep Neural Networks with binary weights during
propagations", Algorithm 1 (deterministic binarisation), with the straight-through estimator of Bengio, Léonard &
Courville (2013) in the clipped form of Courbariaux et al. (2016):

    w_b = sign(w_r)                        forward and backward passes use the binary weights (+1 at 0)
    ∂C/∂w_r = ∂C/∂w_b · 1{|w_r| ≤ 1}       the gradient passed straight through, cancelled where |w_r| > 1:
                                           exactly the gradient of the surrogate htanh(w_r) = clip(w_r, −1, 1)
    w_r ← clip(w_r − η·Adam(∂C/∂w_r), −1, 1)   the latent update, clipped to [−1, 1]

The BN parameters and the output scale and bias (successors.mlp) take Adam steps of rate η. As in the authors'
MNIST code (github.com/MatthieuCourbariaux/BinaryConnect, mnist.py lines 79-91 and binary_connect.py lines 69-89
and 167-180), the latent weights start U(−H, H) with H = FIXED["latent_bound"] = 1, are clipped to [−H, H], and
their Adam step is η multiplied per layer by the "Glorot" factor 1/sqrt(1.5/(fan_in + fan_out)) (their
W_LR_scale; 32.5 for 784 → 800, 23.2 for 800 → 10) where FIXED["glorot_lr_scale"] = 1 (0: the plain step η,
e.g. BayesBiNN's STE-Adam baseline). η is multiplied by the harness's schedule factor hyper["decay"]. Tuned: η,
whose grid holds the authors' starting rate 1e-3 (and the preprocessing, by the harness). Deployed: sign(w_r).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from successors import mlp

NAME = "ste"
GRID = {"learning_rate": [1e-4, 1e-3, 1e-2]}
FIXED = {"latent_bound": 1.0, "glorot_lr_scale": 1.0}
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


def glorot_factor(n_in: int, n_out: int) -> float:
    """BinaryConnect's W_LR_scale "Glorot": 1/sqrt(1.5/(n_in + n_out)) (a kernel's fans: mlp.fans)."""
    return float(1.0 / np.sqrt(1.5 / (n_in + n_out)))


def init(key, sizes: tuple[int, ...], hyper: dict) -> dict:
    """Latent weights U(−H, H), H = latent_bound; BN and output reals (mlp.init_real), running statistics, Adam's
    state."""
    bound = float(hyper.get("latent_bound", FIXED["latent_bound"]))
    shapes = mlp.weight_shapes(sizes)
    latent = [jax.random.uniform(k, shape, jnp.float32, -bound, bound)
              for k, shape in zip(jax.random.split(key, len(shapes)), shapes)]
    params = {"latent": latent, "real": mlp.init_real(sizes)}
    return {**params, "stats": mlp.init_stats(sizes), "adam": ADAM.init(params)}


def step(state: dict, x, labels, key, hyper: dict, loss=mlp.loss):
    """One minibatch: the STE gradient, Adam on latent weights (step times the Glorot factor where
    glorot_lr_scale > 0) and reals, latent weights clipped to [−H, H].
    `loss(weights, real, stats, x, labels) -> (value, stats)`: the net's (successors.mlp's unless given)."""
    def objective(params):
        return loss([ste_sign(w) for w in params["latent"]], params["real"], state["stats"], x, labels)

    params = {"latent": state["latent"], "real": state["real"]}
    (value, stats), grads = jax.value_and_grad(objective, has_aux=True)(params)
    updates, adam = ADAM.update(grads, state["adam"], params)
    rate = hyper["learning_rate"] * hyper["decay"]
    scaled = hyper.get("glorot_lr_scale", FIXED["glorot_lr_scale"]) > 0
    bound = hyper.get("latent_bound", FIXED["latent_bound"])
    latent = [jnp.clip(w - rate * jnp.where(scaled, glorot_factor(*mlp.fans(w.shape)), 1.0) * u, -bound, bound)
              for w, u in zip(params["latent"], updates["latent"])]
    real = jax.tree_util.tree_map(lambda p, u: p - rate * u, params["real"], updates["real"])
    return {"latent": latent, "real": real, "stats": stats, "adam": adam}, value


def deployed(state: dict) -> list:
    """The binary net's weights: sign(w_r)."""
    return [mlp.binary(w) for w in state["latent"]]
