"""The references of ebp_checks and the notebook helpers of ebp_analysis: each against an exact answer or an
independent computation (the tests of ebp_lib itself, which use these references, are in test_engine.py)."""
import numpy as np
import pytest

import ebp_analysis as analysis
import ebp_checks as checks
import ebp_data
import ebp_lib as ebp
import ebp_train


def test_pm1_sum_distribution_and_exact_sign_mean_against_sampling():
    rng = np.random.default_rng(0)
    a, c = rng.uniform(-0.9, 0.9, (3, 7)), np.array([0.3, -1.2, 0.0])
    dist = checks.pm1_sum_distribution(a)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(dist @ (2.0 * np.arange(8) - 7), a.sum(axis=1), rtol=1e-12)  # E S = Σ a
    n = 400_000
    s = np.where(rng.random((n, 3, 7)) < 0.5 * (1 + a), 1.0, -1.0).sum(axis=2)
    sampled = np.sign(s + c + rng.standard_normal((n, 3))).mean(axis=0)
    np.testing.assert_allclose(checks.exact_sign_mean_pm1(a, c), sampled, atol=5 / np.sqrt(n))


def test_marginal_natural_parameters_of_a_product_distribution_are_its_own():
    """For log q = Σ h_i W_i (independent weights) the marginal-matching h is h itself."""
    h = np.array([0.4, -1.1, 2.0])
    configs = checks.binary_configurations(3)
    assert configs.shape == (8, 3) and len({tuple(row) for row in configs}) == 8
    np.testing.assert_allclose(checks.marginal_natural_parameters(configs @ h, configs), h, rtol=1e-12)


def test_relative_error():
    assert checks.relative_error([3.0, 4.0], [0.0, 4.0]) == pytest.approx(3.0 / 4.0)   # ‖(3, 0)‖ / ‖(0, 4)‖


def small_data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    x = rng.standard_normal((n, 16)) + labels[:, None]
    y = ebp_data.one_vs_all(labels, 3)
    return ebp_data.Dataset("tiny", "none", x, y, labels, x[:40], y[:40], labels[:40])


@pytest.mark.parametrize("eval_every", [7, 12])  # records inside epochs at multiples of 7, or only at their ends
def test_learning_curve_trains_as_train_epoch_and_records_where_asked(eval_every):
    data = small_data()
    net, same = (ebp.init_network([6, 3], "binary", seed=1, input_side=4, dropout="sampled") for _ in range(2))
    curve = analysis.learning_curve(net, data, 2, batch_size=10, seed=3, eval_every=eval_every, n_test=40,
                                    engine="reference")
    rng = np.random.default_rng(3)
    for epoch in range(2):
        ebp_train.train_epoch(same, data.x_train, data.y_train, 10, rng, epoch, engine="reference")
    for a, b in zip(net.layers, same.layers):  # the same steps and random draws, in the same order
        np.testing.assert_array_equal(a.h, b.h)
    steps = sorted({k for k in range(0, 25, eval_every)} | {12, 24})
    assert [p["step"] for p in curve] == steps
    assert curve[-1]["epoch"] == 2.0 and curve[-1]["ebp_p"] == ebp_train.evaluate(net, data.x_test[:40], data.labels_test[:40],
                                                                           engine="reference")["ebp_p"]


def test_learning_curve_with_the_fast_engine_follows_the_reference():
    data = small_data()
    nets = {e: ebp.init_network([6, 3], "real", seed=1, input_side=4) for e in ebp_train.ENGINES}
    for engine, net in nets.items():
        analysis.learning_curve(net, data, 2, batch_size=5, seed=3, eval_every=10, n_test=40, engine=engine)
    for a, b in zip(nets["fast"].layers, nets["reference"].layers):
        assert np.abs(a.h - b.h).max() <= 1e-4 * np.abs(b.h).max()


def test_receptive_fields_of_stacked_local_layers():
    net = ebp.init_network([("local", 3), ("local", 2), 4], seed=0, input_side=6)
    first = analysis.receptive_field(net, 0, 0)                 # a 3x3 block in the corner
    assert first.sum() == 9 and first[:3, :3].all()
    second = analysis.receptive_field(net, 1, 0)                # 2x2 units of 3x3 blocks: a 4x4 square
    assert second.sum() == 16 and second[:4, :4].all()
    assert analysis.receptive_field(net, 2, 0).all()            # the dense output layer sees everything
    image = analysis.weights_as_image(net, 0, 0)
    assert np.isnan(image).sum() == 36 - 9 and np.allclose(image[:3, :3], np.tanh(net.layers[0].h[0][first.ravel()])
                                                           .reshape(3, 3))


def test_reliability_of_a_calibrated_and_an_overconfident_forecaster():
    rng = np.random.default_rng(0)
    confidence = rng.random(200_000)
    calibrated = analysis.reliability(confidence, rng.random(200_000) < confidence)
    assert calibrated["count"].sum() == 200_000 and calibrated["ece"] < 0.01
    overconfident = analysis.reliability(np.full(1000, 0.95), np.arange(1000) < 500)   # says 95%, right half the time
    assert overconfident["ece"] == pytest.approx(0.45)


def test_class_probabilities_and_scaled_posterior():
    mu, sigma2 = np.array([[2.0, -1.0, 40.0]]), np.array([[1.0, 2.0, 1.0]])
    p = np.exp(analysis.class_log_probabilities(mu, sigma2))
    assert p.sum() == pytest.approx(1.0) and p.argmax() == 2    # finite where ν rounds to 1
    net = ebp.init_network([5, 3], "binary", seed=0, input_side=3)
    x = np.random.default_rng(1).standard_normal((4, 9))
    sharper = analysis.with_scaled_h(net, 3.0)
    np.testing.assert_array_equal(ebp.output_ebp_d(sharper, x), ebp.output_ebp_d(net, x))   # signs kept
    np.testing.assert_array_equal(sharper.layers[0].h, 3.0 * net.layers[0].h)


@pytest.mark.parametrize("weights", ["binary", "real"])
def test_dropout_mask_moments_against_sampled_masks_and_weights(weights):
    """The closed forms of notebook 07 against Monte Carlo over masks and weights (monte_carlo_layer_inputs),
    and the weight-scaled test network against Monte Carlo over the weights with input p·x."""
    rng = np.random.default_rng(0)
    layer = ebp.Layer(rng.normal(0, 1.5, (3, 40)), np.array([0.5, -1.0, 0.0]))
    x, keep, n = rng.standard_normal(40), 0.8, 200_000
    mu, sigma2_masks, sigma2_test = checks.dropout_mask_moments(layer, weights, x, keep)
    masks = (rng.random((n, 40)) < keep) * x
    mean_mc, var_mc = checks.monte_carlo_layer_inputs(layer, weights, masks, rng)
    assert checks.within_standard_errors(mean_mc, var_mc, mu, sigma2_masks, n)
    assert not checks.within_standard_errors(mean_mc, var_mc, mu, sigma2_test, n)   # the test rule's variance is smaller
    assert np.all(sigma2_test < sigma2_masks)
    mean_c, var_c, _ = checks.monte_carlo_layer(layer, weights, keep * x, rng, n)
    assert checks.within_standard_errors(mean_c, var_c, mu, sigma2_test, n)
    net = ebp.Network([layer], weights, [3], dropout="sampled", keep=keep)
    test_pass = ebp.forward(net, x[None])                                            # forward(train=False) is pW
    np.testing.assert_allclose(test_pass.mu[0][0], mu, rtol=1e-12)
    np.testing.assert_allclose(test_pass.sigma2[0][0], sigma2_test, rtol=1e-12)


def test_within_standard_errors_uses_the_stated_errors():
    mu, sigma2, n = np.zeros(2), np.full(2, 4.0), 10_000                    # SE of the mean 0.02, of the variance 0.0566
    assert checks.within_standard_errors([0.09, -0.09], [4.25, 3.75], mu, sigma2, n)
    assert not checks.within_standard_errors([0.11, 0.0], [4.0, 4.0], mu, sigma2, n)     # mean 5.5 SE away
    assert not checks.within_standard_errors([0.0, 0.0], [4.0, 4.3], mu, sigma2, n)      # variance 5.3 SE away
    assert checks.within_standard_errors([0.11, 0.0], [4.0, 4.0], mu, sigma2, n, k=6.0)


# --- exact enumeration against EBP, and the printed Algorithm 1 variant by variant --------------------------------

def test_exact_increment_of_a_single_weight_is_the_log_likelihood_ratio():
    """One weight, no other unknowns: P(y | W) = Φ(y W x), so the exact update is ½ ln[Φ(yx)/Φ(−yx)] whatever h."""
    from scipy.special import ndtr
    for h, x, y in ((0.0, 0.7, 1.0), (1.3, -0.4, 1.0), (-0.5, 2.0, -1.0)):
        expected = 0.5 * (np.log(ndtr(y * x)) - np.log(ndtr(-y * x)))
        inc = checks.exact_increment(np.array([h]), [(1, 1)], np.array([x]), np.array([y]))
        assert inc[0] == pytest.approx(expected, rel=1e-10)


def test_one_step_increments_separate_the_misprints_in_the_weak_evidence_regime():
    rng = np.random.default_rng(0)
    shapes = [(2, 4), (1, 2)]
    incs = checks.one_step_increments(shapes, 30, rng, scale=0.3)
    assert set(incs) == {"exact", *checks.MISPRINTS} and incs["exact"].shape == (30, 10)
    worst = {name: max(rel for _, rel in checks.increment_agreement(incs["exact"], incs[name], shapes))
             for name in checks.MISPRINTS}
    assert worst["corrected"] < 0.15 and worst["√K in both passes"] < 0.15       # the convention changes nothing
    np.testing.assert_allclose(incs["√K in both passes"], incs["corrected"], rtol=1e-9, atol=1e-12)
    assert min(worst[name] for name in ("no factor 2", "μ for ν", "√K in Δ only", "as printed")) > 0.2, worst


def test_online_posteriors_of_a_single_weight_agree_exactly():
    """With one weight the mean field is exact: exact and mean-field h coincide at every step; EBP starts equal."""
    from scipy.special import ndtr
    rng = np.random.default_rng(1)
    xs, ys = rng.standard_normal((5, 1)), rng.choice([-1.0, 1.0], size=5)
    out = checks.online_posteriors(np.array([0.2]), [(1, 1)], xs, ys)
    assert out["exact"].shape == (6, 1) and out["log_posterior"].shape == (2,)
    np.testing.assert_allclose(out["mean field"], out["exact"], rtol=1e-10, atol=1e-12)
    assert out["EBP"][0, 0] == 0.2
    expected = 0.2 + sum(0.5 * np.log(ndtr(y * x[0]) / ndtr(-y * x[0])) for x, y in zip(xs, ys))
    assert out["exact"][-1, 0] == pytest.approx(expected, rel=1e-10)


def test_predictive_plus_and_joint_of_two_on_a_product_distribution():
    h = np.array([0.5, -1.0, 0.2])
    configs = checks.binary_configurations(3)
    joint = checks.joint_of_two(configs @ h, 0, 1)
    p_plus = 0.5 * (1 + np.tanh(h))
    np.testing.assert_allclose(joint, np.outer([1 - p_plus[0], p_plus[0]], [1 - p_plus[1], p_plus[1]]), rtol=1e-12)
    x = np.random.default_rng(2).standard_normal((4, 3))
    exact = checks.predictive_plus(h, [(1, 3)], x)
    assert np.all((exact > 0) & (exact < 1))
    np.testing.assert_allclose(checks.predictive_plus(h, [(1, 3)], x, log_posterior=configs @ h), exact, rtol=1e-12)
    # a perceptron's EBP-P is (1 + ν)/2 = Φ(μ/σ): the exact average of Φ(W·x) when W·x + ε is Gaussian, close here
    np.testing.assert_allclose(checks.predictive_plus(h, [(1, 3)], x, ebp=True), exact, atol=0.05)


def test_perceptron_passes_are_online_posteriors_over_the_repeated_data():
    """k passes of perceptron_passes = online_posteriors on the examples repeated k times (mean field and EBP), and
    the exact posterior after k passes is the one with every likelihood counted k times, for every task."""
    rng = np.random.default_rng(6)
    xs, ys = rng.standard_normal((2, 4, 5)), rng.choice([-1.0, 1.0], size=(2, 4))
    out = checks.perceptron_passes(xs, ys, 2)
    assert all(out[name].shape == (3, 2, 5) for name in ("exact", "mean field", "EBP"))
    for t in range(2):
        twice = checks.online_posteriors(np.zeros(5), [(1, 5)], np.tile(xs[t], (2, 1)), np.tile(ys[t], 2)[:, None])
        for name in ("exact", "mean field", "EBP"):
            np.testing.assert_allclose(out[name][1:, t], twice[name][[4, 8]], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(out["EBP"][0], 0.0)


def test_perceptron_predictives_against_predictive_plus():
    rng = np.random.default_rng(7)
    h, x = rng.standard_normal((2, 3)), rng.standard_normal((4, 3))
    configs = checks.binary_configurations(3)
    exact, ebp_p = checks.perceptron_predictive(h @ configs.T, x), checks.perceptron_ebp_p(h, x)
    for t in range(2):
        np.testing.assert_allclose(exact[t], checks.predictive_plus(h[t], [(1, 3)], x), rtol=1e-12)
        np.testing.assert_allclose(ebp_p[t], checks.predictive_plus(h[t], [(1, 3)], x, ebp=True), rtol=1e-12)


def test_confidence_and_accuracy_of_a_calibrated_and_an_overconfident_forecaster():
    p_true = np.array([0.9, 0.2, 0.6])
    confidence, accuracy, log_loss = checks.confidence_and_accuracy(p_true, p_true)
    assert confidence == pytest.approx(accuracy) == pytest.approx(np.mean([0.9, 0.8, 0.6]))
    over = checks.confidence_and_accuracy(np.array([0.99, 0.01, 0.99]), p_true)
    assert over[0] == pytest.approx(0.99) and over[1] == pytest.approx(accuracy) and over[2] > log_loss
    assert np.isfinite(checks.confidence_and_accuracy(np.array([1.0, 0.0, 1.0]), p_true)[2])   # clipped, finite


def misprint_setup(weights="binary"):
    net = ebp.init_network([7, 5, 3], weights, seed=2, input_side=3, init_scale=4.0)
    rng = np.random.default_rng(3)
    for layer in net.layers:
        layer.b[:] = np.sqrt(layer.normaliser) * rng.standard_normal(len(layer.b))
    return net, rng.standard_normal((3, 9)), np.where(rng.random((3, 3)) < 0.5, 1.0, -1.0)


def test_fan_in_normaliser_is_a_convention_for_the_increments_not_for_delta():
    net, x, y = misprint_setup()
    k_net = checks.with_fan_in_normaliser(net)
    assert np.array_equal(net.layers[0].normaliser, [10.0] * 7)  # the copy changed, not the original
    assert np.array_equal(k_net.layers[0].normaliser, [9.0] * 7)
    fwd, k_fwd = ebp.forward(net, x), ebp.forward(k_net, x)
    np.testing.assert_allclose(k_fwd.nu[-1], fwd.nu[-1], rtol=1e-12)
    deltas, k_deltas = ebp.backward(net, fwd, y), ebp.backward(k_net, k_fwd, y)
    for a, b in zip(ebp.increments(net, fwd, deltas), ebp.increments(k_net, k_fwd, k_deltas)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(deltas[0] / k_deltas[0], np.sqrt(10 / 9), rtol=1e-10)   # Δ_1 rescales by √(N/K)


def test_algorithm1_step_and_misprint_errors():
    net, x, y = misprint_setup("real")
    _, fwd, deltas, incs = checks.algorithm1_step(net, x, y)
    assert all(np.array_equal(a, b) for a, b in zip(deltas, ebp.backward(net, fwd, y)))
    with pytest.raises(ValueError, match="sqrt_k"):
        checks.algorithm1_step(net, x, y, sqrt_k="forward")
    errors = checks.misprint_errors(net, x, y)
    for name in ("corrected", "√K in both passes"):
        assert max(errors[name]["Δ"] + errors[name]["Δh"]) < 1e-6, (name, errors[name])
    assert errors["no factor 2"]["Δ"][:2] == pytest.approx([0.75, 0.5], rel=1e-5)     # halved once, then twice
    assert errors["μ for ν"]["Δ"] == errors["corrected"]["Δ"] and min(errors["μ for ν"]["Δh"][1:]) > 1e-2
    assert min(errors["√K in Δ only"]["Δh"]) > 1e-2 and max(errors["as printed"]["Δh"]) > 0.1


def test_directional_errors_agree_with_full_finite_differences():
    net, x, y = misprint_setup()
    errors = checks.misprint_directional_errors(net, x, y, n_directions=4)
    assert max(errors["corrected"] + errors["√K in both passes"]) < 1e-6, errors
    assert errors["no factor 2"][:2] == pytest.approx([0.75, 0.5], rel=1e-5)     # a scaled layer: exactly its scale
    assert min(errors["μ for ν"][1:]) > 1e-2 and min(errors["√K in Δ only"]) > 1e-2


def test_train_epoch_variant_without_misprints_is_the_reference_epoch():
    data = small_data()
    nets = [ebp.init_network([6, 3], "binary", seed=1, input_side=4) for _ in range(3)]
    checks.train_epoch_variant(nets[0], data.x_train, data.y_train, 10, np.random.default_rng(5))
    ebp_train.train_epoch(nets[1], data.x_train, data.y_train, 10, np.random.default_rng(5), engine="reference")
    for a, b in zip(nets[0].layers, nets[1].layers):
        assert np.array_equal(a.h, b.h) and np.array_equal(a.b, b.b)
    checks.train_epoch_variant(nets[2], data.x_train, data.y_train, 10, np.random.default_rng(5), factor_two=False)
    assert not np.array_equal(nets[2].layers[0].h, nets[0].layers[0].h)
    np.testing.assert_array_equal(nets[2].layers[0].h != nets[2].layers[0].h, False)   # finite


def test_noisy_teacher_labels_follow_the_probit_model():
    rng = np.random.default_rng(4)
    w, x = np.array([[1.0, -1.0]]), np.tile([[0.5, -0.3]], (100_000, 1))
    y = checks.noisy_teacher_labels([w], x, rng)
    from scipy.special import ndtr
    assert y.shape == (100_000, 1) and set(np.unique(y)) == {-1.0, 1.0}
    assert (y == 1).mean() == pytest.approx(ndtr(0.8), abs=5 * 0.5 / np.sqrt(100_000))   # P(+1) = Φ(W·x)


def test_tangent_secant_ratios_confirmations_count_less():
    ratios = checks.tangent_secant_ratios(12, 100, np.random.default_rng(0))
    assert len(ratios[True]) > 50 and len(ratios[False]) > 50
    assert np.median(ratios[True]) < 1 < np.median(ratios[False])


def test_clt_unit_errors_shrink_with_fan_in_and_refuse_unknown_kinds():
    for kind in ("symmetric", "skewed"):
        small, large = (checks.clt_unit_errors(k, kind, 200, np.random.default_rng(0)).mean() for k in (4, 256))
        assert 0 < large < small / 3, (kind, small, large)
    with pytest.raises(ValueError, match="symmetric"):
        checks.clt_unit_errors(4, "lopsided", 10, np.random.default_rng(0))


def test_exact_standardised_density_is_a_density_with_mean_0_and_variance_1():
    z = np.linspace(-10, 10, 4001)
    density = checks.exact_standardised_density(np.array([0.5, 0.5, -0.95]), z)
    dz = z[1] - z[0]
    assert np.sum(density) * dz == pytest.approx(1.0, abs=1e-9)
    assert np.sum(z * density) * dz == pytest.approx(0.0, abs=1e-9)
    assert np.sum(z * z * density) * dz == pytest.approx(1.0, abs=1e-9)
