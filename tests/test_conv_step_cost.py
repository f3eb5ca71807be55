"""scripts/conv_step_cost.py: the STE step it times is a CNN's (its loss equals a numpy sign network with batch norm
and the conv layers' kernels get gradients), on the same network EBP trains."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import load_script

import ebp_conv
import ebp_lib
from successors import mlp, ste

ARCHITECTURE = [("conv", 3, 2, 2), ("conv", 2, 3, 1), 4, 4]  # 7x7 → 2 maps 3x3 → 3 maps 2x2 → 4 → 4 outputs


def numpy_loss(net, latent, real, x, labels):
    """The STE training loss by hand: sign weights, convolutions (ebp_conv.correlate), batch norm per unit on the
    batch's statistics, sign units, the scaled linear output, cross-entropy."""
    h = x
    for l, (w, layer) in enumerate(zip(latent[:-1], net.layers[:-1]), start=1):
        w = np.where(w >= 0, 1.0, -1.0)
        a = h @ w if layer.conv is None else ebp_conv.correlate(h, w.T, layer.conv)
        y = np.asarray(real[f"gamma{l}"]) * (a - a.mean(0)) / np.sqrt(a.var(0) + mlp.BN_EPSILON) + np.asarray(
            real[f"beta{l}"])
        h = np.where(y >= 0, 1.0, -1.0)
    z = np.exp(float(real["log_scale"])) * (h @ np.where(latent[-1] >= 0, 1.0, -1.0)) + np.asarray(real["bias"])
    z = z - z.max(1, keepdims=True)
    return float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(len(z)), labels]))


def test_ste_conv_loss_is_the_cnn_and_trains_its_kernels():
    cost = load_script("conv_step_cost")
    net = ebp_lib.init_network(ARCHITECTURE, "binary", seed=0, input_side=7)
    state = cost.ste_state(net, jax.random.PRNGKey(0))
    assert [w.shape for w in state["latent"]] == [(9, 2), (8, 3), (12, 4), (4, 4)]
    rng = np.random.default_rng(0)
    x, labels = rng.standard_normal((10, 49)).astype(np.float32), rng.integers(0, 4, 10)
    loss = cost.ste_conv_loss([layer.conv for layer in net.layers[:-1]])
    value, _ = loss([ste.ste_sign(w) for w in state["latent"]], state["real"], state["stats"], jnp.asarray(x),
                    jnp.asarray(labels))
    expected = numpy_loss(net, [np.asarray(w, np.float64) for w in state["latent"]], state["real"], x, labels)
    assert float(value) == pytest.approx(expected, rel=1e-5)
    new, _ = ste.step(state, jnp.asarray(x), jnp.asarray(labels), jax.random.PRNGKey(1),
                      {"learning_rate": 1e-2, "decay": 1.0}, loss=loss)
    assert all(float(jnp.abs(a - b).max()) > 0 for a, b in zip(new["latent"][:2], state["latent"][:2]))


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        load_script("conv_step_cost").main(["--architecture", "c5x16", "--steps", "1"])
    with pytest.raises(SystemExit):
        load_script("conv_step_cost").main(["--steps", "0"])
