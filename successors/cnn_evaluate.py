"""The successors' deployed CNN: BN folded into one threshold per output map, run through ebp_binary_conv's packed
inference (im2col + XNOR-popcount), checked image by image against a float64 evaluation of the unfolded net.

Folding (successors.evaluate for dense units, here per channel). Map o of a convolutional hidden layer outputs
sign(y_{o,p}), y = γ_o (a_{o,p} − m_o)/sd_o + β_o, sd_o = sqrt(v_o + ε), a = W_o ⋆ h. For γ_o > 0,
y ≥ 0 ⇔ a + (β_o sd_o/γ_o − m_o) ≥ 0; for γ_o < 0, y ≥ 0 ⇔ −a + (m_o − β_o sd_o/γ_o) ≥ 0. So the map is
sign(W'_o ⋆ h + b_o) with W'_o = sign(γ_o)·W_o (the whole kernel negated, still ±1) and b_o = sign(γ_o)(β_o sd_o/γ_o
− m_o): ebp_binary_conv's hidden unit sign(p·(W ⋆ v) + b), p = 1, one bias per map. Dense hidden layers fold per
unit, and the output z = e^s a + c has the argmax of a + c e^{−s}, as in successors.evaluate. γ = 0 is refused.

`float_logits` evaluates the unfolded net in float64 numpy, its convolutions by ebp_conv.correlate (im2col by
strided views): independent of both JAX's convolution and the packed engine.
"""
from __future__ import annotations

import numpy as np

import ebp_binary as eb
import ebp_binary_conv as ebc
import ebp_binary_conv_format
import ebp_binary_format
import ebp_conv
from successors import evaluate, mlp
from successors.cnn import CNN


def _numpy(tree: dict) -> dict:
    return {k: np.asarray(v, np.float64) for k, v in tree.items()}


def as_units(w: np.ndarray, layer) -> np.ndarray:
    """A layer's weights as (units, fan-in) rows: a kernel (channels, C, k, k) flattened in ebp_conv's column order
    (channel, row, column); a dense (n_in, n_out) matrix transposed."""
    return w.reshape(len(w), -1) if isinstance(layer, ebp_conv.Conv) else w.T


def threshold(gamma, beta, mean, var) -> tuple[np.ndarray, np.ndarray]:
    """(sign(γ), b) per channel or unit: the kernel's sign and the bias of the folded unit sign(sign(γ)·a + b)."""
    sd = np.sqrt(var + mlp.BN_EPSILON)
    flip = np.sign(gamma)
    return flip, flip * (beta * sd / gamma - mean)


def fold(net: CNN, weights: list, real: dict, stats: dict) -> ebc.PackedCNN:
    """The deployed CNN (±1 `weights`, BN per channel, output scale and bias) as ebp_binary_conv's PackedCNN."""
    real, stats = _numpy(real), _numpy(stats)
    layers = [*net.hidden, None]
    packed, convs = [], []
    for l, (layer, w) in enumerate(zip(layers, weights), start=1):
        w = np.asarray(w, np.float64)
        if not np.all(np.abs(w) == 1):
            raise ValueError(f"layer {l} has weights other than ±1; fold the deployed net (the method's "
                             f"`deployed(state)`), not its latent or relaxed weights")
        rows = as_units(w, layer)
        if l < len(weights):
            gamma = real[f"gamma{l}"]
            if np.any(gamma == 0):
                raise ValueError(f"layer {l}: BN scale γ is 0 for channels {np.flatnonzero(gamma == 0)[:5]}; such a "
                                 f"map is constant and has no ±1 form")
            flip, b = threshold(gamma, real[f"beta{l}"], stats[f"mean{l}"], stats[f"var{l}"])
            rows = rows * flip[:, None]
        else:
            b = real["bias"] * np.exp(-real["log_scale"])
        packed.append(eb.PackedLayer(eb.pack_bits(rows > 0), None, b.astype(np.float64), rows.shape[1]))
        convs.append(layer if isinstance(layer, ebp_conv.Conv) else None)
    return ebc.PackedCNN(packed, convs, 1.0, {"architecture": net.architecture, "input_side": 28, "dropout": None,
                                              "keep": 1.0, "h_dtype": "sign"})


def float_logits(net: CNN, weights: list, real: dict, stats: dict, x: np.ndarray) -> np.ndarray:
    """The unfolded deployed CNN in float64 numpy: convolutions by ebp_conv.correlate, BN per channel on running
    statistics, sign units (+1 at 0)."""
    real, stats = _numpy(real), _numpy(stats)
    h = np.asarray(x, np.float64)
    for l, (layer, w) in enumerate(zip(net.hidden, weights[:-1]), start=1):
        w = np.asarray(w, np.float64)
        conv = isinstance(layer, ebp_conv.Conv)
        a = ebp_conv.correlate(h, as_units(w, layer), layer) if conv else h @ w

        def spread(v, conv=conv, layer=layer):  # a per-channel value at every position of its map
            return ebp_conv.per_unit(v, layer) if conv else v
        y = spread(real[f"gamma{l}"]) * (a - spread(stats[f"mean{l}"])) / np.sqrt(
            spread(stats[f"var{l}"]) + mlp.BN_EPSILON) + spread(real[f"beta{l}"])
        h = np.where(y >= 0, 1.0, -1.0)
    return np.exp(real["log_scale"]) * (h @ np.asarray(weights[-1], np.float64)) + real["bias"]


def packed_check(net: CNN, weights: list, real: dict, stats: dict, x: np.ndarray, labels: np.ndarray,
                 predictions: dict | None = None) -> dict:
    """successors.evaluate.packed_check for a CNN: the packed net's test error (ebp_binary_conv.predict, engine
    "auto"), the images on which its prediction differs from float_logits', the first layer's near ties decided
    exactly, its bytes and those of the same net in float32; its predicted classes go into
    `predictions["deployed"]` where a dict is given."""
    packed = fold(net, weights, real, stats)
    counts: dict = {}
    packed_pred = ebc.predict(packed, x, engine="auto", counts=counts)
    if predictions is not None:
        predictions["deployed"] = packed_pred
    float_pred = float_logits(net, weights, real, stats, x).argmax(axis=1)
    size = ebc.model_bytes(packed)
    return {"error": float(np.mean(packed_pred != labels)), "mismatches": int(np.sum(packed_pred != float_pred)),
            "near_ties": int(counts.get("near_ties", 0)), "model_bytes": size["total"],
            "float32_bytes": size["float32"]}


def deployed_check(net, weights: list, best, x, y, predictions: dict, net_path) -> dict:
    """The packed check of a best state's deployed net (successors.evaluate's for the dense net, `net` None;
    packed_check for a CNN), its packed form written to `net_path` (ebp_binary_format or ebp_binary_conv_format)."""
    if net is None:
        packed = evaluate.packed_check(weights, best["real"], best["stats"], x, y, predictions)
        ebp_binary_format.save_packed(net_path, evaluate.fold(weights, best["real"], best["stats"]))
        return packed
    packed = packed_check(net, weights, best["real"], best["stats"], x, y, predictions)
    ebp_binary_conv_format.save_cnn(net_path, fold(net, weights, best["real"], best["stats"]))
    return packed
