"""Every cell judged: does the paper's number lie within our band, and if not, which mechanism explains it?

A cell agrees with the paper when |ours − paper| <= 2·sqrt(u_ours² + u_paper²), the tolerance the findings use:
u_ours is the cell's uncertainty (seed spread and the test set's binomial error, `Cell.uncertainty`), u_paper the
binomial standard error of the paper's single run on 10,000 test images. A cell outside that band is explained
from the data, never by a typed sentence: each mechanism below is a computed test on the committed runs.

- dropout reading (Table 3): the other reading's cell of the same configuration lies within the band;
- mask reading (Table 4): the other mask reading's cell lies within the band;
- EBP-D rounding: an EBP-D cell above the band whose EBP-P cell, from the same runs, lies within it;
- not converged: ours is above the paper and the runs' test error still falls at epoch 120 (least-squares
  slope over the last 40 epochs below −SLOPE_STILL_FALLING points per 10 epochs, mean over seeds);
- the authors' real-weight code (real weights): the cell trained with the authors' update (variant "authors",
  docs/maths.md §The authors' real-weight code) lies within the band;
- otherwise "unexplained".
"""
from __future__ import annotations

import math
import statistics

from reproduction.plots import label_points, trend
from reproduction.results import OUTSIDE_MARK, cell_key
from reproduction.results import paper_band as band

SLOPE_STILL_FALLING = 0.1   # points per 10 epochs: beyond the epoch-to-epoch noise of a settled curve
OTHER_VARIANT = {("main", 3): "Table 3 analytic", ("Table 3 analytic", 3): "main",
                 ("main", 4): "Table 4 held", ("Table 4 held", 4): "main"}
MECHANISM_NAMES = {3: "dropout reading", 4: "mask reading"}
# The variants of the real-weight update (ebp_lib.UPDATES other than the spec): variants of these names hold
# the cells trained with them (results.table_cells(..., real_update=name)).
UPDATE_VARIANTS = ("authors", "authors-delta", "authors-variance")
VARIANT_READINGS = {"main": {3: "sampled", 4: "absent"}, "Table 3 analytic": {3: "analytic"},
                    "Table 4 held": {4: "held"}}


def is_outside(row: dict, cell) -> bool:
    judged = band(row, cell)
    return bool(judged and judged["outside"])


def _sibling(row: dict, rows: list[dict], label: str) -> dict | None:
    """The row of the same table and column with row label `label` (EBP-P beside EBP-D)."""
    return next((r for r in rows if (r["table"], r["column"], r["row"]) == (row["table"], row["column"], label)),
                None)


def mean_slope(cell, output: str) -> float:
    """Mean over the cell's seeds of the slope of the test error over the last 40 epochs (points per 10 epochs)."""
    return statistics.fmean(trend(r, output) for r in cell.pooled)


def mechanisms(row: dict, rows: list[dict], variants: dict, variant: str = "main") -> list[str]:
    """The computed mechanisms that explain why a cell of `variant` lies outside the band (empty if none)."""
    cells = variants[variant]
    cell = cells.get(cell_key(row))
    found = []
    other = OTHER_VARIANT.get((variant, row["table"]))
    if other in variants:
        alternative = variants[other].get(cell_key(row))
        judged = band(row, alternative)
        if judged and not judged["outside"]:
            reading = VARIANT_READINGS[other][row["table"]]
            found.append(f"{MECHANISM_NAMES[row['table']]}: the {reading} reading gives {alternative.mean:.2f}, "
                         f"within the band")
    if variant == "main" and row["weights"] == "real" and "authors" in variants:
        alternative = variants["authors"].get(cell_key(row))
        judged = band(row, alternative)
        if judged and not judged["outside"]:
            found.append(f"the authors' real-weight code gives {alternative.mean:.2f} (n = "
                         f"{len(alternative.pooled)}), within the band")
    judged = band(row, cell)
    if row["row"].endswith("-D") and judged["difference"] > 0:  # rounding can only lose accuracy
        sibling = _sibling(row, rows, row["row"][:-1] + "P")
        if sibling is not None and band(sibling, cells.get(cell_key(sibling))) is not None \
                and not is_outside(sibling, cells.get(cell_key(sibling))):
            found.append("EBP-D rounding: the same runs' EBP-P agrees with the paper")
    if judged["difference"] > 0:
        slope = mean_slope(cell, row["output"])
        if slope < -SLOPE_STILL_FALLING:
            found.append(f"not converged at epoch {cell.pooled[0]['epochs_done']}: still falling by "
                         f"{-slope:.2f} points per 10 epochs over the last 40")
    return found


def cell_line(row: dict, cell) -> str:
    """'B-EBP-D [800,800]: paper 27.06, ours 31.97 ± 4.48 (n = 3), +4.91 against a band of ±2.10'."""
    judged = band(row, cell)
    ours = f"{cell.mean:.2f}" + (f" ± {cell.sd:.2f} (n = {len(cell.pooled)})" if cell.sd is not None else " (n = 1)")
    return (f"{row['row']} {row['column']}: paper {row['paper_error']:.2f}, ours {ours}, "
            f"{judged['difference']:+.2f} against a band of ±{judged['tolerance']:.2f}")


def judged_rows(table: int, rows: list[dict], cells: dict) -> tuple[list[dict], list[dict]]:
    """(finished rows of `table` that have a paper number, those of them outside the band)."""
    judged = [r for r in rows if r["table"] == table and band(r, cells.get(cell_key(r))) is not None]
    return judged, [r for r in judged if is_outside(r, cells.get(cell_key(r)))]


def band_count(table: int, rows: list[dict], variants: dict, variant: str = "main") -> str:
    """'Table 3 (sampled): the paper's number lies within our band (...) in 36 of 36 finished cells'."""
    judged, outside = judged_rows(table, rows, variants[variant])
    reading = VARIANT_READINGS[variant].get(table)
    return (f"Table {table}{f' ({reading})' if reading else ''}: the paper's number lies within our band "
            f"(±2 combined standard errors) in {len(judged) - len(outside)} of {len(judged)} finished cells")


def outside_list(table: int, rows: list[dict], variants: dict, variant: str = "main") -> str:
    """Markdown: the cells of one table (one variant) where the paper lies outside our band, each with its
    computed explanation, or one sentence saying there are none."""
    cells = variants[variant]
    _, outside = judged_rows(table, rows, cells)
    head = band_count(table, rows, variants, variant)
    if not outside:
        return head + "."
    lines = [head + "; outside it:"]
    for r in outside:
        explained = mechanisms(r, rows, variants, variant)
        lines.append(f"- {cell_line(r, cells[cell_key(r)])}: {'; '.join(explained) or 'unexplained'}.")
    return "\n".join(lines)


def _update_entry(row: dict, cell) -> str:
    """'2.46 (n = 3, +0.04)' for a finished cell, with OUTSIDE_MARK where the paper lies outside its band; '·'."""
    judged = band(row, cell)
    if judged is None:
        return "·"
    return (f"{cell.mean:.2f} (n = {len(cell.pooled)}, {judged['difference']:+.2f})"
            + (f" {OUTSIDE_MARK}" if judged["outside"] else ""))


def update_comparison(rows: list[dict], variants: dict) -> str:
    """Markdown: every real-weight cell run under one of UPDATE_VARIANTS, the paper's number beside ours with
    the spec's update and with each variant (mean, seeds, ours − paper; OUTSIDE_MARK outside the band), then per
    variant and output the mean of ours − paper over the cells it ran against the spec's on the same cells."""
    present = [v for v in UPDATE_VARIANTS if variants.get(v)]
    keys = [cell_key(r) for r in rows if any(cell_key(r) in variants[v] for v in present)]
    if not keys:
        return "No run of the authors' real-weight update yet."
    by_key = {cell_key(r): r for r in rows}
    lines = ["| cell | paper | ours, spec | " + " | ".join(f"ours, {v}" for v in present) + " |",
             "|---|---|---|" + "---|" * len(present)]
    for key in keys:
        row = by_key[key]
        entries = [_update_entry(row, variants["main"].get(key))] + [_update_entry(row, variants[v].get(key))
                                                                     for v in present]
        lines.append(f"| Table {row['table']} {row['row']} {row['column']} | {row['paper_error']:.2f} | "
                     + " | ".join(entries) + " |")
    lines.append("")
    for v in present:
        for output in ("EBP-P", "EBP-D"):
            pairs = [(band(by_key[k], variants["main"].get(k)), band(by_key[k], variants[v].get(k))) for k in keys
                     if by_key[k]["row"].endswith(output)]
            pairs = [(a, b) for a, b in pairs if a and b]
            if pairs:
                spec = statistics.fmean(a["difference"] for a, _ in pairs)
                other = statistics.fmean(b["difference"] for _, b in pairs)
                inside = sum(not b["outside"] for _, b in pairs), sum(not a["outside"] for a, _ in pairs)
                lines.append(f"- {v}, R-{output} ({len(pairs)} cells): ours − paper {other:+.2f} on average "
                             f"(spec {spec:+.2f}); the paper's number within the band in {inside[0]} of {len(pairs)} "
                             f"(spec {inside[1]}).")
    lines += _gap_lines(rows, variants, present)
    return "\n".join(lines)


def _gap_lines(rows: list[dict], variants: dict, present: list[str]) -> list[str]:
    """Per column run under a variant: R-EBP-D − R-EBP-P of the paper, of ours with the spec's update and with
    each variant (means over seeds; the same runs give both outputs)."""
    out = []
    for p_row in (r for r in rows if r["weights"] == "real" and r["row"] == "R-EBP-P"):
        d_row = next((r for r in rows if (r["table"], r["column"], r["row"]) == (p_row["table"], p_row["column"],
                                                                                  "R-EBP-D")), None)
        gaps = {}
        for name in ["main", *present]:
            p_cell, d_cell = variants[name].get(cell_key(p_row)), variants[name].get(cell_key(d_row))
            if band(p_row, p_cell) and band(d_row, d_cell):
                gaps[name] = d_cell.mean - p_cell.mean
        if set(gaps) - {"main"}:
            ours = ", ".join(f"{'spec' if k == 'main' else k} {v:+.2f}" for k, v in gaps.items())
            out.append(f"- Table {p_row['table']} {p_row['column']}, R-EBP-D − R-EBP-P: paper "
                       f"{d_row['paper_error'] - p_row['paper_error']:+.2f}; ours: {ours}.")
    return out


TABLE_MARKERS = {2: "o", 3: "s", 4: "^"}


def agreement_figure(rows: list[dict], cells: dict, tables=(2, 3, 4)):
    """Ours against the paper for every finished cell of `tables` (one variant's cells): mean over seeds with
    ±2 combined standard error bars, the diagonal, log axes (errors span 1.5-35%); the cells outside the band
    are filled and labelled."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter

    fig, ax = plt.subplots(figsize=(6.4, 6.0))
    low, high, outside = math.inf, 0.0, []
    for table in tables:
        for row in (r for r in rows if r["table"] == table):
            cell = cells.get(cell_key(row))
            judged = band(row, cell)
            if judged is None:
                continue
            paper, ours = row["paper_error"], cell.mean
            low, high = min(low, paper, ours), max(high, paper, ours)
            colour = "tab:red" if judged["outside"] else "tab:blue"
            ax.errorbar(paper, ours, yerr=judged["tolerance"], fmt=TABLE_MARKERS[table], color=colour, ms=5,
                        mfc=colour if judged["outside"] else "white", elinewidth=0.8, capsize=2, zorder=3)
            if judged["outside"]:
                outside.append((paper, ours, f"T{table} {row['row']} {row['column']}"))
    if high == 0.0:
        ax.text(0.5, 0.5, "no finished cells yet", transform=ax.transAxes, ha="center")
        return fig
    limits = (low / 1.15, high * 1.15)
    ax.plot(limits, limits, color="grey", lw=0.8, zorder=1)
    for table in tables:
        ax.plot([], [], TABLE_MARKERS[table], color="tab:blue", mfc="white", label=f"Table {table}")
    ax.plot([], [], "o", color="tab:red", label="paper outside our band (labelled)")
    ax.set(xscale="log", yscale="log", xlim=limits, ylim=limits, xlabel="paper: test error (%)",
           ylabel="ours: test error (%), mean over seeds ± 2 combined SE",
           title="Every cell of Tables 2-4: this reproduction against the paper")
    ticks = [t for t in (1.5, 2, 3, 5, 10, 20, 30) if limits[0] <= t <= limits[1]]
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_major_formatter(FixedFormatter([f"{t:g}" for t in ticks]))
        axis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    label_points(ax, outside)
    return fig
