"""The float32 engines against the readable reference in ebp_lib: the fast engine (engine="fast", ebp_fast.py) kernel
by kernel against plain versions, and both float32 engines, fast and jax (ebp_jax.py, EBP as jax.grad), over whole
epochs, single steps, evaluation and non-finite values against engine="reference" (the tests parametrised by
`engine`, with the same cases and tolerances for both).

The float32 engines compute in float32; the reference in float64. Tolerance: after 300 updates
the largest difference in h is at most 1e-4 of the largest |h| (and the same for b): float32 rounding is ~6e-8
per operation, and the measured differences are ~1e-6, so a wrong equation (a missing factor, a stale cache, a
different dropout mask) fails by orders of magnitude.
"""
import importlib.util
import inspect
import re

import numba
import numpy as np
import pytest
from helpers import RTOL, SIDE, assert_close_networks, data, net_for
from scipy import special

import ebp_fast
import ebp_lib as ebp
import ebp_train

# The float32 engines held to the reference by the same tests; JAX is a dependency, but a missing one skips.
FLOAT32_ENGINES = ["fast", pytest.param("jax", marks=pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                                                                        reason="JAX is not installed"))]
CASES = [  # (weights, architecture, dropout, init_scale)
    ("binary", [30, 10], None, 1.0),
    ("real", [30, 10], None, 1.0),
    ("binary", [20, 15, 10], None, 3.0),              # depth 3, posteriors far from uniform
    ("real", [20, 15, 10], None, 1.0),
    ("binary", [("local", 5), 10], None, 1.0),        # spatial filtering: masked weights
    ("real", [("local", 5), ("local", 4), 10], None, 1.0),
    ("binary", [20, 10], "analytic", 1.0),
    ("real", [20, 15, 10], "analytic", 1.0),
    ("binary", [20, 15, 10], "sampled", 1.0),         # masks on the image and on hidden units
    ("real", [("local", 5), 10], "sampled", 1.0),
]


@pytest.mark.parametrize("engine", FLOAT32_ENGINES)
@pytest.mark.parametrize("batch_size", [1, 10])
@pytest.mark.parametrize("weights, architecture, dropout, init_scale", CASES)
def test_float32_engine_equals_reference_after_300_updates(weights, architecture, dropout, init_scale, batch_size,
                                                           engine):
    x, y = data(300 * batch_size)
    fast, reference = (net_for(weights, architecture, dropout, init_scale) for _ in range(2))
    rng_fast, rng_reference = np.random.default_rng(5), np.random.default_rng(5)
    ebp_train.train_epoch(fast, x, y, batch_size, rng_fast, engine=engine)
    ebp_train.train_epoch(reference, x, y, batch_size, rng_reference, engine="reference")
    assert rng_fast.bit_generator.state == rng_reference.bit_generator.state  # the same random draws
    moved = max(np.abs(layer.h - start.h).max() for layer, start in
                zip(reference.layers, net_for(weights, architecture, dropout, init_scale).layers))
    assert moved > 100 * RTOL * max(np.abs(layer.h).max() for layer in reference.layers)  # training did something
    assert_close_networks(fast, reference)


@pytest.mark.parametrize("engine", FLOAT32_ENGINES)
@pytest.mark.parametrize("batch_size", [1, 10])
@pytest.mark.parametrize("weights, architecture, dropout", [("binary", [("local", 5), 10], None),
                                                           ("real", [("local", 5), ("local", 4), 10], None),
                                                           ("binary", [("local", 5), 10], "sampled")])
def test_held_mask_reading_float32_engine_equals_reference(weights, architecture, dropout, batch_size, engine):
    """The "held" reading of spatial masks (masked weights kept at h = 0 in a full matrix) in both engines."""
    x, y = data(300 * batch_size)
    fast, reference = (ebp.init_network(architecture, weights, seed=2, input_side=SIDE, dropout=dropout,
                                        mask_reading="held") for _ in range(2))
    ebp_train.train_epoch(fast, x, y, batch_size, np.random.default_rng(5), engine=engine)
    ebp_train.train_epoch(reference, x, y, batch_size, np.random.default_rng(5), engine="reference")
    assert_close_networks(fast, reference)
    for layer in fast.layers:
        if layer.mask is not None:
            assert np.all(layer.h[~layer.mask] == 0)  # held at 0
    labels = y.argmax(axis=1)
    fast_errors = ebp_train.evaluate(fast, x, labels, engine=engine)
    assert fast_errors == ebp_train.evaluate(fast, x, labels, engine="reference")


@pytest.mark.parametrize("engine", FLOAT32_ENGINES)
@pytest.mark.parametrize("batch_size", [1, 10])
@pytest.mark.parametrize("weights, architecture, dropout", [("binary", [30, 10], None),
                                                           ("real", [("local", 5), 10], "analytic"),
                                                           ("binary", [20, 15, 10], "sampled")])
def test_float32_engine_leaves_inputs_that_are_always_zero_alone(weights, architecture, dropout, batch_size, engine):
    # a border of pixels that are 0 in every image, as in standardised MNIST (67 of 784 pixels); 72 pixels are
    # used, so 8 of the border's are carried along as padding (to 80, a multiple of 16) and must not change either
    x, y = data(100 * batch_size)
    border = np.ones((SIDE, SIDE), bool)
    border[1:-2, 2:-2] = False
    x[:, border.ravel()] = 0.0
    fast, reference = (net_for(weights, architecture, dropout, 1.0) for _ in range(2))
    start = fast.layers[0].h.copy()
    rng_fast, rng_reference = np.random.default_rng(5), np.random.default_rng(5)
    ebp_train.train_epoch(fast, x, y, batch_size, rng_fast, engine=engine)
    ebp_train.train_epoch(reference, x, y, batch_size, rng_reference, engine="reference")
    assert rng_fast.bit_generator.state == rng_reference.bit_generator.state  # masks drawn for every pixel
    assert_close_networks(fast, reference)
    unused = fast.layers[0].h[:, border.ravel()]
    assert np.array_equal(unused, start[:, border.ravel()].astype(np.float32))  # untouched (rounded to float32)
    assert not np.array_equal(fast.layers[0].h[:, ~border.ravel()], start[:, ~border.ravel()])


@pytest.mark.parametrize("engine", FLOAT32_ENGINES)
def test_float32_step_on_blank_images_changes_only_biases_and_deeper_layers(engine):
    x, y = data(4)
    x[:] = 0.0  # no input column is used: the first layer's h stays as it was
    fast, reference = (net_for("binary", [20, 15, 10], None, 1.0) for _ in range(2))
    ebp_train.train_step(fast, x, y, engine=engine)
    ebp_train.train_step(reference, x, y, engine="reference")
    assert_close_networks(fast, reference)
    assert np.array_equal(fast.layers[0].h, net_for("binary", [20, 15, 10], None, 1.0).layers[0].h.astype(np.float32))


@pytest.mark.parametrize("engine", FLOAT32_ENGINES)
@pytest.mark.parametrize("weights", ["binary", "real"])
def test_float32_train_step_equals_reference_and_keeps_dtype(weights, engine):
    x, y = data(7)
    for dtype in (np.float64, np.float32):
        fast, reference = (net_for(weights, [20, 15, 10], "sampled", 3.0, dtype) for _ in range(2))
        ebp_train.train_step(fast, x, y, np.random.default_rng(1), engine=engine)
        ebp_train.train_step(reference, x, y, np.random.default_rng(1), engine="reference")
        assert all(layer.h.dtype == dtype and layer.b.dtype == dtype for layer in fast.layers)
        assert_close_networks(fast, reference)


@pytest.mark.parametrize("engine", FLOAT32_ENGINES)
def test_float32_network_matches_float64_reference(engine):
    x, y = data(1000)
    fast = net_for("binary", [20, 15, 10], None, 1.0, np.float32)
    reference = net_for("binary", [20, 15, 10], None, 1.0)
    ebp_train.train_epoch(fast, x.astype(np.float32), y.astype(np.float32), 4, np.random.default_rng(0), engine=engine)
    ebp_train.train_epoch(reference, x, y, 4, np.random.default_rng(0), engine="reference")
    assert_close_networks(fast, reference)


@pytest.mark.parametrize("batch", [1, 2])  # the online loop (batch size 1) and the blocked one
def test_fast_tanh_accuracy(batch):
    finite = np.linspace(-20, 20, 400_001)
    h = finite[None].astype(np.float32)
    m, (units, width) = np.empty_like(h), h.shape
    zeros = np.zeros((batch, width), np.float32)
    moments = ebp_fast.Moments(*(np.zeros((batch, units), np.float32) for _ in range(5)))
    no_mask, no_delta = np.zeros((0, 0), np.float32), np.zeros((batch, units), np.float32)
    ebp_fast._layer_pass(h, m, no_mask, no_mask, True, True, no_delta, zeros, ebp_fast.Inputs(zeros, zeros, zeros, zeros), True,
                         moments)
    assert np.abs(m[0] - np.tanh(finite)).max() < 5e-7  # 8 float32 ulp of 1 (scripts/fit_rational.py)


def test_fast_unit_means_use_an_accurate_erf():
    """ν = erf(μ/sqrt(2σ²)) as _finish_layer computes it (erf32) against scipy's erf, over μ/sqrt(2σ²) from −8
    to 8: within 3.5e-7 (6 float32 ulp of 1); a NaN μ stays NaN (so Δ becomes non-finite, as in the reference)."""
    units = 400_001
    mu = np.linspace(-8, 8, units).astype(np.float32)[None]
    mu[0, 5] = np.nan
    n = np.ones(units, np.float32)
    second, q, b = np.full((1, units), 0.5, np.float32), np.zeros((1, units), np.float32), np.zeros(units, np.float32)
    sigma2, nu = np.empty_like(mu), np.empty_like(mu)
    expected = special.erf(mu[0].astype(np.float64) / np.sqrt(2 * 0.5))
    moments = ebp_fast.Moments(mu, q, second, sigma2, nu)
    ebp_fast._finish_layer(moments, b, n, n, np.zeros((1, 0), np.float32), True, True, 1, np.float32(0))
    assert np.isnan(nu[0, 5]) and np.isfinite(np.delete(nu[0], 5)).all()
    assert np.nanmax(np.abs(nu[0] - expected)) < 3.5e-7


# The largest errors of the rational tanh and erf, with a margin over what was measured. In float32, as the kernels
# compute (measured: tanh 4.16e-7, erf 3.01e-7 for the committed coefficients; 4.16e-7 / 3.12e-7 for a fresh fit on
# an Intel CPU whose LAPACK gives erf coefficients 0.9% away from the committed ones), and in float64, the
# error of the fit itself (measured: committed 1.8e-7 / 8.7e-8, fresh 1.5e-7 / 4.1e-8).
RATIONAL_FIT_BOUNDS = {"tanh": (5e-7, 2.5e-7), "erf": (4e-7, 1.5e-7)}


@numba.njit(fastmath=ebp_fast.FASTMATH)
def rational32(x, c, p, q):
    """z P(z²)/Q(z²), z = x clamped to ±c, in float32 with the kernels' flags; p, q constant term first."""
    out = np.empty_like(x)
    for i in range(x.size):
        z = min(max(x[i], -c), c)
        u = z * z
        num, den = p[-1], q[-1]
        for j in range(p.size - 2, -1, -1):
            num = u * num + p[j]
        for j in range(q.size - 2, -1, -1):
            den = u * den + q[j]
        out[i] = z * num / den
    return out


def rational64(x, c, p, q):
    z = np.clip(x, -c, c)
    return z * np.polyval(p[::-1], z * z) / np.polyval(q[::-1], z * z)


@pytest.mark.parametrize("name", ["tanh", "erf"])
def test_rational_fits_meet_their_error_bounds(name):
    """The coefficients in ebp_fast's source (tanh32 / erf32: the clamp, then P and Q from the highest power down)
    are the ones the kernel computes with, and they, as well as a fresh fit by scripts/fit_rational.py, meet the
    stated error bounds on a dense grid (the refit depends on LAPACK's rounding, so the coefficients may differ)."""
    from scripts import fit_rational
    f, compiled, c, k, l, far, iterations = fit_rational.FITS[name]
    constants = [float(v) for v in re.findall(r"np\.float32\(([-+0-9.e]+)\)", inspect.getsource(compiled.py_func))]
    assert len(constants) == 1 + (k + 1) + (l + 1) and constants[0] == c and constants[-1] == 1.0  # Q(0) = 1
    committed = (np.array(constants[1:k + 2][::-1]), np.array(constants[k + 2:][::-1]))
    fresh_p, fresh_q, _ = fit_rational.fit(f, c, k, l, far, iterations)
    x = np.linspace(-2 * far, 2 * far, 1_000_001).astype(np.float32)
    exact = f(x.astype(np.float64))
    bound32, bound64 = RATIONAL_FIT_BOUNDS[name]
    kernel = fit_rational.apply(compiled, x)
    assert np.array_equal(kernel, rational32(x, np.float32(c), *(a.astype(np.float32) for a in committed)))
    for p, q in (committed, (fresh_p, fresh_q)):
        assert np.abs(rational32(x, np.float32(c), p.astype(np.float32), q.astype(np.float32)) - exact).max() < bound32
        assert np.abs(rational64(x.astype(np.float64), c, p, q) - exact).max() < bound64


@pytest.mark.parametrize("units", [1, 8, 13, 800])  # whole sweeps of eight rows, a remainder, or both
def test_back_product_equals_matrix_product(units):
    rng = np.random.default_rng(units)
    d = rng.standard_normal((10, units)).astype(np.float32)
    m = rng.uniform(-1, 1, (units, 37)).astype(np.float32)
    exact = d.astype(np.float64) @ m.astype(np.float64)
    np.testing.assert_allclose(ebp_fast._back_product(d, m), exact, rtol=0, atol=1e-6 * np.sqrt(units) * 10)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("engine", ["fast", "reference", "jax"])
def test_non_finite_stops_with_the_same_error(engine, bad):
    x, y = data(40)
    net = net_for("binary", [20, 15, 10], None, 1.0)
    net.layers[1].h[0, 0] = bad
    before = [layer.h.copy() for layer in net.layers]
    with pytest.raises(FloatingPointError, match=r"non-finite (Δ in|h of) layer \d+ at step 0 of epoch 1"):
        ebp_train.train_epoch(net, x, y, 10, np.random.default_rng(0), engine=engine)
    for layer, old in zip(net.layers, before):
        np.testing.assert_array_equal(layer.h, old)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("engine", ["fast", "reference", "jax"])
@pytest.mark.parametrize("k", [0, 1, 2])
def test_non_finite_bias_is_named(engine, k, bad):
    """A NaN or infinite bias is named as such, with its layer, before any step (not as a non-finite Δ of layer 1
    with finite h; an infinite bias gives finite Δ, so nothing else would stop the epoch)."""
    x, y = data(40)
    net = net_for("binary", [20, 15, 10], None, 1.0)
    net.layers[k].b[3] = bad
    before = [(layer.h.copy(), layer.b.copy()) for layer in net.layers]
    with pytest.raises(FloatingPointError, match=f"NaN/inf in b of layer {k + 1}"):
        ebp_train.train_epoch(net, x, y, 10, np.random.default_rng(0), engine=engine)
    for layer, (h, b) in zip(net.layers, before):
        np.testing.assert_array_equal(layer.h, h)
        np.testing.assert_array_equal(layer.b, b)


@pytest.mark.parametrize("float32_engine", FLOAT32_ENGINES)
def test_float32_nan_image_stops_before_its_update(float32_engine):
    x, y = data(40)
    x[np.random.default_rng(0).permutation(40)[25], 5] = np.nan  # train_epoch's order: in step 2 (images 20-29)
    step = 2
    fast, reference = (net_for("binary", [20, 15, 10], None, 1.0) for _ in range(2))
    for net, engine in ((fast, float32_engine), (reference, "reference")):
        with pytest.raises(FloatingPointError, match=rf"non-finite Δ in layer \d+ at step {step} of epoch 1"):
            ebp_train.train_epoch(net, x, y, 10, np.random.default_rng(0), engine=engine)
    assert_close_networks(fast, reference)  # both stopped after the same finite steps


@pytest.mark.parametrize("engine", ["fast", "reference", "jax"])
def test_evaluation_refuses_nan_images(engine):
    """A NaN or inf in a test image is refused with the rows named, before any is scored (its outputs would be NaN,
    whose argmax counts as class 0)."""
    x, y = data(30)
    x[[4, 17], 3] = [np.nan, np.inf]
    with pytest.raises(ValueError, match=r"2 of the 30 images to evaluate hold NaN/inf \(rows \[4, 17\]\): drop"):
        ebp_train.evaluate(net_for("binary", [20, 15, 10], None, 1.0), x, y.argmax(axis=1), engine=engine)


def test_fast_overflow_during_a_call_leaves_the_network_as_it_was(monkeypatch):
    x, y = data(40)
    net = net_for("binary", [20, 15, 10], None, 1.0)
    before = [layer.h.copy() for layer in net.layers]

    def overflowing(*args):
        args[5].h[1][0, 0] = np.inf  # h of layer 2 in the working copy, as an overflow would leave it
        return 4, -1
    monkeypatch.setattr(ebp_fast, "_train_steps", overflowing)
    with pytest.raises(FloatingPointError, match="overflowed"):
        ebp_train.train_epoch(net, x, y, 10, np.random.default_rng(0), engine="fast")
    for layer, old in zip(net.layers, before):
        np.testing.assert_array_equal(layer.h, old)


def test_unknown_engine_is_refused():
    x, y = data(10)
    with pytest.raises(ValueError, match="unknown engine"):
        ebp_train.train_epoch(net_for("binary", [20, 10], None, 1.0), x, y, 10, np.random.default_rng(0), engine="gpu")


@pytest.mark.parametrize("engine", FLOAT32_ENGINES)
@pytest.mark.parametrize("weights, architecture, dropout, init_scale", CASES)
def test_float32_evaluation_equals_reference(weights, architecture, dropout, init_scale, engine):
    """fit evaluates with the training engine: the float32 outputs (the fast engine's ebp_train.float32_outputs, EBP-D
    output_ebp_d on the float32 network; the JAX engine's ebp_jax._outputs) are within 1e-5 of the reference's, and
    the predicted classes agree except on near-ties (none here; at most 1 image in 1,000 allowed)."""
    x, y = data(3000)
    net = net_for(weights, architecture, dropout, init_scale)
    ebp_train.train_epoch(net, x, y, 10, np.random.default_rng(0))
    x_test, y_test = data(1000, seed=1)
    labels = y_test.argmax(axis=1)
    with ebp_train.resolve_engine(engine).outputs(net) as outputs:
        ebp_p32, ebp_d32 = outputs(x_test)
    assert ebp_p32.dtype == ebp_d32.dtype == np.float32
    assert np.abs(ebp_p32 - ebp.output_ebp_p(net, x_test)).max() < 1e-5
    assert np.sum(ebp_d32.argmax(axis=1) != ebp.output_ebp_d(net, x_test).argmax(axis=1)) <= 1
    fast, reference = (ebp_train.evaluate(net, x_test, labels, engine=e) for e in (engine, "reference"))
    assert abs(fast["ebp_p"] - reference["ebp_p"]) <= 1e-3 and abs(fast["ebp_d"] - reference["ebp_d"]) <= 1e-3
    assert 0.02 < reference["ebp_p"] < 0.9  # the network learned something, and not everything


def test_fast_output_delta_matches_the_reference_everywhere():
    """Δ_L of the compiled engine (erfcx written out: direct below z = 26, asymptotic series above) against
    output_delta (scipy's erfcx) for t = yμ/σ from −1e8 to 40, both labels: relative error below 1e-12."""
    t = np.concatenate([-np.logspace(8, -3, 400), [0.0], np.logspace(-3, np.log10(40), 200)])
    for y in (1.0, -1.0):
        for sigma2 in (0.3, 2.0):
            mu = y * t * np.sqrt(sigma2)
            exact = ebp.output_delta(y, mu, sigma2)
            fast = np.array([ebp_fast._output_delta(y, m, sigma2) for m in mu])
            assert np.all(np.abs(fast - exact) <= 1e-12 * np.abs(exact)), np.abs(fast / exact - 1).max()
