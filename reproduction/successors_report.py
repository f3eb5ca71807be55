"""The comparison of EBP with its successors, from the records: rows per method and net (seeds pooled), the table,
the figure of error against training time, the calibration plot, the verdicts (notebooks/successors.ipynb).

Successor runs: outputs/successors/<profile>/<dataset>/<method>-<arch>[-seed<N>]/result.json (reproduction.successors).
EBP twice. At the paper's protocols (the reproduction): the committed records of outputs/runs/paper (MNIST) and
paper-fashion-mnist, binary weights at 800 and [800, 800], without dropout (Table 2) and with the paper's sampled
dropout (Table 3), 120 epochs on all 60,000 images, so its "time to best" is its training time (wall seconds).
Tuned like the successors (methods "ebp-tuned", "ebp-tuned-dropout", successors.ebp): the same harness, split, grid
rule and early stop; its grid chooses the input preprocessing and the initial scale (EBP has no step size), early
stopping its epoch. Both give EBP-D (the deployed ±1 net) and EBP-P (the predictive).
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from pathlib import Path

from scipy import stats

import ebp_data
from ebp_lib import DEFAULT_UPDATE
from reproduction import band, paired, records
from reproduction import successors as sc
from reproduction.folder import results_folder
from reproduction.results import DATASET_NAMES
from successors import registry

# Each data set's EBP runs at the paper's protocol: the paper profile's folder for it (folder.results_folder)
EBP_PROFILES = {dataset: results_folder("paper", dataset) for dataset in ebp_data.DATASETS}
NETS = ("800", "800-800")
METHOD_LABELS = {**{m: registry.METHODS[m].label for m in registry.SUCCESSORS}, "ebp": "EBP (B-EBP-D / -P)",
                 "ebp-dropout": "EBP, dropout 0.8 (B-EBP-D / -P)", "ebp-tuned": "EBP tuned (D / P)",
                 "ebp-tuned-dropout": "EBP tuned, dropout 0.8 (D / P)"}  # short: the tables fit the book's column
SHORT = {"ste": "STE", "bop": "Bop", "bayesbinn": "BayesBiNN"}  # table headers
EBP_METHODS = ("ebp", "ebp-dropout")  # the paper's Table 2 protocol, and Table 3's (sampled masks): EBP's best on two layers
TUNED_EBP = ("ebp-tuned", "ebp-tuned-dropout")  # EBP tuned like the successors (successors.ebp)
PAPER_PROTOCOL = dict(zip(TUNED_EBP, EBP_METHODS))  # each tuned variant's paper-protocol counterpart
SUCCESSORS = registry.SUCCESSORS
PROTOCOL_SEEDS = 3  # seeds 0, 1, 2 of every method, net and data set
COLUMNS = EBP_METHODS + TUNED_EBP + SUCCESSORS
COLOURS = {**{m: registry.METHODS[m].colour for m in registry.SUCCESSORS}, "ebp": "black", "ebp-dropout": "grey",
           "ebp-tuned": "tab:red", "ebp-tuned-dropout": "tab:purple"}


def load_successors(root, profile: str, rescore: bool = True) -> list[dict]:
    """Every finished, consistent successor record of `profile` under root whose reported error its saved net
    vouches for (successors.net_problems: its digest, or re-scored where `rescore`); others are left out, named. A
    record's evaluation is checked whole (successors.evaluation_problems) before any of it is used."""
    found, left = [], []
    for path in sorted(Path(root, profile).glob("*/*/result.json")):
        try:
            record = records.read_record(path)
        except records.RecordError as err:
            left.append(f"{path}: {err}")
            continue
        problems = records.record_problems(record)
        if not problems and record["finished"] and (rescore or record["evaluation"].get("net_sha256")):
            problems = sc.net_problems(record, path.parent)
        if problems or not record["finished"]:
            left.append(f"{path}: {'; '.join(problems) or 'unfinished'}")
            continue
        found.append(record)
    if left:
        print("left out:\n  " + "\n  ".join(left))
    return found


MACHINE_CLASSES = {"AMD EPYC": "AMD EPYC", "Intel(R) Xeon(R) Processor": "Intel Xeon"}


def machines(sessions: list[dict]) -> str:
    """The machine class(es) a run's sessions ran on (MACHINE_CLASSES of the recorded CPU model), in order, each
    once; "?" where a session recorded none."""
    return " + ".join(dict.fromkeys(MACHINE_CLASSES.get(x.get("cpu") or "?", x.get("cpu") or "?") for x in sessions))


def core_seconds(record: dict) -> float | None:
    """The CPU seconds a successor run cost: its grid points' and its epochs' training (None where the record holds
    wall seconds only)."""
    parts = [p.get("cpu_seconds") for p in record["grid"]["points"]] + [h.get("cpu_seconds") for h in record["history"]]
    return None if None in parts else round(sum(parts), 2)


def successor_rows(results: list[dict]) -> list[dict]:
    """One row per run: method, dataset, net, seed and what its evaluation says (errors in %; times in seconds,
    core-seconds where the record has them)."""
    rows = []
    for r in results:
        p, e = r["parameters"], r["evaluation"]
        out = e["outputs"]
        prob = out["predictive"] if "predictive" in out else out["deployed"]  # EBP's records have no deployed
        rows.append({"method": p["method"], "dataset": p["dataset"], "net": p["architecture"], "seed": p["seed"],
                     "protocol": r["protocol"], "deployed": 100 * e["packed"]["error"],
                     "predictive": 100 * out["predictive"]["test_error"] if "predictive" in out else None,
                     "nll": prob["nll"], "ece": prob["ece"], "mismatches": e["packed"]["mismatches"],
                     "s_per_epoch": e["seconds_per_epoch"], "s_to_best": e["seconds_to_best_epoch"],
                     "cpu_s_per_epoch": e.get("cpu_seconds_per_epoch"),
                     "cpu_s_to_best": e.get("cpu_seconds_to_best_epoch"), "machine": machines(r["sessions"]),
                     "core_seconds": core_seconds(r),
                     "best_epoch": r["best_epoch"], "epochs_to_target": e["epochs_to_target"],
                     "target": 100 * e["target_error"], "n_tuned": e["n_tuned"],
                     "chosen": r["grid"]["chosen"], "epochs_done": r["epochs_done"],
                     "reliability": prob["reliability"]})
    return rows


def ebp_rows(ebp_results, dataset: str) -> list[dict]:
    """One row per EBP run of the paper's protocol on `dataset`: binary weights, the paper's nets, the spec's update
    (the authors' update variants are other algorithms), without dropout (method "ebp", Table 2) or with the paper's
    sampled dropout masks ("ebp-dropout", Table 3: EBP's best deployable two-layer net). Its records time the wall
    clock only (one thread per run, two runs on two cores): `cpu_s_*` stay None."""
    rows = []
    for r in ebp_results:
        p = r["parameters"]
        if (r["method"] != "ebp" or Path(r["run_dir"]).parts[0] != EBP_PROFILES[dataset] or p["dataset"] != dataset
                or p["weights"] != "binary" or p["dropout"] not in (None, "sampled") or p["architecture"] not in NETS
                or p["update"] != DEFAULT_UPDATE or not r["finished"]):
            continue
        history, target = r["history"], sc.TARGET_ERROR[dataset]
        rows.append({"method": "ebp" if p["dropout"] is None else "ebp-dropout", "dataset": dataset,
                     "net": p["architecture"], "seed": p["seed"],
                     "protocol": r["protocol"], "deployed": 100 * r["final"]["test_ebp_d"],
                     "predictive": 100 * r["final"]["test_ebp_p"], "nll": None, "ece": None, "mismatches": None,
                     "s_per_epoch": statistics.median(h["train_seconds"] for h in history),
                     "s_to_best": r["train_seconds"], "cpu_s_per_epoch": None, "cpu_s_to_best": None,
                     "machine": machines(r["sessions"]), "best_epoch": len(history),
                     "epochs_to_target": next((h["epoch"] for h in history if h["test_ebp_d"] <= target), None),
                     "target": 100 * target, "n_tuned": 0, "chosen": None, "epochs_done": len(history),
                     "reliability": None})
    return rows


def _mean_sd(values, digits: int = 2) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _ints(values) -> str:
    return ", ".join("–" if v is None else str(v) for v in values)


def _groups(rows: list[dict], dataset: str):
    """(method, net, its runs sorted by seed) for every method and net with a run on `dataset`, EBP first."""
    for method in COLUMNS:
        for net in NETS:
            group = sorted((r for r in rows if r["method"] == method and r["net"] == net and r["dataset"] == dataset),
                           key=lambda r: r["seed"])
            if group:
                yield method, net, group


def net_label(net: str) -> str:
    return f"[{net.replace('-', ', ')}]"


def _method_table(rows: list[dict], dataset: str, columns) -> str:
    """Markdown: one row per method and net with runs on `dataset` (_groups), EBP first; `columns` are (header, the
    cell of a group of runs sorted by seed). A few columns per table: each fits the book's text column."""
    lines = ["| method | net | " + " | ".join(head for head, _ in columns) + " |", "|" + "---|" * (2 + len(columns))]
    for method, net, group in _groups(rows, dataset):
        lines.append(f"| {METHOD_LABELS[method]} | {net_label(net)} | " + " | ".join(cell(group) for _, cell in columns)
                     + " |")
    return "\n".join(lines)


def table(rows: list[dict], dataset: str) -> str:
    """Markdown: per method and net, seeds pooled (mean ± SD): the deployed ±1 net's test error, the predictive's,
    NLL and ECE of the probabilistic output (runs_table: which seeds)."""
    return _method_table(rows, dataset, [
        (head, lambda group, key=key: _mean_sd(r[key] for r in group))
        for head, key in (("deployed ±1 net (%)", "deployed"), ("predictive (%)", "predictive"), ("NLL", "nll"),
                          ("ECE", "ece"))])


def _mismatches(group: list[dict]) -> str:
    mismatches = [r["mismatches"] for r in group]
    return "–" if None in mismatches else str(sum(mismatches))


def _machine_classes(group: list[dict]) -> str:
    return ", ".join(sorted({m for r in group for m in r["machine"].split(" + ")}))


def runs_table(rows: list[dict], dataset: str) -> str:
    """Markdown: per method and net, the seeds run, how many hyperparameters the grid tuned, the packed-inference
    mismatches with the float evaluation (summed over seeds) and the machine classes the runs ran on."""
    return _method_table(rows, dataset, [
        ("seeds", lambda group: _ints(r["seed"] for r in group)), ("tuned", lambda group: str(group[0]["n_tuned"])),
        ("packed mismatches", _mismatches), ("machine", _machine_classes)])


def cost_unit(group: list[dict]) -> str:
    """The one unit a group of runs' costs are shown in: "core-s" (the process's CPU time, one thread: what an idle
    core takes) where every run recorded it, else "wall s" (older EBP records hold wall seconds only) for all."""
    return "core-s" if all(r["cpu_s_to_best"] is not None for r in group) else "wall s"


def run_cost(row: dict, unit: str, what: str):
    return row[f"cpu_s_{what}"] if unit == "core-s" else row[f"s_{what}"]


def cost_table(rows: list[dict], dataset: str) -> str:
    """Markdown: per method and net, seeds pooled (mean ± SD): training seconds per epoch (median of the epochs)
    and to the best epoch (grid excluded), in the group's one cost_unit, the best epoch and the first epoch at or
    below the target test error per seed (runs_table: the machines)."""
    def seconds(what: str, digits: int):
        return lambda group: _mean_sd((run_cost(r, cost_unit(group), what) for r in group), digits)
    return _method_table(rows, dataset, [
        ("seeds", lambda group: _ints(r["seed"] for r in group)), ("s / epoch", seconds("per_epoch", 1)),
        ("s to best", seconds("to_best", 0)), ("unit", cost_unit),
        ("best epoch", lambda group: _ints(r["best_epoch"] for r in group)),
        ("epochs to target", lambda group: _ints(r["epochs_to_target"] for r in group))])


def dataset_tables(rows: list[dict], dataset: str) -> str:
    """Markdown: the errors (table), the runs (runs_table) and the cost (cost_table) on `dataset`, each titled."""
    return "\n\n".join(f"**{title}**\n\n{make(rows, dataset)}" for title, make in (
        ("Errors", table), ("Runs", runs_table), ("Cost", cost_table)))


def choices_table(rows: list[dict]) -> str:
    """Markdown: what the grid chose for each run of EBP tuned like the successors (input preprocessing, the initial
    scale of h), the best validation epoch (the one reported) and the epoch it stopped at."""
    lines = ["| data | net | method | seed | preprocessing | initial scale | best epoch | stopped at |", "|" + "---|" * 8]
    for r in sorted((r for r in rows if r["method"] in TUNED_EBP),
                    key=lambda r: (list(EBP_PROFILES).index(r["dataset"]), r["net"], r["method"], r["seed"])):
        chosen = r["chosen"]
        lines.append(f"| {r['dataset']} | {net_label(r['net'])} | {r['method']} | {r['seed']} | {chosen['preprocessing']} | "
                     f"{chosen['init_scale']:g} | {r['best_epoch']} | {r['epochs_done']} |")
    return "\n".join(lines) if len(lines) > 2 else "EBP tuned like the successors: not yet run."


def welch_difference(a, b) -> tuple[float, float, float] | None:
    """(mean(a) − mean(b), the half-width of its band.LEVEL t interval, Welch–Satterthwaite df) for two independent
    sets of runs evaluated on the same test images: it conditions on this test set (the run-to-run spread of each
    only; another draw of test images would move the difference too: reproduction.paired.images_and_seeds counts
    that); None unless both have two runs or more."""
    a, b = list(a), list(b)
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    d = statistics.fmean(a) - statistics.fmean(b)
    if va + vb == 0:
        return d, 0.0, math.inf
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return d, stats.t.ppf((1 + band.LEVEL) / 2, df) * math.sqrt(va + vb), df


def _errors(rows, dataset, net, method, output="deployed") -> list[float]:
    return [r[output] for r in rows if r["dataset"] == dataset and r["net"] == net and r["method"] == method
            and r[output] is not None]


NOT_CONCLUSIVE = "not conclusive, an interval needs two seeds or more of each"
# (successor, the output compared): deployed ±1 nets against EBP-D, BayesBiNN's predictive against EBP-P; each
# against EBP with and without dropout.
COMPARISONS = [(m, "deployed") for m in SUCCESSORS] + [("bayesbinn", "predictive")]
EBP_OUTPUT_LABELS = {"deployed": "EBP-D", "predictive": "EBP-P"}


def _compare(rows: list[dict], dataset: str, net: str, method: str, output: str, ebp_method: str):
    """(the successor's errors, EBP's, welch_difference of the two or None) for one comparison of COMPARISONS."""
    ours = _errors(rows, dataset, net, method, output)
    ebp = _errors(rows, dataset, net, ebp_method, output)
    return ours, ebp, welch_difference(ours, ebp)


def _side(d: float, h: float) -> str:
    """Where the interval d ± h lies: "lower" (below 0: the successor errs less), "higher", or "not separable"."""
    return "lower" if d + h < 0 else "higher" if d - h > 0 else "not separable"


def _verdict(d: float, h: float) -> str:
    side = _side(d, h)
    return "not separable from EBP" if side == "not separable" else f"{side} error than EBP"


def differences(rows: list[dict], dataset: str) -> list[str]:
    """One line per successor, net and EBP protocol with runs: the successor's test error minus EBP's (deployed ±1
    nets against EBP-D, BayesBiNN's predictive against EBP-P), means over seeds with Welch's band.LEVEL interval,
    and what it says."""
    lines = []
    for net in NETS:
        for method, output in COMPARISONS:
            for ebp_method in EBP_METHODS:
                ours, ebp, found = _compare(rows, dataset, net, method, output, ebp_method)
                if not ours or not ebp:
                    continue
                what = (f"{METHOD_LABELS[method]}{' predictive' if output == 'predictive' else ''} − "
                        f"{EBP_OUTPUT_LABELS[output]}{' with dropout' if ebp_method == 'ebp-dropout' else ''}")
                if found is None:
                    lines.append(f"- {net_label(net)}, {what}: {statistics.fmean(ours) - statistics.fmean(ebp):+.2f} "
                                 f"points ({len(ours)} seed{'s' if len(ours) > 1 else ''} against {len(ebp)}): "
                                 + NOT_CONCLUSIVE)
                    continue
                d, h, _ = found
                lines.append(f"- {net_label(net)}, {what}: {d:+.2f} ± {h:.2f} points ({band.LEVEL:.0%} Welch interval, "
                             f"{len(ours)} and {len(ebp)} seeds): {_verdict(d, h)}")
    return lines


def difference_table(rows: list[dict]) -> tuple[str, int, int]:
    """Markdown: successor − EBP in points, Welch's band.LEVEL interval, one row per data set, net and EBP protocol
    where a comparison has two seeds or more on both sides (bold: the interval excludes 0; n.c.: not conclusive,
    fewer seeds); with how many comparisons were judged and how many there are."""
    head = "| data | net | EBP | " + " | ".join(
        f"{SHORT[m]}{' predictive' if o == 'predictive' else ''}" for m, o in COMPARISONS) + " |"
    lines, judged, total = [head, "|" + "---|" * (3 + len(COMPARISONS))], 0, 0
    for dataset in EBP_PROFILES:
        for net in NETS:
            for ebp_method in EBP_METHODS:
                cells = []
                for method, output in COMPARISONS:
                    ours, ebp, found = _compare(rows, dataset, net, method, output, ebp_method)
                    total += bool(ours and ebp)
                    judged += found is not None
                    d, h, _ = found or (0, 0, 0)
                    text = f"{d:+.2f} ± {h:.2f}"
                    cells.append("n.c." if found is None else f"**{text}**" if abs(d) > h else text)
                if any(c != "n.c." for c in cells):
                    protocol = "dropout" if ebp_method == "ebp-dropout" else "no dropout"
                    lines.append(f"| {dataset} | {net_label(net)} | {protocol} | " + " | ".join(cells) + " |")
    return "\n".join(lines), judged, total


def _cells(rows: list[dict]) -> dict:
    """{(dataset, net, method, output): [errors of its seeds]}."""
    cell = {}
    for r in rows:
        for output in EBP_OUTPUT_LABELS:
            if r[output] is not None:
                cell.setdefault((r["dataset"], r["net"], r["method"], output), []).append(r[output])
    return cell


def _errors_table(cell: dict, columns) -> tuple[list[str], bool]:
    """Markdown lines of the cells' mean ± SD per data set and net with a run (the seed count in brackets where it
    is not PROTOCOL_SEEDS), and whether any count was."""
    lines = ["| data | net | " + " | ".join(c[2] for c in columns) + " |", "|" + "---|" * (2 + len(columns))]
    other_counts = False
    for dataset in EBP_PROFILES:
        for net in NETS:
            values = [cell.get((dataset, net, m, o), []) for m, o, _ in columns]
            if any(values):
                other_counts |= any(v and len(v) != PROTOCOL_SEEDS for v in values)
                lines.append(f"| {dataset} | {net_label(net)} | " + " | ".join(
                    "–" if not v else _mean_sd(v) + ("" if len(v) == PROTOCOL_SEEDS else f" ({len(v)})")
                    for v in values) + " |")
    return lines, other_counts


def tuned_difference_table(comparisons: list[dict]) -> str:
    """Markdown: successor − EBP tuned like the successors (points) with the images-and-seeds 95% half-width, one
    row per data set, net and tuned variant with a run (bold: the interval excludes 0; "(1 seed)": no interval;
    W: Welch's, where a side keeps no per-image predictions)."""
    head = "| data | net | tuned EBP | " + " | ".join(
        f"{SHORT[m]}{' predictive' if o == 'predictive' else ''}" for m, o in COMPARISONS) + " |"
    lines = [head, "|" + "---|" * (3 + len(COMPARISONS))]
    for dataset in EBP_PROFILES:
        for net in NETS:
            for ebp_method in TUNED_EBP:
                found = {(c["method"], c["output"]): c for c in comparisons if (c["dataset"], c["net"], c["ebp"]) ==
                         (dataset, net, ebp_method) and c["verdict"] != NO_RUN}
                if not found:
                    continue
                cells = []
                for key in COMPARISONS:
                    c = found.get(key)
                    if c is None or c["verdict"] == ONE_SEED:
                        cells.append("–" if c is None else f"{c['difference']:+.2f} (1 seed)")
                        continue
                    lo, hi = c["images_and_seeds"] or c["welch"]
                    text = f"{c['difference']:+.2f} ± {(hi - lo) / 2:.2f}" + " W" * (c["images_and_seeds"] is None)
                    cells.append(f"**{text}**" if lo > 0 or hi < 0 else text)
                protocol = "dropout" if ebp_method == "ebp-tuned-dropout" else "no dropout"
                lines.append(f"| {dataset} | {net_label(net)} | {protocol} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


TUNED_EXPECTED = len(TUNED_EBP) * len(NETS) * len(EBP_PROFILES) * PROTOCOL_SEEDS


def summary(rows: list[dict], expected_runs: int, pairs: list[dict] = ()) -> str:
    """Markdown for README.md (scripts/readme_tables.py copies it there): per data set and net, the deployed ±1
    net's test error of every method and the predictive of EBP and BayesBiNN (mean ± SD, the seed count where it is
    not PROTOCOL_SEEDS), in three tables of six columns or fewer (the book's column): EBP at the paper's protocols,
    the successors, EBP tuned like the successors; the tally of the differences with paper-protocol
    EBP that have seeds enough (Welch; difference_table, which the notebook shows); the differences with tuned EBP
    over images and seeds (tuned_difference_table of `pairs`, paired.pair_rows), the verdict sentences and whether
    the MNIST verdict reversed; the runs finished of `expected_runs` successor runs and TUNED_EXPECTED tuned EBP runs; what each
    protocol tunes in one sentence."""
    cell = _cells(rows)
    ebp_lines, ebp_other = _errors_table(cell, [(m, o, f"{EBP_OUTPUT_LABELS[o]}{', dropout' * ('dropout' in m)}")
                                                for m in EBP_METHODS for o in EBP_OUTPUT_LABELS])
    lines, other_counts = _errors_table(cell, [(m, "deployed", SHORT[m]) for m in SUCCESSORS]
                                        + [("bayesbinn", "predictive", "BayesBiNN predictive")])
    tuned_lines, tuned_other = _errors_table(cell, [(m, o, f"{EBP_OUTPUT_LABELS[o]}{', dropout' * ('dropout' in m)}")
                                                    for m in TUNED_EBP for o in EBP_OUTPUT_LABELS])
    successors = [r for r in rows if r["method"] in SUCCESSORS]
    tuned = [r for r in rows if r["method"] in TUNED_EBP]
    text = [f"Test error (%), mean ± SD over {PROTOCOL_SEEDS} seeds"
            f"{' (other counts in brackets)' * (other_counts or ebp_other)}, of the deployed ±1 nets (EBP: EBP-D) and "
            f"the predictives; {len(successors)} of the {expected_runs} successor runs finished. EBP at the paper's "
            "protocols:", "\n".join(ebp_lines), "The successors, tuned on a validation split:", "\n".join(lines)]
    if tuned:
        text += [f"EBP tuned like the successors (seeds{' in brackets' * tuned_other}; {len(tuned)} of its "
                 f"{TUNED_EXPECTED} runs finished):", "\n".join(tuned_lines)]
    _, judged, total = difference_table(rows)
    if judged:
        text.append(f"Successor − EBP at the paper's protocols ({band.LEVEL:.0%} Welch intervals, which condition on "
                    f"this test set; the table: the notebook). {tally(rows)}")
    comparisons = tuned_comparisons(rows, list(pairs))
    if tuned:
        text += [TUNED_DIFFERENCE_CAPTION + ":", tuned_difference_table(comparisons)]
    text.append("\n".join(f"- {line}" for line in verdict_sentences(comparisons) + [reversal_sentence(comparisons)]))
    waiting = f"{total - judged} of the {total} comparisons rest on one seed: not conclusive yet. " if judged < total else ""
    text.append(waiting + "The successors were tuned on a validation split. EBP ran at the paper's protocols and, "
                "separately, tuned like them. " + WHAT_EBP_TUNES)
    return "\n\n".join(text)


WHAT_EBP_TUNES = ("EBP has no step size; its grid chooses the input preprocessing and the initial scale, early "
                  "stopping its epoch.")
TUNED_DIFFERENCE_CAPTION = (f"Successor − EBP tuned like the successors, points ({band.LEVEL:.0%} interval over "
                            "seeds and test images, reproduction/paired.py; **bold**: excludes 0; W: Welch's, this "
                            "test set only, where per-image predictions are missing)")


def brief(rows: list[dict], expected_runs: int, pairs: list[dict] = ()) -> str:
    """Markdown for README.md's front page (scripts/readme_tables.py copies it there): the comparison on equal
    terms only, successor − EBP tuned like the successors (tuned_difference_table), how many runs of each side
    finished, whether the MNIST verdict reversed, what EBP tunes, and where summary()'s errors of every method are."""
    successors = [r for r in rows if r["method"] in SUCCESSORS]
    tuned = [r for r in rows if r["method"] in TUNED_EBP]
    if not tuned:
        return "EBP tuned like the successors is not yet run: the errors at the paper's protocols are in " + SUMMARY_LINK
    comparisons = tuned_comparisons(rows, list(pairs))
    return "\n\n".join([
        TUNED_DIFFERENCE_CAPTION + ":", tuned_difference_table(comparisons),
        reversal_sentence(comparisons) + " " + WHAT_EBP_TUNES,
        f"Runs finished: {len(successors)} of the {expected_runs} successor runs, {len(tuned)} of the "
        f"{TUNED_EXPECTED} tuned EBP runs. The errors of every method, at the paper's protocols and tuned, with a "
        "verdict per net: " + SUMMARY_LINK])


SUMMARY_LINK = "[`outputs/successors/tuned/summary.md`](outputs/successors/tuned/summary.md)."


def tally_counts(rows: list[dict]) -> dict:
    """{data set: {output: Counter of "lower", "higher", "not separable"}}: of the comparisons with two seeds or more
    on both sides (each net and EBP protocol), where the successor's interval lies (deployed ±1 nets against EBP-D,
    BayesBiNN's predictive against EBP-P). Per data set, because the verdicts differ between them."""
    found_by_dataset = {}
    for dataset in EBP_PROFILES:
        counts = {output: Counter() for output in EBP_OUTPUT_LABELS}
        for net in NETS:
            for ebp_method in EBP_METHODS:
                for method, output in COMPARISONS:
                    found = _compare(rows, dataset, net, method, output, ebp_method)[2]
                    if found is not None:
                        counts[output][_side(*found[:2])] += 1
        found_by_dataset[dataset] = counts
    return found_by_dataset


def tally(rows: list[dict]) -> str:
    """One sentence of tally_counts: per data set, how many comparisons put the successor below EBP, above it, or
    do not separate them."""
    subjects = {"deployed": "±1 nets", "predictive": "BayesBiNN's predictive"}
    per_dataset = []
    for dataset, counts in tally_counts(rows).items():
        parts = [f"{subjects[o]} against {EBP_OUTPUT_LABELS[o]} {c['lower']}/{c['higher']}/{c['not separable']} of "
                 f"{c.total()}" for o, c in counts.items() if c]
        if parts:
            per_dataset.append(f"{DATASET_NAMES[dataset]}: " + ", ".join(parts))
    return "Two seeds or more a side, successor's error lower/higher/not separable: " + "; ".join(per_dataset) + "."


def tuned_sentence(comparisons: list[dict]) -> str:
    """One sentence of tuned_comparisons' deployed ±1 comparisons: how many nets tuned EBP has run on, how many
    comparisons put the successor lower, higher or cannot separate them, how many rest on one seed and on how many
    of those the seed's tuned EBP-D errs less."""
    deployed = [c for c in comparisons if c["output"] == "deployed" and c["verdict"] != NO_RUN]
    if not deployed:
        return "EBP tuned like them is not yet run."
    nets = {(c["dataset"], c["net"]) for c in deployed}
    verdicts = Counter(c["verdict"] for c in deployed)
    pending = [c for c in deployed if c["verdict"] not in VERDICT_WORDS.values()]
    text = (f"Against EBP-D tuned like them, the ±1 nets: {verdicts['lower']} lower, {verdicts['higher']} higher, "
            f"{verdicts['cannot be separated']} not separable, {len(pending)} on one seed ({len(nets)} of "
            f"{len(NETS) * len(EBP_PROFILES)} data sets × nets run)")
    return text + "."


def in_short(rows: list[dict], comparisons: list[dict] = ()) -> str:
    """The page's answer in a few sentences, from tally_counts, tuned_sentence of `comparisons` (tuned_comparisons)
    and the records' costs."""
    counts = tally_counts(rows)
    deployed = sum((c["deployed"] for c in counts.values()), Counter())
    mnist, fashion = (counts[d]["predictive"] for d in ("mnist", "fashion-mnist"))
    hours = {group: sum(r.get("core_seconds") or 0 for r in rows if r["method"] in methods) / 3600
             for group, methods in (("successors", SUCCESSORS), ("ebp", TUNED_EBP))}
    advice = ("train with a successor" if 2 * deployed["lower"] > deployed.total()
              else "EBP-D holds its own")
    return (f"> **In short.** Against the paper-protocol EBP, {advice}: tuned STE, Bop and BayesBiNN beat EBP-D in "
            f"{deployed['lower']} of {deployed.total()} comparisons. {tuned_sentence(list(comparisons))} "
            f"BayesBiNN's averaged prediction beats the paper's EBP-P in {mnist['lower']} of {mnist.total()} on MNIST "
            f"and loses {fashion['higher']} of {fashion.total()} on Fashion-MNIST. {WHAT_EBP_TUNES} Grids and runs "
            f"took {hours['successors']:.0f} core-hours for the successors, {hours['ebp']:.1f} for tuned EBP.")


NO_RUN, ONE_SEED = "not yet run", "one seed: no verdict"
WELCH_ONLY = " on this test set only"  # a verdict from Welch alone: a side keeps no per-image predictions
VERDICT_WORDS = {"lower": "lower", "higher": "higher", "not separable": "cannot be separated"}


def _interval_side(interval) -> str:
    """_side of an interval [lo, hi]."""
    lo, hi = interval
    return _side((lo + hi) / 2, (hi - lo) / 2)


def tuned_comparisons(rows: list[dict], pairs: list[dict]) -> list[dict]:
    """Successor − EBP tuned like the successors, per data set, net, tuned variant and comparison of COMPARISONS
    (a successor's deployed ±1 net against EBP-D; BayesBiNN's predictive against EBP-P), where the successor has
    runs: the difference of the seed means (points), the Welch and the images-and-seeds 95% intervals and the exact
    rank count (paired.oriented of `pairs`, paired.pair_rows of the runs' per-image predictions), the verdict (where
    the images-and-seeds interval lies: VERDICT_WORDS; ONE_SEED where a side has under two seeds; NO_RUN where tuned
    EBP has none; where a side keeps no per-image predictions, e.g. BayesBiNN's predictive, the Welch interval of the
    seeds' errors and its side + WELCH_ONLY) and the paper-protocol verdict of the same comparison (Welch;
    PAPER_PROTOCOL's EBP)."""
    found_all = []
    for dataset in EBP_PROFILES:
        for net in NETS:
            for ebp_method in TUNED_EBP:
                for method, output in COMPARISONS:
                    ours = _errors(rows, dataset, net, method, output)
                    ebp = _errors(rows, dataset, net, ebp_method, output)
                    if not ours:
                        continue
                    found = paired.oriented(pairs, dataset, net, paired.output_label(method, output),
                                            paired.output_label(ebp_method, output)) if ebp else None
                    if found and found["seeds"] != [len(ours), len(ebp)]:
                        found = None  # per-image predictions for only some seeds: the interval would be another mean's
                    verdict = (NO_RUN if not ebp else ONE_SEED if min(len(ours), len(ebp)) < 2
                               else None if found is None else VERDICT_WORDS[_interval_side(
                                   found["images_and_seeds"])])
                    welch = found and found["welch"]
                    if verdict is None:
                        d, h, _ = welch_difference(ours, ebp)
                        welch, verdict = [d - h, d + h], VERDICT_WORDS[_side(d, h)] + WELCH_ONLY
                    old = _compare(rows, dataset, net, method, output, PAPER_PROTOCOL[ebp_method])[2]
                    found_all.append({
                        "dataset": dataset, "net": net, "method": method, "output": output, "ebp": ebp_method,
                        "seeds": [len(ours), len(ebp)],
                        "difference": statistics.fmean(ours) - statistics.fmean(ebp) if ebp else None,
                        "welch": welch, "images_and_seeds": found and found["images_and_seeds"],
                        "ranks": found and (found["rank_u"], found["rank_of"], found["rank_p_two_sided"],
                                            found["smallest_rank_p"]),
                        "verdict": verdict, "paper_verdict": old and VERDICT_WORDS[_side(*old[:2])]})
    return found_all


def _pair_label(c: dict) -> str:
    ebp = EBP_OUTPUT_LABELS[c["output"]] + (", dropout" if c["ebp"] == "ebp-tuned-dropout" else "")
    return f"{SHORT[c['method']]}{' pred.' if c['output'] == 'predictive' else ''} − {ebp}"


def tuned_table(comparisons: list[dict]) -> str:
    """Two narrow markdown tables of the tuned_comparisons that have a tuned EBP run: successor − tuned EBP
    (points) with the Welch interval (this test set) and the images-and-seeds interval; then the seeds, the exact
    rank count U of the successor's seeds below EBP's (of m_A m_B) with its two-sided p and the smallest p those
    seeds allow, and the verdict."""
    def iv(v):
        return "–" if v is None else f"[{v[0]:+.2f}, {v[1]:+.2f}]"
    run = [c for c in comparisons if c["verdict"] != NO_RUN]
    if not run:
        return "EBP tuned like the successors: not yet run."
    head = "| {} | {} | {} |".format
    main = ["| data | net | successor − tuned EBP | difference | Welch 95% (this test set) | images and seeds 95% |",
            "|" + "---|" * 6]
    main += [f"{head(c['dataset'], net_label(c['net']), _pair_label(c))} {c['difference']:+.2f} | {iv(c['welch'])} | "
             f"{iv(c['images_and_seeds'])} |" for c in run]
    ranks = ["| data | net | successor − tuned EBP | seeds | exact ranks: U, p (smallest) | verdict |", "|" + "---|" * 6]
    for c in run:
        rank = "–" if c["ranks"] is None else "{:g} of {}, {:.2f} ({:.2f})".format(*c["ranks"])
        ranks.append(f"{head(c['dataset'], net_label(c['net']), _pair_label(c))} {c['seeds'][0]} and {c['seeds'][1]} | "
                     f"{rank} | {c['verdict']} |")
    return "\n".join(main) + "\n\n" + "\n".join(ranks)


def _direction(c: dict) -> str:
    return "lower" if c["difference"] < 0 else "higher"


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _verdict_list(words: list[str]) -> str:
    return f"all {len(words)} {words[0]}" if len(set(words)) == 1 and len(words) > 1 else ", ".join(words)


def verdict_sentences(comparisons: list[dict]) -> list[str]:
    """One sentence per data set, net and tuned EBP variant with a run: each successor − tuned EBP's verdict (lower:
    the successor errs less; the numbers are tuned_difference_table's), then the paper-protocol verdicts of the same
    comparisons; last, per tuned variant, where it has not run yet."""
    lines, missing = [], {m: [] for m in TUNED_EBP}
    for dataset in EBP_PROFILES:
        for net in NETS:
            where = f"{DATASET_NAMES[dataset]} {net_label(net)}"
            group = [c for c in comparisons if c["dataset"] == dataset and c["net"] == net]
            for ebp_method in TUNED_EBP:
                run = [c for c in group if c["ebp"] == ebp_method and c["verdict"] != NO_RUN]
                if group and not run:
                    missing[ebp_method].append(where)
                if not run:
                    continue
                names = [f"{SHORT[c['method']]}{' predictive' * (c['output'] == 'predictive')}" for c in run]
                seeds = "/".join(map(str, sorted({c["seeds"][1] for c in run})))
                now = [c["verdict"] for c in run]
                said = (now[0] if set(now) == {ONE_SEED} else _verdict_list(now)
                        if len(set(now)) == 1 else ", ".join(
                            f"{_and([n for n, w in zip(names, now) if w == v])} {v}" for v in dict.fromkeys(now)))
                before = _verdict_list([c["paper_verdict"] or "n.c." for c in run])
                lines.append(f"{where}, {METHOD_LABELS[ebp_method].split(' (')[0]} ({seeds} seed"
                             f"{'s' * (seeds != '1')}): {said} (paper protocol: {before}).")
    for ebp_method, where in missing.items():
        if where:
            lines.append(f"{METHOD_LABELS[ebp_method].split(' (')[0]} {NO_RUN} on {', '.join(where)}.")
    return lines


def reversal_sentence(comparisons: list[dict], dataset: str = "mnist") -> str:
    """Whether the ±1 nets' verdict on `dataset` reversed between the paper-protocol EBP-D (per-pixel
    standardisation) and EBP-D tuned like the successors: of the deployed comparisons with a paper verdict, how
    many held, reversed or are no longer separated, and how many rest on one seed (and where that seed points)."""
    deployed = [c for c in comparisons if c["dataset"] == dataset and c["output"] == "deployed"
                and c["paper_verdict"] is not None and c["verdict"] != NO_RUN]
    name = DATASET_NAMES[dataset]
    if not deployed:
        return f"{name}: EBP tuned like the successors {NO_RUN}; no verdict can reverse yet."
    old = Counter(c["paper_verdict"] for c in deployed)
    judged = [c for c in deployed if c["verdict"] in VERDICT_WORDS.values()]
    pending = [c for c in deployed if c not in judged]
    held = sum(c["verdict"] == c["paper_verdict"] for c in judged)
    reversed_ = sum({c["verdict"], c["paper_verdict"]} == {"lower", "higher"} for c in judged)
    opposite = sum(c["paper_verdict"] in ("lower", "higher") and _direction(c) != c["paper_verdict"] for c in pending)
    text = (f"{name} ±1 nets against EBP-D at the paper's protocol: {old['lower']} of {len(deployed)} lower, "
            f"{old['higher']} higher. Against EBP tuned like them:")
    if judged:
        text += (f" {held} held, {reversed_} reversed, {len(judged) - held - reversed_} moved to or from cannot be "
                 f"separated{';' * bool(pending)}")
    if pending:
        text += f" {len(pending)} on one seed (no verdict), pointing the other way in {opposite}"
    return text + "."


RERUNS = "successors-rerun"  # beside root: reruns that keep what a record's predictions.npz lacks


def paired_intervals(root, profile: str, data_dir=None, n_boot: int = 1000, results=None) -> list[dict]:
    """For every pair of methods (and outputs) on the same test images, per data set and net: the difference with
    the interval over seeds and test images beside the Welch interval, from the runs' per-image predictions
    (reproduction.paired.pair_rows; paired.table prints them), a record's missing outputs taken from its rerun in
    RERUNS beside root where that is the same run (paired.rerun_outputs). results: the records (load_successors of
    root and profile where None); n_boot 0 leaves the bootstrap out (a verdict needs the images-and-seeds interval
    only)."""
    groups = paired.run_predictions(load_successors(root, profile) if results is None else results, root,
                                    reruns=Path(root).parent / RERUNS)
    labels = {dataset: ebp_data.load_raw(dataset, data_dir)["test_labels"] for dataset, _ in groups}
    return paired.pair_rows(groups, labels, n_boot)
