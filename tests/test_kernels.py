"""Every compiled kernel against the readable function it computes, on random inputs.

Each kernel file has a machine-readable table REFERENCES = {kernel: "module.function"} (ebp_fast for ebp_lib's
equations, ebp_binary_kernels for ebp_binary's numpy engine) and PARTS = {helper: kernel} for compiled helpers
that have no equation of their own. The tests here read those tables: every compiled function of a kernel file is
listed in one of them, every reference resolves, and CHECKS holds one check per listed kernel, which calls the
kernel and its reference (resolved from the table) on random inputs.

Tolerances. float32 kernels are compared with float64 references: u32 = 2^-24 ≈ 6e-8 is float32's unit roundoff,
and a sum of K terms computed in any order (the kernels may reassociate: fastmath) errs by at most
γ_K·Σ|terms| with γ_K = K·u32/(1 − K·u32); the bounds below are 2·γ_(K+2)·Σ|terms| plus the error of the
rational tanh (5e-7) or erf (3.5e-7) where one is used (scripts/fit_rational.py measures 4.2e-7 and 3.0e-7). A
wrong equation (a missing factor, a transposed product, a stale ⟨W⟩, a misplaced mask) errs by the size of the
terms themselves, orders of magnitude above these bounds. float64 kernels (Δ_L, erfcx) are held to 1e-12
relative: exp(z²) for z up to 26 amplifies the rounding of z² by z² ≈ 700, i.e. to ~1e-13. The binary kernels
are exact (integer popcounts and float32 sums of ±1 values, p·S + b rounded as in numpy) except the first layer's
real sums, which are rounded in another order than numpy's (and the local kernel's in float32) and are held to the
bounds of ebp_binary.near_tie_tolerance.
"""
from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np
import pytest
from numba.core.registry import CPUDispatcher
from numba.typed import List

import ebp_binary as eb
import ebp_binary_kernels
import ebp_data
import ebp_fast
import ebp_lib as ebp

U32 = float(np.finfo(np.float32).eps) / 2
TANH32_ERROR, ERF32_ERROR = 5e-7, 3.5e-7
KERNEL_FILES = (ebp_fast, ebp_binary_kernels)


def gamma(k: int) -> float:
    """γ_k: the relative bound of a float32 sum of k terms in any order."""
    return k * U32 / (1 - k * U32)


def resolve(name: str):
    """The function a dotted name in a REFERENCES table names."""
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def assert_within(actual, expected, bound, what):
    excess = np.abs(np.asarray(actual, np.float64) - expected) - bound
    assert np.all(excess <= 0), f"{what}: off by {excess.max():.3g} more than the bound"


# ----------------------------------------------------------------------------------------------------------
# ebp_fast's kernels against ebp_lib
# ----------------------------------------------------------------------------------------------------------

def check_tanh32(kernel, reference):
    x = np.concatenate([np.random.default_rng(0).uniform(-20, 20, 20_000), [0.0, 7.9, -7.9, 8.5]]).astype(np.float32)
    got = np.array([kernel(v) for v in x])
    assert_within(got, reference(x.astype(np.float64)), TANH32_ERROR, "tanh")


def check_erf32(kernel, reference):
    x = np.concatenate([np.random.default_rng(1).uniform(-6, 6, 20_000), [0.0, 3.8, -3.8]]).astype(np.float32)
    got = np.array([kernel(v) for v in x])
    assert_within(got, reference(x.astype(np.float64)), ERF32_ERROR, "erf")
    assert np.isnan(kernel(np.float32(np.nan)))


def check_erfcx(kernel, reference):
    rng = np.random.default_rng(2)
    z = np.concatenate([rng.uniform(-5, 30, 5000), np.logspace(1, 8, 500), [25.999, 26.0, 26.001]])
    exact = reference(z)
    assert_within([kernel(v) for v in z], exact, 1e-12 * exact, "erfcx")


def check_output_delta(kernel, reference):
    rng = np.random.default_rng(3)
    y = rng.choice([-1.0, 1.0], 4000)
    sigma2 = rng.uniform(0.05, 3.0, 4000)
    mu = rng.uniform(-50, 40, 4000) * np.sqrt(sigma2)
    exact = reference(y, mu, sigma2)
    assert_within([kernel(a, b, c) for a, b, c in zip(y, mu, sigma2)], exact, 1e-12 * np.abs(exact), "Δ_L")


def random_layer(rng, units, width, masked):
    """float32 h of a layer (0 off its mask, as the engine keeps it) and its 0/1 mask (None: dense)."""
    mask = rng.random((units, width)) < 0.6 if masked else None
    h = rng.uniform(-2, 2, (units, width)).astype(np.float32)
    if mask is not None:
        h *= mask
    return h, mask


def check_update_row(kernel, reference):
    rng = np.random.default_rng(4)
    for batch in (1, 3, 5, 7, 10):
        for masked in (False, True):
            h, mask = random_layer(rng, 6, 40, masked)
            layer = ebp.Layer(h.astype(np.float64), np.zeros(6), mask)
            nu = rng.uniform(-1, 1, (batch, 40)).astype(np.float32)
            delta = rng.standard_normal((batch, 6))
            scaled = (delta / np.sqrt(layer.normaliser)).astype(np.float32)
            fwd = ebp.Pass([nu.astype(np.float64)], [None], [None], [None], [None], [None])
            net = ebp.Network([layer], "binary", [6])
            # the kernel's own rounding of Δ/sqrt(N) to float32 is the input: the reference gets the same numbers
            expected = h + reference(net, fwd, [scaled.astype(np.float64) * np.sqrt(layer.normaliser)])[0]
            terms = np.abs(h) + np.abs(scaled).T @ np.abs(nu)
            for row in range(6):
                got = h[row].copy()
                kernel(got, scaled, row, nu, mask[row].astype(np.float32) if masked else got, masked)
                assert_within(got, expected[row], 2 * gamma(batch + 2) * terms[row], f"h row {row}, batch {batch}")


def check_refresh_row(kernel, reference):
    h = np.random.default_rng(5).uniform(-9, 9, (1, 3000)).astype(np.float32)
    out = np.empty(3000, np.float32)
    kernel(h[0], out)
    assert_within(out, reference(ebp.Layer(h.astype(np.float64), np.zeros(1)), "binary")[0][0], TANH32_ERROR,
                  "⟨W⟩")


def layer_pass_case(rng, weights, masked, held, batch, batch_next, image):
    """Random inputs of _layer_pass / _online_pass: a layer, this step's Δ/sqrt(N) and inputs ν, the next step's
    inputs (ν', ⟨v²⟩', m2_factor' as ebp_fast._load_inputs makes them: the image, or ±1 hidden units)."""
    units, width = 7, 50
    h, mask = random_layer(rng, units, width, masked)
    layer = ebp.Layer(h.astype(np.float64), np.zeros(units), mask, held=held)
    scaled = (rng.standard_normal((batch, units)) * 0.3).astype(np.float32)
    nu = rng.uniform(-1, 1, (batch, width)).astype(np.float32)
    nu_next = (rng.standard_normal((batch_next, width)) if image else rng.uniform(-1, 1, (batch_next, width)))
    nu_next = nu_next.astype(np.float32)
    v2_next = nu_next * nu_next if image else np.ones_like(nu_next)
    m2_next = nu_next * nu_next if weights == "binary" else nu_next * nu_next - v2_next
    return layer, scaled, nu, nu_next, v2_next, m2_next


def check_layer_pass(kernel, reference, online=False):
    """The update (h += Σ Δν/sqrt(N), checked as in check_update_row), then μ and σ² of the next step rebuilt from
    the kernel's products, μ = (Σ⟨W⟩ν' + b)/sqrt(N) and σ² = (second − m2_terms)/N, against layer_moments on the
    updated h (the same h: the update's own rounding is not counted twice)."""
    rng = np.random.default_rng(6)
    if online:
        cases = [(w, False, False, 1, 1, image) for w in ("binary", "real") for image in (True, False)]
    else:
        cases = [(w, masked, held, batch, batch_next, image) for w in ("binary", "real")
                 for masked, held in ((False, False), (True, False), (True, True))
                 for batch, batch_next in ((0, 3), (4, 0), (3, 5), (1, 1)) for image in (True, False)]
    for weights, masked, held, batch, batch_next, image in cases:
        layer, scaled, nu, nu_next, v2_next, m2_next = layer_pass_case(rng, weights, masked, held, batch,
                                                                       batch_next, image)
        units, width = layer.h.shape
        h = layer.h.astype(np.float32)
        w_mean = np.empty_like(h) if weights == "binary" else h
        products = [np.zeros((batch_next, units), np.float32) for _ in range(3)]  # μ, m2_terms, second
        use_m2 = weights == "binary" or not image
        mask32 = layer.mask.astype(np.float32) if masked else np.zeros((0, 0), np.float32)
        second_mask = mask32 if masked and not held else np.zeros((0, 0), np.float32)
        if online:
            kernel(h, w_mean, True, weights == "binary", scaled, nu, nu_next, m2_next, use_m2, products[0],
                   products[1])
        else:
            moments = ebp_fast.Moments(products[0], products[1], products[2], products[2], products[2])
            kernel(h, w_mean, mask32, second_mask, True, weights == "binary", scaled, nu,
                   ebp_fast.Inputs(nu_next, v2_next, m2_next, np.ones_like(nu_next)), use_m2, moments)
        what = f"{weights}, mask {masked} (held {held}), batch {batch}/{batch_next}, image {image}"
        updated = ebp.Layer(h.astype(np.float64), np.zeros(units), layer.mask, held=held)
        if batch:
            increment = (np.abs(scaled).T @ np.abs(nu)) * (layer.mask if masked else 1)
            assert_within(h, layer.h + scaled.T.astype(np.float64) @ nu * (layer.mask if masked else 1),
                          2 * gamma(batch + 2) * (np.abs(layer.h) + increment), f"h, {what}")
        if not batch_next:
            continue
        v2_prev = v2_next.astype(np.float64) if image else None
        nu64 = nu_next.astype(np.float64)
        # ⟨v⟩² as the kernel's inputs hold it (the float32 square), so that both sides see the same numbers
        mu, sigma2, w_mean_ref = reference(updated, weights, nu64, v2_prev, (nu_next * nu_next).astype(np.float64))
        if weights == "binary":
            assert_within(w_mean, w_mean_ref, TANH32_ERROR, f"⟨W⟩, {what}")
        n = updated.normaliser
        abs_w = np.abs(w_mean_ref) + (TANH32_ERROR if weights == "binary" else 0)
        bound_mu = (2 * gamma(width + 2) * (np.abs(nu64) @ abs_w.T)
                    + (TANH32_ERROR * np.abs(nu64).sum(axis=1, keepdims=True) if weights == "binary" else 0))
        assert_within(products[0] / np.sqrt(n), mu, bound_mu / np.sqrt(n), f"μ, {what}")
        if masked and not held:
            second = products[2].astype(np.float64)
            bound_second = 2 * gamma(width + 2) * (v2_next.astype(np.float64) @ layer.mask.T + 1)
        else:
            second = v2_next.astype(np.float64).sum(axis=1, keepdims=True) + 1
            bound_second = 0
        m2_terms = products[1].astype(np.float64) if use_m2 else 0.0
        bound_m2 = (2 * gamma(width + 2) + 3 * TANH32_ERROR) * (np.abs(m2_next.astype(np.float64)) @ (abs_w ** 2).T)
        # (+ the float64 reference's own rounding, whose σ² subtracts sums of up to ~10²)
        assert_within((second - m2_terms) / n, sigma2, (bound_second + bound_m2) / n + 1e-12 * sigma2, f"σ², {what}")


def check_online_pass(kernel, reference):
    check_layer_pass(kernel, reference, online=True)


def check_finish_layer(kernel, reference):
    """μ = (products + b)/sqrt(N), σ² = (second − m2_terms)/N and ν = erf(μ/sqrt(2σ²)) against unit_mean on the
    same μ and σ² computed in float64."""
    rng = np.random.default_rng(7)
    batch, units, width = 6, 9, 30
    for masked, extra in ((False, 0), (True, 0), (False, 1), (True, 1)):
        v2_in = rng.uniform(0, 2, (batch, width)).astype(np.float32)
        second = (rng.uniform(1, 30, (batch, units)) if masked else np.zeros((batch, units))).astype(np.float32)
        dense = v2_in.astype(np.float64).sum(axis=1, keepdims=True) + 1
        total = (second.astype(np.float64) if masked else dense) + extra  # extra: the authors' real-weight σ²
        m2_terms = (rng.uniform(0, 0.9, (batch, units)) * total).astype(np.float32)
        products = (rng.standard_normal((batch, units)) * 5).astype(np.float32)
        b = rng.standard_normal(units).astype(np.float32)
        n = rng.integers(5, 40, units).astype(np.float32)
        moments = ebp_fast.Moments(products.copy(), m2_terms, second, np.empty_like(second), np.empty_like(second))
        kernel(moments, b, n, (1 / np.sqrt(n)).astype(np.float32), v2_in, masked, True, batch, np.float32(extra))
        mu = (products.astype(np.float64) + b) / np.sqrt(n)
        sigma2 = (total - m2_terms) / n
        assert_within(moments.mu, mu, 4 * U32 * (np.abs(products) + np.abs(b)) / np.sqrt(n), "μ")
        bound_second = 0 if masked else 2 * gamma(width + 2) * dense
        assert_within(moments.sigma2, sigma2, (4 * U32 * (total + m2_terms) + bound_second) / n, "σ²")
        z = mu / np.sqrt(2 * sigma2)
        assert_within(moments.nu, reference(mu, sigma2), ERF32_ERROR + 1.2 * 8 * U32 * np.abs(z)
                      + 1.2 * np.abs(z) * (bound_second / n) / sigma2, "ν")


def check_updated_back(kernel, reference):
    """Σ_i d_si δh_ij, δh = (dᵀ ν) × mask, against float64 numpy, unmasked (the batch×batch form) and masked;
    the bound is float32 rounding of sums of |terms|."""
    rng = np.random.default_rng(19)
    batch, units, width = 7, 11, 30
    d = (rng.standard_normal((batch, units)) * 0.3).astype(np.float32)
    nu = rng.uniform(-1, 1, (batch, width)).astype(np.float32)
    for mask in (np.zeros((0, 0), np.float32), (rng.random((units, width)) < 0.4).astype(np.float32)):
        full = mask if mask.size else np.ones((units, width))
        d64, nu64 = d.astype(np.float64), nu.astype(np.float64)
        expected = d64 @ ((d64.T @ nu64) * full)
        magnitude = np.abs(d64) @ ((np.abs(d64).T @ np.abs(nu64)) * full)
        assert_within(kernel(d, nu, mask), expected, 2 * gamma(batch + units + 2) * magnitude,
                      f"Δ·δh, {'masked' if mask.size else 'dense'}")


def fast_net(weights, dropout, architecture=(9, 7, 5), side=4, seed=1):
    """A network whose h and b are float32 numbers (the fast engine's), and its float32 working copy."""
    net = ebp.init_network(list(architecture), weights, seed=seed, input_side=side, init_scale=3.0, dropout=dropout)
    rng = np.random.default_rng(seed)
    for layer in net.layers:
        layer.h[...] = layer.h.astype(np.float32)
        layer.b[...] = (rng.standard_normal(len(layer.b)) * 0.5).astype(np.float32)
    return net


def check_load_inputs(kernel, reference):
    """ν, ⟨v²⟩, m2_factor and the dropout masks of layers 1 and 2 against the inputs and masks of a training
    forward pass from the same Generator state (the same draws, in the same order)."""
    for weights in ("binary", "real"):
        for dropout in (None, "analytic", "sampled"):
            net = fast_net(weights, dropout)
            x = np.random.default_rng(8).standard_normal((5, 16))
            fwd = reference(net, x, train=True, rng=np.random.default_rng(9))
            columns = np.array([0, 2, 3, 7, 8, 15])
            work = ebp_fast.working_copy(net, columns)
            rng = np.random.default_rng(9)
            for l, (source, cols) in enumerate(((x, columns), (fwd.nu[0], np.arange(net.sizes[1])))):
                out = ebp_fast.Inputs(*(np.zeros((5, len(cols)), np.float32) for _ in range(4)))
                kernel(out, source if l == 0 else source.astype(np.float32), cols, l == 0, work, rng)
                kept = np.ones((5, len(cols))) if fwd.masks[l] is None else fwd.masks[l][:, cols]
                nu = fwd.inputs[l][:, cols]
                v2 = (x[:, cols] ** 2 if l == 0 else np.ones_like(nu)) * kept
                nu2 = nu * nu * ((1 - 4 * net.keep * (1 - net.keep)) if dropout == "analytic" and l == 0 else 1)
                what = f"{weights}, dropout {dropout}, layer {l + 1}"
                np.testing.assert_array_equal(out.kept, kept, err_msg=what)
                np.testing.assert_array_equal(out.nu, nu.astype(np.float32), err_msg=what)
                assert_within(out.v2, v2, 4 * U32 * v2, f"⟨v²⟩, {what}")
                factor = nu2 if weights == "binary" else nu2 - v2
                assert_within(out.m2_factor, factor, 6 * U32 * (nu2 + v2), f"m2_factor, {what}")


def check_back_product(kernel, reference):
    rng = np.random.default_rng(10)
    for units in (1, 8, 13, 100):
        d = rng.standard_normal((6, units)).astype(np.float32)
        m = rng.uniform(-1, 1, (units, 37)).astype(np.float32)
        exact = reference(d.astype(np.float64), m.astype(np.float64))
        assert_within(kernel(d, m), exact, 2 * gamma(units + 2) * (np.abs(d) @ np.abs(m)), f"Δ·⟨W⟩, {units} rows")


def check_backward(kernel, reference):
    """Δ of every layer from the forward moments of ebp_lib.forward (rounded to float32, as the engine holds them)
    against ebp_lib.backward on the same pass. Bound: 1e-5 of the layer's largest |Δ|. Δ_L is float64 from
    float32 μ and σ² (relative error ≲ |μ/σ|·u32 ≈ 5e-7 here); each hidden Δ adds a float32 sum over ≤ 7 units and
    the float32 density exp(−μ²/2σ²), a few u32 each: together ≲ 2e-6."""
    for weights, dropout in (("binary", None), ("real", None), ("binary", "sampled"), ("real", "sampled")):
        net = fast_net(weights, dropout)
        rng = np.random.default_rng(11)
        x = rng.standard_normal((6, 16))
        y = ebp_data.one_vs_all(rng.integers(0, 5, 6), 5)
        fwd = ebp.forward(net, x, train=True, rng=np.random.default_rng(12))
        expected = reference(net, fwd, y)
        work = ebp_fast.working_copy(net, np.arange(16))
        for l in range(len(net.layers)):
            work.w_mean[l][...] = fwd.w_mean[l]
        f32 = np.float32
        moments = List([ebp_fast.Moments(mu.astype(f32), np.zeros_like(mu, f32), np.zeros_like(mu, f32),
                                         s2.astype(f32), np.zeros_like(mu, f32)) for mu, s2 in zip(fwd.mu, fwd.sigma2)])
        inputs = List([ebp_fast.Inputs(nu.astype(f32), np.ones_like(nu, f32), np.ones_like(nu, f32),
                                       np.ones_like(nu, f32) if mask is None else mask.astype(f32))
                       for nu, mask in zip(fwd.inputs, fwd.masks)])
        deltas = List([np.zeros((6, len(layer.b)), f32) for layer in net.layers])
        assert kernel(y, np.arange(6), work, moments, inputs, deltas) == -1
        for l, (got, want) in enumerate(zip(deltas, expected)):
            assert np.abs(want).max() > 0
            assert_within(got, want, 1e-5 * np.abs(want).max(), f"Δ of layer {l + 1}, {weights}, {dropout}")


def check_train_steps(kernel, reference):
    """60 steps through ebp_fast.train_steps (which runs the kernel on a working copy) against
    ebp_train.train_steps(engine="reference"): h and b within 1e-4 of the largest |h| (tests/test_fast.py: float32
    rounding accumulated over the steps is ~1e-6 of it), and the same random draws."""
    assert kernel is ebp_fast._train_steps
    rng = np.random.default_rng(13)
    x = rng.standard_normal((120, 36)) + np.cos(np.arange(36))
    y = ebp_data.one_vs_all(rng.integers(0, 5, 120), 5)
    for weights, architecture, dropout in (("binary", [8, 6, 5], "sampled"), ("real", [("local", 3), 5], None)):
        fast, slow = (ebp.init_network(architecture, weights, seed=2, input_side=6, dropout=dropout)
                      for _ in range(2))
        order = np.random.default_rng(0).permutation(120)
        rng_fast, rng_slow = np.random.default_rng(5), np.random.default_rng(5)
        ebp_fast.train_steps(fast, x, y, order, 2, rng_fast, str)
        reference(slow, x, y, order, 2, rng_slow, engine="reference")
        assert rng_fast.bit_generator.state == rng_slow.bit_generator.state
        scale = max(np.abs(layer.h).max() for layer in slow.layers)
        for a, b in zip(fast.layers, slow.layers):
            assert_within(a.h, b.h, 1e-4 * scale, f"h, {weights}")
            assert_within(a.b, b.b, 1e-4 * max(scale, 1.0), f"b, {weights}")


def check_float32_ebp_p(kernel, reference):
    """The float32 evaluation of EBP-P (BLAS products, ⟨W²⟩ folded into σ²) against ebp_lib.output_ebp_p on the same
    float32 numbers, for dense and local layers (absent and held), every dropout reading and the authors' variance:
    within 1e-5 (float32 sums over ≤ 16 inputs and the float32 erf, a few u32 each)."""
    x = np.random.default_rng(14).standard_normal((7, 16))
    cases = [(w, d, a, "absent", "spec") for w in ("binary", "real") for d in (None, "analytic", "sampled")
             for a in ([9, 7, 5], [("local", 2), 5])]
    cases += [("binary", None, [("local", 2), ("local", 2), 5], "held", "spec"), ("real", None, [9, 7, 5], "absent",
                                                                                    "authors")]
    for weights, dropout, architecture, mask_reading, update in cases:
        net = ebp.init_network(architecture, weights, seed=3, input_side=4, init_scale=3.0, dropout=dropout,
                               mask_reading=mask_reading, real_update=update, dtype=np.float32)
        for layer in net.layers:
            layer.b[...] = np.random.default_rng(15).standard_normal(len(layer.b)).astype(np.float32) * 0.5
        got = kernel(net, ebp_fast.float32_weight_moments(net), x)
        assert got.dtype == np.float32
        expected = reference(replace(net, layers=[replace(layer, h=layer.h.astype(np.float64),
                                                          b=layer.b.astype(np.float64)) for layer in net.layers]), x)
        assert_within(got, expected, 1e-5, f"EBP-P, {weights}, {dropout}, {architecture}, {mask_reading}, {update}")


# ----------------------------------------------------------------------------------------------------------
# ebp_binary_kernels against ebp_binary's numpy engine
# ----------------------------------------------------------------------------------------------------------

def packed_layer(rng, units, n_inputs, masked):
    w = rng.choice([-1.0, 1.0], (units, n_inputs)) * ((rng.random((units, n_inputs)) < 0.7) if masked else 1)
    return eb.PackedLayer(eb.pack_bits(w > 0), eb.pack_bits(w != 0) if masked else None,
                          rng.standard_normal(units), n_inputs)


def local_layer(rng, side, block, masked):
    """A locally connected layer (patches of block x block on a side x side map), some patch weights 0 if masked."""
    units, positions = (side - block + 1) ** 2, block * block
    w = rng.choice([-1.0, 1.0], (units, positions)) * ((rng.random((units, positions)) < 0.7) if masked else 1)
    return eb.PackedLayer(eb.pack_bits(w > 0), eb.pack_bits(w != 0) if masked else None, rng.standard_normal(units),
                          side * side, (side, block))


def dense_arrays(layer):
    return eb.work_array(layer, "signs_t"), eb.work_array(layer, "connected_t"), layer.connected is not None, layer.fan_in


def check_popcount64(kernel, reference):
    words = np.random.default_rng(14).integers(0, 2 ** 63, 5000, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    words[:3] = [0, 2 ** 64 - 1, 2 ** 63]
    np.testing.assert_array_equal([kernel(w) for w in words], reference(words))


def check_popcount_sums_kernel(kernel, reference):
    """Exact integers, masked or not, with 1-3 words left over after the blocks of 4 and an odd batch (the last
    image paired with itself)."""
    rng = np.random.default_rng(15)
    for n_inputs, masked, batch in ((70, False, 9), (70, True, 9), (200, True, 4), (64, False, 1), (800, False, 7),
                                    (300, False, 2)):
        layer = packed_layer(rng, 33, n_inputs, masked)
        v = eb.pack_bits(rng.random((batch, n_inputs)) < 0.5)
        out = np.empty((batch, 33), np.int64)
        kernel(*dense_arrays(layer), v, out)
        np.testing.assert_array_equal(out, reference(layer, v))


def check_hidden_layer_kernel(kernel, reference):
    rng = np.random.default_rng(16)
    for n_inputs, masked, scale, batch in ((70, False, 1.0, 9), (130, True, 0.8, 9), (800, False, 0.8, 1)):
        layer = packed_layer(rng, 70, n_inputs, masked)
        v = eb.pack_bits(rng.random((batch, n_inputs)) < 0.5)
        out = np.zeros((batch, eb.n_words(70)), np.uint64)
        kernel(*dense_arrays(layer), layer.b, scale, v, out)
        np.testing.assert_array_equal(out, eb.pack_bits(scale * reference(layer, v) + layer.b >= 0))


def check_output_layer_kernel(kernel, reference):
    rng = np.random.default_rng(19)
    for n_inputs, masked, scale, batch in ((70, False, 1.0, 5), (130, True, 0.8, 4), (800, False, 0.8, 1)):
        layer = packed_layer(rng, 10, n_inputs, masked)
        v = eb.pack_bits(rng.random((batch, n_inputs)) < 0.5)
        out = np.empty((batch, 10))
        kernel(*dense_arrays(layer), layer.b, scale, v, out)
        np.testing.assert_array_equal(out, scale * reference(layer, v) + layer.b)  # the same float64 numbers


def check_first_layer_sums_kernel(kernel, reference):
    rng = np.random.default_rng(17)
    for n_inputs, masked in ((5, False), (70, True), (784, False), (784, True), (100, False)):
        layer = packed_layer(rng, 21, n_inputs, masked)
        x = rng.standard_normal((7, n_inputs)) * 3
        out = np.empty((7, 21))
        kernel(x, eb.work_array(layer, "plus_t"), eb.work_array(layer, "minus_t"), masked, eb.work_array(layer, "unit_span"), out)
        bound = 2 * 4 * (n_inputs + 2) * eb.UNIT_ROUNDOFF * np.abs(x).sum(axis=1, keepdims=True)  # both orders
        assert_within(out, reference(layer, x), bound, f"first-layer sums, K = {n_inputs}")


def check_local_sums_kernel(kernel, reference):
    """Real inputs: within float32's bound for the inputs rounded to float32 and a sum in any order, (K + 1)·u32·Σ|x|
    (near_tie_tolerance's float32 band is twice that). ±1 inputs: exact integers."""
    rng = np.random.default_rng(20)
    for side, block, masked in ((12, 5, False), (12, 5, True), (28, 13, False), (9, 9, False), (6, 1, True)):
        layer = local_layer(rng, side, block, masked)
        for x in (rng.standard_normal((5, side * side)) * 3, rng.choice([-1.0, 1.0], (5, side * side))):
            out = np.empty((5, layer.n_units), np.float32)
            kernel(x.reshape(5, side, side), eb.work_array(layer, "patch32"), out)
            bound = (side * side + 1) * U32 * np.abs(x).sum(axis=1, keepdims=True)
            assert_within(out, reference(layer, x), bound, f"local sums, block {block}")
        np.testing.assert_array_equal(out, reference(layer, x))  # ±1 inputs: integers, exact


def check_threshold_kernel(kernel, reference):
    """The signs and the near-ties (those within near_tie_tolerance, here some exact ties made on purpose) against
    first_layer_signs, whose exact decider settles the near-ties the kernel only lists; float64 and float32 sums,
    written at an offset (row0) into words and (start) into the list of near-ties."""
    rng = np.random.default_rng(18)
    layer = packed_layer(rng, 70, 100, False)
    x = rng.standard_normal((6, 100))
    exact = eb.first_layer_sums(layer, x)
    layer.b[:5] = -0.8 * exact[0, :5]  # units 0-4 of image 0 are (near-)ties
    for sums, roundoff, safety in ((exact, eb.UNIT_ROUNDOFF, eb.NEAR_TIE_SAFETY),
                                   (exact.astype(np.float32), eb.UNIT_ROUNDOFF32, eb.NEAR_TIE_SAFETY32)):
        words = np.zeros((8, 2), np.uint64)
        near = np.full((70, 2), -1, np.int64)
        tolerance = safety * (100 + 2) * roundoff
        n_near = kernel(sums, x, layer.b, 0.8, tolerance, words, 2, near, 3)
        plus, n_expected = reference(layer, x, sums, 0.8, roundoff, safety)
        band = np.abs(0.8 * sums.astype(np.float64) + layer.b) <= eb.near_tie_tolerance(layer, x, 0.8, roundoff,
                                                                                         safety)
        listed = {(n - 2, unit) for n, unit in near[3:3 + n_near]}
        assert n_near == n_expected >= 5 and listed == {tuple(pair) for pair in np.argwhere(band)}
        assert np.all(words[:2] == 0) and np.all(near[:3] == -1)  # nothing written before the offsets
        bits = eb.unpack_bits(words[2:], 70)
        np.testing.assert_array_equal(bits[~band], plus[~band])


def check_sign_words_kernel(kernel, reference):
    rng = np.random.default_rng(21)
    for units, dtype in ((70, np.int64), (64, np.float32), (129, np.int64)):
        sums = rng.integers(-30, 30, (5, units)).astype(dtype)
        b = rng.integers(-3, 3, units) * 0.8  # ties p·S + b = 0 happen: +1 there
        out = np.zeros((5, eb.n_words(units)), np.uint64)
        kernel(sums, b, 0.8, out)
        np.testing.assert_array_equal(out, reference(0.8 * sums.astype(np.float64) + b >= 0))


def check_recheck_kernel(kernel, reference):
    """Near-ties recomputed in float64: those clear of the float64 bound get the sign of the float64 pre-activation
    (reference: numpy's dot product), the others (exact ties made on purpose) are handed back for the exact
    decider; dense and local layers."""
    rng = np.random.default_rng(22)
    for layer in (packed_layer(rng, 40, 100, True), local_layer(rng, 10, 4, False)):
        x = rng.standard_normal((6, layer.n_inputs))
        pairs = np.array([(n, unit) for n in range(6) for unit in range(0, layer.n_units, 3)])
        reference_u = reference(layer, x, pairs, 0.8)
        ties = pairs[:4]
        layer.b[ties[:, 1]] = -(reference_u[:4] - layer.b[ties[:, 1]])  # p·S + b exactly 0 (to rounding)
        reference_u = reference(layer, x, pairs, 0.8)
        tolerance = eb.NEAR_TIE_SAFETY * (layer.n_inputs + 2) * eb.UNIT_ROUNDOFF
        words = np.zeros((6, eb.n_words(layer.n_units)), np.uint64)
        words[:] = np.uint64(0x5555555555555555)  # the bits the kernel must set or clear
        near = pairs.copy()
        left = kernel(x, eb.work_array(layer, "dense8"), layer.b, 0.8, tolerance, near, len(near), words)
        band = np.abs(reference_u) <= eb.near_tie_tolerance(layer, x, 0.8)[pairs[:, 0], pairs[:, 1]]
        assert band[:4].all() and left == band.sum()
        assert {tuple(p) for p in near[:left]} == {tuple(p) for p in pairs[band]}
        bits = eb.unpack_bits(words, layer.n_units)[pairs[:, 0], pairs[:, 1]]
        np.testing.assert_array_equal(bits[~band], reference_u[~band] >= 0)


CHECKS = {
    ebp_fast: {"tanh32": check_tanh32, "erf32": check_erf32, "_erfcx": check_erfcx,
               "_output_delta": check_output_delta, "_update_row": check_update_row,
               "_refresh_row": check_refresh_row, "_layer_pass": check_layer_pass,
               "_online_pass": check_online_pass, "_finish_layer": check_finish_layer,
               "_load_inputs": check_load_inputs, "_back_product": check_back_product,
               "_updated_back": check_updated_back,
               "_backward": check_backward, "_train_steps": check_train_steps,
               "float32_ebp_p": check_float32_ebp_p},
    ebp_binary_kernels: {"popcount64": check_popcount64, "popcount_sums_kernel": check_popcount_sums_kernel,
                         "hidden_layer_kernel": check_hidden_layer_kernel,
                         "output_layer_kernel": check_output_layer_kernel,
                         "first_layer_sums_kernel": check_first_layer_sums_kernel,
                         "local_sums_kernel": check_local_sums_kernel, "threshold_kernel": check_threshold_kernel,
                         "sign_words_kernel": check_sign_words_kernel, "recheck_kernel": check_recheck_kernel},
}


@pytest.mark.parametrize("module", KERNEL_FILES, ids=lambda m: m.__name__)
def test_every_compiled_function_is_in_the_tables(module):
    """Each compiled function of a kernel file is a kernel with a reference or a part of one (a kernel may also be
    plain numpy written for speed); every reference resolves to a function, and every kernel has a check here."""
    compiled = {name for name, value in vars(module).items() if isinstance(value, CPUDispatcher)}
    listed = set(module.REFERENCES) | set(module.PARTS)
    assert compiled <= listed and all(callable(getattr(module, name)) for name in listed)
    assert not set(module.REFERENCES) & set(module.PARTS)
    assert set(module.PARTS.values()) <= set(module.REFERENCES)
    assert all(callable(resolve(name)) for name in module.REFERENCES.values())
    assert set(CHECKS[module]) == set(module.REFERENCES)


@pytest.mark.parametrize("module, kernel", [(module, kernel) for module in KERNEL_FILES
                                            for kernel in module.REFERENCES], ids=str)
def test_kernel_matches_its_reference(module, kernel):
    CHECKS[module][kernel](getattr(module, kernel), resolve(module.REFERENCES[kernel]))
