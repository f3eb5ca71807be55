"""Data loading and preprocessing (ebp_data; docs/maths.md §Data protocol).

Two groups:
- the happy path on the real files (needs $EBP_DATA_DIR, skipped otherwise), with the checks published in
  shared/data/README.md;
- every bad input, on small IDX files the tests write into tmp_path. Each asserts the error type *and* that the
  message names the file and the problem, so removing a check in ebp_data makes a test fail.
Nothing here downloads: conftest points every mirror at a closed local port; one test serves files itself
from a loopback HTTP server to exercise the download path.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

import ebp_data
from ebp_data import DataError, DataNotFoundError

MNIST_FILES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
               "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
# Published in shared/data/README.md (written here, not taken from ebp_data, so the test is independent).
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
MNIST_MD5 = {"train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
             "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
             "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
             "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c"}


# ----------------------------------------------------------------------------------------------------------
# Helpers: small IDX files
# ----------------------------------------------------------------------------------------------------------

def idx_bytes(array: np.ndarray, magic: int | None = None, shape: tuple | None = None) -> bytes:
    """IDX encoding of a uint8 array; `magic` and `shape` override the header to make broken files."""
    array = np.asarray(array, dtype=np.uint8)
    magic = (0x0800 + array.ndim) if magic is None else magic
    shape = array.shape if shape is None else shape
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in shape)
    return header + array.tobytes()


def write_gz(path, payload: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(payload, mtime=0))  # mtime=0: same bytes, same md5, every time
    return path


def md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def fake_arrays(seed: int = 0, n_train: int = 40, n_test: int = 15):
    """Small MNIST-like arrays: random digits in the 20x20 centre, a 4-pixel border that is always 0."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in (("train", n_train), ("t10k", n_test)):
        images = np.zeros((n, 28, 28), np.uint8)
        images[:, 4:24, 4:24] = rng.integers(0, 256, (n, 20, 20))
        out[f"{split}-images-idx3-ubyte.gz"] = images
        out[f"{split}-labels-idx1-ubyte.gz"] = np.arange(n, dtype=np.uint8) % 10
    return out


def write_fake_dataset(folder, arrays) -> dict[str, str]:
    """Write the four files into `folder`; return their md5s."""
    return {name: md5(write_gz(folder / name, idx_bytes(a))) for name, a in arrays.items()}


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No $EBP_DATA_DIR, an empty cache under tmp_path, unreachable mirrors: nothing outside tmp_path is seen."""
    monkeypatch.delenv(ebp_data.DATA_ENV_VAR, raising=False)
    monkeypatch.setattr(ebp_data, "CACHE_DIR", tmp_path / "cache")
    for spec in ebp_data.DATASETS.values():
        monkeypatch.setitem(spec, "mirrors", ["http://127.0.0.1:9/"])
    return tmp_path


@pytest.fixture
def fake_mnist(isolated, monkeypatch):
    """A small, valid 'mnist' in tmp_path/data/mnist whose md5s are registered in place of the real ones."""
    arrays = fake_arrays()
    sums = write_fake_dataset(isolated / "data" / "mnist", arrays)
    monkeypatch.setitem(ebp_data.DATASETS["mnist"], "md5", sums)
    return isolated / "data", arrays


def register(monkeypatch, folder, name):
    """Accept the (broken) file `folder/name` as genuine, so that the reader's own checks are reached."""
    monkeypatch.setitem(ebp_data.DATASETS["mnist"]["md5"], name, md5(folder / name))


# ----------------------------------------------------------------------------------------------------------
# Happy path on small files: lookup order and round trip
# ----------------------------------------------------------------------------------------------------------

def test_fake_round_trip(fake_mnist):
    root, arrays = fake_mnist
    raw = ebp_data.load_raw("mnist", data_dir=root)
    for split in ("train", "t10k"):
        key = "train" if split == "train" else "test"
        np.testing.assert_array_equal(raw[f"{key}_images"], arrays[f"{split}-images-idx3-ubyte.gz"])
        np.testing.assert_array_equal(raw[f"{key}_labels"], arrays[f"{split}-labels-idx1-ubyte.gz"])
        assert raw[f"{key}_images"].dtype == np.uint8 and raw[f"{key}_images"].flags.writeable


def test_lookup_order_env_then_cache(fake_mnist, monkeypatch):
    root, arrays = fake_mnist
    write_fake_dataset(ebp_data.CACHE_DIR / "mnist", arrays)
    # $EBP_DATA_DIR first ...
    monkeypatch.setenv(ebp_data.DATA_ENV_VAR, str(root))
    assert {p.parent for p in ebp_data.find_data_files("mnist").values()} == {root / "mnist"}
    # ... then the cache, per file
    (root / "mnist" / MNIST_FILES[0]).unlink()
    found = ebp_data.find_data_files("mnist")
    assert found[MNIST_FILES[0]] == ebp_data.CACHE_DIR / "mnist" / MNIST_FILES[0]
    assert found[MNIST_FILES[1]] == root / "mnist" / MNIST_FILES[1]
    monkeypatch.delenv(ebp_data.DATA_ENV_VAR)
    assert {p.parent for p in ebp_data.find_data_files("mnist").values()} == {ebp_data.CACHE_DIR / "mnist"}


def test_data_dir_is_the_only_place_looked_at(fake_mnist, tmp_path):
    root, arrays = fake_mnist
    # the parent of mnist/ or the dataset folder itself
    assert ebp_data.find_data_files("mnist", data_dir=root)[MNIST_FILES[0]] == root / "mnist" / MNIST_FILES[0]
    assert ebp_data.find_data_files("mnist", data_dir=root / "mnist")[MNIST_FILES[0]].parent == root / "mnist"
    # an explicit folder without the files does not fall back to the cache
    write_fake_dataset(ebp_data.CACHE_DIR / "mnist", arrays)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataNotFoundError, match="train-images-idx3-ubyte.gz"):
        ebp_data.find_data_files("mnist", data_dir=tmp_path / "empty")


def test_fake_load_dataset_all_modes(fake_mnist):
    root, arrays = fake_mnist
    raw_train = arrays["train-images-idx3-ubyte.gz"].reshape(40, -1).astype(float)
    raw_test = arrays["t10k-images-idx3-ubyte.gz"].reshape(15, -1).astype(float)
    d = ebp_data.load_dataset("mnist", data_dir=root)
    const = raw_train.std(0) == 0
    assert const.sum() == 784 - 400
    np.testing.assert_allclose(d.x_train[:, ~const].mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(d.x_train[:, ~const].std(0), 1, rtol=1e-12)
    assert np.all(d.x_train[:, const] == 0) and np.all(d.x_test[:, const] == 0)
    mean, std = raw_train.mean(0), raw_train.std(0)
    np.testing.assert_allclose(d.x_test[:, ~const], (raw_test - mean)[:, ~const] / std[~const], rtol=1e-12)
    g = ebp_data.load_dataset("mnist", "global", data_dir=root)
    np.testing.assert_allclose(g.x_test, (raw_test - raw_train.mean()) / raw_train.std(), rtol=1e-12)
    u = ebp_data.load_dataset("mnist", "unit", data_dir=root)
    np.testing.assert_array_equal(u.x_train, raw_train / 255)
    i = ebp_data.load_dataset("mnist", "image", data_dir=root)  # each image by its own statistics
    for x, raw in ((i.x_train, raw_train), (i.x_test, raw_test)):
        np.testing.assert_allclose(x, (raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True), rtol=1e-12)
        np.testing.assert_allclose(x.mean(1), 0, atol=1e-12)
        np.testing.assert_allclose(x.std(1), 1, rtol=1e-12)


# ----------------------------------------------------------------------------------------------------------
# Bad input: checksums
# ----------------------------------------------------------------------------------------------------------

def test_checksum_mismatch_against_published_md5(isolated):
    """A file with the right name but other content, in a data_dir: the real published md5s reject it."""
    assert ebp_data.DATASETS["mnist"]["md5"] == MNIST_MD5
    write_fake_dataset(isolated / "data" / "mnist", fake_arrays())
    bad = isolated / "data" / "mnist" / MNIST_FILES[0]
    with pytest.raises(DataError, match="md5") as err:
        ebp_data.find_data_files("mnist", data_dir=isolated / "data")
    assert str(bad) in str(err.value) and MNIST_MD5[MNIST_FILES[0]] in str(err.value)
    assert not isinstance(err.value, DataNotFoundError)


@pytest.mark.parametrize("where", ["data_dir", "env", "cache"])
@pytest.mark.parametrize("name", MNIST_FILES)
def test_checksum_mismatch_names_file(fake_mnist, monkeypatch, where, name):
    root, arrays = fake_mnist
    if where == "cache":
        shutil.copytree(root / "mnist", ebp_data.CACHE_DIR / "mnist")
        folder = ebp_data.CACHE_DIR / "mnist"
    else:
        folder = root / "mnist"
        if where == "env":
            monkeypatch.setenv(ebp_data.DATA_ENV_VAR, str(root))
    changed = dict(arrays)
    changed[name] = changed[name].copy()
    changed[name].flat[-1] ^= 1  # one bit of the last pixel / label
    write_gz(folder / name, idx_bytes(changed[name]))
    with pytest.raises(DataError, match="does not match the published") as err:
        ebp_data.load_dataset("mnist", data_dir=root if where == "data_dir" else None)
    assert str(folder / name) in str(err.value)


# ----------------------------------------------------------------------------------------------------------
# Bad input: the IDX reader (each case also through load_dataset: nothing partial comes back)
# ----------------------------------------------------------------------------------------------------------

LABELS = np.arange(7, dtype=np.uint8)
IMAGES = np.arange(3 * 28 * 28, dtype=np.uint64).astype(np.uint8).reshape(3, 28, 28)

BROKEN = {  # name -> (file bytes as written, ndim to read it as, pattern the message must contain)
    "truncated gzip": (lambda: gzip.compress(idx_bytes(IMAGES), mtime=0)[:-20], 3, "not a complete gzip"),
    "gzip cut in the header": (lambda: gzip.compress(idx_bytes(IMAGES), mtime=0)[:5], 3, "not a complete gzip"),
    "not gzip at all": (lambda: idx_bytes(IMAGES), 3, "not a complete gzip"),
    "empty file": (lambda: b"", 1, "IDX header"),
    "shorter than header": (lambda: gzip.compress(b"\x00\x00\x08", mtime=0), 1, "shorter than an IDX header"),
    "labels magic read as images": (lambda: gzip.compress(idx_bytes(np.zeros(50, np.uint8)), mtime=0), 3,
                                    "magic number 0x00000801, expected 0x00000803"),
    "images magic read as labels": (lambda: gzip.compress(idx_bytes(IMAGES), mtime=0), 1,
                                    "magic number 0x00000803, expected 0x00000801"),
    "int32 data type magic": (lambda: gzip.compress(idx_bytes(LABELS, magic=0x0C01), mtime=0), 1, "magic number"),
    "payload shorter than header says": (lambda: gzip.compress(idx_bytes(LABELS, shape=(8,)), mtime=0), 1,
                                         r"promises shape \(8,\) \(8 bytes\) but the file holds 7"),
    "payload longer than header says": (lambda: gzip.compress(idx_bytes(IMAGES, shape=(2, 28, 28)), mtime=0), 3,
                                        r"promises shape \(2, 28, 28\) \(1568 bytes\) but the file holds 2352"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_read_idx_rejects(tmp_path, case):
    make, ndim, pattern = BROKEN[case]
    path = tmp_path / ("bad-images.gz" if ndim == 3 else "bad-labels.gz")
    path.write_bytes(make())
    with pytest.raises(DataError, match=pattern) as err:
        ebp_data.read_idx(path, ndim)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("case", list(BROKEN))
def test_load_dataset_raises_on_broken_file(fake_mnist, monkeypatch, case):
    """The broken file is the last one read (test labels), so a loader that returned what it had would pass."""
    root, _ = fake_mnist
    make, ndim, pattern = BROKEN[case]
    name = "t10k-images-idx3-ubyte.gz" if ndim == 3 else "t10k-labels-idx1-ubyte.gz"
    (root / "mnist" / name).write_bytes(make())
    register(monkeypatch, root / "mnist", name)
    with pytest.raises(DataError, match=pattern) as err:
        ebp_data.load_dataset("mnist", data_dir=root)
    assert str(root / "mnist" / name) in str(err.value)


def test_image_label_count_mismatch(tmp_path):
    images = write_gz(tmp_path / "im.gz", idx_bytes(IMAGES))           # 3 images
    labels = write_gz(tmp_path / "lab.gz", idx_bytes(LABELS[:4]))      # 4 labels
    with pytest.raises(DataError, match="3 images but") as err:
        ebp_data.read_split(images, labels)
    assert str(images) in str(err.value) and str(labels) in str(err.value) and "4 labels" in str(err.value)


def test_image_label_count_mismatch_through_loader(fake_mnist, monkeypatch):
    root, arrays = fake_mnist
    name = "t10k-labels-idx1-ubyte.gz"
    write_gz(root / "mnist" / name, idx_bytes(arrays[name][:-1]))
    register(monkeypatch, root / "mnist", name)
    with pytest.raises(DataError, match="15 images but .*14 labels") as err:
        ebp_data.load_dataset("mnist", data_dir=root)
    assert str(root / "mnist" / name) in str(err.value)


def test_label_out_of_range(tmp_path):
    images = write_gz(tmp_path / "im.gz", idx_bytes(IMAGES))
    labels = write_gz(tmp_path / "lab.gz", idx_bytes(np.array([0, 10, 3], np.uint8)))
    with pytest.raises(DataError, match="label 10 outside 0..9") as err:
        ebp_data.read_split(images, labels)
    assert str(labels) in str(err.value)


# ----------------------------------------------------------------------------------------------------------
# Bad input: missing files, no network; downloads (from a loopback server only)
# ----------------------------------------------------------------------------------------------------------

def test_missing_files_no_network(isolated):
    with pytest.raises(DataNotFoundError) as err:
        ebp_data.load_dataset("mnist")
    msg = str(err.value)
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, DataError)
    assert all(name in msg for name in MNIST_FILES), msg
    assert ebp_data.DATA_ENV_VAR in msg and "could not download" in msg and "127.0.0.1:9" in msg
    assert str(ebp_data.CACHE_DIR / "mnist") in msg
    assert not list(isolated.rglob("*.gz")), "a failed download must leave no file behind"


def test_missing_some_files_names_only_those(fake_mnist):
    root, _ = fake_mnist
    (root / "mnist" / "t10k-images-idx3-ubyte.gz").unlink()
    (root / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataNotFoundError) as err:
        ebp_data.load_raw("mnist", data_dir=root)
    msg = str(err.value)
    assert "t10k-images-idx3-ubyte.gz" in msg and "t10k-labels-idx1-ubyte.gz" in msg
    assert "train-images" not in msg and "train-labels" not in msg
    assert ebp_data.DATA_ENV_VAR in msg and "could not download" not in msg  # data_dir given: no download


def test_env_var_names_missing_folder(isolated, monkeypatch):
    monkeypatch.setenv(ebp_data.DATA_ENV_VAR, str(isolated / "nowhere"))
    with pytest.raises(DataNotFoundError) as err, pytest.warns(UserWarning):
        ebp_data.find_data_files("fashion-mnist")
    assert str(isolated / "nowhere" / "fashion-mnist") in str(err.value)


def test_a_mistyped_env_var_warns_before_falling_back_to_the_cache(fake_mnist, monkeypatch):
    """$EBP_DATA_DIR naming a folder without '<dataset>/' (a typo): the files still come from the cache, with a
    warning that names the variable, the folder it pointed to and the fallback."""
    root, arrays = fake_mnist
    write_fake_dataset(ebp_data.CACHE_DIR / "mnist", arrays)
    monkeypatch.setenv(ebp_data.DATA_ENV_VAR, str(root) + "-typo")
    with pytest.warns(UserWarning) as caught:
        found = ebp_data.find_data_files("mnist")
    assert {p.parent for p in found.values()} == {ebp_data.CACHE_DIR / "mnist"}
    message = str(caught[0].message)
    assert ebp_data.DATA_ENV_VAR in message and str(Path(str(root) + "-typo") / "mnist") in message
    assert str(ebp_data.CACHE_DIR / "mnist") in message


@pytest.fixture
def loopback_mirror(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/served; yields its URL."""
    served = tmp_path / "served"
    served.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_download_into_cache_then_offline(isolated, monkeypatch, loopback_mirror):
    served, url = loopback_mirror
    arrays = fake_arrays(seed=1)
    sums = write_fake_dataset(served, arrays)
    monkeypatch.setitem(ebp_data.DATASETS["mnist"], "md5", sums)
    monkeypatch.setitem(ebp_data.DATASETS["mnist"], "mirrors", ["http://127.0.0.1:9/", url])  # first one is down
    raw = ebp_data.load_raw("mnist")
    np.testing.assert_array_equal(raw["train_images"], arrays["train-images-idx3-ubyte.gz"])
    assert sorted(p.name for p in (ebp_data.CACHE_DIR / "mnist").iterdir()) == sorted(MNIST_FILES)
    # the mirror goes away: the cache is enough
    monkeypatch.setitem(ebp_data.DATASETS["mnist"], "mirrors", ["http://127.0.0.1:9/"])
    np.testing.assert_array_equal(ebp_data.load_raw("mnist")["test_labels"], arrays["t10k-labels-idx1-ubyte.gz"])


def test_download_with_wrong_md5_is_refused(isolated, monkeypatch, loopback_mirror):
    served, url = loopback_mirror
    write_fake_dataset(served, fake_arrays(seed=2))  # not the real MNIST: the published md5s reject it
    monkeypatch.setitem(ebp_data.DATASETS["mnist"], "mirrors", [url])
    with pytest.raises(DataNotFoundError) as err:
        ebp_data.find_data_files("mnist")
    msg = str(err.value)
    assert "could not download" in msg and MNIST_FILES[-1] in msg and MNIST_MD5[MNIST_FILES[-1]] in msg
    assert not list((ebp_data.CACHE_DIR / "mnist").glob("*.gz")) if (ebp_data.CACHE_DIR / "mnist").exists() else True


# ----------------------------------------------------------------------------------------------------------
# Bad input: arguments
# ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: ebp_data.find_data_files("cifar10"),
    lambda: ebp_data.load_raw("cifar10"),
    lambda: ebp_data.load_dataset("MNIST"),
])
def test_unknown_dataset(isolated, call):
    with pytest.raises(ValueError, match="unknown dataset") as err:
        call()
    assert "'fashion-mnist'" in str(err.value) and "'mnist'" in str(err.value)
    assert not isinstance(err.value, DataError)


def test_bad_preprocessing_mode(fake_mnist):
    root, arrays = fake_mnist
    with pytest.raises(ValueError, match="unknown preprocessing 'per-pixel'.*'pixel', 'global', 'unit' or 'image'"):
        ebp_data.load_dataset("mnist", preprocessing="per-pixel", data_dir=root)
    with pytest.raises(ValueError, match="unknown preprocessing 'Pixel'"):
        ebp_data.standardise(arrays["train-images-idx3-ubyte.gz"], arrays["t10k-images-idx3-ubyte.gz"], "Pixel")


@pytest.mark.parametrize("n_train", [0, -1, 41])
def test_bad_n_train(fake_mnist, n_train):
    root, _ = fake_mnist
    with pytest.raises(ValueError, match=f"n_train={n_train} must be between 1 and 40"):
        ebp_data.load_dataset("mnist", n_train=n_train, data_dir=root)


# ----------------------------------------------------------------------------------------------------------
# Happy path on the real files (skipped without $EBP_DATA_DIR)
# ----------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mnist_raw(real_data_dir):
    return ebp_data.load_raw("mnist", data_dir=real_data_dir)


@pytest.fixture(scope="module")
def mnist_pixel(real_data_dir):
    return ebp_data.load_dataset("mnist", data_dir=real_data_dir)


def test_real_files_found_and_verified(real_data_dir):
    found = ebp_data.find_data_files("mnist")  # through $EBP_DATA_DIR
    assert sorted(found) == sorted(MNIST_FILES)
    assert all(path.parent == real_data_dir / "mnist" for path in found.values())
    assert all(md5(path) == MNIST_MD5[name] for name, path in found.items())


def test_real_mnist_raw(mnist_raw):
    r = mnist_raw
    assert r["train_images"].shape == (60000, 28, 28) and r["test_images"].shape == (10000, 28, 28)
    assert r["train_labels"].shape == (60000,) and r["test_labels"].shape == (10000,)
    assert all(a.dtype == np.uint8 for a in r.values())
    assert np.bincount(r["train_labels"]).tolist() == MNIST_TRAIN_COUNTS
    assert np.bincount(r["test_labels"]).tolist() == MNIST_TEST_COUNTS
    x = r["train_images"].astype(np.float64)
    assert round(x.mean() / 255, 4) == 0.1307 and round(x.std() / 255, 4) == 0.3081
    uncompressed = hashlib.md5(idx_bytes(r["train_images"])).hexdigest()
    assert uncompressed == "6bbc9ace898e44ae57da46a324031adb"


def test_real_fashion_mnist(real_data_dir):
    r = ebp_data.load_raw("fashion-mnist", data_dir=real_data_dir)
    assert r["train_images"].shape == (60000, 28, 28) and r["test_images"].shape == (10000, 28, 28)
    assert all(a.dtype == np.uint8 for a in r.values())
    assert np.bincount(r["train_labels"]).tolist() == [6000] * 10
    assert np.bincount(r["test_labels"]).tolist() == [1000] * 10


def test_real_pixel_standardisation(mnist_raw, mnist_pixel):
    d = mnist_pixel
    assert d.name == "mnist" and d.preprocessing == "pixel"
    assert d.x_train.shape == (60000, 784) and d.x_test.shape == (10000, 784)
    assert d.x_train.dtype == d.x_test.dtype == np.float64
    raw_train = mnist_raw["train_images"].reshape(60000, 784).astype(np.float64)
    mean, std = raw_train.mean(0), raw_train.std(0)
    const = std == 0
    assert 0 < const.sum() < 784  # MNIST has pixels that are 0 in every training image
    np.testing.assert_allclose(d.x_train.mean(0), 0, atol=1e-9)
    np.testing.assert_allclose(d.x_train[:, ~const].std(0), 1, rtol=1e-9)
    assert np.all(d.x_train[:, const] == 0) and np.all(d.x_test[:, const] == 0)
    # the test set is scaled with the training statistics, not its own
    raw_test = mnist_raw["test_images"].reshape(10000, 784).astype(np.float64)
    np.testing.assert_allclose(d.x_test[:, ~const], (raw_test - mean)[:, ~const] / std[~const], rtol=1e-9, atol=1e-12)
    assert abs(d.x_test[:, ~const].mean()) > 1e-3  # so not standardised with its own statistics


def test_real_targets(mnist_raw, mnist_pixel):
    d = mnist_pixel
    np.testing.assert_array_equal(d.labels_train, mnist_raw["train_labels"])
    np.testing.assert_array_equal(d.labels_test, mnist_raw["test_labels"])
    for y, labels in ((d.y_train, d.labels_train), (d.y_test, d.labels_test)):
        assert y.shape == (len(labels), 10) and y.dtype == np.float64
        assert set(np.unique(y)) == {-1.0, 1.0}
        assert np.all(y.sum(1) == -8) and np.array_equal(y.argmax(1), labels)


def test_one_vs_all_values():
    y = ebp_data.one_vs_all(np.array([0, 3, 9]))
    expected = -np.ones((3, 10))
    expected[[0, 1, 2], [0, 3, 9]] = 1
    np.testing.assert_array_equal(y, expected)
    assert ebp_data.one_vs_all(np.array([1]), dtype=np.float32).dtype == np.float32


def test_real_global_unit_and_floor(real_data_dir, mnist_raw):
    n = 10000
    raw_train = mnist_raw["train_images"][:n].reshape(n, 784).astype(np.float64)
    raw_test = mnist_raw["test_images"].reshape(10000, 784).astype(np.float64)
    g = ebp_data.load_dataset("mnist", "global", n_train=n, data_dir=real_data_dir)
    assert abs(g.x_train.mean()) < 1e-9 and abs(g.x_train.std() - 1) < 1e-9
    np.testing.assert_allclose(g.x_test, (raw_test - raw_train.mean()) / raw_train.std(), rtol=1e-9)
    u = ebp_data.load_dataset("mnist", "unit", n_train=n, data_dir=real_data_dir, dtype=np.float32)
    assert u.x_train.dtype == np.float32 and u.x_train.min() == 0 and u.x_train.max() == 1
    np.testing.assert_allclose(u.x_test, raw_test / 255, rtol=1e-6)
    floor = 25.5
    f = ebp_data.load_dataset("mnist", "pixel", std_floor=floor, n_train=n, data_dir=real_data_dir)
    std = raw_train.std(0)
    big = std > floor
    np.testing.assert_allclose(f.x_train[:, big].std(0), 1, rtol=1e-9)
    np.testing.assert_allclose(f.x_train[:, ~big], (raw_train - raw_train.mean(0))[:, ~big] / floor, atol=1e-12)
    assert np.abs(f.x_train).max() <= 255 / floor
    plain = ebp_data.load_dataset("mnist", n_train=n, data_dir=real_data_dir)
    assert np.abs(plain.x_train).max() > 50  # without the floor, rare border pixels blow up


def test_real_n_train_subset(real_data_dir, mnist_raw, mnist_pixel):
    d = ebp_data.load_dataset("mnist", n_train=1000, data_dir=real_data_dir)
    assert d.x_train.shape == (1000, 784) and d.y_train.shape == (1000, 10) and d.x_test.shape == (10000, 784)
    np.testing.assert_array_equal(d.labels_train, mnist_raw["train_labels"][:1000])
    np.testing.assert_allclose(d.x_train.mean(0), 0, atol=1e-9)  # statistics of the kept images only
    assert not np.allclose(d.x_test, mnist_pixel.x_test)


FACTS = ("name", "n_train", "n_test", "image_side", "n_classes", "target_error", "works_well_percent", "mirrors", "md5")


def test_each_data_set_states_its_facts_once_and_the_code_reads_them():
    """Every entry of ebp_data.DATASETS has the facts the experiments and reports read, and those modules take
    them from there (a new data set is one entry)."""
    from reproduction import findings, parameters, results, successors, tuned
    assert all(set(FACTS) <= set(facts) for facts in ebp_data.DATASETS.values())
    assert parameters.DATASET_CHOICES == tuned.DATASETS == tuple(ebp_data.DATASETS)
    assert results.DATASET_NAMES == {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST"}
    assert successors.TARGET_ERROR == {"mnist": 0.03, "fashion-mnist": 0.15}
    assert findings.WORKS_WELL_BY_DATASET == {"mnist": 5.0, "fashion-mnist": 15.0}
    assert parameters.FULL_TRAIN == tuned.FULL_TRAIN == 60000 and parameters.INPUT_SIDE == 28


def test_a_fact_the_data_sets_do_not_share_must_be_asked_per_data_set(monkeypatch):
    monkeypatch.setitem(ebp_data.DATASETS, "wider", {**ebp_data.DATASETS["mnist"], "image_side": 32})
    with pytest.raises(ValueError, match="differ in image_side"):
        ebp_data.image_side()
    assert ebp_data.train_size() == 60000
