"""The data of the reproduction: MNIST and Fashion-MNIST from the original IDX .gz files, verified, standardised
and labelled one-vs-all (docs/maths.md §Data protocol; notebook 00).

Files are looked for in the folder given, else in $EBP_DATA_DIR/<dataset>, then in the cache folder, and are
downloaded into the cache only where none is found; every file's md5 is checked against the published one, and
every IDX header against the file's length. Nothing here depends on the model (ebp_lib).
"""
from __future__ import annotations

import gzip
import hashlib
import os
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA_ENV_VAR = "EBP_DATA_DIR"
CACHE_DIR = Path(__file__).resolve().parent / ".cache" / "data"
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
# Each data set's facts, read from here by the experiments, the baselines and the reports: its display name, its
# sizes, its images' side and classes; `target_error`, the test error at which the baselines' "epochs to reach" is
# counted; `works_well_percent`, the bar of the paper's "works well" (reproduction.findings): under any linear
# classifier there (MNIST's 7.6-12%, LeCun 1998; Fashion-MNIST's about 16%, the logistic regression of Xiao,
# Rasul & Vollgraf's 2017 scikit-learn benchmark).
DATASETS = {
    "mnist": {
        "name": "MNIST", "n_train": 60000, "n_test": 10000, "image_side": 28, "n_classes": 10,
        "target_error": 0.03, "works_well_percent": 5.0,
        "mirrors": [
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
            "http://yann.lecun.com/exdb/mnist/",
        ],
        "md5": {
            "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
            "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
            "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
        },
    },
    "fashion-mnist": {
        "name": "Fashion-MNIST", "n_train": 60000, "n_test": 10000, "image_side": 28, "n_classes": 10,
        "target_error": 0.15, "works_well_percent": 15.0,
        "mirrors": ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"],
        "md5": {
            "train-images-idx3-ubyte.gz": "cf8536b0aa1a6ac5fa3f23001093305c",
            "train-labels-idx1-ubyte.gz": "10bea18fdb374794d4bb42e356e600c9",
            "t10k-images-idx3-ubyte.gz": "f78720b4224f21cce2f2ccf2d7a94c9a",
            "t10k-labels-idx1-ubyte.gz": "0d30e22e447f3c33dab9ed536400ac01",
        },
    },
}


def shared_fact(key: str):
    """The value of `key` in every data set's entry of DATASETS; ValueError where they differ (code that holds one
    number for all data sets, such as the training-set size, must then ask per data set)."""
    values = {facts[key] for facts in DATASETS.values()}
    if len(values) != 1:
        raise ValueError(f"the data sets differ in {key}: {sorted(values)}; look it up per data set in DATASETS")
    return values.pop()


def train_size() -> int:
    """The number of training images, the same for every data set of DATASETS (60,000)."""
    return shared_fact("n_train")


def image_side() -> int:
    """The side of every data set's square images, in pixels (28)."""
    return shared_fact("image_side")


IDX_MAGIC = {1: 2049, 3: 2051}  # labels (1-D), images (3-D): 0x00000801 / 0x00000803, unsigned bytes


class DataError(ValueError):
    """A data file is missing, corrupted or not what it claims to be. The message names the file."""


class DataNotFoundError(DataError, FileNotFoundError):
    """The data files are in none of the places looked at, and could not be downloaded."""


def md5sum(path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_idx(path, ndim: int) -> np.ndarray:
    """Decode one gzipped IDX file of unsigned bytes with `ndim` dimensions; every check names the file."""
    path = Path(path)
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as err:  # BadGzipFile is an OSError; truncation is an EOFError
        raise DataError(f"{path}: not a complete gzip file ({err}); delete it and fetch it again") from err
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: only {len(raw)} bytes, shorter than an IDX header")
    magic = int.from_bytes(raw[:4], "big")
    if magic != IDX_MAGIC[ndim]:
        raise DataError(f"{path}: IDX magic number {magic:#010x}, expected {IDX_MAGIC[ndim]:#010x} "
                        f"({ndim}-D unsigned bytes); is this the right file?")
    shape = tuple(int.from_bytes(raw[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim))
    expected = int(np.prod(shape))
    if len(raw) - header != expected:
        raise DataError(f"{path}: header promises shape {shape} ({expected} bytes) but the file holds "
                        f"{len(raw) - header} bytes of data")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape).copy()


def read_split(images_path, labels_path) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, 28, 28) uint8 and labels (n,) uint8 of one split, checked against each other."""
    images, labels = read_idx(images_path, 3), read_idx(labels_path, 1)
    if len(images) != len(labels):
        raise DataError(f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} labels")
    if labels.size and labels.max() > 9:
        raise DataError(f"{labels_path}: label {labels.max()} outside 0..9")
    return images, labels


def _download(dataset: str, name: str, errors: list[str]) -> Path | None:
    """Fetch one file into the cache with pooch, verifying its md5; None if no mirror gave the right file.
    Each mirror's failure (no network, HTTP error, md5 mismatch) is appended to `errors`."""
    import pooch  # only needed on a machine with internet and no local copy

    spec = DATASETS[dataset]
    for mirror in spec["mirrors"]:
        try:
            return Path(pooch.retrieve(mirror + name, known_hash="md5:" + spec["md5"][name],
                                       fname=name, path=CACHE_DIR / dataset, progressbar=False))
        except Exception as err:
            errors.append(f"{mirror}{name}: {type(err).__name__}: {err}")
    return None


def find_data_files(dataset: str = "mnist", data_dir=None, download: bool = True) -> dict[str, Path]:
    """Locate and verify the four files of `dataset`: in `data_dir` if given (and nowhere else), otherwise in
    $EBP_DATA_DIR/<dataset>, then the cache folder, then by download into the cache. Each file's md5 is checked."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {sorted(DATASETS)}")
    if data_dir is not None:
        folders = [Path(data_dir) / dataset if (Path(data_dir) / dataset).is_dir() else Path(data_dir)]
        download = False
    else:
        folders = [Path(os.environ[DATA_ENV_VAR]) / dataset] if os.environ.get(DATA_ENV_VAR) else []
        if folders and not folders[0].is_dir():  # a mistyped variable would otherwise fall back silently
            warnings.warn(f"{DATA_ENV_VAR}={os.environ[DATA_ENV_VAR]} has no folder {folders[0]}: looking in the "
                          f"cache {CACHE_DIR / dataset}{' and downloading' if download else ''} instead; set "
                          f"{DATA_ENV_VAR} to the folder that holds '{dataset}/'", stacklevel=2)
        folders.append(CACHE_DIR / dataset)
    found, missing, errors = {}, [], []
    for name, md5 in DATASETS[dataset]["md5"].items():
        path = next((folder / name for folder in folders if (folder / name).is_file()), None)
        if path is None and download:
            path = _download(dataset, name, errors)
        if path is None:
            missing.append(name)
            continue
        actual = md5sum(path)
        if actual != md5:
            raise DataError(f"{path}: md5 {actual} does not match the published {md5}; the file is corrupted "
                            f"or a different version: delete it and fetch the original")
        found[name] = path
    if missing:
        raise DataNotFoundError(
            f"{dataset}: cannot find {', '.join(missing)} in {', '.join(map(str, folders))}"
            f"{' and could not download them' if download else ''}. Put the original IDX .gz files in a folder "
            f"and set {DATA_ENV_VAR} to its parent (it must hold '{dataset}/'), or pass data_dir=."
            f"{' Last download error: ' + errors[-1] if errors else ''}")
    return found


def load_raw(dataset: str = "mnist", data_dir=None) -> dict[str, np.ndarray]:
    """The raw uint8 arrays: train/test images (n, 28, 28) and labels (n,)."""
    files = find_data_files(dataset, data_dir)
    out = {}
    for split, (images, labels) in SPLIT_FILES.items():
        out[f"{split}_images"], out[f"{split}_labels"] = read_split(files[images], files[labels])
    return out


def standardise(train: np.ndarray, test: np.ndarray, mode: str = "pixel", std_floor: float = 0.0,
                dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """Centre and scale images as 784-vectors, with statistics from the training set only
    (docs/maths.md §Data protocol).

    mode "pixel": each input variable to mean 0, std 1 (LeCun et al.'s Efficient BackProp; the paper's reading).
       Pixels whose std is <= std_floor are divided by std_floor instead; with the default floor 0, pixels
       constant over the training set become exactly 0.
    mode "global": one mean and one std over all training pixels.   mode "unit": pixels / 255, no centring.
    mode "image": each image, training or test, centred and scaled by its own mean and std over its 784 pixels
       (no training statistics; an image of one grey level becomes 0).
    """
    x_train = train.reshape(len(train), -1).astype(dtype)
    x_test = test.reshape(len(test), -1).astype(dtype)
    if mode == "pixel":
        mean = x_train.mean(axis=0)
        std = np.sqrt(np.square(x_train - mean).mean(axis=0))
        scale = np.maximum(std, std_floor)
        scale[scale == 0] = np.inf  # constant pixel: (x - mean) is 0 anyway; map it to exactly 0
    elif mode == "global":
        mean, scale = x_train.mean(), x_train.std()
    elif mode == "unit":
        mean, scale = 0.0, 255.0
    elif mode == "image":
        for x in (x_train, x_test):
            x -= x.mean(axis=1, keepdims=True)
            std = np.sqrt(np.square(x).mean(axis=1, keepdims=True))
            x /= np.where(std == 0, np.inf, std)
        return x_train, x_test
    else:
        raise ValueError(f"unknown preprocessing {mode!r}; choose 'pixel', 'global', 'unit' or 'image'")
    for x in (x_train, x_test):  # in place: these arrays are large
        x -= mean
        x /= scale
    return x_train, x_test


def one_vs_all(labels: np.ndarray, n_classes: int = 10, dtype=np.float64) -> np.ndarray:
    """Targets y_k = +1 for the true class and -1 otherwise (the paper's "2δ+1" is a misprint for 2δ-1)."""
    return np.where(np.arange(n_classes) == np.asarray(labels)[:, None], 1.0, -1.0).astype(dtype)


@dataclass
class Dataset:
    """Preprocessed data: x (n, 784) inputs, y (n, 10) ±1 targets, labels (n,) digits."""
    name: str
    preprocessing: str
    x_train: np.ndarray
    y_train: np.ndarray
    labels_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    labels_test: np.ndarray


def load_dataset(dataset: str = "mnist", preprocessing: str = "pixel", std_floor: float = 0.0,
                 n_train: int | None = None, data_dir=None, dtype=np.float64) -> Dataset:
    """Load, verify and preprocess a dataset; `n_train` keeps the first n training images (quick runs).
    The standardisation statistics come from the training images that are kept."""
    raw = load_raw(dataset, data_dir)
    train_images, train_labels = raw["train_images"], raw["train_labels"]
    if n_train is not None:
        if not 1 <= int(n_train) <= len(train_images):
            raise ValueError(f"n_train={n_train} must be between 1 and {len(train_images)}")
        train_images, train_labels = train_images[:n_train], train_labels[:n_train]
    x_train, x_test = standardise(train_images, raw["test_images"], preprocessing, std_floor, dtype)
    return Dataset(dataset, preprocessing, x_train, one_vs_all(train_labels, dtype=dtype), train_labels,
                   x_test, one_vs_all(raw["test_labels"], dtype=dtype), raw["test_labels"])

