"""The mechanism table of the one-layer binary offset (reproduction.mechanisms): each mechanism's runs paired by seed
with the paper profile's run of the same configuration, rendered with 0, 1 or 3 seeds, and the verdict."""
from __future__ import annotations

import pytest
from helpers import fake_result
from scipy import stats

from reproduction import mechanisms, paper_tables, parameters, results

OFFSETS = (0.0, 0.001, -0.001)  # the paper profile's three seeds, SD 0.1 points


def net(weights, architecture):
    return {"weights": weights, "architecture": architecture}


def paper_runs():
    """The paper profile's binary 200, 800 and real 800 runs, seeds 0-2, around 3% (EBP-P and EBP-D alike)."""
    return [fake_result(net(w, a), 120, None, "paper", 0.03 + d, seed=s)
            for w, a in mechanisms.CELLS for s, d in enumerate(OFFSETS)]


def mechanism_runs(profile, shift, seeds=(0, 1, 2), real_shift=0.0, **change):
    """A mechanism's runs of the same nets and seeds, each `shift` (binary) or `real_shift` (real) above its twin
    plus a per-seed wobble of ±0.02 points."""
    return [fake_result(net(w, a), 120, change.get("n_train"), profile,
                        0.03 + OFFSETS[s] + (shift if w == "binary" else real_shift) + 0.0002 * (s - 1), seed=s,
                        **{k: v for k, v in change.items() if k != "n_train"})
            for w, a in mechanisms.CELLS for s in seeds]


def row_of(table: str, name: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(f"| {name}:"))


def test_with_no_mechanism_run_every_cell_says_not_run_yet():
    table = mechanisms.mechanism_table(paper_runs())
    line = row_of(table, "paper-50k")
    assert line.count("not run yet") == 3 and line.endswith("| undecided (fewer than two seeds) |")
    assert "| paper-batch1: batch 1 |" in table


def test_one_seed_is_shown_but_not_conclusive():
    runs = paper_runs() + mechanism_runs("paper-unit", 0.003, seeds=(0,), preprocessing="unit")
    line = row_of(mechanisms.mechanism_table(runs), "paper-unit")
    assert "+0.28 (one seed: not conclusive)" in line and line.endswith("| undecided (fewer than two seeds) |")


def test_three_seeds_give_a_paired_t_interval_and_a_verdict():
    """+0.3 points on the binary nets, none on the real control: d = 0.28, 0.30, 0.32 per seed, mean +0.30 ±
    t(2)·0.02/sqrt(3); it explains the offset. The same shift on the control too: it does not."""
    runs = paper_runs() + mechanism_runs("paper-50k", 0.003, n_train=50000)
    table = mechanisms.mechanism_table(runs)
    half = stats.t.ppf(0.975, 2) * 0.02 / 3 ** 0.5
    line = row_of(table, "paper-50k")
    assert f"| +0.30 ± {half:.2f} (3 seeds) | +0.30 ± {half:.2f} (3 seeds) |" in line
    assert line.endswith("| explains |"), line
    effects = mechanisms.mechanism_effects(runs, mechanisms.tested_mechanisms()[0])
    assert effects[("binary", "200", "ebp_d")] == pytest.approx([0.28, 0.30, 0.32])
    both = paper_runs() + mechanism_runs("paper-50k", 0.003, real_shift=0.003, n_train=50000)
    assert row_of(mechanisms.mechanism_table(both), "paper-50k").endswith(
        "| does not explain: it moves the real control too |")
    small = paper_runs() + mechanism_runs("paper-50k", 0.0001, n_train=50000)
    assert row_of(mechanisms.mechanism_table(small), "paper-50k").endswith(
        "| does not explain: B-EBP-P moves by less than +0.1 |")


def test_a_run_pairs_only_with_the_same_configuration_and_seed():
    """A paper-profile run of another seed, or one with dropout, is no twin; nor is an unfinished mechanism run."""
    twins = [fake_result(net("binary", "200"), 120, None, "paper", 0.03, seed=0),
             fake_result(net("binary", "200"), 120, None, "paper", 0.05, seed=0, dropout="sampled", keep=0.8)]
    ours = [fake_result(net("binary", "200"), 120, 50000, "paper-50k", 0.031, seed=0),
            fake_result(net("binary", "200"), 120, 50000, "paper-50k", 0.031, seed=1),
            fake_result(net("binary", "200"), 30, 50000, "paper-50k", 0.031, epochs=120, seed=2)]
    found = mechanisms.paired_differences(twins + ours, mechanisms.tested_mechanisms()[0], "binary", "200", "ebp_p")
    assert found == {0: pytest.approx(0.1)}


def test_the_authors_binary_code_leaves_the_real_control_unchanged():
    lagged = [fake_result(net(w, a), 120, None, "paper", 0.03 + d, seed=s, update="authors-2015")
              for w, a in mechanisms.CELLS if w == "binary" for s, d in enumerate(OFFSETS)]
    line = row_of(mechanisms.mechanism_table(paper_runs() + lagged), "authors-2015")
    assert "| +0.00 ± 0.00 (3 seeds) | +0.00 ± 0.00 (3 seeds) | unchanged (binary only) |" in line
    assert line.endswith("| does not explain: B-EBP-P moves by less than +0.1 |")


def test_the_offset_line_and_the_excluded_list(rows):
    cells = results.table_cells(rows, paper_runs(), "paper")
    assert mechanisms.offset_line(rows, cells).startswith(
        "The offset, ours − paper in Table 2 (mean over seeds, points): B-EBP-P 200 -0.46, B-EBP-D 200 -1.63")
    assert mechanisms.offset_line(rows, {}) == "The offset: Table 2's cells are not run yet."
    excluded = mechanisms.excluded_table().splitlines()
    assert len(excluded) == 2 + len(mechanisms.EXCLUDED) and excluded[2].startswith("| the held mask reading |")
    assert paper_tables.read_paper_tables()  # the rows the offset line reads


def float64_runs(shift, seeds=(0, 1, 2)):
    """The float64 profile's binary 200 runs (the reference engine, recorded in result.json), `shift` above their
    twins plus the same wobble as mechanism_runs."""
    runs = [fake_result(net("binary", "200"), 120, None, "paper-f64", 0.03 + OFFSETS[s] + shift + 0.0002 * (s - 1),
                        seed=s) for s in seeds]
    return [{**r, "engine": "reference"} for r in runs]


def test_float64_is_listed_not_run_and_pairs_by_engine():
    """The float64 profile trains binary 200 only: its other cells say so, never 'not run yet' or 'unchanged'; a run
    pairs with the paper profile's fast-engine twin, and a run of its folder on the fast engine is no float64 run."""
    line = row_of(mechanisms.mechanism_table(paper_runs()), "paper-f64")
    assert line.startswith("| paper-f64: float64 arithmetic (the reference engine) | not run yet | "
                           "not trained (binary 200 only) | not trained (binary 200 only) |"), line
    assert line.endswith("| undecided (fewer than two seeds) |")
    table = mechanisms.mechanism_table(paper_runs() + float64_runs(0.003))
    half = stats.t.ppf(0.975, 2) * 0.02 / 3 ** 0.5
    assert row_of(table, "paper-f64").endswith(
        f"| +0.30 ± {half:.2f} (3 seeds) | not trained (binary 200 only) | not trained (binary 200 only) "
        f"| explains (on binary 200 only: no control) |")
    fast = [{**r, "engine": "fast"} for r in float64_runs(0.003)]
    assert row_of(mechanisms.mechanism_table(paper_runs() + fast), "paper-f64").count("not run yet") == 1
    small = mechanisms.mechanism_table(paper_runs() + float64_runs(0.0))
    assert row_of(small, "paper-f64").endswith("| does not explain: B-EBP-P moves by less than +0.1 (on binary 200 "
                                               "only: no control) |")


def test_the_float64_profile_selects_the_reference_engine(rows):
    """Its jobs run the reference engine (a run option, named in each result.json) with the paper's protocol; an
    --engine that contradicts it is refused before any run."""
    selected = paper_tables.select_rows(rows, [2], ["200"], None, ["binary"])
    jobs = paper_tables.make_jobs(selected, paper_tables.Selection("paper-f64", seeds=(0, 1)))
    assert [j.engine for j in jobs] == ["reference", "reference"] and {j.profile for j in jobs} == {"paper-f64"}
    assert jobs[0].config.parameters() == paper_tables.make_jobs(selected, paper_tables.Selection("paper"))[0].config.replace(
        output_dir=jobs[0].config.output_dir).parameters()
    assert all(j.output_dir.match("*/paper-f64/binary-200*") for j in jobs)
    assert paper_tables.make_jobs(selected, paper_tables.Selection("paper"))[0].engine is None
    assert paper_tables.make_jobs(selected, paper_tables.Selection("paper-f64", engine="reference"))[0].engine == "reference"
    with pytest.raises(ValueError, match="profile paper-f64 trains with the reference engine: drop --engine fast"):
        paper_tables.Selection("paper-f64", engine="fast")
    assert parameters.profile_label("paper-f64").endswith("batch 10, reference engine)")
