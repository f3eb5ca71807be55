"""reproduction.conv_report's table of the successors beside EBP on the same CNN, on fake records: paired by seed,
BayesBiNN's predictive and the calibration beside the deployed nets' errors."""
from __future__ import annotations

import json

import pytest
from helpers import fake_result, write_result

import ebp_data
from reproduction import conv_report, results, run_files
from reproduction import successors as sc

LENET = "c5x6s2-c5x16s2-100"


def successor(method, seed, deployed, nll, ece, predictive=None, dataset="mnist", architecture=LENET):
    """The fields of a finished successor record that the table reads."""
    outputs = {"deployed": {"test_error": deployed, "nll": nll, "ece": ece}}
    if predictive is not None:
        outputs["predictive"] = {"test_error": predictive, "nll": nll / 2, "ece": ece / 2}
    return {"method": "successor", "finished": True, "epochs_done": 30,
            "parameters": {"method": method, "dataset": dataset, "architecture": architecture, "seed": seed},
            "evaluation": {"packed": {"error": deployed, "mismatches": 0}, "outputs": outputs,
                           "cpu_seconds_per_epoch": 2.0 + seed, "cpu_seconds_to_best_epoch": 40.0 + seed},
            "sessions": [{"cpu": "AMD EPYC"}]}


def ebp_runs(runs_dir):
    """EBP's lenet, seeds 0 and 1 (EBP-P = EBP-D = 1.8% and 2.0%), and a real-weight run that must not count."""
    for seed, error in ((0, 0.018), (1, 0.020)):
        write_result(runs_dir, f"binary-{LENET}" + (f"-seed{seed}" if seed else ""),
                     fake_result({"architecture": LENET, "weights": "binary"}, 30, None, "named-e30", error, seed=seed))
    write_result(runs_dir, f"real-{LENET}", fake_result({"architecture": LENET, "weights": "real"}, 30, None,
                                                        "named-e30", 0.5))
    return results.load_results(runs_dir)


def test_successors_beside_ebp_on_the_same_cnn_paired_by_seed(tmp_path):
    """STE 1.2% and 1.6% against EBP's 1.8% and 2.0%: −0.6 and −0.4 points, −0.50 ± 0.14; BayesBiNN of seed 2 has no
    EBP seed to pair with; its predictive error and NLL/ECE are the predictive output's."""
    loaded = ebp_runs(tmp_path)
    rows = conv_report.successor_rows(loaded, [successor("ste", 0, 0.012, 0.05, 0.01),
                                               successor("ste", 1, 0.016, 0.07, 0.03),
                                               successor("bayesbinn", 2, 0.015, 0.2, 0.04, predictive=0.014)])
    assert [(r["net"], r["method"]) for r in rows] == [("lenet", "EBP"), ("lenet", "bayesbinn"), ("lenet", "ste")]
    ebp, bayesbinn, ste = rows
    assert ebp["deployed"] == ebp["predictive"] == "1.90 ± 0.14" and ebp["seeds"] == "0,1" and ebp["epochs"] == "30/30"
    assert ste["deployed"] == "1.40 ± 0.28" and ste["predictive"] is None
    assert ste["− EBP-D (points)"] == "-0.50 ± 0.14 (2)" and ste["nll"] == pytest.approx(0.06)
    assert ste["ece"] == pytest.approx(0.02)
    assert bayesbinn["predictive"] == "1.40" and bayesbinn["nll"] == pytest.approx(0.1)  # the predictive's NLL
    assert bayesbinn["− EBP-P (points)"] == "no shared seed"


def test_a_cnn_without_ebp_runs_has_no_ebp_row_and_says_so(tmp_path):
    rows = conv_report.successor_rows(ebp_runs(tmp_path), [successor("bop", 0, 0.03, 0.1, 0.02, dataset="fashion-mnist")])
    assert [r["method"] for r in rows] == ["bop"] and rows[0]["− EBP-D (points)"] == "no EBP run"
    assert conv_report.ebp_cnn_group(results.load_results(tmp_path), "mnist", LENET).key[1] == "binary"


def test_loading_refuses_a_record_that_fails_its_check(tmp_path):
    assert conv_report.load_successors(tmp_path) == []
    folder = tmp_path / "cnn" / "mnist" / f"ste-{LENET}"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(successor("ste", 0, 0.01, 0.1, 0.01)))
    with pytest.raises(ValueError, match="result.json"):
        conv_report.load_successors(tmp_path)


def wrong_on(labels, images):
    """Predictions equal to the labels but on `images`, where they are off by one class."""
    predicted = labels.copy()
    predicted[images] = (labels[images] + 1) % 10
    return predicted


def test_ebp_and_a_successor_on_the_same_test_images_are_compared_image_by_image(tmp_path, real_data_dir):
    """EBP-D wrong on images 0-199 (seed 0) and 0-219 (seed 1), STE on 0-99 and 0-119: STE − EBP-D = −1.00 point
    exactly, its intervals around it; EBP-P wrong nowhere, so EBP-D − EBP-P = +2.10. Without EBP's predictions
    files EBP is left out of the image pairs (its seed pairs remain)."""
    labels = ebp_data.load_raw("mnist", real_data_dir)["test_labels"]
    loaded = ebp_runs(tmp_path / "runs")
    for seed, n in ((0, 200), (1, 220)):
        folder = tmp_path / "runs" / "named-e30" / (f"binary-{LENET}" + (f"-seed{seed}" if seed else ""))
        run_files.save_predictions(folder / run_files.PREDICTIONS_FILE,
                                   {"deployed": wrong_on(labels, slice(0, n)), "predictive": labels})
    ste = []
    for seed, n in ((0, 100), (1, 120)):
        record = successor("ste", seed, n / 10000, 0.05, 0.01)
        record["parameters"]["profile"] = "cnn"
        folder = sc.run_dir(record["parameters"], tmp_path / "succ")
        folder.mkdir(parents=True)
        run_files.save_predictions(folder / run_files.PREDICTIONS_FILE, {"deployed": wrong_on(labels, slice(0, n))})
        ste.append(record)
    rows = conv_report.image_pairs(loaded, ste, tmp_path / "runs", tmp_path / "succ", real_data_dir, n_boot=0)
    pairs = {(r["a"], r["b"]): r for r in rows}
    assert set(pairs) == {("EBP-D", "EBP-P"), ("EBP-D", "ste"), ("EBP-P", "ste")}
    assert pairs["EBP-D", "ste"]["difference"] == pytest.approx(1.00)
    assert pairs["EBP-D", "EBP-P"]["difference"] == pytest.approx(2.10)
    for r in rows:
        low, high = r["images_and_seeds"]
        assert low < r["difference"] < high

    for path in (tmp_path / "runs").rglob(run_files.PREDICTIONS_FILE):
        path.unlink()
    assert conv_report.image_pairs(loaded, ste, tmp_path / "runs", tmp_path / "succ", real_data_dir, n_boot=0) == []


def test_each_row_states_its_training_cost_and_the_clock_it_was_read_from(tmp_path):
    """EBP's fake runs trained 30 epochs in 30 s of wall time each: 1.0 s per epoch, 30 s to their reported epoch;
    STE's seeds 0 and 1 took 2 and 3 CPU seconds per epoch, 40 and 41 to their best: means 2.5 and 40.5."""
    rows = conv_report.successor_rows(ebp_runs(tmp_path), [successor("ste", 0, 0.012, 0.05, 0.01),
                                                           successor("ste", 1, 0.016, 0.07, 0.03)])
    ebp, ste = rows
    assert (ebp["s/epoch"], ebp["s to best"], ebp["clock"]) == (1.0, 30.0, "wall, 1 thread")
    assert (ste["s/epoch"], ste["s to best"], ste["clock"], ste["machine"]) == (2.5, 40.5, "CPU", "AMD EPYC")
