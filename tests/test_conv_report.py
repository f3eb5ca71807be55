"""reproduction.conv_report on fake records: CNN groups beside the paper profile's dense and locally connected runs,
paired by seed, and the generated sentence (honest while no CNN run is finished)."""
from __future__ import annotations

import pytest
from helpers import fake_result, write_result

from reproduction import conv_report, results

CNN = {"architecture": "c5x16s2-c5x32s2", "weights": "binary"}


def write_paper_runs(runs_dir):
    """Table 2's 800-800 (seeds 0, 1) and 200 (seed 0), Table 4's block13 (seeds 0, 1), a dropout run that must not
    count, and a real-weight run of another weight type."""
    for arch, seed, error in (("800-800", 0, 0.020), ("800-800", 1, 0.022), ("200", 0, 0.030), ("block13", 0, 0.025),
                              ("block13", 1, 0.027)):
        key = f"binary-{arch}" + (f"-seed{seed}" if seed else "")
        write_result(runs_dir, key, fake_result({"architecture": arch, "weights": "binary"}, 120, None, "paper",
                                                error, seed=seed))
    write_result(runs_dir, "binary-800-dropout-analytic", fake_result(
        {"architecture": "800", "weights": "binary"}, 120, None, "paper", 0.001, dropout="analytic"))
    write_result(runs_dir, "real-800-800", fake_result({"architecture": "800-800", "weights": "real"}, 120, None,
                                                       "paper", 0.001))


def cnn_run(runs_dir, seed, errors, epochs=None, profile="named-e30", **params):
    key = "binary-c5x16s2-c5x32s2" + (f"-seed{seed}" if seed else "")
    write_result(runs_dir, key, fake_result(CNN, len(errors), None, profile, errors[-1], epochs=epochs, seed=seed,
                                            curve=errors, **params))


def test_no_cnn_run_is_said_so(tmp_path):
    write_paper_runs(tmp_path)
    loaded = results.load_results(tmp_path)
    assert conv_report.cnn_groups(loaded) == []
    assert conv_report.verdict(loaded).startswith("No CNN run recorded yet")


def test_runs_in_progress_are_not_a_verdict(tmp_path):
    write_paper_runs(tmp_path)
    cnn_run(tmp_path, 0, [0.05, 0.04], epochs=30)
    cnn_run(tmp_path, 1, [0.06, 0.05], epochs=30)
    loaded = results.load_results(tmp_path)
    sentence = conv_report.verdict(loaded)
    assert sentence.startswith("No CNN run finished yet: after 2 of 30 epochs binary c5x16s2-c5x32s2 (wide)")
    assert "EBP-P 4.50 ± 0.71% and EBP-D 4.50 ± 0.71%" in sentence and "not a verdict" in sentence
    (group,) = conv_report.cnn_groups(loaded)
    assert group.curve("test_ebp_d") == [(1, pytest.approx(0.055), pytest.approx(0.0070710678), 2),
                                         (2, pytest.approx(0.045), pytest.approx(0.0070710678), 2)]


def test_finished_runs_paired_by_seed(tmp_path):
    """Seeds 0 and 1 finished: 800-800 is the best dense net (2.1%), paired differences (3.0 − 2.0, 3.4 − 2.2) =
    1.0 and 1.2 points: 1.10 ± 0.14 above it; block13 (2.6%): 0.5 and 0.7: 0.60 ± 0.14 above it."""
    write_paper_runs(tmp_path)
    cnn_run(tmp_path, 0, [0.05, 0.030])
    cnn_run(tmp_path, 1, [0.05, 0.034])
    loaded = results.load_results(tmp_path)
    sentence = conv_report.verdict(loaded)
    assert sentence.startswith("EBP trains binary c5x16s2-c5x32s2 (wide), mnist [named-e30] to EBP-P 3.20 ± 0.28% "
                               "and EBP-D 3.20 ± 0.28% test error after 2 epochs (2 seeds)")
    assert ("its EBP-D is 1.10 ± 0.14 points above the best dense net (800-800, 2.10 ± 0.14% after 120 epochs; "
            "2 seeds paired)") in sentence
    assert "its EBP-P is 0.60 ± 0.14 points above the best locally connected net (block13" in sentence
    rows = conv_report.table_rows(loaded)
    assert [r["kind"] for r in rows] == ["CNN", "dense (Table 2)", "dense (Table 2)", "local (Table 4)"]
    assert [r["network"].split()[1] for r in rows[1:]] == ["200", "800-800", "block13"]  # no dropout, no real weights
    assert rows[1]["CNN − this, EBP-D (points)"] == "+0.00 (1)"  # 200 shares seed 0 only: no spread
    assert rows[2]["CNN − this, EBP-P (points)"] == "+1.10 ± 0.14 (2)"
    assert rows[0]["test_ebp_p"] == "3.20 ± 0.28" and rows[0]["epochs"] == "2/2" and rows[0]["finished"]


def test_init_schemes_are_separate_groups(tmp_path):
    cnn_run(tmp_path, 0, [0.04])
    cnn_run(tmp_path, 0, [0.09], profile="named-e30-variance1", init_scale=25.0)
    groups = conv_report.cnn_groups(results.load_results(tmp_path))
    assert [g.key[3] for g in groups] == ["reference", "variance1"]
    assert "init variance1" in groups[1].label


def test_the_front_page_sentences_pair_each_output_with_the_best_dense_net(tmp_path):
    """The headline (README, landing page): the finished CNN's EBP-P and EBP-D against the best dense net of each
    (800-800 for both here), in sentences of at most 30 words; while none is finished, the in-progress verdict."""
    write_paper_runs(tmp_path / "running")
    cnn_run(tmp_path / "running", 0, [0.05, 0.030], epochs=30)
    assert "No CNN run finished yet" in conv_report.headline(results.load_results(tmp_path / "running"))
    write_paper_runs(tmp_path)
    cnn_run(tmp_path, 0, [0.05, 0.030])
    cnn_run(tmp_path, 1, [0.05, 0.034])
    text = conv_report.headline(results.load_results(tmp_path))
    assert ("On MNIST, EBP trains the binary wide (c5x16s2-c5x32s2) to EBP-P 3.20 ± 0.28% after 2 epochs (2 seeds; "
            "not the paper's protocol).") in text
    assert "That is 1.10 ± 0.14 points above the best dense net's, [800,800] after 120 epochs, paired by seed." in text
    assert "Its deployed ±1 net (EBP-D) errs 3.20 ± 0.28%, 1.10 ± 0.14 points above" in text
    sentences = [s for s in text.split(". ") if s]
    assert max(len(s.split()) for s in sentences) <= 30


def test_one_shared_seed_is_said_to_have_no_spread(tmp_path):
    """The best dense net has one seed: the headline gives the one difference and says it has no spread, never
    "± 0.00"."""
    write_result(tmp_path, "binary-800-800", fake_result({"architecture": "800-800", "weights": "binary"}, 120, None,
                                                         "paper", 0.020))
    cnn_run(tmp_path, 0, [0.05, 0.030])
    cnn_run(tmp_path, 1, [0.05, 0.034])
    text = conv_report.headline(results.load_results(tmp_path))
    assert "That is 1.00 points above the best dense net's, [800,800] after 120 epochs, one seed paired: no spread." in text
    assert "± 0.00" not in text and "± 0.00" not in conv_report.verdict(results.load_results(tmp_path))


def test_the_best_comparator_is_chosen_among_the_nets_of_most_seeds(tmp_path):
    """A one-seed dense net below the three-seed ones is not "the best dense net": the luck of one draw would decide."""
    write_result(tmp_path, "binary-1000", fake_result({"architecture": "1000", "weights": "binary"}, 120, None,
                                                      "paper", 0.010))
    for seed in range(3):
        write_result(tmp_path, "binary-800" + (f"-seed{seed}" if seed else ""),
                     fake_result({"architecture": "800", "weights": "binary"}, 120, None, "paper", 0.020, seed=seed))
        cnn_run(tmp_path, seed, [0.05, 0.030 + 0.001 * seed])
    text = conv_report.headline(results.load_results(tmp_path))
    assert "That is 1.10 ± 0.10 points above the best dense net's, [800] after 120 epochs, paired by seed." in text


def test_the_front_page_speaks_of_one_binary_cnn_per_data_set(tmp_path):
    """A finished real-weight CNN, and a binary CNN worse than another on its data set, are left to notebook 11 (the
    verdict): the front page has room for the paper's subject, one net per data set."""
    write_paper_runs(tmp_path)
    cnn_run(tmp_path, 0, [0.05, 0.030])
    lenet = {"architecture": "c5x6s2-c5x16s2-100", "weights": "binary"}
    write_result(tmp_path, "binary-c5x6s2-c5x16s2-100", fake_result(lenet, 2, None, "named-e30", 0.04, curve=[0.05, 0.04]))
    real = {"architecture": "c5x16s2-c5x32s2", "weights": "real"}
    write_result(tmp_path, "real-c5x16s2-c5x32s2", fake_result(real, 2, None, "named-e30", 0.02, curve=[0.03, 0.02]))
    loaded = results.load_results(tmp_path)
    text = conv_report.headline(loaded)
    assert "binary wide" in text and "real wide" not in text and "lenet" not in text
    assert "EBP trains binary c5x6s2-c5x16s2-100 (lenet)" in conv_report.verdict(loaded)
    assert "EBP trains real c5x16s2-c5x32s2" in conv_report.verdict(loaded)


def test_init_schemes_are_paired_by_seed_against_the_reference(tmp_path):
    """variance1 (profile named-e30-variance1) against the reference of the same net and epochs (named-e30), seeds
    0 and 1: (5.0 − 4.0, 3.4 − 3.0) = +1.0, +0.4 points, +0.70 ± 0.42; a variance1 group without a reference of
    its epochs (named-e10-variance1) has no row."""
    for seed, (reference, variance1) in enumerate(((0.040, 0.050), (0.030, 0.034))):
        cnn_run(tmp_path, seed, [0.06, reference])
        cnn_run(tmp_path, seed, [0.07, variance1], profile="named-e30-variance1", init_scale=25.0)
    cnn_run(tmp_path, 0, [0.08], profile="named-e10-variance1", init_scale=25.0)
    (row,) = conv_report.init_rows(results.load_results(tmp_path))
    assert row["network"] == "binary wide, mnist" and row["scheme"] == "variance1" and row["finished"]
    assert row["reference EBP-D"] == "3.50 ± 0.71" and row["variance1 EBP-D"] == "4.20 ± 1.13"
    assert row["EBP-D: variance1 − reference (points)"] == "+0.70 ± 0.42 (2)"
    assert row["EBP-P: variance1 − reference (points)"] == "+0.70 ± 0.42 (2)"
