"""The comparison of EBP with its successors (reproduction.successors_report): the rows read from the records, the
Welch interval of a difference between methods, and the statements the README quotes."""
from __future__ import annotations

import random
import statistics

import pytest
from scipy import stats

from reproduction import successors_report as report
from reproduction.results import load_results

ROOT = report.sc.OUTPUT_DIR


def row(method, net="800", seed=0, deployed=2.0, predictive=None, dataset="mnist"):
    return {"method": method, "dataset": dataset, "net": net, "seed": seed, "deployed": deployed,
            "predictive": predictive}


def test_welch_difference_is_scipys_welch_interval():
    a, b = [1.0, 2.0, 3.0], [4.0, 6.0]
    d, h, df = report.welch_difference(a, b)
    reference = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert d == pytest.approx(-3.0)
    assert df == pytest.approx(32 / 19)
    assert (d - h, d + h) == pytest.approx((reference.low, reference.high), rel=1e-12)
    assert report.welch_difference([1.0], b) is None


def test_welch_interval_covers_the_true_difference_95_percent_of_the_time_with_three_seeds_each():
    """3 runs against 3, unequal spreads (as two methods' seeds are): the interval holds the true difference in
    95% ± 1.5% of 6,000 synthetic comparisons."""
    rng = random.Random(0)
    trials, covered = 6000, 0
    for _ in range(trials):
        a = [rng.gauss(2.0, 0.05) for _ in range(3)]
        b = [rng.gauss(2.5, 0.15) for _ in range(3)]
        d, h, _ = report.welch_difference(a, b)
        covered += abs(d - (-0.5)) <= h
    assert abs(covered / trials - 0.95) < 0.015


def test_differences_say_one_seed_is_not_conclusive_and_judge_three_seeds():
    rows = [row("ebp", seed=s, deployed=3.0 + 0.05 * s, predictive=2.6 + 0.05 * s) for s in range(3)]
    rows += [row("ste", seed=0, deployed=2.4)]
    rows += [row("bop", seed=s, deployed=2.0 + 0.05 * s) for s in range(3)]
    rows += [row("bayesbinn", seed=s, deployed=2.9 + 0.1 * s, predictive=1.9 + 0.05 * s) for s in range(3)]
    lines = report.differences(rows, "mnist")
    ste, bop, bayes, bayes_predictive = lines
    rows += [row("ebp-dropout", seed=s, deployed=2.2 + 0.05 * s, predictive=2.0 + 0.05 * s) for s in range(3)]
    with_dropout = report.differences(rows, "mnist")
    assert with_dropout[0::2] == lines and len(with_dropout) == 8
    assert with_dropout[3].startswith("- [800], Bop − EBP-D with dropout: -0.20 ± ")
    assert "STE / BinaryConnect − EBP-D: -0.65 points (1 seed against 3): not conclusive" in ste
    assert bop.startswith("- [800], Bop − EBP-D: -1.00 ± ") and bop.endswith("lower error than EBP")
    assert bayes.endswith("not separable from EBP")
    assert "BayesBiNN predictive − EBP-P: -0.70" in bayes_predictive and "lower error" in bayes_predictive
    assert report.differences(rows, "fashion-mnist") == []


def test_summary_counts_the_runs_and_shows_each_cell_with_its_seeds():
    rows = [row("ebp", seed=s, deployed=3.0, predictive=2.6) for s in range(3)] + [row("bop", deployed=2.5)]
    rows += [row("ebp-dropout", deployed=2.8, predictive=2.4)]
    text = report.summary(rows, expected_runs=36)
    assert "1 of the 36 successor runs finished" in text and "(other counts in brackets)" in text
    full = [row(m, seed=s, deployed=2.0 + 0.1 * s, predictive=1.9) for m in ("ebp", "bop") for s in range(3)]
    assert "mean ± SD over 3 seeds, of the deployed" in report.summary(full, expected_runs=36)
    assert "| mnist | [800] | 3.00 ± 0.00 | 2.60 ± 0.00 | 2.80 (1) | 2.40 (1) | – | 2.50 (1) | – | – |" in text
    assert "fashion-mnist |" not in text
    assert "2 of the 2 comparisons rest on one seed: not conclusive yet." in text
    assert "Welch interval" not in text  # no comparison has the seeds for one


def test_difference_table_shows_judged_rows_bold_where_the_interval_excludes_zero():
    rows = [row("ebp", seed=s, deployed=3.0 + 0.05 * s, predictive=2.6 + 0.05 * s) for s in range(3)]
    rows += [row("bop", seed=s, deployed=2.0 + 0.05 * s) for s in range(3)]
    rows += [row("bayesbinn", seed=s, deployed=2.9 + 0.1 * s, predictive=2.5 + 0.1 * s) for s in range(3)]
    rows += [row("ste", deployed=2.4), row("ebp-dropout", deployed=2.8, predictive=2.4)]
    table, judged, total = report.difference_table(rows)
    bop = report.welch_difference([2.0, 2.05, 2.1], [3.0, 3.05, 3.1])
    assert (judged, total) == (3, 8)
    assert table.splitlines()[2] == (f"| mnist | [800] | no dropout | n.c. | **{bop[0]:+.2f} ± {bop[1]:.2f}** | "
                                     f"-0.05 ± {report.welch_difference([2.9, 3.0, 3.1], [3.0, 3.05, 3.1])[1]:.2f} | "
                                     f"-0.05 ± {report.welch_difference([2.5, 2.6, 2.7], [2.6, 2.65, 2.7])[1]:.2f} |")
    assert len(table.splitlines()) == 3  # the dropout row has no comparison with seeds enough
    assert "**bold**: excludes 0" in report.summary(rows, expected_runs=36)


def test_tally_counts_each_judged_comparison_by_where_its_interval_lies():
    rows = [row("ebp", seed=s, deployed=3.0 + 0.05 * s, predictive=2.6 + 0.05 * s) for s in range(3)]
    rows += [row("bop", seed=s, deployed=2.0 + 0.05 * s) for s in range(3)]  # below EBP-D
    rows += [row("ste", seed=s, deployed=4.0 + 0.05 * s) for s in range(3)]  # above
    # BayesBiNN's ±1 net below EBP-D, its predictive not separable from EBP-P
    rows += [row("bayesbinn", seed=s, deployed=2.5 + 0.1 * s, predictive=2.5 + 0.1 * s) for s in range(3)]
    # on Fashion-MNIST, counted apart: Bop's ±1 net above EBP-D
    rows += [row(m, seed=s, deployed=d + 0.05 * s, dataset="fashion-mnist") for s in range(2)
             for m, d in (("ebp", 12.0), ("bop", 13.0))]
    rows += [row("ste", net="800-800", deployed=2.4), row("ebp", net="800-800", deployed=2.8, predictive=2.4)]
    assert report.tally(rows) == ("Two seeds or more a side, successor's error lower/higher/not separable: MNIST: "
                                  "±1 nets against EBP-D 2/1/0 of 3, BayesBiNN's predictive against EBP-P 0/0/1 of 1; "
                                  "Fashion-MNIST: ±1 nets against EBP-D 0/1/0 of 1.")
    text = report.summary(rows, expected_runs=36)
    assert report.tally(rows) in text and "1 of the 6 comparisons rest on one seed" in text
    complete = report.summary(rows[:-2], expected_runs=36)
    assert "rest on one seed" not in complete and complete.endswith("EBP ran untuned, at the paper's protocols.")


def test_rows_read_the_committed_records():
    """The committed smoke records give one row per run, their packed nets agreeing with the float evaluation; the
    committed EBP records give three seeds of each paper net on each data set."""
    successors = report.successor_rows(report.load_successors(ROOT, "smoke"))
    assert len(successors) == 12 and {r["mismatches"] for r in successors} == {0}
    assert {(r["method"], r["net"], r["dataset"]) for r in successors} == {
        (m, n, d) for m in ("ste", "bop", "bayesbinn") for n in report.NETS for d in report.EBP_PROFILES}
    ebp = load_results(report.sc.REPO / "outputs" / "runs", committed_only=True)
    for dataset in report.EBP_PROFILES:
        rows = report.ebp_rows(ebp, dataset)
        plain = [r for r in rows if r["method"] == "ebp"]
        assert sorted((r["net"], r["seed"]) for r in plain) == [(n, s) for n in report.NETS for s in range(3)]
        assert {r["net"] for r in rows if r["method"] == "ebp-dropout"} == set(report.NETS)
        assert all(r["cpu_s_to_best"] is None and r["machine"] for r in rows)
        assert statistics.fmean(r["deployed"] for r in plain) > statistics.fmean(r["predictive"] for r in plain)
