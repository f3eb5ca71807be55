"""Every cell judged: the band around ours, the computed mechanisms, the rendered mark and list."""
from __future__ import annotations

import pytest

from reproduction import agreement, results
from tests.fake_runs import cell_row, fake_result

PAPER = "paper"


def cells_of(rows, results_list, reading="sampled", masks="absent"):
    return results.table_cells(rows, results_list, PAPER, reading, masks)


def run(row, error, seed=0, curve=None, **params):
    return fake_result(row, 120 if curve is None else len(curve), None, PAPER, error, seed=seed, curve=curve,
                       **params)


def test_band_is_two_combined_standard_errors(rows):
    row = cell_row(rows, 2, "B-EBP-P", "200")  # paper 3.46
    cell = cells_of(rows, [run(row, 0.0346 + d, seed=s) for s, d in enumerate((0.0, 0.001, -0.001))])[
        results.cell_key(row)]
    judged = results.paper_band(row, cell)
    expected = 2 * (cell.uncertainty ** 2 + results.binomial_se(3.46) ** 2) ** 0.5
    assert judged["tolerance"] == pytest.approx(expected) and not judged["outside"]
    far = cells_of(rows, [run(row, 0.0246)])[results.cell_key(row)]
    assert results.paper_band(row, far)["outside"]
    assert "2.46 (-1.00) †" in results.render_table(2, rows, cells_of(rows, [run(row, 0.0246)]), PAPER)


def test_unexplained_when_no_mechanism_holds(rows):
    row = cell_row(rows, 2, "B-EBP-P", "200")
    variants = {"main": cells_of(rows, [run(row, 0.0246)])}
    text = agreement.outside_list(2, rows, variants)
    assert "in 0 of 2 finished cells" in text and "B-EBP-P 200: paper 3.46, ours 2.46 (n = 1)" in text
    assert text.endswith("unexplained.")


def test_ebp_d_rounding_and_not_converged_are_computed(rows):
    d_row, p_row = cell_row(rows, 2, "B-EBP-D", "[800,800]"), cell_row(rows, 2, "B-EBP-P", "[800,800]")
    falling = [0.60 - 0.002 * e for e in range(120)]  # 0.2 points per epoch, ends at 36.2% (paper 27.06)
    result = run(d_row, None, curve=falling)
    result["final"]["test_ebp_p"] = p_row["paper_error"] / 100  # EBP-P exactly the paper's
    variants = {"main": cells_of(rows, [result])}
    found = agreement.mechanisms(d_row, rows, variants)
    assert found[0] == "EBP-D rounding: the same runs' EBP-P agrees with the paper"
    assert found[1].startswith("not converged at epoch 120: still falling by 2.00 points per 10 epochs")


def test_a_run_too_short_for_a_trend_is_never_called_not_converged(rows):
    """The quick profile's 3 epochs fall steeply by construction: no 40-epoch slope is quoted for them."""
    d_row = cell_row(rows, 2, "B-EBP-D", "[800,800]")
    result = run(d_row, None, curve=[0.60, 0.45, 0.30])  # 150 points per 10 epochs, far above the paper's 27.06
    found = agreement.mechanisms(d_row, rows, {"main": cells_of(rows, [result])})
    assert not [m for m in found if "not converged" in m], found


def test_the_other_reading_within_the_band_explains_a_table_4_cell(rows):
    row = cell_row(rows, 4, "B-EBP-P", "144")  # paper 4.06
    variants = {"main": cells_of(rows, [run(row, 0.0282)]),
                "Table 4 held": cells_of(rows, [run(row, 0.0400, mask_reading="held")], masks="held")}
    text = agreement.outside_list(4, rows, variants)
    assert text.startswith("Table 4 (absent): the paper's number lies within our band")
    assert "mask reading: the held reading gives 4.00, within the band." in text
    assert agreement.outside_list(4, rows, variants, "Table 4 held").endswith("in 2 of 2 finished cells.")


def test_the_authors_real_weight_code_within_the_band_explains_a_real_cell(rows):
    """A real-weight cell outside the band whose run under the authors' update lies within it names that
    mechanism; the comparison table shows the paper, the spec and the variant, and the D − P gaps."""
    d_row = cell_row(rows, 2, "R-EBP-D", "[800,800]")  # paper 2.42 (R-EBP-P 2.10)
    spec = run(d_row, 0.0300)  # EBP-D 3.00 (+0.58): outside
    spec["final"]["test_ebp_p"] = 0.0210
    authors = run(d_row, 0.0245, real_update="authors")
    authors["final"]["test_ebp_p"] = 0.0212
    variants = {"main": cells_of(rows, [spec]),
                "authors": results.table_cells(rows, [authors], PAPER, real_update="authors")}
    assert "authors" not in str(variants["main"]) and cell_row(rows, 2, "B-EBP-D", "200") not in \
        [c.row for c in variants["authors"].values()]  # binary rows have no variant cells
    found = agreement.mechanisms(d_row, rows, variants)
    assert found[0] == "the authors' real-weight code gives 2.45 (n = 1), within the band"
    text = agreement.update_comparison(rows, variants)
    assert "| Table 2 R-EBP-D [800,800] | 2.42 | 3.00 (n = 1, +0.58) † | 2.45 (n = 1, +0.03) |" in text
    assert "- authors, R-EBP-D (1 cells): ours − paper +0.03 on average (spec +0.58)" in text
    assert "- Table 2 [800,800], R-EBP-D − R-EBP-P: paper +0.32; ours: spec +0.90, authors +0.33." in text
    assert agreement.update_comparison(rows, {"main": variants["main"]}) == \
        "No run of the authors' real-weight update yet."
