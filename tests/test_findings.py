"""The paper's findings judged by paired differences (reproduction.findings): one comparison decided by the spread
of its per-seed differences, the paper's single runs with our spread, every/most verdicts,
pairing against crossing seeds, the summary and details per variant, and the findings on Fashion-MNIST with its
own bar."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import cell_row, fake_result
from scipy import stats

from reproduction import band
from reproduction.findings import (
    Comparison,
    Finding,
    Measured,
    describe_verdict,
    finding_details,
    findings_brief,
    findings_by_dataset,
    findings_summary,
    judge,
    our_values,
    paper_findings,
    paper_values,
    verdict,
)
from reproduction.paper_tables import dataset_rows
from reproduction.results import Cell, cell_key


def test_a_comparison_is_decided_by_its_paired_differences():
    """d = worse − better against t_{n−1}·s_d/sqrt(n), s_d the SD of the per-seed differences: two cells whose seeds
    spread by 0.5 points but move together are decided; the same means with unpaired seeds are not. A side may be
    the best of several cells or a fixed error; a missing cell leaves it not run."""
    values = {"a": Measured({0: 2.0, 1: 2.5, 2: 1.5}), "b": Measured({0: 2.3, 1: 2.8, 2: 1.8}),
              "c": Measured({0: 2.3, 1: 1.8, 2: 2.8}), "d": Measured({0: 1.9, 1: 1.95, 2: 1.85})}

    def decide(better, worse):
        return judge(Comparison("x", better, worse), values)
    paired = decide(("a",), ("b",))  # every seed 0.3 apart: s_d = 0, decided at any spread
    assert paired["status"] == "supports" and paired["tolerance"] == pytest.approx(0.0, abs=1e-12)
    assert decide(("b",), ("a",))["status"] == "contradicts"
    crossed = decide(("a",), ("c",))  # the same 0.3 on average, differences +0.3, −0.7, +1.3: s_d = 1.0
    expected = stats.t.ppf(0.975, 2) * 1.0 / 3 ** 0.5
    assert crossed["status"] == "within tolerance" and crossed["tolerance"] == pytest.approx(expected)
    best = decide(("b", "c"), ("a", "d"))  # best 2.3 (b, c tie: the first) against best 1.9 (d)
    assert best["worse"][1] == "d" and best["d"] == pytest.approx(1.9 - 2.3)
    fixed = decide(("d",), 2.25)  # 2.25 − d per seed: SD 0.05
    assert fixed["status"] == "supports" and fixed["tolerance"] == pytest.approx(stats.t.ppf(0.975, 2) * 0.05
                                                                                 / 3 ** 0.5)
    assert decide(("a", "missing"), ("b",))["status"] == "not run yet"


def test_the_papers_single_runs_take_our_paired_spread():
    """The paper's d is judged against t_{n−1}·s_d (one run each, s_d from our seeds of the same cells), no
    rounding term (its errors are counts of 10,000 images, exact at two decimals); with one seed per cell, the
    cells' spreads combine; with none, nothing is decided (infinite tolerance)."""
    ours = {(2, "B-EBP-P", "200"): Measured({0: 3.0, 1: 3.2, 2: 3.1}),
            (2, "B-EBP-P", "400"): Measured({0: 2.8, 1: 3.1, 2: 3.0})}
    paper = {key: Measured({"paper": m.mean}) for key, m in ours.items()}
    comparison = Comparison("x", ((2, "B-EBP-P", "400"),), ((2, "B-EBP-P", "200"),))
    judged = judge(comparison, paper, ours)
    s_d = float(np.std([0.2, 0.1, 0.1], ddof=1))
    assert judged["tolerance"] == pytest.approx(stats.t.ppf(0.975, 2) * s_d)
    single = {key: Measured({0: m.by_seed[0]}) for key, m in ours.items()}
    assert judge(comparison, single)["tolerance"] == float("inf")
    families = {key: band.Spread(0.1, 10) for key in ours}
    fallback = judge(comparison, single, single, families)
    assert fallback["tolerance"] == pytest.approx(stats.t.ppf(0.975, 10) * 0.1 * 2 ** 0.5)


def test_every_and_most_verdicts():
    """every: agree only if every comparison supports, disagree if any contradicts; most: agree if more than
    half support, disagree if at least half contradict; anything else inconclusive."""
    values = {"lo": Measured({0: 1.0, 1: 1.01}), "hi": Measured({0: 2.0, 1: 2.02}), "mid": Measured({0: 1.01, 1: 1.0})}
    sup, con, tie = Comparison("s", ("lo",), ("hi",)), Comparison("c", ("hi",), ("lo",)), \
        Comparison("t", ("lo",), ("mid",))
    gone = Comparison("g", ("lo",), ("absent",))

    def word(quantifier, *comparisons):
        return verdict(Finding("f", "here", quantifier, comparisons), values)["verdict"]
    assert [word("every", sup, sup), word("every", sup, con), word("every", sup, tie), word("every", sup, gone)] == \
        ["agree", "disagree", "inconclusive", "inconclusive"]
    assert [word("most", sup, sup, con), word("most", sup, con), word("most", sup, tie, tie), word("most", gone)] == \
        ["agree", "disagree", "inconclusive", "not run yet"]
    v = verdict(Finding("f", "here", "every", (sup, con, tie, gone)), values)
    assert describe_verdict(v) == "disagree (1 ✓, 1 ✗, 1 ~, 1 not run of 4)"


PAPER_VERDICTS = ["inconclusive", "agree", "inconclusive", "agree", "agree", "inconclusive", "disagree",
                  "inconclusive", "agree", "inconclusive", "agree", "inconclusive"]


def offsets(k: int) -> np.ndarray:
    """Three seeds' offsets (points) of cell number k: drawn with SD 0.1, centred (their mean is 0)."""
    drawn = np.random.default_rng(k).normal(0.0, 0.1, 3)
    return drawn - drawn.mean()


def paper_as_ours(rows, drop=()):
    """Cells holding the paper's own numbers as the mean of three finished seeds (offsets), each run's EBP-P and
    EBP-D the same (except the run ids in `drop`)."""
    cells = {}
    for r in rows:
        if r["run_id"] not in drop:
            k = sorted({x["run_id"] for x in rows}).index(r["run_id"])
            cells[cell_key(r)] = Cell(r, [fake_result(r, 120, None, "paper", (r["paper_error"] + d) / 100, seed=s)
                                          for s, d in enumerate(offsets(k))])
    return cells


def test_the_papers_own_numbers_judged_by_the_same_rule(rows):
    """The paper's numbers, with the spread of three seeds around each of them (paper_as_ours): its own Table 2
    contradicts Summary (3) in 3 of 8 comparisons. Ours, the same means from three seeds, are judged with
    t·s_d/sqrt(3) and no rounding: never a wider tolerance than the paper's single runs. With nothing run, every
    finding is 'not run yet'."""
    findings = paper_findings()
    assert len(findings) == 12 and findings[4].title.startswith("(5) Spatial filtering does not improve BMNNs")
    ours_values = our_values(paper_as_ours(rows))
    paper = [verdict(f, paper_values(rows), ours_values) for f in findings]
    assert [v["verdict"] for v in paper] == PAPER_VERDICTS
    assert describe_verdict(paper[2]) == "inconclusive (1 ✓, 3 ✗, 4 ~ of 8)"
    assert paper[4]["judged"][0]["d"] == pytest.approx(3.56 - 2.37)  # best binary: Table 4 B-EBP-D 225, Table 2
    ours = [verdict(f, ours_values) for f in findings]
    pairs = [(o, p) for vo, vp in zip(ours, paper) for o, p in zip(vo["judged"], vp["judged"])]
    assert all(o["tolerance"] < p["tolerance"] or o["tolerance"] == p["tolerance"] == 0 for o, p in pairs)
    assert len(pairs) == 192
    assert [verdict(f, {})["verdict"] for f in findings] == ["not run yet"] * 12


def test_pairing_decides_what_moves_together(rows):
    """Summary (5) on the best binary cells of Tables 2 and 4, 0.6 points apart with seeds spread by 0.5: seeds that
    move together (the same offset per seed) decide it; the same seeds crossed leave it within tolerance."""
    t2, t4 = cell_row(rows, 2, "B-EBP-P", "800"), cell_row(rows, 4, "B-EBP-P", "256")
    finding = paper_findings()[4]
    cells = paper_as_ours(rows)

    def with_seeds(row, errors):
        return Cell(row, [fake_result(row, 120, None, "paper", e / 100, seed=s) for s, e in enumerate(errors)])
    together = {**cells, cell_key(t2): with_seeds(t2, [1.5, 2.0, 2.5]), cell_key(t4): with_seeds(t4, [2.1, 2.6, 3.1])}
    crossed = {**cells, cell_key(t2): with_seeds(t2, [1.5, 2.0, 2.5]), cell_key(t4): with_seeds(t4, [3.1, 2.6, 2.1])}
    assert verdict(finding, our_values(together))["verdict"] == "agree"
    judged = verdict(finding, our_values(crossed))
    assert judged["verdict"] == "inconclusive" and judged["judged"][0]["d"] == pytest.approx(0.6)
    assert judged["judged"][0]["tolerance"] == pytest.approx(stats.t.ppf(0.975, 2) * 1.0 / 3 ** 0.5)


def test_unfinished_runs_do_not_count_in_findings(rows):
    """A run still training is shown in its table but left out of the findings: its comparisons are not run."""
    cells = paper_as_ours(rows)
    row = cell_row(rows, 4, "B-EBP-D", "225")
    cells[cell_key(row)] = Cell(row, [fake_result(row, 30, None, "paper", 0.0356, epochs=120)])
    judged = verdict(paper_findings()[4], our_values(cells))
    assert judged["verdict"] == "not run yet"


def test_findings_summary_and_details_show_each_variant_where_it_matters(rows):
    """The summary has one line per finding, the paper's verdict and ours per variant ('same' where a variant's
    reading does not touch the finding's tables); the details list the comparisons that are not ✓ everywhere."""
    main = paper_as_ours(rows)
    held = paper_as_ours(rows, drop={r["run_id"] for r in rows if r["table"] == 4})
    variants = {"main": main, "Table 3 analytic": main, "Table 4 held": held}
    summary = findings_summary(rows, variants).splitlines()
    assert len(summary) == 2 + 12 and summary[0].startswith("| finding | every/most | paper's numbers | ours |")
    line5 = next(line for line in summary if line.startswith("| (5) "))
    assert line5.endswith("| **agree (1 ✓, 0 ✗, 0 ~ of 1)** | same | **not run yet** |"), line5
    degrade = next(line for line in summary if line.startswith("| Without dropout"))
    assert degrade.endswith("| same | same |")
    details = finding_details(paper_findings()[6], rows, variants)
    assert "| B-EBP-P 200: Table 3 < Table 2 | ~ -0.14 (tol 0.27) | ~ -0.14 (tol 0.15) | ~ -0.14 (tol 0.15) |" \
        in details, details  # the paper: t(2)·s_d, no rounding; ours: t(2)·s_d/sqrt(3)
    assert "| 15 more comparisons | ✓ | ✓ | ✓ |" in details and "Table 4 held" not in details


def test_findings_are_judged_on_fashion_mnist_with_its_own_bar(rows):
    """The same findings and rule on each data set, with the data set's "works well" bar (5% MNIST, 15%
    Fashion-MNIST); with no Fashion-MNIST run finished every verdict there is 'not run yet'; the details of another
    data set have no paper column."""
    assert paper_findings()[0].title.startswith("(1) BMNNs trained by EBP work well (best B-EBP-P below 5%)")
    fashion_findings = paper_findings("fashion-mnist")
    assert fashion_findings[1].comparisons[0] == Comparison("Table 2: B-EBP-P 200 < 15%",
                                                               ((2, "B-EBP-P", "200"),), 15.0)
    assert [f.comparisons[1:] for f in fashion_findings[2:]] == [f.comparisons[1:] for f in paper_findings()[2:]]
    with pytest.raises(ValueError, match="unknown data set 'cifar'"):
        paper_findings("cifar")
    summary = findings_by_dataset({"mnist": paper_as_ours(rows), "fashion-mnist": {}}).splitlines()
    assert summary[0] == ("| finding | every/most | ours, MNIST (works well: < 5%) | ours, Fashion-MNIST (works "
                          "well: < 15%) |") and len(summary) == 2 + 12
    assert all(line.endswith("| **not run yet** |") for line in summary[2:])
    assert summary[2].endswith("| **agree (6 ✓, 0 ✗, 0 ~ of 6)** | **not run yet** |"), summary[2]
    fashion_rows = dataset_rows(rows, "fashion-mnist")
    b200 = cell_row(fashion_rows, 2, "B-EBP-P", "200")
    fashion = {cell_key(b200): Cell(b200, [fake_result(b200, 120, None, "paper", 0.125,
                                                             dataset="fashion-mnist")])}
    judged = verdict(fashion_findings[1], our_values(fashion))
    assert judged["counts"] == {"supports": 0, "contradicts": 0, "within tolerance": 1, "not run yet": 1}  # one seed
    details = finding_details(fashion_findings[1], fashion_rows, {"Fashion-MNIST": fashion})
    assert "| comparison | ours |" in details and "| Table 2: B-EBP-P 200 < 15% | ~ +2.50 (no seed spread) |" in details
    assert "| Table 3: B-EBP-P 200 < 15% | · not run yet |" in details  # a short list shows every line
    d200 = cell_row(fashion_rows, 2, "B-EBP-D", "200")  # the same run's EBP-D output
    fashion[cell_key(d200)] = Cell(d200, fashion[cell_key(b200)].pooled)
    long = finding_details(fashion_findings[10], fashion_rows, {"Fashion-MNIST": fashion}).splitlines()
    assert long[-2:] == ["| Table 2 200: B-EBP-P < B-EBP-D | ~ +0.00 (no seed spread) |",
                         "| 49 comparisons not run yet | · |"], long  # a partial grid's unrun comparisons, counted


def test_the_brief_findings_table_has_the_paper_and_ours_only(rows):
    """One line per finding: its title, every/most, the verdict on the paper's numbers and on ours (main)."""
    main = paper_as_ours(rows)
    brief = findings_brief(rows, main).splitlines()
    assert brief[0] == "| finding | every/most | paper's numbers | ours |" and len(brief) == 2 + 12
    full = findings_summary(rows, {"main": main}).splitlines()
    line5 = next(line for line in brief if line.startswith("| (5) "))
    assert line5.endswith("| agree (1 ✓, 0 ✗, 0 ~ of 1) | agree (1 ✓, 0 ✗, 0 ~ of 1) |"), line5
    assert next(line for line in full if line.startswith("| (5) ")).endswith("| **agree (1 ✓, 0 ✗, 0 ~ of 1)** |")
