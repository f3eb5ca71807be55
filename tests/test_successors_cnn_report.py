"""reproduction.conv_report's table of the successors beside EBP on the same CNN, on fake records: paired by seed,
BayesBiNN's predictive and the calibration beside the deployed nets' errors."""
from __future__ import annotations

import json

import pytest
from helpers import fake_result, write_result

from reproduction import conv_report, results

LENET = "c5x6s2-c5x16s2-100"


def successor(method, seed, deployed, nll, ece, predictive=None, dataset="mnist", architecture=LENET):
    """The fields of a finished successor record that the table reads."""
    outputs = {"deployed": {"test_error": deployed, "nll": nll, "ece": ece}}
    if predictive is not None:
        outputs["predictive"] = {"test_error": predictive, "nll": nll / 2, "ece": ece / 2}
    return {"method": "successor", "finished": True, "epochs_done": 30,
            "parameters": {"method": method, "dataset": dataset, "architecture": architecture, "seed": seed},
            "evaluation": {"packed": {"error": deployed, "mismatches": 0}, "outputs": outputs}}


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
