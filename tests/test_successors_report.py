"""The comparison of EBP with its successors (reproduction.successors_report): the rows read from the records, the
Welch interval of a difference between methods, and the statements the README quotes."""
from __future__ import annotations

import random
import statistics

import numpy as np
import pytest
from scipy import stats

from reproduction import paired, successors_plots
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
    assert "| mnist | [800] | 3.00 ± 0.00 | 2.60 ± 0.00 | 2.80 (1) | 2.40 (1) |" in text  # EBP at the paper's protocols
    assert "| mnist | [800] | – | 2.50 (1) | – | – |" in text  # the successors
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
    assert f"the table: the notebook). {report.tally(rows)}" in report.summary(rows, expected_runs=36)


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
    assert "rest on one seed" not in complete and complete.endswith(report.WHAT_EBP_TUNES)
    assert "no hyperparameter" not in complete and "untuned" not in complete


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


def tuned_case(rng_seed=3):
    """Synthetic per-image predictions on 4,000 images and the rows they give: STE (3 seeds) errs more than tuned
    EBP-D (3 seeds), Bop has one seed, BayesBiNN's ±1 net errs like EBP-D; the paper-protocol EBP errs most."""
    rng = np.random.default_rng(rng_seed)
    labels = rng.integers(0, 10, 4000)
    hard = rng.random(4000)  # image difficulty shared by every method

    def wrong(p):
        return np.where(hard + 0.3 * rng.random(4000) < p * 1.3, (labels + 1) % 10, labels).astype(np.uint8)
    plan = {"ste": (0.05, 3), "bop": (0.04, 1), "bayesbinn": (0.03, 3), "ebp-tuned": (0.03, 3)}
    sides, rows = {}, []
    for method, (p, seeds) in plan.items():
        predictions = np.stack([wrong(p) for _ in range(seeds)])
        sides[paired.output_label(method, "deployed")] = {"seeds": list(range(seeds)), "predictions": predictions}
        rows += [row(method, seed=s, deployed=100 * float(np.mean(predictions[s] != labels))) for s in range(seeds)]
    rows += [row("ebp", seed=s, deployed=8.0 + 0.05 * s, predictive=7.0) for s in range(3)]
    pairs = paired.pair_rows({("mnist", "800"): sides}, {"mnist": labels}, n_boot=0)
    return rows, pairs


def test_tuned_comparisons_judge_by_the_interval_over_images_and_seeds_and_say_what_is_missing():
    rows, pairs = tuned_case()
    found = {(c["method"], c["ebp"]): c for c in report.tuned_comparisons(rows, pairs)}
    ste, bop, bayes = (found[m, "ebp-tuned"] for m in ("ste", "bop", "bayesbinn"))
    assert ste["verdict"] == "higher" and ste["images_and_seeds"][0] > 0 and ste["paper_verdict"] == "lower"
    assert bop["verdict"] == "one seed: no verdict" and bop["welch"] is None and bop["seeds"] == [1, 3]
    assert bayes["verdict"] == "cannot be separated"
    assert found["ste", "ebp-tuned-dropout"]["verdict"] == "not yet run"
    assert ("bayesbinn", "ebp-tuned") in found and len(found) == 6  # the predictive: no rows yet, no comparison
    # the seed means of the rows and the per-image predictions give one difference; the interval holds it
    for c in (ste, bayes):
        pair = paired.oriented(pairs, "mnist", "800", c["method"], "ebp-tuned-D")
        assert pair["difference"] == pytest.approx(c["difference"], abs=1e-9)
        assert c["images_and_seeds"][0] < c["difference"] < c["images_and_seeds"][1]
        assert c["welch"][0] < c["difference"] < c["welch"][1]
    assert ste["ranks"][:2] == (0.0, 9) and ste["ranks"][3] == pytest.approx(0.1)  # every STE seed above
    # BayesBiNN's predictive keeps no per-image predictions: Welch's interval of the seeds' errors, said so
    for r in rows:
        if r["method"] in ("bayesbinn", "ebp-tuned"):
            r["predictive"] = (2.0 if r["method"] == "bayesbinn" else 1.5) + 0.05 * r["seed"]
    predictive = next(c for c in report.tuned_comparisons(rows, pairs) if c["output"] == "predictive")
    assert predictive["verdict"] == "higher on this test set only" and predictive["images_and_seeds"] is None
    assert predictive["welch"] == pytest.approx([0.5 - report.welch_difference([2.0, 2.05, 2.1], [1.5, 1.55, 1.6])[1],
                                                  0.5 + report.welch_difference([2.0, 2.05, 2.1], [1.5, 1.55, 1.6])[1]])
    assert "| **+0.50 ± " in report.tuned_difference_table(report.tuned_comparisons(rows, pairs))


def test_an_interval_over_only_some_of_a_sides_seeds_is_not_used():
    """Where per-image predictions exist for 2 of BayesBiNN's 3 seeds, the images-and-seeds interval is of another
    mean than the rows' difference: the comparison falls back to Welch and says so."""
    rows, pairs = tuned_case()
    partial = [{**r, "seeds": [2, 3]} if {r["a"], r["b"]} == {"bayesbinn", "ebp-tuned-D"} else r for r in pairs]
    bayes = next(c for c in report.tuned_comparisons(rows, partial) if c["method"] == "bayesbinn")
    assert bayes["images_and_seeds"] is None and bayes["verdict"].endswith(report.WELCH_ONLY)
    assert bayes["seeds"] == [3, 3]


def test_verdict_sentences_and_the_reversal_are_generated_from_the_intervals():
    rows, pairs = tuned_case()
    comparisons = report.tuned_comparisons(rows, pairs)
    lines = report.verdict_sentences(comparisons)
    assert lines[0] == ("MNIST [800], EBP tuned (3 seeds): STE higher, Bop one seed: no verdict, BayesBiNN "
                        "cannot be separated (paper protocol: lower, n.c., lower).")
    assert lines[1] == "EBP tuned, dropout 0.8 not yet run on MNIST [800]."
    assert report.reversal_sentence(comparisons) == (
        "MNIST ±1 nets against EBP-D at the paper's protocol: 2 of 2 lower, 0 higher. Against EBP tuned like them: 0 "
        "held, 1 reversed, 1 moved to or from cannot be separated.")
    # tuned EBP with one seed, below every successor: no verdict, and that seed points the other way in both
    one = [r for r in rows if r["method"] != "ebp-tuned"] + [row("ebp-tuned", deployed=0.0)]
    assert report.reversal_sentence(report.tuned_comparisons(one, pairs)).endswith(
        "Against EBP tuned like them: 2 on one seed (no verdict), pointing the other way in 2.")
    assert "not yet run" in report.reversal_sentence([], "fashion-mnist")
    table = report.tuned_table(comparisons)
    assert "| mnist | [800] | STE − EBP-D | " in table and "| 3 and 3 | 0 of 9, 0.10 (0.10) | higher |" in table
    assert "| mnist | [800] | Bop − EBP-D | 1 and 3 | – | one seed: no verdict |" in table
    text = report.summary(rows, expected_runs=36, pairs=pairs)
    assert "3 of its 24 runs finished" in text and lines[0] in text
    assert f"| mnist | [800] | no dropout | **{next(c for c in comparisons if c['method'] == 'ste')['difference']:+.2f} ± " \
        in text and "(1 seed)" in text
    brief = report.brief(rows, expected_runs=36, pairs=pairs)  # the front page: the equal-terms table only
    assert report.tuned_difference_table(comparisons) in brief and report.reversal_sentence(comparisons) in brief
    assert "Runs finished: 7 of the 36 successor runs, 3 of the 24 tuned EBP runs." in brief
    assert "EBP at the paper's protocols:" not in brief and "summary.md" in brief and len(brief) < len(text) / 2
    untuned = [r for r in rows if r["method"] not in report.TUNED_EBP]
    assert "tuned like the successors is not yet run" in report.brief(untuned, expected_runs=36)
    assert "At the paper's protocol" not in report.in_short(rows)  # no tuned run: the box says so
    assert "EBP tuned like them is not yet run." in report.in_short(rows)
    assert ("the ±1 nets: 0 lower, 1 higher, 1 not separable, 1 on one seed (1 of 4 data sets × nets run)."
            in report.in_short(rows, comparisons))


def full_row(method, unit_cpu, seed=0, dataset="mnist", net="800"):
    r = {**row(method, net, seed, 2.0, 1.9, dataset), "s_per_epoch": 10.0, "s_to_best": 1200.0,
         "cpu_s_per_epoch": 4.0 if unit_cpu else None, "cpu_s_to_best": 120.0 if unit_cpu else None,
         "best_epoch": 30, "epochs_to_target": 5, "machine": "AMD EPYC + Intel Xeon", "epochs_done": 45,
         "chosen": {"preprocessing": "unit", "init_scale": 784.0}, "n_tuned": 0 if method == "ebp" else 2,
         "mismatches": None if method == "ebp" else 0, "nll": None if method == "ebp" else 0.1, "ece": None}
    return r


def test_cost_table_shows_one_unit_per_row_and_says_which():
    rows = [full_row("ebp", False), full_row("ebp-tuned", True), full_row("ste", True),
            {**full_row("bop", True), "cpu_s_to_best": None}]  # one record without CPU time: the group in wall s
    lines = report.cost_table(rows, "mnist").splitlines()
    assert lines[2] == "| EBP (B-EBP-D / -P) | [800] | 0 | 10.0 | 1200 | wall s | 30 | 5 |"
    assert lines[3] == "| EBP tuned (D / P) | [800] | 0 | 4.0 | 120 | core-s | 30 | 5 |"
    assert " 10.0 | 1200 | wall s |" in lines[5]
    # the machines, seeds, grid size and packed mismatches in a table of their own; the errors in another
    runs = report.runs_table(rows, "mnist").splitlines()
    assert runs[0] == "| method | net | seeds | tuned | packed mismatches | machine |"
    assert runs[2] == "| EBP (B-EBP-D / -P) | [800] | 0 | 0 | – | AMD EPYC, Intel Xeon |"
    assert runs[4] == "| STE / BinaryConnect | [800] | 0 | 2 | 0 | AMD EPYC, Intel Xeon |"
    errors = report.table(rows, "mnist").splitlines()
    assert errors[0] == "| method | net | deployed ±1 net (%) | predictive (%) | NLL | ECE |"
    assert errors[2] == "| EBP (B-EBP-D / -P) | [800] | 2.00 | 1.90 | – | – |" and "| 0.10 | – |" in errors[4]
    assert report.choices_table(rows).splitlines()[2] == "| mnist | [800] | ebp-tuned | 0 | unit | 784 | 30 | 45 |"
    assert report.choices_table(rows[:1]) == "EBP tuned like the successors: not yet run."


def test_calibration_plot_draws_tuned_ebp_p():
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    bins = {"bins": 3, "count": [0, 10, 90], "confidence": [None, 0.5, 0.95], "accuracy": [None, 0.4, 0.97]}
    rows = [{**row(m), "reliability": bins} for m in ("ste", "ebp-tuned")]
    fig, ax = plt.subplots()
    successors_plots.calibration_plot(ax, rows, "mnist")
    labels = [line.get_label() for line in ax.get_lines()]
    assert "EBP tuned (EBP-P)" in labels and "STE / BinaryConnect" in labels
    assert list(ax.get_lines()[labels.index("EBP tuned (EBP-P)")].get_xdata()) == [0.5, 0.95]
    plt.close(fig)
