"""The readings of ebp_analysis that take EBP-D apart (scripts/ebp_d_gap.py): each against a
hand computation, an exact identity of the maths, or a network built so the answer is known."""
import numpy as np
import pytest
from scipy import special

import ebp_analysis as analysis
import ebp_checks
import ebp_data
import ebp_lib as ebp
import ebp_train


def small_net(weights, architecture=(5, 4, 3), seed=0, scale=4.0):
    """A [16, ...] network (4x4 'images') with h of variance scale/K and random biases."""
    net = ebp.init_network(list(architecture), weights, seed=seed, input_side=4, init_scale=scale)
    rng = np.random.default_rng(seed + 100)
    for layer in net.layers:
        layer.b[:] = rng.standard_normal(len(layer.b))
    return net


def certain(net):
    """The same net with every binary weight certain: h = 30 sign(h), so tanh h = ±1 exactly in float64."""
    for layer in net.layers:
        layer.h[:] = 30.0 * np.sign(layer.h)
    return net


def images(n=50, seed=1):
    return np.random.default_rng(seed).standard_normal((n, 16))


@pytest.mark.parametrize("weights", ["binary", "real"])
def test_authors_ebp_d_is_ours_away_from_exact_zeros(weights):
    """The MATLAB transcription and ebp_lib.output_ebp_d give the same outputs (no hidden pre-activation of a
    random net on random images is exactly 0)."""
    for seed in range(3):
        net, x = small_net(weights, seed=seed), images(seed=seed)
        np.testing.assert_allclose(analysis.ebp_d_authors(net, x), ebp.output_ebp_d(net, x), atol=1e-12)


def test_authors_ebp_d_by_hand_and_at_a_zero_pre_activation():
    """A [2, 2, 2] binary net computed by hand; where a hidden unit's input is exactly 0 MATLAB's sign gives 0
    and ebp_lib gives +1, so the outputs differ by that unit's output weights sign(h_out[:, unit])."""
    net = ebp.init_network([2, 2], "binary", seed=0, input_side=1)
    net.layers = [ebp.Layer(np.array([[0.3], [-2.0]]), np.array([0.5, 0.0])),
                  ebp.Layer(np.array([[1.0, -0.2], [-0.7, 4.0]]), np.array([0.25, -0.5]))]
    x = np.array([[2.0]])
    # hidden: sign(+1*2 + 0.5) = +1, sign(-1*2 + 0) = -1; output: [1*1 + (-1)(-1) + 0.25, -1*1 + 1*(-1) - 0.5]
    np.testing.assert_allclose(analysis.ebp_d_authors(net, x), [[2.25, -2.5]])
    np.testing.assert_allclose(ebp.output_ebp_d(net, x), [[2.25, -2.5]])
    x0 = np.array([[0.0]])  # unit 2's input is 0 + 0 = 0: MATLAB 0, ebp_lib +1; unit 1: sign(0.5) = +1
    np.testing.assert_allclose(analysis.ebp_d_authors(net, x0), [[1.0 + 0.25, -1.0 - 0.5]])
    np.testing.assert_allclose(ebp.output_ebp_d(net, x0) - analysis.ebp_d_authors(net, x0), [[-1.0, 1.0]])


def test_mean_weight_ebp_d():
    """Real weights: it is output_ebp_d. Binary: its hidden layer is sign(μ_1) of EBP-P and the output
    tanh(h) v + b; with every weight made certain (same signs) it becomes output_ebp_d."""
    real, x = small_net("real"), images()
    np.testing.assert_array_equal(analysis.mean_weight_ebp_d(real, x), ebp.output_ebp_d(real, x))
    binary = small_net("binary", architecture=(5, 3))
    v = np.where(ebp.forward(binary, x).mu[0] >= 0, 1.0, -1.0)
    expected = v @ np.tanh(binary.layers[1].h).T + binary.layers[1].b
    np.testing.assert_allclose(analysis.mean_weight_ebp_d(binary, x), expected, atol=1e-12)
    sure = certain(small_net("binary"))
    np.testing.assert_array_equal(analysis.mean_weight_ebp_d(sure, x), ebp.output_ebp_d(sure, x))
    assert not np.allclose(analysis.mean_weight_ebp_d(binary, x), ebp.output_ebp_d(binary, x))


@pytest.mark.parametrize("weights", ["binary", "real"])
def test_partly_hard_outputs_without_hard_layers_is_ebp_p(weights):
    net, x = small_net(weights), images()
    np.testing.assert_allclose(analysis.partly_hard_outputs(net, x, ()), ebp.output_ebp_p(net, x), atol=1e-12)
    with pytest.raises(ValueError, match="hidden layers are numbered"):
        analysis.partly_hard_outputs(net, x, (3,))


def test_partly_hard_outputs_all_hard_real_net_is_ebp_d_through_erf():
    """Real weights, every hidden layer hard: the output's σ² is (K + 1)/N = 1 for every unit (⟨v⟩² = ⟨v²⟩ = 1
    and ⟨W²⟩ − ⟨W⟩² = 1), and the hidden signs are EBP-D's (W = h), so ν_L = erf(EBP-D output / sqrt(2N))."""
    for architecture in [(5, 3), (5, 4, 3)]:
        net, x = small_net("real", architecture), images()
        n_out = net.layers[-1].normaliser
        hard = tuple(range(1, len(net.layers)))
        np.testing.assert_allclose(analysis.partly_hard_outputs(net, x, hard),
                                   special.erf(ebp.output_ebp_d(net, x) / np.sqrt(2.0 * n_out)), atol=1e-12)
    # rounding only layer 1 of a two-hidden-layer net is neither EBP-P nor the all-hard reading
    net, x = small_net("real"), images()
    one = analysis.partly_hard_outputs(net, x, (1,))
    assert not np.allclose(one, ebp.output_ebp_p(net, x)) and not np.allclose(one, analysis.partly_hard_outputs(
        net, x, (1, 2)))


def test_hidden_sign_disagreement():
    """Real weights: 0 in layer 1 (W = h). A binary layer built to disagree: unit 0 has one sure weight
    (h = 3, ⟨W⟩ = 0.995) and 15 nearly coin-flip weights (h = −0.01) against it: on the all-ones image
    ⟨W⟩·x = 0.995 − 0.15 > 0 but sign(h)·x = 1 − 15 < 0; unit 1 has all h = 1 (agree): disagreement 1/2."""
    real, x = small_net("real"), images()
    assert analysis.hidden_sign_disagreement(real, x)[0] == 0.0
    assert len(analysis.hidden_sign_disagreement(real, x)) == 2
    net = ebp.init_network([2, 3], "binary", seed=0, input_side=4)
    net.layers[0].h[0] = -0.01
    net.layers[0].h[0, 0] = 3.0
    net.layers[0].h[1] = 1.0
    assert analysis.hidden_sign_disagreement(net, np.ones((1, 16))) == [0.5]


def test_hidden_unit_certainty():
    """Zero weights: ν = erf(b / sqrt(2σ²)); biases ±100 make every unit certain (|ν| = 1), biases 0 every unit
    a coin flip (ν = 0)."""
    net, x = small_net("binary"), images()
    for layer in net.layers:
        layer.h[:] = 0.0
        layer.b[:] = 100.0 * np.where(np.arange(len(layer.b)) % 2 == 0, 1.0, -1.0)
    assert analysis.hidden_unit_certainty(net, x) == [{"mean_abs_nu": 1.0, "share_below": 0.0}] * 2
    for layer in net.layers:
        layer.b[:] = 0.0
    assert analysis.hidden_unit_certainty(net, x) == [{"mean_abs_nu": 0.0, "share_below": 1.0}] * 2


def test_sign_flip_probability_closed_forms_and_monte_carlo():
    assert analysis.sign_flip_probability(0.0, "binary") == 0.5 == analysis.sign_flip_probability(0.0, "real")
    np.testing.assert_allclose(analysis.sign_flip_probability(np.arctanh(0.5), "binary"), 0.25)
    np.testing.assert_allclose(analysis.sign_flip_probability([-1.0, 1.0], "real"), special.ndtr(-1.0))
    rng = np.random.default_rng(0)
    h = np.array([[-2.0, -0.6, -0.1, 0.3, 1.2]])
    for weights in ("binary", "real"):
        w = ebp_checks.sample_weights(ebp.Layer(h, np.zeros(1)), weights, rng, 40000)[:, 0]
        flipped = (np.sign(w) != np.sign(h[0])).mean(axis=0)
        p = analysis.sign_flip_probability(h[0], weights)
        assert np.all(np.abs(flipped - p) < 4 * np.sqrt(p * (1 - p) / 40000))


def test_uncertain_weight_share_counts_connected_weights_only():
    net = ebp.init_network([("local", 3), 2], "binary", seed=0, input_side=4)  # 4 units, 9 of 16 inputs each
    first, last = net.layers
    first.h[first.mask] = np.where(np.arange(first.mask.sum()) % 3 == 0, 0.1, 2.0)  # a third uncertain
    last.h[:] = 0.1
    last.h[:, :1] = 5.0                                                             # 3 of 4 uncertain
    shares = analysis.uncertain_weight_share(net)
    np.testing.assert_allclose(shares, [12 / 36, 0.75])
    real = ebp.init_network([3], "real", seed=0, input_side=2)
    real.layers[0].h[:] = [[0.5, 0.7, -0.6, -0.8]] * 3     # |h| < 0.674: flip probability above 0.25
    assert analysis.uncertain_weight_share(real) == [0.5]


def test_sampled_network_predictions():
    """Certain weights and no bias noise: every sampled net is the EBP-D net. Uncertain ones: the sampled nets
    differ from each other, and the same rng seed gives the same samples."""
    x = images(200)
    sure = certain(small_net("binary"))
    predictions = analysis.sampled_network_predictions(sure, x, np.random.default_rng(0), 5)
    assert predictions.shape == (5, 200)
    assert np.all(predictions == ebp.output_ebp_d(sure, x).argmax(axis=1))
    for weights in ("binary", "real"):
        net = small_net(weights, scale=0.1)
        a = analysis.sampled_network_predictions(net, x, np.random.default_rng(1), 4, bias_noise=True)
        b = analysis.sampled_network_predictions(net, x, np.random.default_rng(1), 4, bias_noise=True)
        np.testing.assert_array_equal(a, b)
        assert np.mean(a[0] != a[1]) > 0.1
    with pytest.raises(ValueError, match="without dropout"):
        analysis.sampled_network_predictions(ebp.init_network([3], dropout="analytic", input_side=2),
                                             np.ones((1, 4)), np.random.default_rng(0), 1)


def test_vote_majority_and_ties():
    predictions = np.array([[1, 2, 2, 0], [1, 0, 3, 1], [2, 0, 3, 2]])
    np.testing.assert_array_equal(analysis.vote(predictions, 4), [1, 0, 3, 0])  # last column: a 3-way tie -> 0


# The authors' training loop (Binary_EBP_minibatch.m): overlapping minibatches and a one-step-stale ⟨W⟩.

def test_overlapping_minibatches_follow_the_matlab_loop():
    """for tt=1:10:T; batch_size=min(batch_size,T-tt); batch_ind=tt:(tt+batch_size): 11 images, one shared with
    the next window, the last clipped (T = 25: 21:25, five images; T = 21: the single image 21)."""
    order = np.arange(100, 125)
    windows = analysis.overlapping_minibatches(order, 10)
    assert [w.tolist() for w in windows] == [list(range(100, 111)), list(range(110, 121)), list(range(120, 125))]
    assert [w.tolist() for w in analysis.overlapping_minibatches(np.arange(21), 10)] == [
        list(range(0, 11)), list(range(10, 21)), [20]]
    sixty = analysis.overlapping_minibatches(np.random.default_rng(0).permutation(60000), 10)
    assert len(sixty) == 6000 and {len(w) for w in sixty[:-1]} == {11} and len(sixty[-1]) == 10
    assert all(a[-1] == b[0] for a, b in zip(sixty[:-1], sixty[1:]))


@pytest.mark.parametrize("weights", ["binary", "real"])
def test_authors_loop_without_lag_is_ebp_lib_reference_step(weights):
    """lag=False, and a stale h equal to the current one, are ebp_train.train_step(engine="reference") exactly."""
    x, y = images(40), ebp_data.one_vs_all(np.random.default_rng(2).integers(0, 3, 40), 3)
    batches = analysis.overlapping_minibatches(np.random.default_rng(3).permutation(40), 4)
    ours, theirs = small_net(weights, scale=1.0), small_net(weights, scale=1.0)
    analysis.train_authors_loop(ours, x, y, batches, lag=False)
    for idx in batches:
        ebp_train.train_step(theirs, x[idx], y[idx], engine="reference")
    for a, b in zip(ours.layers, theirs.layers):
        np.testing.assert_array_equal(a.h, b.h)
        np.testing.assert_array_equal(a.b, b.b)
    net, ref = small_net(weights), small_net(weights)
    before = ebp.lagged_step(net, [layer.h.copy() for layer in net.layers], x[:5], y[:5], None, None)
    ebp_train.train_step(ref, x[:5], y[:5], engine="reference")
    for a, b in zip(net.layers, ref.layers):
        np.testing.assert_array_equal(a.h, b.h)
        np.testing.assert_array_equal(a.b, b.b)
    for h_before, layer in zip(before, small_net(weights).layers):
        np.testing.assert_array_equal(h_before, layer.h)


def hand_step(weights, hs, h, b, x, y):
    """One EBP step of a 1-1-1 net (one input, one hidden unit, one output; N = 2 in both layers) by hand, its
    means and variances from the stale hs = (hs1, hs2), the update added to h = (h1, h2); returns new h, b."""
    from scipy import stats

    mean = np.tanh if weights == "binary" else (lambda v: v)
    second = (lambda v: 1.0) if weights == "binary" else (lambda v: v * v + 1.0)
    m1, m2 = mean(hs[0]), mean(hs[1])
    mu1 = (m1 * x + b[0]) / np.sqrt(2)
    s1 = (second(hs[0]) * x * x - m1 * m1 * x * x + 1.0) / 2
    nu1 = 2 * stats.norm.cdf(mu1 / np.sqrt(s1)) - 1
    mu2 = (m2 * nu1 + b[1]) / np.sqrt(2)
    s2 = (second(hs[1]) * 1.0 - m2 * m2 * nu1 * nu1 + 1.0) / 2
    d2 = y * stats.norm.pdf(0, mu2, np.sqrt(s2)) / stats.norm.cdf(y * mu2 / np.sqrt(s2))
    d1 = 2 * stats.norm.pdf(0, mu1, np.sqrt(s1)) * m2 * d2 / np.sqrt(2)
    return (h[0] + d1 * x / np.sqrt(2), h[1] + d2 * nu1 / np.sqrt(2)), (b[0] + d1 / np.sqrt(2), b[1] + d2 / np.sqrt(2))


@pytest.mark.parametrize("weights", ["binary", "real"])
def test_lagged_loop_by_hand(weights):
    """Three steps of a 1-1-1 net: steps 1 and 2 see the starting h, step 3 the h after step 1 (tanh_h_cell is
    refreshed from h before the update); the bias is never stale. Without the lag the result differs."""
    h0, b0 = (0.7, -1.3), (0.2, -0.4)
    xs, ys = [1.5, -0.8, 2.0], [1.0, -1.0, 1.0]
    net = ebp.init_network([1, 1], weights, seed=0, input_side=1)
    for layer, h, b in zip(net.layers, h0, b0):
        layer.h[:], layer.b[:] = h, b
    plain = ebp.init_network([1, 1], weights, seed=0, input_side=1)
    for layer, h, b in zip(plain.layers, h0, b0):
        layer.h[:], layer.b[:] = h, b
    x, y = np.array(xs)[:, None], np.array(ys)[:, None]
    analysis.train_authors_loop(net, x, y, [[0], [1], [2]], lag=True)
    analysis.train_authors_loop(plain, x, y, [[0], [1], [2]], lag=False)
    h1, b1 = hand_step(weights, h0, h0, b0, xs[0], ys[0])
    h2, b2 = hand_step(weights, h0, h1, b1, xs[1], ys[1])   # stale: still h0
    h3, b3 = hand_step(weights, h1, h2, b2, xs[2], ys[2])   # stale: h after step 1
    np.testing.assert_allclose([net.layers[0].h[0, 0], net.layers[1].h[0, 0]], h3, rtol=1e-12)
    np.testing.assert_allclose([net.layers[0].b[0], net.layers[1].b[0]], b3, rtol=1e-12)
    p1, q1 = hand_step(weights, h0, h0, b0, xs[0], ys[0])
    p2, q2 = hand_step(weights, p1, p1, q1, xs[1], ys[1])
    p3, q3 = hand_step(weights, p2, p2, q2, xs[2], ys[2])
    np.testing.assert_allclose([plain.layers[0].h[0, 0], plain.layers[1].h[0, 0]], p3, rtol=1e-12)
    assert abs(h3[0] - p3[0]) > 1e-4 and abs(h3[1] - p3[1]) > 1e-4


@pytest.mark.parametrize("weights", ["binary", "real"])
def test_fast_engine_on_overlapping_windows_takes_one_step_per_window(weights):
    """ebp_train.train_steps (fast engine, float32) over the concatenated windows with batch_size 11 is the
    reference step on every window (float32 agreement); batch_size 10 over the same order is not."""
    x, y = images(45), ebp_data.one_vs_all(np.random.default_rng(4).integers(0, 3, 45), 3)
    windows = analysis.overlapping_minibatches(np.random.default_rng(5).permutation(45), 10)
    assert [len(w) for w in windows] == [11, 11, 11, 11, 5]
    ref, fast, wrong = (small_net(weights, scale=1.0) for _ in range(3))
    analysis.train_authors_loop(ref, x, y, windows, lag=False)
    ebp_train.train_steps(fast, x, y, np.concatenate(windows), 11, None, engine="fast")
    ebp_train.train_steps(wrong, x, y, np.concatenate(windows), 10, None, engine="fast")
    for a, b in zip(ref.layers, fast.layers):
        np.testing.assert_allclose(b.h, a.h, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(b.b, a.b, rtol=1e-4, atol=1e-5)
    assert max(np.abs(c.h - a.h).max() for a, c in zip(ref.layers, wrong.layers)) > 1e-3


def test_the_committed_report_and_its_conclusions_are_generated_from_the_records():
    """outputs/ablations/ebp-d-gap/README.md is what scripts/ebp_d_gap.py writes from its result.json, conclusions
    included: a number changed in the records changes the conclusion that quotes it."""
    import copy
    import json

    from helpers import ROOT, load_script

    script = load_script("ebp_d_gap")
    folder = ROOT / "outputs" / "ablations" / "ebp-d-gap"
    result = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    assert script.readme(result) == (folder / "README.md").read_text(encoding="utf-8")
    edited = copy.deepcopy(result)
    binary = next(g for g in edited["groups"] if g["weights"] == "binary")
    binary["final"]["ebp_d"]["mean"] = 31.4
    conclusions = script.conclusions(edited)
    assert "sign(h) is bad (31.4%)" in conclusions and conclusions != script.conclusions(result)
