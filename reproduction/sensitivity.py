"""Whether the successors' protocol cut a method short: its cells rerun under a longer protocol, and every verdict
recomputed.

The tuned protocol (reproduction.successors) scores its grid after 3 epochs at a constant rate and stops 15 epochs
after the last new best. Where a method looks cut short, its cell is rerun under the profile PROFILE: the grid scored
after 10 epochs, the stop 30 epochs after the last best. Those runs live beside the tuned ones, never in their place
(outputs/successors/sensitivity/). This module sets each such cell beside its tuned runs:

* the shift: sensitivity − tuned, the method's own test error, paired over seeds and test images
  (reproduction.paired, as every other pair of the comparison);
* every verdict of successors_report.tuned_comparisons about the cell, recomputed with the sensitivity runs in the
  tuned runs' place: against EBP tuned like the successors (images and seeds) and against EBP at the paper's
  protocol (Welch). A verdict "moves" when its words change.
"""
from __future__ import annotations

import ebp_data
from reproduction import paired
from reproduction import successors_report as report

PROFILE = "sensitivity"
AGAINST = {"ebp-tuned": "tuned EBP", "ebp-tuned-dropout": "tuned EBP with dropout",
           "ebp": "EBP at the paper's protocol", "ebp-dropout": "EBP with dropout at the paper's protocol"}
SUFFIX = " (sensitivity)"  # the sensitivity side's label in its pairs with the tuned runs


def cell_of(row_or_record: dict) -> tuple[str, str, str]:
    """(dataset, net, method) of a report row or a record's parameters."""
    p = row_or_record.get("parameters", row_or_record)
    return p["dataset"], p.get("net", p.get("architecture")), p["method"]


def swapped(items: list[dict], replacements: list[dict], cell: tuple[str, str, str]) -> list[dict]:
    """`items` (rows or records) with those of `cell` replaced by `replacements`' of the same cell."""
    return [x for x in items if cell_of(x) != cell] + [x for x in replacements if cell_of(x) == cell]


def shift(tuned_records: list[dict], sensitivity_records: list[dict], cell, root, data_dir=None) -> dict | None:
    """The pair_rows row of sensitivity − tuned for one cell (the method's deployed net), None under two seeds a side."""
    groups = paired.run_predictions([r for r in tuned_records if cell_of(r) == cell], root)
    for key, sides in paired.run_predictions([r for r in sensitivity_records if cell_of(r) == cell], root).items():
        for label, side in sides.items():
            groups.setdefault(key, {})[label + SUFFIX] = side
    labels = ebp_data.load_raw(cell[0], data_dir)["test_labels"]
    method = cell[2]
    return paired.oriented(paired.pair_rows(groups, labels, n_boot=0), cell[0], cell[1], method + SUFFIX, method)


def summary(cell, rows: list[dict], comparisons: list[dict], sensitivity_rows: list[dict], pairs_after: list[dict],
            shift_row: dict | None) -> dict:
    """One cell's tuned and sensitivity errors (%, per seed), its shift (a pair_rows row or None), and each of its
    tuned_comparisons before and after (against, output, verdicts against tuned EBP and at the paper's protocol):
    `pairs_after` are the pairs with the cell's sensitivity runs in its tuned runs' place."""
    dataset, net, method = cell
    rows_after = swapped(rows, sensitivity_rows, cell)
    after = {(c["ebp"], c["output"]): c for c in report.tuned_comparisons(rows_after, pairs_after) if cell_of(c) == cell}
    verdicts = [{"ebp": c["ebp"], "output": c["output"], "tuned": (c["verdict"], c["paper_verdict"]),
                 "sensitivity": (after[c["ebp"], c["output"]]["verdict"], after[c["ebp"], c["output"]]["paper_verdict"])}
                for c in comparisons if cell_of(c) == cell]
    return {"dataset": dataset, "net": net, "method": method,
            "tuned": report._errors(rows, dataset, net, method, "deployed"),
            "sensitivity": report._errors(rows_after, dataset, net, method, "deployed"),
            "shift": shift_row, "verdicts": verdicts}


def compare(rows: list[dict], tuned_records: list[dict], comparisons: list[dict], sensitivity_records: list[dict],
            root, data_dir=None) -> list[dict]:
    """summary of every cell with sensitivity runs, their per-image predictions read from under root."""
    sensitivity_rows = report.successor_rows(sensitivity_records)
    found = []
    for cell in sorted({cell_of(r) for r in sensitivity_records}):
        pairs_after = report.paired_intervals(root, PROFILE, data_dir, n_boot=0,
                                              results=swapped(tuned_records, sensitivity_records, cell))
        found.append(summary(cell, rows, comparisons, sensitivity_rows, pairs_after,
                             shift(tuned_records, sensitivity_records, cell, root, data_dir)))
    return found


def table(found: list[dict]) -> str:
    """One markdown row per cell: tuned and sensitivity errors (mean ± SD over seeds, %), and the shift with its
    images-and-seeds interval (points)."""
    lines = ["| data set | net | method | tuned | sensitivity | shift | images and seeds 95% |", "|" + "---|" * 7]
    for f in found:
        s = f["shift"]
        interval = "n.c." if s is None else f"[{s['images_and_seeds'][0]:+.2f}, {s['images_and_seeds'][1]:+.2f}]"
        lines.append(f"| {f['dataset']} | [{f['net'].replace('-', ', ')}] | {report.SHORT[f['method']]} | "
                     f"{report._mean_sd(f['tuned'])} | {report._mean_sd(f['sensitivity'])} | "
                     f"{'n.c.' if s is None else format(s['difference'], '+.2f')} | {interval} |")
    return "\n".join(lines)


def moves(found: list[dict]) -> list[str]:
    """One sentence per cell: which verdicts moved under the longer protocol, or that none did."""
    sentences = []
    for f in found:
        moved = []
        for v in f["verdicts"]:
            for i, ebp in enumerate((v["ebp"], report.PAPER_PROTOCOL[v["ebp"]])):
                before, after = v["tuned"][i], v["sensitivity"][i]
                if before != after:
                    moved.append(f"against {AGAINST[ebp]}, {before} → {after}")
        cell = (f"{report.SHORT[f['method']]} on {ebp_data.DATASETS[f['dataset']]['name']} "
                f"[{f['net'].replace('-', ', ')}]")
        sentences.append(f"{cell}: " + ("; ".join(moved) + "." if moved else
                                        f"no verdict moves ({len(f['verdicts']) * 2} compared)."))
    return sentences
