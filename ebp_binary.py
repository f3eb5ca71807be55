"""The deployed binary network: EBP-D with bit-packed weights, inferred by XNOR + popcount.

A binary EBP network read out deterministically (EBP-D, `ebp_lib.output_ebp_d`) has weights W = sign(h) ∈ {−1, +1},
a real bias b, hidden units v' = sign(p·(W v) + b) (+1 at 0; p is the keep probability under sampled dropout,
else 1) and a linear output layer whose argmax is the prediction. Nothing in it needs a real weight, so:

* **Format.** Each layer's row W_v is stored as bits in uint64 words (bit i of row v is 1 where W_vi = +1; bit i of
  the row is bit i % 64 of word i // 64). Weights that are 0 in EBP-D (off a spatial layer's mask, or h exactly 0)
  are marked by a second bit-plane, `connected`, stored only for layers that have such weights; their sign bit is
  0. Why a full-width mask plane rather than packing only each unit's connected inputs: the activations of a
  layer are packed once into words that every unit of the next layer reads as they are (XOR, AND, popcount), and
  the same code serves fully connected layers, locally connected layers, any other mask and the padding bits of
  the last word. Packing only the connected inputs would need, for every unit and every image, a gather of that
  unit's input bits, which costs more than the popcount it feeds. The price is 2 bits per (unit, input) position
  of a spatial layer instead of 1 (see `model_bytes`).
* **Hidden layers on ±1 inputs** (bit 1 = +1, bit 0 = −1): W_i v_i = +1 where the bits agree and −1 where they
  differ, so Σ_i W_i v_i = K − 2·popcount(w XOR v) (exact integers). Padding bits are 0 in both words and never
  differ; with a mask plane, Σ = |M| − 2·popcount((w XOR v) AND m).
* **First layer on real pixels**, no multiplications: Σ_i W_i x_i = Σ_{W=+1} x − Σ_{W=−1} x, which is
  2·Σ_{W=+1} x − Σ x for a fully connected layer. Each subset sum is read from byte tables: for every group of 8
  consecutive inputs, all 256 subset sums are built with one addition each (`byte_tables`), and a unit's
  Σ_{W=+1} x is the sum of the table entries its weight bytes select (K/8 additions instead of K).
* **Exact agreement with output_ebp_d.** Hidden-layer and output sums are exact integers, computed as
  output_ebp_d computes them (p·S + b in float64). The first layer's real sums are rounded in another order than
  BLAS's, so a unit whose pre-activation lies within a rigorous rounding bound of 0 (`near_tie_tolerance`) is
  decided by the exact rational sum instead (`exact_pre_activation`), and counted.

Readable numpy first (`engine="numpy"`); the same computation by the compiled kernels of ebp_binary_kernels.py
(`engine="numba"`, measured faster by scripts/binary_inference.py, outputs/binary_inference.json), driven from
the end of this file. tests/test_kernels.py checks each kernel against its numpy function here, and
tests/test_binary_inference.py both engines against ebp_lib.output_ebp_d and each other. EBP-D's weights come
from ebp_lib.ebp_d_parameters.
"""
from __future__ import annotations

import json
import os
import zipfile
import zlib
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

import ebp_binary_kernels as kernels
from ebp_checkpoint import array_headers
from ebp_lib import ebp_d_parameters

FORMAT_NAME = "ebp-binary-packed"
FORMAT_VERSION = 1
WORD_BITS = 64
INFERENCE_ENGINES = ("numpy", "numba")  # output_sums(engine=...): readable, compiled
UNIT_ROUNDOFF = np.finfo(np.float64).eps / 2  # u = 2^-53
NEAR_TIE_SAFETY = 16  # the tolerance is this many times (K + 2)·u·(p·Σ|x| + |b|), several times the error bounds


class PackedFormatError(ValueError):
    """A packed-network file that this loader cannot or will not read (names the file and what was wrong)."""


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
# The packed network
# ----------------------------------------------------------------------------------------------------------

@dataclass
class PackedLayer:
    """One layer of a deployed binary network.

    signs (V, words) uint64: bit i of row v is 1 where W_vi = +1, 0 where W_vi = −1, where the weight is not
    connected, and in the padding. connected (V, words) uint64 or None: 1 where W_vi ≠ 0 (None: every one of the K
    inputs is connected). b (V,) float64: the real bias. n_inputs: K.
    """
    signs: np.ndarray
    connected: np.ndarray | None
    b: np.ndarray
    n_inputs: int
    # derived, not stored: connected inputs per unit |M_v| (K without a mask), and the row bytes where W = +1 and
    # where W = −1 (minus is None without a mask: there Σ_{W=−1} x = Σ x − Σ_{W=+1} x)
    fan_in: np.ndarray = field(init=False, repr=False)
    plus_bytes: np.ndarray = field(init=False, repr=False)
    minus_bytes: np.ndarray | None = field(init=False, repr=False)
    _numba: dict | None = field(init=False, repr=False, default=None)  # the compiled engine's working copies

    def __post_init__(self):
        self.plus_bytes = word_bytes(self.signs, self.n_inputs)
        if self.connected is None:
            self.fan_in = np.full(len(self.signs), self.n_inputs, dtype=np.int64)
            self.minus_bytes = None
        else:
            self.fan_in = np.bitwise_count(self.connected).sum(axis=1, dtype=np.int64)
            self.minus_bytes = word_bytes(self.connected & ~self.signs, self.n_inputs)

    @property
    def n_units(self) -> int:
        return len(self.signs)


@dataclass
class PackedNetwork:
    """A deployed binary network: its layers, the scale p of W v (keep probability under sampled dropout, else 1)
    and a description of where it came from (architecture, input side, dropout, keep; not used by inference)."""
    layers: list[PackedLayer]
    scale: float
    source: dict

    @property
    def sizes(self) -> list[int]:
        return [self.layers[0].n_inputs] + [layer.n_units for layer in self.layers]


def export_network(net) -> PackedNetwork:
    """Pack a trained binary ebp_lib.Network for EBP-D inference: W = sign(h) (times the mask), b, the scale p.

    Refuses a real-weight network (EBP-D multiplies by the real means h, which have no ±1 form) and non-finite h
    or b. A layer gets a `connected` plane only if some EBP-D weight is 0 (off the mask, or h exactly 0).
    """
    if net.weights != "binary":
        raise ValueError(f"cannot pack a {net.weights!r}-weight network: its EBP-D output multiplies by the real "
                         f"means h, which have no ±1 form; only binary networks (weights='binary') can be packed")
    layers = []
    for k, (layer, (w, _)) in enumerate(zip(net.layers, ebp_d_parameters(net))):  # w = sign(h), 0 off the mask
        if not (np.all(np.isfinite(layer.h)) and np.all(np.isfinite(layer.b))):
            raise ValueError(f"layer {k + 1} has non-finite h or b: there is no sign to pack; retrain or restore "
                             f"the network from a checkpoint")
        connected = pack_bits(w != 0) if np.any(w == 0) else None
        layers.append(PackedLayer(pack_bits(w > 0), connected, layer.b.astype(np.float64), layer.h.shape[1]))
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
# The versioned .npz format
# ----------------------------------------------------------------------------------------------------------

def save_packed(path, packed: PackedNetwork) -> None:
    """Write a packed network as .npz (format FORMAT_VERSION), atomically: an interrupted or failed save leaves
    the previous file as it was.

    Arrays: header (JSON: format, version, scale, per layer n_inputs / n_units / whether it has a mask plane,
    source), signs{k} and connected{k} (uint64), b{k} (float64).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "scale": packed.scale, "source": packed.source,
              "layers": [{"n_inputs": layer.n_inputs, "n_units": layer.n_units,
                          "connected": layer.connected is not None} for layer in packed.layers]}
    arrays = {"header": np.array(json.dumps(header))}
    for k, layer in enumerate(packed.layers):
        arrays[f"signs{k}"], arrays[f"b{k}"] = layer.signs, layer.b
        if layer.connected is not None:
            arrays[f"connected{k}"] = layer.connected
    tmp = path.with_name(path.name + ".tmp.npz")
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    except OSError as err:  # a full disk: the previous file stays as it was, no temporary is left behind
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, f"could not write {path}: {err.strerror or err}") from err


MAX_TEXT_BYTES = 2 ** 20  # the JSON header (and an ebp_lib checkpoint's metadata, when one is named) is far below


def _read_text(path, f, headers: dict, name: str) -> str:
    """The JSON text stored as the 0-d string array `name`, read only if its declared size is that of a text."""
    shape, dtype, size = headers[name]
    if dtype.kind != "U" or shape != () or size > MAX_TEXT_BYTES:
        raise PackedFormatError(f"{path}: array {name!r} is {dtype}{list(shape)} ({size} bytes), not a JSON text of "
                                f"at most {MAX_TEXT_BYTES} bytes")
    return str(f[name])


def _read_header(path, f, headers: dict) -> dict:
    """The JSON header, checked for the format name and version; an ebp_lib checkpoint is named as such."""
    if "header" not in headers:
        if "meta" in headers and "h0" in headers:
            try:
                weights = json.loads(_read_text(path, f, headers, "meta"))["config"]["weights"]
            except (PackedFormatError, ValueError, KeyError, TypeError):
                weights = "unknown"
            why = (" A real-weight network cannot be packed: its EBP-D weights are the real means h, which have no "
                   "±1 form." if weights == "real" else " Pack it with ebp_binary.save_packed(path, "
                   "ebp_binary.export_network(ebp_lib.load_network(checkpoint)[0])).")
            raise PackedFormatError(f"{path}: is an ebp_lib network checkpoint ({weights} weights, written by "
                                    f"save_network), not a packed binary network.{why}")
        raise PackedFormatError(f"{path}: has no 'header' array; it was not written by ebp_binary.save_packed")
    try:
        header = json.loads(_read_text(path, f, headers, "header"))
    except ValueError as e:
        if isinstance(e, PackedFormatError):
            raise
        raise PackedFormatError(f"{path}: its header is not valid JSON ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise PackedFormatError(f"{path}: the header does not name the format {FORMAT_NAME!r}")
    if header.get("version") != FORMAT_VERSION:
        raise PackedFormatError(f"{path}: written in format version {header.get('version')!r}; this loader reads "
                                f"version {FORMAT_VERSION} only. Re-export the network with this ebp_binary "
                                f"(export_network, save_packed)")
    return header


def _check_array(path, headers: dict, name: str, shape: tuple, dtype) -> None:
    """Refuse array `name` unless its declared dtype and shape (read from its .npy header, before its data) are
    what the packed header implies."""
    if name not in headers:
        raise PackedFormatError(f"{path}: array {name!r} is missing")
    found, found_dtype, _ = headers[name]
    if found_dtype != np.dtype(dtype):
        raise PackedFormatError(f"{path}: array {name!r} has dtype {found_dtype}; the format stores {np.dtype(dtype)}")
    if found != shape:
        raise PackedFormatError(f"{path}: array {name!r} has shape {found}; the header implies {shape}")


def _check_layer_arrays(path, k: int, signs, connected, b, n_inputs: int) -> None:
    """Padding bits 0, sign bits only where connected, finite biases: what the popcount identities rely on."""
    padding = ~pack_bits(np.ones(n_inputs, dtype=bool))
    if np.any(signs & padding) or (connected is not None and np.any(connected & padding)):
        raise PackedFormatError(f"{path}: layer {k + 1} has bits set in the padding of its last word")
    if connected is not None and np.any(signs & ~connected):
        raise PackedFormatError(f"{path}: layer {k + 1} has +1 sign bits on weights its mask plane marks as "
                                f"unconnected")
    if not np.all(np.isfinite(b)):
        raise PackedFormatError(f"{path}: layer {k + 1} has non-finite biases")


def load_packed(path) -> PackedNetwork:
    """Read a packed network written by save_packed; refuses, naming the file and what was wrong, anything else:
    another format or version, missing or extra arrays, wrong dtypes or shapes, inconsistent layer sizes, bits
    in the padding, a scale outside (0, 1], a truncated file, an ebp_lib checkpoint. The header is read and
    checked first, then every array's declared dtype and shape (from its .npy header) against what the header
    implies, and only then the arrays' data: a small crafted file never makes it allocate more than it holds."""
    try:
        with np.load(path, allow_pickle=False) as f:
            try:
                headers = array_headers(f)
            except ValueError as e:
                raise PackedFormatError(f"{path}: {e}") from None
            return _load_packed(path, f, headers)
    except (FileNotFoundError, PackedFormatError):
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:
        raise PackedFormatError(f"{path}: cannot be read as an .npz archive ({type(e).__name__}: {e}); the file is "
                                f"truncated or damaged, or was not written by ebp_binary.save_packed") from None


def _load_packed(path, f, headers: dict) -> PackedNetwork:
    header = _read_header(path, f, headers)
    specs = header.get("layers")
    scale = header.get("scale")
    if not isinstance(specs, list) or not specs:
        raise PackedFormatError(f"{path}: the header lists no layers")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 1:
        raise PackedFormatError(f"{path}: scale {scale!r} must be a number in (0, 1] (the keep probability p)")
    sizes, expected = [], {"header"}
    for k, spec in enumerate(specs):
        try:
            n_inputs, n_units, has_mask = int(spec["n_inputs"]), int(spec["n_units"]), bool(spec["connected"])
        except (KeyError, TypeError, ValueError):
            raise PackedFormatError(f"{path}: layer {k + 1}'s header entry {spec!r} needs n_inputs, n_units, "
                                    f"connected") from None
        if n_inputs < 1 or n_units < 1:
            raise PackedFormatError(f"{path}: layer {k + 1} has {n_inputs} inputs and {n_units} units")
        if k > 0 and n_inputs != sizes[-1][1]:
            raise PackedFormatError(f"{path}: layer {k + 1} takes {n_inputs} inputs but layer {k} has "
                                    f"{sizes[-1][1]} units")
        shape = (n_units, n_words(n_inputs))
        _check_array(path, headers, f"signs{k}", shape, np.uint64)
        if has_mask:
            _check_array(path, headers, f"connected{k}", shape, np.uint64)
        _check_array(path, headers, f"b{k}", (n_units,), np.float64)
        expected |= {f"signs{k}", f"b{k}"} | ({f"connected{k}"} if has_mask else set())
        sizes.append((n_inputs, n_units, has_mask))
    if set(headers) != expected:
        raise PackedFormatError(f"{path}: unexpected arrays {sorted(set(headers) - expected)} for the "
                                f"{len(specs)} layers its header lists")
    layers = []  # every declared dtype and shape checked: now the data, which is what the header says
    for k, (n_inputs, _, has_mask) in enumerate(sizes):
        signs, b = f[f"signs{k}"], f[f"b{k}"]
        connected = f[f"connected{k}"] if has_mask else None
        _check_layer_arrays(path, k, signs, connected, b, n_inputs)
        layers.append(PackedLayer(signs, connected, b, n_inputs))
    return PackedNetwork(layers, float(scale), header.get("source", {}))


# ----------------------------------------------------------------------------------------------------------
# Inference, readable numpy
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


def first_layer_sums(layer: PackedLayer, x: np.ndarray, chunk: int = 16) -> np.ndarray:
    """Σ_i W_vi x_i on real inputs without multiplications (module docstring): 2·Σ_{W=+1} x − Σ x, or with a mask
    plane Σ_{W=+1} x − Σ_{W=−1} x, from byte tables; `chunk` images at a time bound the memory."""
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
    """Σ_i W_vi v_i for ±1 inputs packed as bits (bit 1 = +1): K − 2·popcount(w XOR v), or with a mask plane
    |M_v| − 2·popcount((w XOR v) AND m_v). Exact int64; `chunk` images at a time bound the memory."""
    out = np.empty((len(v_words), layer.n_units), dtype=np.int64)
    for start in range(0, len(v_words), chunk):
        differ = layer.signs[None, :, :] ^ v_words[start:start + chunk, None, :]
        if layer.connected is not None:
            differ &= layer.connected
        out[start:start + chunk] = layer.fan_in - 2 * np.bitwise_count(differ).sum(axis=-1, dtype=np.int64)
    return out


def near_tie_tolerance(layer: PackedLayer, x: np.ndarray, scale: float) -> np.ndarray:
    """(batch, V): the band around 0 within which the first layer's float64 u = p·Σ W x + b may have the wrong sign.

    Any float64 summation of K terms, in any order, errs by at most γ_K·Σ|terms| (γ_K ≈ K·u, u = 2^-53); the
    byte-table sums (P twice, Σx once, a subtraction) and BLAS's dot product, each followed by p· and + b, are
    together within 4·(K + 2)·u·(p·Σ|x| + |b|) of the exact u. The band is NEAR_TIE_SAFETY = 16 times
    (K + 2)·u·(p·Σ|x| + |b|): outside it the float sign is the exact sign for both orders (ours and BLAS's);
    inside it, `exact_pre_activation` decides.
    """
    magnitude = scale * np.abs(x).sum(axis=1, keepdims=True) + np.abs(layer.b)
    return NEAR_TIE_SAFETY * (layer.n_inputs + 2) * UNIT_ROUNDOFF * magnitude


def exact_pre_activation(layer: PackedLayer, x_row: np.ndarray, unit: int, scale: float) -> Fraction:
    """p·Σ_i W_i x_i + b for one unit and one image, in exact rational arithmetic (the near-tie decider)."""
    plus = unpack_bits(layer.signs[unit], layer.n_inputs)
    connected = np.ones_like(plus) if layer.connected is None else unpack_bits(layer.connected[unit], layer.n_inputs)
    total = sum((Fraction(float(xi)) if is_plus else -Fraction(float(xi)))
                for xi, is_plus, is_connected in zip(x_row, plus, connected) if is_connected)
    return Fraction(scale) * total + Fraction(float(layer.b[unit]))


def first_layer_signs(layer: PackedLayer, x: np.ndarray, sums: np.ndarray, scale: float) -> tuple[np.ndarray, int]:
    """The first hidden layer's units, u = p·S + b ≥ 0 (+1 at 0), as booleans, with near-ties (|u| within
    near_tie_tolerance) decided by the exact sum; returns them and the number of near-ties."""
    u = scale * sums + layer.b
    plus = u >= 0
    near = np.argwhere(np.abs(u) <= near_tie_tolerance(layer, x, scale))
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
    engine: "numpy" (readable, below) or "numba" (the compiled kernels at the end; the same numbers). If `counts`
    is a dict, counts["near_ties"] is increased by the first-layer units decided by the exact sum.
    """
    if engine not in INFERENCE_ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {INFERENCE_ENGINES}")
    x = _check_inputs(packed, x)
    forward = _numpy_forward if engine == "numpy" else _numba_forward
    sums, near_ties = forward(packed, x)
    if counts is not None:
        counts["near_ties"] = counts.get("near_ties", 0) + near_ties
    return sums


def _numpy_forward(packed: PackedNetwork, x: np.ndarray) -> tuple[np.ndarray, int]:
    """output_sums in numpy: the first layer by byte tables, the others by XNOR + popcount; and the near-ties."""
    p, first = packed.scale, packed.layers[0]
    sums = first_layer_sums(first, x)
    if len(packed.layers) == 1:  # no hidden layer: the output is the real sum itself
        return p * sums + first.b, 0
    plus, near_ties = first_layer_signs(first, x, sums, p)
    v = pack_bits(plus)
    for layer in packed.layers[1:-1]:
        v = pack_bits(p * popcount_sums(layer, v) + layer.b >= 0)
    last = packed.layers[-1]
    return p * popcount_sums(last, v) + last.b, near_ties


def predict(packed: PackedNetwork, x, engine: str = "numpy", counts: dict | None = None) -> np.ndarray:
    """Predicted classes: argmax of the last layer's sums (as output_ebp_d(net, x).argmax(1))."""
    return output_sums(packed, x, engine, counts).argmax(axis=1)


# ----------------------------------------------------------------------------------------------------------
# The compiled engine (engine="numba"): working copies for ebp_binary_kernels, and the near-ties decided exactly
# ----------------------------------------------------------------------------------------------------------

def _numba_arrays(layer: PackedLayer) -> dict:
    """The compiled engine's working copies of a layer, made on first use and kept on it: sign and mask words and
    first-layer bytes transposed to (word or byte, unit), and each byte's range of connected units. (The stored
    format is row-major; where there is no mask plane the signs stand in for it, unread.)"""
    if layer._numba is None:
        signs_t = np.ascontiguousarray(layer.signs.T)
        plus_t = np.ascontiguousarray(layer.plus_bytes.T)
        if layer.connected is None:
            connected_t, minus_t = signs_t, plus_t
            unit_span = np.tile(np.array([0, layer.n_units], dtype=np.int64), (plus_t.shape[0], 1))
        else:
            connected_t = np.ascontiguousarray(layer.connected.T)
            minus_t = np.ascontiguousarray(layer.minus_bytes.T)
            used = word_bytes(layer.connected, layer.n_inputs).T != 0  # (byte, unit)
            first = np.where(used.any(axis=1), used.argmax(axis=1), 0)
            last = np.where(used.any(axis=1), layer.n_units - used[:, ::-1].argmax(axis=1), 0)
            unit_span = np.stack([first, last], axis=1).astype(np.int64)
        layer._numba = {"signs_t": signs_t, "connected_t": connected_t, "plus_t": plus_t, "minus_t": minus_t,
                        "unit_span": unit_span}
    return layer._numba


def _numba_popcount_sums(layer: PackedLayer, v_words: np.ndarray) -> np.ndarray:
    """popcount_sums by the compiled kernel."""
    a = _numba_arrays(layer)
    out = np.empty((len(v_words), layer.n_units), dtype=np.int64)
    kernels.popcount_sums_kernel(a["signs_t"], a["connected_t"], layer.connected is not None, layer.fan_in,
                          np.ascontiguousarray(v_words), out)
    return out


def _numba_first_layer_sums(layer: PackedLayer, x: np.ndarray) -> np.ndarray:
    """first_layer_sums by the compiled kernel."""
    a = _numba_arrays(layer)
    out = np.empty((len(x), layer.n_units))
    kernels.first_layer_sums_kernel(x, a["plus_t"], a["minus_t"], layer.connected is not None, a["unit_span"], out)
    return out


def _numba_first_layer_words(layer: PackedLayer, x: np.ndarray, scale: float) -> tuple[np.ndarray, int]:
    """The first hidden layer's units packed as words, near-ties decided by the exact sum (first_layer_signs)."""
    sums = _numba_first_layer_sums(layer, x)
    words = np.zeros((len(x), n_words(layer.n_units)), dtype=np.uint64)
    near = np.empty((64, 2), dtype=np.int64)
    n_near = kernels.first_layer_signs_kernel(sums, x, layer.b, scale, layer.n_inputs, NEAR_TIE_SAFETY, UNIT_ROUNDOFF,
                                       words, near)
    if n_near > len(near):  # more near-ties than the buffer holds (never seen): decide them all in numpy
        plus, n_near = first_layer_signs(layer, x, sums, scale)
        return pack_bits(plus), n_near
    for n, unit in near[:n_near]:
        bit = np.uint64(1) << np.uint64(unit % 64)
        if exact_pre_activation(layer, x[n], unit, scale) >= 0:
            words[n, unit // 64] |= bit
        else:
            words[n, unit // 64] &= ~bit
    return words, n_near


def _numba_forward(packed: PackedNetwork, x: np.ndarray) -> tuple[np.ndarray, int]:
    """_numpy_forward with the compiled kernels."""
    p, first = packed.scale, packed.layers[0]
    if len(packed.layers) == 1:
        return p * _numba_first_layer_sums(first, x) + first.b, 0
    v, near_ties = _numba_first_layer_words(first, x, p)
    for layer in packed.layers[1:-1]:
        a = _numba_arrays(layer)
        out = np.zeros((len(x), n_words(layer.n_units)), dtype=np.uint64)
        kernels.hidden_layer_kernel(a["signs_t"], a["connected_t"], layer.connected is not None, layer.fan_in,
                                    layer.b, p, v, out)
        v = out
    last = packed.layers[-1]
    return p * _numba_popcount_sums(last, v) + last.b, near_ties
