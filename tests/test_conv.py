"""The convolutional EBP layer (ebp_conv): forward moments by Monte Carlo, the step by finite differences with every
σ² frozen, the vectorised layer against its loop-over-positions reference, and persistence."""
from __future__ import annotations

import numpy as np
import pytest

import ebp_conv
import ebp_conv_checks
import ebp_data
import ebp_lib

SMALL = [("conv", 3, 2, 2), ("conv", 2, 3, 1), 4]  # 7x7 image → 2 maps 3x3 → 3 maps 2x2 → 4 outputs


def small_data(n, side=7, seed=0, classes=4):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, side * side)), ebp_data.one_vs_all(rng.integers(0, classes, n), classes)


def random_net(weights, architecture=SMALL, seed=1, side=7, h_scale=1.0):
    net = ebp_lib.init_network(architecture, weights, seed=seed, input_side=side)
    rng = np.random.default_rng(seed + 100)
    for layer in net.layers:  # larger weights and biases than the initialisation: every term matters
        layer.h[...] = h_scale * rng.standard_normal(layer.h.shape)
        layer.b[...] = 0.5 * rng.standard_normal(layer.b.shape)
    return net


def test_geometry_and_sizes():
    """The 28x28 image through c5x16s2 and c5x32s2: 16 maps of 12x12 (fan-in 25), 32 maps of 4x4 (fan-in 400)."""
    assert ebp_lib.check_architecture([("conv", 5, 16, 2), ("conv", 5, 32, 2), 10]) == [784, 2304, 512, 10]
    net = ebp_lib.init_network([("conv", 5, 16, 2), ("conv", 5, 32, 2), 10])
    assert [layer.h.shape for layer in net.layers] == [(16, 25), (32, 400), (10, 512)]
    assert net.layers[0].normaliser.shape == (2304,) and net.layers[1].normaliser[0] == 401
    assert net.sizes == [784, 2304, 512, 10]


@pytest.mark.parametrize("spec, why", [(("conv", 9, 2, 1), "larger than"), (("conv", 3, 0, 1), "positive"),
                                       (("conv", 3, 2, True), "positive")])
def test_bad_conv_spec_is_refused(spec, why):
    with pytest.raises(ValueError, match=why):
        ebp_lib.check_architecture([spec, 4], 7)
    with pytest.raises(ValueError, match="must follow the image"):
        ebp_lib.check_architecture([5, ("conv", 3, 2, 1), 4], 7)


def test_patches_and_unpatch_are_adjoint():
    """⟨patches(v), c⟩ = ⟨v, unpatch(c)⟩ for random v and c (unpatch is the transpose that back_project needs)."""
    g = ebp_conv.Conv(2, 7, 3, 4, 2)
    rng = np.random.default_rng(0)
    v, c = rng.standard_normal((3, g.inputs)), rng.standard_normal((3, g.positions, g.fan_in))
    assert np.sum(ebp_conv.patches(v, g) * c) == pytest.approx(np.sum(v * ebp_conv.unpatch(c, g)), rel=1e-12)


@pytest.mark.parametrize("weights", ebp_lib.WEIGHTS)
def test_forward_equals_loop_over_positions(weights):
    """Every layer's μ and σ² equal the dense locally connected network whose rows are the kernel copied to each
    position (ebp_conv_checks.dense_equivalent), to 1e-12 relative."""
    net = random_net(weights)
    x, _ = small_data(5)
    conv, dense = ebp_lib.forward(net, x), ebp_lib.forward(ebp_conv_checks.dense_equivalent(net), x)
    for a, b in zip(conv.mu + conv.sigma2, dense.mu + dense.sigma2):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("weights", ebp_lib.WEIGHTS)
def test_step_equals_loop_over_positions_folded(weights):
    """One EBP step: Δ of every layer equals the dense equivalent's, and each kernel's increment equals the dense
    increments summed over the positions (ebp_conv.folded), the shared bias likewise (1e-12 relative)."""
    net = random_net(weights)
    dense = ebp_conv_checks.dense_equivalent(net)
    x, y = small_data(6)
    fwd_c, fwd_d = ebp_lib.forward(net, x), ebp_lib.forward(dense, x)
    d_c, d_d = ebp_lib.backward(net, fwd_c, y), ebp_lib.backward(dense, fwd_d, y)
    for a, b in zip(d_c, d_d):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    inc_c, inc_d = ebp_lib.increments(net, fwd_c, d_c), ebp_lib.increments(dense, fwd_d, d_d)
    for layer, a, b in zip(net.layers, inc_c, inc_d):
        if layer.conv is None:
            np.testing.assert_allclose(a, b, rtol=1e-12)
        else:
            np.testing.assert_allclose(a, ebp_conv.folded(b, layer.conv), rtol=1e-12, atol=1e-14)
    before = [layer.b.copy() for layer in net.layers]
    ebp_lib.update(net, fwd_c, d_c)
    g = net.layers[0].conv
    bias_dense = (d_d[0] / np.sqrt(dense.layers[0].normaliser)).sum(axis=0).reshape(g.channels, g.positions)
    np.testing.assert_allclose(net.layers[0].b - before[0], bias_dense.sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("weights", ebp_lib.WEIGHTS)
def test_step_is_gradient_with_frozen_variances(weights):
    """The increment of every kernel weight equals ∂ln P/∂⟨W⟩ by central differences, every σ² frozen at the
    forward pass's values (ebp_conv_checks.numerical_increment): 1e-7 relative to the largest entry (ε = 1e-6)."""
    net = random_net(weights)
    x, y = small_data(4)
    fwd = ebp_lib.forward(net, x)
    incs = ebp_lib.increments(net, fwd, ebp_lib.backward(net, fwd, y))
    for k in range(len(net.layers)):
        numeric = ebp_conv_checks.numerical_increment(net, fwd, y, k)
        assert np.max(np.abs(incs[k] - numeric)) < 1e-7 * np.max(np.abs(numeric)), k


@pytest.mark.parametrize("weights", ebp_lib.WEIGHTS)
def test_forward_moments_match_monte_carlo(weights):
    """μ and σ² of the first conv layer (one image, fixed input) and of the second (independent ±1 inputs of
    means ν) against 40,000 draws of the shared kernels and biases: within 5 standard errors at every unit."""
    net = random_net(weights, h_scale=0.7)
    rng = np.random.default_rng(3)
    n = 40000
    x, _ = small_data(1)
    fwd = ebp_lib.forward(net, x)
    for k, random_input in ((0, False), (1, True)):
        layer, nu = net.layers[k], fwd.inputs[k][0]
        if weights == "binary":
            w = np.where(rng.random((n,) + layer.h.shape) < 0.5 * (1 + np.tanh(layer.h)), 1.0, -1.0)
        else:
            w = layer.h + rng.standard_normal((n,) + layer.h.shape)
        v = np.where(rng.random((n, len(nu))) < 0.5 * (1 + nu), 1.0, -1.0) if random_input else np.tile(nu, (n, 1))
        pat = ebp_conv.patches(v, layer.conv)                                   # (n, P, fan-in)
        bias = layer.b + rng.standard_normal((n, len(layer.b)))
        u = (np.einsum("spr,sor->sop", pat, w) + bias[:, :, None]).reshape(n, -1) / np.sqrt(layer.normaliser)
        mean_se, var_se = u.std(axis=0) / np.sqrt(n), u.var(axis=0) * np.sqrt(2.0 / n)
        assert np.all(np.abs(u.mean(axis=0) - fwd.mu[k][0]) < 5 * mean_se), k
        assert np.all(np.abs(u.var(axis=0) - fwd.sigma2[k][0]) < 5 * var_se * np.sqrt(3)), k


@pytest.mark.parametrize("weights", ebp_lib.WEIGHTS)
def test_ebp_d_equals_dense_equivalent(weights):
    """EBP-D of a conv net equals that of its dense equivalent with sign(h) kernels copied to every position."""
    net = random_net(weights)
    x, _ = small_data(8)
    dense = ebp_conv_checks.dense_equivalent(net)
    np.testing.assert_allclose(ebp_lib.output_ebp_d(net, x), ebp_lib.output_ebp_d(dense, x), rtol=1e-12)


def test_save_and_load_round_trip(tmp_path):
    net = random_net("binary")
    ebp_lib.save_network(tmp_path / "net.npz", net)
    loaded, _ = ebp_lib.load_network(tmp_path / "net.npz")
    assert [layer.conv for layer in loaded.layers] == [layer.conv for layer in net.layers]
    for a, b in zip(loaded.layers, net.layers):
        np.testing.assert_array_equal(a.h, b.h)
        np.testing.assert_array_equal(a.b, b.b)


def test_reference_training_learns():
    """Three epochs of the reference engine on 400 7x7 images (class: the signs of two half-image sums) take the
    EBP-P training error of a binary two-conv net from about 75% (chance) below 40%."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 49))
    labels = (x[:, :24].sum(axis=1) > 0).astype(int) + 2 * (x[:, 24:].sum(axis=1) > 0)
    y = ebp_data.one_vs_all(labels, 4)
    net = ebp_lib.init_network([("conv", 3, 8, 2), ("conv", 2, 8, 1), 4], "binary", seed=0, input_side=7)
    before = np.mean(ebp_lib.output_ebp_p(net, x).argmax(axis=1) != labels)
    for _ in range(3):
        for idx in rng.permutation(400).reshape(-1, 10):
            ebp_lib.ebp_step(net, x[idx], y[idx])
    after = np.mean(ebp_lib.output_ebp_p(net, x).argmax(axis=1) != labels)
    assert before > 0.6 and after < 0.4, (before, after)
