"""The fast engine's compiled kernels (engine="fast", ebp_train's default): EBP's training steps in float32, a
whole train_epoch call in one compiled (numba) function, and the thin orchestration around it (a float32 working copy
of the network, its parameters written back).

Nothing here is needed to read the algorithm: every kernel computes equations that ebp_lib writes in plain numpy,
REFERENCES names that readable reference for each kernel (PARTS the kernel each helper belongs to), and
tests/test_kernels.py checks every kernel against its reference on random inputs; tests/test_fast.py compares
whole epochs with engine="reference". This module imports nothing of ebp_lib (it reads the network's fields and
properties), so that the kernel files sit below the maths. The fast engine's evaluation is numpy (BLAS):
ebp_train.float32_outputs, with EBP-P's float32 σ² fold here (float32_ebp_p, a kernel of REFERENCES too).

How the compiled epoch differs from the reference (the same equations, docs/maths.md §Forward pass to §Update):
- the forward pass of step t+1 needs only layer l's updated weights and layer l−1's new outputs, so each layer's
  update at step t is fused with its products for step t+1 (_layer_pass): every weight is read and written
  once per step, and ⟨W⟩ = tanh h is refreshed there (a rational tanh that vectorises) and stored only for the
  layers whose ⟨W⟩ the backward pass needs;
- ⟨W²⟩ is folded into the products: σ²·N = Σ mask⟨v²⟩ + 1 − Σ ⟨W⟩²·m2_factor, where m2_factor = ν² for binary
  weights (⟨W²⟩ = 1) and ν² − ⟨v²⟩ for real ones (⟨W²⟩ = ⟨W⟩² + 1);
- the first layer leaves out the inputs that are 0 in every image of the call (their weights neither change,
  Δ·0 = 0, nor count in μ or σ²);
- Δ_L is computed in float64 (as output_delta, through erfcx), everything else in float32.
It draws the same random numbers as the reference in the same order (numba draws from the numpy Generator
itself), so sampled-dropout runs see the same masks. At the end of a call (also when a non-finite Δ stops it)
h and b are written back into the network, rounded to float32 whatever its dtype: every epoch starts from the
network alone, so checkpoint/resume stays bit-identical. Timings and design choices: outputs/BENCHMARK.md.
"""
from __future__ import annotations

import math
from collections import namedtuple

import numba
import numpy as np
from numba.typed import List
from scipy import special

FAST_DTYPE = np.float32
# fastmath without 'nnan'/'ninf': LLVM may vectorise and reassociate, but NaN and inf keep their meaning (a NaN
# image gives a non-finite Δ and the reference's error; h is checked before and after each call, see `train_steps`).
FASTMATH = {"contract", "arcp", "reassoc", "nsz", "afn"}
_JIT = dict(fastmath=FASTMATH, error_model="numpy", cache=True)
_LOG_SQRT_2_OVER_PI = 0.5 * math.log(2.0 / math.pi)
NO_DROPOUT, ANALYTIC, SAMPLED = 0, 1, 2  # net.dropout inside the compiled code
DROPOUT_CODES = {None: NO_DROPOUT, "analytic": ANALYTIC, "sampled": SAMPLED}

# Each kernel (compiled, or numpy arranged for speed) and the readable function whose equations it computes
# (tests/test_kernels.py checks every pair on random inputs).
REFERENCES = {
    "tanh32": "numpy.tanh",                          # ⟨W⟩ of a binary weight (ebp_lib.weight_moments)
    "erf32": "scipy.special.erf",                    # ν = erf(μ/sqrt(2σ²)) (ebp_lib.unit_mean)
    "_erfcx": "scipy.special.erfcx",                  # in Δ_L (ebp_lib.log_phi_ratio)
    "_output_delta": "ebp_lib.output_delta",
    "_update_row": "ebp_lib.increments",
    "_refresh_row": "ebp_lib.weight_moments",
    "_layer_pass": "ebp_lib.layer_moments",           # the update fused with the products of μ and σ²
    "_online_pass": "ebp_lib.layer_moments",          # _layer_pass at batch size 1
    "_finish_layer": "ebp_lib.unit_mean",             # ν, after μ and σ² from the products (layer_moments)
    "_load_inputs": "ebp_lib.forward",                # ν, ⟨v²⟩ and the dropout masks of a layer's inputs
    "_back_product": "numpy.matmul",                  # Δ·⟨W⟩ (ebp_lib.backward)
    "_updated_back": "ebp_lib.backward",              # Δ·δh, the authors' real-weight code (ebp_lib.backward)
    "_backward": "ebp_lib.backward",
    "_train_steps": "ebp_train.train_steps",
    "float32_ebp_p": "ebp_lib.output_ebp_p",          # numpy, not compiled: the evaluation's σ² fold (BLAS)
}
# Compiled helpers without an equation of their own: the kernel whose test covers each.
PARTS = {
    "_used_columns": "_train_steps",                  # which inputs the first layer may leave out
    "_first_rows": "_train_steps",                    # views of the first rows of a layer's inputs
}

# The float32 working copy of a network: h, w_mean (⟨W⟩), b, mask, second_mask, normaliser (N) and
# inv_sqrt_normaliser (1/sqrt(N)) are typed lists with one array per layer (the first layer's h and masks hold only
# the used input columns); `mask` confines the update, `second_mask` the sum Σ mask⟨v²⟩ (empty for dense layers,
# and for masked weights that are held at h = 0 rather than absent: they keep ⟨W²⟩ = 1); binary is the weight
# type, dropout its code above, keep the dropout keep probability p, analytic the float32 factor 1 − 4p(1 − p) of
# the image's ν² under analytic dropout (ebp_lib.analytic_factor); through_updated and extra_variance are the two
# parts of the authors' real-weight update, lagged the authors' binary update of 2015 (⟨W⟩ one step stale)
# (ebp_lib.UPDATES), all False for the spec's.
FastNet = namedtuple("FastNet", "h w_mean b mask second_mask normaliser inv_sqrt_normaliser binary dropout keep "
                                "analytic through_updated extra_variance lagged")
# One layer's inputs for one step, (batch, K) each: ν, ⟨v²⟩, m2_factor (the factor of ⟨W⟩² in σ²·N), the dropout
# mask.
Inputs = namedtuple("Inputs", "nu v2 m2_factor kept")
# One layer's moments for one step, (batch, V) each: μ, m2_terms = Σ ⟨W⟩²·m2_factor and second = Σ mask⟨v²⟩ + 1
# (local layers), σ² and ν.
Moments = namedtuple("Moments", "mu m2_terms second sigma2 nu")


# --- scalar functions -----------------------------------------------------------------------------------------

@numba.njit(**_JIT)
def tanh32(x):
    """tanh in float32 as z P(z²)/Q(z²), z = x clamped to |z| <= 7.9, with P of degree 3 and Q of degree 4: a
    near-minimax rational fit (scripts/fit_rational.py reproduces the coefficients). Error 4.2e-7 at most in
    float32 (tested; 1 − tanh 7.9 = 2.7e-7), i.e. 7 float32 ulp of 1; unlike np.tanh it vectorises. The clamp may
    map NaN to a number: `train` refuses a non-finite h instead of paying for a check per weight."""
    c = np.float32(7.9)
    z = min(max(x, -c), c)
    u = z * z
    p = u * np.float32(1.1161033e-05) + np.float32(0.0029248556)
    p = u * p + np.float32(0.12900542)
    p = u * p + np.float32(0.9999993)
    q = u * np.float32(2.3764878e-07) + np.float32(0.00023506458)
    q = u * q + np.float32(0.02370642)
    q = u * q + np.float32(0.46233606)
    q = u * q + np.float32(1.0)
    return z * p / q


@numba.njit(**_JIT)
def erf32(x):
    """erf in float32 as z P(z²)/Q(z²), z = x clamped to |z| <= 3.8, P of degree 6 and Q of degree 4 (fitted like
    tanh32 by scripts/fit_rational.py; error at most 3e-7, tested). Vectorises, unlike math.erf; NaN stays NaN."""
    c = np.float32(3.8)
    z = min(max(x, -c), c)
    u = z * z
    p = u * np.float32(2.1361073e-08) + np.float32(-2.0209698e-06)
    p = u * p + np.float32(0.00013960793)
    p = u * p + np.float32(0.0034821057)
    p = u * p + np.float32(0.04980723)
    p = u * p + np.float32(0.19392052)
    p = u * p + np.float32(1.128379)
    q = u * np.float32(0.0009127471) + np.float32(0.01387178)
    q = u * q + np.float32(0.112548016)
    q = u * q + np.float32(0.50518805)
    q = u * q + np.float32(1.0)
    return z * p / q if x == x else x


@numba.njit(**_JIT)
def _erfcx(z):
    """erfcx(z) = exp(z²) erfc(z) in float64: directly below z = 26 (erfc > 1e-296 and exp(z²) < 1e294 there), else
    the asymptotic series 1/(z√π) Σ_k (−1)^k (2k−1)!!/(2z²)^k, whose 6th term is < 1e-16 from z = 26 on."""
    if z < 26.0:
        return math.exp(z * z) * math.erfc(z)
    r = 1.0 / (2.0 * z * z)
    s, term = 1.0, 1.0
    for k in range(1, 7):
        term *= -(2 * k - 1) * r
        s += term
    return s / (z * math.sqrt(math.pi))


@numba.njit(**_JIT)
def _output_delta(y, mu, sigma2):
    """ebp_lib.output_delta for one unit, float64: Δ_L = (y/σ) φ(t)/Φ(t), t = yμ/σ, through erfcx."""
    sigma = math.sqrt(sigma2)
    t = y * mu / sigma
    return y / sigma * math.exp(_LOG_SQRT_2_OVER_PI - math.log(_erfcx(-t / math.sqrt(2.0))))


# --- one layer: the update fused with the next step's products ----------------------------------------------

@numba.njit(**_JIT)
def _update_row(h_row, scaled_delta, row, nu, mask_row, masked):
    """h_row += Σ_s scaled_delta[s, row] ν_s (× mask_row), five samples per sweep: their coefficients stay in
    registers and the loop over the row vectorises."""
    batch, width = nu.shape
    for s in range(0, batch, 5):
        c0, n0 = scaled_delta[s, row], nu[s]
        c1, n1 = (scaled_delta[s + 1, row], nu[s + 1]) if s + 1 < batch else (np.float32(0), n0)
        c2, n2 = (scaled_delta[s + 2, row], nu[s + 2]) if s + 2 < batch else (np.float32(0), n0)
        c3, n3 = (scaled_delta[s + 3, row], nu[s + 3]) if s + 3 < batch else (np.float32(0), n0)
        c4, n4 = (scaled_delta[s + 4, row], nu[s + 4]) if s + 4 < batch else (np.float32(0), n0)
        if masked:
            for j in range(width):
                h_row[j] += mask_row[j] * ((c0 * n0[j] + c1 * n1[j]) + (c2 * n2[j] + c3 * n3[j]) + c4 * n4[j])
        else:
            for j in range(width):
                h_row[j] += (c0 * n0[j] + c1 * n1[j]) + (c2 * n2[j] + c3 * n3[j]) + c4 * n4[j]


@numba.njit(**_JIT)
def _refresh_row(h_row, out):
    """out = ⟨W⟩ = tanh h for one row of binary weights."""
    for j in range(h_row.shape[0]):
        out[j] = tanh32(h_row[j])


@numba.njit(**_JIT)
def _layer_pass(h, w_mean, mask, second_mask, store_w_mean, binary, scaled_delta, nu, next_inputs, use_m2_terms,
                moments, lagged=False):
    """One pass over a layer's weights: this step's update fused with the next step's products.

        h_ij += Σ_s scaled_delta_si ν_sj (× mask_ij),   ⟨W⟩_ij = tanh h_ij (binary) or h_ij (real),
        mu_si = Σ_j ⟨W⟩_ij ν'_sj,   m2_terms_si = Σ_j ⟨W⟩_ij² m2_factor'_sj,
        second_si = Σ_j second_mask_ij ⟨v²⟩'_sj          (local layers whose masked weights are absent),

    ' marking `next_inputs`, scaled_delta = Δ/sqrt(N). `scaled_delta` with 0 rows: products only; `next_inputs`
    with 0 rows: update only; use_m2_terms False: no m2_terms (real weights on the image without dropout, where
    m2_factor is 0). Rows go in pairs (i, k): a pair is updated, refreshed and multiplied while it sits in L1
    cache, and each load of ν' serves four multiply-adds, two samples (s, t) at a time; ⟨W⟩ is stored in
    w_mean only if store_w_mean. `lagged` (binary weights, the authors' code of 2015, ebp_lib.lagged_step):
    ⟨W⟩ is refreshed from h before this step's update, so the next step's products see it one step stale.
    """
    nu_next, m2_next, v2_next = next_inputs.nu, next_inputs.m2_factor, next_inputs.v2
    mu, m2_terms, second = moments.mu, moments.m2_terms, moments.second
    units, width = h.shape
    batch, batch_next = scaled_delta.shape[0], nu_next.shape[0]
    masked, masked_second = mask.shape[0] > 0, second_mask.shape[0] > 0
    use_m2_terms = use_m2_terms and batch_next > 0
    if batch <= 1 and batch_next <= 1 and not masked and not lagged:
        _online_pass(h, w_mean, store_w_mean, binary, scaled_delta, nu, nu_next, m2_next, use_m2_terms, mu, m2_terms)
        return
    pair = np.empty((2, width), np.float32)  # ⟨W⟩ of the pair of rows where it is not stored
    for i in range(0, units, 2):
        k = min(i + 1, units - 1)  # the second row (i itself for a last odd row: its products are computed twice)
        for r in range(k - i + 1):
            row = i + r
            if binary and lagged:
                _refresh_row(h[row], w_mean[row] if store_w_mean else pair[r])
            if batch > 0:  # (h[row] stands in for the mask row where there is none: it is not read)
                _update_row(h[row], scaled_delta, row, nu, mask[row] if masked else h[row], masked)
            if binary and not lagged:
                _refresh_row(h[row], w_mean[row] if store_w_mean else pair[r])
        # ⟨W⟩ of the two rows: h itself for real weights
        row_i = h[i] if not binary else (w_mean[i] if store_w_mean else pair[0])
        row_k = h[k] if not binary else (w_mean[k] if store_w_mean else pair[k - i])
        for s in range(0, batch_next, 2):
            t = min(s + 1, batch_next - 1)
            # mu_is = Σ_j ⟨W⟩_ij ν'_sj and m2_is = Σ_j ⟨W⟩_ij² m2_factor'_sj, for rows i, k and samples s, t
            mu_is = mu_it = mu_ks = mu_kt = m2_is = m2_it = m2_ks = m2_kt = np.float32(0)
            if use_m2_terms:
                for j in range(width):
                    x0, x1 = row_i[j], row_k[j]
                    n0, n1, f0, f1 = nu_next[s, j], nu_next[t, j], m2_next[s, j], m2_next[t, j]
                    mu_is += x0 * n0
                    mu_it += x0 * n1
                    mu_ks += x1 * n0
                    mu_kt += x1 * n1
                    x0, x1 = x0 * x0, x1 * x1
                    m2_is += x0 * f0
                    m2_it += x0 * f1
                    m2_ks += x1 * f0
                    m2_kt += x1 * f1
            else:
                for j in range(width):
                    x0, x1, n0, n1 = row_i[j], row_k[j], nu_next[s, j], nu_next[t, j]
                    mu_is += x0 * n0
                    mu_it += x0 * n1
                    mu_ks += x1 * n0
                    mu_kt += x1 * n1
            mu[t, i], mu[t, k], m2_terms[t, i], m2_terms[t, k] = mu_it, mu_kt, m2_it, m2_kt
            mu[s, i], mu[s, k], m2_terms[s, i], m2_terms[s, k] = mu_is, mu_ks, m2_is, m2_ks
            if masked_second:
                for row in range(i, k + 1):
                    for u in range(s, t + 1):
                        acc = np.float32(0)
                        for j in range(width):
                            acc += second_mask[row, j] * v2_next[u, j]
                        second[u, row] = acc + 1


@numba.njit(**_JIT)
def _online_pass(h, w_mean, store_w_mean, binary, scaled_delta, nu, nu_next, m2_next, use_m2_terms, mu, m2_terms):
    """_layer_pass for a dense layer at batch size 1: one loop per row does the update, the refresh and both
    products (one tanh and five flops per weight)."""
    units, width = h.shape
    update, products = scaled_delta.shape[0] > 0, nu_next.shape[0] > 0
    zero_nu = np.zeros(width, np.float32)
    nu0 = nu[0] if update else zero_nu
    nn0 = nu_next[0] if products else zero_nu
    f0 = m2_next[0] if use_m2_terms and products else zero_nu
    for i in range(units):
        a_i = scaled_delta[0, i] if update else np.float32(0)
        hi = h[i]
        acc_mu = acc_m2 = np.float32(0)
        if binary:
            if store_w_mean:  # two copies of the loop: a conditional store inside it stops vectorisation
                mi = w_mean[i]
                for j in range(width):
                    h_ij = hi[j] + a_i * nu0[j]
                    hi[j] = h_ij
                    m_ij = tanh32(h_ij)
                    mi[j] = m_ij
                    acc_mu += m_ij * nn0[j]
                    acc_m2 += m_ij * m_ij * f0[j]
            else:
                for j in range(width):
                    h_ij = hi[j] + a_i * nu0[j]
                    hi[j] = h_ij
                    m_ij = tanh32(h_ij)
                    acc_mu += m_ij * nn0[j]
                    acc_m2 += m_ij * m_ij * f0[j]
        else:
            for j in range(width):
                h_ij = hi[j] + a_i * nu0[j]
                hi[j] = h_ij
                acc_mu += h_ij * nn0[j]
                acc_m2 += h_ij * h_ij * f0[j]
        if products:
            mu[0, i] = acc_mu
            m2_terms[0, i] = acc_m2


@numba.njit(**_JIT)
def _finish_layer(moments, b, normaliser, inv_sqrt_normaliser, v2_in, masked, use_m2_terms, batch, extra):
    """ebp_lib.layer_moments and unit_mean from the products of _layer_pass, for `batch` samples, in place:

        μ = (Σ ⟨W⟩ν + b)/sqrt(N),   σ² = (Σ⟨W²⟩⟨v²⟩ − Σ ⟨W⟩²ν² + 1)/N = (second − m2_terms)/N,   ν = erf(μ/sqrt(2σ²)),

    with second = Σ mask⟨v²⟩ + 1 (per unit for a local layer, else one number per sample, from v2_in), plus
    `extra` (1 for the authors' real-weight variance after the first layer, ebp_lib.authors_variance_term, else 0)."""
    mu, m2_terms, second, sigma2, nu_out = moments.mu, moments.m2_terms, moments.second, moments.sigma2, moments.nu
    units = mu.shape[1]
    for s in range(batch):
        dense_second = np.float32(1) + extra
        if not masked:
            dense_second += v2_in[s].sum()
        for i in range(units):
            second_si = second[s, i] + extra if masked else dense_second
            sigma2_si = (second_si - (m2_terms[s, i] if use_m2_terms else np.float32(0))) / normaliser[i]
            mu_si = (mu[s, i] + b[i]) * inv_sqrt_normaliser[i]
            mu[s, i] = mu_si
            sigma2[s, i] = sigma2_si
            nu_out[s, i] = erf32(mu_si / math.sqrt(np.float32(2) * sigma2_si))


# --- inputs, backward pass, the epoch -------------------------------------------------------------------------

@numba.njit(**_JIT)
def _used_columns(x, order):
    """The columns of x that are not 0 in some image x[order], padded with unused ones to a multiple of 16 (two
    AVX2 vectors: the loops then have no scalar remainder). The first layer's weights on the other inputs
    neither change (their increment is Δ·0) nor count in μ or σ² (their terms carry ν = ⟨v²⟩ = 0), so the
    compiled epoch leaves them out: MNIST has 67 pixels that are 0 in every standardised image."""
    width = x.shape[1]
    used = np.zeros(width, np.bool_)
    for r in order:
        for j in range(width):
            if x[r, j] != 0:
                used[j] = True
    padding = -used.sum() % 16
    for j in range(width):
        if padding > 0 and not used[j]:
            used[j] = True
            padding -= 1
    return np.flatnonzero(used)


@numba.njit(**_JIT)
def _load_inputs(out, source, columns, image, net, rng):
    """The Inputs of one layer for one step into `out`, from the `columns` of `source` (images or the previous
    layer's ν): ν, ⟨v²⟩, m2_factor = ν² (binary) or ν² − ⟨v²⟩ (real); sampled dropout draws its masks here, for
    every column of `source` (used or not) in the reference's order (ebp_lib.forward)."""
    batch, width = source.shape
    kept = np.ones(width, np.float32)
    for s in range(batch):
        if net.dropout == SAMPLED:
            for j in range(width):
                kept[j] = np.float32(1) if rng.random() < net.keep else np.float32(0)
        for k in range(columns.shape[0]):
            j = columns[k]
            v = np.float32(source[s, j])
            v2 = v * v if image else np.float32(1)
            if net.dropout == SAMPLED:
                v, v2 = v * kept[j], v2 * kept[j]
            nu2 = v * v
            if net.dropout == ANALYTIC and image:
                nu2 = net.analytic * nu2
            out.kept[s, k] = kept[j]
            out.nu[s, k] = v
            out.v2[s, k] = v2
            out.m2_factor[s, k] = nu2 if net.binary else nu2 - v2


@numba.njit(**_JIT)
def _back_product(d, m):
    """Σ_i d_si m_ij (Δ·⟨W⟩, the product of ebp_lib.backward), eight rows of m per sweep: each row of the result
    is loaded and stored once per eight rows (for a few rows of d, BLAS would first pack all of m)."""
    batch, units = d.shape
    back = np.zeros((batch, m.shape[1]), np.float32)
    for i in range(0, units - 7, 8):
        m0, m1, m2, m3, m4, m5, m6, m7 = m[i], m[i + 1], m[i + 2], m[i + 3], m[i + 4], m[i + 5], m[i + 6], m[i + 7]
        for s in range(batch):
            c0, c1, c2, c3 = d[s, i], d[s, i + 1], d[s, i + 2], d[s, i + 3]
            c4, c5, c6, c7 = d[s, i + 4], d[s, i + 5], d[s, i + 6], d[s, i + 7]
            bs = back[s]
            for j in range(m.shape[1]):
                bs[j] += (c0 * m0[j] + c1 * m1[j] + c2 * m2[j] + c3 * m3[j]) + \
                         (c4 * m4[j] + c5 * m5[j] + c6 * m6[j] + c7 * m7[j])
    for i in range(units - units % 8, units):
        for s in range(batch):
            c0, bs, m0 = d[s, i], back[s], m[i]
            for j in range(m.shape[1]):
                bs[j] += c0 * m0[j]
    return back


@numba.njit(**_JIT)
def _updated_back(d, nu, mask):
    """Σ_i d_si δh_ij with δh_ij = Σ_t d_ti ν_tj (× mask_ij): what back-propagating d = Δ/sqrt(N) through the
    updated ⟨W⟩ + δh adds to _back_product (the authors' real-weight code, ebp_lib.backward). Unmasked, it is
    (d dᵀ) ν, a batch×batch product; masked, δh is formed first."""
    batch, units = d.shape
    if mask.shape[0] == 0:
        gram = np.zeros((batch, batch), np.float32)
        for s in range(batch):
            for t in range(batch):
                acc = np.float32(0)
                for i in range(units):
                    acc += d[s, i] * d[t, i]
                gram[s, t] = acc
        out = np.zeros((batch, nu.shape[1]), np.float32)
        for s in range(batch):
            for t in range(batch):
                for j in range(nu.shape[1]):
                    out[s, j] += gram[s, t] * nu[t, j]
        return out
    increment = np.zeros((units, nu.shape[1]), np.float32)
    for i in range(units):
        for t in range(batch):
            for j in range(nu.shape[1]):
                increment[i, j] += d[t, i] * nu[t, j] * mask[i, j]
    return _back_product(d, increment)


@numba.njit(**_JIT)
def _backward(y, rows, net, moments, inputs, deltas) -> int:
    """ebp_lib.backward for one minibatch (the training images `rows`), into `deltas`: Δ_L in float64
    (_output_delta), Δ_{l−1} = 2 N(0|μ,σ²) Σ_j ⟨W_j·⟩ Δ_j/sqrt(N_j) in float32, times the dropout mask of layer
    l's inputs; through the updated ⟨W⟩ for the authors' real-weight code (_updated_back). Returns the first layer
    with a non-finite Δ, or −1."""
    last, batch = len(net.h) - 1, len(rows)
    for s in range(batch):
        for i in range(net.h[last].shape[0]):
            deltas[last][s, i] = _output_delta(np.float64(y[rows[s], i]), np.float64(moments[last].mu[s, i]),
                                               np.float64(moments[last].sigma2[s, i]))
    for l in range(last, 0, -1):
        scaled = deltas[l][:batch] * net.inv_sqrt_normaliser[l]
        back = _back_product(scaled, net.w_mean[l])
        if net.through_updated:
            back += _updated_back(scaled, inputs[l].nu[:batch], net.mask[l])
        # float32 throughout (expf, not exp). The moments are read through the lists inside the loop: hoisted out,
        # LLVM vectorises the exp and rounds differently, and the committed runs must stay bit-reproducible.
        for s in range(batch):
            for i in range(back.shape[1]):
                mean, var = moments[l - 1].mu[s, i], moments[l - 1].sigma2[s, i]
                density = math.exp(np.float32(-0.5) * mean * mean / var) / math.sqrt(np.float32(2 * math.pi) * var)
                deltas[l - 1][s, i] = np.float32(2) * density * back[s, i] * inputs[l].kept[s, i]
    for l in range(last + 1):
        if not np.isfinite(deltas[l][:batch]).all():
            return l
    return -1


@numba.njit(**_JIT)
def _first_rows(inputs, batch):
    """The Inputs of the first `batch` samples (views)."""
    return Inputs(inputs.nu[:batch], inputs.v2[:batch], inputs.m2_factor[:batch], inputs.kept[:batch])


@numba.njit(**_JIT)
def _train_steps(x, y, order, columns, batch_size, net, rng):
    """EBP over x[order] in minibatches (the steps of ebp_train.train_epoch) on the working copy `net`, in float32
    except Δ_L (float64); the first layer sees the image's `columns` only (see _used_columns).

    Pipelined: step t's update of layer l is fused with step t+1's products of layer l (_layer_pass), so every
    weight is read once per step. Returns (steps done, layer of a non-finite Δ or −1); on a non-finite Δ the
    step stops before its update, so the parameters are those after the last finite step."""
    n_layers, n = len(net.h), len(order)
    bmax = min(batch_size, n)
    empty = np.zeros((0, 0), np.float32)
    # the inputs of layer l for the current and the next step: inputs[buffer * n_layers + l]
    inputs = [Inputs(np.ones((bmax, net.h[l % n_layers].shape[1]), np.float32),
                     np.ones((bmax, net.h[l % n_layers].shape[1]), np.float32),
                     np.ones((bmax, net.h[l % n_layers].shape[1]), np.float32),
                     np.ones((bmax, net.h[l % n_layers].shape[1]), np.float32)) for l in range(2 * n_layers)]
    moments = [Moments(np.zeros((bmax, h.shape[0]), np.float32), np.zeros((bmax, h.shape[0]), np.float32),
                       np.zeros((bmax, h.shape[0]), np.float32), np.zeros((bmax, h.shape[0]), np.float32),
                       np.zeros((bmax, h.shape[0]), np.float32)) for h in net.h]
    deltas = [np.zeros((bmax, h.shape[0]), np.float32) for h in net.h]
    sources = [columns]  # the columns of its input that each layer reads: all of them after the first
    for l in range(1, n_layers):
        sources.append(np.arange(net.h[l].shape[1]))
    n_steps = (n + batch_size - 1) // batch_size
    cur = 0
    for step in range(-1, n_steps):
        if step >= 0:  # 1. this step's Δ, with ⟨W⟩ from before its update
            start = step * batch_size
            batch = min(batch_size, n - start)
            bad = _backward(y, order[start:start + batch], net, moments, inputs[cur * n_layers:(cur + 1) * n_layers],
                            deltas)
            if bad >= 0:
                return step, bad
        # 2. the update of every layer, each fused with the next step's products
        nxt = 1 - cur if step >= 0 else cur
        start_next = (step + 1) * batch_size
        batch_next = min(batch_size, n - start_next) if step + 1 < n_steps else 0
        if batch_next:
            _load_inputs(inputs[nxt * n_layers], x[order[start_next:start_next + batch_next]], columns, True, net,
                         rng)
        for l in range(n_layers):
            k, kn = cur * n_layers + l, nxt * n_layers + l
            if step >= 0:
                scaled_delta = deltas[l][:batch] * net.inv_sqrt_normaliser[l]
                net.b[l] += scaled_delta.sum(axis=0)
                nu = inputs[k].nu[:batch]
            else:
                scaled_delta, nu = empty, empty
            # m2_terms = Σ ⟨W⟩²·m2_factor is 0 only for real weights on the image without dropout (ν² − ⟨v²⟩ = 0)
            use_m2_terms = net.binary or net.dropout != NO_DROPOUT or l > 0
            _layer_pass(net.h[l], net.w_mean[l], net.mask[l], net.second_mask[l], net.binary and l > 0, net.binary,
                        scaled_delta, nu, _first_rows(inputs[kn], batch_next), use_m2_terms, moments[l], net.lagged)
            if batch_next:
                extra = np.float32(1) if net.extra_variance and l > 0 else np.float32(0)
                _finish_layer(moments[l], net.b[l], net.normaliser[l], net.inv_sqrt_normaliser[l], inputs[kn].v2,
                              net.second_mask[l].shape[0] > 0, use_m2_terms, batch_next, extra)
                if l + 1 < n_layers:
                    _load_inputs(inputs[kn + 1], moments[l].nu[:batch_next], sources[l + 1], False, net, rng)
        cur = nxt
    return n_steps, -1


# --- the engine's evaluation of EBP-P: float32 matrix products (numpy, BLAS; ebp_train.float32_outputs) --------

def float32_weight_moments(net32) -> list:
    """(⟨W⟩, ⟨W⟩², mask) of every layer of a float32 network, for float32_ebp_p (the mask only where masked weights
    are absent: held ones keep ⟨W²⟩ = 1 in σ²)."""
    out = []
    for layer in net32.layers:
        w_mean = np.tanh(layer.h) if net32.weights == "binary" else layer.h
        absent = layer.mask is not None and not layer.held
        out.append((w_mean, w_mean * w_mean, layer.mask.astype(np.float32) if absent else None))
    return out


def float32_ebp_p(net32, moments: list, x) -> np.ndarray:
    """ebp_lib.output_ebp_p in float32 (the evaluation of ebp_train.float32_outputs), from the weight moments of
    float32_weight_moments, with ⟨W²⟩ = 1 (binary) or ⟨W⟩² + 1 (real) folded into σ² as the training kernels fold
    it (layer_moments' σ² rearranged):

        σ²·N = Σ mask⟨v²⟩ + 1 − Σ ⟨W⟩²·m2_factor,   m2_factor = ν² (binary) or ν² − ⟨v²⟩ (real)."""
    nu = x.astype(np.float32)
    v2 = nu * nu
    nu2 = net32.analytic_factor * v2 if net32.dropout == "analytic" else v2
    extra_variance = net32.real_update_parts.extra_variance
    for k, (layer, (w_mean, w_mean2, mask)) in enumerate(zip(net32.layers, moments)):
        if net32.dropout == "sampled":  # test time: the weights scaled by p
            nu, v2 = net32.keep * nu, net32.keep ** 2 * (np.ones_like(nu) if v2 is None else v2)
            nu2 = nu * nu
        if v2 is None:  # ±1 hidden units: ⟨v²⟩ = 1
            second, m2_factor = layer.normaliser, (nu2 if net32.weights == "binary" else nu2 - 1.0)
        else:
            second = (v2 @ mask.T if mask is not None else v2.sum(axis=1, keepdims=True)) + 1.0
            m2_factor = nu2 if net32.weights == "binary" else nu2 - v2
        mu = (nu @ w_mean.T + layer.b) / np.sqrt(layer.normaliser)
        sigma2 = (second - m2_factor @ w_mean2.T) / layer.normaliser
        if extra_variance and k > 0:
            sigma2 = sigma2 + 1.0 / layer.normaliser  # ebp_lib.authors_variance_term
        nu, v2 = special.erf(mu / np.sqrt(2.0 * sigma2)), None  # ebp_lib.unit_mean
        nu2 = nu * nu
    return nu


# --- the engine's entry points: train_step and train_steps (ebp_train.ENGINES["fast"]) ----------------------------

def working_copy(net, columns) -> FastNet:
    """The float32 copy of the ebp_lib.Network `net` that the compiled epoch runs on; the first layer's h and mask
    keep only the image's `columns`."""
    hs = [np.array(layer.h, dtype=FAST_DTYPE, order="C") for layer in net.layers]
    masks = [np.zeros((0, 0), FAST_DTYPE) if layer.mask is None else layer.mask.astype(FAST_DTYPE)
             for layer in net.layers]
    hs[0] = np.ascontiguousarray(hs[0][:, columns])
    if masks[0].size:
        masks[0] = np.ascontiguousarray(masks[0][:, columns])
    no_mask = np.zeros((0, 0), FAST_DTYPE)
    return FastNet(
        h=List(hs),
        w_mean=List([h if net.weights == "real" else np.empty_like(h) for h in hs]),  # real weights: ⟨W⟩ = h itself
        b=List([layer.b.astype(FAST_DTYPE) for layer in net.layers]),
        mask=List(masks),
        second_mask=List([no_mask if layer.held else mask for layer, mask in zip(net.layers, masks)]),
        normaliser=List([layer.normaliser.astype(FAST_DTYPE) for layer in net.layers]),
        inv_sqrt_normaliser=List([(1.0 / np.sqrt(layer.normaliser)).astype(FAST_DTYPE) for layer in net.layers]),
        binary=net.weights == "binary", dropout=DROPOUT_CODES[net.dropout], keep=float(net.keep),
        analytic=FAST_DTYPE(net.analytic_factor), through_updated=net.real_update_parts.through_updated,
        extra_variance=net.real_update_parts.extra_variance, lagged=net.real_update_parts.lagged)



def _nonfinite(hs, bs) -> list[str]:
    """The arrays that hold NaN/inf, e.g. ["b of layer 2"], of per-layer h and b."""
    return [f"{name} of layer {k + 1}" for k, (h, b) in enumerate(zip(hs, bs))
            for name, values in (("h", h), ("b", b)) if not np.isfinite(values).all()]


def train_steps(net, x, y, order, batch_size: int, rng, step_name) -> None:
    """EBP steps over x[order] in minibatches of `batch_size` (ebp_train.train_steps), on a float32 working copy of the
    ebp_lib.Network `net` whose h and b are then written back (unless nothing was done); `rng` draws the sampled
    dropout masks (it may be None without sampled dropout). Raises ebp_lib.backward's FloatingPointError for a
    non-finite Δ. The compiled loops do not check h and b weight by weight: ebp_train.train_steps refuses a NaN/inf
    parameter before the call (ebp_lib.check_finite_parameters), and one after it (an overflow) leaves the network
    as it was.
    step_name(k) names step k in the messages."""
    def where(step):
        return "" if step_name(step) is None else f" at step {step_name(step)}"

    columns = _used_columns(x, order)
    work = working_copy(net, columns)
    rng = np.random.default_rng(0) if rng is None else rng  # a Generator for the compiled signature; not drawn from
    steps, bad_layer = _train_steps(x, y, order, columns, batch_size, work, rng)
    overflowed = _nonfinite(work.h, work.b)
    if overflowed:
        raise FloatingPointError(
            f"{', '.join(overflowed)} overflowed to NaN/inf during steps 0-{steps - 1} of this call; the network is "
            f"left as it was before the call")
    if steps:  # a failure at the first step leaves the network exactly as it was
        for k, (layer, h, b) in enumerate(zip(net.layers, work.h, work.b)):
            if k == 0:  # the unused columns are unchanged (rounded to float32 like the rest)
                full = layer.h.astype(FAST_DTYPE)
                full[:, columns] = h
                h = full
            layer.h[...] = h
            layer.b[...] = b
    if bad_layer >= 0:
        raise FloatingPointError(
            f"non-finite Δ in layer {bad_layer + 1}{where(steps)}: the forward moments are not finite while every "
            f"parameter is (the input images hold NaN/inf, or an overflow); training stopped before the update, "
            f"so the parameters are those of the last finite step")


def train_step(net, x, y, rng, step) -> None:
    """One EBP step on the whole minibatch x (ebp_train.train_step); `step` names it in the messages."""
    train_steps(net, x, y, np.arange(len(x)), len(x), rng, lambda k: step)
