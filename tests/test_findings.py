"""The paper's findings judged with a tolerance (reproduction.findings): one comparison decided only beyond two
standard errors, every/most verdicts, the paper's own numbers judged by the same rule, the seeds' spread widening
the tolerance, the summary and details per variant, and the findings on Fashion-MNIST with its own bar."""
from __future__ import annotations

import pytest
from fake_runs import cell_row, fake_result

from reproduction.findings import (
    Comparison,
    Finding,
    describe_verdict,
    finding_details,
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


def test_a_comparison_is_decided_only_beyond_two_standard_errors():
    """d = worse − better against 2·sqrt(u_better² + u_worse²): supports, contradicts or within tolerance; a side
    may be the best of several cells or a fixed error (u = 0); a missing cell leaves it not run."""
    values = {"a": (2.0, 0.1), "b": (2.5, 0.1), "c": (2.2, 0.1), "d": (1.9, 0.3)}

    def decide(better, worse):
        return judge(Comparison("x", better, worse), values)
    assert decide(("a",), ("b",))["status"] == "supports"  # d = 0.5 > 2·sqrt(0.02) = 0.28
    assert decide(("b",), ("a",))["status"] == "contradicts"
    assert decide(("a",), ("c",))["status"] == "within tolerance"  # d = 0.2 < 0.28
    assert decide(("d",), ("b",))["status"] == "within tolerance"  # d = 0.6 < 2·sqrt(0.1) = 0.63: the SD counts
    best = decide(("b", "c"), ("a", "d"))  # best 2.2 (c) against best 1.9 (d)
    assert best["better"][2] == "c" and best["worse"][2] == "d" and best["d"] == pytest.approx(-0.3)
    fixed = decide(("a",), 2.25)
    assert fixed["status"] == "supports" and fixed["tolerance"] == pytest.approx(0.2)
    assert decide(("a", "missing"), ("b",))["status"] == "not run yet"


def test_every_and_most_verdicts():
    """every: agree only if every comparison supports, disagree if any contradicts; most: agree if more than
    half support, disagree if at least half contradict; anything else inconclusive."""
    values = {"lo": (1.0, 0.01), "hi": (2.0, 0.01), "mid": (1.0, 0.01)}
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


PAPER_VERDICTS = ["inconclusive", "agree", "inconclusive", "inconclusive", "agree", "inconclusive", "inconclusive",
                  "agree", "agree", "inconclusive", "inconclusive", "inconclusive"]


def paper_as_ours(rows, drop=()):
    """Cells holding the paper's own numbers as finished single-seed runs (except the run ids in `drop`)."""
    cells = {}
    for r in rows:
        if r["run_id"] not in drop:
            result = fake_result(r, 120, None, "paper", r["paper_error"] / 100)
            cells[cell_key(r)] = Cell(r, [result])
    return cells


def test_the_papers_own_numbers_judged_by_the_same_rule(rows):
    """The paper's numbers with their binomial SE: (2), (5) and the width of B-EBP-D hold; every other finding is
    inconclusive (e.g. dropout improves 13 of its 36 cells beyond tolerance, none is worse beyond it), and its own
    Table 2 contradicts Summary (3) in 3 of 8 comparisons. Fed the same numbers as ours (one seed each), our
    verdicts are the paper's; with nothing run, every finding is 'not run yet'."""
    findings = paper_findings()
    assert len(findings) == 12 and findings[4].title.startswith("(5) Spatial filtering does not improve BMNNs")
    paper = [verdict(f, paper_values(rows)) for f in findings]
    assert [v["verdict"] for v in paper] == PAPER_VERDICTS
    assert describe_verdict(paper[6]) == "inconclusive (13 ✓, 0 ✗, 23 ~ of 36)"
    assert describe_verdict(paper[2]) == "inconclusive (2 ✓, 3 ✗, 3 ~ of 8)"
    assert paper[4]["judged"][0]["d"] == pytest.approx(3.56 - 2.37)  # best binary: Table 4 B-EBP-D 225, Table 2
    ours = [verdict(f, our_values(paper_as_ours(rows))) for f in findings]
    assert [v["counts"] for v in ours] == [v["counts"] for v in paper]
    assert [verdict(f, {})["verdict"] for f in findings] == ["not run yet"] * 12


def test_seed_spread_widens_the_tolerance(rows):
    """The same two means are decided with one seed (binomial SE only) and within tolerance when three seeds
    per cell spread them (SD 0.5): Summary (5) on the best binary cells of Tables 2 and 4."""
    t2, t4 = cell_row(rows, 2, "B-EBP-P", "800"), cell_row(rows, 4, "B-EBP-P", "256")
    finding = paper_findings()[4]
    cells = paper_as_ours(rows)

    def with_seeds(row, errors):
        return Cell(row, [fake_result(row, 120, None, "paper", e / 100, seed=s) for s, e in enumerate(errors)])
    one = {**cells, cell_key(t2): with_seeds(t2, [2.0]), cell_key(t4): with_seeds(t4, [2.6])}
    three = {**cells, cell_key(t2): with_seeds(t2, [1.5, 2.0, 2.5]), cell_key(t4): with_seeds(t4, [2.1, 2.6, 3.1])}
    assert verdict(finding, our_values(one))["verdict"] == "agree"
    judged = verdict(finding, our_values(three))
    assert judged["verdict"] == "inconclusive" and judged["judged"][0]["d"] == pytest.approx(0.6)
    assert judged["judged"][0]["tolerance"] > 2 * (2 * 0.5 ** 2) ** 0.5


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
    assert "| B-EBP-P 200: Table 3 < Table 2 | ~ -0.14 (tol 0.52) | ~ -0.14 (tol 0.52) | ~ -0.14 (tol 0.52) |" \
        in details
    assert "| 13 more comparisons | ✓ | ✓ | ✓ |" in details and "Table 4 held" not in details


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
    assert summary[2].endswith("| **inconclusive (5 ✓, 0 ✗, 1 ~ of 6)** | **not run yet** |"), summary[2]
    fashion_rows = dataset_rows(rows, "fashion-mnist")
    b200 = cell_row(fashion_rows, 2, "B-EBP-P", "200")
    fashion = {cell_key(b200): Cell(b200, [fake_result(b200, 120, None, "paper", 0.125,
                                                             dataset="fashion-mnist")])}
    judged = verdict(fashion_findings[1], our_values(fashion))
    assert judged["counts"] == {"supports": 1, "contradicts": 0, "within tolerance": 0, "not run yet": 1}
    details = finding_details(fashion_findings[1], fashion_rows, {"Fashion-MNIST": fashion})
    assert "| comparison | ours |" in details and "| Table 2: B-EBP-P 200 < 15% | ✓ +2.50 (tol 0.66) |" in details
    assert "| Table 3: B-EBP-P 200 < 15% | · not run yet |" in details  # a short list shows every line
    d200 = cell_row(fashion_rows, 2, "B-EBP-D", "200")  # the same run's EBP-D output
    fashion[cell_key(d200)] = Cell(d200, fashion[cell_key(b200)].pooled)
    long = finding_details(fashion_findings[10], fashion_rows, {"Fashion-MNIST": fashion}).splitlines()
    assert long[-2:] == ["| Table 2 200: B-EBP-P < B-EBP-D | ~ +0.00 (tol 0.94) |",
                         "| 49 comparisons not run yet | · |"], long  # a partial grid's unrun comparisons, counted
