"""Every cell judged: the prediction band around ours, the computed mechanisms, the patterns, the rendered mark and
list, and the band's leave-one-seed-out coverage on synthetic runs and on the committed records."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import cell_row, fake_result
from scipy import stats

from reproduction import agreement, band, paper_tables, results

PAPER = "paper"
SPREAD = (0.0, 0.001, -0.001)  # three seeds, SD 0.1 points: t(2)·0.1·sqrt(1 + 1/3) = 0.497


def cells_of(rows, results_list, reading="sampled", masks="absent"):
    return results.table_cells(rows, results_list, PAPER, reading, masks)


def run(row, error, seed=0, curve=None, **params):
    return fake_result(row, 120 if curve is None else len(curve), None, PAPER, error, seed=seed, curve=curve,
                       **params)


def seeds(row, error, **params):
    """Three seeds of one cell around `error` (a fraction), SD 0.1 points."""
    return [run(row, error + d, seed=s, **params) for s, d in enumerate(SPREAD)]


def test_band_is_a_prediction_interval_for_one_run(rows):
    """The tolerance is t_{df}·s·sqrt(1 + 1/n) with s pooled over the family (no binomial or rounding term): one cell of
    three seeds gives df = 2; a paper's number 1 point away lies outside and is marked; a cell of one seed in a
    family of no other seeds has no band."""
    row = cell_row(rows, 2, "B-EBP-P", "200")  # paper 3.46
    cells = cells_of(rows, seeds(row, 0.0346))
    spreads = band.family_spreads(results.finished_errors(cells))
    judged = results.paper_band(row, cells[results.cell_key(row)], spreads)
    expected = stats.t.ppf(0.975, 2) * 0.1 * (1 + 1 / 3) ** 0.5
    assert judged["tolerance"] == pytest.approx(expected, rel=1e-6) and not judged["outside"]
    assert spreads[results.cell_key(row)].df == 2
    far = cells_of(rows, seeds(row, 0.0246))
    assert results.paper_band(row, far[results.cell_key(row)], band.family_spreads(results.finished_errors(far)))[
        "outside"]
    assert "2.46 ± 0.10 (n = 3) (-1.00) †" in results.render_table(2, rows, far, PAPER)
    single = cells_of(rows, [run(row, 0.0246)])
    assert results.paper_band(row, single[results.cell_key(row)], {}) is None
    assert "(-1.00) †" not in results.render_table(2, rows, single, PAPER)


def test_spread_is_pooled_over_the_family_only(rows):
    """s² = Σ (n_i − 1)·s_i² / Σ (n_i − 1) over the cells of one table and row; another row is another family."""
    a, b = cell_row(rows, 2, "B-EBP-P", "200"), cell_row(rows, 2, "B-EBP-P", "400")
    other = cell_row(rows, 2, "R-EBP-P", "200")
    wide = [run(b, 0.03 + d, seed=s) for s, d in enumerate((0.0, 0.003, -0.003))]  # SD 0.3 points
    cells = cells_of(rows, seeds(a, 0.0346) + wide + seeds(other, 0.02))
    spreads = band.family_spreads(results.finished_errors(cells))
    assert spreads[results.cell_key(a)] == spreads[results.cell_key(b)]  # Bartlett p = 0.26 at 3 seeds: alike
    assert spreads[results.cell_key(a)].s == pytest.approx(((0.1 ** 2 + 0.3 ** 2) / 2) ** 0.5)
    assert spreads[results.cell_key(a)].df == 4 and spreads[results.cell_key(other)].s == pytest.approx(0.1)


def test_unexplained_when_no_mechanism_holds(rows):
    row = cell_row(rows, 2, "B-EBP-P", "200")
    variants = {"main": cells_of(rows, seeds(row, 0.0246))}
    text = agreement.outside_list(2, rows, variants)
    assert "in 0 of 2 finished cells" in text and "B-EBP-P 200: paper 3.46, ours 2.46 ± 0.10 (n = 3)" in text
    assert text.endswith("unexplained.")


def test_a_variant_of_one_seed_borrows_the_main_spread(rows):
    """Table 3 analytic (one seed per cell) is judged with the main variant's spread of the same family."""
    row = cell_row(rows, 3, "B-EBP-P", "200")  # paper 3.60
    variants = {"main": cells_of(rows, seeds(row, 0.036, dropout="sampled", keep=row["keep"])),
                "Table 3 analytic": cells_of(rows, [run(row, 0.040, dropout="analytic", keep=row["keep"])],
                                             reading="analytic")}
    spreads = agreement.variant_spreads(variants, "Table 3 analytic")
    assert spreads[results.cell_key(row)].df == 2
    count = agreement.band_count(3, rows, variants, "Table 3 analytic")
    assert count.startswith("Table 3 (analytic), one seed, borrowed spread: the paper's number lies within the "
                            "band of the main variant's spread in 1 of 2 finished cells"), count
    assert "leave one seed out" not in count
    alone = {"main": cells_of(rows, [run(row, 0.040, dropout="sampled", keep=row["keep"])])}
    assert agreement.band_count(3, rows, alone) == ("Table 3 (sampled): one seed per cell gives no band, so none of "
                                                    "its 2 finished cells is judged")


def test_ebp_d_rounding_and_not_converged_are_computed(rows):
    d_row, p_row = cell_row(rows, 2, "B-EBP-D", "[800,800]"), cell_row(rows, 2, "B-EBP-P", "[800,800]")
    falling = [0.60 - 0.002 * e for e in range(120)]  # 0.2 points per epoch, ends at 36.2% (paper 27.06)
    three = [run(d_row, None, seed=s, curve=[e + d for e in falling]) for s, d in enumerate(SPREAD)]
    for result, d in zip(three, SPREAD):
        result["final"]["test_ebp_p"] = p_row["paper_error"] / 100 + d  # EBP-P the paper's, SD 0.1 points
    variants = {"main": cells_of(rows, three)}
    found = agreement.mechanisms(d_row, rows, variants)
    assert found[0] == "EBP-D rounding: the same runs' EBP-P agrees with the paper"
    assert found[1].startswith("not converged at epoch 120: still falling by 2.00 points per 10 epochs")


def test_a_run_too_short_for_a_trend_is_never_called_not_converged(rows):
    """The quick profile's 3 epochs fall steeply by construction: no 40-epoch slope is quoted for them."""
    d_row = cell_row(rows, 2, "B-EBP-D", "[800,800]")
    runs = [run(d_row, None, seed=s, curve=[0.60, 0.45, 0.30 + d]) for s, d in enumerate(SPREAD)]  # far above 27.06
    found = agreement.mechanisms(d_row, rows, {"main": cells_of(rows, runs)})
    assert not [m for m in found if "not converged" in m], found


def test_the_other_reading_within_the_band_explains_a_table_4_cell(rows):
    row = cell_row(rows, 4, "B-EBP-P", "144")  # paper 4.06
    variants = {"main": cells_of(rows, seeds(row, 0.0282)),
                "Table 4 held": cells_of(rows, seeds(row, 0.0400, mask_reading="held"), masks="held")}
    text = agreement.outside_list(4, rows, variants)
    assert text.startswith("Table 4 (absent): the paper's number lies within our 95% prediction band")
    assert "mask reading: the held reading gives 4.00, within the band." in text
    assert "in 2 of 2 finished cells; leave one seed out" in agreement.outside_list(4, rows, variants,
                                                                                    "Table 4 held")


def test_the_authors_real_weight_code_within_the_band_explains_a_real_cell(rows):
    """A real-weight cell outside the band whose run under the authors' update lies within it names that
    mechanism; the comparison table shows the paper, the spec and the variant, and the D − P gaps."""
    d_row = cell_row(rows, 2, "R-EBP-D", "[800,800]")  # paper 2.42 (R-EBP-P 2.10)
    spec = seeds(d_row, 0.0300)  # EBP-D 3.00 (+0.58), SD 0.1: outside the band of ±0.50
    for result in spec:
        result["final"]["test_ebp_p"] = 0.0210
    authors = run(d_row, 0.0245, update="authors")  # one seed: the main variant's spread
    authors["final"]["test_ebp_p"] = 0.0212
    variants = {"main": cells_of(rows, spec),
                "authors": results.table_cells(rows, [authors], PAPER, update="authors")}
    assert "authors" not in str(variants["main"]) and cell_row(rows, 2, "B-EBP-D", "200") not in \
        [c.row for c in variants["authors"].values()]  # binary rows have no variant cells
    found = agreement.mechanisms(d_row, rows, variants)
    assert found[0] == "the authors' real-weight code gives 2.45 (n = 1), within the band"
    text = agreement.update_comparison(rows, variants)
    assert "| Table 2 R-EBP-D [800,800] | 2.42 | 3.00 (n = 3, +0.58) † | 2.45 (n = 1, +0.03) |" in text
    assert "- authors, R-EBP-D (1 cell): ours − paper +0.03 on average (spec +0.58)" in text
    assert "- Table 2 [800,800], R-EBP-D − R-EBP-P: paper +0.32; ours: spec +0.90, authors +0.33." in text
    assert agreement.update_comparison(rows, {"main": variants["main"]}) == "No run of these updates yet."
    findings = agreement.update_findings(rows, variants)  # what docs/maths.md quotes: the lines, not the tables
    assert findings.splitlines() == [line for line in text.splitlines() if line.startswith("- authors")]
    assert "|" not in findings and "R-EBP-D − R-EBP-P" not in findings


def test_the_authors_binary_code_of_2015_stands_beside_the_held_reading(rows):
    """A held-reading binary cell of Table 4 outside the band, whose runs under the authors' code of 2015 (held)
    lie within it, names that mechanism; its comparison stands beside the held variant (not the main one), whose
    spread it borrows for a single seed."""
    p_row = cell_row(rows, 4, "B-EBP-P", "[361,100]")  # paper 4.96
    held = seeds(p_row, 0.0560, mask_reading="held")  # +0.64, SD 0.1: outside the band of ±0.50
    lagged = [run(p_row, error, seed=seed, mask_reading="held", update="authors-2015")
              for seed, error in ((0, 0.0500), (1, 0.0520))]  # paired with the spec's seeds: −0.60, −0.50
    variants = {"main": cells_of(rows, []), "Table 4 held": cells_of(rows, held, masks="held"),
                **agreement.update_variants(rows, lagged, PAPER)}
    assert set(variants["authors-2015 held"]) == {(4, "B-EBP-P", "[361,100]"), (4, "B-EBP-D", "[361,100]")}
    found = agreement.mechanisms(p_row, rows, variants, "Table 4 held")
    assert "the authors' binary code of 2015 gives 5.10 (n = 2), within the band" in found
    assert agreement.mechanisms(p_row, rows, {**variants, "authors-2015 held": {}}, "Table 4 held") == []
    text = agreement.update_comparison(rows, variants, ["authors-2015", "authors-2015 held"])
    assert "| cell | paper | ours, spec, Table 4 held | ours, authors-2015 held |" in text
    assert "| Table 4 B-EBP-P [361,100] | 4.96 | 5.60 (n = 3, +0.64) † | 5.10 (n = 2, +0.14) |" in text
    half = stats.t.ppf(0.975, 1) * np.std([-0.6, -0.5], ddof=1) / 2 ** 0.5
    assert f"authors-2015 held − spec = -0.55 ± {half:.2f} points (95%, 2 runs)" in text


def test_patterns_name_the_rows_on_one_side_of_the_paper(rows):
    """Every one-layer B-EBP-P cell of Table 2 below the paper makes a pattern of that depth (the row has a cell
    above it); the same runs' B-EBP-D cells, all below, make one of the whole row."""
    one_layer = ["200", "400", "600", "800", "1000"]
    runs = [r for c in one_layer for r in seeds(cell_row(rows, 2, "B-EBP-P", c),
                                               cell_row(rows, 2, "B-EBP-P", c)["paper_error"] / 100 - 0.003)]
    runs += seeds(cell_row(rows, 2, "B-EBP-P", "[200,200]"), cell_row(rows, 2, "B-EBP-P", "[200,200]")[
        "paper_error"] / 100 + 0.003)
    found = agreement.patterns(2, rows, {"main": cells_of(rows, runs)})
    assert found[0] == ("Table 2, B-EBP-P, one hidden layer: ours below the paper in all 5 cells, by 0.30 to 0.30 "
                        "points (5 of them outside the band)")  # t(12)·0.1·sqrt(4/3) = 0.25
    assert found[1].startswith("Table 2, B-EBP-D: ours below the paper in all 6 cells") and len(found) == 2


def test_leave_one_seed_out_covers_about_95_percent_of_gaussian_runs():
    """Runs drawn with a known SD: the band of two seeds (s pooled over a family of 9 cells, df = 9) holds the third
    in 95% ± 1.5% of 400 × 9 × 3 held-out runs."""
    rng = np.random.default_rng(0)
    inside = judged = 0
    for _ in range(400):
        family = {(2, "B-EBP-P", str(c)): dict(enumerate(rng.normal(3.0, 0.1, 3))) for c in range(9)}
        i, j = band.leave_one_seed_out(family)
        inside, judged = inside + i, judged + j
    assert judged == 400 * 9 * 3 and abs(inside / judged - 0.95) < 0.015, inside / judged


def test_leave_one_seed_out_coverage_of_the_committed_records(rows):
    """On the committed paper-profile runs (three seeds per cell), the band of two seeds holds the held-out seed in
    90-99% of the cells of each of Tables 2, 3 (sampled), 4 (absent) and 4 (held): measured 99/108, 100/108, 81/84,
    79/84."""
    loaded = results.results_of(results.load_results(results.RUNS_DIR, committed_only=True), PAPER)
    rows = paper_tables.read_paper_tables()
    measured = {}
    for table, reading, masks in [(2, "sampled", "absent"), (3, "sampled", "absent"), (4, "sampled", "absent"),
                                  (4, "sampled", "held")]:
        inside, judged = agreement.seed_coverage(table, results.table_cells(rows, loaded, PAPER, reading, masks))
        measured[(table, masks)] = (inside, judged)
        assert judged >= 84 and 0.90 <= inside / judged <= 0.99, (table, masks, inside, judged)
    assert measured[(2, "absent")] == (99, 108) and measured[(4, "held")] == (79, 84)


def test_in_short_answers_from_the_records_in_five_sentences(rows):
    """The In short box: the count per table, the paper's best binary and real nets beside ours, a pattern, and
    the findings; one sentence where one seed per cell gives no band; nothing before any cell has finished."""
    one_layer = ["200", "400", "600", "800", "1000"]
    runs = [r for c in one_layer for r in seeds(cell_row(rows, 2, "B-EBP-P", c),
                                               cell_row(rows, 2, "B-EBP-P", c)["paper_error"] / 100 - 0.003)]
    real = cell_row(rows, 2, "R-EBP-P", "200")
    runs += seeds(real, real["paper_error"] / 100)
    short = agreement.in_short(rows, {"main": cells_of(rows, runs)})
    assert len(short) == 4 and all(len(s.split()) <= 40 for s in short), short
    assert short[0] == ("Our 95% band for one more run holds the paper's number in 2 of 12 cells (Table 2: 2/12; "
                        "Table 3: 0/0; Table 4: 0/0).")
    assert short[1] == ("The paper's best binary net errs 3.01%, ours 2.71 ± 0.10%; its best real net 2.78%, ours "
                        "2.78 ± 0.10%.")
    assert short[2] == ("2 rows lie wholly on one side of the paper, such as Table 2 B-EBP-P: ours lower by 0.30 to "
                        "0.30 points.")
    assert short[3].startswith("Of the paper's 12 findings, our runs agree with ")
    assert agreement.in_short(rows, {"main": cells_of(rows, [])}) == []
    assert agreement.in_short(rows, {"main": cells_of(rows, [run(real, 0.03)])}) == [
        "No cell is judged yet: 2 cells have finished, with one seed each, and one seed gives no band."]
