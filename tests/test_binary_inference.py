"""The deployed binary network (ebp_binary, its file format ebp_binary_format): packed format, loader checks,
XNOR-popcount inference.

The agreement tests train small binary nets briefly with the fast engine (1 epoch on the first 3,000 MNIST
training images) and require the packed predictions to equal output_ebp_d(net, x).argmax(1) on all 10,000 test
images, with the last layer's sums equal to output_ebp_d's exactly (they are p·(integer) + b in both), for every
engine: the packed kernels, float32 BLAS on the ±1 weights, the per-layer choice between them, and (on 1,000
images) the readable numpy.
"""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import ebp_binary as eb
import ebp_binary_format as ebf
import ebp_data
import ebp_lib as ebp
import ebp_train
from reproduction.parameters import paper_architecture

N_TRAIN = 3000
CASES = {  # name: (architecture, dropout)
    "[784,800,10]": ([800, 10], None),
    "[784,800,800,10]": ([800, 800, 10], None),
    "block13": (paper_architecture("block13"), None),
    "361-100 (two local layers)": (paper_architecture("361-100"), None),
    "[784,400,400,10] sampled dropout": ([400, 400, 10], "sampled"),
}


@pytest.fixture(scope="module")
def data(real_data_dir):
    return ebp_data.load_dataset("mnist", n_train=N_TRAIN, data_dir=real_data_dir)


def train(architecture, dropout, data, weights="binary"):
    net = ebp.init_network(architecture, weights, seed=0, dropout=dropout)
    ebp_train.train_epoch(net, data.x_train, data.y_train, 10, np.random.default_rng(0), engine="fast")
    return net


def numba_popcount_sums(layer: eb.PackedLayer, v_words: np.ndarray) -> np.ndarray:
    """popcount_sums by the compiled kernels (int64; a local layer's float32 sums are integers)."""
    sums = eb._hidden_sums(layer, np.ascontiguousarray(v_words), "packed")
    return sums if sums.dtype == np.int64 else np.rint(sums).astype(np.int64)


def numba_first_layer_sums(layer: eb.PackedLayer, x: np.ndarray) -> np.ndarray:
    """A first layer's sums by its packed kernel (float64 byte tables, or float32 patch sums), as float64."""
    return eb._first_layer_sums_compiled(layer, np.ascontiguousarray(x, dtype=np.float64),
                                         "packed")[0].astype(np.float64)


@pytest.fixture(scope="module")
def small_binary_net():
    """An untrained binary net with nonzero biases: enough for the format tests, which need no data."""
    net = ebp.init_network([30, 10], "binary", seed=0)
    for k, layer in enumerate(net.layers):
        layer.b[:] = np.random.default_rng(k).standard_normal(len(layer.b))
    return net


# ----------------------------------------------------------------------------------------------------------
# Agreement with output_ebp_d on the 10,000 test images
# ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CASES))
def test_packed_predictions_equal_ebp_d_on_all_test_images(name, data, tmp_path):
    architecture, dropout = CASES[name]
    net = train(architecture, dropout, data)
    path = tmp_path / "net.packed.npz"
    ebf.save_packed(path, eb.export_network(net))
    packed = ebf.load_packed(path)  # the deployed path: export, save, load
    assert packed.scale == (net.keep if dropout == "sampled" else 1.0)

    reference = ebp.output_ebp_d(net, data.x_test)
    for engine in ("numba", "blas", "auto"):
        counts = {}
        sums = eb.output_sums(packed, data.x_test, engine=engine, counts=counts)
        mismatches = int(np.sum(sums.argmax(axis=1) != reference.argmax(axis=1)))
        assert mismatches == 0, f"{name}, {engine}: {mismatches} test images predicted differently ({counts})"
        # every hidden unit agreed, so the output sums p·S + b are the same float64 numbers
        np.testing.assert_array_equal(sums, reference)
    # the readable numpy engine gives the same sums (first 1,000 images: it is slower), and one image at a time too
    np.testing.assert_array_equal(eb.output_sums(packed, data.x_test[:1000], engine="numpy"), reference[:1000])
    for engine in ("numba", "blas", "auto"):
        np.testing.assert_array_equal(np.concatenate([eb.output_sums(packed, data.x_test[i:i + 1], engine)
                                                      for i in range(20)]), reference[:20])


def test_a_local_layer_stores_its_patches_only_and_derives_its_mask():
    """361-100: both local layers keep block² = 100 bits per unit (2 words, not 13 or 6) and no mask plane; the
    weights they stand for, placed by the architecture, are EBP-D's sign(h) times the mask."""
    net = ebp.init_network(paper_architecture("361-100"), "binary", seed=0)
    packed = eb.export_network(net)
    assert [layer.local for layer in packed.layers] == [(28, 10), (19, 10), None]
    for layer, packed_layer in zip(net.layers, packed.layers):
        assert packed_layer.connected is None
        assert packed_layer.signs.shape == (len(layer.h), eb.n_words(packed_layer.n_positions))
        np.testing.assert_array_equal(eb.dense_weights(packed_layer),
                                      np.sign(layer.h) * (layer.mask if layer.mask is not None else 1))
        for unit in (0, 7, len(layer.h) - 1):
            np.testing.assert_array_equal(eb.dense_weights_row(packed_layer, unit), eb.dense_weights(packed_layer)[unit])


def test_block13_packed_is_at_least_30_times_smaller_than_float32():
    """The block-13 net: float32 ⟨W⟩ (the dense matrices the float path multiplies by) and float32 biases against the
    packed sign planes (169 bits per hidden unit) and float64 biases."""
    net = ebp.init_network(paper_architecture("block13"), "binary", seed=0)
    float32_bytes = sum(layer.h.size * 4 + layer.b.size * 4 for layer in net.layers)
    packed = eb.model_bytes(eb.export_network(net))
    assert packed == {"signs": 256 * 3 * 8 + 10 * 4 * 8, "masks": 0, "biases": 266 * 8, "total": 8592}
    assert float32_bytes / packed["total"] >= 30


def test_weights_exactly_zero_get_a_mask_plane_over_the_stored_positions(data):
    """h exactly 0 makes an EBP-D weight 0: a dense layer and a local layer then store a `connected` plane over their
    own positions (inputs, patch), and every engine still equals output_ebp_d."""
    net = train(paper_architecture("361-100"), None, data)
    net.layers[0].h[:, 28 * 5 + 5] = 0.0     # an input inside many patches of layer 1
    net.layers[2].h[:, :7] = 0.0             # the output layer (dense)
    packed = eb.export_network(net)
    assert [layer.connected is not None for layer in packed.layers] == [True, False, True]
    assert packed.layers[0].connected.shape == packed.layers[0].signs.shape == (361, 2)
    np.testing.assert_array_equal(eb.dense_weights(packed.layers[0]), np.sign(net.layers[0].h) * net.layers[0].mask)
    reference = ebp.output_ebp_d(net, data.x_test[:2000])
    for engine in eb.INFERENCE_ENGINES:
        np.testing.assert_array_equal(eb.output_sums(packed, data.x_test[:2000], engine), reference)


def test_a_version_1_file_with_full_width_mask_planes_is_still_read(data, tmp_path):
    """Format 1 stored every layer at full width with a mask plane for spatial ones: it loads as dense layers
    with mask planes and predicts the same."""
    net = train(paper_architecture("block13"), None, data)
    arrays, specs = {}, []
    for k, (w, b) in enumerate(ebp.ebp_d_parameters(net)):
        arrays[f"signs{k}"], arrays[f"b{k}"] = eb.pack_bits(w > 0), b
        if np.any(w == 0):
            arrays[f"connected{k}"] = eb.pack_bits(w != 0)
        specs.append({"n_inputs": w.shape[1], "n_units": w.shape[0], "connected": bool(np.any(w == 0))})
    header = {"format": ebf.FORMAT_NAME, "version": 1, "scale": 1.0, "source": {}, "layers": specs}
    np.savez(tmp_path / "v1.npz", header=np.array(json.dumps(header)), **arrays)
    packed = ebf.load_packed(tmp_path / "v1.npz")
    assert packed.layers[0].local is None and packed.layers[0].connected is not None and packed.plan is None
    reference = ebp.output_ebp_d(net, data.x_test[:2000])
    for engine in ("numba", "auto"):
        np.testing.assert_array_equal(eb.output_sums(packed, data.x_test[:2000], engine), reference)


# ----------------------------------------------------------------------------------------------------------
# Engine "auto": the stated rule, the measured calibration stored with the model
# ----------------------------------------------------------------------------------------------------------

def test_the_crossover_lies_between_the_last_packed_win_and_the_first_blas_win():
    sizes = (1, 32, 512, 1024)
    assert eb.crossover_batch(sizes, [False, False, False, False]) is None
    assert eb.crossover_batch(sizes, [True, True, True, True]) == 1
    assert eb.crossover_batch(sizes, [False, False, False, True]) == 725  # sqrt(512 * 1024) = 724.08, rounded up
    assert eb.crossover_batch(sizes, [False, True, False, True]) == 725  # only the run that reaches the largest
    assert eb.crossover_batch(sizes, [False, True, True, True]) == 6  # sqrt(32) = 5.66
    assert eb.crossover_batch(sizes, [True, True, True, False]) is None


def test_the_stated_rule_and_a_calibrated_plan_choose_per_layer_and_the_plan_is_saved(data, tmp_path):
    packed = eb.export_network(train([30, 30, 10], None, data))
    assert packed.plan is None
    assert eb.layer_methods(packed, 1) == ["packed"] * 3
    assert eb.layer_methods(packed, eb.DEFAULT_BLAS_FROM_BATCH) == ["blas", "packed", "packed"]
    block = eb.export_network(ebp.init_network(paper_architecture("block13"), "binary", seed=0))
    assert eb.layer_methods(block, 1000) == ["packed", "packed"]  # the rule: local layers stay packed

    plan = eb.calibrate(packed, data.x_test[:50], batch_sizes=(1, 4, 16), repeats=1)
    assert packed.plan["blas_from_batch"] == plan["blas_from_batch"] and len(plan["blas_from_batch"]) == 3
    assert set(plan["measured"][0]) == {"1", "4", "16"} and set(plan["measured"][0]["1"]) == {"packed", "blas"}
    # a plan never changes a result: force every mixture of methods
    reference = eb.output_sums(packed, data.x_test[:300], "numpy")
    for crossover in ([1, None, 1], [None, 1, None], [200, 1, 1]):
        packed.plan = {"blas_from_batch": crossover}
        np.testing.assert_array_equal(eb.output_sums(packed, data.x_test[:300], "auto"), reference)
    assert eb.layer_methods(packed, 300) == ["blas", "blas", "blas"] and eb.layer_methods(packed, 1)[0] == "packed"
    ebf.save_packed(tmp_path / "planned.npz", packed)
    assert ebf.load_packed(tmp_path / "planned.npz").plan == {"blas_from_batch": [200, 1, 1]}


# ----------------------------------------------------------------------------------------------------------
# The identities, exactly
# ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 63, 65, 100, 130, 777])
def test_xnor_popcount_equals_the_dot_product_of_pm1_vectors(k):
    rng = np.random.default_rng(k)
    w = rng.choice([-1, 1], size=(7, k))
    v = rng.choice([-1, 1], size=(5, k))
    w_words, v_words = eb.pack_bits(w > 0), eb.pack_bits(v > 0)
    assert w_words.shape == (7, -(-k // 64)) and w_words.dtype == np.uint64
    np.testing.assert_array_equal(eb.unpack_bits(w_words, k), w > 0)
    popcount = np.bitwise_count(w_words[None, :, :] ^ v_words[:, None, :]).sum(axis=-1).astype(np.int64)
    np.testing.assert_array_equal(k - 2 * popcount, v @ w.T)  # Σ W v = K − 2·popcount(w XOR v)
    # the same through a packed layer, with and without a mask plane, on both engines
    mask = rng.random((7, k)) < 0.6
    for connected in (None, mask):
        w_eff = w if connected is None else w * connected
        layer = eb.PackedLayer(eb.pack_bits(w_eff > 0), None if connected is None else eb.pack_bits(connected),
                               np.zeros(7), k)
        np.testing.assert_array_equal(eb.popcount_sums(layer, v_words), v @ w_eff.T)
        np.testing.assert_array_equal(numba_popcount_sums(layer, v_words), v @ w_eff.T)
        np.testing.assert_array_equal(eb._hidden_sums(layer, v_words, "blas"), v @ w_eff.T)


@pytest.mark.parametrize("k", [5, 70, 784])
def test_first_layer_sums_without_multiplications_match_the_dot_product(k):
    rng = np.random.default_rng(k)
    x = rng.standard_normal((9, k)) * 3
    w = rng.choice([-1.0, 1.0], size=(11, k))
    mask = rng.random((11, k)) < 0.5
    for connected in (None, mask):
        w_eff = w if connected is None else w * connected
        layer = eb.PackedLayer(eb.pack_bits(w_eff > 0), None if connected is None else eb.pack_bits(connected),
                               np.zeros(11), k)
        exact = x @ w_eff.T
        bound = 4 * k * np.finfo(float).eps * np.abs(x).sum(axis=1, keepdims=True)  # rounding, any order
        assert np.all(np.abs(eb.first_layer_sums(layer, x) - exact) <= bound)
        assert np.all(np.abs(numba_first_layer_sums(layer, x) - exact) <= bound)


@pytest.mark.parametrize("side, block", [(28, 13), (10, 3), (5, 5)])
def test_local_sums_match_the_dense_product_with_the_derived_mask(side, block):
    rng = np.random.default_rng(block)
    m = side - block + 1
    w = rng.choice([-1.0, 1.0], size=(m * m, side * side)) * ebp.local_mask(side, block)
    patches = np.take_along_axis(w, eb.patch_inputs(side, block), axis=1)
    layer = eb.PackedLayer(eb.pack_bits(patches > 0), None, np.zeros(m * m), side * side, (side, block))
    np.testing.assert_array_equal(eb.dense_weights(layer), w)
    x = rng.standard_normal((6, side * side)) * 3
    exact = x @ w.T
    magnitude = np.abs(x).sum(axis=1, keepdims=True)
    assert np.all(np.abs(eb.first_layer_sums(layer, x) - exact) <= 4 * side ** 2 * np.finfo(float).eps * magnitude)
    assert np.all(np.abs(numba_first_layer_sums(layer, x) - exact)  # float32
                  <= (side ** 2 + 1) * eb.UNIT_ROUNDOFF32 * magnitude)


def test_byte_tables_hold_every_subset_sum():
    x = np.random.default_rng(0).standard_normal((2, 11))
    table = eb.byte_tables(x)  # (2, 256, 2 groups): the second group has 3 inputs and 5 padding zeros
    for c in (0, 1, 5, 128, 255):
        bits = np.array([(c >> bit) & 1 for bit in range(8)], dtype=bool)
        padded = np.concatenate([x, np.zeros((2, 5))], axis=1)
        for j in range(2):
            np.testing.assert_allclose(table[:, c, j], padded[:, 8 * j:8 * j + 8][:, bits].sum(axis=1), atol=1e-14)


def test_a_near_tie_is_decided_by_the_exact_sum():
    """0.1 + 0.2 − 0.3 is 2^-55 exactly but 2^-54 in float64; with b = −1.5·2^-55 the exact pre-activation is
    −2^-56 < 0 while the float one is +2^-56 > 0. The guard must count the near-tie and return the exact sign."""
    x = np.array([[0.1, 0.2, -0.3, 0.0]])
    b = -1.5 * 2.0 ** -55
    layer = eb.PackedLayer(eb.pack_bits(np.array([[True, True, True, True]])), None, np.array([b]), 4)
    sums = eb.first_layer_sums(layer, x)
    assert sums[0, 0] + b > 0  # the float sign is wrong here ...
    assert eb.exact_pre_activation(layer, x[0], 0, 1.0) == Fraction(-1, 2 ** 56)  # ... the exact one is −
    plus, near_ties = eb.first_layer_signs(layer, x, sums, 1.0)
    assert near_ties == 1 and not plus[0, 0]
    for method in eb.LAYER_METHODS:  # the compiled engine's guard, after float64 (packed) or float32 (BLAS) sums
        words, near_ties = eb.compiled_first_layer_words(layer, x, 1.0, method)
        assert near_ties == 1 and words[0, 0] == 0
    layer.b[0] = -b  # now the float and the exact sign agree (+): still a near-tie, decided the same way
    for method in eb.LAYER_METHODS:
        words, near_ties = eb.compiled_first_layer_words(layer, x, 1.0, method)
        assert near_ties == 1 and words[0, 0] == 1


def test_inputs_beyond_float32s_range_are_decided_in_float64():
    """Pixels of 1e37 overflow a float32 sum of 784 of them (inf): every unit of such an image is recomputed in
    float64, and tiny inputs (below float32's normal range) are covered by the band's 2^-126: the float32 engines
    still give the numpy engine's exact numbers."""
    net = ebp.init_network([40, 10], "binary", seed=0)
    net.layers[0].b[:] = np.random.default_rng(1).standard_normal(40) * 1e-38
    packed = eb.export_network(net)
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal((2, 784)) * 1e37, rng.standard_normal((2, 784)) * 1e-39])
    reference = eb.output_sums(packed, x, "numpy")
    counts = {}
    np.testing.assert_array_equal(eb.output_sums(packed, x, "blas", counts), reference)
    assert counts["rechecked"] >= 2 * 40  # both huge images: every unit
    np.testing.assert_array_equal(eb.output_sums(packed, x, "numba"), reference)


def test_numba_and_numpy_engines_agree_on_a_trained_net(data):
    packed = eb.export_network(train([30, 10], None, data))
    x = data.x_test[:500]
    np.testing.assert_array_equal(eb.output_sums(packed, x, "numba"), eb.output_sums(packed, x, "numpy"))
    np.testing.assert_allclose(numba_first_layer_sums(packed.layers[0], x),
                               eb.first_layer_sums(packed.layers[0], x), rtol=0, atol=1e-9)


# ----------------------------------------------------------------------------------------------------------
# The file format: round trip, and every refusal names the file and the problem
# ----------------------------------------------------------------------------------------------------------

def rewrite(source, target, **changes):
    """Copy a packed .npz with some arrays replaced (a value of None removes the array)."""
    with np.load(source) as f:
        arrays = {name: f[name] for name in f.files}
    for name, value in changes.items():
        if value is None:
            arrays.pop(name)
        else:
            arrays[name] = value
    np.savez(target, **arrays)
    return target


@pytest.fixture
def packed_file(small_binary_net, tmp_path):
    path = tmp_path / "good.npz"
    ebf.save_packed(path, eb.export_network(small_binary_net))
    return path


def test_round_trip_keeps_every_array(small_binary_net, packed_file):
    packed, loaded = eb.export_network(small_binary_net), ebf.load_packed(packed_file)
    assert loaded.scale == packed.scale and loaded.source == packed.source and loaded.sizes == [784, 30, 10]
    for a, b in zip(packed.layers, loaded.layers):
        np.testing.assert_array_equal(a.signs, b.signs)
        np.testing.assert_array_equal(a.b, b.b)
        assert a.connected is None and b.connected is None and a.n_inputs == b.n_inputs


def header_with(path, **changes):
    with np.load(path) as f:
        header = json.loads(str(f["header"]))
    header.update(changes)
    return np.array(json.dumps(header))


def test_loader_refuses_another_version(packed_file, tmp_path):
    bad = rewrite(packed_file, tmp_path / "v3.npz", header=header_with(packed_file, version=3))
    with pytest.raises(ebf.PackedFormatError, match=r"v3\.npz: written in format version 3; this loader reads "
                                                    r"versions 1, 2"):
        ebf.load_packed(bad)


def test_loader_refuses_a_local_geometry_or_a_plan_that_does_not_fit(tmp_path):
    path = tmp_path / "block.npz"
    ebf.save_packed(path, eb.export_network(ebp.init_network(paper_architecture("block13"), "binary", seed=0)))
    with np.load(path) as f:
        layers = json.loads(str(f["header"]))["layers"]
    for local, message in [([28, 12], r"a block-12 layer on a 28x28 map has 289 units, not 256"),
                           ([27, 13], r"input side 27 does not square to its 784 inputs"),
                           ([28, "13"], r"local \[28, .13.\] must be \[input_side, block\], two integers")]:
        bad = rewrite(path, tmp_path / "local.npz", header=header_with(path, layers=[{**layers[0], "local": local},
                                                                                      layers[1]]))
        with pytest.raises(ebf.PackedFormatError, match=r"local\.npz: layer 1: " + message):
            ebf.load_packed(bad)
    for plan in ({"blas_from_batch": [8]}, {"blas_from_batch": [0, None]}, {"blas_from_batch": [True, None]}, [8]):
        bad = rewrite(path, tmp_path / "plan.npz", header=header_with(path, plan=plan))
        with pytest.raises(ebf.PackedFormatError, match=r"plan\.npz: the header's plan .* for each of the 2 layers"):
            ebf.load_packed(bad)


def _crafted(path, members: dict) -> Path:
    """A zip of stored .npy members, each given as (declared shape, dtype, the bytes actually stored): what np.savez
    writes, except that a member's header may declare far more than it holds."""
    import io
    import zipfile

    from numpy.lib import format as npy

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, (shape, dtype, data) in members.items():
            buffer = io.BytesIO()
            npy.write_array_header_1_0(buffer, {"descr": npy.dtype_to_descr(np.dtype(dtype)),
                                                "fortran_order": False, "shape": shape})
            z.writestr(f"{name}.npy", buffer.getvalue() + data)
    return path


def test_the_loader_reads_the_header_first_and_never_allocates_what_a_small_file_declares(packed_file, tmp_path):
    """A 2 MB file whose signs0 declares a (30, 2**22) uint64 array (1 GB), and one whose header itself declares
    layers of 10**8 units with arrays to match: both refused, naming the array, before any array's data is read;
    the loader never holds more than a few MB (reading every array first would take 2.2 GB for a 2.1 MB file)."""
    import tracemalloc

    with np.load(packed_file) as f:
        good = {name: f[name] for name in f.files}
    members = {name: (a.shape, a.dtype, a.tobytes()) for name, a in good.items() if name != "header"}
    header = str(good["header"])
    members["header"] = ((), f"<U{len(header)}", np.array(header).tobytes())
    members["signs0"] = ((30, 2 ** 22), np.uint64, b"\0" * 2 ** 21)
    big = _crafted(tmp_path / "big.npz", members)
    huge = json.loads(header)
    huge["layers"] = [{"n_inputs": 784, "n_units": 10 ** 8, "connected": False},
                      {"n_inputs": 10 ** 8, "n_units": 10, "connected": False}]
    text = json.dumps(huge)
    claims = _crafted(tmp_path / "claims.npz", {
        "header": ((), f"<U{len(text)}", np.array(text).tobytes()),
        "signs0": ((10 ** 8, 13), np.uint64, b"\0" * 1024), "b0": ((10 ** 8,), np.float64, b"\0" * 1024),
        "signs1": ((10, 1562500), np.uint64, b"\0" * 1024), "b1": ((10,), np.float64, b"\0" * 80)})
    for path, message in [(big, r"big\.npz: array 'signs0' declares 1006632960 bytes"),
                          (claims, r"claims\.npz: array 'signs0' declares 10400000000 bytes")]:
        tracemalloc.start()
        try:
            with pytest.raises(ebf.PackedFormatError, match=message):
                ebf.load_packed(path)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert path.stat().st_size < 3 * 2 ** 20 and peak < 20 * 2 ** 20, (path.stat().st_size, peak)
    # a declared shape the header does not imply is refused by name, also before reading
    members["signs0"] = ((30, 14), np.uint64, b"\0" * (30 * 14 * 8))
    with pytest.raises(ebf.PackedFormatError, match=r"array 'signs0' has shape \(30, 14\); the header implies "
                                                    r"\(30, 13\)"):
        ebf.load_packed(_crafted(tmp_path / "wide.npz", members))


def test_loader_refuses_a_wrong_shape(packed_file, tmp_path):
    with np.load(packed_file) as f:
        signs = f["signs1"]
    bad = rewrite(packed_file, tmp_path / "shape.npz", signs1=signs[:, :0])
    with pytest.raises(ebf.PackedFormatError, match=r"shape\.npz: array 'signs1' has shape \(10, 0\); the header "
                                                    r"implies \(10, 1\)"):
        ebf.load_packed(bad)
    bad = rewrite(packed_file, tmp_path / "sizes.npz",
                  header=header_with(packed_file, layers=[{"n_inputs": 784, "n_units": 30, "connected": False},
                                                          {"n_inputs": 31, "n_units": 10, "connected": False}]))
    with pytest.raises(ebf.PackedFormatError, match=r"sizes\.npz: layer 2 takes 31 inputs but layer 1 has 30 units"):
        ebf.load_packed(bad)


def test_loader_refuses_a_wrong_dtype(packed_file, tmp_path):
    with np.load(packed_file) as f:
        signs, b = f["signs0"], f["b0"]
    bad = rewrite(packed_file, tmp_path / "dtype.npz", signs0=signs.astype(np.int64))
    with pytest.raises(ebf.PackedFormatError, match=r"dtype\.npz: array 'signs0' has dtype int64; the format "
                                                    r"stores uint64"):
        ebf.load_packed(bad)
    bad = rewrite(packed_file, tmp_path / "bias.npz", b0=b.astype(np.float32))
    with pytest.raises(ebf.PackedFormatError, match=r"bias\.npz: array 'b0' has dtype float32"):
        ebf.load_packed(bad)


def test_loader_refuses_bits_in_the_padding_and_missing_arrays(packed_file, tmp_path):
    with np.load(packed_file) as f:
        signs = f["signs1"].copy()
    signs[0, 0] |= np.uint64(1) << np.uint64(40)  # K = 30: bit 40 is padding
    with pytest.raises(ebf.PackedFormatError, match=r"padding\.npz: layer 2 has bits set in the padding"):
        ebf.load_packed(rewrite(packed_file, tmp_path / "padding.npz", signs1=signs))
    with pytest.raises(ebf.PackedFormatError, match=r"missing\.npz: array 'b1' is missing"):
        ebf.load_packed(rewrite(packed_file, tmp_path / "missing.npz", b1=None))


def test_real_weight_networks_are_refused(tmp_path):
    real = ebp.init_network([30, 10], "real", seed=0)
    with pytest.raises(ValueError, match="cannot pack a 'real'-weight network"):
        eb.export_network(real)
    checkpoint = tmp_path / "real.npz"
    ebp.save_network(checkpoint, real)
    with pytest.raises(ebf.PackedFormatError, match=r"real\.npz: is an ebp_lib network checkpoint \(real weights.*"
                                                    r"A real-weight network cannot be packed"):
        ebf.load_packed(checkpoint)


def test_loader_refuses_a_truncated_file(packed_file, tmp_path):
    content = packed_file.read_bytes()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(content[:len(content) // 2])
    with pytest.raises(ebf.PackedFormatError, match=r"truncated\.npz: cannot be read as an \.npz archive.*truncated"):
        ebf.load_packed(truncated)


def test_inputs_of_the_wrong_width_are_refused(small_binary_net):
    with pytest.raises(ValueError, match=r"inputs have shape \(2, 783\); this network needs \(n, 784\)"):
        eb.predict(eb.export_network(small_binary_net), np.zeros((2, 783)))


def test_an_unknown_engine_is_refused(small_binary_net):
    with pytest.raises(ValueError, match=r"unknown engine 'gpu'; choose one of \('numpy', 'numba', 'blas', 'auto'\)"):
        eb.output_sums(eb.export_network(small_binary_net), np.zeros((1, 784)), engine="gpu")


def test_exact_pre_activation_with_a_mask_and_a_scale():
    rng = np.random.default_rng(3)
    x, w, mask = rng.standard_normal(70), rng.choice([-1.0, 1.0], size=70), rng.random(70) < 0.5
    layer = eb.PackedLayer(eb.pack_bits([(w * mask) > 0]), eb.pack_bits([mask]), np.array([0.25]), 70)
    exact = sum(Fraction(float(xi)) * int(wi) for xi, wi in zip(x, w * mask))
    assert eb.exact_pre_activation(layer, x, 0, 0.8) == Fraction(0.8) * exact + Fraction(0.25)
