"""Tests of the readable EBP in ebp_lib, against the references of ebp_checks. Each one fails if the maths
it checks is broken."""
import json
from pathlib import Path

import numpy as np
import pytest

import ebp_checkpoint
import ebp_checks as checks
import ebp_data
import ebp_lib as ebp
import ebp_train
from reproduction.parameters import paper_architecture

WEIGHTS = ["binary", "real"]


def small_net(weights, architecture=(6, 5, 3), side=3, seed=3, **kwargs):
    # init_scale 3: posteriors far from uniform, so that every term of the moments matters
    return ebp.init_network(list(architecture), weights, seed=seed, input_side=side, init_scale=3.0, **kwargs)


def batch(net, n=3, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, net.sizes[0]))
    y = ebp_data.one_vs_all(rng.integers(0, net.sizes[-1], n), net.sizes[-1])
    return x, y


# --- forward pass: the Gaussian moments against Monte Carlo over posterior samples ----------------------

@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("layer", [0, 1])
def test_forward_moments_match_monte_carlo(weights, layer):
    net = small_net(weights)
    x, _ = batch(net, n=1)
    fwd = ebp.forward(net, x)
    nu_prev = x[0] if layer == 0 else fwd.nu[0][0]
    n = 200_000
    mean, var, _ = checks.monte_carlo_layer(net.layers[layer], weights, nu_prev, np.random.default_rng(7), n,
                                            deterministic_input=(layer == 0))
    mu, sigma2 = fwd.mu[layer][0], fwd.sigma2[layer][0]
    # 5 standard errors; the variance of a sample variance is at most ~3 var² / n for these near-Gaussian u
    np.testing.assert_array_less(np.abs(mean - mu), 5 * np.sqrt(sigma2 / n))
    np.testing.assert_array_less(np.abs(var - sigma2), 5 * np.sqrt(3 / n) * sigma2)


@pytest.mark.parametrize("weights", WEIGHTS)
def test_unit_mean_matches_sign_average_for_large_fan_in(weights):
    net = ebp.init_network([4, 2], weights, seed=0, input_side=16, init_scale=3.0)  # fan-in 256
    x = np.random.default_rng(2).standard_normal(256)
    fwd = ebp.forward(net, x[None])
    _, _, mean_sign = checks.monte_carlo_layer(net.layers[0], weights, x, np.random.default_rng(3), 20_000)
    # CLT error O(1/sqrt(K)) plus Monte Carlo error ~ 1/sqrt(20000)
    np.testing.assert_allclose(fwd.nu[0][0], mean_sign, atol=0.03)


# --- backward pass: Δ and the h increments are derivatives of Σ ln Φ(y μ_L/σ_L), σ fixed ------------------

def delta_errors(net, x, y, deltas_fn):
    fwd = ebp.forward(net, x)
    return [np.abs(numeric - analytic).max()
            for numeric, analytic in zip(checks.numerical_deltas(net, fwd, y, eps=1e-6), deltas_fn(net, fwd, y))]


def increment_errors(net, x, y, increments_fn):
    fwd = ebp.forward(net, x)
    incs = increments_fn(net, fwd, ebp.backward(net, fwd, y))
    return [np.abs(numeric - analytic).max()
            for numeric, analytic in zip(checks.numerical_increments(net, fwd, y, eps=1e-6), incs)]


@pytest.mark.parametrize("weights", WEIGHTS)
def test_delta_is_the_derivative_at_every_layer(weights):
    net = small_net(weights)
    errors = delta_errors(net, *batch(net), ebp.backward)
    assert max(errors) < 1e-7, errors


@pytest.mark.parametrize("weights", WEIGHTS)
def test_h_increment_is_the_derivative_with_respect_to_mean_weight(weights):
    net = small_net(weights)
    errors = increment_errors(net, *batch(net), ebp.increments)
    assert max(errors) < 1e-7, errors


def paper_printed_deltas(net, fwd, y) -> list[np.ndarray]:
    """Δ of the printed backward pass (no factor 2 in the hidden Δ, sqrt(K) in place of sqrt(K+1)) on a forward pass
    `fwd` that divides by sqrt(K+1): the printed misprints plus a mismatch of the passes (the printed algorithm on
    its own sqrt(K) forward pass is ebp_checks.algorithm1_step(net, x, y, **MISPRINTS["as printed"]))."""
    return checks.algorithm1_variant(net, fwd, y, factor_two=False, use_nu=False, bias_in_normaliser=False)[0]


def paper_printed_increments(net, fwd, deltas) -> list[np.ndarray]:
    """h increments as Algorithm 1 prints them (μ_{j,l−1} in place of ν_{j,l−1}, the image x at the first layer, and
    sqrt(K) in place of sqrt(K+1)), on a sqrt(K+1) forward pass `fwd`, as paper_printed_deltas."""
    out = []
    for k, (layer, delta) in enumerate(zip(net.layers, deltas)):
        prev = fwd.inputs[0] if k == 0 else fwd.mu[k - 1]
        out.append((delta / np.sqrt(layer.normaliser - 1)).T @ prev)
    return out


@pytest.mark.parametrize("weights", WEIGHTS)
def test_paper_printed_algorithm_fails_the_delta_check(weights):
    """No factor 2 and sqrt(K) for sqrt(K+1) in the hidden Δ: wrong at every hidden layer."""
    net = small_net(weights)
    errors = delta_errors(net, *batch(net), paper_printed_deltas)
    assert min(errors[:-1]) > 1e-2, errors
    assert errors[-1] < 1e-7  # the output Δ is printed correctly


@pytest.mark.parametrize("weights", WEIGHTS)
def test_paper_printed_algorithm_fails_the_increment_check(weights):
    """μ in place of ν and sqrt(K) in place of sqrt(K+1): every layer's increment is off."""
    net = small_net(weights)
    errors = increment_errors(net, *batch(net), paper_printed_increments)
    assert min(errors) > 1e-3, errors


def test_each_misprint_alone_is_detected():
    net = small_net("binary", architecture=(40, 30, 3), side=5)  # K = 25, 40, 30
    x, y = batch(net)
    fwd = ebp.forward(net, x)
    good = ebp.backward(net, fwd, y)
    # sqrt(K) instead of sqrt(K+1) in the hidden Δ, factor 2 kept: still wrong by sqrt((K+1)/K) - 1
    half = paper_printed_deltas(net, fwd, y)
    np.testing.assert_allclose(2 * half[1] * np.sqrt(30 / 31), good[1], rtol=1e-12)
    assert np.abs(2 * half[1] - good[1]).max() > 1e-3 * np.abs(good[1]).max()


# --- numerical safety -------------------------------------------------------------------------------------

@pytest.mark.parametrize("z", [40.0, 100.0, 1e4, 1e8])
def test_output_delta_stable_at_extreme_margins(z):
    sigma2 = np.full(4, 0.7)
    mu = np.array([z, z, -z, -z]) * np.sqrt(sigma2)
    y = np.array([1.0, -1.0, 1.0, -1.0])
    delta = ebp.output_delta(y, mu, sigma2)
    assert np.all(np.isfinite(delta))
    assert np.all(y * delta >= 0)  # pushes μ towards the label (0 only where already right by ≳ 38σ)
    wrong = np.array([False, True, True, False])  # label and mean disagree: Δ ≈ y |μ|/σ²
    np.testing.assert_allclose(np.abs(delta[wrong]), z / np.sqrt(sigma2[wrong]), rtol=2 / z ** 2 + 1e-12)
    assert np.all(np.sign(delta[wrong]) == y[wrong])


def test_non_finite_posterior_stops_training_naming_layer_and_step():
    net = small_net("binary")
    x, y = batch(net, n=20)
    net.layers[1].h[0, 0] = np.nan  # e.g. a corrupted checkpoint
    before = [layer.h.copy() for layer in net.layers]
    with pytest.raises(FloatingPointError, match=r"layer \d+ at step 0 of epoch 1"):
        ebp_train.train_epoch(net, x, y, 5, np.random.default_rng(0))
    for layer, old in zip(net.layers, before):  # nothing was updated with the bad Δ
        np.testing.assert_array_equal(layer.h, old)


# --- spatial filtering ------------------------------------------------------------------------------------

@pytest.mark.parametrize("block", [10, 13, 17])
def test_local_mask_fan_in_and_size(block):
    mask = ebp.local_mask(28, block)
    assert mask.shape == ((29 - block) ** 2, 784)
    assert np.all(mask.sum(axis=1) == block ** 2)
    net = ebp.init_network([("local", block), 10], seed=0)
    np.testing.assert_array_equal(net.layers[0].normaliser, block ** 2 + 1)


def test_paper_spatial_architectures():
    assert [ebp.init_network(paper_architecture(f"block{s}")).sizes[1] for s in range(17, 11, -1)] == \
        [144, 169, 196, 225, 256, 289]
    assert ebp.init_network(paper_architecture("361-100")).sizes == [784, 361, 100, 10]


@pytest.mark.parametrize("weights", WEIGHTS)
def test_training_never_changes_a_masked_weight(weights):
    net = ebp.init_network([("local", 3), ("local", 2), 4], weights, seed=0, input_side=6)
    x, y = batch(net, n=50)
    ebp_train.train_epoch(net, x, y, 5, np.random.default_rng(0))
    for layer in net.layers[:2]:
        assert np.all(layer.h[~layer.mask] == 0)
        assert np.all(layer.h[layer.mask] != 0)


# --- determinism, persistence, checkpoint and resume --------------------------------------------------------

def tiny_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    x = rng.standard_normal((n, 9)) + labels[:, None]
    return ebp_data.Dataset("tiny", "none", x, ebp_data.one_vs_all(labels, 3), labels, x[:20], ebp_data.one_vs_all(labels[:20], 3),
                       labels[:20])


def tiny_net(**kwargs):
    return ebp.init_network([8, 8, 3], "binary", seed=1, input_side=3, **kwargs)


@pytest.mark.parametrize("dropout", [None, "sampled"])
def test_resume_is_bit_identical(tmp_path, dropout):
    data = tiny_data()
    straight, history = ebp_train.fit(tiny_net(dropout=dropout), data, 3, batch_size=4, seed=5)
    ckpt = tmp_path / "run.npz"
    ebp_train.fit(tiny_net(dropout=dropout), data, 1, batch_size=4, seed=5, checkpoint=ckpt)  # "interrupted"
    resumed, history2 = ebp_train.fit(tiny_net(dropout=dropout), data, 3, batch_size=4, seed=5, checkpoint=ckpt)
    for a, b in zip(straight.layers, resumed.layers):
        np.testing.assert_array_equal(a.h, b.h)
        np.testing.assert_array_equal(a.b, b.b)
    drop = lambda hist: [{k: v for k, v in r.items() if k != "train_seconds"} for r in hist]  # noqa: E731
    assert drop(history) == drop(history2)


def rewrite_meta(path, change) -> None:
    """Rewrite the metadata of the checkpoint `path` as change(meta) returns it, keeping its arrays."""
    with np.load(path) as f:
        arrays = {name: f[name] for name in f.files if name != "meta"}
        meta = json.loads(str(f["meta"]))
    ebp_checkpoint.write_checkpoint(path, arrays, change(meta))


def test_a_checkpoint_of_format_1_is_upgraded_and_resumed(tmp_path):
    """A checkpoint of format 1 (no format; the configuration without mask_reading and real_update at their
    defaults) reads as the current format with them filled in, in `config` and in `run.network`, and a run resumes
    from it bit-identically; a newer format is refused, naming the file, and left alone."""
    data, ckpt = tiny_data(), tmp_path / "run.npz"
    straight, _ = ebp_train.fit(tiny_net(), data, 2, batch_size=4, seed=5)
    ebp_train.fit(tiny_net(), data, 1, batch_size=4, seed=5, checkpoint=ckpt)
    defaults = ebp_checkpoint.FORMAT_1_DEFAULTS

    def format_1(meta):
        meta.pop("format")
        meta["config"] = {k: v for k, v in meta["config"].items() if k not in defaults}
        meta["run"]["network"] = {k: v for k, v in meta["run"]["network"].items() if k not in defaults}
        return meta
    rewrite_meta(ckpt, format_1)
    meta = ebp_checkpoint.read_network_meta(ckpt)
    assert meta["format"] == ebp_checkpoint.NETWORK_FORMAT == 2
    assert meta["config"]["mask_reading"] == meta["run"]["network"]["mask_reading"] == "absent"
    assert meta["config"]["real_update"] == meta["run"]["network"]["real_update"] == "spec"
    resumed, history = ebp_train.fit(tiny_net(), data, 2, batch_size=4, seed=5, checkpoint=ckpt)
    assert len(history) == 2
    for a, b in zip(straight.layers, resumed.layers):
        np.testing.assert_array_equal(a.h, b.h)

    rewrite_meta(ckpt, lambda meta: {**meta, "format": 3})
    before = ckpt.read_bytes()
    for call in (lambda: ebp_checkpoint.read_network_meta(ckpt), lambda: ebp.load_network(ckpt),
                 lambda: ebp_train.fit(tiny_net(), data, 3, batch_size=4, seed=5, checkpoint=ckpt)):
        with pytest.raises(ebp_checkpoint.CheckpointError, match=f"{ckpt}: this network was saved by a newer version"):
            call()
    assert ckpt.read_bytes() == before


def test_same_seed_same_result_and_different_seed_differs():
    data = tiny_data()
    a, _ = ebp_train.fit(tiny_net(), data, 1, seed=0)
    b, _ = ebp_train.fit(tiny_net(), data, 1, seed=0)
    c, _ = ebp_train.fit(tiny_net(), data, 1, seed=1)
    np.testing.assert_array_equal(a.layers[0].h, b.layers[0].h)
    assert not np.array_equal(a.layers[0].h, c.layers[0].h)


def test_checkpoint_of_another_configuration_is_refused(tmp_path):
    data = tiny_data()
    ckpt = tmp_path / "run.npz"
    ebp_train.fit(tiny_net(), data, 1, checkpoint=ckpt)
    with pytest.raises(ebp_checkpoint.CheckpointMismatchError, match="another run"):
        ebp_train.fit(ebp.init_network([8, 8, 3], "real", seed=1, input_side=3), data, 2, checkpoint=ckpt)


def test_checkpoint_of_other_data_settings_is_refused_naming_both(tmp_path):
    """Resuming must not mix two runs that differ only in their data (MNIST epochs, then Fashion-MNIST)."""
    data, ckpt = tiny_data(), tmp_path / "ckpt.npz"
    ebp_train.fit(tiny_net(), data, 1, checkpoint=ckpt, run_config={"dataset": "mnist", "n_train": 500})
    with pytest.raises(ebp_checkpoint.CheckpointMismatchError) as err:
        ebp_train.fit(tiny_net(), data, 2, checkpoint=ckpt, run_config={"dataset": "fashion-mnist", "n_train": 500})
    assert "dataset: checkpoint 'mnist', this run 'fashion-mnist'" in str(err.value)
    with pytest.raises(ebp_checkpoint.CheckpointMismatchError, match="engine"):
        ebp_train.fit(tiny_net(), data, 2, checkpoint=ckpt, run_config={"dataset": "mnist", "n_train": 500},
                engine="reference")
    net, history = ebp_train.fit(tiny_net(), data, 2, checkpoint=ckpt, run_config={"dataset": "mnist", "n_train": 500})
    assert len(history) == 2


@pytest.mark.parametrize("damage", ["empty", "truncated", "flipped", "not npz"])
def test_unreadable_checkpoint_is_named(tmp_path, damage):
    data, ckpt = tiny_data(), tmp_path / "ckpt.npz"
    ebp_train.fit(tiny_net(), data, 1, checkpoint=ckpt)
    raw = ckpt.read_bytes()
    ckpt.write_bytes({"empty": b"", "truncated": raw[:len(raw) // 2], "not npz": b"hello",
                      "flipped": raw[:200] + bytes([raw[200] ^ 0xFF]) + raw[201:]}[damage])
    for call in (lambda: ebp_train.fit(tiny_net(), data, 2, checkpoint=ckpt), lambda: ebp_checkpoint.read_network_meta(ckpt)):
        with pytest.raises(ebp_checkpoint.CheckpointError, match=f"cannot read {ckpt}.*[Mm]ove it aside"):
            call()


def test_a_checkpoint_whose_arrays_do_not_fit_its_architecture_is_refused(tmp_path):
    """A valid checkpoint of [784, 200, 10] whose h0 is replaced by one of shape (1, 784) (numpy would broadcast it
    into 200 identical units and train on): it is refused before the network is built, naming the
    array, its shape and the one the recorded architecture needs, and fit does not resume from it. So are an
    extra array, a non-finite value and a weight outside a spatial unit's block."""
    rng, ckpt = np.random.default_rng(0), tmp_path / "ckpt.npz"
    labels = rng.integers(0, 10, 40)
    x = rng.standard_normal((40, 784))
    data = ebp_data.Dataset("tiny", "none", x, ebp_data.one_vs_all(labels, 10), labels, x[:20],
                            ebp_data.one_vs_all(labels[:20], 10), labels[:20])
    ebp_train.fit(ebp.init_network([200, 10], "binary", seed=0), data, 1, checkpoint=ckpt)
    with np.load(ckpt) as f:
        arrays = {name: f[name] for name in f.files}

    def variant(name, **changes):
        path = tmp_path / f"{name}.npz"
        np.savez(path, **{**arrays, **changes})
        return path

    narrow = variant("narrow", h0=arrays["h0"][:1])
    with pytest.raises(ebp_checkpoint.CheckpointError, match=r"narrow\.npz: array 'h0' is float\d+\[1, 784\]; the "
                                                         r"recorded architecture \[200, 10\] .* shape \[200, 784\]"):
        ebp.load_network(narrow)
    with pytest.raises(ebp_checkpoint.CheckpointError, match="array 'h0'"):
        ebp_train.fit(ebp.init_network([200, 10], "binary", seed=0), data, 2, checkpoint=narrow)
    with pytest.raises(ebp_checkpoint.CheckpointError, match=r"arrays \['h2'\] are not part of"):
        ebp.load_network(variant("extra", h2=arrays["h1"]))
    with pytest.raises(ebp_checkpoint.CheckpointError, match="array 'b1' is missing"):
        ebp.load_network(_without(tmp_path, arrays, "b1"))
    bad = arrays["h1"].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ebp_checkpoint.CheckpointError, match="layer 2 holds non-finite values"):
        ebp.load_network(variant("nan", h1=bad))
    spatial = tmp_path / "spatial.npz"
    ebp.save_network(spatial, ebp.init_network([("local", 13), 10], "binary", seed=0))
    with np.load(spatial) as f:
        local = {name: f[name] for name in f.files}
    local["h0"] = local["h0"].copy()
    local["h0"][0, -1] = 0.5  # unit 0 sees the top-left 13x13 patch only
    np.savez(spatial, **local)
    with pytest.raises(ebp_checkpoint.CheckpointError, match="layer 1 has weights outside its units' blocks"):
        ebp.load_network(spatial)


def _without(tmp_path, arrays, name):
    path = tmp_path / f"without-{name}.npz"
    np.savez(path, **{k: v for k, v in arrays.items() if k != name})
    return path


def test_failed_save_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    """A full disk while saving: the previous checkpoint stays intact, the partial temporary is removed, and
    the error names the path and the errno."""
    import errno

    path = tmp_path / "m.npz"
    ebp.save_network(path, tiny_net(), note="old")
    before = path.read_bytes()

    def full_disk(file, **arrays):
        Path(file).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ebp.np, "savez", full_disk)
    with pytest.raises(OSError, match=f"could not write {path}") as err:
        ebp.save_network(path, tiny_net(), note="new")
    assert err.value.errno == errno.ENOSPC
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]


def test_float32_values_are_saved_as_float32_and_load_back_exactly(tmp_path):
    net = tiny_net()
    for layer in net.layers:
        layer.h[...] = layer.h.astype(np.float32)
    ebp.save_network(tmp_path / "m.npz", net)
    with np.load(tmp_path / "m.npz") as f:
        assert f["h0"].dtype == np.float32
    loaded, _ = ebp.load_network(tmp_path / "m.npz")
    assert loaded.layers[0].h.dtype == np.float64
    np.testing.assert_array_equal(loaded.layers[0].h, net.layers[0].h)


@pytest.mark.parametrize("weights", WEIGHTS)
def test_save_and_load_round_trip(tmp_path, weights):
    net = ebp.init_network([("local", 2), 5, 3], weights, seed=2, input_side=3, dropout="analytic", keep=0.7)
    net.layers[0].b += 0.3
    ebp.save_network(tmp_path / "m.npz", net, note="x")
    loaded, meta = ebp.load_network(tmp_path / "m.npz")
    x = np.random.default_rng(0).standard_normal((4, 9))
    assert meta == {"note": "x"}
    assert (loaded.weights, loaded.dropout, loaded.keep) == (weights, "analytic", 0.7)
    np.testing.assert_array_equal(ebp.output_ebp_p(net, x), ebp.output_ebp_p(loaded, x))
    np.testing.assert_array_equal(ebp.output_ebp_d(net, x), ebp.output_ebp_d(loaded, x))


# --- invalid arguments fail before any work ---------------------------------------------------------------

def test_sampled_dropout_step_without_rng_is_refused():
    net = small_net("binary", dropout="sampled")
    x, y = batch(net)
    for engine in ebp_train.ENGINES:
        with pytest.raises(ValueError, match="pass rng="):
            ebp_train.train_step(net, x, y, engine=engine)


@pytest.mark.parametrize("kwargs, message", [
    (dict(architecture=[10], weights="ternary"), "weight type"),
    (dict(architecture=[]), "empty"),
    (dict(architecture=[0, 10]), "positive layer size"),
    (dict(architecture=[-5, 10]), "positive layer size"),
    (dict(architecture=[("local", 29), 10]), "block size"),
    (dict(architecture=[10, ("local", 3)]), "must follow the image"),
    (dict(architecture=[10], keep=0.0), r"\(0, 1\]"),
    (dict(architecture=[10], keep=1.5), r"\(0, 1\]"),
    (dict(architecture=[10], dropout="gaussian"), "dropout"),
    (dict(architecture=[10], init_scale=0.0), "init_scale=0.0 must be positive"),
    (dict(architecture=[("local", 13), 10], mask_reading="partly"), "unknown mask reading 'partly'"),
    (dict(architecture=[10], real_update="newest"), "unknown update 'newest'"),
    (dict(architecture=[10], real_update="authors"), "the update 'authors' is the authors' code for real weights"),
])
def test_invalid_network_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ebp.init_network(**kwargs)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True])
def test_invalid_batch_size(batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        ebp_train.fit(tiny_net(), tiny_data(), 1, batch_size=batch_size)


def test_wrong_data_shape_fails_before_training():
    net = tiny_net()
    before = net.layers[0].h.copy()
    data = tiny_data()
    with pytest.raises(ValueError, match="inputs have shape"):
        ebp_train.train_epoch(net, data.x_train[:, :8], data.y_train, 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="targets have shape"):
        ebp_train.train_epoch(net, data.x_train, data.y_train[:, :2], 4, np.random.default_rng(0))
    np.testing.assert_array_equal(net.layers[0].h, before)


# --- outputs -------------------------------------------------------------------------------------------------

def test_ebp_d_uses_sign_of_h_for_binary_and_h_for_real():
    for weights in WEIGHTS:
        net = small_net(weights, architecture=(4, 3))
        x, _ = batch(net, n=5)
        w0 = np.sign(net.layers[0].h) if weights == "binary" else net.layers[0].h
        w1 = np.sign(net.layers[1].h) if weights == "binary" else net.layers[1].h
        hidden = np.where(x @ w0.T + net.layers[0].b >= 0, 1.0, -1.0)
        np.testing.assert_allclose(ebp.output_ebp_d(net, x), hidden @ w1.T + net.layers[1].b)


# --- learning on real MNIST ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mnist(real_data_dir):
    return ebp_data.load_dataset("mnist", data_dir=real_data_dir)


def test_one_epoch_on_mnist_learns(mnist):
    """[784, 200, 10], default settings, one epoch: bounds from a plain implementation of docs/maths.md (6.6% / 10.2%)."""
    binary, _ = ebp_train.fit(ebp.init_network([200, 10], "binary", seed=0), mnist, 1, n_train_eval=0)
    real, _ = ebp_train.fit(ebp.init_network([200, 10], "real", seed=0), mnist, 1, n_train_eval=0)
    b = ebp_train.evaluate(binary, mnist.x_test, mnist.labels_test)
    r = ebp_train.evaluate(real, mnist.x_test, mnist.labels_test)
    assert b["ebp_p"] < 0.08 and b["ebp_d"] < 0.12, b
    assert r["ebp_p"] <= b["ebp_p"], (r, b)


def test_delta_is_the_derivative_under_sampled_dropout():
    net = small_net("binary", dropout="sampled", keep=0.7)
    x, y = batch(net, n=4)
    fwd = ebp.forward(net, x, train=True, rng=np.random.default_rng(0))
    assert any(mask is not None and not mask.all() for mask in fwd.masks[1:])  # some hidden unit dropped
    errors = [np.abs(numeric - analytic).max()
              for numeric, analytic in zip(checks.numerical_deltas(net, fwd, y, eps=1e-6), ebp.backward(net, fwd, y))]
    assert max(errors) < 1e-7, errors


# --- the module layout: one engine default, numba only where the fast engine runs ----------------------------

def test_every_engine_argument_defaults_to_the_same_engine():
    import inspect

    import ebp_analysis

    functions = [ebp_train.train_step, ebp_train.train_epoch, ebp_train.train_steps, ebp_train.fit, ebp_train.evaluate,
                 ebp_analysis.learning_curve]
    assert {inspect.signature(f).parameters["engine"].default for f in functions} == {ebp_train.DEFAULT_ENGINE}
    assert ebp_train.DEFAULT_ENGINE in ebp_train.ENGINES


def test_importing_the_readable_modules_does_not_import_numba():
    """The notebooks that never train (00-03) import ebp_lib and ebp_checks without paying for numba."""
    import subprocess
    import sys

    code = "import sys, ebp_data, ebp_checkpoint, ebp_lib, ebp_checks, ebp_analysis; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False"


ENGINE_MODULES = ("ebp_data", "ebp_checkpoint", "ebp_lib", "ebp_fast", "ebp_checks", "ebp_analysis", "ebp_binary",
                  "ebp_binary_kernels", "ebp_binary_format")


def test_the_engine_modules_import_one_another_without_a_cycle():
    """Every import among the library's modules, those inside functions included (ebp_lib imports ebp_fast when the
    fast engine is first used), goes one way: the kernel files and the data and checkpoint modules import none of
    the others, and nothing imports back."""
    import ast
    import graphlib

    root = Path(__file__).resolve().parents[1]
    graph = {}
    for name in ENGINE_MODULES:
        imported = set()
        for node in ast.walk(ast.parse((root / f"{name}.py").read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module)
        graph[name] = imported & set(ENGINE_MODULES)
    assert graph["ebp_fast"] == graph["ebp_binary_kernels"] == graph["ebp_data"] == graph["ebp_checkpoint"] == set()
    order = list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError naming a cycle
    assert order.index("ebp_fast") < order.index("ebp_lib") < order.index("ebp_binary") < order.index("ebp_binary_format")


def test_the_maths_tables_name_code_that_exists():
    """docs/maths.md's section → function table and the notation card of notebooks/README.md name functions (and
    the fields that keep their results) that exist: a name is ebp_lib's unless it names its module."""
    import dataclasses
    import importlib
    import importlib.util
    import re

    root = Path(__file__).resolve().parents[1]
    names = []
    for path, column in (("docs/maths.md", 2), ("notebooks/README.md", 3)):
        for line in (root / path).read_text().splitlines():
            cells = line.split("|")
            if len(cells) > column + 1 and "`" in cells[column]:
                names += [n for n in re.findall(r"`([A-Za-z_][\w.]*)`", cells[column]) if not n.endswith(".py")]
    assert len(names) > 20
    fields_in_prose = {"dropout", "x_train", "y_train"}  # "its `dropout` branches", "its `x_train`, `y_train`"
    for name in set(names) - fields_in_prose:
        module, _, attribute = name.partition(".")
        if not module.startswith("ebp_") or not attribute:  # ebp_lib's own names are written without "ebp_lib."
            module, attribute = "ebp_lib", name
        if module == "ebp_jax" and importlib.util.find_spec("jax") is None:  # the JAX engine is optional
            continue
        owner, _, field_name = attribute.partition(".")
        found = getattr(importlib.import_module(module), owner, None)
        assert found is not None, name
        if field_name:
            assert field_name in {f.name for f in dataclasses.fields(found)}, name


def test_every_engine_resolves_to_its_three_operations():
    """ENGINES is the one place an engine name is resolved; an unknown name is refused there."""
    for name in ebp_train.ENGINES:
        engine = ebp_train.resolve_engine(name)
        assert callable(engine.step) and callable(engine.steps) and callable(engine.outputs)
    for bad in ("gpu", None, ["fast"]):
        with pytest.raises(ValueError, match="unknown engine"):
            ebp_train.resolve_engine(bad)


@pytest.mark.parametrize("weights", WEIGHTS)
def test_held_mask_reading_is_a_full_matrix_with_masked_weights_at_zero(weights):
    """docs/maths.md §Spatial filtering: under the "held" reading a local layer is a dense layer whose masked h
    are 0 (⟨W⟩ = 0, ⟨W²⟩ = 1, N = K + 1) and stay 0; under "absent" the masked weights do not count at all."""
    data = tiny_data()
    x, y = data.x_train[:10], data.y_train[:10]
    held = ebp.init_network([("local", 2), 3], weights, seed=1, input_side=3, mask_reading="held")
    absent = ebp.init_network([("local", 2), 3], weights, seed=1, input_side=3)
    dense = ebp.init_network([4, 3], weights, seed=1, input_side=3)
    for d, h in zip(dense.layers, held.layers):
        d.h[...] = h.h
    f_held, f_dense, f_absent = (ebp.forward(net, x) for net in (held, dense, absent))
    np.testing.assert_allclose(f_held.mu[0], f_dense.mu[0], rtol=1e-12)
    np.testing.assert_allclose(f_held.sigma2[0], f_dense.sigma2[0], rtol=1e-12)
    assert np.all(held.layers[0].normaliser == 10) and np.all(absent.layers[0].normaliser == 5)
    # the held weights add variance
    assert np.all(f_held.sigma2[0] > f_absent.sigma2[0] * absent.layers[0].normaliser / held.layers[0].normaliser)
    ebp_train.train_step(held, x, y, engine="reference")
    mask = held.layers[0].mask
    assert np.all(held.layers[0].h[~mask] == 0) and np.any(held.layers[0].h[mask] != dense.layers[0].h[mask])
    with pytest.raises(ValueError, match="mask reading"):
        ebp.init_network([("local", 2), 3], weights, input_side=3, mask_reading="zero")


def test_held_mask_reading_survives_save_and_load(tmp_path):
    net = ebp.init_network([("local", 2), 3], "binary", seed=1, input_side=3, mask_reading="held")
    ebp.save_network(tmp_path / "m.npz", net)
    loaded, _ = ebp.load_network(tmp_path / "m.npz")
    assert loaded.mask_reading == "held" and loaded.layers[0].held and np.all(loaded.layers[0].normaliser == 10)


@pytest.mark.parametrize("engine", ["reference", "fast", "jax"])
def test_every_engine_refuses_targets_and_images_it_cannot_train_on(engine):
    """0/1 targets train nothing (Φ(y·μ/σ) is the likelihood of ±1 targets) and raw uint8 pixels give every unit
    a huge σ²: both are refused before any step, and evaluating no images is an error, not a ZeroDivisionError."""
    net = ebp.init_network([784, 20, 10], "binary", seed=0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 784))
    labels = rng.integers(0, 10, 20)
    y = ebp_data.one_vs_all(labels)
    with pytest.raises(ValueError, match="other than ±1"):
        ebp_train.train_epoch(net, x, (y + 1) / 2, 10, rng, engine=engine)
    with pytest.raises(ValueError, match="not floating point"):
        ebp_train.train_epoch(net, rng.integers(0, 256, (20, 784)).astype(np.uint8), y, 10, rng, engine=engine)
    with pytest.raises(ValueError, match="no images to evaluate"):
        ebp_train.evaluate(net, x[:0], labels[:0], engine=engine)
