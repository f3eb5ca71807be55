"""Helpers the notebooks call to look at trained networks, so that their cells stay a few lines long: learning
curves (notebooks 05, 07), the class probabilities and calibration of EBP-P and a rescaled posterior
(notebook 06), receptive fields, their outlines, weight images of locally connected layers and occlusion maps
(notebook 08), and readings of a trained net that take EBP-D apart: the authors' EBP-D transcribed, the
deterministic net with mean weights, EBP-P with some hidden layers rounded, votes of sampled nets, and the
uncertainty of weights and hidden units (notebook 06, scripts/ebp_d_gap.py); and the statistics of comparisons on
the same test images (paired_rates: McNemar and the paired standard error) and of Monte Carlo checks
(sampled_mean_outside_rate: the exact null rate); and a neighbour of EBP, probabilistic backpropagation's
assumed-density-filtering update of each weight's mean and variance, beside exact Bayes for one weight (notebook 05);
and sliders that redraw a figure in a live kernel (notebooks 01, 02, 06); and the figures' size (subplots,
subplot_mosaic): every figure of the numbered notebooks is drawn at the width the book shows it.

They are analysis, not the algorithm (ebp_lib) and not a check of it (ebp_checks).
"""
from __future__ import annotations

import copy

import numpy as np
from scipy import special

from ebp_data import Dataset
from ebp_lib import (
    Network,
    ebp_d_parameters,
    forward,
    hard_sign,
    lagged_step,
    log_phi_ratio,
    sign_network,
    weight_moments,
)
from ebp_train import DEFAULT_ENGINE, check_training, evaluate, train_steps


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


# ----------------------------------------------------------------------------------------------------------
# EBP-D against EBP-P in nets with two hidden layers (scripts/ebp_d_gap.py, outputs/ablations/ebp-d-gap/). Each
# function reads a trained network one way, through ebp_lib.sign_network or ebp_lib.forward; none changes it.
# ----------------------------------------------------------------------------------------------------------

def _no_dropout(net: Network, name: str) -> None:
    if net.dropout is not None:
        raise ValueError(f"{name} reads networks without dropout; this one has dropout={net.dropout!r}")


def ebp_d_authors(net: Network, x: np.ndarray) -> np.ndarray:
    """EBP-D transcribed from the authors' Binary_EBP_minibatch.m: v = sign(sign(h) v + b) for every hidden
    layer, with MATLAB's sign (0 at 0, also for h = 0), and the output sign(h) v + b; real weights put h where
    the binary code has sign(h) (the paper's W = h). No √N anywhere: it would scale all of a layer's inputs
    alike. ebp_lib.output_ebp_d can differ from it only where a hidden pre-activation is exactly 0 (+1 there)."""
    _no_dropout(net, "ebp_d_authors")
    return sign_network(x, ebp_d_parameters(net), sign=np.sign)[-1]


def mean_weight_ebp_d(net: Network, x: np.ndarray) -> np.ndarray:
    """The deterministic sign network with every weight at its posterior mean ⟨W⟩ (tanh h for binary weights,
    h for real ones) instead of its most probable value sign(h): hidden units sign(⟨W⟩ v + b) (+1 at 0), a linear
    output layer. For real weights it is output_ebp_d itself; its first hidden layer is sign(μ_1) = sign(ν_1) of
    EBP-P. Against output_ebp_d it measures what rounding the binary weights costs, against EBP-P what rounding
    the hidden units costs."""
    _no_dropout(net, "mean_weight_ebp_d")
    return sign_network(x, [(weight_moments(layer, net.weights)[0], layer.b) for layer in net.layers])[-1]


def partly_hard_outputs(net: Network, x: np.ndarray, hard=()) -> np.ndarray:
    """ν_L of EBP-P's forward pass (ebp_lib.forward) in which every hidden layer listed in `hard` (1-based)
    passes on sign(μ_l) (+1 at 0: a certain ±1 unit, ⟨v⟩² = ⟨v²⟩ = 1) instead of its mean ν_l. hard=() is
    EBP-P; hard = every hidden layer rounds all hidden units but keeps the weights' posterior (means and
    variances) and EBP-P's output; the layers in between say which layer's rounding costs what."""
    _no_dropout(net, "partly_hard_outputs")
    hard = set(hard)
    if not hard <= set(range(1, len(net.layers))):
        raise ValueError(f"hard={sorted(hard)}: hidden layers are numbered 1..{len(net.layers) - 1}")
    return forward(net, x, hard=hard).nu[-1]


def hidden_sign_disagreement(net: Network, x: np.ndarray) -> list[float]:
    """Per hidden layer, the fraction of (image, unit) pairs whose EBP-D unit (ebp_lib.output_ebp_d's rule)
    differs from sign(ν_l) of EBP-P's forward pass on the same image (+1 at 0 in both). For real weights it is
    0 in layer 1 (W = h makes sign(h x + b) = sign(μ_1)); in deeper layers it includes what layers below
    carried up."""
    _no_dropout(net, "hidden_sign_disagreement")
    hidden = sign_network(x, ebp_d_parameters(net))[:-1]
    return [float(np.mean(v != hard_sign(nu))) for v, nu in zip(hidden, forward(net, x).nu[:-1])]


def hidden_unit_certainty(net: Network, x: np.ndarray, threshold: float = 0.5) -> list[dict]:
    """Per hidden layer of EBP-P's forward pass: the mean |ν_l| over images and units, and the share of
    (image, unit) pairs with |ν_l| < threshold (units close to a coin flip, where EBP-D's rounding to ±1
    throws most away)."""
    return [{"mean_abs_nu": float(np.abs(nu).mean()), "share_below": float(np.mean(np.abs(nu) < threshold))}
            for nu in forward(net, x).nu[:-1]]


def sign_flip_probability(h: np.ndarray, weights: str) -> np.ndarray:
    """P(a weight drawn from its posterior has the sign opposite to sign(h)), elementwise: (1 − tanh|h|)/2 for
    binary weights, Φ(−|h|) for real ones (W ~ N(h, 1)); 1/2 at h = 0, falling to 0 as |h| grows."""
    h = np.abs(np.asarray(h, dtype=float))
    return 0.5 * (1.0 - np.tanh(h)) if weights == "binary" else special.ndtr(-h)


def uncertain_weight_share(net: Network, p: float = 0.25) -> list[float]:
    """Per layer, the share of (connected) weights whose sign_flip_probability exceeds p: p = 0.25 is
    |h| < artanh(1/2) = 0.55 for binary weights, |h| < 0.67 for real ones."""
    out = []
    for layer in net.layers:
        flip = sign_flip_probability(layer.h, net.weights)
        out.append(float(np.mean(flip[layer.mask] > p) if layer.mask is not None else np.mean(flip > p)))
    return out


def sampled_network_predictions(net: Network, x: np.ndarray, rng, n_samples: int,
                                bias_noise: bool = False) -> np.ndarray:
    """Classes (n_samples, B) predicted by networks drawn from the posterior (every weight by
    ebp_checks.sample_weights), each read with EBP-D's rule: sign hidden units (+1 at 0), a linear output layer,
    argmax. bias_noise adds the bias's unit-variance noise N(0, 1) to every unit (EBP's model, as in
    ebp_checks.monte_carlo_outputs); without it the bias is b, as in EBP-D. One row is one sampled net; vote()
    of all rows is the Monte Carlo majority of the stochastic net."""
    from ebp_checks import sample_weights

    _no_dropout(net, "sampled_network_predictions")
    out = np.empty((n_samples, len(x)), dtype=np.int64)
    for s in range(n_samples):
        drawn = ((sample_weights(layer, net.weights, rng, 1)[0], layer.b) for layer in net.layers)
        out[s] = sign_network(x, drawn, noise=rng.standard_normal if bias_noise else None)[-1].argmax(axis=1)
    return out


def vote(predictions: np.ndarray, n_classes: int = 10) -> np.ndarray:
    """The majority class of every column of `predictions` (n_voters, B); a tie goes to the smallest class."""
    predictions = np.asarray(predictions)
    counts = np.stack([(predictions == c).sum(axis=0) for c in range(n_classes)], axis=1)
    return counts.argmax(axis=1)


# ----------------------------------------------------------------------------------------------------------
# The authors' training loop (Binary_EBP_minibatch.m) where it differs from ebp_lib's (scripts/ebp_d_gap.py
# --loop): overlapping minibatches of batch_size + 1 images, and a ⟨W⟩ one step stale.
# ----------------------------------------------------------------------------------------------------------


def overlapping_minibatches(order: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """The authors' minibatches over the images `order`: `for tt=1:batch_size:T; batch_size=min(batch_size,T-tt);
    batch_ind=tt:(tt+batch_size)`, i.e. order[s : s + batch_size + 1] for s = 0, batch_size, 2 batch_size, ...:
    batch_size + 1 images each, consecutive minibatches sharing one image (the last of one is the first of the
    next), and the last clipped at the end of `order` (for 60,000 images and batch_size 10: 5,999 windows of 11
    and a last one of 10). A window of one image (s = T − 1) is kept, as the MATLAB loop keeps it."""
    order = np.asarray(order)
    return [order[s:s + batch_size + 1] for s in range(0, len(order), batch_size)]


def train_authors_loop(net: Network, x: np.ndarray, y: np.ndarray, minibatches, lag: bool = True, rng=None) -> None:
    """EBP steps on x[idx], y[idx] for idx in `minibatches` (e.g. overlapping_minibatches of one epoch's order), in
    place, with the reference engine (the net's dtype). lag=True: the authors' stale ⟨W⟩ (ebp_lib.lagged_step); the
    first two steps both see the h the call starts from, as in one call of Binary_EBP_minibatch.m (one call per
    epoch restarts the lag). lag=False: ebp_train.train_step on every minibatch."""
    stale = [layer.h.copy() for layer in net.layers]
    for k, idx in enumerate(minibatches):
        seen = stale if lag else [layer.h for layer in net.layers]
        stale = lagged_step(net, seen, x[idx], y[idx], rng, step=k)


# ----------------------------------------------------------------------------------------------------------
# Calibration over repeated epochs (notebook 06) and the machine a benchmark ran on (reproduction_evidence)
# ----------------------------------------------------------------------------------------------------------

def calibration_gap(r: dict) -> float:
    """Mean (observed frequency − confidence) over the predictions of a reliability() result, each bin weighted
    by its count: > 0 under-confident on average, < 0 over-confident (notebook 06)."""
    return float(np.nansum(r["count"] * (r["frequency"] - r["confidence"])) / r["count"].sum())


def calibration_over_epochs(net: Network, x: np.ndarray, y: np.ndarray, x_test: np.ndarray, labels_test: np.ndarray,
                            record_at, batch_size: int = 10, seed: int = 0,
                            engine: str = DEFAULT_ENGINE) -> list[dict]:
    """Train `net` in place on (x, y) for max(record_at) epochs, as fit does (each epoch a new random order from
    `seed`), and after each epoch in `record_at` measure EBP-P's per-class calibration on the test set (notebook 06):
    the top label's class probability p_c (class_log_probabilities) against whether that label is right.

    Returns a list of {"epoch", "error", "ece", "gap" (calibration_gap), "confidence" (mean top p_c)}.
    """
    check_training(net, x, y, batch_size, engine)
    rng, wanted, out = np.random.default_rng(seed), set(record_at), []
    for epoch in range(max(record_at)):
        train_steps(net, x, y, rng.permutation(len(x)), batch_size, rng, engine, epoch)
        if epoch + 1 in wanted:
            out.append({"epoch": epoch + 1, **top_class_calibration(net, x_test, labels_test)})
    return out


def top_class_calibration(net: Network, x: np.ndarray, labels: np.ndarray) -> dict:
    """EBP-P's per-class calibration on (x, labels) (notebooks 04 and 06): the top label's class probability p_c
    (class_log_probabilities) against whether that label is right.

    Returns {"error", "ece", "gap" (calibration_gap), "confidence" (mean top p_c)}.
    """
    fwd = forward(net, x)
    p = np.exp(class_log_probabilities(fwd.mu[-1], fwd.sigma2[-1]))
    right = p.argmax(axis=1) == labels
    r = reliability(p.max(axis=1), right)
    return {"error": float(np.mean(~right)), "ece": r["ece"], "gap": calibration_gap(r),
            "confidence": float(p.max(axis=1).mean())}


class BenchmarkRecordError(ValueError):
    """A benchmark record that is not one; the message names the file (or the record) and what is wrong."""


def read_benchmark(path) -> dict:
    """The benchmark record in JSON file `path` (e.g. outputs/binary_inference.json), its machine checked as
    benchmark_machine reads it; BenchmarkRecordError naming the file if it cannot be read, is not JSON or is not
    such a record."""
    import json

    try:
        with open(path, "rb") as f:
            record = json.loads(f.read())
    except OSError as err:
        raise BenchmarkRecordError(f"{path}: cannot be read ({err.strerror or err})") from None
    except ValueError as err:
        raise BenchmarkRecordError(f"{path}: not JSON ({err})") from None
    benchmark_machine(record, path)
    return record


def _is_load(value) -> bool:
    """A load average as a benchmark records it: None, or the 1, 5 and 15 minute values."""
    return value is None or (isinstance(value, list) and len(value) == 3 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))


def benchmark_machine(record: dict, where="the benchmark record") -> dict:
    """The machine a benchmark record (outputs/binary_inference.json) says it ran on, in one form for either
    schema: {"cpu_model", "cores", "flags", "load_average_start", "load_average_end", "loaded"}. A field the record
    does not hold is None; nothing is filled in.

    flags: {flag: present} for the instruction-set extensions the record checked (reproduction.records.
    timing_record's "cpu_flags", e.g. avx2, avx512f, avx512_vpopcntdq); a record that lists the CPU's flags
    instead ("flags": [...]) gives True for each listed one. A flag missing from the dict was not recorded (look it
    up with .get: None). Load averages are the 1, 5 and 15 minute values. loaded: the record's top-level "loaded"
    (else the machine's): whether the load average exceeded the benchmark's limit of 1 per core.
    BenchmarkRecordError naming `where` (read_benchmark: the file) and the field if a field it reads is of another
    form than these."""
    def bad(field, why):
        raise BenchmarkRecordError(f"{where}: {field} {why}")

    if not isinstance(record, dict):
        bad("the record", f"is a JSON {type(record).__name__}, not an object")
    if not isinstance(record.get("machine", {}), dict):
        bad("machine", "is not an object")
    machine = record.get("machine", {})
    load = machine.get("load_average")
    if isinstance(load, dict):  # {"start": [...], "end": [...]}
        start, end = load.get("start"), load.get("end")
    elif load is not None:  # one reading
        start, end = load, None
    else:
        start, end = machine.get("load_average_at_start"), machine.get("load_average_at_end")
    for name, value in (("start", start), ("end", end)):
        if not _is_load(value):
            bad(f"machine's load average at the {name}", f"is {value!r:.60}, not three numbers")
    flags = machine.get("cpu_flags", machine.get("flags"))
    if flags is not None and not (isinstance(flags, dict) or (
            isinstance(flags, list) and all(isinstance(name, str) for name in flags))):
        bad("machine.cpu_flags (or flags)", "is neither {flag: present} nor a list of flag names")
    if flags is not None and not isinstance(flags, dict):
        flags = {name: True for name in flags}
    if not isinstance(machine.get("cpu_model"), (str, type(None))):
        bad("machine.cpu_model", "is not a string")
    if machine.get("cores") is not None and (not isinstance(machine["cores"], int) or isinstance(machine["cores"], bool)):
        bad("machine.cores", f"is {machine['cores']!r:.60}, not a whole number")
    loaded = record.get("loaded", machine.get("loaded"))
    return {"cpu_model": machine.get("cpu_model"), "cores": machine.get("cores"), "flags": flags,
            "load_average_start": start, "load_average_end": end,
            "loaded": None if loaded is None else bool(loaded)}


# ----------------------------------------------------------------------------------------------------------
# Comparisons on the same test images, and the exact null rate of a Monte Carlo check (notebooks 04, 06, 07)
# ----------------------------------------------------------------------------------------------------------

def paired_rates(a, b) -> dict:
    """Compare two rates measured on the same items (e.g. a_i = "net A misclassifies test image i", b_i the same
    for net B). Two error rates on one test set are not independent: only the items where a and b differ carry
    information about a − b, so the standard error of the difference is that of the mean of d_i = a_i − b_i,

        se = std(d) / √n = sqrt(n_ab + n_ba − (n_ab − n_ba)² / n) / n,

    with n_ab items where only a holds and n_ba where only b holds; and McNemar's exact test is the two-sided
    binomial test of n_ab against n_ab + n_ba trials at probability 1/2 (scipy.stats.binomtest).

    Returns {"n", "rate_a", "rate_b", "difference" (rate_a − rate_b), "only_a" (n_ab), "only_b" (n_ba),
    "se" (paired standard error of the difference), "p_value" (McNemar exact; 1.0 when no item differs)}.
    """
    from scipy.stats import binomtest

    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.ndim != 1 or a.dtype != bool or b.dtype != bool:
        raise ValueError(f"paired_rates needs two boolean vectors of one length (one entry per item), got "
                         f"{a.dtype} {a.shape} and {b.dtype} {b.shape}: pass e.g. pred_a != labels, pred_b != labels")
    n, only_a, only_b = len(a), int(np.sum(a & ~b)), int(np.sum(~a & b))
    d = a.astype(float) - b.astype(float)
    discordant = only_a + only_b
    p_value = binomtest(only_a, discordant, 0.5).pvalue if discordant else 1.0
    return {"n": n, "rate_a": float(a.mean()), "rate_b": float(b.mean()), "difference": float(d.mean()),
            "only_a": only_a, "only_b": only_b, "se": float(d.std() / np.sqrt(n)), "p_value": float(p_value)}


def sampled_mean_outside_rate(nu: np.ndarray, n_samples: int, k: float = 3.0) -> np.ndarray:
    """The exact probability, for each mean nu, that the average of n_samples independent ±1 draws with mean nu
    lies more than k standard errors from nu, the standard error being max(sqrt((1 − nu²)/n), 1/n) (the floor
    keeps units that are almost always ±1 finite, notebook 06 §2). It is the null rate of the check "how many
    Monte Carlo averages lie beyond k SE of ν": with no error in ν at all, binomial sampling alone (the number of
    +1 draws is Binomial(n, (1 + nu)/2)) puts this fraction beyond, which is not the Gaussian 2Φ(−k) when
    nu is near ±1 or n is small."""
    from scipy.stats import binom

    nu = np.asarray(nu, dtype=float)
    if np.any(np.abs(nu) > 1) or n_samples < 1:
        raise ValueError(f"need means in [-1, 1] and n_samples >= 1, got |nu| up to {np.abs(nu).max()} and "
                         f"n_samples {n_samples}")
    m = np.arange(n_samples + 1)                                    # number of +1 draws
    mean = 2 * m / n_samples - 1                                    # the sampled average for each m
    flat = nu.reshape(-1, 1)
    se = np.maximum(np.sqrt((1 - flat ** 2) / n_samples), 1 / n_samples)
    outside = np.abs(mean[None, :] - flat) > k * se
    return (binom.pmf(m[None, :], n_samples, (1 + flat) / 2) * outside).sum(axis=1).reshape(nu.shape)


# ----------------------------------------------------------------------------------------------------------
# A neighbour of EBP: probabilistic backpropagation's variance update, against exact Bayes (notebook 05)
# ----------------------------------------------------------------------------------------------------------

def _probit_terms(m, v, c, y, offset, noise_var):
    """z = yμ/σ and λ(z) = φ(z)/Φ(z) of a unit whose input is u = offset + Σ_i W_i c_i + noise, W_i ~ N(m_i, v_i)
    and the noise N(0, noise_var): μ = offset + Σ m_i c_i, σ² = noise_var + Σ v_i c_i² (the forward pass of a
    unit without hidden layers, notebook 05 §1)."""
    sigma2 = noise_var + np.sum(v * c ** 2, axis=-1)
    z = y * (offset + np.sum(m * c, axis=-1)) / np.sqrt(sigma2)
    return z, np.exp(log_phi_ratio(z)), sigma2


def probit_evidence_derivatives(m, v, c, y, offset=0.0, noise_var=0.0):
    """∂ ln Z/∂m_i and ∂ ln Z/∂v_i of the evidence Z = Φ(yμ/σ) of one label y = ±1, for the unit of
    _probit_terms: with λ = φ(z)/Φ(z),

        ∂ ln Z/∂m_i = y λ c_i / σ          (EBP's increment when v_i = 1: Δ x_j / √N, notebook 05 §1)
        ∂ ln Z/∂v_i = −λ z c_i² / (2σ²)    (through σ² only; EBP never needs it).
    """
    m, v, c = (np.asarray(a, dtype=float) for a in (m, v, c))
    if np.any(v < 0) or noise_var < 0 or y not in (-1, 1):
        raise ValueError(f"need variances v >= 0, noise_var >= 0 and a label y of ±1, got min v {v.min()}, "
                         f"noise_var {noise_var}, y {y}")
    z, lam, sigma2 = _probit_terms(m, v, c, y, offset, noise_var)
    return y * lam * c / np.sqrt(sigma2), -lam * z * c ** 2 / (2 * sigma2)


def adf_gaussian_update(m, v, d_m, d_v):
    """Assumed density filtering of independent Gaussian factors N(m_i, v_i) (Minka 2001), the update of
    probabilistic backpropagation (Hernández-Lobato & Adams 2015, eqs. 5 and 6): matching the mean and variance
    of N(m, v)·likelihood, normalised, gives

        m ← m + v ∂ln Z/∂m,        v ← v − v² [(∂ln Z/∂m)² − 2 ∂ln Z/∂v].

    EBP makes the first step (with v = 1) and never the second. Raises if a variance would not stay positive
    (a likelihood that is not log-concave in the weight can do that; a probit or Gaussian one cannot)."""
    m, v = np.asarray(m, dtype=float), np.asarray(v, dtype=float)
    v_new = v - v ** 2 * (d_m ** 2 - 2 * d_v)
    if np.any(v_new <= 0):
        raise ValueError(f"the ADF step would make a variance non-positive (smallest {v_new.min():.3g}): the "
                         f"likelihood is not log-concave here; PBP skips such a step")
    return m + v * d_m, v_new


def assumed_density_filter(c, y, m0, v0, offset=None, noise_var=None, update_variance=True):
    """Pass once over observations n = 1..n_obs in order (c: (n_obs, K) inputs of the weights, y: labels ±1,
    offset and noise_var: per observation, the rest of the unit's input), updating Gaussian factors
    N(m_i, v_i) of the K weights by probit_evidence_derivatives and adf_gaussian_update: probabilistic
    backpropagation's step (update_variance=True), or EBP's (False: only the mean moves, by v ∂ln Z/∂m).

    Returns (means, variances), each (n_obs + 1, K): row n after n observations, row 0 the prior m0, v0."""
    c = np.atleast_2d(np.asarray(c, dtype=float))
    n_obs = len(c)
    y = np.asarray(y)
    offset = np.zeros(n_obs) if offset is None else np.asarray(offset, dtype=float)
    noise_var = np.zeros(n_obs) if noise_var is None else np.asarray(noise_var, dtype=float)
    if y.shape != (n_obs,) or offset.shape != (n_obs,) or noise_var.shape != (n_obs,):
        raise ValueError(f"need one label, offset and noise variance per row of c ({n_obs} rows), got shapes "
                         f"{y.shape}, {offset.shape}, {noise_var.shape}")
    m = np.broadcast_to(np.asarray(m0, dtype=float), c.shape[1:]).copy()
    v = np.broadcast_to(np.asarray(v0, dtype=float), c.shape[1:]).copy()
    means, variances = [m.copy()], [v.copy()]
    for n in range(n_obs):
        d_m, d_v = probit_evidence_derivatives(m, v, c[n], int(y[n]), offset[n], noise_var[n])
        if update_variance:
            m, v = adf_gaussian_update(m, v, d_m, d_v)
        else:
            m = m + v * d_m
        means.append(m.copy())
        variances.append(v.copy())
    return np.array(means), np.array(variances)


def exact_one_weight_posterior(c, y, m0, v0, offset, noise_var, half_width: float = 12.0, n_grid: int = 4001):
    """Exact Bayes for one weight W ~ N(m0, v0) observed through probit labels,
    P(y_n | W = w) = Φ(y_n (offset_n + c_n w) / √noise_var_n) (the rest of the unit's input Gaussian and
    independent on each observation), by quadrature of prior × Π_n likelihood on a grid of m0 ± half_width·√v0.

    Returns {"mean", "var"}, each (n_obs + 1,) (entry n after n observations), and "w", "density" (the grid
    and the normalised posterior density after all of them)."""
    c, y, offset, noise_var = (np.asarray(a, dtype=float) for a in (c, y, offset, noise_var))
    if not (c.ndim == 1 and c.shape == y.shape == offset.shape == noise_var.shape):
        raise ValueError(f"need c, y, offset and noise_var as vectors of one length (one entry per observation), "
                         f"got shapes {c.shape}, {y.shape}, {offset.shape}, {noise_var.shape}")
    if np.any(noise_var <= 0) or v0 <= 0:
        raise ValueError("need noise_var > 0 (else the likelihood is a step the grid cannot integrate) and v0 > 0")
    w = np.linspace(m0 - half_width * np.sqrt(v0), m0 + half_width * np.sqrt(v0), n_grid)
    log_post = -(w - m0) ** 2 / (2 * v0)
    means, variances = [], []
    for n in range(len(c) + 1):
        if n:
            log_post = log_post + special.log_ndtr(y[n - 1] * (offset[n - 1] + c[n - 1] * w)
                                                   / np.sqrt(noise_var[n - 1]))
        p = np.exp(log_post - log_post.max())
        p /= p.sum()
        mean = np.sum(p * w)
        means.append(mean)
        variances.append(np.sum(p * (w - mean) ** 2))
    return {"mean": np.array(means), "var": np.array(variances), "w": w, "density": p / (w[1] - w[0])}


# ----------------------------------------------------------------------------------------------------------
# Figures drawn at the width the book shows them
# ----------------------------------------------------------------------------------------------------------

# The book (book/, `make book`) shows a cell's output in a column 688 CSS px wide at the 1280 x 900 window its
# browser test reads the pages in (wider windows give up to 790 px); a wider image is shrunk to fit, and its text
# with it. A figure drawn 14 inches wide at 100 dpi is shown at half size, its 10 pt tick labels 7 px high. So
# every figure is drawn at most BOOK_WIDTH inches wide at FIGURE_DPI, shown at its own size, and no text is
# smaller than MIN_FONT_PT: 8 pt at 100 dpi is 11 px. Panels that do not fit side by side at that width go in
# rows. tests/test_book_figures.py checks the saved figures against these numbers, and tests/test_book.py that
# the book's column is still BOOK_COLUMN_PX wide.
BOOK_COLUMN_PX = 688
FIGURE_DPI = 100
BOOK_WIDTH = BOOK_COLUMN_PX / FIGURE_DPI        # 6.88 inches
MIN_FONT_PT = 8
MIN_TEXT_PX = 10                                # what a reader can read: the smallest text, in px at book width


def _book_figsize(width: float | None, height: float) -> tuple[float, float]:
    width = BOOK_WIDTH if width is None else width
    if not 0 < width <= BOOK_WIDTH:
        raise ValueError(f"a figure for the book is at most BOOK_WIDTH = {BOOK_WIDTH} inches wide, not {width}")
    return width, height


def subplots(nrows: int = 1, ncols: int = 1, *, height: float, width: float | None = None, **options):
    """matplotlib.pyplot.subplots at the book's width (or `width` inches, narrower) and FIGURE_DPI; `options`
    go to pyplot.subplots (sharex, layout, gridspec_kw, ...). Returns (figure, axes) as pyplot.subplots does."""
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=_book_figsize(width, height), dpi=FIGURE_DPI, **options)


def subplot_mosaic(mosaic, *, height: float, width: float | None = None, **options):
    """matplotlib.pyplot.subplot_mosaic at the book's width, e.g. [["a", "b"], ["c", "c"]]: three panels in two
    rows, the third as wide as the figure. Returns (figure, dict of axes by name)."""
    import matplotlib.pyplot as plt

    return plt.subplot_mosaic(mosaic, figsize=_book_figsize(width, height), dpi=FIGURE_DPI, **options)


# ----------------------------------------------------------------------------------------------------------
# Sliders for a live kernel (notebooks 01, 02, 06), each beside a static figure of a few of its values
# ----------------------------------------------------------------------------------------------------------

def _figure_output(fig) -> dict:
    """A matplotlib figure as one display_data output (PNG), the form an ipywidgets Output widget holds; the
    figure is closed, so that the inline backend does not show it a second time in the cell's outputs."""
    import base64
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(fig)
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": base64.b64encode(buffer.getvalue()).decode("ascii"), "text/plain": repr(fig)}}


def slider_widget(draw, start: dict | None = None, **options):
    """One ipywidgets SelectionSlider per keyword (name=list of values) above an Output widget holding the
    figure draw(**values) returns, redrawn when a slider is released. The figure is written into the Output
    widget's state, never printed by the cell, so a run without a front end (nbval, nbconvert) sees no figure
    output and two runs record the same cell output. `start` gives initial values (default: each list's first)."""
    import ipywidgets

    if not options:
        raise ValueError("slider_widget needs at least one name=[values] keyword, e.g. alpha=[0.5, 1, 2]")
    start = start or {}
    if set(start) - set(options):
        raise ValueError(f"start names {sorted(set(start) - set(options))}, which have no slider; the sliders "
                         f"are {sorted(options)}")
    sliders = {name: ipywidgets.SelectionSlider(options=list(values), value=start.get(name, list(values)[0]),
                                                description=name, continuous_update=False)
               for name, values in options.items()}
    out = ipywidgets.Output()

    def redraw(_change=None):
        out.outputs = (_figure_output(draw(**{name: s.value for name, s in sliders.items()})),)

    for s in sliders.values():
        s.observe(redraw, names="value")
    redraw()
    return ipywidgets.VBox([*sliders.values(), out])


def show_slider(draw, description: str, start: dict | None = None, **options) -> None:
    """Display slider_widget(draw, start, **options). Its plain-text form, what nbval compares and what a viewer
    without widgets (the book, a static render) shows, is `description` instead of the widget's repr; the
    widget's own model id, which changes on every run, is in the widget-view output that nbval skips."""
    from IPython.display import display

    bundle = slider_widget(draw, start, **options)._repr_mimebundle_()
    bundle["text/plain"] = description
    display(bundle, raw=True)
