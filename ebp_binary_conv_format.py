"""The file format of a deployed binary CNN: save_cnn writes an ebp_binary_conv.PackedCNN to a versioned .npz,
load_cnn reads it back. ebp_binary_format's rules, for convolutional layers:

* **What is stored.** `header`, a JSON text: format FORMAT_NAME, version, the scale p, the source description, and
  per layer n_inputs, n_units, whether it has a mask plane and, for a convolution, its geometry `conv` =
  [in_channels, in_side, kernel, channels, stride] (ebp_conv.Conv; null for a dense layer). Then per layer k the
  sign plane `signs{k}` ((units, words) uint64: a convolution's units are its kernels, its inputs one patch of
  C·k·k), the mask plane `connected{k}` where there is one, and the biases `b{k}` (float64, one per map).
* **It never runs code.** No pickle (allow_pickle=False, a JSON header); written atomically (a temporary file, then
  os.replace).
* **Bad input is refused**, with ebp_binary_format.PackedFormatError (its subclass CNNFormatError where the fault
  is the CNN's) naming the file and the fault: another format or version, a dense packed network (said as such),
  a geometry that does not chain (a kernel larger than its map, a layer whose inputs are not the previous layer's
  outputs), missing or extra arrays, wrong dtypes or shapes, bits in the padding, non-finite biases.
  The header and every array's declared dtype and shape are checked before any array's data is read.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import ebp_binary_format as ebf
import ebp_conv
from ebp_binary import PackedLayer, n_words
from ebp_binary_conv import PackedCNN
from ebp_checkpoint import loads_bounded

FORMAT_NAME = "ebp-binary-conv-packed"
FORMAT_VERSION = 1
GEOMETRY = ("in_channels", "in_side", "kernel", "channels", "stride")  # a conv entry's order
INPUT_CHANNELS = 1  # the images: one map


class CNNFormatError(ebf.PackedFormatError):
    """A packed-CNN file that this loader cannot or will not read (names the file and what was wrong)."""


def save_cnn(path, packed: PackedCNN) -> None:
    """Write a packed CNN as .npz (format FORMAT_VERSION), atomically: a failed save leaves the previous file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "scale": packed.scale, "source": packed.source,
              "layers": [{"n_inputs": layer.n_inputs, "n_units": len(layer.signs),
                          "connected": layer.connected is not None,
                          "conv": None if g is None else [getattr(g, name) for name in GEOMETRY]}
                         for layer, g in zip(packed.layers, packed.convs)]}
    ebf.write_layers(path, header, packed.layers)


def load_cnn(path) -> PackedCNN:
    """Read a packed CNN written by save_cnn; CNNFormatError naming the file and the fault for anything else
    (module docstring), every check made before an array's data is read."""
    return ebf.read_npz(path, _load, CNNFormatError, "ebp_binary_conv_format.save_cnn")


def _header(path, f, headers: dict) -> dict:
    if "header" not in headers:
        raise CNNFormatError(f"{path}: has no 'header' array; it was not written by ebp_binary_conv_format.save_cnn")
    shape, dtype, size = headers["header"]
    if dtype.kind != "U" or shape != () or size > ebf.MAX_TEXT_BYTES:
        raise CNNFormatError(f"{path}: its header is {dtype}{list(shape)} ({size} bytes), not a JSON text")
    try:
        header = loads_bounded(str(f["header"]))
    except ValueError as e:
        raise CNNFormatError(f"{path}: its header is not valid JSON ({e})") from None
    if isinstance(header, dict) and header.get("format") == ebf.FORMAT_NAME:
        raise CNNFormatError(f"{path}: is a dense or locally connected packed network ({ebf.FORMAT_NAME}); read it "
                             f"with ebp_binary_format.load_packed")
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise CNNFormatError(f"{path}: the header does not name the format {FORMAT_NAME!r}")
    if header.get("version") != FORMAT_VERSION:
        raise CNNFormatError(f"{path}: written in format version {header.get('version')!r}; this loader reads version "
                             f"{FORMAT_VERSION}")
    return header


def _geometry(path, k: int, spec, n_inputs: int, n_units: int, side: int, channels: int) -> ebp_conv.Conv | None:
    """The Conv of layer k's header entry, checked against its sizes and the previous layer's output maps."""
    conv = spec.get("conv")
    if conv is None:
        return None
    if not (isinstance(conv, list) and len(conv) == len(GEOMETRY)
            and all(type(v) is int and v >= 1 for v in conv)):
        raise CNNFormatError(f"{path}: layer {k + 1}'s conv {conv!r:.80} is not {list(GEOMETRY)} of positive integers")
    g = ebp_conv.Conv(*conv)
    if (g.in_channels, g.in_side) != (channels, side) or g.kernel > g.in_side:
        raise CNNFormatError(f"{path}: layer {k + 1} convolves {g.in_channels} maps of side {g.in_side} with a "
                             f"{g.kernel}x{g.kernel} kernel, but its input is {channels} maps of side {side}")
    if (g.fan_in, g.channels) != (n_inputs, n_units):
        raise CNNFormatError(f"{path}: layer {k + 1} has {n_inputs} inputs and {n_units} units, but its geometry "
                             f"gives {g.fan_in} and {g.channels}")
    return g


def _load(path, f, headers: dict) -> PackedCNN:
    header = _header(path, f, headers)
    specs, scale = header.get("layers"), header.get("scale")
    if not isinstance(specs, list) or len(specs) < 2:
        raise CNNFormatError(f"{path}: the header lists no layers after the first")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 1:
        raise CNNFormatError(f"{path}: scale {scale!r} must be a number in (0, 1] (the keep probability p)")
    side = int((header.get("source") or {}).get("input_side", 28))
    channels, outputs, plan, expected = INPUT_CHANNELS, INPUT_CHANNELS * side * side, [], {"header"}
    for k, spec in enumerate(specs):
        try:
            n_inputs, n_units, has_mask = int(spec["n_inputs"]), int(spec["n_units"]), bool(spec["connected"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CNNFormatError(f"{path}: layer {k + 1}'s header entry {spec!r:.80} needs n_inputs, n_units, "
                                 f"connected") from None
        if n_inputs < 1 or n_units < 1:
            raise CNNFormatError(f"{path}: layer {k + 1} has {n_inputs} inputs and {n_units} units")
        g = _geometry(path, k, spec, n_inputs, n_units, side, channels)
        if g is None and n_inputs != outputs:
            raise CNNFormatError(f"{path}: dense layer {k + 1} takes {n_inputs} inputs but its input has {outputs}")
        shape = (n_units, n_words(n_inputs))
        for name, dtype, wanted in ((f"signs{k}", np.uint64, shape), (f"b{k}", np.float64, (n_units,))) + (
                ((f"connected{k}", np.uint64, shape),) if has_mask else ()):
            ebf._check_array(path, headers, name, wanted, dtype)
            expected.add(name)
        plan.append((n_inputs, has_mask, g))
        outputs, side, channels = (n_units, 1, 1) if g is None else (g.units, g.out_side, g.channels)
    if set(headers) != expected:
        raise CNNFormatError(f"{path}: unexpected arrays {sorted(set(headers) - expected)} for the {len(specs)} layers "
                             f"its header lists")
    layers = []  # every declared dtype and shape checked: now the data
    for k, (n_inputs, has_mask, _) in enumerate(plan):
        signs, b = f[f"signs{k}"], f[f"b{k}"]
        connected = f[f"connected{k}"] if has_mask else None
        ebf._check_layer_arrays(path, k, signs, connected, b, n_inputs)
        layers.append(PackedLayer(signs, connected, b, n_inputs))
    return PackedCNN(layers, [g for *_, g in plan], float(scale), header.get("source", {}))
