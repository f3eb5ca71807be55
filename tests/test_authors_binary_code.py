"""The authors' binary update as the paper ran it (ebp_lib.UPDATES "authors-2015") against a line-by-line
transcription of Learning_Algorithms/Binary_EBP_minibatch.m at commit b675655 of
github.com/ExpectationBackpropagation/EBP_Matlab_Code, the version before 449a261 ("Bug fixed in updating h",
2015-09-15), and the fast engine against the reference under that update.

The transcription keeps the MATLAB code's column-vector layout and names (tanh_h_cell, mean_u, var_u, Gi,
delta_next) and the fix of 449a261 as a switch, so that the spec itself is the transcription with the fix applied.
The MATLAB function is called once per epoch (RunMe.m), and each call starts with tanh_h_cell = tanh(h_cell), so
the transcription takes a list of epochs. Both sides compute in float64 from the same weights and data order, so
they agree to rounding (1e-10 relative to the largest |h|), where the stale ⟨W⟩ moves the weights by orders of
magnitude more.
"""
import numpy as np
import pytest
from scipy import stats

import ebp_data
import ebp_lib as ebp
import ebp_train

SIDE = 6  # 36 inputs
RTOL_TRANSCRIPTION = 1e-10


def authors_binary_ebp(x, y, h0, bias0, batch_size, epochs, dropout=False, fixed=False):
    """Binary_EBP_minibatch.m's training loop (enable = 1, eta = 1), transcribed and called `epochs` times on the
    same x (T, M) and y (T, classes) ±1, carrying h_cell and bias_cell from call to call as RunMe.m does. Returns
    the final h and bias of every layer. fixed=True applies commit 449a261: h_cell and tanh_h_cell both take the
    updated h (the spec)."""
    h_cell = [w.copy() for w in h0]
    bias_cell = [b.copy()[:, None] for b in bias0]
    K = [h_cell[0].shape[1]] + [w.shape[0] for w in h_cell]
    L = len(h_cell)
    for _ in range(epochs):
        h_cell, bias_cell = _one_call(x.T, y.T, h_cell, bias_cell, K, L, batch_size, dropout, fixed)
    return h_cell, [b[:, 0] for b in bias_cell]


def _one_call(x, y, h_cell, bias_cell, K, L, batch_size, dropout, fixed):
    T = x.shape[1]
    tanh_h_cell = [np.tanh(h) for h in h_cell]  # each call starts from tanh of the h it is given
    for tt in range(0, T, batch_size):
        batch_ind = slice(tt, min(tt + batch_size, T))
        # forward pass, first layer
        mean_v = x[:, batch_ind]
        tanh_h, bias = tanh_h_cell[0], bias_cell[0]
        mean_u = (tanh_h @ mean_v + bias) / np.sqrt(K[0] + 1)
        if dropout:
            p_in = 0.8
            var_input = 4 * p_in * (1 - p_in)
            var_u = ((1 - (1 - var_input) * tanh_h ** 2) @ mean_v ** 2 + 1) / (K[0] + 1)
        else:
            var_u = ((1 - tanh_h ** 2) @ mean_v ** 2 + 1) / (K[0] + 1)
        p_v = stats.norm.cdf(mean_u / np.sqrt(var_u))
        mean_u_cell, var_u_cell, mean_v_prev_cell = [mean_u], [var_u], [mean_v]
        mean_v = 2 * p_v - 1
        var_v = 4 * (p_v - p_v ** 2)
        mean_v_prev_cell.append(mean_v)
        # other layers
        for ll in range(1, L):
            bias, tanh_h = bias_cell[ll], tanh_h_cell[ll]
            mean_u = (tanh_h @ mean_v + bias) / np.sqrt(K[ll] + 1)
            var_u = (var_v.sum(axis=0) + (1 - tanh_h ** 2) @ (1 - var_v) + 1) / (K[ll] + 1)
            p_v = stats.norm.cdf(mean_u / np.sqrt(var_u))
            mean_u_cell.append(mean_u)
            var_u_cell.append(var_u)
            mean_v = 2 * p_v - 1
            var_v = 4 * (p_v - p_v ** 2)
            mean_v_prev_cell.append(mean_v)
        # backward pass, layer L first
        delta = None  # set by each layer for the one below it
        for ll in range(L - 1, -1, -1):
            mean_v_prev, mean_u, var_u = mean_v_prev_cell[ll], mean_u_cell[ll], var_u_cell[ll]
            bias, h, tanh_h = bias_cell[ll], h_cell[ll], tanh_h_cell[ll]
            if ll == L - 1:
                Y = y[:, batch_ind]
                Gi = 2 * (stats.norm.pdf(0, mean_u, np.sqrt(var_u))
                          / stats.norm.cdf(0, -Y * mean_u, np.sqrt(var_u))) / np.sqrt(K[ll] + 1)
                if not np.isfinite(Gi).all():
                    raise FloatingPointError("Gi is 0/0: the MATLAB code's fallback (not transcribed) takes over")
                delta_next = Y
            else:
                delta_next = delta
                Gi = 2 * stats.norm.pdf(0, mean_u, np.sqrt(var_u)) / np.sqrt(K[ll] + 1)
            delta = tanh_h.T @ (delta_next * Gi)
            if fixed:  # commit 449a261
                h = h + 0.5 * (delta_next * Gi) @ mean_v_prev.T
                h_cell[ll] = h
                tanh_h_cell[ll] = np.tanh(h)
            else:  # before it: h_cell takes the update, tanh_h_cell the h of before it
                h_cell[ll] = h + 0.5 * (delta_next * Gi) @ mean_v_prev.T
                tanh_h_cell[ll] = np.tanh(h)
            bias = bias + 0.5 * (delta_next * Gi).sum(axis=1, keepdims=True)
            bias_cell[ll] = bias
    return h_cell, bias_cell


def data(n, seed=0, classes=4):
    """Inputs with a class-dependent mean, ±1 one-vs-all targets."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    x = rng.standard_normal((n, SIDE * SIDE)) + 0.7 * np.cos(labels[:, None] + np.arange(SIDE * SIDE))
    return x, ebp_data.one_vs_all(labels, classes)


def trained(update, architecture, dropout, epochs, engine="reference", n=100, batch_size=10):
    """A network trained by ebp_lib for `epochs` calls of train_steps over the same data in the same order, and
    the initial weights it started from."""
    x, y = data(n)
    net = ebp.init_network(architecture, "binary", seed=3, input_side=SIDE, dropout=dropout, real_update=update)
    h0, b0 = [layer.h.copy() for layer in net.layers], [layer.b.copy() for layer in net.layers]
    for _ in range(epochs):
        ebp_train.train_steps(net, x, y, np.arange(n), batch_size, None, engine=engine)
    return net, h0, b0, x, y


def largest_relative_difference(h, other):
    return max(np.abs(a - c).max() / np.abs(a).max() for a, c in zip(h, other))


@pytest.mark.parametrize("update, fixed", [("authors-2015", False), ("spec", True)])
@pytest.mark.parametrize("architecture, dropout", [([7, 4], None), ([9, 6, 4], None), ([9, 6, 4], "analytic")])
def test_reference_equals_the_transcribed_authors_loop(update, fixed, architecture, dropout):
    """Two calls (epochs) of 10 steps of batch 10 on a one- and a two-hidden-layer net (and the authors' input
    dropout): every h and b equal to the transcription's to rounding, before the fix under "authors-2015" and
    after it under the spec."""
    net, h0, b0, x, y = trained(update, architecture, dropout, epochs=2)
    h, b = authors_binary_ebp(x, y, h0, b0, 10, 2, dropout == "analytic", fixed)
    for k, layer in enumerate(net.layers):
        assert np.abs(layer.h - h[k]).max() <= RTOL_TRANSCRIPTION * np.abs(h[k]).max(), f"layer {k + 1}: h differs"
        assert np.abs(layer.b - b[k]).max() <= RTOL_TRANSCRIPTION * max(np.abs(b[k]).max(), 1), f"layer {k + 1}: b"


@pytest.mark.parametrize("architecture", [[7, 4], [9, 6, 4]])
def test_the_stale_mean_changes_the_trained_weights(architecture):
    """The test above can fail: the loop before the fix and after it part far beyond the tolerance, and so do
    one call of 20 steps and two of 10 (each call restarts the lag)."""
    x, y = data(100)
    net = ebp.init_network(architecture, "binary", seed=3, input_side=SIDE)
    h0, b0 = [layer.h.copy() for layer in net.layers], [layer.b.copy() for layer in net.layers]
    before, _ = authors_binary_ebp(x, y, h0, b0, 10, 2, fixed=False)
    after, _ = authors_binary_ebp(x, y, h0, b0, 10, 2, fixed=True)
    assert largest_relative_difference(before, after) > 1e4 * RTOL_TRANSCRIPTION
    one_call, _ = authors_binary_ebp(np.concatenate([x, x]), np.concatenate([y, y]), h0, b0, 10, 1, fixed=False)
    assert largest_relative_difference(before, one_call) > 1e4 * RTOL_TRANSCRIPTION


@pytest.mark.parametrize("batch_size", [1, 10])
@pytest.mark.parametrize("architecture, dropout", [([20, 15, 10], None), ([("local", 5), ("local", 4), 10], None),
                                                   ([20, 15, 10], "sampled"), ([20, 15, 10], "analytic")])
def test_fast_equals_reference_under_the_2015_update(architecture, dropout, batch_size):
    """The fast engine (float32) against the reference (float64) after 100 steps on 12x12 inputs, as
    tests/test_fast.py checks the spec's update: within 1e-4 of the largest |h| (and |b|)."""
    rng, side = np.random.default_rng(0), 12
    labels = rng.integers(0, 10, 100 * batch_size)
    x = rng.standard_normal((len(labels), side * side)) + 0.5 * np.cos(labels[:, None] + np.arange(side * side))
    y = ebp_data.one_vs_all(labels, 10)
    fast, reference, spec = (ebp.init_network(architecture, "binary", seed=2, input_side=side, dropout=dropout,
                                              real_update=update)
                             for update in ("authors-2015", "authors-2015", "spec"))
    for net, engine in ((fast, "fast"), (reference, "reference"), (spec, "fast")):
        ebp_train.train_epoch(net, x, y, batch_size, np.random.default_rng(5), engine=engine)
    for k, (a, b) in enumerate(zip(fast.layers, reference.layers)):
        assert np.abs(a.h - b.h).max() <= 1e-4 * np.abs(b.h).max(), f"layer {k + 1}: h differs"
        assert np.abs(a.b - b.b).max() <= 1e-4 * max(np.abs(b.b).max(), 1.0), f"layer {k + 1}: b differs"
    # and the fast engine does train the variant: its weights are far from the spec's
    assert largest_relative_difference([layer.h for layer in spec.layers], [layer.h for layer in fast.layers]) > 1e-2


def test_each_weight_type_refuses_the_other_types_variant():
    with pytest.raises(ValueError, match="'authors-2015' is the authors' code for binary weights"):
        ebp.init_network([5, 3], "real", real_update="authors-2015", input_side=SIDE)
    with pytest.raises(ValueError, match="'authors' is the authors' code for real weights"):
        ebp.init_network([5, 3], "binary", real_update="authors", input_side=SIDE)


def test_the_jax_engine_refuses_the_2015_update():
    pytest.importorskip("jax")
    net = ebp.init_network([5, 3], "binary", input_side=SIDE, real_update="authors-2015")
    x, y = data(10, classes=3)
    with pytest.raises(ValueError, match="real_update='spec' only"):
        ebp_train.train_steps(net, x, y, np.arange(10), 10, None, engine="jax")
