"""The successors on EBP's CNNs (successors.cnn, successors.cnn_evaluate, ebp_binary_conv_format and the harness's
profile "cnn"): the net's geometry against ebp_conv's, the fold into packed inference, the file format, and runs of
every method on a tiny CNN that write records passing their checks and resume to the same record."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_resumes_to_the_same_record, load_script

import ebp_binary_conv
import ebp_binary_conv_format as ecf
import ebp_binary_format
import ebp_conv
from ebp_binary import PackedLayer, pack_bits
from reproduction import records, run_files
from reproduction import successors as sc
from successors import bayesbinn, bop, cnn, evaluate, mlp, ste
from successors import cnn_evaluate as ce

TINY = "c5x3s3-c3x4s2-8"  # 28 → 8 → 3 maps, a dense layer of 8: a few hundred weights


def bn_net(net: cnn.CNN, seed=0):
    """±1 weights and BN statistics far from their initial values, half the BN scales γ < 0."""
    rng = np.random.default_rng(seed)
    real, stats = net.init_real(), net.init_stats()
    for l, n in enumerate(net.widths(), start=1):
        real[f"gamma{l}"] = jnp.asarray(np.where(np.arange(n) % 2, -1, 1) * rng.uniform(0.2, 2, n), jnp.float32)
        real[f"beta{l}"] = jnp.asarray(rng.normal(0, 1, n), jnp.float32)
        stats[f"mean{l}"] = jnp.asarray(rng.normal(0, 3, n), jnp.float32)
        stats[f"var{l}"] = jnp.asarray(rng.uniform(1, 30, n), jnp.float32)
    real["bias"] = jnp.asarray(rng.normal(0, 1, 10), jnp.float32)
    weights = [jnp.asarray(rng.choice([-1.0, 1.0], shape), jnp.float32) for shape in net.weight_shapes()]
    return weights, real, stats


def images(n, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 784)).astype(np.float32), rng.integers(0, 10, n)


# ----------------------------------------------------------------------------------------------------------
# The net: EBP's geometry, JAX's convolution equal to ebp_conv's loop over positions
# ----------------------------------------------------------------------------------------------------------

def test_catalogue_nets_have_ebp_s_shapes_and_the_forward_pass_gives_logits():
    lenet = cnn.network("lenet")
    assert lenet.architecture == "c5x6s2-c5x16s2-100" and cnn.network("c5x6s2-c5x16s2-100") == lenet
    # 28 → (28 − 5)//2 + 1 = 12 → (12 − 5)//2 + 1 = 4: 16·4·4 = 256 inputs to the dense layer of 100
    assert lenet.weight_shapes() == [(6, 1, 5, 5), (16, 6, 5, 5), (256, 100), (100, 10)]
    assert [g.out_side for g in lenet.hidden[:2]] == [12, 4] and lenet.widths() == [6, 16, 100]
    assert cnn.network("wide").weight_shapes()[-1] == (32 * 4 * 4, 10)
    weights, real, stats = bn_net(lenet)
    x, y = images(7)
    z, new = cnn.forward(lenet, weights, real, stats, jnp.asarray(x), train=True)
    assert z.shape == (7, 10) and set(new) == set(stats) and new["mean1"].shape == (6,)
    assert not np.allclose(new["mean1"], stats["mean1"])  # training updates the running statistics
    assert lenet.predict_logits(weights, real, stats, x).shape == (7, 10)
    for bad, message in [("800", "not a CNN"), ("c30x4s1", "larger than"), ("c5x4s2-x", "unknown architecture")]:
        with pytest.raises(ValueError, match=message):
            cnn.network(bad)


def test_a_convolution_is_the_dense_layer_of_ebp_conv_s_kernel_copied_at_every_position():
    """JAX's convolution (NCHW, OIHW, stride, no padding), flattened channel-major, is h @ W_dense.T where W_dense
    holds the kernel at every position (ebp_conv.placed, the loop over positions)."""
    g = ebp_conv.Conv(in_channels=3, in_side=9, kernel=3, channels=4, stride=2)
    rng = np.random.default_rng(2)
    w = rng.choice([-1.0, 1.0], (4, 3, 3, 3)).astype(np.float32)
    h = rng.choice([-1.0, 1.0], (5, 3 * 9 * 9)).astype(np.float32)
    got = np.asarray(cnn.convolve(jnp.asarray(h.reshape(5, 3, 9, 9)), jnp.asarray(w), g)).reshape(5, -1)
    np.testing.assert_array_equal(got, h @ ebp_conv.placed(w.reshape(4, -1), g).T)  # ±1 sums: exact


def test_the_jax_net_equals_the_float64_evaluation_of_the_unfolded_net():
    net = cnn.network(TINY)
    weights, real, stats = bn_net(net)
    x, _ = images(300)
    jax_logits = net.predict_logits(weights, real, stats, x)
    float64 = ce.float_logits(net, weights, real, stats, x)
    np.testing.assert_allclose(jax_logits, float64, atol=1e-4 * np.abs(float64).max())  # float32 rounding
    assert np.mean(jax_logits.argmax(1) == float64.argmax(1)) > 0.99


def test_every_method_starts_the_cnn_at_its_shapes():
    """Each method's init reads the net's weight shapes (mlp.weight_shapes); the runs below train every method."""
    net = cnn.network(TINY)
    hyper = {**bayesbinn.FIXED, **ste.FIXED}
    for module, key in ((ste, "latent"), (bop, "w"), (bayesbinn, "lam")):
        state = module.init(jax.random.PRNGKey(0), net, hyper)
        assert [w.shape for w in state[key]] == net.weight_shapes() and set(state["real"]) == set(net.init_real())
    assert mlp.fans((16, 6, 5, 5)) == (150, 400) and mlp.fans((256, 100)) == (256, 100)  # BinaryConnect's conv fans


# ----------------------------------------------------------------------------------------------------------
# The deployed CNN: folded per channel, packed, 0 mismatches; a broken fold is caught
# ----------------------------------------------------------------------------------------------------------

def test_folded_packed_cnn_has_no_mismatch_and_a_fold_that_ignores_the_sign_of_gamma_has_many(monkeypatch):
    net = cnn.network(TINY)
    weights, real, stats = bn_net(net)
    x, y = images(500)
    check = ce.packed_check(net, weights, real, stats, x, y)
    assert check["mismatches"] == 0
    assert check["error"] == pytest.approx(np.mean(ce.float_logits(net, weights, real, stats, x).argmax(1) != y))
    n_weights = sum(np.prod(shape) for shape in net.weight_shapes())  # and one bias per map, unit and class
    assert check["float32_bytes"] == 4 * (n_weights + sum(net.widths()) + 10)
    threshold = ce.threshold
    monkeypatch.setattr(ce, "threshold", lambda *a: (np.ones_like(a[0]), threshold(*a)[1]))  # γ < 0 not negated
    assert ce.packed_check(net, weights, real, stats, x, y)["mismatches"] > 50


def test_fold_refuses_latent_weights_and_a_zero_bn_scale():
    net = cnn.network(TINY)
    weights, real, stats = bn_net(net)
    with pytest.raises(ValueError, match="other than ±1"):
        ce.fold(net, [0.3 * w for w in weights], real, stats)
    real["gamma2"] = real["gamma2"].at[1].set(0.0)
    with pytest.raises(ValueError, match="γ is 0"):
        ce.fold(net, weights, real, stats)


def test_a_saved_packed_cnn_loads_to_the_same_predictions_and_bad_files_are_refused(tmp_path):
    net = cnn.network(TINY)
    weights, real, stats = bn_net(net)
    x, _ = images(200)
    packed = ce.fold(net, weights, real, stats)
    ecf.save_cnn(tmp_path / "net.npz", packed)
    loaded = ecf.load_cnn(tmp_path / "net.npz")
    assert loaded.convs == packed.convs
    np.testing.assert_array_equal(ebp_binary_conv.predict(loaded, x, "auto"), ebp_binary_conv.predict(packed, x, "auto"))
    first = packed.layers[0]  # a mask plane (EBP's nets have one where some h is exactly 0) travels too
    mask = np.ones((len(first.signs), first.n_inputs), bool)
    mask[0, 3] = False
    packed.layers[0] = PackedLayer(first.signs & pack_bits(mask), pack_bits(mask), first.b, first.n_inputs)
    ecf.save_cnn(tmp_path / "masked.npz", packed)
    masked = ecf.load_cnn(tmp_path / "masked.npz")
    np.testing.assert_array_equal(masked.layers[0].connected, packed.layers[0].connected)
    np.testing.assert_array_equal(ebp_binary_conv.predict(masked, x, "numpy"), ebp_binary_conv.predict(packed, x, "numpy"))
    dense = evaluate.fold(*[[jnp.ones((784, 4)), jnp.ones((4, 10))], *([mlp.init_real((784, 4, 10)),
                                                                        mlp.init_stats((784, 4, 10))])])
    ebp_binary_format.save_packed(tmp_path / "dense.npz", dense)
    with pytest.raises(ebp_binary_format.PackedFormatError, match="load_packed"):
        ecf.load_cnn(tmp_path / "dense.npz")
    packed.convs[1] = ebp_conv.Conv(3, 9, 3, 4, 2)  # a map side that does not chain from layer 1's 8
    ecf.save_cnn(tmp_path / "bad.npz", packed)
    with pytest.raises(ecf.CNNFormatError, match="side 9.*side 8"):
        ecf.load_cnn(tmp_path / "bad.npz")
    (tmp_path / "cut.npz").write_bytes((tmp_path / "net.npz").read_bytes()[:300])
    with pytest.raises(ecf.CNNFormatError, match="truncated or damaged"):
        ecf.load_cnn(tmp_path / "cut.npz")


# ----------------------------------------------------------------------------------------------------------
# The harness: profile "cnn", and runs of each method on a tiny CNN
# ----------------------------------------------------------------------------------------------------------

def test_a_cnn_trains_at_ebp_s_cnn_budget_and_is_recorded_by_its_grammar_name():
    params = sc.make_parameters("bop", "mnist", "lenet", seed=1)
    dense = sc.make_parameters("bop", "mnist", "800", seed=1)
    assert params["profile"] == "cnn" and params["max_epochs"] == 30 and params["architecture"] == "c5x6s2-c5x16s2-100"
    same = ("architecture", "profile", "max_epochs", "network")
    assert {k: v for k, v in params.items() if k not in same} == {k: v for k, v in dense.items() if k not in same}
    assert sc.protocol_label(params) == "cnn" and "at 30 epochs" in sc.describe_protocol(params)
    assert "(lenet)" in sc.describe_protocol(params) and "per channel" in params["network"]
    assert sc.run_dir(params).parts[-3:] == ("cnn", "mnist", "bop-c5x6s2-c5x16s2-100-seed1")
    assert sc.protocol_label(sc.make_parameters("bop", "mnist", "lenet", max_epochs=20)) == "shortened"
    for args, message in [(("ste", "mnist", "lenet", "tuned"), "a CNN trains at profile 'cnn'"),
                          (("ste", "mnist", "800", "cnn"), "is for CNNs"),
                          (("ebp-tuned", "mnist", "lenet"), "dense nets only")]:
        with pytest.raises(ValueError, match=message):
            sc.make_parameters(*args)


def test_the_command_line_trains_a_catalogue_cnn_at_profile_cnn(tmp_path):
    script = load_script("run_successors")
    (params, folder), = script.select_jobs(script.parse_args(["--method", "ste", "--arch", "lenet", "--dataset", "mnist",
                                                              "--seed", "0", "--out", str(tmp_path)]))
    assert (params["profile"], params["max_epochs"]) == ("cnn", 30)
    assert folder == tmp_path / "cnn" / "mnist" / "ste-c5x6s2-c5x16s2-100"
    mixed = script.select_jobs(script.parse_args(["--method", "bop", "--arch", "800", "wide", "--out", str(tmp_path)]))
    assert [p["profile"] for p, _ in mixed] == ["tuned", "cnn", "tuned", "cnn"]  # each net its default, both data sets


SMALL = {"n_train": 600, "n_validation": 200, "grid_epochs": 1, "max_epochs": 2, "patience": 1,
         "stop_patience": 2, "mc_samples": 2, "preprocessing_grid": ["unit"]}
ONE_POINT = {"ste": {"learning_rate": [1e-2]}, "bop": {"gamma": [1e-3], "tau": [1e-6]}, "bayesbinn": {"alpha": [1e-3]}}


@pytest.mark.parametrize("method", ["ste", "bop"])
def test_a_smoke_run_on_a_tiny_cnn_writes_a_record_that_passes_its_checks(real_data_dir, tmp_path, method):
    params = sc.make_parameters(method, "mnist", TINY, "smoke", grid=ONE_POINT[method], **SMALL)
    record = sc.run(params, tmp_path, real_data_dir, echo=lambda *_: None, allow_dirty=True)
    assert record["finished"] and records.record_problems(record) == []
    evaluation = record["evaluation"]
    assert evaluation["packed"]["mismatches"] == 0 and set(evaluation["outputs"]) == {"deployed"}
    assert sc.net_problems(record, tmp_path) == []
    assert sc.rescore(record, tmp_path, real_data_dir) == pytest.approx(evaluation["packed"]["error"], abs=1e-12)
    predictions = run_files.load_predictions(tmp_path / run_files.PREDICTIONS_FILE, 10000)
    assert set(predictions) == {"deployed"}
    assert np.mean(predictions["deployed"] != sc.load_split(params, "unit", real_data_dir)["y_test"]) == \
        pytest.approx(evaluation["packed"]["error"], abs=1e-12)


def test_an_interrupted_bayesbinn_cnn_run_resumes_to_the_same_record(real_data_dir, tmp_path):
    params = sc.make_parameters("bayesbinn", "mnist", TINY, "smoke", grid=ONE_POINT["bayesbinn"], **SMALL)
    whole = sc.run(params, tmp_path / "whole", real_data_dir, echo=lambda *_: None, allow_dirty=True)
    assert whole["finished"] and records.record_problems(whole) == []
    assert whole["evaluation"]["packed"]["mismatches"] == 0
    assert set(whole["evaluation"]["outputs"]) == {"deployed", "predictive", "mean"}
    assert set(run_files.load_predictions(tmp_path / "whole" / run_files.PREDICTIONS_FILE)) == {"deployed", "predictive",
                                                                                          "mean"}
    assert_resumes_to_the_same_record(sc, params, whole, tmp_path / "part", real_data_dir)
