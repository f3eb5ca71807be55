"""Expectation BackPropagation (EBP) for binary and real-weight networks on MNIST, written like the maths.

The readable core of the reproduction of Cheng, Soudry, Mao & Lan (2015), "Training Binary Multilayer Neural
Networks for Image Classification using Expectation Backpropagation". The numbered notebooks derive every
equation; this file implements each one once, in the order they derive them, and `docs/maths.md` states
them (references "docs/maths.md §Forward pass" name its sections).

Sections: data (notebook 00) · model: posterior and architecture (01, 04, 05, 08) · forward pass (02, 07) ·
backward pass (03) · update and one training step (03, 04) · outputs EBP-P / EBP-D (06) · training loop ·
persistence.

Beside it: `ebp_fast.py` runs the same training step and evaluation in float32 as compiled (numba) loops
(`engine="fast"`, the default; imported only when used); `ebp_checks.py` holds the Monte Carlo,
finite-difference and exact-enumeration references that the tests and notebooks check this file against;
`ebp_analysis.py` the notebooks' helpers for trained networks (learning curves, calibration, receptive fields).
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import special

ENGINES = ("fast", "reference")
DEFAULT_ENGINE = "fast"  # float32 compiled loops (ebp_fast.py); "reference" runs the numpy code of this file

# ----------------------------------------------------------------------------------------------------------
# Data: MNIST and Fashion-MNIST from the standard IDX .gz files (docs/maths.md §Data protocol)
# ----------------------------------------------------------------------------------------------------------

DATA_ENV_VAR = "EBP_DATA_DIR"
CACHE_DIR = Path(__file__).resolve().parent / ".cache" / "data"
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
DATASETS = {
    "mnist": {
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
        "mirrors": ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"],
        "md5": {
            "train-images-idx3-ubyte.gz": "cf8536b0aa1a6ac5fa3f23001093305c",
            "train-labels-idx1-ubyte.gz": "10bea18fdb374794d4bb42e356e600c9",
            "t10k-images-idx3-ubyte.gz": "f78720b4224f21cce2f2ccf2d7a94c9a",
            "t10k-labels-idx1-ubyte.gz": "0d30e22e447f3c33dab9ed536400ac01",
        },
    },
}
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
        except Exception as err:  # noqa: BLE001 - any failure means: try the next mirror
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
    else:
        raise ValueError(f"unknown preprocessing {mode!r}; choose 'pixel', 'global' or 'unit'")
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


# ----------------------------------------------------------------------------------------------------------
# Model: the mean-field posterior of every weight, and the architecture (docs/maths.md §Notation,
# §Posterior parametrisation, §Spatial filtering)
# ----------------------------------------------------------------------------------------------------------

WEIGHT_TYPES = ("binary", "real")
DROPOUT_KINDS = (None, "analytic", "sampled")
# The weights outside a spatial unit's receptive field (docs/maths.md §Spatial filtering): "absent" (they do not
# exist: N counts the connected inputs) or "held" (the paper's full matrix with those elements kept at h = 0:
# mean 0 but variance 1, so they add to σ², and N counts every input).
MASK_READINGS = ("absent", "held")


@dataclass
class Layer:
    """One layer's posterior: h (V, K) natural parameters (binary) or means (real), b (V,) the real bias,
    an optional 0/1 connectivity mask (V, K). `n` (V,) is the normaliser N = fan-in + 1 of each unit (the +1
    is the bias, docs/maths.md §Notation); with a mask the fan-in is the number of connected inputs, unless
    `held`: then the masked weights are held at h = 0 but still count (the "held" reading of MASK_READINGS)."""
    h: np.ndarray
    b: np.ndarray
    mask: np.ndarray | None = None
    held: bool = False
    n: np.ndarray = field(init=False)

    def __post_init__(self):
        absent = self.mask is not None and not self.held
        fan_in = self.mask.sum(axis=1) if absent else np.full(len(self.h), self.h.shape[1])
        self.n = (fan_in + 1).astype(self.h.dtype)


@dataclass
class Network:
    """An EBP network: layers, the weight type, its architecture and the dropout reading (keep probability p).
    `architecture` lists the layers after the input, e.g. [800, 800, 10] (fully connected) or
    [("local", 10), ("local", 10), 10] (spatial filtering, then a fully connected output layer)."""
    layers: list[Layer]
    weights: str
    architecture: list
    input_side: int = 28
    dropout: str | None = None
    keep: float = 0.8
    mask_reading: str = "absent"

    @property
    def sizes(self) -> list[int]:
        return [self.layers[0].h.shape[1]] + [len(layer.h) for layer in self.layers]


def weight_moments(layer: Layer, weights: str) -> tuple[np.ndarray, np.ndarray]:
    """⟨W⟩ and ⟨W²⟩ of every weight (docs/maths.md §Posterior parametrisation); 0 where masked out (a held
    weight keeps h = 0: ⟨W⟩ = 0 but ⟨W²⟩ = 1).

        binary, P(W = ±1) ∝ exp(hW):  ⟨W⟩ = tanh h,  ⟨W²⟩ = 1
        real, W ~ N(h, 1):            ⟨W⟩ = h,       ⟨W²⟩ = h² + 1
    """
    if weights == "binary":
        mean, second = np.tanh(layer.h), np.ones_like(layer.h)
    else:
        mean, second = layer.h, layer.h * layer.h + 1.0
    if layer.mask is not None and not layer.held:
        mean, second = mean * layer.mask, second * layer.mask
    return mean, second


def local_mask(side: int, block: int) -> np.ndarray:
    """0/1 connectivity of a locally connected layer (docs/maths.md §Spatial filtering): unit (a, c) of the
    (side−block+1)² output map sees the block×block input patch whose corner is (a, c). Returns a boolean
    (out_side², side²) matrix with exactly block² ones per row."""
    if not 1 <= block <= side:
        raise ValueError(f"block size {block} must be between 1 and the image side {side}")
    out = side - block + 1
    mask = np.zeros((out, out, side, side), dtype=bool)
    for a in range(out):
        for c in range(out):
            mask[a, c, a:a + block, c:c + block] = True
    return mask.reshape(out * out, side * side)


def check_architecture(architecture, input_side: int = 28) -> list[int]:
    """Validate a layer list (block sizes must fit the map they act on); return the sizes [inputs, units...]."""
    if not architecture:
        raise ValueError("architecture is empty: give at least the output layer, e.g. [200, 10]")
    side, sizes = input_side, [input_side ** 2]
    for k, spec in enumerate(architecture):
        if isinstance(spec, (tuple, list)) and len(spec) == 2 and spec[0] == "local":
            if side is None:
                raise ValueError(f"layer {k + 1}: a local layer must follow the image or another local layer")
            if not isinstance(spec[1], (int, np.integer)) or not 1 <= spec[1] <= side:
                raise ValueError(f"layer {k + 1}: block size {spec[1]!r} must be an integer between 1 and the "
                                 f"side {side} of its input map")
            side = side - spec[1] + 1
            sizes.append(side * side)
        elif isinstance(spec, (int, np.integer)) and not isinstance(spec, bool) and spec >= 1:
            side = None
            sizes.append(int(spec))
        else:
            raise ValueError(f"layer {k + 1}: {spec!r} is neither a positive layer size nor ('local', block)")
    return sizes


def init_network(architecture, weights: str = "binary", seed: int = 0, input_side: int = 28,
                 init_scale: float = 1.0, dropout: str | None = None, keep: float = 0.8,
                 dtype=np.float64, mask_reading: str = "absent") -> Network:
    """A new network: h ~ Uniform with variance init_scale/K per unit (K: the connected inputs), b = 0
    (docs/maths.md §Posterior parametrisation). Masked-out weights are exactly 0 and stay 0; `mask_reading`
    says whether they are absent or held at h = 0 (MASK_READINGS). The same seed gives the same network."""
    if weights not in WEIGHT_TYPES:
        raise ValueError(f"unknown weight type {weights!r}; choose 'binary' or 'real'")
    if dropout not in DROPOUT_KINDS:
        raise ValueError(f"unknown dropout {dropout!r}; choose None, 'analytic' or 'sampled'")
    if not 0 < keep <= 1:
        raise ValueError(f"dropout keep probability p={keep} must be in (0, 1]")
    if not init_scale > 0:
        raise ValueError(f"init_scale={init_scale} must be positive")
    if mask_reading not in MASK_READINGS:
        raise ValueError(f"unknown mask reading {mask_reading!r}; choose 'absent' or 'held'")
    check_architecture(architecture, input_side)
    rng = np.random.default_rng(seed)
    layers, width, side = [], input_side ** 2, input_side
    for spec in architecture:
        if isinstance(spec, (tuple, list)):
            mask = local_mask(side, spec[1])
            side = side - spec[1] + 1
        else:
            mask, side = None, None
        units = len(mask) if mask is not None else int(spec)
        fan_in = mask.sum(axis=1, keepdims=True) if mask is not None else width
        h = (rng.random((units, width)) - 0.5) * np.sqrt(12 * init_scale / fan_in)
        if mask is not None:
            h *= mask
        layers.append(Layer(h.astype(dtype), np.zeros(units, dtype), mask, held=mask_reading == "held"))
        width = units
    return Network(layers, weights, [list(s) if isinstance(s, tuple) else s for s in architecture],
                   input_side, dropout, keep, mask_reading)


def paper_architecture(name: str, n_classes: int = 10) -> list:
    """The paper's architectures by name: "800", "800-800" (1D input), "block13" (spatial, one hidden
    layer of (28-13+1)² units), "361-100" (spatial: 10×10 blocks twice)."""
    if name.startswith("block"):
        return [("local", int(name[5:])), n_classes]
    if name == "361-100":
        return [("local", 10), ("local", 10), n_classes]
    try:
        return [int(v) for v in name.split("-")] + [n_classes]
    except ValueError:
        raise ValueError(f"unknown architecture {name!r}; use e.g. '800', '800-800', 'block13' or '361-100'")


# ----------------------------------------------------------------------------------------------------------
# Forward pass: Gaussian (central-limit) moments of every unit's input (docs/maths.md §Forward pass, §Dropout)
# ----------------------------------------------------------------------------------------------------------

def layer_moments(layer: Layer, weights: str, nu_prev, v2_prev, nu2_prev):
    """μ and σ² of u = (W v + b)/sqrt(N) for independent W and v (docs/maths.md §Forward pass):

        μ  = (⟨W⟩·ν + b) / sqrt(N)
        σ² = (Σ_r ⟨W_r²⟩⟨v_r²⟩ − Σ_r ⟨W_r⟩² ν_r² + 1) / N

    nu_prev = ⟨v⟩, v2_prev = ⟨v²⟩ (None for ±1 hidden units, where it is 1), nu2_prev = ⟨v⟩² (it differs
    from nu_prev² only for the analytic input dropout). Returns μ, σ² and ⟨W⟩ (the backward pass reuses it).
    """
    m, w2 = weight_moments(layer, weights)
    second = w2.sum(axis=1) if v2_prev is None else v2_prev @ w2.T
    mu = (nu_prev @ m.T + layer.b) / np.sqrt(layer.n)
    sigma2 = (second - nu2_prev @ (m * m).T + 1.0) / layer.n
    return mu, sigma2, m


def unit_mean(mu, sigma2):
    """ν = ⟨sign u⟩ for u ~ N(μ, σ²):  ν = 2Φ(μ/σ) − 1 = erf(μ / sqrt(2σ²))."""
    return special.erf(mu / np.sqrt(2.0 * sigma2))


def gaussian_at_zero(mu, sigma2):
    """N(0|μ,σ²) = φ(μ/σ)/σ, the density of u at 0:  d⟨sign u⟩/dμ = 2 N(0|μ,σ²)."""
    return np.exp(-0.5 * mu * mu / sigma2) / np.sqrt(2.0 * np.pi * sigma2)


@dataclass
class Pass:
    """What one forward pass keeps for the backward pass: per layer the (effective) input means ν_{l-1},
    ⟨W⟩, μ_l, σ²_l, ν_l and the dropout masks of the inputs (None without sampled dropout)."""
    inputs: list
    m: list
    mu: list
    sigma2: list
    nu: list
    masks: list


def forward(net: Network, x: np.ndarray, train: bool = False, rng=None) -> Pass:
    """The forward pass for a minibatch x (B, 784): layer_moments and unit_mean, layer by layer
    (docs/maths.md §Forward pass). Dropout with keep probability p = net.keep (docs/maths.md §Dropout):

    - "analytic" (the authors' code): the image keeps its mean but counts as noisy with variance 4p(1−p):
      Σ m² x² becomes (1 − 4p(1−p)) Σ m² x² in the first layer's σ², at train and test time;
    - "sampled": in training (train=True) the inputs of every layer (image and hidden units) are multiplied by
      Bernoulli(p) masks drawn from `rng`; at test time the weights are scaled by p: ⟨v⟩ → p⟨v⟩, ⟨v²⟩ → p²⟨v²⟩.
    """
    nu, v2, nu2 = x, x * x, x * x
    if net.dropout == "analytic":
        nu2 = (1.0 - 4.0 * net.keep * (1.0 - net.keep)) * nu2
    out = Pass([], [], [], [], [], [])
    for layer in net.layers:
        mask = None
        if net.dropout == "sampled":
            if train:
                mask = (rng.random(nu.shape) < net.keep).astype(nu.dtype)
                nu = nu * mask
                v2 = mask if v2 is None else v2 * mask
            else:
                nu = net.keep * nu
                v2 = np.full_like(nu, net.keep ** 2) if v2 is None else net.keep ** 2 * v2
            nu2 = nu * nu
        mu, sigma2, m = layer_moments(layer, net.weights, nu, v2, nu2)
        out.inputs.append(nu)
        out.m.append(m)
        out.masks.append(mask)
        out.mu.append(mu)
        out.sigma2.append(sigma2)
        nu = unit_mean(mu, sigma2)
        out.nu.append(nu)
        v2, nu2 = None, nu * nu
    return out


# ----------------------------------------------------------------------------------------------------------
# Backward pass: Δ = ∂ ln P(v_L = y) / ∂μ with σ held fixed (docs/maths.md §Backward pass)
# ----------------------------------------------------------------------------------------------------------

def log_phi_ratio(t):
    """ln(φ(t)/Φ(t)) = ln sqrt(2/π) − ln erfcx(−t/√2), finite for every real t: since Φ(t) = ½ erfcx(−t/√2)
    e^{−t²/2}, the Gaussian factors cancel exactly (no 0/0 for t → −∞, where φ/Φ ~ −t; a clean 0 for t → +∞)."""
    return 0.5 * np.log(2.0 / np.pi) - np.log(special.erfcx(-t / np.sqrt(2.0)))


def output_delta(y, mu, sigma2):
    """Δ of the output layer, through log_phi_ratio (finite, with the sign of y, for any μ/σ and either label;
    the naive ratio is 0/0 once |μ/σ| ≳ 38):

        Δ_L = y N(0|μ,σ²) / Φ(yμ/σ) = (y/σ) φ(t)/Φ(t),   t = yμ/σ
    """
    sigma = np.sqrt(sigma2)
    return y / sigma * np.exp(log_phi_ratio(y * mu / sigma))


def backward(net: Network, fwd: Pass, y: np.ndarray, step: int | None = None) -> list[np.ndarray]:
    """Δ of every layer, output to input (docs/maths.md §Backward pass), with ⟨W⟩ from before this step's update:

        Δ_{l−1} = 2 N(0|μ_{l−1},σ²_{l−1}) Σ_j ⟨W_{j·,l}⟩ Δ_{j,l} / sqrt(N_{j,l})

    Sampled dropout zeroes the Δ of dropped units. Raises FloatingPointError naming the layer (and `step`)
    if a Δ is not finite, before any update.
    """
    deltas = [output_delta(y, fwd.mu[-1], fwd.sigma2[-1])]
    for k in range(len(net.layers) - 1, 0, -1):
        back = (deltas[0] / np.sqrt(net.layers[k].n)) @ fwd.m[k]
        delta = 2.0 * gaussian_at_zero(fwd.mu[k - 1], fwd.sigma2[k - 1]) * back
        if fwd.masks[k] is not None:
            delta *= fwd.masks[k]
        deltas.insert(0, delta)
    for k, delta in enumerate(deltas):
        if not np.all(np.isfinite(delta)):
            where = f" at step {step}" if step is not None else ""
            raise FloatingPointError(f"non-finite Δ in layer {k + 1}{where}: {nonfinite_origin(net, fwd)}; "
                                     f"training stopped before the update, so the parameters are those of the "
                                     f"last finite step")
    return deltas


def nonfinite_parameters(net: Network) -> list[str]:
    """The parameters that hold NaN/inf, e.g. ["b of layer 2"] ([] if all are finite)."""
    return [f"{name} of layer {k + 1}" for k, layer in enumerate(net.layers)
            for name, values in (("h", layer.h), ("b", layer.b)) if not np.isfinite(values).all()]


def nonfinite_origin(net: Network, fwd: Pass) -> str:
    """Where a NaN/inf came from: the parameters that hold one, else the first layer (from the input) whose
    forward moments are not finite (the input itself, or an overflow there)."""
    bad = nonfinite_parameters(net)
    if bad:
        return "NaN/inf in " + ", ".join(bad)
    for k, (mu, sigma2) in enumerate(zip(fwd.mu, fwd.sigma2)):
        if not (np.isfinite(mu).all() and np.isfinite(sigma2).all()):
            inputs = "the input images hold NaN/inf" if not np.isfinite(fwd.inputs[0]).all() else "an overflow"
            return f"every parameter is finite; μ or σ² first becomes non-finite in layer {k + 1} ({inputs})"
    return "every parameter and every forward moment is finite"


# ----------------------------------------------------------------------------------------------------------
# Update: the first-order Bayes update of every factor, summed over the minibatch (docs/maths.md §Update)
# ----------------------------------------------------------------------------------------------------------

def increments(net: Network, fwd: Pass, deltas: list[np.ndarray]) -> list[np.ndarray]:
    """The h increment of every layer, ∂ ln P(v_L = y)/∂⟨W⟩ summed over the minibatch (0 where masked out):

        δh_ij = Σ_batch Δ_i ν_j / sqrt(N_i)     (ν_j = x_j at the first layer)
    """
    out = []
    for layer, nu_prev, delta in zip(net.layers, fwd.inputs, deltas):
        inc = (delta / np.sqrt(layer.n)).T @ nu_prev
        out.append(inc * layer.mask if layer.mask is not None else inc)
    return out


def update(net: Network, fwd: Pass, deltas: list[np.ndarray]) -> None:
    """The update, in place (docs/maths.md §Update): h += increments (the natural parameter of a binary weight, the
    mean of a real one, whose variance stays 1), and for the bias

        b_i += Σ_batch Δ_i / sqrt(N_i)
    """
    for layer, increment, delta in zip(net.layers, increments(net, fwd, deltas), deltas):
        layer.h += increment
        layer.b += (delta / np.sqrt(layer.n)).sum(axis=0)


def train_step(net: Network, x: np.ndarray, y: np.ndarray, rng=None, step: int | None = None,
               engine: str = DEFAULT_ENGINE) -> None:
    """One EBP step on a minibatch: forward, backward, update (the corrected Algorithm 1). `rng` draws the
    sampled dropout masks. engine="fast" runs the same step in float32 (ebp_fast.py); use train_epoch for speed."""
    _check_engine(engine)
    if rng is None and net.dropout == "sampled":
        raise ValueError("sampled dropout draws its masks from rng: pass rng=np.random.default_rng(seed)")
    if engine == "fast":
        return _fast_engine().train(net, x, y, np.arange(len(x)), len(x), rng, lambda k: step)
    fwd = forward(net, x, train=True, rng=rng)
    update(net, fwd, backward(net, fwd, y, step))


def _check_engine(engine) -> None:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose 'fast' (float32, compiled epoch) or 'reference'")


def _fast_engine():
    """ebp_fast, imported on first use: compiling (or loading) its numba kernels takes seconds."""
    import ebp_fast

    return ebp_fast


# ----------------------------------------------------------------------------------------------------------
# Outputs: EBP-P and EBP-D (docs/maths.md §Outputs)
# ----------------------------------------------------------------------------------------------------------

def output_ebp_p(net: Network, x: np.ndarray) -> np.ndarray:
    """EBP-P: the output means ν_L = 2Φ(μ_L/σ_L) − 1 of the forward pass; the predicted class is their argmax."""
    return forward(net, x).nu[-1]


def output_ebp_d(net: Network, x: np.ndarray) -> np.ndarray:
    """EBP-D: the deterministic net with W = sign(h) (binary) or h (real) and the real bias; hidden units
    sign(W v + b) (+1 at 0), a linear output layer. Sampled dropout scales W by p. Computes in x's dtype."""
    v = x
    scale = net.keep if net.dropout == "sampled" else 1.0
    for k, layer in enumerate(net.layers):
        w = np.sign(layer.h) if net.weights == "binary" else layer.h
        if layer.mask is not None:
            w = w * layer.mask
        u = scale * (v @ w.T) + layer.b
        v = u if k == len(net.layers) - 1 else np.where(u >= 0, 1.0, -1.0).astype(u.dtype)
    return v


def evaluate(net: Network, x: np.ndarray, labels: np.ndarray, batch: int = 2000,
             engine: str = DEFAULT_ENGINE) -> dict[str, float]:
    """Test errors (fractions of x whose argmax output is not the label) of EBP-P and EBP-D, `batch` images at
    a time; engine="fast": the same outputs in float32 (they differ only on near-ties between two classes)."""
    _check_engine(engine)
    wrong = np.zeros(2, dtype=np.int64)
    reference = contextlib.nullcontext(lambda x: (output_ebp_p(net, x), output_ebp_d(net, x)))
    with _fast_engine().outputs(net) if engine == "fast" else reference as outputs:  # x ↦ (EBP-P, EBP-D)
        for start in range(0, len(x), batch):
            ebp_p, ebp_d = outputs(x[start:start + batch])
            wrong += [np.sum(ebp_p.argmax(axis=1) != labels[start:start + batch]),
                      np.sum(ebp_d.argmax(axis=1) != labels[start:start + batch])]
    return {"ebp_p": int(wrong[0]) / len(x), "ebp_d": int(wrong[1]) / len(x)}


# ----------------------------------------------------------------------------------------------------------
# Training: epochs in a new random order, evaluation after each, checkpoint and resume
# ----------------------------------------------------------------------------------------------------------

def check_training(net: Network, x: np.ndarray, y: np.ndarray, batch_size, engine) -> None:
    """Refuse, before any work, data of the wrong shape, a batch size that is not a positive integer, an
    unknown engine."""
    if x.ndim != 2 or x.shape[1] != net.sizes[0]:
        raise ValueError(f"inputs have shape {x.shape}; this network needs (n, {net.sizes[0]}) "
                         f"(flatten the {net.input_side}x{net.input_side} images)")
    if y.shape != (len(x), net.sizes[-1]):
        raise ValueError(f"targets have shape {y.shape}; need ({len(x)}, {net.sizes[-1]}) ±1 one-vs-all "
                         f"vectors (see one_vs_all)")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1 (1 = the paper's online learning)")
    _check_engine(engine)


def train_epoch(net: Network, x: np.ndarray, y: np.ndarray, batch_size: int, rng, epoch: int = 0,
                engine: str = DEFAULT_ENGINE) -> None:
    """One epoch: the training set in a new random order drawn from `rng`, one EBP step per minibatch.
    engine: "fast" (the whole epoch in one compiled call, float32) or "reference" (train_step, the net's dtype)."""
    check_training(net, x, y, batch_size, engine)
    train_steps(net, x, y, rng.permutation(len(x)), batch_size, rng, engine, epoch)


def train_steps(net: Network, x: np.ndarray, y: np.ndarray, order: np.ndarray, batch_size: int, rng,
                engine: str = DEFAULT_ENGINE, epoch: int = 0, first_step: int = 0) -> None:
    """EBP steps on the minibatches x[order[:batch_size]], x[order[batch_size:2 batch_size]], ... in turn; error
    messages call them steps first_step, first_step + 1, ... of epoch `epoch` (counted from 0)."""
    step_name = lambda k: f"{first_step + k} of epoch {epoch + 1} (batch size {batch_size})"  # noqa: E731
    if engine == "fast":
        return _fast_engine().train(net, x, y, order, batch_size, rng, step_name)
    for k, start in enumerate(range(0, len(order), batch_size)):
        idx = order[start:start + batch_size]
        train_step(net, x[idx], y[idx], rng, step=step_name(k), engine="reference")


def fit(net: Network, data: Dataset, epochs: int, batch_size: int = 10, seed: int = 0,
        checkpoint=None, n_train_eval: int = 10000, on_epoch=None,
        engine: str = DEFAULT_ENGINE, run_config: dict | None = None) -> tuple[Network, list[dict]]:
    """Train for `epochs` epochs, evaluating after each; returns the network and the per-epoch history.

    With `checkpoint` (a file path) the state (network, epoch, RNG, history) is saved after every epoch,
    and a run whose checkpoint exists resumes from it, bit-identical to a run that was never interrupted.
    The training error is measured on the first `n_train_eval` training images (0: not measured).
    `on_epoch(record)` is called after every epoch (progress display). `engine` trains and evaluates.
    `run_config` (JSON-serialisable: data set, preprocessing, ...) is stored in the checkpoint with the network's
    configuration, seed, batch size and engine; resuming from a checkpoint of any other run is refused
    (CheckpointMismatchError naming what differs), and an unreadable checkpoint raises CheckpointError.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"epochs={epochs!r} must be a non-negative integer")
    check_training(net, data.x_train, data.y_train, batch_size, engine)
    rng, history = np.random.default_rng(seed), []
    run = {"network": _config(net), "seed": seed, "batch_size": batch_size, "engine": engine,
           **(run_config or {})}
    if checkpoint is not None and Path(checkpoint).exists():
        saved, meta = load_network(checkpoint)
        _check_same_run(checkpoint, {**meta, "config": _config(saved)}, run)
        net, history = saved, meta["history"]
        rng.bit_generator.state = meta["rng_state"]
    for epoch in range(len(history), epochs):
        start = time.perf_counter()
        train_epoch(net, data.x_train, data.y_train, batch_size, rng, epoch, engine=engine)
        seconds = time.perf_counter() - start
        test = evaluate(net, data.x_test, data.labels_test, engine=engine)
        train = (evaluate(net, data.x_train[:n_train_eval], data.labels_train[:n_train_eval], engine=engine)
                 if n_train_eval else {"ebp_p": None, "ebp_d": None})
        record = {"epoch": epoch + 1, "test_ebp_p": test["ebp_p"], "test_ebp_d": test["ebp_d"],
                  "train_ebp_p": train["ebp_p"], "train_ebp_d": train["ebp_d"], "train_seconds": seconds}
        history.append(record)
        if checkpoint is not None:
            save_network(checkpoint, net, run=run, history=history, rng_state=rng.bit_generator.state)
        if on_epoch is not None:
            on_epoch(record)
    return net, history


# ----------------------------------------------------------------------------------------------------------
# Persistence: one .npz holds the posterior, the configuration and (for checkpoints) the training state
# ----------------------------------------------------------------------------------------------------------

class CheckpointError(ValueError):
    """A saved network or checkpoint cannot be read (empty, truncated, corrupt, or not written by save_network)."""


class CheckpointMismatchError(ValueError):
    """A checkpoint belongs to another run (network, seed, batch size, engine or data settings differ)."""


def _config(net: Network) -> dict:
    config = {"architecture": net.architecture, "weights": net.weights, "input_side": net.input_side,
              "dropout": net.dropout, "keep": net.keep, "dtype": str(net.layers[0].h.dtype)}
    if net.mask_reading != "absent":  # only then: files written before the option existed stay comparable
        config["mask_reading"] = net.mask_reading
    return config


def _check_same_run(path, meta: dict, wanted: dict) -> None:
    """Refuse to resume a run from a checkpoint of a different one, naming every setting that differs.
    Checkpoints written before `run` was saved record only the network, seed and batch size: those are compared."""
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


def _compact(a: np.ndarray) -> np.ndarray:
    """float64 arrays that hold float32 values are stored as float32 (half the size, exact: load_network casts
    them back to the same float64 numbers). The fast engine rounds h and b to float32 after every call."""
    if a.dtype == np.float64:
        small = a.astype(np.float32)
        if np.array_equal(small, a):
            return small
    return a


def save_network(path, net: Network, **meta) -> None:
    """Write the network (and JSON-serialisable `meta`) atomically: an interrupted or failed save (a full
    disk) leaves the previous file as it was and no temporary behind; the OSError names the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for k, layer in enumerate(net.layers):
        arrays[f"h{k}"], arrays[f"b{k}"] = _compact(layer.h), _compact(layer.b)
    tmp = path.with_name(path.name + ".tmp.npz")
    try:
        np.savez(tmp, meta=json.dumps({"config": _config(net), **meta}), **arrays)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, f"could not write {path}: {err.strerror or err}") from err


_UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error)


def _unreadable(path, err) -> CheckpointError:
    return CheckpointError(f"cannot read {path} ({type(err).__name__}: {err}); the file is empty, truncated or "
                           f"corrupt. Move it aside (or delete it) to start that run afresh")


def read_network_meta(path) -> dict:
    """The metadata saved with a network (for a checkpoint: run, history, RNG state), without the weights.
    Raises CheckpointError for an empty, truncated or corrupt file, naming it."""
    try:
        with np.load(path) as f:
            return json.loads(str(f["meta"]))
    except _UNREADABLE as err:
        raise _unreadable(path, err) from err


def load_network(path) -> tuple[Network, dict]:
    """Read a network written by save_network; returns it and the saved metadata. Raises CheckpointError for
    an unreadable file (its path and what to do)."""
    try:
        with np.load(path) as f:
            meta = json.loads(str(f["meta"]))
            config = meta.pop("config")
            net = init_network([tuple(s) if isinstance(s, list) else s for s in config["architecture"]],
                               config["weights"], 0, config["input_side"], dropout=config["dropout"],
                               keep=config["keep"], dtype=np.dtype(config["dtype"]),
                               mask_reading=config.get("mask_reading", "absent"))
            for k, layer in enumerate(net.layers):
                layer.h[...], layer.b[...] = f[f"h{k}"], f[f"b{k}"]
    except FileNotFoundError:
        raise
    except _UNREADABLE as err:
        raise _unreadable(path, err) from err
    return net, meta
