"""What every successor run reports: the deployed ±1 net through ebp_binary's packed inference, and the quality of
probabilistic outputs.

Folding (successors.mlp). A hidden unit of the trained net outputs sign(y), y = γ (a − m)/sd + β, sd = sqrt(v + ε),
a = W·h. For γ > 0, y ≥ 0 ⇔ a + (β sd/γ − m) ≥ 0; for γ < 0, y ≥ 0 ⇔ −a + (m − β sd/γ) ≥ 0. So the unit is
sign(W'·h + b) with W' = sign(γ)·W (still ±1) and b = sign(γ)(β sd/γ − m), ebp_binary's hidden unit
(sign(p·(W v) + b), +1 at 0, p = 1). The output z = e^s a + c has the argmax of a + c e^{−s}. γ = 0 (a constant
unit) has no such form and is refused. `float_predictions` evaluates the unfolded net in float64 numpy;
`packed_check` compares the packed net's predictions with it image by image.

Calibration. NLL = −(1/n) Σ ln p(y_n | x_n); ECE (Naeini et al. 2015; Guo et al. 2017) with ECE_BINS equal-width
bins of the top-class confidence: Σ_b (|B_b|/n) |accuracy(B_b) − confidence(B_b)|.
"""
from __future__ import annotations

import numpy as np

import ebp_binary as eb
from successors import mlp

ECE_BINS = 15


def _numpy(tree: dict) -> dict:
    return {k: np.asarray(v, np.float64) for k, v in tree.items()}


def fold(weights: list, real: dict, stats: dict) -> eb.PackedNetwork:
    """The deployed net (±1 `weights`, BN, output scale and bias) as ebp_binary's PackedNetwork."""
    real, stats = _numpy(real), _numpy(stats)
    layers = []
    for l, w in enumerate(weights, start=1):
        w = np.asarray(w, np.float64)
        if not np.all(np.abs(w) == 1):
            raise ValueError(f"layer {l} has weights other than ±1; fold the deployed net (the method's "
                             f"`deployed(state)`), not its latent or relaxed weights")
        if l < len(weights):
            gamma, beta = real[f"gamma{l}"], real[f"beta{l}"]
            if np.any(gamma == 0):
                raise ValueError(f"layer {l}: BN scale γ is 0 for units {np.flatnonzero(gamma == 0)[:5]}; such a "
                                 f"unit is constant and has no ±1 form")
            sd = np.sqrt(stats[f"var{l}"] + mlp.BN_EPSILON)
            flip = np.sign(gamma)
            w, b = w * flip, flip * (beta * sd / gamma - stats[f"mean{l}"])
        else:
            b = real["bias"] * np.exp(-real["log_scale"])
        layers.append(eb.PackedLayer(eb.pack_bits(w.T > 0), None, b.astype(np.float64), w.shape[0]))
    source = {"architecture": [w.shape[1] for w in weights[:-1]], "input_side": 28, "dropout": None, "keep": 1.0,
              "h_dtype": "sign"}
    return eb.PackedNetwork(layers, 1.0, source)


def float_logits(weights: list, real: dict, stats: dict, x: np.ndarray) -> np.ndarray:
    """The unfolded deployed net in float64 numpy: BN on running statistics, sign units (+1 at 0)."""
    real, stats = _numpy(real), _numpy(stats)
    h = np.asarray(x, np.float64)
    for l, w in enumerate(weights[:-1], start=1):
        a = h @ np.asarray(w, np.float64)
        y = real[f"gamma{l}"] * (a - stats[f"mean{l}"]) / np.sqrt(stats[f"var{l}"] + mlp.BN_EPSILON) + real[f"beta{l}"]
        h = np.where(y >= 0, 1.0, -1.0)
    return np.exp(real["log_scale"]) * (h @ np.asarray(weights[-1], np.float64)) + real["bias"]


def packed_check(weights: list, real: dict, stats: dict, x: np.ndarray, labels: np.ndarray,
                 predictions: dict | None = None) -> dict:
    """Test error of the packed net (ebp_binary.predict, engine "auto"), and the images on which its prediction
    differs from the float64 evaluation of the unfolded net (float_logits); the packed net's predicted classes
    go into `predictions["deployed"]` where a dict is given."""
    packed = fold(weights, real, stats)
    counts: dict = {}
    packed_pred = eb.predict(packed, x, engine="auto", counts=counts)
    if predictions is not None:
        predictions["deployed"] = packed_pred
    float_pred = float_logits(weights, real, stats, x).argmax(axis=1)
    return {"error": float(np.mean(packed_pred != labels)), "mismatches": int(np.sum(packed_pred != float_pred)),
            "near_ties": int(counts.get("near_ties", 0)), "model_bytes": eb.model_bytes(packed)["total"]}


def nll(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """−(1/n) Σ ln p(y_n | x_n) (probabilities floored at 1e-300, so a confident mistake counts ~690, not ∞)."""
    return float(-np.mean(np.log(np.maximum(probabilities[np.arange(len(labels)), labels], 1e-300))))


def reliability(probabilities: np.ndarray, labels: np.ndarray, n_bins: int = ECE_BINS) -> dict:
    """Per equal-width confidence bin: count, mean confidence, accuracy (None where empty); and the ECE."""
    confidence = probabilities.max(axis=1)
    correct = probabilities.argmax(axis=1) == labels
    which = np.minimum((confidence * n_bins).astype(int), n_bins - 1)
    counts, conf, acc = [], [], []
    for b in range(n_bins):
        inside = which == b
        counts.append(int(inside.sum()))
        conf.append(float(confidence[inside].mean()) if inside.any() else None)
        acc.append(float(correct[inside].mean()) if inside.any() else None)
    ece = sum(n / len(labels) * abs(a - c) for n, a, c in zip(counts, acc, conf) if n)
    return {"bins": n_bins, "count": counts, "confidence": conf, "accuracy": acc, "ece": float(ece)}


def error(probabilities: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(probabilities.argmax(axis=1) != labels))
