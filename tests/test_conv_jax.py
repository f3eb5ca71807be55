"""The compiled convolutional EBP (ebp_jax with jax.lax.conv_general_dilated) equals the readable one (ebp_lib with
ebp_conv) in float64: forward moments, EBP-P, EBP-D, and the step as jax.grad of ln P with every σ² frozen; and the
float32 engine trains a conv net alone and in a vmapped group."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

from helpers import assert_grad_steps_are_ebp, check_forward  # noqa: E402

import ebp_data  # noqa: E402 (after jax.config: float64)
import ebp_jax  # noqa: E402
import ebp_lib  # noqa: E402
import ebp_train  # noqa: E402

CONFIGS = [  # (weights, architecture, dropout) on a 7x7 image
    ("binary", [("conv", 3, 2, 2), ("conv", 2, 3, 1), 4], None),
    ("real", [("conv", 3, 2, 2), ("conv", 2, 3, 1), 4], None),
    ("binary", [("conv", 3, 3, 1), 5, 4], "sampled"),
    ("real", [("conv", 4, 2, 3), 4], "analytic"),
]


def small_data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 49)), ebp_data.one_vs_all(rng.integers(0, 4, n), 4)


def trained_net(weights, architecture, dropout):
    """A float64 conv network after two reference steps (biases and ⟨W⟩ away from their start)."""
    net = ebp_lib.init_network(architecture, weights, seed=2, input_side=7, dropout=dropout, init_scale=3.0)
    x, y = small_data(16, seed=4)
    ebp_train.train_steps(net, x, y, np.arange(16), 8, np.random.default_rng(3), engine="reference")
    return net


@pytest.mark.parametrize("weights, architecture, dropout", CONFIGS)
def test_forward_and_outputs_equal_the_reference(weights, architecture, dropout):
    """μ and σ² of every layer (test time), EBP-P and EBP-D: JAX's convolutions equal ebp_conv's to 1e-12."""
    net = trained_net(weights, architecture, dropout)
    x = small_data(20, seed=5)[0]
    check_forward(net, x)
    params, s = ebp_jax.parameters(net), ebp_jax.structure(net)
    np.testing.assert_allclose(np.asarray(ebp_jax.ebp_p(params, x, s)), ebp_lib.output_ebp_p(net, x), atol=1e-12)
    d_ref = ebp_lib.output_ebp_d(net, x)
    np.testing.assert_allclose(np.asarray(ebp_jax.ebp_d(params, x, s)), d_ref, atol=1e-12 * np.abs(d_ref).max())


@pytest.mark.parametrize("weights, architecture, dropout", CONFIGS)
def test_grad_with_frozen_variances_is_the_conv_ebp_step(weights, architecture, dropout):
    """Five float64 steps of minibatch 8 (the same dropout masks): kernels and biases agree with ebp_lib's step
    through ebp_conv to 1e-12 of their largest entry."""
    net = ebp_lib.init_network(architecture, weights, seed=1, input_side=7, dropout=dropout)
    assert_grad_steps_are_ebp(net, *small_data(40))


@pytest.mark.parametrize("weights", ebp_lib.WEIGHTS)
def test_float32_engine_alone_and_grouped(weights):
    """An epoch on engine="jax" (float32, one compiled call) stays within 1e-4 of the float64 reference engine's
    epoch; two seeds trained side by side (ebp_jax.group_epoch, vmap) equal each seed trained alone bit for bit
    on the CPU (as tests/test_group.py holds dense groups)."""
    architecture = [("conv", 3, 4, 2), ("conv", 2, 4, 1), 4]
    x, y = small_data(60, seed=1)
    nets = {e: ebp_lib.init_network(architecture, weights, seed=3, input_side=7) for e in ("jax", "reference")}
    for engine, net in nets.items():
        ebp_train.train_epoch(net, x, y, 10, np.random.default_rng(5), engine=engine)
    for a, b in zip(nets["jax"].layers, nets["reference"].layers):
        np.testing.assert_allclose(a.h, b.h, atol=1e-4 * max(1.0, np.abs(b.h).max()))
    alone = [ebp_lib.init_network(architecture, weights, seed=s, input_side=7) for s in (0, 1)]
    group = [ebp_lib.init_network(architecture, weights, seed=s, input_side=7) for s in (0, 1)]
    for seed, net in enumerate(alone):
        ebp_train.train_epoch(net, x, y, 10, np.random.default_rng(seed), engine="jax")
    assert ebp_jax.group_epoch(group, x, y, 10, [np.random.default_rng(s) for s in (0, 1)]) == [None, None]
    for a_net, g_net in zip(alone, group):
        for a, g in zip(a_net.layers, g_net.layers):
            np.testing.assert_array_equal(g.h, a.h)
            np.testing.assert_array_equal(g.b, a.b)
    errors = ebp_train.evaluate(alone[0], x, y.argmax(axis=1), engine="jax")
    assert errors == ebp_train.evaluate(alone[0], x, y.argmax(axis=1), engine="reference")


def test_fast_engine_refuses_conv_layers():
    net = ebp_lib.init_network([("conv", 3, 2, 2), 4], "binary", input_side=7)
    x, y = small_data(10)
    with pytest.raises(ValueError, match="engine='jax'"):
        ebp_train.train_epoch(net, x, y, 10, np.random.default_rng(0), engine="fast")
    with pytest.raises(ValueError, match="engine='jax'"):
        ebp_train.evaluate(net, x, y.argmax(axis=1), engine="fast")


def test_fit_resumes_a_conv_run_from_its_checkpoint(tmp_path):
    """ebp_train.fit on engine="jax": one epoch, then a second from the checkpoint, gives the kernels, biases and
    history of two epochs in one go, exactly (the generator's state and the conv layers are saved)."""
    x, y = small_data(60, seed=2)
    data = ebp_data.Dataset("toy", "pixel", x[:40], y[:40], y[:40].argmax(axis=1), x[40:], y[40:], y[40:].argmax(axis=1))
    architecture = [("conv", 3, 4, 2), ("conv", 2, 4, 1), 4]
    straight, history = ebp_train.fit(ebp_lib.init_network(architecture, "binary", seed=1, input_side=7), data, 2,
                                      seed=4, n_train_eval=0, engine="jax")
    path = tmp_path / "checkpoint.npz"
    ebp_train.fit(ebp_lib.init_network(architecture, "binary", seed=1, input_side=7), data, 1, seed=4,
                  checkpoint=path, n_train_eval=0, engine="jax")
    resumed, resumed_history = ebp_train.fit(ebp_lib.init_network(architecture, "binary", seed=1, input_side=7), data,
                                             2, seed=4, checkpoint=path, n_train_eval=0, engine="jax")
    for a, b in zip(resumed.layers, straight.layers):
        np.testing.assert_array_equal(a.h, b.h)
        np.testing.assert_array_equal(a.b, b.b)
        assert a.conv == b.conv
    assert [r["test_ebp_p"] for r in resumed_history] == [r["test_ebp_p"] for r in history]
