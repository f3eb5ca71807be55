"""The deployed binary network: EBP-D with bit-packed weights, inferred by XNOR + popcount.

A binary EBP network read out deterministically (EBP-D, `ebp_lib.output_ebp_d`) has weights W = sign(h) ∈ {−1, +1},
a real bias b, hidden units v' = sign(p·(W v) + b) (+1 at 0; p is the keep probability under sampled dropout,
else 1) and a linear output layer whose argmax is the prediction. Nothing in it needs a real weight, so:

* **Format.** Each unit's weights are stored as bits in uint64 words (bit i of a row is 1 where the weight is +1;
  bit i is bit i % 64 of word i // 64, the last word padded with 0 bits). A fully connected ("dense") layer stores
  one bit per input. A locally connected layer (architecture ("local", block)) stores only each unit's
  block x block patch, row by row: which inputs a unit sees follows from the architecture (block size, input side:
  unit (a, c) sees inputs (a + r, c + q) for r, q < block, as ebp_lib.local_mask builds it), so it is derived, not
  stored; a block-13 layer on 28x28 images keeps 169 of 784 bits per unit. Weights that are 0 in EBP-D beyond that
  (h exactly 0) are marked by a second bit-plane, `connected`, over the same positions, stored only where there
  are such weights (their sign bit is 0). Biases stay float64, as output_ebp_d adds them. Files: this module
  holds the network in memory only; ebp_binary_format writes and reads it (save_packed, load_packed: a versioned
  .npz, no pickle, bad files refused with PackedFormatError).
* **Hidden layers on ±1 inputs** (bit 1 = +1, bit 0 = −1): W_i v_i = +1 where the bits agree and −1 where they
  differ, so Σ_i W_i v_i = K − 2·popcount(w XOR v) (exact integers). Padding bits are 0 in both words and never
  differ; with a mask plane, Σ = |M| − 2·popcount((w XOR v) AND m). A local layer on ±1 inputs sums its patch
  (local_sums: integers, exact in float32).
* **First layer on real pixels**, no multiplications: Σ_i W_i x_i = Σ_{W=+1} x − Σ_{W=−1} x, which is
  2·Σ_{W=+1} x − Σ x for a dense layer. Each subset sum is read from byte tables: for every group of 8
  consecutive inputs, all 256 subset sums are built with one addition each (`byte_tables`), and a unit's
  Σ_{W=+1} x is the sum of the table entries its weight bytes select (K/8 additions instead of K). A local layer
  adds its patch's inputs with signs (`local_sums`).
* **Exact agreement with output_ebp_d.** Hidden-layer and output sums are exact integers, computed as
  output_ebp_d computes them (p·S + b in float64). The first layer's real sums are rounded in another order than
  BLAS's (and, in the compiled local kernel and the float32 BLAS product, in float32), so a unit whose
  pre-activation lies within a rigorous rounding bound of 0 (`near_tie_tolerance`) is recomputed in float64 and,
  if still within the float64 bound, decided by the exact rational sum (`exact_pre_activation`), and counted.

Engines (output_sums(engine=...)); every engine gives the same numbers, they differ in speed only:
  "numpy"  readable numpy, the reference of everything else;
  "numba"  the packed kernels of ebp_binary_kernels for every layer (XNOR-popcount, byte tables, patch sums);
  "blas"   a float32 BLAS product on the ±1 weights for every layer (exact integers on ±1 inputs; on real pixels
           its float32 sums go through the near-tie bound above);
  "auto"   per layer the faster of "numba" and "blas" at the batch size: by the measured calibration stored with
           the model (`calibrate`, PackedNetwork.plan, saved in its file by ebp_binary_format), else by the stated rule
           DEFAULT_BLAS_FROM_BATCH (see `layer_methods`).
tests/test_kernels.py checks each kernel against its numpy function here; tests/test_binary_inference.py every
engine against ebp_lib.output_ebp_d and each other; scripts/binary_inference.py measures the speed and size
(outputs/binary_inference.json). EBP-D's weights come from ebp_lib.ebp_d_parameters.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

import ebp_binary_kernels as kernels
from ebp_lib import ebp_d_parameters, local_mask

WORD_BITS = 64
INFERENCE_ENGINES = ("numpy", "numba", "blas", "auto")  # output_sums(engine=...)
LAYER_METHODS = ("packed", "blas")  # what "auto" chooses between, per layer
UNIT_ROUNDOFF = np.finfo(np.float64).eps / 2  # u = 2^-53
UNIT_ROUNDOFF32 = float(np.finfo(np.float32).eps) / 2  # 2^-24
NEAR_TIE_SAFETY = 16  # the float64 tolerance is this many times (K + 2)·u·(p·Σ|x| + |b|), several times the bounds
NEAR_TIE_SAFETY32 = 2  # the same for float32 sums, whose rigorous bound is (K + 1)·u32·p·Σ|x| to 1e-4 (the p·S + b
# in float64 adds 1e-16 relative): twice the bound; every unit inside it is recomputed in float64
# The stated rule of engine "auto" for a model without a calibration: a dense first layer (real pixels) takes the
# float32 BLAS product from this batch size on (sgemm reuses each weight across images, the byte tables cannot;
# calibrated crossovers seen here: 32-64); every other layer takes its packed kernel at every batch size
# (XNOR-popcount of the [800, 800] layer, with its threshold and packing: 6x faster than sgemm alone at batch 1,
# 7.6x at batch 1000, scripts/binary_inference.py; rough, at a load average of about 6 on the 2-core AMD EPYC).
DEFAULT_BLAS_FROM_BATCH = 8
CALIBRATION_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
BLAS_CHUNK = 1024  # images per float32 product of a first layer (bounds the float32 copies; 256 measured slower)


# ----------------------------------------------------------------------------------------------------------
# Bits: rows of booleans <-> rows of uint64 words
# ----------------------------------------------------------------------------------------------------------

def n_words(n_bits: int) -> int:
    """Words of 64 bits needed for n_bits (the last word is padded with 0 bits)."""
    return -(-int(n_bits) // WORD_BITS)


def pack_bits(bits) -> np.ndarray:
    """(..., K) booleans -> (..., ceil(K/64)) uint64; element i is bit i % 64 of word i // 64, padding bits 0."""
    bits = np.asarray(bits, dtype=bool)
    k = bits.shape[-1]
    padded = np.zeros(bits.shape[:-1] + (n_words(k) * WORD_BITS,), dtype=bool)
    padded[..., :k] = bits
    return np.packbits(padded, axis=-1, bitorder="little").view("<u8").astype(np.uint64, copy=False)


def unpack_bits(words: np.ndarray, n_bits: int) -> np.ndarray:
    """Inverse of pack_bits: (..., words) uint64 -> (..., n_bits) booleans."""
    as_bytes = np.ascontiguousarray(words, dtype="<u8").view(np.uint8)
    return np.unpackbits(as_bytes, axis=-1, count=n_bits, bitorder="little").astype(bool)


def word_bytes(words: np.ndarray, n_bits: int) -> np.ndarray:
    """The bytes of packed rows, little-endian: byte j holds inputs 8j..8j+7 (bit k = input 8j+k); only the
    ceil(K/8) bytes that hold inputs are kept."""
    return np.ascontiguousarray(np.ascontiguousarray(words, dtype="<u8").view(np.uint8)[..., :-(-int(n_bits) // 8)])


# ----------------------------------------------------------------------------------------------------------
# Connectivity of a locally connected layer, from the architecture
# ----------------------------------------------------------------------------------------------------------

def patch_inputs(input_side: int, block: int) -> np.ndarray:
    """(units, block²) int64: the input that patch position r·block + q of unit a·m + c sees, (a + r)·side + c + q
    (m = side − block + 1): the connectivity of ebp_lib.local_mask(side, block), row by row."""
    m = input_side - block + 1
    a, c, r, q = np.meshgrid(np.arange(m), np.arange(m), np.arange(block), np.arange(block), indexing="ij")
    return ((a + r) * input_side + c + q).reshape(m * m, block * block).astype(np.int64)


def _check_local(local, n_inputs: int, n_units: int) -> str | None:
    """Why (input_side, block) cannot describe a local layer of n_inputs inputs and n_units units; None if it can."""
    if not (isinstance(local, (list, tuple)) and len(local) == 2
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in local)):
        return f"local {local!r} must be [input_side, block], two integers"
    side, block = int(local[0]), int(local[1])
    if side < 1 or side * side != n_inputs:
        return f"input side {side} does not square to its {n_inputs} inputs"
    if not 1 <= block <= side:
        return f"block size {block} must be between 1 and the input side {side}"
    if (side - block + 1) ** 2 != n_units:
        return f"a block-{block} layer on a {side}x{side} map has {(side - block + 1) ** 2} units, not {n_units}"
    return None


# ----------------------------------------------------------------------------------------------------------
# The packed network
# ----------------------------------------------------------------------------------------------------------

@dataclass
class PackedLayer:
    """One layer of a deployed binary network.

    signs (V, words) uint64: bit i of row v is 1 where the weight at position i is +1, 0 where it is −1, where it
    is not connected, and in the padding. The positions are the K inputs of a dense layer, or the block² patch
    positions r·block + q of a local layer (local = (input_side, block); its connectivity is derived, see
    patch_inputs). connected (V, words) uint64 or None: 1 where the weight at a position is ≠ 0 (None: all are).
    b (V,) float64: the real bias. n_inputs: K.
    """
    signs: np.ndarray
    connected: np.ndarray | None
    b: np.ndarray
    n_inputs: int
    local: tuple[int, int] | None = None
    # derived, not stored: connected positions per unit |M_v|, and for a dense layer the row bytes where W = +1 and
    # where W = −1 (minus is None without a mask: there Σ_{W=−1} x = Σ x − Σ_{W=+1} x)
    fan_in: np.ndarray = field(init=False, repr=False)
    plus_bytes: np.ndarray | None = field(init=False, repr=False)
    minus_bytes: np.ndarray | None = field(init=False, repr=False)
    _work: dict = field(init=False, repr=False, default_factory=dict)  # working copies of the compiled engines

    def __post_init__(self):
        if self.local is not None:
            self.local = (int(self.local[0]), int(self.local[1]))
            problem = _check_local(self.local, self.n_inputs, len(self.signs))
            if problem:
                raise ValueError(problem)
        if self.signs.ndim != 2 or self.signs.shape[1] != n_words(self.n_positions):
            raise ValueError(f"signs have shape {self.signs.shape}; {self.n_positions} positions per unit need "
                             f"{n_words(self.n_positions)} words")
        if self.connected is None:
            self.fan_in = np.full(len(self.signs), self.n_positions, dtype=np.int64)
        else:
            self.fan_in = np.bitwise_count(self.connected).sum(axis=1, dtype=np.int64)
        self.plus_bytes = self.minus_bytes = None
        if self.local is None:
            self.plus_bytes = word_bytes(self.signs, self.n_inputs)
            if self.connected is not None:
                self.minus_bytes = word_bytes(self.connected & ~self.signs, self.n_inputs)

    @property
    def n_units(self) -> int:
        return len(self.signs)

    @property
    def n_positions(self) -> int:
        """Bits per unit: K for a dense layer, block² for a local one."""
        return self.n_inputs if self.local is None else self.local[1] ** 2


def position_weights(layer: PackedLayer) -> np.ndarray:
    """(V, positions) int8: the weight −1, 0 or +1 at each stored position (dense: the inputs; local: the patch)."""
    plus = unpack_bits(layer.signs, layer.n_positions)
    weights = np.where(plus, 1, -1).astype(np.int8)
    if layer.connected is not None:
        weights[~unpack_bits(layer.connected, layer.n_positions)] = 0
    return weights


def dense_weights(layer: PackedLayer) -> np.ndarray:
    """(V, K) int8: the layer's EBP-D weights sign(h) (0 off a local layer's patch and where h = 0), as in
    ebp_lib.ebp_d_parameters."""
    weights = position_weights(layer)
    if layer.local is None:
        return weights
    dense = np.zeros((layer.n_units, layer.n_inputs), dtype=np.int8)
    np.put_along_axis(dense, patch_inputs(*layer.local), weights, axis=1)
    return dense


def patch_weights(layer: PackedLayer) -> np.ndarray:
    """(block, block, V) int8 of a local layer: patch[r, q, unit] is the weight of `unit` on its patch position
    (r, q), the layout of local_sums."""
    block = layer.local[1]
    return np.ascontiguousarray(position_weights(layer).reshape(layer.n_units, block, block).transpose(1, 2, 0))


@dataclass
class PackedNetwork:
    """A deployed binary network: its layers, the scale p of W v (keep probability under sampled dropout, else 1),
    a description of where it came from (architecture, input side, dropout, keep; not used by inference), and the
    plan of engine "auto" (None: the stated rule; see calibrate and layer_methods)."""
    layers: list[PackedLayer]
    scale: float
    source: dict
    plan: dict | None = None

    @property
    def sizes(self) -> list[int]:
        return [self.layers[0].n_inputs] + [layer.n_units for layer in self.layers]


def export_network(net) -> PackedNetwork:
    """Pack a trained binary ebp_lib.Network for EBP-D inference: W = sign(h) (times the mask), b, the scale p.

    A layer ("local", block) whose mask is ebp_lib.local_mask(side, block) stores its patches only (its mask is
    derived from the architecture); any other layer is dense. A layer gets a `connected` plane only if some EBP-D
    weight on its stored positions is 0 (h exactly 0). Refuses a real-weight network (EBP-D multiplies by the real
    means h, which have no ±1 form) and non-finite h or b.
    """
    if net.weights != "binary":
        raise ValueError(f"cannot pack a {net.weights!r}-weight network: its EBP-D output multiplies by the real "
                         f"means h, which have no ±1 form; only binary networks (weights='binary') can be packed")
    layers, side = [], net.input_side
    for k, (spec, layer, (w, _)) in enumerate(zip(net.architecture, net.layers, ebp_d_parameters(net))):
        if not (np.all(np.isfinite(layer.h)) and np.all(np.isfinite(layer.b))):
            raise ValueError(f"layer {k + 1} has non-finite h or b: there is no sign to pack; retrain or restore "
                             f"the network from a checkpoint")
        local = None
        if isinstance(spec, (tuple, list)) and len(spec) == 2 and spec[0] == "local" and side is not None:
            block = int(spec[1])
            if layer.mask is not None and np.array_equal(np.asarray(layer.mask) != 0, local_mask(side, block)):
                local = (side, block)
                w = np.take_along_axis(w, patch_inputs(side, block), axis=1)  # the patch, row by row
            side = side - block + 1
        else:
            side = None
        connected = pack_bits(w != 0) if np.any(w == 0) else None
        layers.append(PackedLayer(pack_bits(w > 0), connected, layer.b.astype(np.float64), layer.h.shape[1], local))
    scale = float(net.keep) if net.dropout == "sampled" else 1.0
    source = {"architecture": net.architecture, "input_side": net.input_side, "dropout": net.dropout,
              "keep": net.keep, "h_dtype": str(net.layers[0].h.dtype)}
    return PackedNetwork(layers, scale, source)


def model_bytes(packed: PackedNetwork) -> dict:
    """Bytes of the packed arrays: sign planes, mask planes, biases (float64), and their total."""
    signs = sum(layer.signs.nbytes for layer in packed.layers)
    masks = sum(layer.connected.nbytes for layer in packed.layers if layer.connected is not None)
    biases = sum(layer.b.nbytes for layer in packed.layers)
    return {"signs": signs, "masks": masks, "biases": biases, "total": signs + masks + biases}


# ----------------------------------------------------------------------------------------------------------
# Inference, readable numpy (engine="numpy"): the reference of the compiled engines
# ----------------------------------------------------------------------------------------------------------

def byte_tables(x: np.ndarray) -> np.ndarray:
    """T[n, c, j] = Σ_{bits k of c} x[n, 8j + k]: all 256 subset sums of each group j of 8 consecutive inputs.

    Built by doubling with one addition per entry: the entries whose highest bit is k are the entries below 2^k
    plus x[n, 8j + k]. Inputs past K (the last group's padding) count as 0. The group index is the last axis, so
    each addition runs over all groups at once.
    """
    batch, k = x.shape
    groups = -(-k // 8)
    padded = np.zeros((batch, groups * 8))
    padded[:, :k] = x
    by_bit = padded.reshape(batch, groups, 8).transpose(0, 2, 1)  # (batch, 8, groups): input 8j + bit
    table = np.empty((batch, 256, groups))
    table[:, 0] = 0.0
    for bit in range(8):
        low = 1 << bit
        table[:, low:2 * low] = table[:, :low] + by_bit[:, bit:bit + 1]
    return table


def _table_sums(table: np.ndarray, row_bytes: np.ndarray) -> np.ndarray:
    """(batch, V): Σ_j table[n, row_bytes[v, j], j], the subset sums that each unit's weight bytes select."""
    groups = row_bytes.shape[1]
    flat_index = row_bytes.astype(np.intp) * groups + np.arange(groups)  # into table[n] flattened
    return np.take(table.reshape(len(table), -1), flat_index, axis=1).sum(axis=-1)


def local_sums(layer: PackedLayer, x: np.ndarray) -> np.ndarray:
    """Σ_i W_vi x_i of a local layer (float64): with the images as side x side maps, the weights of patch position
    (r, q) of all units multiply the window x[r : r + m, q : q + m] (m = side − block + 1), added position by
    position, q outer, r inner (the compiled kernel, in float32, adds four rows r at a time)."""
    side, block = layer.local
    m = side - block + 1
    images = np.asarray(x, dtype=np.float64).reshape(len(x), side, side)
    patch = patch_weights(layer).astype(np.float64)
    out = np.zeros((len(x), layer.n_units))
    for q in range(block):
        for r in range(block):
            out += patch[r, q] * images[:, r:r + m, q:q + m].reshape(len(x), -1)
    return out


def first_layer_sums(layer: PackedLayer, x: np.ndarray, chunk: int = 16) -> np.ndarray:
    """Σ_i W_vi x_i on real inputs without multiplications by weights (module docstring): for a dense layer
    2·Σ_{W=+1} x − Σ x, or with a mask plane Σ_{W=+1} x − Σ_{W=−1} x, from byte tables, `chunk` images at a time
    to bound the memory; for a local layer local_sums."""
    if layer.local is not None:
        return local_sums(layer, x)
    out = np.empty((len(x), layer.n_units))
    for start in range(0, len(x), chunk):
        xb = x[start:start + chunk]
        table = byte_tables(xb)
        positive = _table_sums(table, layer.plus_bytes)
        if layer.minus_bytes is None:
            out[start:start + chunk] = (positive + positive) - xb.sum(axis=1, keepdims=True)
        else:
            out[start:start + chunk] = positive - _table_sums(table, layer.minus_bytes)
    return out


def popcount_sums(layer: PackedLayer, v_words: np.ndarray, chunk: int = 64) -> np.ndarray:
    """Σ_i W_vi v_i for ±1 inputs packed as bits (bit 1 = +1), exact int64: for a dense layer K − 2·popcount(w XOR v),
    or with a mask plane |M_v| − 2·popcount((w XOR v) AND m_v), `chunk` images at a time to bound the memory; for a
    local layer local_sums of the ±1 values (integers, exact)."""
    if layer.local is not None:
        pm1 = np.where(unpack_bits(v_words, layer.n_inputs), 1.0, -1.0)
        return np.rint(local_sums(layer, pm1)).astype(np.int64)
    out = np.empty((len(v_words), layer.n_units), dtype=np.int64)
    for start in range(0, len(v_words), chunk):
        differ = layer.signs[None, :, :] ^ v_words[start:start + chunk, None, :]
        if layer.connected is not None:
            differ &= layer.connected
        out[start:start + chunk] = layer.fan_in - 2 * np.bitwise_count(differ).sum(axis=-1, dtype=np.int64)
    return out


def near_tie_tolerance(layer: PackedLayer, x: np.ndarray, scale: float, unit_roundoff: float = UNIT_ROUNDOFF,
                       safety: float = NEAR_TIE_SAFETY) -> np.ndarray:
    """(batch, V): the band around 0 within which a first layer's u = p·S̃ + b, from sums S̃ rounded with unit
    roundoff u (float64 by default), may have the wrong sign.

    Any summation of K terms, in any order, errs by at most γ_K·Σ|terms| (γ_K ≈ K·u); in float64 the byte-table
    sums (P twice, Σx once, a subtraction) and BLAS's dot product, each followed by p· and + b, are together within
    4·(K + 2)·u·(p·Σ|x| + |b|) of the exact u. float32 sums (u = 2^-24) of the inputs rounded to float32 err by at
    most (K + 1)·u·Σ|x|, then p· and + b in float64. The band is `safety` times (K + 2)·u·(p·Σ|x| + 2^-126 + |b|)
    (NEAR_TIE_SAFETY = 16 in float64, NEAR_TIE_SAFETY32 = 2 in float32; the 2^-126 covers inputs below float32's
    normal range, rounded to within 2^-150 absolutely): outside it the rounded sign is the exact sign (and, in
    float64, BLAS's); inside it, the unit is recomputed (float64, then exact_pre_activation). The compiled
    threshold also lists every unit of an image whose p·Σ|x| could overflow float32 (ebp_binary_kernels.LARGE).
    """
    magnitude = scale * np.abs(x).sum(axis=1, keepdims=True) + kernels.SMALLEST_NORMAL32 + np.abs(layer.b)
    return safety * (layer.n_inputs + 2) * unit_roundoff * magnitude


def exact_pre_activation(layer: PackedLayer, x_row: np.ndarray, unit: int, scale: float) -> Fraction:
    """p·Σ_i W_i x_i + b for one unit and one image, in exact rational arithmetic (the near-tie decider)."""
    weights = dense_weights_row(layer, unit)
    total = sum((Fraction(float(xi)) if w > 0 else -Fraction(float(xi))) for xi, w in zip(x_row, weights) if w)
    return Fraction(scale) * total + Fraction(float(layer.b[unit]))


def dense_weights_row(layer: PackedLayer, unit: int) -> np.ndarray:
    """(K,) int8: one unit's row of dense_weights (without building the whole matrix)."""
    row = np.where(unpack_bits(layer.signs[unit], layer.n_positions), 1, -1).astype(np.int8)
    if layer.connected is not None:
        row[~unpack_bits(layer.connected[unit], layer.n_positions)] = 0
    if layer.local is None:
        return row
    dense = np.zeros(layer.n_inputs, dtype=np.int8)
    dense[patch_inputs(*layer.local)[unit]] = row
    return dense


def float64_pre_activations(layer: PackedLayer, x: np.ndarray, pairs: np.ndarray, scale: float) -> np.ndarray:
    """p·Σ_i W_i x_i + b in float64 for the (image, unit) `pairs` (numpy's dot product, in its order): the
    recomputation of a first layer's near-ties (recheck_kernel), within near_tie_tolerance of the exact value."""
    return np.array([scale * np.dot(dense_weights_row(layer, unit).astype(np.float64), x[n]) + layer.b[unit]
                     for n, unit in pairs])


def first_layer_signs(layer: PackedLayer, x: np.ndarray, sums: np.ndarray, scale: float,
                      unit_roundoff: float = UNIT_ROUNDOFF, safety: float = NEAR_TIE_SAFETY) -> tuple[np.ndarray, int]:
    """The first hidden layer's units, u = p·S + b ≥ 0 (+1 at 0), as booleans, with near-ties (|u| within
    near_tie_tolerance for sums rounded with `unit_roundoff`) decided by the exact sum; returns them and the number
    of near-ties."""
    u = scale * sums.astype(np.float64) + layer.b
    plus = u >= 0
    near = np.argwhere(np.abs(u) <= near_tie_tolerance(layer, x, scale, unit_roundoff, safety))
    for n, v in near:
        plus[n, v] = exact_pre_activation(layer, x[n], v, scale) >= 0
    return plus, len(near)


def _check_inputs(packed: PackedNetwork, x) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != packed.layers[0].n_inputs:
        raise ValueError(f"inputs have shape {x.shape}; this network needs (n, {packed.layers[0].n_inputs}) "
                         f"(flattened, standardised images as ebp_data.load_dataset gives them)")
    return np.ascontiguousarray(x, dtype=np.float64)


def output_sums(packed: PackedNetwork, x, engine: str = "numpy", counts: dict | None = None) -> np.ndarray:
    """The last layer's pre-activations p·(W v) + b (float64, (n, classes)): EBP-D from the packed form.

    x: (n, K) standardised images; they are used in float64, as output_ebp_d uses float64 images.
    engine: "numpy" (readable, below), "numba" (the packed kernels), "blas" (float32 BLAS products on the ±1
    weights) or "auto" (per layer the faster of the two, layer_methods): the same numbers. If `counts` is a dict,
    counts["near_ties"] is increased by the first-layer units decided by the exact sum, and (compiled engines)
    counts["rechecked"] by those recomputed in float64.
    """
    if engine not in INFERENCE_ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {INFERENCE_ENGINES}")
    x = _check_inputs(packed, x)
    tally = {"near_ties": 0, "rechecked": 0}
    if engine == "numpy":
        sums = _numpy_forward(packed, x, tally)
    else:
        methods = layer_methods(packed, len(x)) if engine == "auto" else \
            ["packed" if engine == "numba" else "blas"] * len(packed.layers)
        sums = _compiled_forward(packed, x, methods, tally)
    if counts is not None:
        for key, value in tally.items():
            if engine != "numpy" or key == "near_ties":
                counts[key] = counts.get(key, 0) + value
    return sums


def _numpy_forward(packed: PackedNetwork, x: np.ndarray, tally: dict) -> np.ndarray:
    """output_sums in numpy: the first layer by byte tables or patch sums, the others by XNOR + popcount."""
    p, first = packed.scale, packed.layers[0]
    sums = first_layer_sums(first, x)
    if len(packed.layers) == 1:  # no hidden layer: the output is the real sum itself
        return p * sums + first.b
    plus, tally["near_ties"] = first_layer_signs(first, x, sums, p)
    v = pack_bits(plus)
    for layer in packed.layers[1:-1]:
        v = pack_bits(p * popcount_sums(layer, v) + layer.b >= 0)
    last = packed.layers[-1]
    return p * popcount_sums(last, v) + last.b


def predict(packed: PackedNetwork, x, engine: str = "numpy", counts: dict | None = None) -> np.ndarray:
    """Predicted classes: argmax of the last layer's sums (as output_ebp_d(net, x).argmax(1))."""
    return output_sums(packed, x, engine, counts).argmax(axis=1)


# ----------------------------------------------------------------------------------------------------------
# Engine "auto": which method each layer uses at a batch size, and the calibration that measures it
# ----------------------------------------------------------------------------------------------------------

def default_plan(packed: PackedNetwork) -> dict:
    """The stated rule (DEFAULT_BLAS_FROM_BATCH): a dense first layer takes float32 BLAS from batch 8 on, every
    other layer its packed kernel at every batch size."""
    first = packed.layers[0]
    crossover = [DEFAULT_BLAS_FROM_BATCH if first.local is None and len(packed.layers) > 1 else None]
    return {"blas_from_batch": crossover + [None] * (len(packed.layers) - 1), "source": "stated rule"}


def layer_methods(packed: PackedNetwork, batch: int) -> list[str]:
    """The method of each layer at this batch size: "blas" from the plan's blas_from_batch on, else "packed". The
    plan is packed.plan (calibrate's measurement) or, without one, default_plan."""
    plan = packed.plan or default_plan(packed)
    return ["blas" if start is not None and batch >= start else "packed" for start in plan["blas_from_batch"]]


def crossover_batch(batch_sizes, blas_wins) -> int | None:
    """The batch size from which float32 BLAS takes a layer, from the measured `batch_sizes` (ascending) and whether
    BLAS won at each: None if it lost at the largest; else the run of BLAS wins that reaches the largest size starts
    at some measured size, and the crossover lies between it and the size before, unmeasured: it is placed at their
    geometric mean (rounded up), so that a batch between the two takes the method measured at the nearer size on a
    log scale (e.g. 1,000 between 512 and 1,024 takes 1,024's: the crossover is 725)."""
    first = None
    for i in range(len(batch_sizes) - 1, -1, -1):
        if not blas_wins[i]:
            break
        first = i
    if first is None or first == 0:
        return None if first is None else batch_sizes[0]
    return math.ceil(math.sqrt(batch_sizes[first - 1] * batch_sizes[first]))


def calibrate(packed: PackedNetwork, x=None, batch_sizes=CALIBRATION_BATCHES, repeats: int = 3, seed: int = 0
              ) -> dict:
    """Measure, for every layer, the packed kernel and the float32 BLAS product at each of `batch_sizes` (best of
    `repeats`, CPU time of this process, with the threads the caller allows) on inputs of the layer's kind: images
    from `x` (repeated as needed; standard normal pixels if None) for the first layer, whose near-ties depend on
    the data, random ±1 bits for the others. Stores the result as packed.plan: blas_from_batch[k] from
    crossover_batch (None: the packed kernel at every size). The plan changes speed only, never a result. Returns
    the plan, with the timings (seconds per image) under "measured"."""
    rng = np.random.default_rng(seed)
    crossover, measured = [], []
    for k, layer in enumerate(packed.layers):
        times = {}
        for batch in batch_sizes:
            if k == 0:
                data = rng.standard_normal((batch, layer.n_inputs)) if x is None else \
                    _check_inputs(packed, np.resize(np.asarray(x), (batch, layer.n_inputs)))
            else:
                data = pack_bits(rng.random((batch, layer.n_inputs)) < 0.5)
            last = k == len(packed.layers) - 1
            row = {}
            for method in LAYER_METHODS:
                _layer_step(packed, k, layer, data, method, last, {"near_ties": 0, "rechecked": 0})  # compile, warm
                seconds = []
                for _ in range(repeats):
                    start = time.process_time()
                    _layer_step(packed, k, layer, data, method, last, {"near_ties": 0, "rechecked": 0})
                    seconds.append(time.process_time() - start)
                row[method] = min(seconds) / batch
            times[batch] = row
        crossover.append(crossover_batch(batch_sizes, [times[b]["blas"] < times[b]["packed"] for b in batch_sizes]))
        measured.append({str(batch): row for batch, row in times.items()})
    packed.plan = {"blas_from_batch": crossover, "source": "measured by ebp_binary.calibrate",
                   "batch_sizes": list(batch_sizes)}
    return {**packed.plan, "measured": measured}


# ----------------------------------------------------------------------------------------------------------
# The compiled engines: working copies for ebp_binary_kernels, each layer by its method, near-ties decided exactly
# ----------------------------------------------------------------------------------------------------------

def work_array(layer: PackedLayer, name: str) -> np.ndarray:
    """A working copy of the layer's weights for a compiled kernel or BLAS, made on first use and kept on it:
    signs_t / connected_t (word, unit) and plus_t / minus_t / unit_span (byte, unit) for the dense kernels, patch32
    (block, block, unit) float32 for the local kernel, dense8 (V, K) int8 for the float64 recheck, dense32 (V, K)
    float32 for BLAS. (The stored format is row-major; where there is no mask plane the signs stand in for it,
    unread.)"""
    if name not in layer._work:
        w = layer._work
        if name in ("signs_t", "connected_t"):
            w["signs_t"] = np.ascontiguousarray(layer.signs.T)
            w["connected_t"] = w["signs_t"] if layer.connected is None else np.ascontiguousarray(layer.connected.T)
        elif name in ("plus_t", "minus_t", "unit_span"):
            w["plus_t"] = np.ascontiguousarray(layer.plus_bytes.T)
            if layer.connected is None:
                w["minus_t"] = w["plus_t"]
                w["unit_span"] = np.tile(np.array([0, layer.n_units], dtype=np.int64), (w["plus_t"].shape[0], 1))
            else:
                w["minus_t"] = np.ascontiguousarray(layer.minus_bytes.T)
                used = word_bytes(layer.connected, layer.n_inputs).T != 0  # (byte, unit)
                first = np.where(used.any(axis=1), used.argmax(axis=1), 0)
                last = np.where(used.any(axis=1), layer.n_units - used[:, ::-1].argmax(axis=1), 0)
                w["unit_span"] = np.stack([first, last], axis=1).astype(np.int64)
        elif name == "patch32":
            w["patch32"] = patch_weights(layer).astype(np.float32)
        elif name == "dense8":
            w["dense8"] = dense_weights(layer)
        elif name == "dense32":
            w["dense32"] = dense_weights(layer).astype(np.float32)
        else:
            raise KeyError(name)
    return layer._work[name]


def _pm1(v_words: np.ndarray, n_bits: int, dtype=np.float32) -> np.ndarray:
    """Packed ±1 units as a (n, n_bits) array of ±1.0."""
    return np.where(unpack_bits(v_words, n_bits), dtype(1), dtype(-1))


def _ties_to_words(layer: PackedLayer, x: np.ndarray, scale: float, near: np.ndarray, words: np.ndarray,
                   tally: dict) -> None:
    """The near-ties `near` (rows (image, unit)) of a first layer: recomputed in float64 (recheck_kernel); those
    still within the float64 bound decided by the exact rational sum; their bits set or cleared in `words`."""
    if not len(near):
        return
    tolerance = NEAR_TIE_SAFETY * (layer.n_inputs + 2) * UNIT_ROUNDOFF
    near = np.ascontiguousarray(near, dtype=np.int64)
    left = kernels.recheck_kernel(x, work_array(layer, "dense8"), layer.b, scale, tolerance, near, len(near), words)
    tally["rechecked"] += len(near)
    tally["near_ties"] += left
    for n, unit in near[:left]:
        bit = np.uint64(1) << np.uint64(unit % 64)
        if exact_pre_activation(layer, x[n], unit, scale) >= 0:
            words[n, unit // 64] |= bit
        else:
            words[n, unit // 64] &= ~bit


def _first_layer_sums_compiled(layer: PackedLayer, x: np.ndarray, method: str) -> tuple[np.ndarray, float]:
    """A first layer's sums on real inputs by `method`, and the unit roundoff of their rounding: byte tables
    (float64) or patch sums (float32) for "packed", a float32 product with the ±1 weights for "blas"."""
    if method == "blas":
        with np.errstate(over="ignore", invalid="ignore"):  # huge inputs: the threshold recomputes them in float64
            return x.astype(np.float32) @ work_array(layer, "dense32").T, UNIT_ROUNDOFF32
    if layer.local is not None:
        out = np.empty((len(x), layer.n_units), dtype=np.float32)
        side = layer.local[0]
        kernels.local_sums_kernel(x.reshape(len(x), side, side), work_array(layer, "patch32"), out)
        return out, UNIT_ROUNDOFF32
    out = np.empty((len(x), layer.n_units))
    kernels.first_layer_sums_kernel(x, work_array(layer, "plus_t"), work_array(layer, "minus_t"), layer.connected is not None,
                                    work_array(layer, "unit_span"), out)
    return out, UNIT_ROUNDOFF


def _first_layer_words(layer: PackedLayer, x: np.ndarray, scale: float, method: str, tally: dict) -> np.ndarray:
    """The first hidden layer's units packed as words: rounded sums (BLAS_CHUNK images at a time, so that the
    inputs and sums of a chunk stay in cache), signs with near-ties listed (threshold_kernel), and the near-ties
    decided exactly (_ties_to_words)."""
    words = np.zeros((len(x), n_words(layer.n_units)), dtype=np.uint64)
    near = np.empty((max(64, len(x)), 2), dtype=np.int64)
    found = 0
    for start in range(0, len(x), BLAS_CHUNK):
        chunk = x[start:start + BLAS_CHUNK]
        sums, roundoff = _first_layer_sums_compiled(layer, chunk, method)
        safety = NEAR_TIE_SAFETY if roundoff == UNIT_ROUNDOFF else NEAR_TIE_SAFETY32
        tolerance = safety * (layer.n_inputs + 2) * roundoff
        count = kernels.threshold_kernel(sums, chunk, layer.b, scale, tolerance, words, start, near, found)
        if found + count > len(near):  # more near-ties than the buffer holds: a larger one, and this chunk again
            near = np.concatenate([near[:found], np.empty((2 * (found + count), 2), dtype=np.int64)])
            words[start:start + len(chunk)] = 0
            count = kernels.threshold_kernel(sums, chunk, layer.b, scale, tolerance, words, start, near, found)
        found += count
    _ties_to_words(layer, x, scale, near[:found], words, tally)
    return words


def _hidden_sums(layer: PackedLayer, v_words: np.ndarray, method: str) -> np.ndarray:
    """Σ W v of a layer on packed ±1 inputs by `method`: exact integers (int64, or float32 below 2^24)."""
    if method == "blas":
        return _pm1(v_words, layer.n_inputs) @ work_array(layer, "dense32").T
    if layer.local is not None:
        side = layer.local[0]
        out = np.empty((len(v_words), layer.n_units), dtype=np.float32)
        kernels.local_sums_kernel(_pm1(v_words, layer.n_inputs).reshape(len(v_words), side, side),
                                  work_array(layer, "patch32"), out)
        return out
    out = np.empty((len(v_words), layer.n_units), dtype=np.int64)
    kernels.popcount_sums_kernel(work_array(layer, "signs_t"), work_array(layer, "connected_t"), layer.connected is not None,
                                 layer.fan_in, v_words, out)
    return out


def _layer_step(packed: PackedNetwork, k: int, layer: PackedLayer, data: np.ndarray, method: str, last: bool,
                tally: dict) -> np.ndarray:
    """Layer k of the compiled forward pass on `data` (real images for k = 0, packed ±1 units after): the packed
    words of a hidden layer, or the float64 output sums p·S + b of the last layer."""
    p = packed.scale
    if k == 0:
        if last:  # no hidden layer: the output is the real sum itself (float64)
            return p * first_layer_sums(layer, data) + layer.b
        return _first_layer_words(layer, data, p, method, tally)
    dense_packed = method == "packed" and layer.local is None  # the common case: one kernel does it all
    if last and dense_packed:
        out = np.empty((len(data), layer.n_units))
        kernels.output_layer_kernel(work_array(layer, "signs_t"), work_array(layer, "connected_t"), layer.connected is not None,
                                    layer.fan_in, layer.b, p, data, out)
        return out
    if last:
        return p * _hidden_sums(layer, data, method).astype(np.float64) + layer.b
    out = np.zeros((len(data), n_words(layer.n_units)), dtype=np.uint64)
    if dense_packed:
        kernels.hidden_layer_kernel(work_array(layer, "signs_t"), work_array(layer, "connected_t"), layer.connected is not None,
                                    layer.fan_in, layer.b, p, data, out)
    else:
        kernels.sign_words_kernel(_hidden_sums(layer, data, method), layer.b, p, out)
    return out


def _compiled_forward(packed: PackedNetwork, x: np.ndarray, methods: list[str], tally: dict) -> np.ndarray:
    """_numpy_forward with the compiled kernels or BLAS, layer by layer as `methods` says."""
    data = x
    for k, (layer, method) in enumerate(zip(packed.layers, methods)):
        data = _layer_step(packed, k, layer, data, method, k == len(packed.layers) - 1, tally)
    return data


def compiled_first_layer_words(layer: PackedLayer, x: np.ndarray, scale: float, method: str = "packed"
                             ) -> tuple[np.ndarray, int]:
    """The first hidden layer's units packed as words by the compiled engine (`method` of layer_methods), and the
    number of near-ties decided by the exact sum."""
    tally = {"near_ties": 0, "rechecked": 0}
    words = _first_layer_words(layer, np.ascontiguousarray(x, dtype=np.float64), scale, method, tally)
    return words, tally["near_ties"]
