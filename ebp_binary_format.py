"""The file format of a deployed binary network: save_packed writes a PackedNetwork (ebp_binary) to a versioned
.npz, load_packed reads it back.

* **What is stored.** One .npz archive of plain arrays: `header`, a JSON text (format name FORMAT_NAME, version,
  the scale p, the source description, the plan of engine "auto" if the model was calibrated, and per layer
  n_inputs, n_units, whether it has a mask plane and, for a locally connected layer, [input_side, block]); then per
  layer k the sign plane `signs{k}` and, where the layer has one, the mask plane `connected{k}` (uint64 words, the
  bit layout of ebp_binary's module docstring), and the biases `b{k}` (float64). A dense network's file holds no
  optional key, so it is as large as in format 1.
* **Versioning.** save_packed writes FORMAT_VERSION (2: a local layer stores its block² patch only); load_packed
  reads every version in READ_VERSIONS (1: every layer dense, a full-width mask plane) and refuses any other,
  saying which versions it reads.
* **It never runs code.** No pickle: the archive is opened with allow_pickle=False and the header is JSON, so a
  file can only be data. Writing is atomic (a temporary file, then os.replace): an interrupted or failed save
  leaves the previous file as it was.
* **Bad input is refused, not guessed at.** load_packed raises PackedFormatError, a ValueError whose message names
  the file and what is wrong with it: another format or version, an ebp_lib checkpoint (said as such), missing or
  extra arrays, wrong dtypes or shapes, inconsistent layer sizes or local geometry, bits in the padding, a scale
  outside (0, 1], a malformed plan, a truncated or damaged archive. The header and every array's declared dtype and
  shape (its .npy header, ebp_checkpoint.array_headers) are checked before any array's data is read, so a small
  crafted file never makes it allocate more than it holds.
"""
from __future__ import annotations

import json
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ebp_binary import PackedLayer, PackedNetwork, _check_local, n_words, pack_bits
from ebp_checkpoint import array_headers, loads_bounded

FORMAT_NAME = "ebp-binary-packed"
FORMAT_VERSION = 2  # 2: local layers store their patches only (1: a full-width mask plane; still read)
READ_VERSIONS = (1, 2)


class PackedFormatError(ValueError):
    """A packed-network file that this loader cannot or will not read (names the file and what was wrong)."""


def save_packed(path, packed: PackedNetwork) -> None:
    """Write a packed network as .npz (format FORMAT_VERSION), atomically: an interrupted or failed save leaves
    the previous file as it was.

    Arrays: header (JSON: format, version, scale, source, plan if there is one, per layer n_inputs / n_units /
    whether it has a mask plane / local = [input_side, block] for a local layer), signs{k} and connected{k}
    (uint64), b{k} (float64). The optional keys are left out when empty, so a dense network's file is as large as
    in format 1.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "scale": packed.scale, "source": packed.source,
              **({"plan": packed.plan} if packed.plan is not None else {}),
              "layers": [{"n_inputs": layer.n_inputs, "n_units": layer.n_units,
                          "connected": layer.connected is not None,
                          **({"local": list(layer.local)} if layer.local is not None else {})}
                         for layer in packed.layers]}
    write_layers(path, header, packed.layers)


def write_layers(path: Path, header: dict, layers) -> None:
    """The JSON `header` and each layer's signs{k}, b{k} (connected{k} where it has a mask plane) as one .npz,
    written atomically: a failed save leaves the previous file as it was and no temporary behind."""
    arrays = {"header": np.array(json.dumps(header))}
    for k, layer in enumerate(layers):
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
                weights = loads_bounded(_read_text(path, f, headers, "meta"))["config"]["weights"]
            except (PackedFormatError, ValueError, KeyError, TypeError):
                weights = "unknown"
            why = (" A real-weight network cannot be packed: its EBP-D weights are the real means h, which have no "
                   "±1 form." if weights == "real" else " Pack it with ebp_binary_format.save_packed(path, "
                   "ebp_binary.export_network(ebp_lib.load_network(checkpoint)[0])).")
            raise PackedFormatError(f"{path}: is an ebp_lib network checkpoint ({weights} weights, written by "
                                    f"save_network), not a packed binary network.{why}")
        raise PackedFormatError(f"{path}: has no 'header' array; it was not written by ebp_binary_format.save_packed")
    try:
        header = loads_bounded(_read_text(path, f, headers, "header"))
    except ValueError as e:
        if isinstance(e, PackedFormatError):
            raise
        raise PackedFormatError(f"{path}: its header is not valid JSON ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise PackedFormatError(f"{path}: the header does not name the format {FORMAT_NAME!r}")
    if header.get("version") not in READ_VERSIONS:
        raise PackedFormatError(f"{path}: written in format version {header.get('version')!r}; this loader reads "
                                f"versions {', '.join(map(str, READ_VERSIONS))}. Re-export the network with this "
                                f"ebp_binary.export_network and ebp_binary_format.save_packed")
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


def _check_layer_arrays(path, k: int, signs, connected, b, n_positions: int) -> None:
    """Padding bits 0, sign bits only where connected, finite biases: what the popcount identities rely on."""
    padding = ~pack_bits(np.ones(n_positions, dtype=bool))
    if np.any(signs & padding) or (connected is not None and np.any(connected & padding)):
        raise PackedFormatError(f"{path}: layer {k + 1} has bits set in the padding of its last word")
    if connected is not None and np.any(signs & ~connected):
        raise PackedFormatError(f"{path}: layer {k + 1} has +1 sign bits on weights its mask plane marks as "
                                f"unconnected")
    if not np.all(np.isfinite(b)):
        raise PackedFormatError(f"{path}: layer {k + 1} has non-finite biases")


def _check_plan(path, plan, n_layers: int):
    """A stored plan is null or {"blas_from_batch": [a batch size ≥ 1 or null per layer], ...}."""
    if plan is None:
        return None
    crossover = plan.get("blas_from_batch") if isinstance(plan, dict) else None
    if (not isinstance(crossover, list) or len(crossover) != n_layers
            or not all(c is None or (isinstance(c, int) and not isinstance(c, bool) and c >= 1) for c in crossover)):
        raise PackedFormatError(f"{path}: the header's plan {plan!r} needs blas_from_batch, a batch size (≥ 1) or "
                                f"null for each of the {n_layers} layers")
    return plan


def load_packed(path) -> PackedNetwork:
    """Read a packed network written by save_packed (format version 1 or 2); refuses, naming the file and what was
    wrong, anything else: another format or version, missing or extra arrays, wrong dtypes or shapes, inconsistent
    layer sizes or local geometry, bits in the padding, a scale outside (0, 1], a malformed plan, a truncated file,
    an ebp_lib checkpoint. The header is read and checked first, then every array's declared dtype and shape (from
    its .npy header) against what the header implies, and only then the arrays' data: a small crafted file never
    makes it allocate more than it holds."""
    return read_npz(path, _load_packed, PackedFormatError, "ebp_binary_format.save_packed")


def read_npz(path, load, error: type[PackedFormatError], writer: str):
    """load(path, f, headers) of the .npz at path, with its arrays' declared headers (ebp_checkpoint.array_headers)
    read first; `error` (naming the file and `writer`, the function that writes such files) for an archive that
    cannot be read: truncated, damaged or not an .npz."""
    try:
        with np.load(path, allow_pickle=False) as f:
            try:
                headers = array_headers(f)
            except ValueError as e:
                raise error(f"{path}: {e}") from None
            return load(path, f, headers)
    except (FileNotFoundError, PackedFormatError):
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:
        raise error(f"{path}: cannot be read as an .npz archive ({type(e).__name__}: {e}); the file is "
                    f"truncated or damaged, or was not written by {writer}") from None


def _load_packed(path, f, headers: dict) -> PackedNetwork:
    header = _read_header(path, f, headers)
    specs = header.get("layers")
    scale = header.get("scale")
    if not isinstance(specs, list) or not specs:
        raise PackedFormatError(f"{path}: the header lists no layers")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 1:
        raise PackedFormatError(f"{path}: scale {scale!r} must be a number in (0, 1] (the keep probability p)")
    plan = _check_plan(path, header.get("plan"), len(specs))
    sizes, expected = [], {"header"}
    for k, spec in enumerate(specs):
        try:
            n_inputs, n_units, has_mask = int(spec["n_inputs"]), int(spec["n_units"]), bool(spec["connected"])
            local = spec.get("local")  # absent for a dense layer (and in version 1, where every layer is dense)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise PackedFormatError(f"{path}: layer {k + 1}'s header entry {spec!r} needs n_inputs, n_units, "
                                    f"connected") from None
        if n_inputs < 1 or n_units < 1:
            raise PackedFormatError(f"{path}: layer {k + 1} has {n_inputs} inputs and {n_units} units")
        if k > 0 and n_inputs != sizes[-1][1]:
            raise PackedFormatError(f"{path}: layer {k + 1} takes {n_inputs} inputs but layer {k} has "
                                    f"{sizes[-1][1]} units")
        if local is not None:
            problem = _check_local(local, n_inputs, n_units)
            if problem:
                raise PackedFormatError(f"{path}: layer {k + 1}: {problem}")
            local = (int(local[0]), int(local[1]))
        positions = n_inputs if local is None else local[1] ** 2
        shape = (n_units, n_words(positions))
        _check_array(path, headers, f"signs{k}", shape, np.uint64)
        if has_mask:
            _check_array(path, headers, f"connected{k}", shape, np.uint64)
        _check_array(path, headers, f"b{k}", (n_units,), np.float64)
        expected |= {f"signs{k}", f"b{k}"} | ({f"connected{k}"} if has_mask else set())
        sizes.append((n_inputs, n_units, has_mask, local, positions))
    if set(headers) != expected:
        raise PackedFormatError(f"{path}: unexpected arrays {sorted(set(headers) - expected)} for the "
                                f"{len(specs)} layers its header lists")
    layers = []  # every declared dtype and shape checked: now the data, which is what the header says
    for k, (n_inputs, _, has_mask, local, positions) in enumerate(sizes):
        signs, b = f[f"signs{k}"], f[f"b{k}"]
        connected = f[f"connected{k}"] if has_mask else None
        _check_layer_arrays(path, k, signs, connected, b, positions)
        layers.append(PackedLayer(signs, connected, b, n_inputs, local))
    return PackedNetwork(layers, float(scale), header.get("source", {}), plan)

