"""Reading results back into the paper's tables (reproduction.results), as notebooks/tables.ipynb does: each
profile on its own, the most complete run per seed, seeds pooled as mean ± SD beside the last-10-epoch mean, the
dropout and mask readings in their own variants, committed results only, coverage, and MNIST beside Fashion-MNIST.
"""
from __future__ import annotations

import json
import subprocess

import pytest
from helpers import cell_row, fake_notebook, fake_result, write_result

from reproduction.folder import EXECUTED_FILE, RESULT_FILE, run_key
from reproduction.paper_tables import dataset_rows, select_rows
from reproduction.results import (
    Cell,
    binomial_se,
    cell_key,
    coverage,
    load_results,
    render_dataset_table,
    render_table,
    results_of,
    seed_of,
    seeds_run,
    table_cells,
)


def test_each_profile_is_shown_on_its_own_and_the_most_complete_run_fills_a_cell(rows):
    """A quick run never fills the paper profile's cells (and the reverse); within a profile a finished run beats
    an unfinished one, which still fills the cell (marked with its epochs) until then."""
    row = cell_row(rows, 2, "R-EBP-P", "400")
    quick = fake_result(row, 3, 6000, "quick", 0.05)
    partial = fake_result(row, 2, None, "paper", 0.04, epochs=120)
    paper = fake_result(row, 120, None, "paper", 0.02)
    other = fake_result({"architecture": "400", "weights": "binary"}, 120, None, "paper", 0.5)
    key = cell_key(row)
    assert table_cells([row], [quick, other], "paper") == {}
    quick_cells = table_cells([row], [quick, partial, paper], "quick")
    assert quick_cells[key].pooled == [quick]
    assert "2.29 / 5.00 (+2.71); last 3: 5.00 |" in render_table(2, rows, quick_cells, "quick")  # one seed: no band
    cell = table_cells([row], [quick, partial], "paper")[key]
    assert cell.pooled == [partial] and not cell.finished
    assert "2.29 / 4.00 (+1.71) · 2/120 ep" in render_table(2, rows, {key: cell}, "paper")
    assert table_cells([row], [paper, quick, partial], "paper")[key].pooled == [paper]


def test_dropout_and_mask_readings_fill_their_own_variants(rows):
    """Table 3 cells take the asked dropout reading, Table 4 cells the asked mask reading; dense tables ignore
    the mask reading."""
    t3, t4 = cell_row(rows, 3, "B-EBP-P", "200"), cell_row(rows, 4, "B-EBP-P", "256")
    t2 = cell_row(rows, 2, "B-EBP-P", "200")
    sampled = fake_result(t3, 120, None, "paper", 0.03, dropout="sampled")
    analytic = fake_result(t3, 120, None, "paper", 0.04, dropout="analytic")
    absent = fake_result(t4, 120, None, "paper", 0.035)
    held = fake_result(t4, 120, None, "paper", 0.065, mask_reading="held")
    dense = fake_result(t2, 120, None, "paper", 0.033)
    given = [sampled, analytic, absent, held, dense]
    main = table_cells(rows, given, "paper", "sampled", "absent")
    assert [main[cell_key(r)].pooled[0] for r in (t3, t4, t2)] == [sampled, absent, dense]
    other = table_cells(rows, given, "paper", "analytic", "held")
    assert [other[cell_key(r)].pooled[0] for r in (t3, t4, t2)] == [analytic, held, dense]
    assert "held at h = 0" in render_table(4, rows, other, "paper", mask_reading="held")
    assert "sampled dropout" in render_table(3, rows, main, "paper", "sampled")


def test_seeds_are_pooled_as_mean_and_sd_beside_the_last_ten_epochs(rows, tmp_path):
    """Folders <run>, <run>-seed1, <run>-seed2 of one configuration, finished: the cell shows their mean ± SD and
    n = 3, and the mean over seeds of each run's mean test error over its last 10 epochs (111-120); a seed still
    training (seed 3) is named beside the cell, not pooled. The table's title names the profile and the seeds."""
    row = cell_row(rows, 2, "B-EBP-P", "200")
    for seed, last in [(0, 0.030), (1, 0.032), (2, 0.034)]:  # epochs 111-119 at 3.1%, epoch 120 at `last`
        curve = [0.05] * 110 + [0.031] * 9 + [last]
        write_result(tmp_path, run_key("binary-200", seed=seed),
                     fake_result(row, 120, None, "paper", None, seed=seed, curve=curve))
    write_result(tmp_path, "binary-200-seed3", fake_result(row, 40, None, "paper", 0.04, epochs=120, seed=3))
    write_result(tmp_path, "binary-200-quick", fake_result(row, 3, 6000, "quick", 0.2))
    loaded = load_results(tmp_path)
    assert seeds_run(loaded) == [0, 1, 2, 3]
    cells = table_cells(rows, loaded, "paper")
    cell = cells[cell_key(row)]
    assert cell.seeds == [0, 1, 2] and [seed_of(r) for r in cell.others] == [3] and cell.finished
    assert cell.mean == pytest.approx(3.2) and cell.sd == pytest.approx(0.2)
    last, last_sd = cell.last_epochs
    assert last == pytest.approx(3.11) and last_sd == pytest.approx(0.02)
    se = 100 * (0.032 * 0.968 / 10000) ** 0.5
    assert binomial_se(3.2) == pytest.approx(se)
    text = render_table(2, rows, cells, "paper")
    assert "| 200 | 3.46 / 3.20 ± 0.20 (n = 3) (-0.26); last 10: 3.11 ± 0.02 · seed 3: 40/120 ep |" in text
    assert "profile paper (120 epochs on all 60,000 training images, batch 10); seeds 0, 1, 2 (3 per cell in " \
           "2 cells; mean ± SD over seeds)" in text
    one = table_cells(rows, [r for r in loaded if seed_of(r) == 0], "paper")
    assert one[cell_key(row)].sd is None and "seed 0 (one run per cell)" in render_table(2, rows, one, "paper")
    assert "| 200 | 3.46 / 3.00 (-0.46); last 10: 3.09 |" in render_table(2, rows, one, "paper")


def test_committed_only_reads_what_git_holds(tmp_path, rows):
    """Runs in progress in the working tree do not change what the committed tables notebook reads."""
    row = select_rows(rows, run_ids=["real-400"])[0]
    runs = tmp_path / "outputs" / "runs"
    committed = runs / "quick" / "real-400" / RESULT_FILE
    committed.parent.mkdir(parents=True)
    committed.write_text(json.dumps(fake_result(row, 3, 6000, "quick", 0.05)))
    committed.with_name(EXECUTED_FILE).write_text(json.dumps(fake_notebook(fake_result(row, 3, 6000, "quick", 0.05))))
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "results"], check=True)
    in_progress = runs / "paper" / "real-400" / RESULT_FILE
    in_progress.parent.mkdir(parents=True)
    in_progress.write_text(json.dumps(fake_result(row, 2, None, "paper", 0.04, epochs=120)))
    committed.write_text(json.dumps(fake_result(row, 3, 6000, "quick", 0.07)))  # changed, not committed
    committed.with_name(EXECUTED_FILE).write_text(json.dumps(fake_notebook(fake_result(row, 3, 6000, "quick", 0.07))))
    head = load_results(runs, committed_only=True)
    assert [(r["run_dir"], r["final"]["test_ebp_p"]) for r in head] == [("quick/real-400", 0.05)]
    disk = load_results(runs)
    assert [(r["run_dir"], r["final"]["test_ebp_p"]) for r in disk] == [("paper/real-400", 0.04),
                                                                       ("quick/real-400", 0.07)]


def test_coverage_counts_finished_running_and_missing_runs(rows):
    row = cell_row(rows, 2, "B-EBP-P", "200")
    cells = {cell_key(row): Cell(row, [fake_result(row, 120, None, "paper", 0.0336)])}
    running = cell_row(rows, 2, "R-EBP-P", "400")
    cells[cell_key(running)] = Cell(running, [fake_result(running, 7, None, "paper", 0.03, epochs=120)])
    line = coverage(rows, cells, 2, " (x)")
    assert line == ("Table 2 (x): 1 of 18 runs finished, in progress: real-400 7/120 ep, 16 not run; ours − paper "
                    "over 1 cells: mean -0.10, from -0.10 to -0.10 points"), line


# ----------------------------------------------------------------------------------------------------------
# MNIST beside Fashion-MNIST (the tables notebook's Fashion-MNIST part)
# ----------------------------------------------------------------------------------------------------------

def test_results_are_read_back_per_data_set_and_a_misplaced_one_is_refused_by_name(rows, tmp_path):
    """load_results gives a Fashion-MNIST run its profile (the folder less -fashion-mnist); results_of keeps one
    profile and data set; an EBP result in the folder of another data set, or of another run (a binary run in a
    real-weight folder), is rejected as misplaced, naming where it belongs, and the other results are still read."""
    row = cell_row(rows, 2, "B-EBP-P", "200")
    write_result(tmp_path, "binary-200", fake_result(row, 120, None, "paper", 0.03))
    fashion = fake_result(row, 120, None, "paper-fashion-mnist", 0.12, dataset="fashion-mnist")
    write_result(tmp_path, "binary-200", fashion)
    loaded = load_results(tmp_path)
    assert [(r["profile"], r["run_dir"]) for r in loaded] == [("paper", "paper-fashion-mnist/binary-200"),
                                                             ("paper", "paper/binary-200")]  # sorted by path
    assert [r["final"]["test_ebp_p"] for r in results_of(loaded, "paper", "fashion-mnist")] == [0.12]
    assert [r["final"]["test_ebp_p"] for r in results_of(loaded, "paper")] == [0.03]
    write_result(tmp_path, "binary-400", {**fashion, "profile": "quick"})  # a Fashion-MNIST run in quick/
    unfinished = fake_result(row, 2, None, "quick", 0.2, epochs=3, dataset="fashion-mnist")
    write_result(tmp_path, "binary-1000", unfinished)
    binary_400 = fake_result(cell_row(rows, 2, "B-EBP-P", "400"), 120, None, "paper", 0.01)
    write_result(tmp_path, "real-400", binary_400)  # a binary run left in the real-400 folder
    loaded = load_results(tmp_path)
    assert [r["run_dir"] for r in loaded] == ["paper-fashion-mnist/binary-200", "paper/binary-200"]
    kind, why = loaded.rejected["quick/binary-400"]
    assert kind == "misplaced" and "quick/binary-400/result.json was trained on fashion-mnist but lies in quick/, " \
        "the folder of mnist runs; move its run folder to quick-fashion-mnist/" in why
    assert loaded.rejected["quick/binary-1000"][0] == "misplaced"
    kind, why = loaded.rejected["paper/real-400"]
    assert kind == "misplaced" and "its parameters are those of paper/binary-400/" in why
    cells = table_cells(rows, loaded, "paper")
    assert (2, "B-EBP-P", "400") not in cells and (2, "R-EBP-P", "400") not in cells
    assert "paper/real-400/result.json is misplaced" in coverage(rows, cells, 2)


def test_record_text_reaches_the_tables_escaped_on_one_line(rows, tmp_path):
    """A refused record's own values, quoted in why it was refused, are shown as text: HTML escaped and on one line
    (raw, an architecture of '<img ...>' would be markup in tables.md, and a line break would end the line)."""
    record = fake_result(cell_row(rows, 2, "B-EBP-P", "200"), 120, None, "paper", 0.03)
    record["parameters"]["architecture"] = "200<img src=x onerror=alert(1)>"
    write_result(tmp_path, "binary-200", record)
    loaded = load_results(tmp_path)
    assert "<img" in loaded.rejected["paper/binary-200"][1]
    line = coverage(rows, table_cells(rows, results_of(loaded, "paper"), "paper"), 2)
    assert "<" not in line and "\n" not in line
    assert "paper/binary-200/result.json is inconsistent, not used:" in line and "200&lt;img src=x" in line


def test_fashion_mnist_tables_beside_mnist_with_missing_runs(rows):
    """The rows of another data set have no paper number; each data set's results fill only its own cells; the
    side-by-side table shows 'MNIST / Fashion-MNIST (difference)', 'not run yet' where a run is missing and the
    epochs of a run in progress; coverage counts runs without comparing to the paper."""
    fashion_rows = dataset_rows(rows, "fashion-mnist")
    assert {r["dataset"] for r in fashion_rows} == {"fashion-mnist"} and all(
        r["paper_error"] is None for r in fashion_rows)
    assert dataset_rows(rows, "mnist") == rows
    row = cell_row(rows, 2, "B-EBP-P", "200")
    given = [fake_result(row, 120, None, "paper", 0.0324),
             fake_result(row, 120, None, "paper", 0.1250, dataset="fashion-mnist"),
             fake_result(cell_row(rows, 2, "R-EBP-P", "400"), 30, None, "paper", 0.11, epochs=120,
                         dataset="fashion-mnist")]
    mnist, fashion = table_cells(rows, given), table_cells(fashion_rows, given)
    assert [round(c.mean, 2) for c in mnist.values()] == [3.24, 3.24]  # EBP-P and EBP-D of the MNIST run only
    assert sorted(round(c.mean, 2) for c in fashion.values()) == [11.0, 11.0, 12.5, 12.5]
    table = render_dataset_table(2, rows, {"mnist": mnist, "fashion-mnist": fashion}, "paper")
    assert table.startswith("**Table 2: 1D input, no dropout** — profile paper (120 epochs on all 60,000 "
                            "training images, batch 10); MNIST: seed 0 (one run per cell); Fashion-MNIST: seed 0 "
                            "(one run per cell). Test error % after the last epoch, MNIST / Fashion-MNIST "
                            "(Fashion-MNIST − MNIST)."), table
    assert "| 200 | 3.24 / 12.50 (+9.26) | 3.24 / 12.50 (+9.26) | not run yet / not run yet |" in table
    assert "| 400 | not run yet / not run yet | not run yet / not run yet | not run yet / 11.00 · 30/120 ep |" in table
    assert "3.46" not in table  # no paper number
    empty = render_dataset_table(4, rows, {"mnist": {}, "fashion-mnist": {}}, "paper", mask_reading="absent")
    assert "MNIST: no runs yet; Fashion-MNIST: no runs yet" in empty and empty.count("not run yet / not run yet") == 28
    assert coverage(fashion_rows, fashion, 2) == ("Table 2: 1 of 18 runs finished, in progress: real-400 "
                                                  "30/120 ep, 16 not run")


def test_an_unreadable_or_inconsistent_result_shows_as_such_not_as_not_run(rows, tmp_path):
    """A result.json that is not a record (truncated) fills no cell, and the cell says so instead of 'not run yet';
    the coverage line names the file and why. A seed whose result is inconsistent (final errors that are not its
    last epoch's) is named beside the seeds the cell pools; every other cell is unaffected."""
    row = cell_row(rows, 2, "B-EBP-P", "200")
    broken = tmp_path / "paper" / "binary-200" / RESULT_FILE
    broken.parent.mkdir(parents=True)
    broken.write_text('{"format": 2, "method": "ebp", "parameters": {"data')
    write_result(tmp_path, "real-200", fake_result(cell_row(rows, 2, "R-EBP-P", "200"), 120, None, "paper", 0.02))
    loaded = load_results(tmp_path)
    assert [r["run_dir"] for r in loaded] == ["paper/real-200"]
    kind, why = loaded.rejected["paper/binary-200"]
    assert kind == "unreadable" and "not JSON" in why
    cells = table_cells(rows, results_of(loaded, "paper"), "paper")
    table = render_table(2, rows, cells, "paper")
    first = next(line for line in table.splitlines() if line.startswith("| 200 |")).split(" | ")
    assert first[1:3] == ["3.46 / unreadable result.json", "4.63 / unreadable result.json"], first
    assert first[3].startswith("2.78 / 2.00 (-0.78)"), first  # the readable run of the same column
    line = coverage(rows, cells, 2)
    assert "paper/binary-200/result.json is unreadable, not used: " in line and str(broken) in line
    assert "16 not run" in line  # binary-200 is not counted as not run

    inconsistent = fake_result(row, 120, None, "paper", 0.03, seed=1)
    inconsistent["final"]["test_ebp_p"] = 0.0188
    repaired = fake_result(row, 120, None, "paper", 0.03)
    broken.write_text(json.dumps({k: v for k, v in repaired.items() if k != "profile"}))
    broken.with_name(EXECUTED_FILE).write_text(json.dumps(fake_notebook(repaired)))
    write_result(tmp_path, "binary-200-seed1", inconsistent)
    loaded = load_results(tmp_path)
    assert loaded.rejected["paper/binary-200-seed1"][0] == "inconsistent"
    table = render_table(2, rows, table_cells(rows, loaded, "paper"), "paper")
    cell = next(line for line in table.splitlines() if line.startswith("| 200 |")).split(" | ")[1]
    assert cell.startswith("3.46 / 3.00 (-0.46)") and cell.endswith("last 10: 3.00 · seed 1: inconsistent result.json")
    assert "1.88" not in table
    fashion = table_cells(dataset_rows(rows, "fashion-mnist"), results_of(loaded, "paper", "fashion-mnist"), "paper")
    side = render_dataset_table(2, rows, {"mnist": table_cells(rows, results_of(loaded, "paper"), "paper"),
                                          "fashion-mnist": fashion}, "paper")
    assert "| 200 | 3.00 / not run yet |" in side


def test_the_scan_table_has_one_number_per_column(rows):
    """paper | ours ± SD | Δ for EBP-P then EBP-D, per architecture and weight type; † outside the band, another
    seed count marked n, an unfinished run its epochs, a missing one 'not run yet'."""
    from reproduction.results import render_scan_table
    row, real = cell_row(rows, 2, "B-EBP-P", "200"), cell_row(rows, 2, "R-EBP-P", "200")
    runs = [fake_result(r, 120, None, "paper", 0.0246 + d, seed=s) for s, d in enumerate((0.0, 0.001, -0.001))
            for r in (row, cell_row(rows, 2, "B-EBP-P", "600"), cell_row(rows, 2, "B-EBP-P", "800"))]
    runs += [fake_result(real, 120, None, "paper", 0.0278, seed=0)]  # three seeds in most cells: n = 1 is marked
    runs += [fake_result(cell_row(rows, 2, "B-EBP-P", "400"), 30, None, "paper", 0.03, epochs=120, seed=0)]
    table = render_scan_table(2, rows, table_cells(rows, runs, "paper"), "paper").splitlines()
    assert table[2] == "| net | EBP-P paper | ours | Δ | EBP-D paper | ours | Δ |"
    nb = "\u00a0"
    assert table[4] == f"| 200 binary | 3.46 | 2.46{nb}±{nb}0.10 | -1.00 † | 4.63 | 2.46{nb}±{nb}0.10 | -2.17 † |"
    assert table[5] == "| 200 real | 2.78 | 2.78 (n = 1) | +0.00 | 3.04 | 2.78 (n = 1) | -0.26 |"
    assert table[6] == "| 400 binary | 3.15 | 3.00 (n = 1) · 30/120 ep |  | 3.89 | 3.00 (n = 1) · 30/120 ep |  |"
    assert table[7].startswith("| 400 real | 2.29 | not run yet |  |") and "over 3 seeds" in table[0]
