"""The paper's findings, judged by paired differences with the rule of reproduction.band.

A finding is a list of comparisons, each the claim "value(better) < value(worse)", where a side is one cell,
the best (lowest) of several cells, or (the worse side only) a fixed error in percent. The difference
d = worse − better is judged against the t interval of reproduction.band on the spread of *paired* differences:
EBP-P and EBP-D come from the same runs, and every run of one seed is evaluated on the same test images, so the
per-seed differences d_i = worse_i − better_i (a fixed side is the same for every seed) carry the comparison's
run-to-run noise, and nothing of the test set's. On ours (n seeds shared by both sides), the tolerance is
t_{n−1}·s_d/sqrt(n), n_b = ∞; on the paper's single runs, t_{n−1}·s_d (one run each, s_d from our seeds of the same
cells; no rounding term: each of its numbers is a count of 10,000 test images, exact at two decimals). Where the
two sides share fewer than two seeds, s_d is sqrt(s_a² + s_b²) of the sides' spreads (band.family_spreads: their
family's, or their part's where the family is split; band.combined_spread); with no spread nothing is decided.
A comparison supports the claim when d exceeds its tolerance, contradicts it when d < −tolerance, and is within
tolerance otherwise. A finding about "every" configuration agrees when every comparison supports it and
disagrees when any contradicts it; one about "most" agrees when more than half support it and disagrees when at
least half contradict it; anything else (and a comparison whose cells are not all run) is inconclusive.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import ebp_data
from reproduction import band
from reproduction.paper_tables import ROW_LABELS
from reproduction.parameters import check_dataset
from reproduction.results import DATASET_NAMES, cell_key

# "Works well": test error below the data set's bar, under any linear classifier there (ebp_data.DATASETS).
WORKS_WELL_BY_DATASET = {name: facts["works_well_percent"] for name, facts in ebp_data.DATASETS.items()}
ONE_LAYER = ("200", "400", "600", "800", "1000")
TWO_LAYER = ("[200,200]", "[400,400]", "[600,600]", "[800,800]")


@dataclass(frozen=True)
class Comparison:
    """The claim value(better) < value(worse): `better` a tuple of cell keys (the best of them), `worse` a tuple of
    cell keys or a number (percent). `label` names it in the tables."""
    label: str
    better: tuple
    worse: tuple | float


@dataclass(frozen=True)
class Finding:
    """One of the paper's claims: its wording, where the paper makes it, every/most, its comparisons."""
    title: str
    source: str
    quantifier: str
    comparisons: tuple

    @property
    def tables(self) -> set:
        """The tables whose cells the comparisons read."""
        sides = [c.better for c in self.comparisons] + [c.worse for c in self.comparisons
                                                        if isinstance(c.worse, tuple)]
        return {key[0] for side in sides for key in side}


def _cells(table, rows_labels, columns) -> tuple:
    """The cell keys of `table` in the rows `rows_labels` and the columns `columns`."""
    return tuple((table, r, c) for r in rows_labels for c in columns)


def paper_findings(dataset: str = "mnist") -> list[Finding]:
    """The paper's findings: its Summary (1)-(5) (Sect. 4), the other half of (5) from its Conclusions, and the
    claims its text makes beside them (dropout in every configuration, B-EBP-D and width, real against binary,
    EBP-P against EBP-D, two layers against one). "Works well" is the bar of `dataset`
    (WORKS_WELL_BY_DATASET); every other comparison is between cells, the same on any data set."""
    works_well = WORKS_WELL_BY_DATASET[check_dataset(dataset)]
    binary, real, outputs = ("B-EBP-P", "B-EBP-D"), ("R-EBP-P", "R-EBP-D"), ("P", "D")
    all_columns = ONE_LAYER + TWO_LAYER
    t4_columns = ("144", "169", "196", "225", "256", "289", "[361,100]")
    columns = {2: all_columns, 3: all_columns, 4: t4_columns}
    pairs = list(zip(ONE_LAYER, TWO_LAYER))
    return [
        Finding(f"(1) BMNNs trained by EBP work well (best B-EBP-P below {works_well:g}%), though not as well as "
                "real weights (best R-EBP-P below best B-EBP-P)", "Summary (1)", "every", tuple(
                    [Comparison(f"Table {t}: best B-EBP-P < {works_well:g}%", _cells(t, ["B-EBP-P"], columns[t]),
                                works_well) for t in (2, 3, 4)]
                    + [Comparison(f"Table {t}: best R-EBP-P < best B-EBP-P", _cells(t, ["R-EBP-P"], columns[t]),
                                  _cells(t, ["B-EBP-P"], columns[t])) for t in (2, 3, 4)])),
        Finding(f"(2) EBP works on BMNNs with a fan-in of a few hundred: B-EBP-P of [784, 200, 10] below "
                f"{works_well:g}%", "Summary (2)", "every", tuple(
                    Comparison(f"Table {t}: B-EBP-P 200 < {works_well:g}%", ((t, "B-EBP-P", "200"),), works_well)
                    for t in (2, 3))),
        Finding("(3) With EBP-D, two-hidden-layer BMNNs outperform one-hidden-layer ones", "Summary (3)", "most",
                tuple(Comparison(f"Table {t}: B-EBP-D {two} < {one}", ((t, "B-EBP-D", two),), ((t, "B-EBP-D", one),))
                      for t in (2, 3) for one, two in pairs)),
        Finding("(4) Dropout significantly improves BMNNs", "Summary (4)", "most", tuple(
            Comparison(f"{r} {c}: Table 3 < Table 2", ((3, r, c),), ((2, r, c),)) for r in binary
            for c in all_columns)),
        Finding("(5) Spatial filtering does not improve BMNNs: the best binary error of Table 4 is above Table 2's",
                "Summary (5)", "every", (
                    Comparison("best binary, Table 2 < Table 4", _cells(2, binary, all_columns),
                               _cells(4, binary, t4_columns)),)),
        Finding("(5′) Spatial filtering improves real-weight networks: the best real error of Table 4 is below "
                "Table 2's", "Conclusions; Sect. 4", "every", (
                    Comparison("best real, Table 4 < Table 2", _cells(4, real, t4_columns),
                               _cells(2, real, all_columns)),)),
        Finding("Dropout improves every configuration (Table 3 below Table 2 in every cell)", "Sect. 4, Effects of "
                "Dropout", "every", tuple(Comparison(f"{r} {c}: Table 3 < Table 2", ((3, r, c),), ((2, r, c),))
                                          for r in ROW_LABELS for c in all_columns)),
        Finding("Without dropout, B-EBP-D degrades with width in two-layer nets", "Sect. 4, Table 2", "every",
                tuple(Comparison(f"Table 2: B-EBP-D {a} < {b}", ((2, "B-EBP-D", a),), ((2, "B-EBP-D", b),))
                      for a, b in zip(TWO_LAYER, TWO_LAYER[1:]))),
        Finding("With dropout, B-EBP-D no longer degrades with width: [800,800] below [200,200]",
                "Sect. 4, Effects of Dropout", "every", (
                    Comparison("Table 3: B-EBP-D [800,800] < [200,200]", ((3, "B-EBP-D", "[800,800]"),),
                               ((3, "B-EBP-D", "[200,200]"),)),)),
        Finding("Real weights beat binary weights in every structure", "Sect. 4, Table 2", "every", tuple(
            Comparison(f"Table {t} {c}: R-EBP-{o} < B-EBP-{o}", ((t, f"R-EBP-{o}", c),), ((t, f"B-EBP-{o}", c),))
            for t in (2, 3, 4) for c in columns[t] for o in outputs)),
        Finding("EBP-P beats EBP-D", "Sect. 4, Table 2", "most", tuple(
            Comparison(f"Table {t} {c}: {w}-EBP-P < {w}-EBP-D", ((t, f"{w}-EBP-P", c),), ((t, f"{w}-EBP-D", c),))
            for t in (2, 3, 4) for c in columns[t] for w in "BR")),
        Finding("With EBP-P, two hidden layers beat one of the same width", "Sect. 4, Table 2", "most", tuple(
            Comparison(f"Table {t}: {w}-EBP-P {two} < {one}", ((t, f"{w}-EBP-P", two),), ((t, f"{w}-EBP-P", one),))
            for t in (2, 3) for w in "BR" for one, two in pairs)),
    ]


@dataclass(frozen=True)
class Measured:
    """One cell's test errors (percent) by seed: ours, or the paper's single run (seed "paper")."""
    by_seed: dict

    @property
    def mean(self) -> float:
        return statistics.fmean(self.by_seed.values())


def paper_values(rows: list[dict]) -> dict:
    """cell_key -> Measured of the paper's single run. Rows of another data set than the paper's (dataset_rows)
    have no paper number and no entry."""
    return {cell_key(r): Measured({"paper": r["paper_error"]}) for r in rows
            if r["paper_error"] is not None}


def our_values(cells: dict) -> dict:
    """cell_key -> Measured of our errors by seed, for cells whose runs are finished."""
    return {key: Measured(dict(zip(cell.seeds, cell.errors))) for key, cell in cells.items() if cell.finished}


def side_value(side, values: dict) -> tuple | None:
    """(Measured, the cell it came from) of one side of a comparison: its best (lowest mean) cell in `values`,
    or its fixed error (no cell); None if one of its cells is missing."""
    if not isinstance(side, tuple):
        return Measured({}), None
    if any(key not in values for key in side):
        return None
    key = min(side, key=lambda k: values[k].mean)
    return values[key], key


def family_spreads(values: dict, fallback: dict | None = None) -> dict:
    """{cell key: Spread} of our values (band.family_spreads), a cell without one taking `fallback`'s (the main
    variant's values, for a variant of one seed per cell)."""
    own = band.family_spreads({key: list(m.by_seed.values()) for key, m in values.items()})
    return {**(family_spreads(fallback) if fallback else {}), **own}


def difference_spread(better: tuple, worse: tuple | None, fixed: float | None, spread_from: dict,
                      families: dict | None = None) -> band.Spread | None:
    """The run-to-run spread of worse − better for the cells `better` and `worse` (None: the fixed error
    `fixed`), from our values `spread_from`: the SD of the paired per-seed differences (band.paired_spread), or
    where fewer than two seeds are shared, the two cells' spreads in `families` (by default family_spreads of
    `spread_from`) combined (band.combined_spread); None where neither exists."""
    if better in spread_from and (worse is None or worse in spread_from):
        b = spread_from[better].by_seed
        w = {seed: fixed for seed in b} if worse is None else spread_from[worse].by_seed
        _, spread = band.paired_spread(b, w)
        if spread is not None:
            return spread
    families = family_spreads(spread_from) if families is None else families
    return band.combined_spread(families.get(better), None if worse is None else families.get(worse))


def judge(comparison: Comparison, values: dict, spread_from: dict | None = None, families: dict | None = None) -> dict:
    """One comparison on one set of values (ours, or the paper's with our values as `spread_from`): status
    (supports, contradicts, within tolerance, not run yet), the difference d = worse − better (points), its
    tolerance (the module's rule; infinite where no spread is known), and the cells each side came from.
    `families`: the family spreads for comparisons of fewer than two shared seeds (family_spreads of
    `spread_from` by default)."""
    spread_from = values if spread_from is None else spread_from
    better, worse = side_value(comparison.better, values), side_value(comparison.worse, values)
    if better is None or worse is None:
        return {"status": "not run yet"}
    fixed = float(comparison.worse) if worse[1] is None else None
    d = (fixed if fixed is not None else worse[0].mean) - better[0].mean
    spread = difference_spread(better[1], worse[1], fixed, spread_from, families)
    seeds = set(better[0].by_seed) & set(worse[0].by_seed) if fixed is None else set(better[0].by_seed)
    n = max(len(seeds), 1)
    tolerance = math.inf if spread is None else band.half_width(spread, n)
    status = "supports" if d > tolerance else "contradicts" if d < -tolerance else "within tolerance"
    return {"status": status, "d": d, "tolerance": tolerance, "better": better, "worse": worse}


def verdict(finding: Finding, values: dict, spread_from: dict | None = None, families: dict | None = None) -> dict:
    """A finding judged on one set of values (judge's arguments): verdict (agree, disagree, inconclusive, not
    run yet), the count of each status, and the judged comparisons in order."""
    judged = [judge(c, values, spread_from, families) for c in finding.comparisons]
    counts = {s: sum(j["status"] == s for j in judged)
              for s in ("supports", "contradicts", "within tolerance", "not run yet")}
    n = len(judged)
    if counts["not run yet"] == n:
        word = "not run yet"
    elif finding.quantifier == "every":
        word = "agree" if counts["supports"] == n else "disagree" if counts["contradicts"] else "inconclusive"
    else:
        word = ("agree" if 2 * counts["supports"] > n else "disagree" if 2 * counts["contradicts"] >= n
                else "inconclusive")
    return {"verdict": word, "counts": counts, "judged": judged}


def describe_verdict(v: dict) -> str:
    """'agree (5 ✓, 0 ✗, 1 ~ of 6)': the verdict and how many comparisons support it (✓), contradict it (✗), are
    within tolerance (~) or not run yet."""
    c, n = v["counts"], sum(v["counts"].values())
    if v["verdict"] == "not run yet":
        return "not run yet"
    missing = f", {c['not run yet']} not run" if c["not run yet"] else ""
    return f"{v['verdict']} ({c['supports']} ✓, {c['contradicts']} ✗, {c['within tolerance']} ~{missing} of {n})"


# The tables a variant's reading changes (findings_summary and finding_details show a variant's verdict only for
# findings that read one of them); the notebook names its variants with these labels.
VARIANT_TABLES = {"Table 3 analytic": {3}, "Table 4 held": {4}}


def findings_summary(rows: list[dict], variants: dict, findings: list[Finding] | None = None) -> str:
    """Markdown: one line per finding, judged on the paper's numbers and on ours in each variant ({label: cells};
    the first is the tables' main reading; a later variant is shown only for findings that read a table its
    readings change: Table 3 for a dropout reading, Table 4 for a mask reading, as named by VARIANT_TABLES)."""
    findings = paper_findings() if findings is None else findings
    labels = list(variants)
    paper, *ours = judged_columns(rows, variants, labels)
    lines = ["| finding | every/most | paper's numbers | " + " | ".join(name for name, *_ in ours) + " |",
             "|---" * (3 + len(labels)) + "|"]
    for f in findings:
        entries = []
        for k, (label, (_, *column)) in enumerate(zip(labels, ours)):
            touched = k == 0 or VARIANT_TABLES.get(label, set()) & f.tables
            entries.append(f"**{describe_verdict(verdict(f, *column))}**" if touched else "same")
        lines.append(f"| {f.title} ({f.source}) | {f.quantifier} | {describe_verdict(verdict(f, *paper[1:]))} | "
                     + " | ".join(entries) + " |")
    return "\n".join(lines)


def findings_brief(rows: list[dict], cells: dict, findings: list[Finding] | None = None) -> str:
    """Markdown: one line per finding, its verdict on the paper's numbers and on ours (`cells`, the main variant),
    without the other variants' columns (findings_summary has them): a table narrow enough to read down."""
    findings = paper_findings() if findings is None else findings
    columns = judged_columns(rows, {"main": cells}, ["main"])
    lines = ["| finding | every/most | " + " | ".join(
        "paper's numbers" if name == "paper" else name for name, *_ in columns) + " |", "|---" * (2 + len(columns)) + "|"]
    for f in findings:
        lines.append(f"| {f.title} | {f.quantifier} | "
                     + " | ".join(describe_verdict(verdict(f, *column)) for _, *column in columns) + " |")
    return "\n".join(lines)


def judged_columns(rows: list[dict], variants: dict, labels: list[str]) -> list[tuple]:
    """(name, values, spread_from, families) of each column a finding is judged in: the paper's numbers (where
    `rows` have them) with the spreads of our main variant (the first), then ours in each of `labels`, a
    variant's families falling back on the main variant's."""
    main = our_values(next(iter(variants.values()))) if variants else {}
    main_families = family_spreads(main)
    paper = paper_values(rows)
    columns = [("paper", paper, main, main_families)] if paper else []
    for label in labels:
        values = our_values(variants[label])
        columns.append((_ours_header(list(variants).index(label), label), values, values,
                        family_spreads(values, main)))
    return columns


def _ours_header(k: int, label: str) -> str:
    """The column of our verdicts: 'ours' for the main variant (the first), 'ours, <label>' for the others."""
    return "ours" if k == 0 else f"ours, {label}"


STATUS_MARKS = {"supports": "✓", "contradicts": "✗", "within tolerance": "~", "not run yet": "·"}


def _judged_text(j: dict) -> str:
    """One judged comparison (judge) in a table: its mark, d and tolerance."""
    if j["status"] == "not run yet":
        return "· not run yet"
    if math.isinf(j["tolerance"]):
        return f"{STATUS_MARKS[j['status']]} {j['d']:+.2f} (no seed spread)"
    return f"{STATUS_MARKS[j['status']]} {j['d']:+.2f} (tol {j['tolerance']:.2f})"


def finding_details(finding: Finding, rows: list[dict], variants: dict, max_lines: int = 12) -> str:
    """Markdown: the comparisons that carry a finding's verdicts, one line each: d = worse − better with its
    tolerance and a mark (✓ supports, ✗ contradicts, ~ within tolerance, · not run yet), for the paper's numbers
    (where `rows` have them: not for another data set) and ours (variants as in findings_summary). Beyond
    `max_lines` comparisons, those marked ✓ everywhere, and those not run in any column (a data set whose grid is
    partly trained), are counted in a last line each rather than listed."""
    labels = [label for k, label in enumerate(variants)
              if k == 0 or VARIANT_TABLES.get(label, set()) & finding.tables]
    columns = judged_columns(rows, variants, labels)  # no paper column for another data set than the paper's
    judged = [[judge(c, *column) for _, *column in columns] for c in finding.comparisons]
    lines = [f"**{finding.title}** ({finding.source}; {finding.quantifier}) — d = worse − better, points",
             "", "| comparison | " + " | ".join(name for name, *_ in columns) + " |",
             "|---" * (1 + len(columns)) + "|"]
    hidden = {"supports": 0, "not run yet": 0}
    for comparison, row in zip(finding.comparisons, judged):
        same = {j["status"] for j in row}
        if len(finding.comparisons) > max_lines and len(same) == 1 and same <= set(hidden):
            hidden[same.pop()] += 1
            continue
        lines.append(f"| {comparison.label} | " + " | ".join(_judged_text(j) for j in row) + " |")
    if hidden["supports"]:
        lines.append(f"| {hidden['supports']} more comparisons | " + " | ".join("✓" for _ in columns) + " |")
    if hidden["not run yet"]:
        lines.append(f"| {hidden['not run yet']} comparisons not run yet | " + " | ".join("·" for _ in columns) + " |")
    return "\n".join(lines)


def findings_by_dataset(cells_by_dataset: dict) -> str:
    """Markdown: one line per paper finding, judged on our numbers of each data set ({dataset: cells}) by the
    same rule (verdict), each with its own "works well" bar (paper_findings(dataset)); the findings' wording is
    the first data set's."""
    per_dataset = {d: paper_findings(d) for d in cells_by_dataset}
    headers = [f"ours, {DATASET_NAMES.get(d, d)} (works well: < {WORKS_WELL_BY_DATASET[d]:g}%)"
               for d in cells_by_dataset]
    lines = ["| finding | every/most | " + " | ".join(headers) + " |", "|---" * (2 + len(headers)) + "|"]
    first = next(iter(per_dataset.values()))
    for k, finding in enumerate(first):
        entries = [f"**{describe_verdict(verdict(per_dataset[d][k], our_values(cells)))}**"
                   for d, cells in cells_by_dataset.items()]
        lines.append(f"| {finding.title} ({finding.source}) | {finding.quantifier} | " + " | ".join(entries) + " |")
    return "\n".join(lines)
