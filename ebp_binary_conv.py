"""The deployed binary CNN: EBP-D of a convolutional binary network, bit-packed, by im2col + XNOR-popcount.

A binary convolutional EBP network read out deterministically (EBP-D, ebp_lib.output_ebp_d) has ±1 kernels
W = sign(h), a real bias per map, hidden units sign(p·(W ⋆ v) + b) (+1 at 0) and a linear output layer. A
convolutional layer is one dense unit per output map applied at every position (ebp_conv), so it packs as the
dense layers of ebp_binary do, applied to patches:

* **Format.** Each map's kernel, (channels, C·k·k) in ebp_conv's column order (channel, row, column), is one
  ebp_binary.PackedLayer of `channels` units on K = C·k·k inputs (bit 1 = weight +1, a `connected` plane only where
  some h is exactly 0), with the layer's geometry (ebp_conv.Conv). Dense layers after the convolutions are
  ebp_binary's dense PackedLayers. Biases stay float64, as output_ebp_d adds them.
* **im2col.** The P patches of an input map (ebp_conv.patches) become P rows of K inputs: a convolution is the
  dense layer of its kernels on B·P rows, and its sums, (B·P, channels), are reordered channel-major into the flat
  maps ebp_lib stores (channels·P per image), so that the next layer reads them unchanged.
* **First layer on real pixels**: ebp_binary's byte tables over each patch (no multiplications), and its near-tie
  rule: a unit within a rigorous rounding bound of 0 (fan-in K, the patch's |x|) is decided by the exact rational
  sum. BLAS's float64 sum over the same K terms has the same bound, so outside it the signs agree.
* **Hidden layers on ±1 maps**: the maps' bits cut into patches and packed (bit 1 = +1), Σ W v = K − 2·popcount(w
  XOR v) per position: exact integers, p·S + b in float64 as output_ebp_d computes it.

Engines (output_sums(engine=...)), the same numbers, different speed:
  "numpy"  readable: ebp_binary.first_layer_sums / first_layer_signs / popcount_sums on the patch rows;
  "numba"  ebp_binary's compiled kernels on the same rows (byte tables, threshold and float64 recheck,
           popcount_sums_kernel); im2col and the reordering stay numpy;
  "auto"   the first layer's sums a float32 product with the ±1 kernels (ebp_binary's "blas" method: the units
           within the float32 rounding bound of 0 recomputed in float64, then exactly), which is faster than byte
           tables at a small fan-in (FIRST_LAYER_METHOD); below DIRECT_BELOW_BATCH images, the hidden
           convolutions direct, each patch packed on the fly (ebp_binary_conv_kernels.direct_conv_sums).
tests/test_binary_conv.py checks both engines against ebp_lib.output_ebp_d and each other;
scripts/binary_cnn_inference.py measures mismatches on the test images, the size and the speed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import ebp_binary
import ebp_binary_conv_kernels as conv_kernels
import ebp_binary_kernels as kernels
import ebp_conv
from ebp_lib import ebp_d_parameters, hard_sign

ENGINES = ("numpy", "numba", "auto")
# The compiled engines' method for a first layer on real pixels (ebp_binary.compiled_first_layer_words): "numba"
# its byte tables, "auto" a float32 product with the ±1 kernels. Byte tables pay 256 entries per 8 inputs per patch
# row, which a 5x5 kernel of a few maps does not repay (fan-in 25, 16 maps: 1,024 additions to save 400).
FIRST_LAYER_METHOD = {"numba": "packed", "auto": "blas"}
# Engine "auto" convolves ±1 maps directly (ebp_binary_conv_kernels) below this batch size, by im2col and the blocked
# popcount kernel from it on: packing each patch bit by bit costs more per image than numpy's vectorised im2col,
# which costs more per call. Measured on the [16, 32]-map net's second layer: direct 14 against 44 µs at batch 1,
# 87 against 79 µs at batch 6, 36 against 10 ms at batch 1,000 (rough: CPU time at a load average of about 8 on
# the 2-core AMD EPYC).
DIRECT_BELOW_BATCH = 5
CHUNK = 500  # images per pass: bounds the patch rows (500·144·25 float64 = 14 MB for a 5x5 first layer)


@dataclass
class PackedCNN:
    """A deployed binary CNN: per layer an ebp_binary.PackedLayer (a convolution's kernels as dense units on one
    patch) and its geometry (ebp_conv.Conv, None for a dense layer), the scale p of W v, and where it came from."""
    layers: list
    convs: list
    scale: float
    source: dict


def export_cnn(net) -> PackedCNN:
    """Pack a trained binary ebp_lib.Network with convolutional layers for EBP-D inference: W = sign(h), b, p.
    Refuses real weights, locally connected layers (ebp_binary.export_network packs those), a network without a
    convolution (use ebp_binary.export_network) and non-finite h or b."""
    if net.weights != "binary":
        raise ValueError(f"cannot pack a {net.weights!r}-weight network: its EBP-D output multiplies by the real "
                         f"means h; only binary networks (weights='binary') can be packed")
    if all(layer.conv is None for layer in net.layers):
        raise ValueError("this network has no convolutional layer: pack it with ebp_binary.export_network")
    layers, convs = [], []
    for k, (layer, (w, _)) in enumerate(zip(net.layers, ebp_d_parameters(net))):
        if layer.mask is not None:
            raise ValueError(f"layer {k + 1} is locally connected: ebp_binary_conv packs convolutional and dense "
                             f"layers only (ebp_binary.export_network packs locally connected nets)")
        if not (np.all(np.isfinite(layer.h)) and np.all(np.isfinite(layer.b))):
            raise ValueError(f"layer {k + 1} has non-finite h or b: there is no sign to pack; restore the network "
                             f"from a checkpoint")
        connected = ebp_binary.pack_bits(w != 0) if np.any(w == 0) else None
        layers.append(ebp_binary.PackedLayer(ebp_binary.pack_bits(w > 0), connected, layer.b.astype(np.float64),
                                             w.shape[1]))
        convs.append(layer.conv)
    scale = float(net.keep) if net.dropout == "sampled" else 1.0
    return PackedCNN(layers, convs, scale, {"architecture": net.architecture, "input_side": net.input_side,
                                            "dropout": net.dropout, "keep": net.keep})


def model_bytes(packed: PackedCNN) -> dict:
    """Bytes of the packed arrays (sign planes, mask planes, float64 biases), and of the same network in float32
    (one float32 per kernel weight and per bias, as a float32 convolution stores it); their ratio."""
    signs = sum(layer.signs.nbytes for layer in packed.layers)
    masks = sum(layer.connected.nbytes for layer in packed.layers if layer.connected is not None)
    biases = sum(layer.b.nbytes for layer in packed.layers)
    float32 = sum(4 * (layer.n_units * layer.n_inputs + layer.n_units) for layer in packed.layers)
    total = signs + masks + biases
    return {"signs": signs, "masks": masks, "biases": biases, "total": total, "float32": float32,
            "ratio_float32_over_packed": float32 / total}


# ----------------------------------------------------------------------------------------------------------
# im2col: maps ↔ patch rows
# ----------------------------------------------------------------------------------------------------------

def patch_rows(v: np.ndarray, g: ebp_conv.Conv) -> np.ndarray:
    """(B, C·S·S) flat maps → (B·P, K) rows, row b·P + p the patch of position p of image b (ebp_conv.patches)."""
    return np.ascontiguousarray(ebp_conv.patches(v, g).reshape(len(v) * g.positions, g.fan_in))


def to_maps(per_row: np.ndarray, g: ebp_conv.Conv) -> np.ndarray:
    """(B·P, channels) values of the patch rows → (B, channels·P) flat maps, channel-major (ebp_conv's layout)."""
    b = len(per_row) // g.positions
    return per_row.reshape(b, g.positions, g.channels).transpose(0, 2, 1).reshape(b, g.units)


# ----------------------------------------------------------------------------------------------------------
# Layers
# ----------------------------------------------------------------------------------------------------------

def first_signs(layer, g, x: np.ndarray, scale: float, engine: str, tally: dict) -> np.ndarray:
    """The first layer's units sign(p·Σ W x + b) ≥ 0 as booleans (B, units), near-ties decided exactly: a
    convolution on its patch rows, or a dense layer on the images."""
    rows = x if g is None else patch_rows(x, g)
    if engine == "numpy":
        sums = ebp_binary.first_layer_sums(layer, rows, chunk=4096)
        plus, near = ebp_binary.first_layer_signs(layer, rows, sums, scale)
    else:
        words, near = ebp_binary.compiled_first_layer_words(layer, rows, scale, FIRST_LAYER_METHOD[engine])
        plus = ebp_binary.unpack_bits(words, layer.n_units)
    tally["near_ties"] += near
    return plus if g is None else to_maps(plus, g)


def hidden_sums(layer, g, v: np.ndarray, engine: str) -> np.ndarray:
    """Σ W v (int64, (B, units)) of a layer on ±1 units v given as booleans (True = +1): XNOR-popcount of the
    packed patches (a convolution) or of the packed units (a dense layer); engine "auto" packs each patch on the
    fly (ebp_binary_conv_kernels.direct_conv_sums) below DIRECT_BELOW_BATCH images."""
    if engine == "auto" and g is not None and len(v) < DIRECT_BELOW_BATCH:
        return direct_sums(layer, g, v)
    rows = ebp_binary.pack_bits(v if g is None else ebp_conv.patches(v, g)).reshape(-1, ebp_binary.n_words(
        layer.n_inputs))
    if engine == "numpy":
        sums = ebp_binary.popcount_sums(layer, rows, chunk=4096)
    else:
        sums = np.empty((len(rows), layer.n_units), dtype=np.int64)
        kernels.popcount_sums_kernel(ebp_binary.work_array(layer, "signs_t"), ebp_binary.work_array(layer, "connected_t"),
                                     layer.connected is not None, layer.fan_in, rows, sums)
    return sums if g is None else to_maps(sums, g)


def direct_sums(layer, g, v: np.ndarray) -> np.ndarray:
    """hidden_sums of a convolution by the direct kernel: (B, channels·P) int64, channel-major."""
    maps = np.ascontiguousarray(v.reshape(len(v), g.in_channels, g.in_side, g.in_side), dtype=np.uint8)
    out = np.empty((len(v), g.channels, g.out_side, g.out_side), dtype=np.int64)
    connected = layer.signs if layer.connected is None else layer.connected  # unread without a mask plane
    conv_kernels.direct_conv_sums(maps, layer.signs, connected, layer.connected is not None, layer.fan_in, g.kernel,
                                  g.stride, out)
    return out.reshape(len(v), g.units)


def _forward(packed: PackedCNN, x: np.ndarray, engine: str, tally: dict) -> np.ndarray:
    """output_sums for one chunk of images."""
    p = packed.scale
    v = first_signs(packed.layers[0], packed.convs[0], x, p, engine, tally)
    for k, (layer, g) in enumerate(zip(packed.layers[1:], packed.convs[1:]), start=1):
        u = p * hidden_sums(layer, g, v, engine).astype(np.float64) + _per_unit(layer.b, g)
        if k == len(packed.layers) - 1:
            return u
        v = u >= 0
    raise ValueError("a packed CNN needs an output layer after its first layer")


def _per_unit(b: np.ndarray, g) -> np.ndarray:
    return b if g is None else ebp_conv.per_unit(b, g)


def output_sums(packed: PackedCNN, x, engine: str = "numpy", counts: dict | None = None) -> np.ndarray:
    """The last layer's pre-activations p·(W v) + b (float64, (n, classes)): EBP-D from the packed form, CHUNK
    images at a time. x: (n, S·S) standardised images, used in float64 as output_ebp_d uses float64 images. If
    `counts` is a dict, counts["near_ties"] is increased by the first-layer units decided by the exact sum."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {ENGINES}")
    x = np.asarray(x)
    first = packed.convs[0]
    if x.ndim != 2 or x.shape[1] != (packed.layers[0].n_inputs if first is None else first.inputs):
        side = packed.source["input_side"]
        raise ValueError(f"inputs have shape {x.shape}; this network needs (n, {side * side}) flattened, "
                         f"standardised images (as ebp_data.load_dataset gives them)")
    x = np.ascontiguousarray(x, dtype=np.float64)
    tally = {"near_ties": 0}
    if len(x) <= CHUNK:  # one pass: no copy into a concatenation (what batch 1 pays most for is such overhead)
        out = _forward(packed, x, engine, tally)
    else:
        out = np.concatenate([_forward(packed, x[s:s + CHUNK], engine, tally) for s in range(0, len(x), CHUNK)])
    if counts is not None:
        counts["near_ties"] = counts.get("near_ties", 0) + tally["near_ties"]
    return out


def predict(packed: PackedCNN, x, engine: str = "numpy", counts: dict | None = None) -> np.ndarray:
    """Predicted classes: argmax of the last layer's sums (as output_ebp_d(net, x).argmax(1))."""
    return output_sums(packed, x, engine, counts).argmax(axis=1)


def float32_parameters(net) -> list[tuple]:
    """(geometry, W, b) per layer of EBP-D in float32 (ebp_d_parameters): what the float32 baseline multiplies by."""
    return [(layer.conv, np.ascontiguousarray(w, dtype=np.float32), b.astype(np.float32))
            for layer, (w, b) in zip(net.layers, ebp_d_parameters(net))]


def float32_forward(parameters, x32: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """The float32 baseline of the speed comparison: output_ebp_d's maths in float32 on float32_parameters (a
    convolution by im2col + sgemm, ebp_conv.sign_layer; a dense layer by sgemm)."""
    v, p = x32, np.float32(scale)
    for k, (g, w, b) in enumerate(parameters):
        u = p * (v @ w.T) + b if g is None else ebp_conv.sign_layer(v, w, b, g, p)
        v = u if k == len(parameters) - 1 else hard_sign(u)
    return v
