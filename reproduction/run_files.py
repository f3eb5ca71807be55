"""The files of a run's folder that every kind of run shares (EBP's, reproduction.folder; the tuned baselines',
reproduction.tuned): their names, the folder's lock, its record read back, a file set aside, and how two runs'
parameters differ. Below reproduction.folder and reproduction.tuned, above reproduction.records only, so that the
baselines' harness needs nothing of EBP's run folder (nor of ebp_train, which that folder reads).
"""
from __future__ import annotations

import datetime as _dt
import errno
import os
import stat
import tempfile
from pathlib import Path

import numpy as np

from reproduction.records import RecordError, read_record, write_atomically

RESULT_FILE = "result.json"
CHECKPOINT_FILE = "checkpoint.npz"
LOCK_FILE = ".lock"
PREDICTIONS_FILE = "predictions.npz"  # the predicted class of every test image, per output (save_predictions)
N_CLASSES = 10


class RunBusyError(RuntimeError):
    """Another process is training into this output folder (it holds the folder's lock)."""


class UnsafeLockError(RuntimeError):
    """A folder's lock file is a symbolic link (or not a regular file): opening it for writing would write through
    it to whatever it points at."""


def _open_lock(lock: Path, flags: int) -> int:
    """A file descriptor of the lock file `lock`, opened without following a symbolic link; UnsafeLockError if
    it is one (or not a regular file), naming it and its target."""
    try:
        fd = os.open(lock, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafeLockError(f"refusing to use the lock {lock}: it is a symbolic link (to {os.readlink(lock)}), "
                                  f"and opening it would write to its target; remove the link") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeLockError(f"refusing to use the lock {lock}: it is not a regular file; remove it")
    return fd


def open_output_dir(output_dir):
    """Create the output folder (a new temporary one for None) and lock it for this process.

    Returns (absolute path, lock handle); keep the handle open while training. The lock (an flock, released when
    the process dies) stops two processes from training into the same checkpoint; RunBusyError if another holds
    it, UnsafeLockError if the lock file is a symbolic link (it is opened with O_NOFOLLOW, never truncated).
    """
    import fcntl

    path = Path(tempfile.mkdtemp(prefix="ebp-experiment-")) if output_dir is None else Path(output_dir)
    path = path.resolve()  # every message names the folder absolutely, whatever the caller's working folder
    path.mkdir(parents=True, exist_ok=True)
    handle = os.fdopen(_open_lock(path / LOCK_FILE, os.O_WRONLY | os.O_CREAT), "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise RunBusyError(f"another process is already training into {path} (it holds {path / LOCK_FILE}); "
                           f"wait for it to finish or stop it") from None
    return path, handle


def is_locked(path) -> bool:
    """Whether some live process holds the lock of output folder `path`. Opens the lock read-only (a read-only
    runs folder can be listed) and without following a link (a lock that is a link is nobody's: False)."""
    import fcntl

    lock = Path(path) / LOCK_FILE
    try:
        fd = _open_lock(lock, os.O_RDONLY)
    except (FileNotFoundError, UnsafeLockError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing releases the lock if we took it
    return False


def read_result(path) -> dict | None:
    """The run record (records.read_record) in folder `path`, or None if there is none or it is unreadable."""
    try:
        return read_record(Path(path) / RESULT_FILE)
    except (FileNotFoundError, RecordError):
        return None


def differences(saved: dict, wanted: dict, names) -> str:
    """'epochs: 120 there, 1 here; n_train: None there, 1000 here' for the parameters `names` in which a folder's
    run `saved` and the one asked for, `wanted`, differ."""
    return "; ".join(f"{k}: {saved.get(k)!r} there, {wanted.get(k)!r} here" for k in names
                     if saved.get(k) != wanted.get(k))


def move_aside(path, why: str = "corrupt") -> Path:
    """Rename a file to <name>.<why>-<UTC time> beside it (kept for inspection, never deleted); the new path."""
    path = Path(path)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.{why}-{stamp}")
    os.replace(path, target)
    return target


# Per-image predictions: what a paired analysis over test images and seeds needs (reproduction.paired), about
# 5 kB a run: uint8 classes in one compressed .npz, read without pickle.

class PredictionsError(ValueError):
    """A predictions file that is not one: unreadable, or an array of another name, dtype or shape."""


def save_predictions(path, predictions: dict) -> None:
    """{output name: predicted class per test image} as one compressed .npz of uint8 arrays (no pickle), written
    atomically (records.write_atomically). ValueError for a class outside 0..9 or arrays of unequal length."""
    import io

    arrays = {name: np.asarray(p) for name, p in predictions.items()}
    lengths = {len(p) for p in arrays.values()}
    if not arrays or len(lengths) != 1 or any(p.ndim != 1 for p in arrays.values()):
        raise ValueError(f"predictions {sorted(arrays)} must be one-dimensional arrays of one length, not {lengths}")
    for name, p in arrays.items():
        if p.size and (p.min() < 0 or p.max() >= N_CLASSES or not np.issubdtype(p.dtype, np.integer)):
            raise ValueError(f"predictions[{name!r}] must hold integer classes 0..{N_CLASSES - 1}")
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: p.astype(np.uint8) for name, p in arrays.items()})
    write_atomically(path, buffer.getvalue())


def load_predictions(path, n_images: int | None = None) -> dict[str, np.ndarray]:
    """The arrays of a predictions file (save_predictions), read with allow_pickle=False; PredictionsError naming
    the file and what is wrong (not an .npz, not uint8, not one-dimensional, a class above 9, not `n_images`
    long where given)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {name: f[name] for name in f.files}
    except (OSError, ValueError, EOFError) as err:
        raise PredictionsError(f"{path}: not a predictions file ({err}); recompute it") from err
    for name, p in arrays.items():
        if p.dtype != np.uint8 or p.ndim != 1 or (p.size and p.max() >= N_CLASSES) or (
                n_images is not None and len(p) != n_images):
            raise PredictionsError(f"{path}: array {name!r} is {p.dtype}{list(p.shape)}, not uint8 classes 0..9 of "
                                   f"{n_images or 'the'} test images; recompute it")
    return arrays
