"""The references of ebp_checks and the notebook helpers of ebp_analysis: each against an exact answer or an
independent computation (the tests of ebp_lib itself, which use these references, are in test_engine.py)."""
import numpy as np
import pytest

import ebp_analysis as analysis
import ebp_checks as checks
import ebp_lib as ebp


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
    y = ebp.one_vs_all(labels, 3)
    return ebp.Dataset("tiny", "none", x, y, labels, x[:40], y[:40], labels[:40])


@pytest.mark.parametrize("eval_every", [7, 12])  # records inside epochs at multiples of 7, or only at their ends
def test_learning_curve_trains_as_train_epoch_and_records_where_asked(eval_every):
    data = small_data()
    net, same = (ebp.init_network([6, 3], "binary", seed=1, input_side=4, dropout="sampled") for _ in range(2))
    curve = analysis.learning_curve(net, data, 2, batch_size=10, seed=3, eval_every=eval_every, n_test=40,
                                    engine="reference")
    rng = np.random.default_rng(3)
    for epoch in range(2):
        ebp.train_epoch(same, data.x_train, data.y_train, 10, rng, epoch, engine="reference")
    for a, b in zip(net.layers, same.layers):  # the same steps and random draws, in the same order
        np.testing.assert_array_equal(a.h, b.h)
    steps = sorted({k for k in range(0, 25, eval_every)} | {12, 24})
    assert [p["step"] for p in curve] == steps
    assert curve[-1]["epoch"] == 2.0 and curve[-1]["ebp_p"] == ebp.evaluate(net, data.x_test[:40], data.labels_test[:40],
                                                                           engine="reference")["ebp_p"]


def test_learning_curve_with_the_fast_engine_follows_the_reference():
    data = small_data()
    nets = {e: ebp.init_network([6, 3], "real", seed=1, input_side=4) for e in ebp.ENGINES}
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
