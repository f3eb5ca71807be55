"""The band pools only cells that are alike (reproduction.band): Bartlett's test decides whether a family's spread
is pooled, split by depth, or taken per cell on its own degrees of freedom; and the split is printed."""
from __future__ import annotations

import pytest
from helpers import cell_row, fake_result
from scipy import stats

from reproduction import agreement, band, results

ONE_LAYER = ("200", "400", "600", "800", "1000")
TWO_LAYER = ("[200,200]", "[400,400]", "[600,600]", "[800,800]")
OFFSETS = (0.0, 0.1, -0.1)  # three seeds, SD 0.1 points


def family_of(wild: float | None = None) -> dict:
    """Table 2 B-EBP-P: nine cells of three seeds, SD 0.1 points, around 3% (one layer) and 2.5% (two); with
    `wild`, the [800,800] cell's seeds spread by that SD instead."""
    samples = {(2, "B-EBP-P", c): [3.0 + d for d in OFFSETS] for c in ONE_LAYER}
    samples.update({(2, "B-EBP-P", c): [2.5 + d for d in OFFSETS] for c in TWO_LAYER})
    if wild is not None:
        samples[(2, "B-EBP-P", "[800,800]")] = [2.5 + d * wild / 0.1 for d in OFFSETS]
    return samples


def test_alike_cells_are_pooled_over_the_whole_family():
    spreads = band.family_spreads(family_of())
    assert len(spreads) == 9 and len(set(spreads.values())) == 1 and spreads.splits() == {}
    pooled = spreads[(2, "B-EBP-P", "200")]
    assert (pooled.s, pooled.df, pooled.cells) == (pytest.approx(0.1), 18, 9)


def test_a_family_with_one_wild_cell_is_split():
    """One cell of SD 3 among eight of SD 0.1 (Bartlett p ~ 1e-9): the one-layer cells stay pooled (df 10), the
    two-layer cells are unalike again, so each takes its own SD on 2 degrees of freedom; the split is printed."""
    samples = family_of(wild=3.0)
    assert band.homogeneity_p(samples.values()) < 1e-6
    spreads = band.family_spreads(samples)
    assert spreads[(2, "B-EBP-P", "200")] == band.Spread(pytest.approx(0.1), 10, 5)
    assert spreads[(2, "B-EBP-P", "[800,800]")] == band.Spread(pytest.approx(3.0), 2, 1)
    assert spreads[(2, "B-EBP-P", "[200,200]")] == band.Spread(pytest.approx(0.1), 2, 1)
    p, parts = spreads.splits()[(2, "B-EBP-P")]
    assert p < 1e-6 and [g.part for g in parts] == ["one hidden layer", *TWO_LAYER]
    # the band of a quiet cell is its own, not the wild cell's: t(10)·0.1·sqrt(4/3), not t(18)·1.0·sqrt(4/3)
    judged = band.prediction_band(samples[(2, "B-EBP-P", "200")], 3.5, spreads[(2, "B-EBP-P", "200")])
    assert judged["tolerance"] == pytest.approx(stats.t.ppf(0.975, 10) * 0.1 * (4 / 3) ** 0.5) and judged["outside"]


def test_a_depth_that_is_alike_within_itself_is_pooled_apart(rows):
    """Two-layer cells of SD 1 among one-layer cells of SD 0.1: the family splits by depth, each depth pooled; the
    tables' count names the split."""
    samples = family_of()
    samples.update({(2, "B-EBP-P", c): [2.5 + 10 * d for d in OFFSETS] for c in TWO_LAYER})
    spreads = band.family_spreads(samples)
    assert spreads[(2, "B-EBP-P", "[200,200]")] == band.Spread(pytest.approx(1.0), 8, 4)
    assert spreads[(2, "B-EBP-P", "1000")] == band.Spread(pytest.approx(0.1), 10, 5)
    runs = [fake_result(cell_row(rows, 2, "B-EBP-P", c), 120, None, "paper", e / 100, seed=s)
            for (_, _, c), errors in samples.items() for s, e in enumerate(errors)]
    cells = results.table_cells(rows, runs, "paper")
    text = agreement.outside_list(2, rows, {"main": cells})
    p = stats.bartlett(*samples.values()).pvalue  # 0.00079: three seeds a cell test weakly, SD 1 against 0.1
    assert (f"- Table 2, B-EBP-P: cell SDs unalike (Bartlett p = {p:.2g} < 0.05), not pooled: one hidden layer "
            "pooled (5 cells, s = 0.10, df = 10); two hidden layers pooled (4 cells, s = 1.00, df = 8).") in text

