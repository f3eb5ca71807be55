"""ebp_analysis's helpers for looking at trained networks, each against an exact answer (the older helpers,
learning_curve, reliability, class_log_probabilities, receptive_field, are tested in test_checks.py)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from scipy import special

import ebp_analysis as analysis
import ebp_lib as ebp


def test_occlusion_map_of_a_linear_score_is_the_mean_of_its_patch_sums():
    """For score(x) = w·x and fill 0, filling a square drops the score by Σ_square w_j x_j exactly: patch 1
    gives w ⊙ x, a larger patch the mean over the squares that contain each pixel (brute force here)."""
    rng = np.random.default_rng(0)
    side, w, x = 6, rng.standard_normal(36), rng.standard_normal(36)
    score = lambda images: images @ w                                     # noqa: E731
    np.testing.assert_allclose(analysis.occlusion_map(score, x, side, 1), (w * x).reshape(side, side), atol=1e-12)
    patch, contribution = 3, (w * x).reshape(side, side)
    expected = np.zeros((side, side))
    for i in range(side):
        for j in range(side):
            drops = [contribution[a:a + patch, c:c + patch].sum()
                     for a in range(side - patch + 1) for c in range(side - patch + 1)
                     if a <= i < a + patch and c <= j < c + patch]
            expected[i, j] = np.mean(drops)
    np.testing.assert_allclose(analysis.occlusion_map(score, x, side, patch), expected, atol=1e-12)
    # a fill other than 0 replaces the pixels by it: the drop is Σ_square w_j (x_j − fill)
    np.testing.assert_allclose(analysis.occlusion_map(score, x, side, 1, fill=0.5),
                               (w * (x - 0.5)).reshape(side, side), atol=1e-12)
    fill = rng.standard_normal(36)                                       # an image as fill: pixel by pixel
    np.testing.assert_allclose(analysis.occlusion_map(score, x, side, 1, fill=fill),
                               (w * (x - fill)).reshape(side, side), atol=1e-12)


def test_occlusion_map_sees_only_the_pixels_a_network_is_connected_to():
    """A block-3 local layer on a 6x6 image whose output units see only hidden unit 0: occluding pixels
    outside that unit's 3x3 block leaves every output exactly unchanged (to rounding)."""
    net = ebp.init_network([("local", 3), 2], "binary", seed=0, input_side=6)
    net.layers[1].h[:, 1:] = 0.0                                         # tanh 0 = 0: only hidden unit 0 counts
    net.layers[0].h *= 5.0
    x = np.random.default_rng(1).standard_normal(36)
    score = lambda images: ebp.forward(net, images).mu[-1][:, 0]         # noqa: E731
    sensitivity = analysis.occlusion_map(score, x, 6, 1)
    field = analysis.receptive_field(net, 0, 0)
    # 0 up to rounding (x alone and the batch of occluded copies go through different BLAS kernels)
    assert np.abs(sensitivity[~field]).max() < 1e-12 and np.abs(sensitivity[field]).min() > 1e-6


def test_occlusion_map_refuses_a_wrong_image_or_patch():
    with pytest.raises(ValueError, match="side²"):
        analysis.occlusion_map(lambda images: images.sum(axis=1), np.zeros(30), 6, 2)
    with pytest.raises(ValueError, match="patch"):
        analysis.occlusion_map(lambda images: images.sum(axis=1), np.zeros(36), 6, 7)


def test_outline_surrounds_the_field_in_imshow_coordinates():
    net = ebp.init_network([("local", 3), 4], seed=0, input_side=6)
    field = analysis.receptive_field(net, 0, 5)                          # unit (1, 1) of the 4x4 map: rows 1-3, cols 1-3
    fig, ax = plt.subplots()
    box = analysis.outline(ax, field, edgecolor="C1", label="unit (1, 1)")
    assert box.get_xy() == (0.5, 0.5) and box.get_width() == 3 and box.get_height() == 3
    assert box in ax.patches and box.get_label() == "unit (1, 1)"
    with pytest.raises(ValueError, match="no True pixel"):
        analysis.outline(ax, np.zeros((6, 6), dtype=bool))
    plt.close(fig)


def test_paired_rates_counts_the_discordant_items_and_gives_their_standard_error():
    """Hand-made: 10 items, a holds on 0-3, b on 2-6: only_a = 2 (0, 1), only_b = 3 (4, 5, 6); d = a − b has
    mean −0.1 and population variance 0.5 − 0.01, so se = sqrt(0.49 / 10); McNemar is binomtest(2, 5, 1/2)."""
    from scipy.stats import binomtest

    a, b = np.zeros(10, bool), np.zeros(10, bool)
    a[:4], b[2:7] = True, True
    r = analysis.paired_rates(a, b)
    assert (r["only_a"], r["only_b"], r["n"]) == (2, 3, 10)
    assert r["difference"] == pytest.approx(-0.1, abs=1e-12)
    assert r["se"] == pytest.approx(np.sqrt(0.49 / 10), rel=1e-12)
    assert r["p_value"] == pytest.approx(binomtest(2, 5, 0.5).pvalue, rel=1e-12)
    same = analysis.paired_rates(a, a.copy())                  # identical readings: no evidence, no spread
    assert same["se"] == 0 and same["p_value"] == 1.0


def test_paired_standard_error_is_the_spread_of_the_difference_over_repeated_test_sets():
    """Two correlated classifiers (they share 9 in 10 errors) on test sets of 2,000 images drawn again and again:
    the standard deviation of (error A − error B) over 2,000 test sets matches the paired se within 10%, and is
    several times smaller than the unpaired sqrt(pA(1−pA)/n + pB(1−pB)/n)."""
    rng, n = np.random.default_rng(0), 2000
    differences, ses = [], []
    for _ in range(2000):
        shared = rng.random(n) < 0.10
        a = shared | (rng.random(n) < 0.01)
        b = shared | (rng.random(n) < 0.015)
        r = analysis.paired_rates(a, b)
        differences.append(r["difference"])
        ses.append(r["se"])
    assert np.std(differences) == pytest.approx(np.mean(ses), rel=0.10)
    unpaired = np.sqrt(2 * 0.11 * 0.89 / n)
    assert np.mean(ses) < unpaired / 2


def test_paired_rates_refuses_vectors_that_are_not_one_boolean_per_item():
    with pytest.raises(ValueError, match="boolean vectors of one length"):
        analysis.paired_rates(np.zeros(3, bool), np.zeros(4, bool))
    with pytest.raises(ValueError, match="boolean"):
        analysis.paired_rates(np.array([0, 1]), np.array([1, 1]))


def test_sampled_mean_outside_rate_matches_simulation_and_the_gaussian_limit():
    """Exact null rate against 400,000 simulated Monte Carlo averages per mean (binomial se of a rate near
    0.005: 1.1e-4, so 5e-4 is over 4 se), and for ν = 0 with many draws the Gaussian 2Φ(−3) = 0.0027 within 5e-4.
    Near ν = ±1 the draws are discrete on the scale of the se and the rate is not 0.0027: for ν = 0.999 and
    n = 500, 3 se = 0.006 and two −1 draws (Poisson mean 0.25) already move the average by 0.007, so the rate is
    1 − e^{−0.25}(1 + 0.25) = 0.0265."""
    from scipy.stats import norm

    rng, n = np.random.default_rng(1), 500
    nus = np.array([0.0, 0.6, -0.95, 0.999])
    exact = analysis.sampled_mean_outside_rate(nus, n)
    for nu, rate in zip(nus, exact):
        means = 2 * rng.binomial(n, (1 + nu) / 2, size=400_000) / n - 1
        se = max(np.sqrt((1 - nu ** 2) / n), 1 / n)
        assert abs(np.mean(np.abs(means - nu) > 3 * se) - rate) < 5e-4, nu
    assert analysis.sampled_mean_outside_rate(np.array([0.0]), 20_000)[0] == pytest.approx(2 * norm.cdf(-3), abs=5e-4)
    assert exact[-1] == pytest.approx(1 - np.exp(-0.25) * 1.25, rel=0.01)
    with pytest.raises(ValueError, match="means in"):
        analysis.sampled_mean_outside_rate(np.array([1.5]), n)


# ----- probabilistic backpropagation's update (assumed density filtering) against exact answers -----

def test_adf_update_is_the_conjugate_update_for_a_gaussian_observation():
    """For y = c W + ε, ε ~ N(0, s²), ln Z = ln N(y | c m, s² + c² v) and ADF is exact: after every observation
    1/v = 1/v0 + Σ c²/s² and m = v (m0/v0 + Σ c y/s²), the conjugate (Kalman) update computed by hand here."""
    rng = np.random.default_rng(1)
    c, y, s2 = rng.normal(0, 1.5, 12), rng.normal(0, 2, 12), 0.7
    m, v = 0.3, 2.0
    for n in range(len(c)):
        big_s, r = s2 + c[n] ** 2 * v, y[n] - c[n] * m
        d_m, d_v = c[n] * r / big_s, -c[n] ** 2 / (2 * big_s) + c[n] ** 2 * r ** 2 / (2 * big_s ** 2)
        m, v = analysis.adf_gaussian_update(m, v, d_m, d_v)
        precision = 1 / 2.0 + np.sum(c[:n + 1] ** 2) / s2
        assert v == pytest.approx(1 / precision, rel=1e-12)
        assert m == pytest.approx((0.3 / 2.0 + np.sum(c[:n + 1] * y[:n + 1]) / s2) / precision, rel=1e-10)


def test_probit_evidence_derivatives_are_those_of_ln_z():
    """Central differences of ln Z = ln Φ(y μ/σ), μ = offset + Σ m c, σ² = noise + Σ v c², in every m_i, v_i."""
    rng = np.random.default_rng(2)
    m, v, c = rng.normal(0, 1, 4), rng.uniform(0.2, 2, 4), rng.normal(0, 1, 4)
    log_z = lambda m, v: special.log_ndtr(-(0.4 + m @ c) / np.sqrt(0.3 + v @ c ** 2))   # noqa: E731  (y = −1)
    d_m, d_v = analysis.probit_evidence_derivatives(m, v, c, -1, offset=0.4, noise_var=0.3)
    eye, eps = np.eye(4), 1e-6
    np.testing.assert_allclose(d_m, [(log_z(m + eps * e, v) - log_z(m - eps * e, v)) / (2 * eps) for e in eye],
                               rtol=1e-6)
    np.testing.assert_allclose(d_v, [(log_z(m, v + eps * e) - log_z(m, v - eps * e)) / (2 * eps) for e in eye],
                               rtol=1e-6)


def test_one_probit_step_of_adf_is_exact_bayes_and_later_steps_are_not():
    """One observation: ADF matches the tilted distribution's mean and variance, so PBP's step equals the exact
    posterior's moments (quadrature); after many informative observations the exact posterior is not Gaussian
    and ADF's variance differs from it (here by some 25%), and unlike ADF's it need not shrink at every step."""
    rng = np.random.default_rng(3)
    c, y = rng.normal(0, 1, 40), rng.choice([-1, 1], 40)
    offset, noise = rng.normal(0, 0.5, 40), rng.uniform(0.2, 1.0, 40)
    exact = analysis.exact_one_weight_posterior(c, y, 0.5, 1.0, offset, noise)
    means, variances = analysis.assumed_density_filter(c[:, None], y, 0.5, 1.0, offset, noise)
    assert means[1, 0] == pytest.approx(exact["mean"][1], abs=1e-8)
    assert variances[1, 0] == pytest.approx(exact["var"][1], abs=1e-8)
    assert 0.02 < abs(variances[-1, 0] / exact["var"][-1] - 1) < 0.5
    assert np.all(np.diff(variances[:, 0]) < 0)          # an ADF probit step always narrows the factor ...
    assert np.any(np.diff(exact["var"]) > 0)              # ... while a surprising label can widen the exact one


def test_ebp_is_adf_with_the_variance_frozen_at_one():
    """With update_variance=False and v = 1, the step of every weight mean of a unit without hidden layers (and
    of its bias, an input 1 with variance 1) is EBP's: ebp.increments and the bias change of ebp.update."""
    rng = np.random.default_rng(4)
    net = ebp.init_network([3], "real", seed=0, input_side=3, init_scale=3.0)     # 9 inputs, N = 10
    net.layers[0].b[:] = rng.normal(0, 1, 3)
    h0, b0 = net.layers[0].h.copy(), net.layers[0].b.copy()
    x, y = rng.normal(0, 1, (1, 9)), np.array([[-1.0, 1.0, -1.0]])
    f = ebp.forward(net, x)
    deltas = ebp.backward(net, f, y)
    increment = ebp.increments(net, f, deltas)[0]
    ebp.update(net, f, deltas)
    c = np.append(x[0], 1.0)[None, :] / np.sqrt(10.0)
    for k in range(3):
        means, variances = analysis.assumed_density_filter(c, y[:, k], np.append(h0[k], b0[k]), 1.0,
                                                           update_variance=False)
        np.testing.assert_allclose(means[1, :9] - means[0, :9], increment[k], rtol=1e-10, atol=1e-14)
        assert means[1, 9] - means[0, 9] == pytest.approx(net.layers[0].b[k] - b0[k], rel=1e-10)
        assert np.all(variances == 1.0)


def test_the_variance_helpers_name_bad_input():
    with pytest.raises(ValueError, match="label y of ±1"):
        analysis.probit_evidence_derivatives([0.0], [1.0], [1.0], 0)
    with pytest.raises(ValueError, match="one label, offset and noise variance per row"):
        analysis.assumed_density_filter(np.ones((3, 1)), [1, -1], 0.0, 1.0)
    with pytest.raises(ValueError, match="noise_var > 0"):
        analysis.exact_one_weight_posterior([1.0], [1], 0.0, 1.0, [0.0], [0.0])
    with pytest.raises(ValueError, match="non-positive"):
        analysis.adf_gaussian_update(0.0, 1.0, 2.0, 0.0)
