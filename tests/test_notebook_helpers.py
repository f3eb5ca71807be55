"""The references and helpers that notebooks 05, 06 and reproduction_evidence call: the bias line of
ebp_lib.update against finite differences, the calibration record over epochs, and the reading of a benchmark's
machine description."""
import copy

import numpy as np
import pytest

import ebp_analysis as analysis
import ebp_checks as checks
import ebp_data
import ebp_lib as ebp
import ebp_train
from reproduction import records


def small_batch(net, n=3, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, net.sizes[0]))
    return x, ebp_data.one_vs_all(rng.integers(0, net.sizes[-1], n), net.sizes[-1])


@pytest.mark.parametrize("weights", ["binary", "real"])
@pytest.mark.parametrize("dropout", [None, "sampled"])
def test_update_moves_every_bias_by_the_derivative_of_the_log_likelihood(weights, dropout):
    """b after ebp_lib.update minus b before equals ∂ ln P(v_L = y)/∂b (σ, ⟨W⟩ fixed) by central differences, at
    every layer of a [9, 7, 5, 3] net in float64: the error of a central difference with ε = 1e-5 is O(ε²) plus
    rounding ~1e-16/ε, so a relative 1e-7 leaves a wide margin while a wrong factor (√K for √N, a missing
    sum over the minibatch) is off by 1e-2 or more."""
    net = ebp.init_network([7, 5, 3], weights, seed=3, input_side=3, init_scale=3.0, dropout=dropout, keep=0.8)
    for layer in net.layers:  # nonzero biases, so that b enters every μ with a value of its own
        layer.b[:] = np.random.default_rng(4).standard_normal(layer.b.shape)
    x, y = small_batch(net)
    fwd = ebp.forward(net, x, train=True, rng=np.random.default_rng(5))
    numeric = checks.numerical_bias_increments(net, fwd, y)
    for k in range(len(net.layers)):  # the function of b reproduces the forward pass's μ at the current b
        assert np.allclose((fwd.inputs[k] @ fwd.w_mean[k].T + net.layers[k].b) / np.sqrt(net.layers[k].normaliser),
                           fwd.mu[k], rtol=1e-12, atol=1e-12)
    before = [layer.b.copy() for layer in net.layers]
    ebp.update(net, fwd, ebp.backward(net, fwd, y))
    for k, layer in enumerate(net.layers):
        change = layer.b - before[k]
        assert checks.relative_error(change, numeric[k]) < 1e-7
        assert np.abs(change).max() > 1e-3  # a real change, not 0 = 0


def test_numerical_bias_increments_catch_a_missing_minibatch_sum():
    net = ebp.init_network([7, 5, 3], "binary", seed=3, input_side=3, init_scale=3.0)
    x, y = small_batch(net)
    fwd = ebp.forward(net, x)
    deltas = ebp.backward(net, fwd, y)
    numeric = checks.numerical_bias_increments(net, fwd, y)
    averaged = [(d / np.sqrt(layer.normaliser)).mean(axis=0) for d, layer in zip(deltas, net.layers)]
    assert all(checks.relative_error(a, n) > 0.5 for a, n in zip(averaged, numeric))  # 1/3 of the sum: off by 2/3


def test_calibration_gap_signs():
    r = analysis.reliability(np.array([0.9, 0.9, 0.9, 0.9]), np.array([1, 0, 0, 1]))  # 90% said, 50% happened
    assert analysis.calibration_gap(r) == pytest.approx(-0.4)
    r = analysis.reliability(np.array([0.2, 0.2]), np.array([1, 1]))
    assert analysis.calibration_gap(r) == pytest.approx(0.8)


def test_calibration_over_epochs_trains_as_train_epoch_and_measures_the_final_network():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 16))
    labels = rng.integers(0, 4, 40)
    y = ebp_data.one_vs_all(labels, 4)
    net = ebp.init_network([6, 4], "binary", seed=1, input_side=4)
    twin = copy.deepcopy(net)
    record = analysis.calibration_over_epochs(net, x, y, x[:20], labels[:20], [1, 3], batch_size=5, seed=2,
                                              engine="reference")
    order_rng = np.random.default_rng(2)
    for epoch in range(3):
        ebp_train.train_epoch(twin, x, y, 5, order_rng, epoch, engine="reference")
    for a, b in zip(net.layers, twin.layers):
        np.testing.assert_array_equal(a.h, b.h)
    assert [r["epoch"] for r in record] == [1, 3]
    fwd = ebp.forward(twin, x[:20])
    p = np.exp(analysis.class_log_probabilities(fwd.mu[-1], fwd.sigma2[-1]))
    right = p.argmax(axis=1) == labels[:20]
    final = analysis.reliability(p.max(axis=1), right)
    assert record[-1]["ece"] == pytest.approx(final["ece"], abs=1e-12)
    assert record[-1]["error"] == pytest.approx(np.mean(~right))
    assert record[-1]["confidence"] == pytest.approx(p.max(axis=1).mean())


def test_a_bad_benchmark_record_is_named_with_what_is_wrong(tmp_path):
    """read_benchmark reads the committed record as benchmark_machine does; a file that is not JSON, not an object,
    or whose machine fields are of another form is refused naming the file and the field, not with a KeyError."""
    import json

    committed = analysis.read_benchmark(records.REPO / "outputs" / "binary_inference.json")
    assert analysis.benchmark_machine(committed)["cpu_model"] == committed["machine"]["cpu_model"]
    path = tmp_path / "bench.json"
    for content, problem in [("{", "not JSON"), ("[1, 2]", "the record is a JSON list, not an object"),
                             (json.dumps({"machine": "x"}), "machine is not an object"),
                             (json.dumps({"machine": {"load_average": {"start": [1, 2]}}}),
                              "machine's load average at the start is [1, 2], not three numbers"),
                             (json.dumps({"machine": {"cpu_flags": "avx2"}}), "machine.cpu_flags (or flags) is neither"),
                             (json.dumps({"machine": {"cores": "16"}}), "machine.cores is '16', not a whole number")]:
        path.write_text(content)
        with pytest.raises(analysis.BenchmarkRecordError) as info:
            analysis.read_benchmark(path)
        assert str(info.value).startswith(f"{path}: {problem}"), str(info.value)
    with pytest.raises(analysis.BenchmarkRecordError, match="missing.json: cannot be read"):
        analysis.read_benchmark(tmp_path / "missing.json")


def test_benchmark_machine_reads_either_schema_and_invents_nothing():
    old = {"machine": {"cpu_model": "CPU X", "cores": 2, "load_average_at_start": [6.9, 6.3, 4.8],
                       "load_average_at_end": [5.8, 6.1, 4.9]}}
    assert analysis.benchmark_machine(old) == {"cpu_model": "CPU X", "cores": 2, "flags": None,
                                               "load_average_start": [6.9, 6.3, 4.8],
                                               "load_average_end": [5.8, 6.1, 4.9], "loaded": None}
    # the schema of reproduction.records.timing_record / finish_timing_record, as binary_inference.py writes it
    machine = records.timing_record(packages=("numpy",), git_paths=("ebp_analysis.py",), load=[0.5, 0.4, 0.3])
    records.finish_timing_record(machine, own_processes=0, load=[0.7, 0.5, 0.3])
    got = analysis.benchmark_machine({"loaded": machine["loaded"], "machine": machine})
    assert got["cpu_model"] == machine["cpu_model"] and got["cores"] == machine["cores"]
    assert got["load_average_start"] == [0.5, 0.4, 0.3] and got["load_average_end"] == [0.7, 0.5, 0.3]
    assert got["loaded"] is False and got["flags"] == machine["cpu_flags"]
    if got["flags"] is not None:
        assert set(got["flags"]) == set(records.TIMING_CPU_FLAGS) and "avx512_vpopcntdq" in got["flags"]
    loaded = {"loaded": True, "machine": {"cpu_flags": {"avx512f": True, "avx512_vpopcntdq": False}}}
    got = analysis.benchmark_machine(loaded)
    assert got["loaded"] is True and got["flags"] == {"avx512f": True, "avx512_vpopcntdq": False}
    assert analysis.benchmark_machine({"machine": {"loaded": True}})["loaded"] is True  # the machine's own mark
    listed = analysis.benchmark_machine({"machine": {"flags": ["avx512f"], "load_average": {"start": [1, 1, 1],
                                                                                          "end": [2, 2, 2]}}})
    assert listed["flags"] == {"avx512f": True} and listed["load_average_end"] == [2, 2, 2]
    assert listed["cores"] is None and listed["flags"].get("avx512_vpopcntdq") is None  # not recorded, not False
    assert analysis.benchmark_machine({"machine": {"load_average": [0.5, 0.4, 0.3]}})["load_average_start"] == [0.5, 0.4, 0.3]
    assert set(analysis.benchmark_machine({}).values()) == {None}
