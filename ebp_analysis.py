"""Helpers the notebooks call to look at trained networks, so that their cells stay a few lines long: learning
curves (notebooks 05, 07), the class probabilities and calibration of EBP-P and a rescaled posterior
(notebook 06), receptive fields, their outlines, weight images of locally connected layers and occlusion maps
(notebook 08).

They are analysis, not the algorithm (ebp_lib) and not a check of it (ebp_checks).
"""
from __future__ import annotations

import copy

import numpy as np
from scipy import special

from ebp_lib import DEFAULT_ENGINE, Dataset, Network, check_training, evaluate, train_steps, weight_moments


def learning_curve(net: Network, data: Dataset, epochs: int, batch_size: int = 10, seed: int = 0,
                   eval_every: int = 100, n_test: int = 2000, engine: str = DEFAULT_ENGINE) -> list[dict]:
    """Train for `epochs` epochs as fit does (each epoch a new random order drawn from `seed`) and record the
    test errors of EBP-P and EBP-D on the first `n_test` test images before training, after every `eval_every`
    minibatches (counted over all epochs) and at the end of every epoch (notebooks 05, 07). The minibatches
    between two records are one train_steps call (one compiled call with the fast engine).

    Returns a list of {"step", "epoch" (fractional), "ebp_p", "ebp_d"}.
    """
    check_training(net, data.x_train, data.y_train, batch_size, engine)
    rng = np.random.default_rng(seed)
    x_test, labels = data.x_test[:n_test], data.labels_test[:n_test]
    n_batches = -(-len(data.x_train) // batch_size)
    curve = [{"step": 0, "epoch": 0.0, **evaluate(net, x_test, labels, engine=engine)}]
    for epoch in range(epochs):
        order = rng.permutation(len(data.x_train))  # as train_epoch: one permutation, then the minibatches
        k = 0
        while k < n_batches:
            step = epoch * n_batches + k
            stop = min(n_batches, k + eval_every - step % eval_every)  # the next record: a multiple or the epoch's end
            train_steps(net, data.x_train, data.y_train, order[k * batch_size:stop * batch_size], batch_size, rng,
                        engine, epoch, first_step=k)
            k = stop
            step = epoch * n_batches + k
            curve.append({"step": step, "epoch": step / n_batches, **evaluate(net, x_test, labels, engine=engine)})
    return curve


def class_log_probabilities(mu: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """ln p_c, the class distribution implied by EBP-P's output layer (notebook 06).

    Each output unit is +1 with probability P(v_k = +1) = Φ(t_k) = (1 + ν_k)/2, t = μ/σ, independently.
    Conditioned on the output being one of the one-vs-all codes e_c (+1 at c, −1 elsewhere):
        p_c ∝ Φ(t_c) Π_{k≠c} Φ(−t_k) ∝ Φ(t_c)/Φ(−t_c) = (1 + ν_c)/(1 − ν_c).
    Computed from log Φ, so it stays finite where ν_c rounds to ±1. Rows sum to 1 after exp.
    """
    t = mu / np.sqrt(sigma2)
    a = special.log_ndtr(t) - special.log_ndtr(-t)
    return a - special.logsumexp(a, axis=-1, keepdims=True)


def reliability(confidence, outcome, n_bins: int = 10) -> dict:
    """Reliability-diagram data and the expected calibration error (notebook 06).

    Predicted probabilities `confidence` of events that happened (`outcome` 1) or not (0) are put in
    `n_bins` equal-width bins of [0, 1] (1.0 in the last one); per bin: mean confidence, observed
    frequency, count (NaN confidence/frequency for an empty bin).
        ECE = Σ_b (n_b / n) |frequency_b − confidence_b|.
    """
    confidence = np.ravel(confidence).astype(float)
    outcome = np.ravel(outcome).astype(float)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    which = np.digitize(confidence, edges[1:-1])
    count = np.bincount(which, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = np.bincount(which, confidence, n_bins) / count
        frequency = np.bincount(which, outcome, n_bins) / count
    ece = float(np.nansum(count * np.abs(frequency - mean_confidence)) / len(confidence))
    return {"edges": edges, "confidence": mean_confidence, "frequency": frequency, "count": count, "ece": ece}


def with_scaled_h(net: Network, alpha: float) -> Network:
    """A copy of `net` with every h multiplied by alpha (biases unchanged): for binary weights it makes
    every weight more (alpha > 1) or less (alpha < 1) certain while keeping its sign, so EBP-D is unchanged
    (notebook 06)."""
    scaled = copy.deepcopy(net)
    for layer in scaled.layers:
        layer.h *= alpha
    return scaled


def receptive_field(net: Network, layer_index: int, unit: int) -> np.ndarray:
    """Boolean (side, side) image of the input pixels that `unit` of layer `layer_index` (0-based) depends
    on, through the connectivity masks of that layer and every layer below it (a layer without a mask sees
    all its inputs) (notebook 08)."""
    reach = np.zeros(len(net.layers[layer_index].b), dtype=bool)
    reach[unit] = True
    for layer in net.layers[layer_index::-1]:
        connected = layer.mask if layer.mask is not None else np.ones(layer.h.shape, dtype=bool)
        reach = connected[reach].any(axis=0)
    return reach.reshape(net.input_side, net.input_side)


def weights_as_image(net: Network, layer_index: int, unit: int) -> np.ndarray:
    """⟨W⟩ of one unit's incoming weights (tanh h or h) laid out on its input grid (the image for the first
    layer, the previous feature map for a second local layer), NaN where the unit is not connected, so a
    plot shows the weights at their receptive-field position (notebook 08)."""
    layer = net.layers[layer_index]
    m, _ = weight_moments(layer, net.weights)
    image = np.where(layer.mask[unit], m[unit], np.nan) if layer.mask is not None else m[unit].copy()
    side = int(round(np.sqrt(layer.h.shape[1])))
    return image.reshape(side, side)


def outline(ax, field: np.ndarray, **style):
    """Draw on `ax` the rectangle around the True pixels of a receptive-field image (receptive_field), in the
    pixel coordinates of imshow (pixel (i, j) covers [j − ½, j + ½] × [i − ½, i + ½]); `style` goes to
    matplotlib's Rectangle (edgecolor, lw, ls, label). Returns the patch (notebook 08)."""
    from matplotlib.patches import Rectangle

    rows, cols = np.nonzero(field)
    if len(rows) == 0:
        raise ValueError("outline: the field has no True pixel, so there is nothing to draw around")
    corner = (cols.min() - 0.5, rows.min() - 0.5)
    return ax.add_patch(Rectangle(corner, np.ptp(cols) + 1, np.ptp(rows) + 1, fill=False, **style))


def occlusion_map(score, x: np.ndarray, side: int, patch: int, fill=0.0) -> np.ndarray:
    """Occlusion sensitivity of score(x) for one image x (side², ) (notebook 08).

    Every patch × patch square of the image is replaced in turn by `fill`, a number or an image (side², ) whose
    pixels take the square's place (0 is the training-set mean of each pixel after per-pixel standardisation:
    "the average digit there"; the standardised blank image is "no ink there"), and the drop
        d(square) = score(x) − score(x with that square filled)
    is recorded; a pixel's value is the mean drop over the squares that contain it. Positive: the pixels there
    supported the score; negative: they argued against it. `score` maps a batch of images (n, side²) to one
    number per image; it is called twice (once on x, once on all (side − patch + 1)² occluded copies).
    Returns a (side, side) array.
    """
    x = np.asarray(x, dtype=float).ravel()
    if x.size != side * side or not 1 <= patch <= side:
        raise ValueError(f"occlusion_map: need an image of side² = {side * side} pixels and 1 <= patch <= {side}, "
                         f"got {x.size} pixels and patch {patch}")
    fill = np.broadcast_to(np.asarray(fill, dtype=float).ravel(), x.shape).reshape(side, side)
    out = side - patch + 1
    corners = [divmod(k, out) for k in range(out * out)]
    occluded = np.repeat(x.reshape(1, side, side), out * out, axis=0)
    for k, (a, c) in enumerate(corners):
        occluded[k, a:a + patch, c:c + patch] = fill[a:a + patch, c:c + patch]
    drop = np.asarray(score(x[None]), dtype=float)[0] - np.asarray(score(occluded.reshape(out * out, -1)), float)
    total, count = np.zeros((side, side)), np.zeros((side, side))
    for d, (a, c) in zip(drop, corners):
        total[a:a + patch, c:c + patch] += d
        count[a:a + patch, c:c + patch] += 1
    return total / count
