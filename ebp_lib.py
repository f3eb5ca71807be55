"""Expectation BackPropagation (EBP) for binary and real-weight networks on MNIST.

The shared module of the reproduction of Cheng, Soudry, Mao & Lan (2015), "Training Binary Multilayer
Neural Networks for Image Classification using Expectation Backpropagation". The notebooks derive every
equation; this file implements them once. Section references ("spec §Forward pass") point to
`EBP_SPEC.md`, which gives the corrected form of the paper's Algorithm 1.

Sections: data, networks, forward pass, backward pass, update, outputs, training, persistence.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import special

# ----------------------------------------------------------------------------------------------------------
# Data: MNIST and Fashion-MNIST from the standard IDX .gz files
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


def _download(dataset: str, name: str, errors: list[str] | None = None) -> Path | None:
    """Fetch one file into the cache with pooch, verifying its md5; None if no mirror gave the right file.

    Each mirror's failure (no network, HTTP error, md5 mismatch of what it served) is appended to `errors`.
    """
    import pooch  # imported here: only needed on a machine with internet and no local copy

    spec = DATASETS[dataset]
    for mirror in spec["mirrors"]:
        try:
            return Path(pooch.retrieve(mirror + name, known_hash="md5:" + spec["md5"][name],
                                       fname=name, path=CACHE_DIR / dataset, progressbar=False))
        except Exception as err:  # noqa: BLE001 - any failure means: try the next mirror
            if errors is not None:
                errors.append(f"{mirror}{name}: {type(err).__name__}: {err}")
    return None


def find_data_files(dataset: str = "mnist", data_dir=None, download: bool = True) -> dict[str, Path]:
    """Locate and verify the four files of `dataset`.

    Looks in `data_dir` if given (and nowhere else); otherwise in $EBP_DATA_DIR/<dataset>, then the cache
    folder, then downloads into the cache. Every file found is checked against its known md5.
    """
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
    """Centre and scale images as 784-vectors, with statistics from the training set only (spec §Data protocol).

    mode "pixel": each input variable to mean 0, std 1 (LeCun et al.'s Efficient BackProp; the paper's reading).
       Pixels whose std is <= std_floor are divided by std_floor instead; with the default floor 0, pixels
       constant over the training set become exactly 0.
    mode "global": one mean and one std over all training pixels.
    mode "unit": pixels / 255, no centring.
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

    The standardisation statistics come from the training images that are kept.
    """
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
# Networks: layers, connectivity masks, initialisation (spec §Notation, §Posterior parametrisation)
# ----------------------------------------------------------------------------------------------------------

WEIGHT_TYPES = ("binary", "real")
DROPOUT_KINDS = (None, "analytic", "sampled")


@dataclass
class Layer:
    """One layer's posterior: h (V, K) natural parameters / means, b (V,) real bias, optional 0/1 mask.

    `n` (V,) is the normaliser N = fan-in + 1 of each unit (the +1 is the bias, spec §Notation); with a
    mask the fan-in is the number of connected inputs of that unit.
    """
    h: np.ndarray
    b: np.ndarray
    mask: np.ndarray | None = None
    n: np.ndarray = field(init=False)

    def __post_init__(self):
        fan_in = self.mask.sum(axis=1) if self.mask is not None else np.full(len(self.h), self.h.shape[1])
        self.n = (fan_in + 1).astype(self.h.dtype)


@dataclass
class Network:
    """An EBP network: layers, the weight type, its architecture description and the dropout reading.

    `architecture` is a list of layer specs after the input, e.g. [800, 800, 10] (fully connected) or
    [("local", 10), ("local", 10), 10] (spatial filtering, then a fully connected output layer).
    """
    layers: list[Layer]
    weights: str
    architecture: list
    input_side: int = 28
    dropout: str | None = None
    keep: float = 0.8

    @property
    def sizes(self) -> list[int]:
        return [self.layers[0].h.shape[1]] + [len(layer.h) for layer in self.layers]


def local_mask(side: int, block: int) -> np.ndarray:
    """0/1 connectivity of a locally connected layer (spec §Data protocol, spatial filtering).

    Unit (a, c) of the (side-block+1)² output map sees the block×block input patch whose corner is (a, c).
    Returns a boolean (out_side², side²) matrix with exactly block² ones per row.
    """
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
                 dtype=np.float64) -> Network:
    """A new network: h ~ Uniform with variance init_scale/K per unit, b = 0 (spec §Posterior parametrisation).

    Masked-out weights are exactly 0 and stay 0. The same seed gives the same network.
    """
    if weights not in WEIGHT_TYPES:
        raise ValueError(f"unknown weight type {weights!r}; choose 'binary' or 'real'")
    if dropout not in DROPOUT_KINDS:
        raise ValueError(f"unknown dropout {dropout!r}; choose None, 'analytic' or 'sampled'")
    if not 0 < keep <= 1:
        raise ValueError(f"dropout keep probability p={keep} must be in (0, 1]")
    if not init_scale > 0:
        raise ValueError(f"init_scale={init_scale} must be positive")
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
        layers.append(Layer(h.astype(dtype), np.zeros(units, dtype), mask))
        width = units
    return Network(layers, weights, [list(s) if isinstance(s, tuple) else s for s in architecture],
                   input_side, dropout, keep)


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


def weight_moments(layer: Layer, weights: str) -> tuple[np.ndarray, np.ndarray]:
    """⟨W⟩ and ⟨W²⟩ of every weight (spec §Posterior parametrisation); 0 where masked out.

    binary, P(W=±1) ∝ exp(hW): ⟨W⟩ = tanh h, ⟨W²⟩ = 1.  real, N(h, 1): ⟨W⟩ = h, ⟨W²⟩ = h² + 1.
    """
    if weights == "binary":
        mean, second = np.tanh(layer.h), np.ones_like(layer.h)
    else:
        mean, second = layer.h, layer.h * layer.h + 1.0
    if layer.mask is not None:
        mean, second = mean * layer.mask, second * layer.mask
    return mean, second


# ----------------------------------------------------------------------------------------------------------
# Forward pass (spec §Forward pass): Gaussian (central-limit) moments of every unit's input
# ----------------------------------------------------------------------------------------------------------

def layer_moments(layer: Layer, weights: str, nu_prev, v2_prev, nu2_prev):
    """μ and σ² of u = (W v + b)/sqrt(N) for independent W and v (spec §Forward pass).

    nu_prev = ⟨v⟩, v2_prev = ⟨v²⟩ (None for ±1 hidden units, where it is 1), nu2_prev = ⟨v⟩² (it differs
    from nu_prev² only for the analytic input dropout). With ⟨W⟩ = m:
        μ  = (m·ν + b) / sqrt(N)
        σ² = (Σ_r ⟨W²⟩⟨v_r²⟩ − Σ_r m_r² ν_r² + 1) / N
    Returns μ, σ² and m (the backward pass reuses m).
    """
    m, w2 = weight_moments(layer, weights)
    second = w2.sum(axis=1) if v2_prev is None else v2_prev @ w2.T
    mu = (nu_prev @ m.T + layer.b) / np.sqrt(layer.n)
    sigma2 = (second - nu2_prev @ (m * m).T + 1.0) / layer.n
    return mu, sigma2, m


def unit_mean(mu, sigma2):
    """ν = ⟨sign(u)⟩ = 2Φ(μ/σ) − 1 = erf(μ / sqrt(2σ²))."""
    return special.erf(mu / np.sqrt(2.0 * sigma2))


def gaussian_at_zero(mu, sigma2):
    """N(0 | μ, σ²) = φ(μ/σ)/σ, the density of u at 0: d⟨sign u⟩/dμ = 2 N(0|μ,σ²)."""
    return np.exp(-0.5 * mu * mu / sigma2) / np.sqrt(2.0 * np.pi * sigma2)


@dataclass
class Pass:
    """What one forward pass keeps for the backward pass: per layer the (effective) input means ν_{l-1},
    μ_l, σ²_l, ν_l, the weight means ⟨W⟩ and the dropout masks of the inputs (None without sampled dropout)."""
    inputs: list
    m: list
    mu: list
    sigma2: list
    nu: list
    masks: list


def forward(net: Network, x: np.ndarray, train: bool = False, rng=None) -> Pass:
    """The forward pass for a minibatch x (B, 784) (spec §Forward pass, §Data protocol dropout).

    Dropout, keep probability p = net.keep:
      "analytic" (the authors' code): the input's mean is kept but it is treated as noisy with variance
        4p(1−p), so Σ m² x² is replaced by (1 − 4p(1−p)) Σ m² x² in σ² of the first layer, at train and test;
      "sampled": during training (train=True) the inputs of every layer (image and hidden units) are
        multiplied by Bernoulli(p) masks; at test the weights are scaled by p, i.e. ⟨v⟩ → p⟨v⟩, ⟨v²⟩ → p²⟨v²⟩.
    """
    nu, v2, nu2 = x, x * x, x * x
    if net.dropout == "analytic":
        nu2 = (1.0 - 4.0 * net.keep * (1.0 - net.keep)) * nu2
    out = Pass([], [], [], [], [], [])
    for k, layer in enumerate(net.layers):
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
# Backward pass (spec §Backward pass): Δ = ∂ ln P(v_L = y) / ∂μ with σ held fixed
# ----------------------------------------------------------------------------------------------------------

def log_phi_ratio(t):
    """ln(φ(t)/Φ(t)) = ln sqrt(2/π) − ln erfcx(−t/√2), finite for every real t.

    Since Φ(t) = ½ erfcx(−t/√2) e^{−t²/2}, the Gaussian factors cancel exactly: no 0/0 for t → −∞
    (where φ/Φ ~ −t) and a clean 0 for t → +∞.
    """
    return 0.5 * np.log(2.0 / np.pi) - np.log(special.erfcx(-t / np.sqrt(2.0)))


def output_delta(y, mu, sigma2):
    """Δ_L = y N(0|μ,σ²) / Φ(yμ/σ) = (y/σ) φ(t)/Φ(t) with t = yμ/σ (spec §Backward pass, output).

    Evaluated through log_phi_ratio, so it is finite and has the sign of y for any μ/σ and either label;
    the naive ratio is 0/0 once |μ/σ| ≳ 38.
    """
    sigma = np.sqrt(sigma2)
    return y / sigma * np.exp(log_phi_ratio(y * mu / sigma))


def backward(net: Network, fwd: Pass, y: np.ndarray, step: int | None = None) -> list[np.ndarray]:
    """Δ of every layer, output to input (spec §Backward pass):

        Δ_L     = y N(0|μ_L,σ²_L) / Φ(yμ_L/σ_L)
        Δ_{l−1} = 2 N(0|μ_{l−1},σ²_{l−1}) Σ_j ⟨W_{j·,l}⟩ Δ_{j,l} / sqrt(N_{j,l})

    with ⟨W⟩ from before this step's update. Sampled dropout masks the Δ of dropped units.
    Raises FloatingPointError naming the layer (and `step`) if a Δ is not finite.
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
            raise FloatingPointError(
                f"non-finite Δ in layer {k + 1}{where}: the posterior of some layer holds NaN/inf "
                f"(h finite per layer: {[bool(np.isfinite(l.h).all()) for l in net.layers]}); training stopped "
                f"before the update, so the parameters are those of the last finite step")
    return deltas


# ----------------------------------------------------------------------------------------------------------
# Update (spec §Update): first-order Bayes update of every factor, summed over the minibatch
# ----------------------------------------------------------------------------------------------------------

def update(net: Network, fwd: Pass, deltas: list[np.ndarray]) -> None:
    """h_{ij} += Σ_batch Δ_i ν_j / sqrt(N_i),  b_i += Σ_batch Δ_i / sqrt(N_i)   (in place).

    This is h += ∂ ln P / ∂⟨W⟩ (binary: the natural parameter; real: the mean, as the variance is 1).
    """
    for layer, increment, delta in zip(net.layers, increments(net, fwd, deltas), deltas):
        layer.h += increment
        layer.b += (delta / np.sqrt(layer.n)).sum(axis=0)


def train_step(net: Network, x: np.ndarray, y: np.ndarray, rng=None, step: int | None = None,
               engine: str = "fast") -> None:
    """One EBP step on a minibatch: forward, backward, update (the corrected Algorithm 1).
    engine="fast" runs the same step in float32 (section "Fast path"); "reference" runs the code above."""
    _check_engine(engine)
    if engine == "fast":
        return fast_train_step(net, x, y, rng, step)
    fwd = forward(net, x, train=True, rng=rng)
    update(net, fwd, backward(net, fwd, y, step))


# ----------------------------------------------------------------------------------------------------------
# Outputs (spec §Outputs)
# ----------------------------------------------------------------------------------------------------------

def output_ebp_p(net: Network, x: np.ndarray) -> np.ndarray:
    """EBP-P: the output means ν_L = 2Φ(μ_L/σ_L) − 1; the predicted class is their argmax."""
    return forward(net, x).nu[-1]


def output_ebp_d(net: Network, x: np.ndarray) -> np.ndarray:
    """EBP-D: the deterministic net with W = sign(h) (binary) or h (real) and the real bias;
    hidden units sign(W v + b) (+1 at 0), a linear output layer. Sampled dropout scales W by p."""
    v = x
    scale = net.keep if net.dropout == "sampled" else 1.0
    for k, layer in enumerate(net.layers):
        w = np.sign(layer.h) if net.weights == "binary" else layer.h
        if layer.mask is not None:
            w = w * layer.mask
        u = scale * (v @ w.T) + layer.b
        v = u if k == len(net.layers) - 1 else np.where(u >= 0, 1.0, -1.0)
    return v


def evaluate(net: Network, x: np.ndarray, labels: np.ndarray, batch: int = 2000,
             engine: str = "reference") -> dict[str, float]:
    """Test errors (fractions) of EBP-P and EBP-D on (x, labels); engine="fast": the same in float32."""
    _check_engine(engine)
    if engine == "fast":
        return fast_evaluate(net, x, labels, batch)
    wrong_p = wrong_d = 0
    for start in range(0, len(x), batch):
        xb, lb = x[start:start + batch], labels[start:start + batch]
        wrong_p += int(np.sum(output_ebp_p(net, xb).argmax(axis=1) != lb))
        wrong_d += int(np.sum(output_ebp_d(net, xb).argmax(axis=1) != lb))
    return {"ebp_p": wrong_p / len(x), "ebp_d": wrong_d / len(x)}


# ----------------------------------------------------------------------------------------------------------
# Training: epochs in a new random order, checkpoint and resume
# ----------------------------------------------------------------------------------------------------------

def _check_data(net: Network, x: np.ndarray, y: np.ndarray) -> None:
    if x.ndim != 2 or x.shape[1] != net.sizes[0]:
        raise ValueError(f"inputs have shape {x.shape}; this network needs (n, {net.sizes[0]}) "
                         f"(flatten the {net.input_side}x{net.input_side} images)")
    if y.shape != (len(x), net.sizes[-1]):
        raise ValueError(f"targets have shape {y.shape}; need ({len(x)}, {net.sizes[-1]}) ±1 one-vs-all "
                         f"vectors (see one_vs_all)")


def _check_batch_size(batch_size) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1 (1 = the paper's online learning)")


def train_epoch(net: Network, x: np.ndarray, y: np.ndarray, batch_size: int, rng, epoch: int = 0,
                engine: str = "fast") -> None:
    """One epoch: the training set in a new random order drawn from `rng`, one EBP step per minibatch.
    engine: "fast" (float32 fast path, the default) or "reference" (train_step above, the network's dtype)."""
    _check_batch_size(batch_size)
    _check_data(net, x, y)
    _check_engine(engine)
    if engine == "fast":
        return fast_train_epoch(net, x, y, batch_size, rng, epoch)
    order = rng.permutation(len(x))
    for k, start in enumerate(range(0, len(x), batch_size)):
        idx = order[start:start + batch_size]
        train_step(net, x[idx], y[idx], rng, step=f"{k} of epoch {epoch + 1} (batch size {batch_size})",
                   engine="reference")


def fit(net: Network, data: Dataset, epochs: int, batch_size: int = 10, seed: int = 0,
        checkpoint=None, n_train_eval: int = 10000, on_epoch=None,
        engine: str = "fast", run_config: dict | None = None) -> tuple[Network, list[dict]]:
    """Train for `epochs` epochs, evaluating after each; returns the network and the per-epoch history.

    With `checkpoint` (a file path) the state (network, epoch, RNG, history) is saved after every epoch,
    and a run whose checkpoint exists resumes from it, bit-identical to a run that was never interrupted.
    The training error is measured on the first `n_train_eval` training images (0: not measured).
    `on_epoch(record)` is called after every epoch (progress display). `engine` trains with the fast path
    ("fast", float32, the default) or the reference code ("reference"), and evaluates with the same engine.
    `run_config` (JSON-serialisable: data set, preprocessing, ...) is stored in the checkpoint with the network's
    configuration, seed, batch size and engine; resuming from a checkpoint of any other run is refused
    (CheckpointMismatchError naming what differs), and an unreadable checkpoint raises CheckpointError.
    """
    import time

    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"epochs={epochs!r} must be a non-negative integer")
    _check_batch_size(batch_size)
    _check_engine(engine)
    _check_data(net, data.x_train, data.y_train)
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
    return {"architecture": net.architecture, "weights": net.weights, "input_side": net.input_side,
            "dropout": net.dropout, "keep": net.keep, "dtype": str(net.layers[0].h.dtype)}


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


def read_network_meta(path) -> dict:
    """The metadata saved with a network (for a checkpoint: run, history, RNG state), without the weights.
    Raises CheckpointError for an empty, truncated or corrupt file, naming it."""
    try:
        with np.load(path) as f:
            return json.loads(str(f["meta"]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise _unreadable(path, err) from err


def _unreadable(path, err) -> CheckpointError:
    return CheckpointError(f"cannot read {path} ({type(err).__name__}: {err}); the file is empty, truncated or "
                           f"corrupt. Move it aside (or delete it) to start that run afresh")


def load_network(path) -> tuple[Network, dict]:
    """Read a network written by save_network; returns it and the saved metadata. Raises CheckpointError for
    an unreadable file (its path and what to do)."""
    try:
        with np.load(path) as f:
            meta = json.loads(str(f["meta"]))
            config = meta.pop("config")
            net = init_network([tuple(s) if isinstance(s, list) else s for s in config["architecture"]],
                               config["weights"], 0, config["input_side"], dropout=config["dropout"],
                               keep=config["keep"], dtype=np.dtype(config["dtype"]))
            for k, layer in enumerate(net.layers):
                layer.h[...], layer.b[...] = f[f"h{k}"], f[f"b{k}"]
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise _unreadable(path, err) from err
    return net, meta


# ----------------------------------------------------------------------------------------------------------
# Checks: Monte Carlo and finite-difference references (used by the tests and the notebooks)
# ----------------------------------------------------------------------------------------------------------

def sample_weights(layer: Layer, weights: str, rng, n_samples: int) -> np.ndarray:
    """Draw (n_samples, V, K) weight matrices from the mean-field posterior (masked weights are 0).

    binary: W = +1 with probability (1 + tanh h)/2;  real: W = h + N(0, 1).
    """
    shape = (n_samples,) + layer.h.shape
    if weights == "binary":
        w = np.where(rng.random(shape) < 0.5 * (1.0 + np.tanh(layer.h)), 1.0, -1.0)
    else:
        w = layer.h + rng.standard_normal(shape)
    return w * layer.mask if layer.mask is not None else w


def monte_carlo_layer(layer: Layer, weights: str, nu_prev: np.ndarray, rng, n_samples: int = 20000,
                      deterministic_input: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sampled mean and variance of u = (W v + b)/sqrt(N) and the mean of sign(u), for one input.

    The weights come from the posterior; the input v is nu_prev itself (deterministic_input, the image) or
    independent ±1 units with means nu_prev (a hidden layer under the mean-field assumption). The bias is
    drawn as N(b, 1), the spec's convention (an input fixed at 1 whose weight has variance 1: the "+1" in σ²).
    """
    w = sample_weights(layer, weights, rng, n_samples)
    if deterministic_input:
        v = np.broadcast_to(nu_prev, (n_samples, len(nu_prev)))
    else:
        v = np.where(rng.random((n_samples, len(nu_prev))) < 0.5 * (1.0 + nu_prev), 1.0, -1.0)
    bias = layer.b + rng.standard_normal((n_samples, len(layer.b)))
    u = (np.einsum("svk,sk->sv", w, v) + bias) / np.sqrt(layer.n)
    return u.mean(axis=0), u.var(axis=0), np.where(u >= 0, 1.0, -1.0).mean(axis=0)


def log_likelihood_from(net: Network, fwd: Pass, y: np.ndarray, k: int, mu: np.ndarray | None = None,
                        m: np.ndarray | None = None) -> float:
    """Σ_i ln Φ(y_i μ_{i,L}/σ_{i,L}) as a function of layer k's μ (or of its ⟨W⟩ = m), every σ held at the
    values of the forward pass `fwd` (spec §Backward pass): the function whose derivatives Δ and the h
    increments are. Layers are numbered from 0. Sampled dropout masks of `fwd` are applied as in forward."""
    if m is not None:
        mu = (fwd.inputs[k] @ m.T + net.layers[k].b) / np.sqrt(net.layers[k].n)
    for j in range(k + 1, len(net.layers)):
        nu = unit_mean(mu, fwd.sigma2[j - 1])
        if fwd.masks[j] is not None:
            nu = nu * fwd.masks[j]
        mu = (nu @ fwd.m[j].T + net.layers[j].b) / np.sqrt(net.layers[j].n)
    return float(np.sum(special.log_ndtr(y * mu / np.sqrt(fwd.sigma2[-1]))))


def algorithm1_variant(net: Network, fwd: Pass, y: np.ndarray, factor_two: bool = True, use_nu: bool = True,
                       bias_in_normaliser: bool = True) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Δ and h increments of Algorithm 1 with each of the paper's three misprints switched on or off
    (spec §Where the paper's Algorithm 1 differs), on top of the forward pass `fwd`:
      factor_two=False          drops the 2 of dν/dμ = 2N(0|μ,σ²) in the hidden Δ;
      use_nu=False              multiplies the h increment by μ_{j,l−1} instead of ν_{j,l−1} (x at layer 1);
      bias_in_normaliser=False  divides by sqrt(K) instead of sqrt(N) = sqrt(K + 1) in the backward pass.
    All True is ebp_lib's backward/increments; all False is paper_printed_deltas/increments. Fully connected
    networks without dropout masks only."""
    norm = [np.sqrt(layer.n if bias_in_normaliser else layer.n - 1) for layer in net.layers]
    deltas = [output_delta(y, fwd.mu[-1], fwd.sigma2[-1])]
    for k in range(len(net.layers) - 1, 0, -1):
        slope = (2.0 if factor_two else 1.0) * gaussian_at_zero(fwd.mu[k - 1], fwd.sigma2[k - 1])
        deltas.insert(0, slope * ((deltas[0] / norm[k]) @ fwd.m[k]))
    incs = []
    for k, delta in enumerate(deltas):
        prev = fwd.inputs[k] if (use_nu or k == 0) else fwd.mu[k - 1]
        incs.append((delta / norm[k]).T @ prev)
    return deltas, incs


def paper_printed_deltas(net: Network, fwd: Pass, y: np.ndarray) -> list[np.ndarray]:
    """Δ as the paper's Algorithm 1 prints it: no factor 2 in the hidden Δ, sqrt(K) in place of sqrt(K+1).
    Kept only to show (tests, notebook 03) that it fails the finite-difference check."""
    return algorithm1_variant(net, fwd, y, factor_two=False, use_nu=False, bias_in_normaliser=False)[0]


def paper_printed_increments(net: Network, fwd: Pass, deltas: list[np.ndarray]) -> list[np.ndarray]:
    """h increments as Algorithm 1 prints them: μ_{j,l−1} in place of ν_{j,l−1} (the image x at the first
    layer) and sqrt(K) in place of sqrt(K+1)."""
    out = []
    for k, (layer, delta) in enumerate(zip(net.layers, deltas)):
        prev = fwd.inputs[0] if k == 0 else fwd.mu[k - 1]
        out.append((delta / np.sqrt(layer.n - 1)).T @ prev)
    return out


def increments(net: Network, fwd: Pass, deltas: list[np.ndarray]) -> list[np.ndarray]:
    """The h increments Σ_batch Δ_i ν_j / sqrt(N_i) that `update` adds (spec §Update), per layer."""
    out = []
    for layer, nu_prev, delta in zip(net.layers, fwd.inputs, deltas):
        inc = (delta / np.sqrt(layer.n)).T @ nu_prev
        out.append(inc * layer.mask if layer.mask is not None else inc)
    return out


# ----------------------------------------------------------------------------------------------------------
# Fast path (engine="fast"): the same equations in float32, one compiled loop per epoch
# ----------------------------------------------------------------------------------------------------------
# The functions above are the reference: float64, written like the spec. The reference spends its time
# recomputing ⟨W⟩ = tanh h and ⟨W²⟩ of every weight at every step (weight_moments) and in the increment matrix
# (increments); see outputs/BENCHMARK.md. The fast engine runs a whole train_epoch call in one numba function
# (_train_steps) on a float32 copy of h and b, so no Python runs between steps. Its one idea beyond the
# reference: the forward pass of step t+1 only needs layer l's updated weights and layer l−1's new outputs, so
# each layer's update at step t is fused with its products for step t+1 (_layer_pass) and every weight is read
# and written once per step; ⟨W⟩ is refreshed with a vectorising rational tanh and stored only for the layers
# whose ⟨W⟩ the backward pass needs; the first layer leaves out the inputs that are 0 in every image of the call.
# Δ_L is computed in float64 (as output_delta does, through erfcx). At the end of the call (also when a
# non-finite Δ stops it) h and b are written back into the network, rounded to float32 whatever its dtype:
# every epoch starts from the network alone, so checkpoint/resume stays bit-identical. It draws the same random
# numbers as the reference in the same order (numba draws from the numpy Generator itself), so sampled-dropout
# runs see the same masks. tests/test_fast.py checks it against the reference; scripts/benchmark.py times both.

import math

import numba
from numba.typed import List
from threadpoolctl import ThreadpoolController

FAST_DTYPE = np.float32
FAST_BLAS_THREADS = 1   # one BLAS thread per process: on 2-core machines threaded BLAS beside another job is slower
ENGINES = ("fast", "reference")
# fastmath without 'nnan'/'ninf': lets LLVM vectorise and reassociate, but NaN and inf keep their meaning (a NaN
# image gives a non-finite Δ and the reference's error; h is checked before and after each call, see _fast_run).
_FASTMATH = {"contract", "arcp", "reassoc", "nsz", "afn"}
_JIT = dict(fastmath=_FASTMATH, error_model="numpy", cache=True)
_LOG_SQRT_2_OVER_PI = 0.5 * math.log(2.0 / math.pi)
_ANALYTIC, _SAMPLED = 1, 2  # net.dropout inside the compiled code (0: none)
_DROPOUT_CODES = {None: 0, "analytic": _ANALYTIC, "sampled": _SAMPLED}
_blas = None


def _check_engine(engine) -> None:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose 'fast' (float32, compiled epoch) or 'reference'")


def _blas_one_thread():
    """A context that limits BLAS to FAST_BLAS_THREADS threads (the controller is built once: it scans libraries)."""
    global _blas
    if _blas is None:
        _blas = ThreadpoolController()
    return _blas.limit(limits=FAST_BLAS_THREADS, user_api="blas")


@numba.njit(**_JIT)
def _tanh32(x):
    """tanh in float32 as z P(z²)/Q(z²), z = x clamped to |z| <= 7.9, with P of degree 3 and Q of degree 4: a
    near-minimax rational fit (scripts/fit_rational.py reproduces the coefficients). Error 4.2e-7 at most in float32
    (tested; 1 − tanh 7.9 = 2.7e-7), i.e. 7 float32 ulp of 1. Unlike np.tanh it vectorises, and it costs
    9 multiply-adds and a division, two fewer than Eigen's degree-6/3 fit (error 2.7e-7) that it replaced. The
    clamp may map NaN to a number: _fast_run refuses a non-finite h instead of paying for a check per weight."""
    c = np.float32(7.9)
    z = min(max(x, -c), c)
    u = z * z
    p = u * np.float32(1.1161033e-05) + np.float32(0.0029248556)
    p = u * p + np.float32(0.12900542)
    p = u * p + np.float32(0.9999993)
    q = u * np.float32(2.3764878e-07) + np.float32(0.00023506458)
    q = u * q + np.float32(0.02370642)
    q = u * q + np.float32(0.46233606)
    q = u * q + np.float32(1.0)
    return z * p / q


@numba.njit(**_JIT)
def _erf32(x):
    """erf in float32 as z P(z²)/Q(z²), z = x clamped to |z| <= 3.8, P of degree 6 and Q of degree 4 (fitted like
    _tanh32 by scripts/fit_rational.py; error at most 3e-7, tested). Vectorises, unlike math.erf; NaN stays NaN."""
    c = np.float32(3.8)
    z = min(max(x, -c), c)
    u = z * z
    p = u * np.float32(2.1361073e-08) + np.float32(-2.0209698e-06)
    p = u * p + np.float32(0.00013960793)
    p = u * p + np.float32(0.0034821057)
    p = u * p + np.float32(0.04980723)
    p = u * p + np.float32(0.19392052)
    p = u * p + np.float32(1.128379)
    q = u * np.float32(0.0009127471) + np.float32(0.01387178)
    q = u * q + np.float32(0.112548016)
    q = u * q + np.float32(0.50518805)
    q = u * q + np.float32(1.0)
    return z * p / q if x == x else x


@numba.njit(**_JIT)
def _erfcx(z):
    """erfcx(z) = exp(z²) erfc(z) in float64: directly below z = 26 (erfc > 1e-296 and exp(z²) < 1e294 there), else
    the asymptotic series 1/(z√π) Σ_k (−1)^k (2k−1)!!/(2z²)^k, whose 6th term is < 1e-16 from z = 26 on."""
    if z < 26.0:
        return math.exp(z * z) * math.erfc(z)
    r = 1.0 / (2.0 * z * z)
    s, term = 1.0, 1.0
    for k in range(1, 7):
        term *= -(2 * k - 1) * r
        s += term
    return s / (z * math.sqrt(math.pi))


@numba.njit(**_JIT)
def _output_delta(y, mu, sigma2):
    """output_delta for one unit, float64 (Δ_L = (y/σ) φ(t)/Φ(t), t = yμ/σ, through erfcx)."""
    sigma = math.sqrt(sigma2)
    t = y * mu / sigma
    return y / sigma * math.exp(_LOG_SQRT_2_OVER_PI - math.log(_erfcx(-t / math.sqrt(2.0))))


@numba.njit(**_JIT)
def _update_row(hr, a, row, nu, mr, masked):
    """h_row += Σ_s a_s,row ν_s (× mask_row), five samples per sweep: their coefficients stay in registers and
    the loop over the row vectorises."""
    batch, width = nu.shape
    for s in range(0, batch, 5):
        c0, n0 = a[s, row], nu[s]
        c1, n1 = (a[s + 1, row], nu[s + 1]) if s + 1 < batch else (np.float32(0), n0)
        c2, n2 = (a[s + 2, row], nu[s + 2]) if s + 2 < batch else (np.float32(0), n0)
        c3, n3 = (a[s + 3, row], nu[s + 3]) if s + 3 < batch else (np.float32(0), n0)
        c4, n4 = (a[s + 4, row], nu[s + 4]) if s + 4 < batch else (np.float32(0), n0)
        if masked:
            for j in range(width):
                hr[j] += mr[j] * ((c0 * n0[j] + c1 * n1[j]) + (c2 * n2[j] + c3 * n3[j]) + c4 * n4[j])
        else:
            for j in range(width):
                hr[j] += (c0 * n0[j] + c1 * n1[j]) + (c2 * n2[j] + c3 * n3[j]) + c4 * n4[j]


@numba.njit(**_JIT)
def _refresh_row(hr, out):
    """out = ⟨W⟩ = tanh h for one row of binary weights."""
    for j in range(hr.shape[0]):
        out[j] = _tanh32(hr[j])


@numba.njit(**_JIT)
def _layer_pass(h, m, store_m, binary, mask, a, nu, nu_next, w_next, v2_next, mu, q, second):
    """One pass over a layer's weights: this step's update fused with the next step's products.

        h_ij += Σ_s a_si ν_sj (× mask_ij),  m_ij = tanh h_ij (binary) or h_ij (real),
        mu_si = Σ_j m_ij ν'_sj,  q_si = Σ_j m_ij² w'_sj,  second_si = Σ_j mask_ij v2'_sj (local layers),

    ' marking the next step's inputs. `a` with 0 rows: products only; `nu_next` with 0 rows: update only;
    `w_next` with 0 rows: no q (real weights, image input without dropout). Rows go in pairs: a pair is updated,
    refreshed and multiplied while it sits in L1 cache, and each load of ν' serves four multiply-adds;
    ⟨W⟩ is stored only where the backward pass needs it.
    """
    units, width = h.shape
    batch, batch_next = a.shape[0], nu_next.shape[0]
    masked, need_q = mask.shape[0] > 0, w_next.shape[0] > 0
    if batch <= 1 and batch_next <= 1 and not masked:
        _online_pass(h, m, store_m, binary, a, nu, nu_next, w_next, mu, q)
        return
    pair = np.empty((2, width), np.float32)  # ⟨W⟩ of the pair of rows where it is not stored
    for i in range(0, units, 2):
        k = min(i + 1, units - 1)  # the second row (i itself for a last odd row: its products are computed twice)
        for r in range(k - i + 1):
            row = i + r
            if batch > 0:
                _update_row(h[row], a, row, nu, mask[row] if masked else h[row], masked)  # (h[row]: unread)
            if binary:
                _refresh_row(h[row], m[row] if store_m else pair[r])
        # ⟨W⟩ of the two rows: h itself for real weights
        m0 = h[i] if not binary else (m[i] if store_m else pair[0])
        m1 = h[k] if not binary else (m[k] if store_m else pair[k - i])
        for s in range(0, batch_next, 2):
            t = min(s + 1, batch_next - 1)
            a00 = a01 = a10 = a11 = c00 = c01 = c10 = c11 = np.float32(0)
            if need_q:
                for j in range(width):
                    x0, x1 = m0[j], m1[j]
                    n0, n1, w0, w1 = nu_next[s, j], nu_next[t, j], w_next[s, j], w_next[t, j]
                    a00 += x0 * n0
                    a01 += x0 * n1
                    a10 += x1 * n0
                    a11 += x1 * n1
                    x0, x1 = x0 * x0, x1 * x1
                    c00 += x0 * w0
                    c01 += x0 * w1
                    c10 += x1 * w0
                    c11 += x1 * w1
            else:
                for j in range(width):
                    x0, x1, n0, n1 = m0[j], m1[j], nu_next[s, j], nu_next[t, j]
                    a00 += x0 * n0
                    a01 += x0 * n1
                    a10 += x1 * n0
                    a11 += x1 * n1
            mu[t, i], mu[t, k], q[t, i], q[t, k] = a01, a11, c01, c11
            mu[s, i], mu[s, k], q[s, i], q[s, k] = a00, a10, c00, c10
            if masked:
                for row in range(i, k + 1):
                    for u in range(s, t + 1):
                        acc = np.float32(0)
                        for j in range(width):
                            acc += mask[row, j] * v2_next[u, j]
                        second[u, row] = acc + 1


@numba.njit(**_JIT)
def _online_pass(h, m, store_m, binary, a, nu, nu_next, w_next, mu, q):
    """_layer_pass for a dense layer at batch size 1: one loop per row does the update, the refresh and both
    products (batch size 1 is bound by this loop: one tanh and five flops per weight)."""
    units, width = h.shape
    update, products, need_q = a.shape[0] > 0, nu_next.shape[0] > 0, w_next.shape[0] > 0
    zero_nu = np.zeros(width, np.float32)
    nu0 = nu[0] if update else zero_nu
    nn0 = nu_next[0] if products else zero_nu
    w0 = w_next[0] if need_q and products else zero_nu
    for i in range(units):
        a_i = a[0, i] if update else np.float32(0)
        hi = h[i]
        acc_mu = acc_q = np.float32(0)
        if binary:
            if store_m:  # two copies of the loop: a conditional store inside it stops vectorisation
                mi = m[i]
                for j in range(width):
                    h_ij = hi[j] + a_i * nu0[j]
                    hi[j] = h_ij
                    m_ij = _tanh32(h_ij)
                    mi[j] = m_ij
                    acc_mu += m_ij * nn0[j]
                    acc_q += m_ij * m_ij * w0[j]
            else:
                for j in range(width):
                    h_ij = hi[j] + a_i * nu0[j]
                    hi[j] = h_ij
                    m_ij = _tanh32(h_ij)
                    acc_mu += m_ij * nn0[j]
                    acc_q += m_ij * m_ij * w0[j]
        else:
            for j in range(width):
                h_ij = hi[j] + a_i * nu0[j]
                hi[j] = h_ij
                acc_mu += h_ij * nn0[j]
                acc_q += h_ij * h_ij * w0[j]
        if products:
            mu[0, i] = acc_mu
            q[0, i] = acc_q


@numba.njit(**_JIT)
def _used_columns(x, order):
    """The columns of x that are not 0 in some image x[order], padded with unused ones to a multiple of 16 (two
    AVX2 vectors: the loops then have no scalar remainder). The first layer's weights on the other inputs
    neither change (their increment is Δ·0) nor count in μ or σ² (their terms carry ν = ⟨v²⟩ = 0), so the
    compiled epoch leaves them out: MNIST has 67 pixels that are 0 in every standardised image."""
    width = x.shape[1]
    used = np.zeros(width, np.bool_)
    for r in order:
        for j in range(width):
            if x[r, j] != 0:
                used[j] = True
    padding = -used.sum() % 16
    for j in range(width):
        if padding > 0 and not used[j]:
            used[j] = True
            padding -= 1
    return np.flatnonzero(used)


@numba.njit(**_JIT)
def _load_inputs(nu_in, v2_in, w_in, drop, source, columns, binary, dropout, keep, analytic_c, rng, image):
    """The inputs of one layer for one step, from the `columns` of `source` (images or the previous layer's ν):
    ν, ⟨v²⟩ and w = ν² (binary) or ν² − ⟨v²⟩ (real) for q; sampled dropout draws its masks here, for every
    column of `source` (used or not) in the reference's order."""
    batch, width = source.shape
    kept = np.ones(width, np.float32)
    for s in range(batch):
        if dropout == _SAMPLED:
            for j in range(width):
                kept[j] = np.float32(1) if rng.random() < keep else np.float32(0)
        for k in range(columns.shape[0]):
            j = columns[k]
            v = np.float32(source[s, j])
            v2 = v * v if image else np.float32(1)
            if dropout == _SAMPLED:
                v, v2 = v * kept[j], v2 * kept[j]
            nu2 = v * v
            if dropout == _ANALYTIC and image:
                nu2 = analytic_c * nu2
            drop[s, k] = kept[j]
            nu_in[s, k] = v
            v2_in[s, k] = v2
            w_in[s, k] = nu2 if binary else nu2 - v2


@numba.njit(**_JIT)
def _finish_layer(mu, q, second, sigma2, nu_out, b, n, inv_sqrt_n, v2_in, masked, need_q, batch):
    """layer_moments and unit_mean from the products of _layer_pass, for `batch` samples:

        μ = (Σ m ν + b)/sqrt(N),   σ² = (Σ⟨W²⟩⟨v²⟩ − Σ m²ν² + 1)/N = (second − q)/N,   ν = erf(μ/sqrt(2σ²)),

    where ⟨W²⟩ = 1 (binary) or m² + 1 (real) is folded in: second = Σ mask ⟨v²⟩ + 1 (per unit for a local layer,
    else one number per sample) and q = Σ m² w with w = ν² (binary) or ν² − ⟨v²⟩ (real)."""
    units = mu.shape[1]
    for s in range(batch):
        dense_second = np.float32(1)
        if not masked:
            dense_second += v2_in[s].sum()
        for i in range(units):
            sec = second[s, i] if masked else dense_second
            s2 = (sec - (q[s, i] if need_q else np.float32(0))) / n[i]
            m_ = (mu[s, i] + b[i]) * inv_sqrt_n[i]
            mu[s, i] = m_
            sigma2[s, i] = s2
            nu_out[s, i] = _erf32(m_ / math.sqrt(np.float32(2) * s2))


@numba.njit(**_JIT)
def _back_product(d, m):
    """Σ_i d_si m_ij (d ⟨W⟩, the product of backward()), eight rows of m per sweep: each row of the result is
    loaded and stored once per eight rows. Twice as fast as BLAS here for batch-size rows of d (BLAS packs m)."""
    batch, units = d.shape
    back = np.zeros((batch, m.shape[1]), np.float32)
    for i in range(0, units - 7, 8):
        m0, m1, m2, m3, m4, m5, m6, m7 = m[i], m[i + 1], m[i + 2], m[i + 3], m[i + 4], m[i + 5], m[i + 6], m[i + 7]
        for s in range(batch):
            c0, c1, c2, c3 = d[s, i], d[s, i + 1], d[s, i + 2], d[s, i + 3]
            c4, c5, c6, c7 = d[s, i + 4], d[s, i + 5], d[s, i + 6], d[s, i + 7]
            bs = back[s]
            for j in range(m.shape[1]):
                bs[j] += (c0 * m0[j] + c1 * m1[j] + c2 * m2[j] + c3 * m3[j]) + \
                         (c4 * m4[j] + c5 * m5[j] + c6 * m6[j] + c7 * m7[j])
    for i in range(units - units % 8, units):
        for s in range(batch):
            c0, bs, m0 = d[s, i], back[s], m[i]
            for j in range(m.shape[1]):
                bs[j] += c0 * m0[j]
    return back


@numba.njit(**_JIT)
def _backward(y, rows, ms, mus, sigma2s, deltas, inv_sqrt_ns, drops) -> int:
    """backward() for one minibatch (the training images `rows`), into `deltas`: Δ_L in float64 (_output_delta),
    Δ_{l−1} = 2 N(0|μ,σ²) Σ_j ⟨W_j·⟩ Δ_j/sqrt(N_j) in float32 (times the dropout mask of layer l's inputs).
    Returns the first layer with a non-finite Δ, or −1."""
    last, batch = len(ms) - 1, len(rows)
    for s in range(batch):
        for i in range(ms[last].shape[0]):
            deltas[last][s, i] = _output_delta(np.float64(y[rows[s], i]), np.float64(mus[last][s, i]),
                                               np.float64(sigma2s[last][s, i]))
    for l in range(last, 0, -1):
        back = _back_product(deltas[l][:batch] * inv_sqrt_ns[l], ms[l])
        for s in range(batch):
            for i in range(back.shape[1]):  # float32 throughout (expf is twice as fast as exp here)
                mean, var = mus[l - 1][s, i], sigma2s[l - 1][s, i]
                density = math.exp(np.float32(-0.5) * mean * mean / var) / math.sqrt(np.float32(2 * math.pi) * var)
                deltas[l - 1][s, i] = np.float32(2) * density * back[s, i] * drops[l][s, i]
    for l in range(last + 1):
        if not np.isfinite(deltas[l][:batch]).all():
            return l
    return -1


@numba.njit(**_JIT)
def _train_steps(x, y, order, columns, batch_size, hs, ms, bs, masks, ns, inv_sqrt_ns, binary, dropout, keep, rng):
    """EBP over x[order] in minibatches (the steps of train_epoch), in float32 except Δ_L (float64); the first
    layer sees the image's `columns` only (hs[0] and masks[0] hold those columns, see _used_columns).

    Pipelined: step t's update of layer l is fused with step t+1's products of layer l (_layer_pass), so every
    weight is read once per step. Returns (steps done, layer of a non-finite Δ or −1); on a non-finite Δ the
    step stops before its update, so the parameters are those after the last finite step."""
    n_layers, n = len(hs), len(order)
    bmax = min(batch_size, n)
    analytic_c = np.float32(1.0 - 4.0 * keep * (1.0 - keep))
    empty = np.zeros((0, 0), np.float32)
    # inputs of layer l for the current and the next step: index buffer * n_layers + l
    nus = [np.ones((bmax, hs[l % n_layers].shape[1]), np.float32) for l in range(2 * n_layers)]
    v2s = [np.ones((bmax, hs[l % n_layers].shape[1]), np.float32) for l in range(2 * n_layers)]
    ws = [np.ones((bmax, hs[l % n_layers].shape[1]), np.float32) for l in range(2 * n_layers)]
    drops = [np.ones((bmax, hs[l % n_layers].shape[1]), np.float32) for l in range(2 * n_layers)]
    mus = [np.zeros((bmax, h.shape[0]), np.float32) for h in hs]
    qs = [np.zeros((bmax, h.shape[0]), np.float32) for h in hs]
    seconds = [np.zeros((bmax, h.shape[0]), np.float32) for h in hs]
    sigma2s = [np.zeros((bmax, h.shape[0]), np.float32) for h in hs]
    outs = [np.zeros((bmax, h.shape[0]), np.float32) for h in hs]
    deltas = [np.zeros((bmax, h.shape[0]), np.float32) for h in hs]
    sources = [columns]  # the columns of its input that each layer reads: all of them after the first
    for l in range(1, n_layers):
        sources.append(np.arange(hs[l].shape[1]))
    n_steps = (n + batch_size - 1) // batch_size
    cur = 0
    for step in range(-1, n_steps):
        if step >= 0:  # 1. this step's Δ, with ⟨W⟩ from before its update
            start = step * batch_size
            batch = min(batch_size, n - start)
            bad = _backward(y, order[start:start + batch], ms, mus, sigma2s, deltas, inv_sqrt_ns,
                            drops[cur * n_layers:(cur + 1) * n_layers])
            if bad >= 0:
                return step, bad
        # 2. the update of every layer, each fused with the next step's products
        nxt = 1 - cur if step >= 0 else cur
        start_next = (step + 1) * batch_size
        batch_next = min(batch_size, n - start_next) if step + 1 < n_steps else 0
        if batch_next:
            _load_inputs(nus[nxt * n_layers], v2s[nxt * n_layers], ws[nxt * n_layers], drops[nxt * n_layers],
                         x[order[start_next:start_next + batch_next]], columns, binary, dropout, keep, analytic_c,
                         rng, True)
        for l in range(n_layers):
            k, kn = cur * n_layers + l, nxt * n_layers + l
            if step >= 0:
                a = deltas[l][:batch] * inv_sqrt_ns[l]
                bs[l] += a.sum(axis=0)
                nu = nus[k][:batch]
            else:
                a, nu = empty, empty
            # q = Σ m² w is 0 only for real weights on the image without dropout (w = ν² − ⟨v²⟩ = 0 there)
            need_q = binary or dropout != 0 or l > 0
            _layer_pass(hs[l], ms[l], binary and l > 0, binary, masks[l], a, nu, nus[kn][:batch_next],
                        ws[kn][:batch_next] if need_q else empty, v2s[kn][:batch_next], mus[l], qs[l], seconds[l])
            if batch_next:
                _finish_layer(mus[l], qs[l], seconds[l], sigma2s[l], outs[l], bs[l], ns[l], inv_sqrt_ns[l],
                              v2s[kn], masks[l].shape[0] > 0, need_q, batch_next)
                if l + 1 < n_layers:
                    _load_inputs(nus[kn + 1][:batch_next], v2s[kn + 1][:batch_next], ws[kn + 1][:batch_next],
                                 drops[kn + 1][:batch_next], outs[l][:batch_next], sources[l + 1], binary,
                                 dropout, keep, analytic_c, rng, False)
        cur = nxt
    return n_steps, -1


def _fast_copy(net: Network, columns):
    """The float32 working copy the compiled epoch runs on, as numba typed lists (one entry per layer); the
    first layer's h and mask keep only the image's `columns`."""
    hs = [np.array(layer.h, dtype=FAST_DTYPE, order="C") for layer in net.layers]
    masks = [np.zeros((0, 0), FAST_DTYPE) if layer.mask is None else layer.mask.astype(FAST_DTYPE)
             for layer in net.layers]
    hs[0] = np.ascontiguousarray(hs[0][:, columns])
    if masks[0].size:
        masks[0] = np.ascontiguousarray(masks[0][:, columns])
    return dict(
        hs=List(hs),
        ms=List([h if net.weights == "real" else np.empty_like(h) for h in hs]),  # ⟨W⟩: h itself for real weights
        bs=List([layer.b.astype(FAST_DTYPE) for layer in net.layers]),
        masks=List(masks),
        ns=List([layer.n.astype(FAST_DTYPE) for layer in net.layers]),
        inv_sqrt_ns=List([(1.0 / np.sqrt(layer.n)).astype(FAST_DTYPE) for layer in net.layers]))


def _fast_run(net: Network, x, y, order, batch_size: int, rng, step_name) -> None:
    """Runs _train_steps on a working copy and writes h and b back (unless nothing was done); raises the
    reference's FloatingPointError for a non-finite Δ. The compiled loops do not check h weight by weight, so h
    is checked here: a NaN/inf before the call stops it at step 0 (for a NaN the reference's Δ is non-finite
    there; the reference trains on with an infinite h of binary weights), and one after it (an overflow) leaves
    the network as it was. step_name(k) names step k in the messages."""
    def where(step):
        return "" if step_name(step) is None else f" at step {step_name(step)}"

    def finite(hs):
        return [bool(np.isfinite(h).all()) for h in hs]

    before = finite(layer.h for layer in net.layers)
    if not all(before):
        raise FloatingPointError(
            f"non-finite h in layer {before.index(False) + 1}{where(0)}: the posterior holds NaN/inf (h finite per "
            f"layer: {before}), so Δ is not finite (NaN) or the update is meaningless (inf); training stopped "
            f"before the first update, so the parameters are unchanged")
    columns = _used_columns(x, order)
    work = _fast_copy(net, columns)
    steps, bad_layer = _train_steps(x, y, order, columns, batch_size, work["hs"], work["ms"], work["bs"],
                                    work["masks"], work["ns"], work["inv_sqrt_ns"], net.weights == "binary",
                                    _DROPOUT_CODES[net.dropout], float(net.keep), rng)
    if not all(finite(work["hs"])):
        raise FloatingPointError(
            f"h overflowed to NaN/inf during steps 0-{steps - 1} of this call (h finite per layer: "
            f"{finite(work['hs'])}); the network is left as it was before the call")
    if steps:  # a failure at the first step leaves the network exactly as it was
        for k, (layer, h, b) in enumerate(zip(net.layers, work["hs"], work["bs"])):
            if k == 0:  # the unused columns are unchanged (rounded to float32 like the rest)
                full = layer.h.astype(FAST_DTYPE)
                full[:, columns] = h
                h = full
            layer.h[...] = h
            layer.b[...] = b
    if bad_layer >= 0:
        raise FloatingPointError(
            f"non-finite Δ in layer {bad_layer + 1}{where(steps)}: the posterior of some layer holds "
            f"NaN/inf (h finite per layer: {finite(layer.h for layer in net.layers)}); "
            f"training stopped before the update, so the parameters are those of the last finite step")


def _fast_eval_weights(net: Network) -> list[dict]:
    """Per layer, what the float32 evaluation multiplies by: ⟨W⟩, ⟨W⟩², the EBP-D weights, the mask (computed
    once per evaluation, not once per batch as forward() does)."""
    out = []
    for layer in net.layers:
        h = layer.h.astype(FAST_DTYPE)
        m = np.tanh(h) if net.weights == "binary" else h
        mask = None if layer.mask is None else layer.mask.astype(FAST_DTYPE)
        hard = np.sign(h) if net.weights == "binary" else h
        out.append({"m": m, "m2": m * m, "hard": hard if mask is None else hard * mask, "mask": mask,
                    "b": layer.b.astype(FAST_DTYPE), "n": layer.n.astype(FAST_DTYPE)})
    return out


def _fast_ebp_p(net: Network, weights: list[dict], x) -> np.ndarray:
    """output_ebp_p in float32 with BLAS: forward(net, x) at test time, with ⟨W²⟩ = 1 (binary) or m² + 1 (real)
    folded in as in _train_steps: σ²·N = Σ mask ⟨v²⟩ + 1 − Σ m² w, w = ν² (binary) or ν² − ⟨v²⟩ (real)."""
    nu = x.astype(FAST_DTYPE)
    v2 = nu * nu
    nu2 = (1.0 - 4.0 * net.keep * (1.0 - net.keep)) * v2 if net.dropout == "analytic" else v2
    for layer in weights:
        if net.dropout == "sampled":  # test time: the weights scaled by p
            nu, v2 = net.keep * nu, net.keep ** 2 * (np.ones_like(nu) if v2 is None else v2)
            nu2 = nu * nu
        if v2 is None:  # ±1 hidden units: ⟨v²⟩ = 1
            second, w = layer["n"], (nu2 if net.weights == "binary" else nu2 - 1.0)
        else:
            second = (v2 @ layer["mask"].T if layer["mask"] is not None else v2.sum(axis=1, keepdims=True)) + 1.0
            w = nu2 if net.weights == "binary" else nu2 - v2
        mu = (nu @ layer["m"].T + layer["b"]) / np.sqrt(layer["n"])
        sigma2 = (second - w @ layer["m2"].T) / layer["n"]
        nu, v2 = unit_mean(mu, sigma2), None
        nu2 = nu * nu
    return nu


def _fast_ebp_d(net: Network, weights: list[dict], x) -> np.ndarray:
    """output_ebp_d in float32 with BLAS."""
    v = x.astype(FAST_DTYPE)
    scale = net.keep if net.dropout == "sampled" else 1.0
    for k, layer in enumerate(weights):
        u = scale * (v @ layer["hard"].T) + layer["b"]
        v = u if k == len(weights) - 1 else np.where(u >= 0, FAST_DTYPE(1), FAST_DTYPE(-1))
    return v


def fast_evaluate(net: Network, x, labels, batch: int = 2000) -> dict[str, float]:
    """evaluate() in float32 (BLAS on one thread): the same errors up to near-ties between two classes
    (tests/test_fast.py counts the images that differ)."""
    weights, wrong_p, wrong_d = _fast_eval_weights(net), 0, 0
    with _blas_one_thread():
        for start in range(0, len(x), batch):
            xb, lb = x[start:start + batch], labels[start:start + batch]
            wrong_p += int(np.sum(_fast_ebp_p(net, weights, xb).argmax(axis=1) != lb))
            wrong_d += int(np.sum(_fast_ebp_d(net, weights, xb).argmax(axis=1) != lb))
    return {"ebp_p": wrong_p / len(x), "ebp_d": wrong_d / len(x)}


def fast_train_epoch(net: Network, x, y, batch_size: int, rng, epoch: int = 0) -> None:
    """train_epoch with the fast engine: same order, same steps, same random draws; h, b written back at the end."""
    order = rng.permutation(len(x))
    _fast_run(net, x, y, order, batch_size, rng,
              lambda k: f"{k} of epoch {epoch + 1} (batch size {batch_size})")


def fast_train_step(net: Network, x, y, rng=None, step=None) -> None:
    """train_step with the fast engine: the minibatch x as one step (use train_epoch for speed)."""
    if rng is None:
        if net.dropout == "sampled":
            raise ValueError("sampled dropout draws its masks from rng: pass rng=np.random.default_rng(seed)")
        rng = np.random.default_rng(0)  # not drawn from without sampled dropout
    _fast_run(net, x, y, np.arange(len(x)), len(x), rng, lambda k: step)


# ----------------------------------------------------------------------------------------------------------
# Notebook helpers: 05-08
# Small functions that notebooks 05 (real weights), 06 (outputs), 07 (dropout) and 08 (spatial filtering)
# call so that their cells stay a few lines long; each docstring names the notebook that derives it.
# ----------------------------------------------------------------------------------------------------------

def learning_curve(net: Network, data: Dataset, epochs: int, batch_size: int = 10, seed: int = 0,
                   eval_every: int = 100, n_test: int = 2000) -> list[dict]:
    """Train with `train_step` on minibatches in a new random order every epoch (drawn from `seed`, as in
    `train_epoch`) and record the test errors of EBP-P and EBP-D on the first `n_test` test images before
    training, every `eval_every` minibatches and at the end of every epoch (notebooks 05, 07).

    Returns a list of {"step", "epoch" (fractional), "ebp_p", "ebp_d"}.
    """
    _check_batch_size(batch_size)
    _check_data(net, data.x_train, data.y_train)
    rng = np.random.default_rng(seed)
    x_test, labels = data.x_test[:n_test], data.labels_test[:n_test]
    n_batches = -(-len(data.x_train) // batch_size)
    curve = [{"step": 0, "epoch": 0.0, **evaluate(net, x_test, labels)}]
    for epoch in range(epochs):
        order = rng.permutation(len(data.x_train))  # as train_epoch: one permutation, then the minibatches
        for k in range(n_batches):
            idx = order[k * batch_size:(k + 1) * batch_size]
            train_step(net, data.x_train[idx], data.y_train[idx], rng, step=f"{k} of epoch {epoch + 1}")
            step = epoch * n_batches + k + 1
            if step % eval_every == 0 or k == n_batches - 1:
                curve.append({"step": step, "epoch": step / n_batches, **evaluate(net, x_test, labels)})
    return curve


def class_log_probabilities(mu: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """ln p_c, the class distribution implied by EBP-P's output layer (notebook 06).

    Each output unit is +1 with probability P(v_k = +1) = Φ(t_k) = (1 + ν_k)/2, t = μ/σ, independently.
    Conditioned on the output being one of the one-vs-all codes e_c (+1 at c, −1 elsewhere):
        p_c ∝ Φ(t_c) Π_{k≠c} Φ(−t_k) ∝ Φ(t_c)/Φ(−t_c) = (1 + ν_c)/(1 − ν_c).
    Computed from log Φ, so it stays finite where ν_c rounds to ±1. Rows sum to 1 after exp.
    """
    t = mu / np.sqrt(sigma2)
    a = special.log_ndtr(t) - special.log_ndtr(-t)
    return a - special.logsumexp(a, axis=-1, keepdims=True)


def reliability(confidence, outcome, n_bins: int = 10) -> dict:
    """Reliability-diagram data and the expected calibration error (notebook 06).

    Predicted probabilities `confidence` of events that happened (`outcome` 1) or not (0) are put in
    `n_bins` equal-width bins of [0, 1] (1.0 in the last one); per bin: mean confidence, observed
    frequency, count (NaN confidence/frequency for an empty bin).
        ECE = Σ_b (n_b / n) |frequency_b − confidence_b|.
    """
    confidence = np.ravel(confidence).astype(float)
    outcome = np.ravel(outcome).astype(float)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    which = np.digitize(confidence, edges[1:-1])
    count = np.bincount(which, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = np.bincount(which, confidence, n_bins) / count
        frequency = np.bincount(which, outcome, n_bins) / count
    ece = float(np.nansum(count * np.abs(frequency - mean_confidence)) / len(confidence))
    return {"edges": edges, "confidence": mean_confidence, "frequency": frequency, "count": count, "ece": ece}


def monte_carlo_outputs(net: Network, x: np.ndarray, rng, n_samples: int = 500) -> np.ndarray:
    """Sampled ⟨v_L⟩ (B, V_L) of the Bayes average of sign networks, which EBP-P's ν_L approximates
    (notebook 06). Each sample draws one whole network from the mean-field posterior (every weight by
    sample_weights, every bias as N(b, 1), the spec's convention) and runs v_l = sign(W_l v_{l−1} + b_l)
    through all layers, the output layer included. Networks with dropout are refused.
    """
    if net.dropout is not None:
        raise ValueError("monte_carlo_outputs samples networks without dropout")
    total = np.zeros((len(x), len(net.layers[-1].b)))
    for _ in range(n_samples):
        v = x
        for layer in net.layers:
            w = sample_weights(layer, net.weights, rng, 1)[0]
            u = v @ w.T + layer.b + rng.standard_normal(len(layer.b))
            v = np.where(u >= 0, 1.0, -1.0)
        total += v
    return total / n_samples


def with_scaled_h(net: Network, alpha: float) -> Network:
    """A copy of `net` with every h multiplied by alpha (biases unchanged): for binary weights it makes
    every weight more (alpha > 1) or less (alpha < 1) certain while keeping its sign, so EBP-D is unchanged
    (notebook 06)."""
    import copy

    scaled = copy.deepcopy(net)
    for layer in scaled.layers:
        layer.h *= alpha
    return scaled


def monte_carlo_layer_inputs(layer: Layer, weights: str, v: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """Sampled mean and variance (each (V,)) of u = (W v_s + b)/sqrt(N), where each row v_s of v (S, K) is
    one draw of a random input (e.g. the image under a dropout mask) and comes with its own draw of the
    weights (sample_weights) and of the bias (N(b, 1)) (notebook 07). Works in chunks to bound memory."""
    chunk = max(1, 2_000_000 // layer.h.size)
    total, total2 = np.zeros(len(layer.b)), np.zeros(len(layer.b))
    for start in range(0, len(v), chunk):
        vs = v[start:start + chunk]
        w = sample_weights(layer, weights, rng, len(vs))
        u = (np.einsum("svk,sk->sv", w, vs) + layer.b + rng.standard_normal((len(vs), len(layer.b))))
        u /= np.sqrt(layer.n)
        total += u.sum(axis=0)
        total2 += (u * u).sum(axis=0)
    mean = total / len(v)
    return mean, total2 / len(v) - mean * mean


def receptive_field(net: Network, layer_index: int, unit: int) -> np.ndarray:
    """Boolean (side, side) image of the input pixels that `unit` of layer `layer_index` (0-based) depends
    on, through the connectivity masks of that layer and every layer below it (a layer without a mask sees
    all its inputs) (notebook 08)."""
    reach = np.zeros(len(net.layers[layer_index].b), dtype=bool)
    reach[unit] = True
    for layer in net.layers[layer_index::-1]:
        connected = layer.mask if layer.mask is not None else np.ones(layer.h.shape, dtype=bool)
        reach = connected[reach].any(axis=0)
    return reach.reshape(net.input_side, net.input_side)


def weights_as_image(net: Network, layer_index: int, unit: int) -> np.ndarray:
    """⟨W⟩ of one unit's incoming weights (tanh h or h) laid out on its input grid (the image for the first
    layer, the previous feature map for a second local layer), NaN where the unit is not connected, so a
    plot shows the weights at their receptive-field position (notebook 08)."""
    layer = net.layers[layer_index]
    m, _ = weight_moments(layer, net.weights)
    image = np.where(layer.mask[unit], m[unit], np.nan) if layer.mask is not None else m[unit].copy()
    side = int(round(np.sqrt(layer.h.shape[1])))
    return image.reshape(side, side)


# ----------------------------------------------------------------------------------------------------------
# Notebook helpers: 01-04 (small references the notebooks check ebp_lib against; not used by training)
# ----------------------------------------------------------------------------------------------------------

def relative_error(estimate, reference) -> float:
    """‖estimate − reference‖ / ‖reference‖ (Frobenius norms over all entries)."""
    estimate, reference = np.asarray(estimate), np.asarray(reference)
    return float(np.linalg.norm(estimate - reference) / np.linalg.norm(reference))


def _central_difference(f, z: np.ndarray, eps: float) -> np.ndarray:
    """∂f/∂z for every entry of z by central differences (f(z + ε e) − f(z − ε e)) / 2ε; error O(ε²)."""
    grad = np.zeros_like(z)
    for idx in np.ndindex(z.shape):
        up, down = z.copy(), z.copy()
        up[idx] += eps
        down[idx] -= eps
        grad[idx] = (f(up) - f(down)) / (2.0 * eps)
    return grad


def numerical_deltas(net: Network, fwd: Pass, y: np.ndarray, eps: float = 1e-5) -> list[np.ndarray]:
    """Finite-difference reference for Δ: ∂ ln P(v_L = y)/∂μ_l of every layer, σ held fixed (spec §Backward
    pass), from log_likelihood_from. One function evaluation per entry: for small networks only."""
    return [_central_difference(lambda mu: log_likelihood_from(net, fwd, y, k, mu=mu), fwd.mu[k], eps)
            for k in range(len(net.layers))]


def numerical_increments(net: Network, fwd: Pass, y: np.ndarray, eps: float = 1e-5) -> list[np.ndarray]:
    """Finite-difference reference for the h increments: ∂ ln P(v_L = y)/∂⟨W_l⟩ of every layer (spec §Update),
    σ held fixed. For small networks only."""
    return [_central_difference(lambda m: log_likelihood_from(net, fwd, y, k, m=m), fwd.m[k], eps)
            for k in range(len(net.layers))]


def monte_carlo_with_errors(layer: Layer, weights: str, nu_prev: np.ndarray, rng, n_samples: int = 20000,
                            n_batches: int = 10, deterministic_input: bool = True):
    """monte_carlo_layer run in `n_batches` equal batches (bounded memory): the estimates of E u, Var u and
    E sign u for every unit, and their standard errors from the spread of the batch estimates (batch means).
    Returns (mean, var, sign_mean), (se_mean, se_var, se_sign_mean), each an array over the layer's units."""
    runs = np.array([monte_carlo_layer(layer, weights, nu_prev, rng, n_samples // n_batches, deterministic_input)
                     for _ in range(n_batches)])                  # (batch, quantity, unit)
    mean, var, sign_mean = runs.mean(axis=0)
    var = var + runs[:, 0].var(axis=0)                            # pooled variance: within + between batches
    se = runs.std(axis=0, ddof=1) / np.sqrt(n_batches)
    return (mean, var, sign_mean), tuple(se)


def pm1_sum_distribution(a: np.ndarray) -> np.ndarray:
    """Exact distribution of S = Σ_r s_r for independent s_r = ±1 with means a (V, K), one row per unit:
    P[v, j] = P(S = 2j − K), j = 0..K (a Poisson-binomial, by dynamic programming over r: O(V K²))."""
    a = np.atleast_2d(a)
    up = 0.5 * (1.0 + a)                                          # P(s_r = +1)
    dist = np.zeros((len(a), a.shape[1] + 1))
    dist[:, 0] = 1.0
    for r in range(a.shape[1]):                                   # add s_r: j (number of +1) stays or grows by 1
        q = up[:, r:r + 1]
        dist[:, 1:r + 2] = dist[:, 1:r + 2] * (1.0 - q) + dist[:, :r + 1] * q
        dist[:, :1] *= 1.0 - q
    return dist


def exact_sign_mean_pm1(a: np.ndarray, c: np.ndarray) -> np.ndarray:
    """E sign(S + c + ε) with S = Σ_r s_r as in pm1_sum_distribution and ε ~ N(0, 1) (the bias's unit
    variance): the exact mean of a hidden unit with binary weights and ±1 inputs, where a_r = ⟨W_r⟩ν_r
    and c = b. The reference for ν = 2Φ(μ/σ) − 1 without the central-limit approximation."""
    dist = pm1_sum_distribution(a)
    s = 2.0 * np.arange(dist.shape[1]) - (dist.shape[1] - 1)
    return np.sum(dist * special.erf((s + np.asarray(c)[:, None]) / np.sqrt(2.0)), axis=1)


def binary_configurations(n_weights: int) -> np.ndarray:
    """All 2^n vectors in {−1, +1}^n, one per row (to enumerate the weights of a tiny network)."""
    bits = (np.arange(2 ** n_weights)[:, None] >> np.arange(n_weights)[::-1]) & 1
    return 1.0 - 2.0 * bits


def noisy_network_likelihood(weights: list[np.ndarray], biases: list[np.ndarray], x: np.ndarray,
                             y: np.ndarray) -> np.ndarray:
    """P(v_L = y | x, W) for many weight configurations of a tiny network of ±1 units, each unit adding unit
    Gaussian noise to its input: v_l = sign(W_l v_{l−1} + b_l + ε), ε ~ N(0, 1). This is the model whose
    σ² carries the "+1" of spec §Forward pass (the bias as an input with weight variance 1), so P(v = +1) =
    Φ(W v + b). weights[l]: (C, V_l, K_l) for C configurations; x (K_0,); y (V_L,) ±1. Exact: sums over every
    state of every hidden layer (2^{V_l} of them), so for tiny networks only. Returns (C,)."""
    prob = np.ones((len(weights[0]), 1))                   # P(state of the previous layer): (C, S)
    states = np.asarray(x, dtype=float)[None, :]           # the input: one deterministic state
    for k, (w, b) in enumerate(zip(weights, biases)):
        u = np.einsum("cvk,sk->csv", w, states) + b       # (C, S, V): noiseless input of every unit
        if k == len(weights) - 1:
            return np.sum(prob * np.prod(special.ndtr(y * u), axis=2), axis=1)
        nxt = binary_configurations(w.shape[1])            # (T, V): every state of this layer
        step = np.prod(special.ndtr(u[:, :, None, :] * nxt[None, None]), axis=3)   # P(next state | state)
        prob = np.einsum("cs,cst->ct", prob, step)
        states = nxt


def marginal_natural_parameters(log_q: np.ndarray, configs: np.ndarray) -> np.ndarray:
    """h_i = ½ ln[P(W_i = +1) / P(W_i = −1)] for the distribution ∝ exp(log_q) over the rows of `configs`
    (C, n): the factor exp(h_i W_i) with the same marginal, so ⟨W_i⟩ = tanh h_i. With log_q = Σ_i h_i W_i +
    ln P(y | x, W) it is the exact mean-field ("Bayes-like", marginal-matching) update of spec §Update before
    the central-limit and first-order approximations; with the full log posterior, its exact marginals."""
    plus = configs > 0
    masked = np.where(plus, log_q[:, None], -np.inf), np.where(~plus, log_q[:, None], -np.inf)
    return 0.5 * (special.logsumexp(masked[0], axis=0) - special.logsumexp(masked[1], axis=0))


def unflatten_layers(flat: np.ndarray, shapes) -> list[np.ndarray]:
    """Cut the last axis of `flat` (…, Σ V_l K_l) into per-layer weight matrices (…, V_l, K_l), in layer order.
    shapes = [(V_1, K_1), (V_2, K_2), …]. Used to read enumerated configurations or a flat h as a network."""
    out, start = [], 0
    for v, k in shapes:
        out.append(flat[..., start:start + v * k].reshape(flat.shape[:-1] + (v, k)))
        start += v * k
    return out


def ebp_h_increment(h: np.ndarray, shapes, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """EBP's closed-form update (spec §Forward pass, §Backward pass, §Update) of the flat natural parameters h
    of a tiny binary network with zero biases, for one example (x, y): forward, backward, increments. The
    biases are held at 0 (not updated), so that the weights are the only unknowns, as in the enumerated model
    of noisy_network_likelihood. Returns the flat increment."""
    net = Network([Layer(w.copy(), np.zeros(len(w))) for w in unflatten_layers(h, shapes)], "binary",
                  [v for v, _ in shapes])
    fwd = forward(net, np.atleast_2d(x))
    incs = increments(net, fwd, backward(net, fwd, np.atleast_2d(y)))
    return np.concatenate([inc.ravel() for inc in incs])
