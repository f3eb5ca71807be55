"""ebp_analysis's helpers for looking at trained networks, each against an exact answer (the older helpers,
learning_curve, reliability, class_log_probabilities, receptive_field, are tested in test_checks.py)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

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
