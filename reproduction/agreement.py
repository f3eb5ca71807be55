"""Every cell judged: could the paper's number be one more run of ours, and if not, which mechanism explains it?

A cell agrees with the paper when the paper's single run lies within our prediction band for one more run,
ours ± t·s·sqrt(1 + 1/n) (reproduction.band: s pooled over the cell's family, its table and row in one variant,
where Bartlett's test finds its cells alike; else over its depth, or the cell's own; split_lines prints each
split). Both sides are measured on the same test images, so the test set's binomial noise is no part of the band.
A variant of one seed per cell (Table 3 analytic) borrows the main variant's spread of the same cells
(variant_spreads): its count is printed apart, "one seed, borrowed spread" (band_count). A cell outside the band is
explained from the data, never by a typed sentence: each mechanism below is a computed test on the committed runs.

- dropout reading (Table 3): the other reading's cell of the same configuration lies within the band;
- mask reading (Table 4): the other mask reading's cell lies within the band;
- EBP-D rounding: an EBP-D cell above the band whose EBP-P cell, from the same runs, lies within it;
- not converged: ours is above the paper and the runs' test error still falls at epoch 120 (least-squares
  slope over the last 40 epochs below −SLOPE_STILL_FALLING points per 10 epochs, mean over seeds);
- the authors' code as of the paper (AUTHORS_CODE: variant "authors" for real weights, docs/maths.md §The authors'
  real-weight code; "authors-2015" for binary weights, §The authors' binary code of 2015) lies within the band;
- otherwise "unexplained".

Across cells, patterns names the rows whose cells all lie on one side of the paper: a systematic difference,
whatever each cell's band says.
"""
from __future__ import annotations

import math
import re
import statistics

from ebp_lib import DEFAULT_UPDATE, UPDATES
from reproduction import band as rule
from reproduction.plots import label_points, trend
from reproduction.results import OUTSIDE_MARK, binomial_se, cell_key, finished_errors, paper_band, table_cells

SLOPE_STILL_FALLING = 0.1   # points per 10 epochs: beyond the epoch-to-epoch noise of a settled curve
OTHER_VARIANT = {("main", 3): "Table 3 analytic", ("Table 3 analytic", 3): "main",
                 ("main", 4): "Table 4 held", ("Table 4 held", 4): "main"}
MECHANISM_NAMES = {3: "dropout reading", 4: "mask reading"}
# The variants of the update, read from ebp_lib.UPDATES: variant name → (update, Table 4's mask reading, the spec's
# variant it stands beside). Each update other than the spec's is a variant beside "main"; the authors' code as
# the paper ran it (Update.as_paper_ran) is also one under Table 4's held reading, beside "Table 4 held" (e.g.
# "authors-2015 held"). Their cells are results.table_cells(..., mask_reading, update).
UPDATE_VARIANTS = {**{name: (name, "absent", "main") for name in UPDATES if name != DEFAULT_UPDATE},
                   **{f"{name} held": (name, "held", "Table 4 held") for name, update in UPDATES.items()
                      if update.as_paper_ran}}
# The update the authors' code computed when the paper was written, per weight type, and that code's name
AUTHORS_CODE = {update.weights: name for name, update in UPDATES.items() if update.as_paper_ran}
AUTHORS_CODE_NAMES = {UPDATES[name].weights: UPDATES[name].code[0].lower() + UPDATES[name].code[1:]
                      for name in AUTHORS_CODE.values()}
VARIANT_READINGS = {"main": {3: "sampled", 4: "absent"}, "Table 3 analytic": {3: "analytic"},
                    "Table 4 held": {4: "held"}}
MIN_DF = 4        # a family's own spread sets its band from 4 degrees of freedom (t = 2.78) on
MIN_PATTERN = 4   # cells of one row on one side of the paper: 2·0.5⁴ = 1/8 by chance at the least


def variant_spreads(variants: dict, variant: str = "main") -> rule.Spreads:
    """{cell key: Spread} of one variant's cells (band.family_spreads of its own cells); a cell whose own spread
    has fewer than MIN_DF degrees of freedom (one or two cells of several seeds) takes the spread of its cells
    pooled with those of the same table and row of the spec's variant it stands beside (UPDATE_VARIANTS; "main"
    for the readings: the same network trained by nearly the same code), by the same test of alike cells; a cell
    of one seed that is alone there (a split family) takes that variant's spread of the same cell; a family the
    test splits among the variant's own cells stays split. So a t quantile of one degree of freedom (12.7) never
    sets a band by pooling too little, and cells the test finds unalike are never pooled."""
    own = finished_errors(variants[variant])
    spreads = rule.family_spreads(own)
    base = _beside(variant)
    if variant == base or base not in variants:
        return spreads
    beside = variant_spreads(variants, base)
    both = rule.family_spreads({**{(base, *key): e for key, e in finished_errors(variants[base]).items()},
                                **{(variant, *key): e for key, e in own.items()}},
                               family=lambda key: key[1:3], depth=lambda key: rule.depth(key[1:]))
    chosen, pooled_with_base, split = {}, set(), set(spreads.splits())
    for key in own:
        if key in spreads and (spreads[key].df >= MIN_DF or rule.family(key) in split):  # a split stays split
            chosen[key] = spreads[key]
        elif (variant, *key) in both:
            chosen[key], _ = both[(variant, *key)], pooled_with_base.add(rule.family(key))
        elif key in beside:
            chosen[key], _ = beside[key], pooled_with_base.add(rule.family(key))
    groups = [g for g in spreads.groups if g.family not in pooled_with_base] + \
        [g for g in both.groups if g.family in pooled_with_base]
    family_p = {name: (both if name in pooled_with_base else spreads).family_p.get(name)
                for name in {*spreads.family_p, *pooled_with_base}}
    return rule.Spreads(chosen, groups, family_p)


def _part_text(group: rule.Group) -> str:
    """One part of a split family: 'one hidden layer pooled (5 cells, s = 0.09, df = 10)', '[800,800] alone (s =
    4.48, df = 2)' or '[800,800] alone (one seed: no spread)'."""
    spread = group.spread
    if spread is None:
        return f"{group.part} alone (one seed: no spread)"
    if len(group.cells) > 1:
        return f"{group.part} pooled ({len(group.cells)} cells, s = {spread.s:.2f}, df = {spread.df})"
    return f"{group.part} alone (s = {spread.s:.2f}, df = {spread.df})"


def split_lines(table: int, variants: dict, variant: str = "main", compact: bool = False) -> list[str]:
    """One line per family of one table (one variant) whose cells Bartlett's test finds unalike: its p and the
    parts its spread was split into (band.split_family), e.g. 'Table 2, B-EBP-D: cell SDs unalike (Bartlett p =
    1.2e-10 < 0.05), not pooled: one hidden layer pooled (5 cells, s = 0.08, df = 10); [200,200] alone (s = 0.17,
    df = 2); ...'; `compact`: 'Table 2, B-EBP-D (Bartlett p = 1.2e-10): one hidden layer pooled; alone:
    [200,200], [400,400], ...'."""
    borrowed = borrows_spread(table, variants[variant])
    spreads = variant_spreads(variants, _beside(variant) if borrowed else variant)
    lines = []
    for name, (p, parts) in spreads.splits().items():
        if name[0] != table:
            continue
        head = f"{table_label(table, variant)}, {name[1]}{f' ({_beside(variant)} variant)' if borrowed else ''}"
        if compact:
            pooled = [f"{g.part} pooled" for g in parts if len(g.cells) > 1]
            alone = [g.part for g in parts if len(g.cells) == 1]
            lines.append(f"{head} (Bartlett p = {p:.2g}): " + "; ".join(pooled + ([f"alone: {', '.join(alone)}"]
                                                                                  if alone else [])))
        else:
            lines.append(f"{head}: cell SDs unalike (Bartlett p = {p:.2g} < {rule.HOMOGENEITY_LEVEL:g}), not "
                         f"pooled: " + "; ".join(map(_part_text, parts)))
    return lines


def band(row: dict, cell, spreads: dict) -> dict | None:
    """results.paper_band of one cell with the spreads of its variant (variant_spreads)."""
    return paper_band(row, cell, spreads)


def is_outside(row: dict, cell, spreads: dict) -> bool:
    judged = band(row, cell, spreads)
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
    cells, spreads = variants[variant], variant_spreads(variants, variant)
    cell = cells.get(cell_key(row))
    found = []
    other = OTHER_VARIANT.get((variant, row["table"]))
    if other in variants:
        alternative = variants[other].get(cell_key(row))
        judged = band(row, alternative, variant_spreads(variants, other))
        if judged and not judged["outside"]:
            reading = VARIANT_READINGS[other][row["table"]]
            found.append(f"{MECHANISM_NAMES[row['table']]}: the {reading} reading gives {alternative.mean:.2f}, "
                         f"within the band")
    code = authors_variant(row["weights"], variant)
    if code in variants:
        alternative = variants[code].get(cell_key(row))
        judged = band(row, alternative, variant_spreads(variants, code))
        if judged and not judged["outside"]:
            found.append(f"{AUTHORS_CODE_NAMES[row['weights']]} gives {alternative.mean:.2f} (n = "
                         f"{len(alternative.pooled)}), within the band")
    judged = band(row, cell, spreads)
    if row["row"].endswith("-D") and judged["difference"] > 0:  # rounding can only lose accuracy
        sibling = _sibling(row, rows, row["row"][:-1] + "P")
        if sibling is not None and band(sibling, cells.get(cell_key(sibling)), spreads) is not None \
                and not is_outside(sibling, cells.get(cell_key(sibling)), spreads):
            found.append("EBP-D rounding: the same runs' EBP-P agrees with the paper")
    if judged["difference"] > 0:
        slope = mean_slope(cell, row["output"])
        if slope < -SLOPE_STILL_FALLING:
            found.append(f"not converged at epoch {cell.pooled[0]['epochs_done']}: still falling by "
                         f"{-slope:.2f} points per 10 epochs over the last 40")
    return found


def update_variants(rows: list[dict], results_list: list[dict], profile: str) -> dict:
    """{name: cells} of every UPDATE_VARIANTS entry (results.table_cells of its update and mask reading); a variant
    of the held reading holds Table 4's cells only: the other tables have no masks, so their cells are the
    absent variant's."""
    return {name: table_cells([r for r in rows if masks != "held" or r["table"] == 4], results_list, profile,
                              "sampled", masks, update)
            for name, (update, masks, _) in UPDATE_VARIANTS.items()}


def update_sections() -> list[tuple[str, str, list[str]]]:
    """[(the authors' code, as docs/maths.md titles its section; the weight type; the update variants that
    transcribe it)], one per code of ebp_lib.UPDATES (Update.code), in their order: the tables notebook's sections
    on the authors' codes."""
    codes = {update.code: update.weights for update in UPDATES.values() if update.code is not None}
    return [(code, weights, [v for v, (update, _, _) in UPDATE_VARIANTS.items() if UPDATES[update].code == code])
            for code, weights in codes.items()]


def authors_variant(weights: str, variant: str) -> str | None:
    """The update variant that trains a cell of `variant` with the authors' code of the paper's time (AUTHORS_CODE),
    e.g. "authors-2015 held" beside "Table 4 held"; None if there is none."""
    return next((name for name, (update, _, beside) in UPDATE_VARIANTS.items()
                 if update == AUTHORS_CODE[weights] and beside == variant), None)


def cell_line(row: dict, cell, spreads: dict) -> str:
    """'B-EBP-D [800,800]: paper 27.06, ours 31.97 ± 4.48 (n = 3), +4.91 against a band of ±3.65'."""
    judged = band(row, cell, spreads)
    ours = f"{cell.mean:.2f}" + (f" ± {cell.sd:.2f} (n = {len(cell.pooled)})" if cell.sd is not None else " (n = 1)")
    return (f"{row['row']} {row['column']}: paper {row['paper_error']:.2f}, ours {ours}, "
            f"{judged['difference']:+.2f} against a band of ±{judged['tolerance']:.2f}")


def judged_rows(table: int, rows: list[dict], cells: dict, spreads: dict) -> tuple[list[dict], list[dict]]:
    """(finished rows of `table` that have a paper number and a spread, those of them outside the band)."""
    judged = [r for r in rows if r["table"] == table and band(r, cells.get(cell_key(r)), spreads) is not None]
    return judged, [r for r in judged if is_outside(r, cells.get(cell_key(r)), spreads)]


def seed_coverage(table: int, cells: dict) -> tuple[int, int]:
    """(inside, judged): band.leave_one_seed_out over the finished cells of one table in one variant."""
    by_seed = {key: dict(zip(cell.seeds, cell.errors)) for key, cell in cells.items()
               if key[0] == table and cell.finished}
    return rule.leave_one_seed_out(by_seed)


def table_label(table: int, variant: str) -> str:
    """A table with the reading its variant shows, e.g. "Table 3 (analytic)"."""
    reading = VARIANT_READINGS.get(variant, {}).get(table)
    return f"Table {table}{f' ({reading})' if reading else ''}"


BORROWED = "one seed, borrowed spread"  # a variant of one seed per cell: its band is another variant's spread


def borrows_spread(table: int, cells: dict) -> bool:
    """Whether no finished cell of `table` has two seeds: its bands are borrowed (variant_spreads)."""
    return not any(len(c.pooled) > 1 for key, c in cells.items() if key[0] == table and c.finished)


def band_count(table: int, rows: list[dict], variants: dict, variant: str = "main") -> str:
    """'Table 2: the paper's number lies within our 95% prediction band for one more run in 25 of 36 finished
    cells (...)', with the band's leave-one-seed-out coverage on our own runs where a cell has three seeds; for a
    variant of one seed per cell, labelled BORROWED first: its count tests nothing of its own spread."""
    spreads = variant_spreads(variants, variant)
    judged, outside = judged_rows(table, rows, variants[variant], spreads)
    count = f"{len(judged) - len(outside)} of {len(judged)} finished cells"
    if borrows_spread(table, variants[variant]) and not judged:
        finished = sum(c.finished for key, c in variants[variant].items() if key[0] == table)
        return (f"{table_label(table, variant)}: one seed per cell gives no band, so none of its {finished} finished "
                f"cells is judged")
    if borrows_spread(table, variants[variant]):
        return (f"{table_label(table, variant)}, {BORROWED}: the paper's number lies within the band of the "
                f"{_beside(variant)} variant's spread in {count}; one run per cell: the band is untested on these "
                f"runs")
    inside, held_out = seed_coverage(table, variants[variant])
    coverage = (f"; leave one seed out, the band of the other seeds holds the held-out run in {inside} of "
                f"{held_out} ({inside / held_out:.0%})" if held_out else "")
    return (f"{table_label(table, variant)}: the paper's number lies within our {rule.LEVEL:.0%} prediction band "
            f"for one more run in {count}{coverage}")


def _beside(variant: str) -> str:
    """The spec's variant whose spreads `variant` borrows (UPDATE_VARIANTS; "main" for the readings)."""
    return UPDATE_VARIANTS[variant][2] if variant in UPDATE_VARIANTS else "main"


def wide_band_inside(row: dict, cell) -> bool | None:
    """Whether the paper's number lies within ours ± 2·sqrt(u_ours² + u_paper²), u the seed SD combined with the
    binomial SE of 10,000 test images on each side: a band that counts the shared test set's noise twice, shown
    beside the prediction band to say how much wider it is. None for an unfinished or missing cell."""
    if cell is None or not cell.finished or row.get("paper_error") is None:
        return None
    ours = math.sqrt((cell.sd or 0.0) ** 2 + binomial_se(cell.mean) ** 2)
    return abs(cell.mean - row["paper_error"]) <= 2 * math.sqrt(ours ** 2 + binomial_se(row["paper_error"]) ** 2)


def wide_band_count(table: int, rows: list[dict], cells: dict) -> tuple[int, int]:
    """(inside, judged) of wide_band_inside over the finished cells of one table."""
    judged = [wide_band_inside(r, cells.get(cell_key(r))) for r in rows if r["table"] == table]
    judged = [j for j in judged if j is not None]
    return sum(judged), len(judged)


def _depth(column: str) -> str:
    return "two hidden layers" if column.count(",") else "one hidden layer"


def patterns(table: int, rows: list[dict], variants: dict, variant: str = "main") -> list[str]:
    """The rows of one table (one variant) whose finished cells all lie on one side of the paper: the whole row
    where every cell does, else each depth (one or two hidden layers) where its cells do; MIN_PATTERN cells at
    the least. One sentence each: which row, direction, how many cells, by how much, how many outside the band."""
    cells, spreads = variants[variant], variant_spreads(variants, variant)
    found = []
    for label in dict.fromkeys(r["row"] for r in rows if r["table"] == table):
        judged = [(r, band(r, cells.get(cell_key(r)), spreads)) for r in rows
                  if r["table"] == table and r["row"] == label]
        judged = [(r, j) for r, j in judged if j is not None]
        groups = [("", judged)] if _one_sided(judged) else \
            [(f", {depth}", [(r, j) for r, j in judged if _depth(r["column"]) == depth])
             for depth in ("one hidden layer", "two hidden layers")]
        for name, group in groups:
            if len(group) >= MIN_PATTERN and _one_sided(group):
                sizes = sorted(abs(j["difference"]) for _, j in group)
                outside = sum(j["outside"] for _, j in group)
                side = "below" if group[0][1]["difference"] < 0 else "above"
                found.append(f"{table_label(table, variant)}, {label}{name}: ours {side} the paper in all "
                             f"{len(group)} cells, by {sizes[0]:.2f} to {sizes[-1]:.2f} points ({outside} of them "
                             f"outside the band)")
    return found


def _one_sided(judged: list) -> bool:
    """Whether every judged cell lies on the same side of the paper (none exactly on it)."""
    signs = {math.copysign(1, j["difference"]) for _, j in judged if j["difference"] != 0}
    return bool(judged) and len(signs) == 1 and all(j["difference"] != 0 for _, j in judged)


def outside_list(table: int, rows: list[dict], variants: dict, variant: str = "main") -> str:
    """Markdown: the count of one table (one variant), the families whose spreads were split, its patterns, and
    the cells where the paper lies outside our band, each with its computed explanation."""
    cells, spreads = variants[variant], variant_spreads(variants, variant)
    _, outside = judged_rows(table, rows, cells, spreads)
    parts = [band_count(table, rows, variants, variant) + "."]
    splits = split_lines(table, variants, variant)
    if splits:
        parts.append("\n".join(["Spreads not pooled across the family, its cells unalike:"]
                                + [f"- {line}." for line in splits]))
    found = patterns(table, rows, variants, variant)
    if found:
        parts.append("\n".join(["Patterns, every cell of a row on one side of the paper:"]
                               + [f"- {p}." for p in found]))
    if outside:
        parts.append("\n".join(["Outside the band:"] + [
            f"- {cell_line(r, cells[cell_key(r)], spreads)}: "
            f"{'; '.join(mechanisms(r, rows, variants, variant)) or 'unexplained'}." for r in outside]))
    return "\n\n".join(parts)


def _update_entry(row: dict, cell, spreads: dict) -> str:
    """'2.46 (n = 3, +0.04)' for a finished cell, with OUTSIDE_MARK where the paper lies outside its band; '·'."""
    judged = band(row, cell, spreads)
    if judged is None:
        return "·"
    return (f"{cell.mean:.2f} (n = {len(cell.pooled)}, {judged['difference']:+.2f})"
            + (f" {OUTSIDE_MARK}" if judged["outside"] else ""))


def update_comparison(rows: list[dict], variants: dict, names=tuple(UPDATE_VARIANTS)) -> str:
    """Markdown: every cell run under one of the update variants `names`, the paper's number beside ours with the
    spec's update (the variant each stands beside, UPDATE_VARIANTS) and with each variant (mean, seeds, ours −
    paper; OUTSIDE_MARK outside the band, each variant's spreads: variant_spreads), then per variant and row the
    mean of ours − paper over the cells it ran against the spec's on the same cells, and the EBP-D − EBP-P gaps."""
    parts = [_update_table(rows, variants, beside, group) for beside, group in _groups(variants, names)]
    return "\n\n".join(parts) if parts else "No run of these updates yet."


def _groups(variants: dict, names) -> list[tuple[str, list[str]]]:
    """The variants of `names` that have runs, grouped by the spec's variant each stands beside (UPDATE_VARIANTS)."""
    present = [v for v in names if variants.get(v)]
    return [(beside, [v for v in present if UPDATE_VARIANTS[v][2] == beside])
            for beside in dict.fromkeys(UPDATE_VARIANTS[v][2] for v in present)]


def _update_table(rows: list[dict], variants: dict, beside: str, present: list[str]) -> str:
    """update_comparison for the variants `present`, which all stand beside the spec's variant `beside`."""
    spreads = {v: variant_spreads(variants, v) for v in [beside, *present]}
    keys = [cell_key(r) for r in rows if any(cell_key(r) in variants[v] for v in present)]
    by_key = {cell_key(r): r for r in rows}
    spec = "spec" if beside == "main" else f"spec, {beside}"
    lines = [f"| cell | paper | ours, {spec} | " + " | ".join(f"ours, {v}" for v in present) + " |",
             "|---|---|---|" + "---|" * len(present)]
    for key in keys:
        row = by_key[key]
        entries = [_update_entry(row, variants[v].get(key), spreads[v]) for v in [beside, *present]]
        lines.append(f"| Table {row['table']} {row['row']} {row['column']} | {row['paper_error']:.2f} | "
                     + " | ".join(entries) + " |")
    lines += ["", *_variant_lines(rows, variants, beside, present, spreads, keys)]
    lines += _gap_lines(rows, variants, beside, present, spreads)
    return "\n".join(lines)


def _variant_lines(rows: list[dict], variants: dict, beside: str, present: list[str], spreads: dict,
                   keys: list) -> list[str]:
    """Per variant and row over the cells `keys`: the mean of ours − paper against the spec's on the same cells,
    how often the paper's number is within the band, and the paired per-seed difference (_paired_line)."""
    by_key = {cell_key(r): r for r in rows}
    spec = "spec" if beside == "main" else f"spec, {beside}"
    lines = []
    for v in present:
        for label in dict.fromkeys(by_key[k]["row"] for k in keys):
            pairs = [(band(by_key[k], variants[beside].get(k), spreads[beside]),
                      band(by_key[k], variants[v].get(k), spreads[v])) for k in keys if by_key[k]["row"] == label]
            pairs = [(a, b) for a, b in pairs if a and b]
            if pairs:
                before = statistics.fmean(a["difference"] for a, _ in pairs)
                other = statistics.fmean(b["difference"] for _, b in pairs)
                inside = sum(not b["outside"] for _, b in pairs), sum(not a["outside"] for a, _ in pairs)
                cells = f"{len(pairs)} cell{'s' if len(pairs) > 1 else ''}"
                lines.append(f"- {v}, {label} ({cells}): ours − paper {other:+.2f} on average "
                             f"({spec} {before:+.2f}); the paper's number within the band in {inside[0]} of "
                             f"{len(pairs)} ({spec} {inside[1]}).{_paired_line(variants, beside, v, keys, label)}")
    return lines


def update_findings(rows: list[dict], variants: dict, names=tuple(UPDATE_VARIANTS)) -> str:
    """Markdown: update_comparison's lines per variant and row without its tables (for the documents that quote
    them: scripts/readme_tables.py copies them into docs/maths.md)."""
    lines = []
    for beside, group in _groups(variants, names):
        spreads = {v: variant_spreads(variants, v) for v in [beside, *group]}
        keys = [cell_key(r) for r in rows if any(cell_key(r) in variants[v] for v in group)]
        lines += _variant_lines(rows, variants, beside, group, spreads, keys)
    return "\n".join(lines) if lines else "No run of these updates yet."


def _paired_line(variants: dict, beside: str, variant: str, keys: list, label: str) -> str:
    """' Paired with the spec's run of the same seed (...): variant − spec = d ± h over n runs.' over the finished
    cells of row `label`, each seed of the variant against the spec's run of that seed (the same initial weights and
    example order), h the t half-width of the mean difference (band.half_width); '' without two such pairs."""
    d = []
    for key in (k for k in keys if k[1] == label):
        a, b = variants[beside].get(key), variants[variant].get(key)
        if a is not None and b is not None and a.finished and b.finished:
            d += rule.paired_spread(dict(zip(a.seeds, a.errors)), dict(zip(b.seeds, b.errors)))[0]
    if len(d) < 2:
        return ""
    spread = rule.Spread(statistics.stdev(d), len(d) - 1)
    return (f" Paired with the spec's run of the same seed (the same initial weights and example order): "
            f"{variant} − spec = {statistics.fmean(d):+.2f} ± {rule.half_width(spread, len(d)):.2f} points "
            f"({rule.LEVEL:.0%}, {len(d)} runs).")


def _gap_lines(rows: list[dict], variants: dict, beside: str, present: list[str], spreads: dict) -> list[str]:
    """Per column run under a variant: EBP-D − EBP-P of the paper, of ours with the spec's update and with
    each variant (means over seeds; the same runs give both outputs)."""
    out = []
    for p_row in (r for r in rows if r["row"].endswith("-EBP-P")):
        d_row = _sibling(p_row, rows, p_row["row"][:-1] + "D")
        gaps = {}
        for name in [beside, *present]:
            p_cell, d_cell = variants[name].get(cell_key(p_row)), variants[name].get(cell_key(d_row))
            if band(p_row, p_cell, spreads[name]) and band(d_row, d_cell, spreads[name]):
                gaps[name] = d_cell.mean - p_cell.mean
        if set(gaps) - {beside}:
            ours = ", ".join(f"{'spec' if k == beside else k} {v:+.2f}" for k, v in gaps.items())
            out.append(f"- Table {p_row['table']} {p_row['column']}, {d_row['row']} − {p_row['row']}: paper "
                       f"{d_row['paper_error'] - p_row['paper_error']:+.2f}; ours: {ours}.")
    return out


TABLE_MARKERS = {2: "o", 3: "s", 4: "^"}
MAX_LABELS = 8  # the figure names the red cells only when they are this few; tables.md lists them all


def agreement_figure(rows: list[dict], cells: dict, tables=(2, 3, 4), spreads: dict | None = None):
    """Ours against the paper for every finished cell of `tables` (one variant's cells): mean over seeds with
    bars of the prediction band (`spreads`, by default pooled over `cells`' families), the diagonal, log axes
    (errors span 1.5-35%); the cells outside the band are filled red (too many to label: tables.md lists them)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter

    spreads = rule.family_spreads(finished_errors(cells)) if spreads is None else spreads
    fig, ax = plt.subplots(figsize=(6.4, 6.0))
    low, high, outside = math.inf, 0.0, []
    for table in tables:
        for row in (r for r in rows if r["table"] == table):
            cell = cells.get(cell_key(row))
            judged = band(row, cell, spreads)
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
    ax.plot([], [], "o", color="tab:red", label="paper outside our band (tables.md lists each)")
    ax.set(xscale="log", yscale="log", xlim=limits, ylim=limits, xlabel="paper: test error (%)",
           ylabel=f"ours: test error (%), mean over seeds, {rule.LEVEL:.0%} band for one more run",
           title="Every cell of Tables 2-4: this reproduction against the paper")
    ticks = [t for t in (1.5, 2, 3, 5, 10, 20, 30) if limits[0] <= t <= limits[1]]
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_major_formatter(FixedFormatter([f"{t:g}" for t in ticks]))
        axis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    if len(outside) <= MAX_LABELS:  # more labels than this overprint one another in the 2-5% cluster
        label_points(ax, outside)
    return fig


MAIN_TABLES = ((2, "main"), (3, "main"), (4, "main"))


def _best(rows: list[dict], cells: dict, label: str) -> str:
    """'2.12%, ours 2.17 ± 0.11%': the paper's lowest number of row `label` in the finished cells, and ours
    there."""
    judged = [r for r in rows if r["row"] == label and r["paper_error"] is not None
              and cells.get(cell_key(r)) is not None and cells[cell_key(r)].finished]
    row = min(judged, key=lambda r: r["paper_error"])
    cell = cells[cell_key(row)]
    ours = f"{cell.mean:.2f}" + ("" if cell.sd is None else f" ± {cell.sd:.2f}")
    return f"{row['paper_error']:.2f}%, ours {ours}%"


def in_short(rows: list[dict], variants: dict) -> list[str]:
    """At most five sentences answering 'did the paper reproduce?' from the records: the cells within our band
    per table, the paper's best binary and real nets beside ours, Table 4 under the held reading, the rows on one
    side of the paper, and the findings (agree / disagree on our runs). `variants`: main, Table 4 held, ...; one
    sentence saying so where no cell has a band (one seed per cell), an empty list before any cell has finished."""
    from reproduction import findings  # findings reads results only; imported here to keep agreement's imports light

    counts = []
    for table, variant in MAIN_TABLES:
        judged, outside = judged_rows(table, rows, variants[variant], variant_spreads(variants, variant))
        counts.append((table, len(judged) - len(outside), len(judged)))
    total = sum(c[2] for c in counts)
    if total == 0:
        finished = sum(c.finished for c in variants["main"].values())
        return [f"No cell is judged yet: {finished} cells have finished, with one seed each, and one seed gives no "
                f"band."] if finished else []
    out = [f"Our {rule.LEVEL:.0%} band for one more run holds the paper's number in {sum(c[1] for c in counts)} "
           f"of {total} cells (" + "; ".join(f"Table {t}: {k}/{n}" for t, k, n in counts) + ")."]
    out.append(f"The paper's best binary net errs {_best(rows, variants['main'], 'B-EBP-P')}; its best real net "
               f"{_best(rows, variants['main'], 'R-EBP-P')}.")
    if "Table 4 held" in variants:
        judged, outside = judged_rows(4, rows, variants["Table 4 held"], variant_spreads(variants, "Table 4 held"))
        if judged:
            out.append(f"Under the full-matrix reading of its spatial layers, Table 4 fits in "
                       f"{len(judged) - len(outside)} of {len(judged)}.")
    found = [p for table, variant in MAIN_TABLES for p in patterns(table, rows, variants, variant)]
    if found:
        first = re.sub(r"below the paper in all \d+ cells,", "lower",
                       re.sub(r"above the paper in all \d+ cells,", "higher", found[0].split(" (")[0]))
        out.append(f"{len(found)} rows lie wholly on one side of the paper, such as {first.replace(',', '', 1)}.")
    verdicts = [findings.verdict(f, findings.our_values(variants["main"]))["verdict"]
                for f in findings.paper_findings()]
    out.append(f"Of the paper's {len(verdicts)} findings, our runs agree with {verdicts.count('agree')}, disagree "
               f"with {verdicts.count('disagree')} and leave {verdicts.count('inconclusive')} inconclusive.")
    return out
