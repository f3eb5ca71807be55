"""Checkpoint files: named arrays and one JSON metadata record in an .npz, written atomically and read back with
every failure named.

ebp_lib.save_network / load_network store a network in this format (arrays h0, b0, h1, ...; the metadata holds
its configuration), and ebp_train.fit's checkpoints add the run, the history and the RNG state to the metadata.
Nothing here knows the model, so the model's module can use it without importing anything back.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import zipfile
import zlib
from pathlib import Path

import numpy as np


class CheckpointError(ValueError):
    """A saved network or checkpoint cannot be read (empty, truncated, corrupt, or not written by save_network)."""


class NewerCheckpointError(CheckpointError):
    """A checkpoint or saved network of a format newer than this code's: written by a newer version of the project.
    It is left alone (never moved aside as corrupt, never retrained over): update the code to read it."""


class CheckpointMismatchError(ValueError):
    """A checkpoint belongs to another run (network, seed, batch size, engine or data settings differ)."""


def float32_if_exact(a: np.ndarray) -> np.ndarray:
    """A float64 array whose values are all float32 numbers, as float32 (half the size, and exact: casting it back
    gives the same float64 numbers); any other array unchanged. The fast engine rounds h and b to float32 after
    every call, so its networks are stored at half the size."""
    if a.dtype == np.float64:
        small = a.astype(np.float32)
        if np.array_equal(small, a):
            return small
    return a


def write_checkpoint(path, arrays: dict, meta: dict) -> None:
    """Write `arrays` and the JSON-serialisable `meta` to the .npz `path` atomically: an interrupted or failed save
    (a full disk) leaves the previous file as it was and no temporary behind; the OSError names the path. The
    temporary, .<name>.<pid>.tmp.npz, is this process's own: two writers never share one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(temporary_name(path.name))
    try:
        np.savez(tmp, meta=json.dumps(meta), **arrays)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, f"could not write {path}: {err.strerror or err}") from err


def temporary_name(name: str, pid: int | None = None) -> str:
    """The name of process `pid`'s (default: this one's) temporary of the checkpoint file `name` (write_checkpoint)."""
    return f".{name}.{os.getpid() if pid is None else pid}.tmp.npz"


# What a damaged file raises while it is opened or read: a bad zip directory or CRC, a truncated stream, a missing
# or malformed entry.
_UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error)
MAX_META_BYTES = 64 * 2 ** 20  # a checkpoint's JSON metadata (history, RNG state) is far below this


MAX_JSON_DEPTH = 64  # nesting of any JSON the project writes: ~8 levels; Python's parser recurses ~1,000 deep
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def json_depth(data: bytes | str) -> int:
    """How deeply the arrays and objects of the JSON text `data` nest, counted without parsing it (brackets
    inside strings do not count), so that a text of a million '[' is refused before the parser recurses."""
    data = data.encode() if isinstance(data, str) else data
    code = np.frombuffer(_JSON_STRING.sub(b'""', data), dtype=np.uint8)
    step = ((code == ord("[")) | (code == ord("{"))).astype(np.int64) - ((code == ord("]")) | (code == ord("}")))
    return int(np.cumsum(step).max(initial=0))


def loads_bounded(text: str, max_depth: int = MAX_JSON_DEPTH):
    """json.loads of a text nested at most `max_depth` deep (json_depth); ValueError otherwise."""
    depth = json_depth(text)
    if depth > max_depth:
        raise ValueError(f"its JSON is nested {depth} levels deep, more than the {max_depth} of anything the "
                         f"project writes")
    return json.loads(text)


@contextlib.contextmanager
def open_checkpoint(path):
    """The metadata (a dict), the arrays (read on access) and their headers (array_headers: shape, dtype and size of
    each, read without the data) of a file written by write_checkpoint. Any failure to read or interpret them inside
    the `with` block, where the arrays are read and checked, is a CheckpointError naming the file (one raised there
    passes as it is); a missing file stays a FileNotFoundError."""
    try:
        with np.load(path, allow_pickle=False) as f:
            headers = array_headers(f)
            meta = headers.get("meta")
            if meta is None or meta[1].kind != "U" or meta[0] != () or meta[2] > MAX_META_BYTES:
                raise ValueError(f"its 'meta' entry is missing or not a JSON text of at most {MAX_META_BYTES} bytes")
            yield loads_bounded(str(f["meta"])), f, headers
    except (FileNotFoundError, CheckpointError):
        raise
    except _UNREADABLE as err:
        raise CheckpointError(f"cannot read {path} ({type(err).__name__}: {err}); the file is empty, truncated or "
                              f"corrupt. Move it aside (or delete it) to start that run afresh") from err


def array_headers(npz) -> dict[str, tuple[tuple, np.dtype, int]]:
    """{name: (shape, dtype, bytes)} of every array in an open .npz (np.load's NpzFile), read from each member's
    .npy header without reading its data, so that a loader can check every shape and size against what it
    expects before it allocates anything. `bytes` is what the shape and dtype declare; ValueError if that exceeds
    what the member holds (a header that declares gigabytes in a small file), or if a member is not a plain .npy
    array (another format version, an object array that would need a pickle)."""
    from numpy.lib import format as npy

    out = {}
    for member in npz.zip.infolist():
        name = member.filename[:-4] if member.filename.endswith(".npy") else member.filename
        if member.compress_type != zipfile.ZIP_STORED and member.file_size > 1100 * member.compress_size + 4096:
            # deflate expands at most about 1032-fold: a larger claim is a crafted directory entry
            raise ValueError(f"array {name!r} claims {member.file_size} bytes from {member.compress_size} compressed")
        with npz.zip.open(member) as f:
            version = npy.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"array {name!r} is stored in .npy format version {version}, not 1.0 or 2.0")
            read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, _, dtype = read(f)
            header_size = f.tell()
        if dtype.hasobject:
            raise ValueError(f"array {name!r} holds Python objects, which only a pickle could read")
        size = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if size > member.file_size - header_size:
            raise ValueError(f"array {name!r} declares {size} bytes ({dtype}{list(shape)}) but its entry holds "
                             f"{member.file_size - header_size}")
        out[name] = (tuple(shape), dtype, size)
    return out


# ----------------------------------------------------------------------------------------------------------
# Saved networks (ebp_lib.save_network): the metadata's format, one upgrader for older ones
# ----------------------------------------------------------------------------------------------------------

NETWORK_FORMAT = 2  # the version of a saved network's metadata that save_network writes and every reader receives
# Format 1 (no "format" in the metadata): a network's configuration left out each of these at its default value.
FORMAT_1_DEFAULTS = {"mask_reading": "absent", "real_update": "spec"}


def upgrade_network_meta(meta: dict, path) -> dict:
    """A saved network's metadata of an older format as the current one (NETWORK_FORMAT): the only place that knows
    older formats; every reader gets the current one (read_network_meta, ebp_lib.load_network). Format 1: the
    network's configuration (`config`, and a checkpoint's `run.network`) gains the settings it left out at their
    defaults (FORMAT_1_DEFAULTS). CheckpointError naming `path` for a format newer than this code's, or unknown."""
    version = meta.get("format", 1)
    if isinstance(version, int) and not isinstance(version, bool) and version > NETWORK_FORMAT:
        raise NewerCheckpointError(f"{path}: this network was saved by a newer version of the project (format {version}; "
                              f"this code reads up to {NETWORK_FORMAT}); it is left alone: update the code (git pull) "
                              f"to read it")
    if version == NETWORK_FORMAT:
        return meta
    if version != 1:
        raise CheckpointError(f"{path}: format {version!r} is not a saved-network format this code reads "
                              f"({NETWORK_FORMAT}, or 1)")
    meta = {"format": NETWORK_FORMAT, **meta}
    for holder in (meta, meta.get("run")):
        if isinstance(holder, dict):
            key = "config" if holder is meta else "network"
            if isinstance(holder.get(key), dict):
                holder[key] = {**holder[key], **{k: v for k, v in FORMAT_1_DEFAULTS.items() if k not in holder[key]}}
    return meta


def read_network_meta(path) -> dict:
    """The metadata saved with a network (for a checkpoint: run, history, RNG state), without the weights, in the
    current format (upgrade_network_meta). Raises CheckpointError for an empty, truncated or corrupt file, or one of
    a newer format, naming it."""
    with open_checkpoint(path) as (meta, _, _):
        return upgrade_network_meta(meta, path)


def check_same_run(path, meta: dict, wanted: dict) -> None:
    """Refuse to resume a run from a checkpoint of a different one, naming every setting that differs.
    Checkpoints without a `run` record (the format of the first committed runs) hold the network, seed and batch
    size at the top level of their metadata: only those are compared."""
    saved = meta.get("run") or {"network": meta["config"], "seed": meta.get("seed"),
                                "batch_size": meta.get("batch_size")}
    keys = sorted(set(saved) | set(wanted)) if "run" in meta else sorted(saved)
    diffs = [f"{k}: checkpoint {saved.get(k)!r}, this run {wanted.get(k)!r}" for k in keys
             if saved.get(k) != wanted.get(k)]
    if diffs:
        raise CheckpointMismatchError(f"checkpoint {path} was written by another run; resuming it would mix two "
                                      f"runs:\n  - " + "\n  - ".join(diffs) +
                                      "\nmove it aside (or delete it) to start afresh, or choose another output "
                                      "folder")
