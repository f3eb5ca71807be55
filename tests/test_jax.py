"""The JAX engine: EBP's step written as jax.grad of ln P with frozen variances equals ebp_lib's step."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

from helpers import assert_close_networks, assert_grad_steps_are_ebp, check_forward, data, net_for

import ebp_data
import ebp_jax
import ebp_lib
import ebp_train

CONFIGS = [  # (weights, architecture, dropout, mask reading)
    ("binary", [12, 10], None, "absent"), ("real", [12, 10], None, "absent"),
    ("binary", [12, 9, 10], None, "absent"), ("real", [12, 9, 10], None, "absent"),
    ("binary", [12, 9, 10], "sampled", "absent"), ("real", [12, 9, 10], "sampled", "absent"),
    ("binary", [12, 10], "analytic", "absent"), ("real", [12, 9, 10], "analytic", "absent"),
    ("binary", [("local", 3), 10], None, "absent"), ("real", [("local", 3), ("local", 2), 10], None, "absent"),
    ("binary", [("local", 3), 10], None, "held"), ("real", [("local", 3), 10], "sampled", "held"),
]


def small_data(n, side=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, side * side))
    return x, ebp_data.one_vs_all(rng.integers(0, 10, n))


@pytest.mark.parametrize("weights, architecture, dropout, mask_reading", CONFIGS)
def test_grad_with_frozen_variances_is_ebp(weights, architecture, dropout, mask_reading):
    """Five float64 steps of minibatch 8: h and b agree with ebp_lib's reference step to 1e-12 relative
    (the two differ only in the rounding of erf, log Φ and summation order)."""
    net = ebp_lib.init_network(architecture, weights, seed=1, input_side=6, dropout=dropout,
                               mask_reading=mask_reading)
    assert_grad_steps_are_ebp(net, *small_data(40))


def trained_net(weights, architecture, dropout, mask_reading):
    """A float64 network after two reference steps (biases and ⟨W⟩ away from their start)."""
    net = ebp_lib.init_network(architecture, weights, seed=2, input_side=6, dropout=dropout, mask_reading=mask_reading,
                               init_scale=3.0)
    x, y = small_data(16, seed=4)
    ebp_train.train_steps(net, x, y, np.arange(16), 8, np.random.default_rng(3), engine="reference")
    return net


def check_weight_moments(net, x):
    s, params = ebp_jax.structure(net), ebp_jax.parameters(net)
    for layer, (h, _), mask in zip(net.layers, params, s.masks):
        mean, second = ebp_jax.weight_moments(h, mask, s)
        mean_ref, second_ref = ebp_lib.weight_moments(layer, net.weights)
        np.testing.assert_allclose(np.asarray(mean), mean_ref, rtol=1e-15, atol=0)
        if second is None:  # ⟨W²⟩ = 1 for every weight
            assert np.all(second_ref == 1)
        else:
            np.testing.assert_allclose(np.asarray(second), second_ref, rtol=1e-15, atol=0)


def check_ebp_p(net, x):
    got = np.asarray(ebp_jax.ebp_p(ebp_jax.parameters(net), x, ebp_jax.structure(net)))
    np.testing.assert_allclose(got, ebp_lib.output_ebp_p(net, x), rtol=0, atol=1e-12)


def check_ebp_d(net, x):
    got = np.asarray(ebp_jax.ebp_d(ebp_jax.parameters(net), x, ebp_jax.structure(net)))
    reference = ebp_lib.output_ebp_d(net, x)
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-12 * max(1.0, np.abs(reference).max()))


CHECKS = {"weight_moments": check_weight_moments, "forward": check_forward, "ebp_p": check_ebp_p,
          "ebp_d": check_ebp_d, "ebp_step": None}  # ebp_step: test_grad_with_frozen_variances_is_ebp


def test_every_function_of_the_jax_table_has_a_reference_and_a_check():
    assert set(CHECKS) == set(ebp_jax.REFERENCES)
    for name, reference in ebp_jax.REFERENCES.items():
        module, _, attribute = reference.rpartition(".")
        assert module == "ebp_lib" and callable(getattr(ebp_lib, attribute)) and callable(getattr(ebp_jax, name))


@pytest.mark.parametrize("name", [name for name, check in CHECKS.items() if check is not None])
@pytest.mark.parametrize("weights, architecture, dropout, mask_reading", CONFIGS)
def test_jax_function_matches_its_reference(name, weights, architecture, dropout, mask_reading):
    """float64: the JAX forward pass, EBP-P and EBP-D equal ebp_lib's to rounding (1e-12)."""
    CHECKS[name](trained_net(weights, architecture, dropout, mask_reading), small_data(20, seed=5)[0])


def test_a_run_trained_in_a_group_equals_the_run_trained_alone():
    """vmap over three runs (own initial weights, own data orders): each run's parameters after an epoch are
    exactly those of train_epoch on that run alone (float64)."""
    x, y = small_data(48, seed=3)
    nets = [ebp_lib.init_network([12, 10], "binary", seed=seed, input_side=6) for seed in range(3)]
    s = ebp_jax.structure(nets[0])
    orders = np.stack([np.random.default_rng(seed).permutation(48) for seed in range(3)])
    group = ebp_jax.train_group(ebp_jax.stack_runs([ebp_jax.parameters(n) for n in nets]), x, y, orders, s, 6)
    for i, net in enumerate(nets):
        alone = ebp_jax.train_epoch(ebp_jax.parameters(net), x, y, orders[i], s, 6)
        for (h_group, b_group), (h_alone, b_alone) in zip(ebp_jax.unstack_run(group, i), alone):
            np.testing.assert_allclose(np.asarray(h_group), np.asarray(h_alone), rtol=0, atol=1e-13)
            np.testing.assert_allclose(np.asarray(b_group), np.asarray(b_alone), rtol=0, atol=1e-13)


def test_an_epoch_in_one_call_equals_the_reference_epoch():
    """train_epoch (lax.scan over 12 minibatches) against ebp_train.train_steps in the same order (float64)."""
    x, y = small_data(48, seed=4)
    net = ebp_lib.init_network([12, 9, 10], "real", seed=2, input_side=6)
    s = ebp_jax.structure(net)
    order = np.random.default_rng(0).permutation(48)
    params = ebp_jax.train_epoch(ebp_jax.parameters(net), x, y, order, s, 4)
    ebp_train.train_steps(net, x, y, order, 4, np.random.default_rng(0), engine="reference")
    for layer, (h, b) in zip(net.layers, params):
        np.testing.assert_allclose(np.asarray(h), layer.h, rtol=0, atol=1e-12 * max(1.0, np.abs(layer.h).max()))
        np.testing.assert_allclose(np.asarray(b), layer.b, rtol=0, atol=1e-12 * max(1.0, np.abs(layer.b).max()))


def test_parameters_are_not_changed_by_a_later_update_of_the_network():
    """JAX copies a NumPy array to the device after jnp.asarray returns; parameters() must hand JAX arrays that an
    in-place step of the network, right after, cannot reach (without copies about half of these tries saw it, on
    an AMD EPYC)."""
    net = ebp_lib.init_network([800, 10], "binary", seed=0)
    for _ in range(200):
        before = net.layers[0].h.copy()
        (h, _), _ = ebp_jax.parameters(net)
        net.layers[0].h += 1.0
        assert np.array_equal(np.asarray(h), before)


def test_matrix_products_use_full_float32_precision():
    assert ebp_jax.MATMUL_PRECISION == jax.lax.Precision.HIGHEST
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    exact = a.astype(np.float64) @ a.astype(np.float64)
    product = np.asarray(ebp_jax.matmul(jax.numpy.asarray(a), jax.numpy.asarray(a)), np.float64)
    assert np.max(np.abs(product - exact)) < 1e-4  # TF32 (10-bit mantissa) would err by about 1e-2 here


# The JAX engine's agreement with the reference (300 updates, evaluation, non-finite values) is tested by
# tests/test_fast.py's tests parametrised by engine, with the fast engine's cases and tolerances.


def test_jax_engine_stops_before_a_non_finite_step_like_the_reference():
    x, y = data(40)
    x[25] = np.nan  # minibatch 2 (images 20-29) of batch size 10
    net = net_for("binary", [30, 10], None, 1.0)
    with pytest.raises(FloatingPointError, match="step 2 of epoch 1"):
        ebp_train.train_steps(net, x, y, np.arange(40), 10, np.random.default_rng(0), engine="jax")
    reference = net_for("binary", [30, 10], None, 1.0)
    ebp_train.train_steps(reference, x[:20], y[:20], np.arange(20), 10, np.random.default_rng(0), engine="reference")
    assert_close_networks(net, reference)  # the network is that of the last finite step


def test_benchmark_script_records_device_load_and_extrapolation(real_data_dir, tmp_path):
    """scripts/benchmark_jax.py on 20 images, groups of 1 and 2, [784, 20, 10]: its JSON names the device, the
    versions and the load, labels every per-hour figure and the grid's hours as extrapolated, and compares each
    group with the fast engine timed in the same process."""
    import json

    from scripts import benchmark_jax

    assert benchmark_jax.main(["--images", "20", "--groups", "1", "2", "--architectures", "20", "--out",
                               str(tmp_path / "bench_{device}.json"), "--allow-loaded"]) == 0  # a test: any load
    record = json.loads((tmp_path / "bench_cpu.json").read_text())
    machine = record["machine"]
    assert machine["device"]["platform"] == "cpu" and machine["device"]["jax"] == jax.__version__
    assert machine["cpu_model"] and len(machine["load_average_at_start"]) == 3 and isinstance(record["loaded"], bool)
    assert machine["load_average_at_end"] and "avx2" in machine["cpu_flags"]
    assert machine["numpy"] == np.__version__
    [row] = record["results"]
    assert row["architecture"] == "[784, 20, 10]" and row["weights"] == 784 * 20 + 20 * 10
    assert [g["runs"] for g in row["groups"]] == [1, 2] and row["fast"]["images_per_second"] > 0
    for g in row["groups"]:
        assert g["runs_per_hour_extrapolated"] < g["runs_per_hour_training_only_extrapolated"]  # evaluation costs
        assert g["ratio_to_fast"] > 0 and g["us_per_step"] > 0 and g["compile_seconds"] > 0
    assert "extrapolated" in record["extrapolation"] and record["grid"]["label"] == "extrapolated"
    assert 140 <= record["grid"]["runs"] <= 160  # the MNIST grid with three seeds: about 150 runs
    assert record["grid"]["by_architecture"][0]["grid_hours_extrapolated"] > 0 and record["limits"]
