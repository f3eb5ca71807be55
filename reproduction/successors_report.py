"""The comparison of EBP with its successors, from the records: rows per method and net (seeds pooled), the table,
the figure of error against training time, the calibration plot (notebooks/successors.ipynb).

Successor runs: outputs/successors/<profile>/<dataset>/<method>-<arch>[-seed<N>]/result.json (reproduction.successors).
EBP: the committed records of the paper's protocols, outputs/runs/paper (MNIST) and paper-fashion-mnist, binary
weights at 800 and [800, 800], without dropout (Table 2) and with the paper's sampled dropout (Table 3); EBP keeps
its own protocol (120 epochs on all 60,000 images, no tuning), so its "time to best" is its training time and its
deployable net is EBP-D.
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from pathlib import Path

from scipy import stats

from ebp_lib import DEFAULT_UPDATE
from reproduction import band, records
from reproduction import successors as sc
from reproduction.results import DATASET_NAMES
from successors import registry

EBP_PROFILES = {"mnist": "paper", "fashion-mnist": "paper-fashion-mnist"}
NETS = ("800", "800-800")
METHOD_LABELS = {**{m: registry.METHODS[m].label for m in registry.SUCCESSORS}, "ebp": "EBP (B-EBP-D / -P)",
                 "ebp-dropout": "EBP, dropout 0.8 (B-EBP-D / -P)"}
EBP_METHODS = ("ebp", "ebp-dropout")  # the paper's Table 2 protocol, and Table 3's (sampled masks): EBP's best on two layers
SUCCESSORS = registry.SUCCESSORS
PROTOCOL_SEEDS = 3  # seeds 0, 1, 2 of every method, net and data set
METHODS = EBP_METHODS + SUCCESSORS
COLOURS = {**{m: registry.METHODS[m].colour for m in registry.SUCCESSORS}, "ebp": "black", "ebp-dropout": "grey"}


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


def _machines(sessions: list[dict]) -> str:
    """The CPU model(s) a run's sessions ran on, in order, each once."""
    return " + ".join(dict.fromkeys(x.get("cpu", "?") for x in sessions))


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
                     "cpu_s_to_best": e.get("cpu_seconds_to_best_epoch"), "machine": _machines(r["sessions"]),
                     "core_seconds": core_seconds(r),
                     "best_epoch": r["best_epoch"], "epochs_to_target": e["epochs_to_target"],
                     "target": 100 * e["target_error"], "n_tuned": e["n_tuned"],
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
                or p["real_update"] != DEFAULT_UPDATE or not r["finished"]):
            continue
        history, target = r["history"], sc.TARGET_ERROR[dataset]
        rows.append({"method": "ebp" if p["dropout"] is None else "ebp-dropout", "dataset": dataset,
                     "net": p["architecture"], "seed": p["seed"],
                     "protocol": r["protocol"], "deployed": 100 * r["final"]["test_ebp_d"],
                     "predictive": 100 * r["final"]["test_ebp_p"], "nll": None, "ece": None, "mismatches": None,
                     "s_per_epoch": statistics.median(h["train_seconds"] for h in history),
                     "s_to_best": r["train_seconds"], "cpu_s_per_epoch": None, "cpu_s_to_best": None,
                     "machine": _machines(r["sessions"]), "best_epoch": len(history),
                     "epochs_to_target": next((h["epoch"] for h in history if h["test_ebp_d"] <= target), None),
                     "target": 100 * target, "n_tuned": 0, "reliability": None})
    return rows


def _mean_sd(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _ints(values) -> str:
    return ", ".join("–" if v is None else str(v) for v in values)


def _groups(rows: list[dict], dataset: str):
    """(method, net, its runs sorted by seed) for every method and net with a run on `dataset`, EBP first."""
    for method in METHODS:
        for net in NETS:
            group = sorted((r for r in rows if r["method"] == method and r["net"] == net and r["dataset"] == dataset),
                           key=lambda r: r["seed"])
            if group:
                yield method, net, group


def _net(net: str) -> str:
    return f"[{net.replace('-', ', ')}]"


def table(rows: list[dict], dataset: str) -> str:
    """Markdown: per method and net, seeds pooled (mean ± SD): the deployed ±1 net's test error, the predictive's,
    NLL and ECE of the probabilistic output, how many hyperparameters the grid tuned, packed-inference mismatches."""
    lines = ["| method | net | seeds | deployed ±1 net (%) | predictive (%) | NLL | ECE | tuned | packed mismatches |",
             "|" + "---|" * 9]
    for method, net, group in _groups(rows, dataset):
        mismatches = [r["mismatches"] for r in group]
        lines.append(
            f"| {METHOD_LABELS[method]} | {_net(net)} | {_ints(r['seed'] for r in group)} | "
            f"{_mean_sd(r['deployed'] for r in group)} | {_mean_sd(r['predictive'] for r in group)} | "
            f"{_mean_sd(r['nll'] for r in group)} | {_mean_sd(r['ece'] for r in group)} | {group[0]['n_tuned']} | "
            f"{'–' if None in mismatches else sum(mismatches)} |")
    return "\n".join(lines)


def cost_table(rows: list[dict], dataset: str) -> str:
    """Markdown: per method and net, seeds pooled (mean ± SD): training core-seconds (the process's CPU time, one
    thread) per epoch and to the best epoch, wall seconds per epoch, the best epoch and the first epoch at or below
    the target test error per seed, and the machines the runs ran on."""
    lines = ["| method | net | seeds | core-s / epoch | core-s to best | wall s / epoch | best epoch | "
             "epochs to target | machine |", "|" + "---|" * 9]
    for method, net, group in _groups(rows, dataset):
        lines.append(
            f"| {METHOD_LABELS[method]} | {_net(net)} | {_ints(r['seed'] for r in group)} | "
            f"{_mean_sd(r['cpu_s_per_epoch'] for r in group)} | {_mean_sd(r['cpu_s_to_best'] for r in group)} | "
            f"{_mean_sd(r['s_per_epoch'] for r in group)} | {_ints(r['best_epoch'] for r in group)} | "
            f"{_ints(r['epochs_to_target'] for r in group)} | {', '.join(sorted({r['machine'] for r in group}))} |")
    return "\n".join(lines)


def welch_difference(a, b) -> tuple[float, float, float] | None:
    """(mean(a) − mean(b), the half-width of its band.LEVEL t interval, Welch–Satterthwaite df) for two independent
    sets of runs evaluated on the same test images (the test set's noise is shared and cancels; what separates them
    is the run-to-run spread of each); None unless both have two runs or more."""
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
                    lines.append(f"- {_net(net)}, {what}: {statistics.fmean(ours) - statistics.fmean(ebp):+.2f} "
                                 f"points ({len(ours)} seed{'s' if len(ours) > 1 else ''} against {len(ebp)}): "
                                 + NOT_CONCLUSIVE)
                    continue
                d, h, _ = found
                lines.append(f"- {_net(net)}, {what}: {d:+.2f} ± {h:.2f} points ({band.LEVEL:.0%} Welch interval, "
                             f"{len(ours)} and {len(ebp)} seeds): {_verdict(d, h)}")
    return lines


def difference_table(rows: list[dict]) -> tuple[str, int, int]:
    """Markdown: successor − EBP in points, Welch's band.LEVEL interval, one row per data set, net and EBP protocol
    where a comparison has two seeds or more on both sides (bold: the interval excludes 0; n.c.: not conclusive,
    fewer seeds); with how many comparisons were judged and how many there are."""
    head = "| data | net | EBP | " + " | ".join(
        f"{METHOD_LABELS[m]}{' predictive' if o == 'predictive' else ''}" for m, o in COMPARISONS) + " |"
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
                    lines.append(f"| {dataset} | {_net(net)} | {protocol} | " + " | ".join(cells) + " |")
    return "\n".join(lines), judged, total


def summary(rows: list[dict], expected_runs: int) -> str:
    """Markdown for README.md (scripts/readme_tables.py copies it there): per data set and net, the deployed ±1 net's
    test error of every method and the predictive of EBP and BayesBiNN (mean ± SD, the seed count where it is not
    PROTOCOL_SEEDS), the differences with EBP that have seeds enough (difference_table) and their tally, the runs
    finished of `expected_runs`, the protocols in one sentence."""
    cell = {}
    for r in rows:
        cell.setdefault((r["dataset"], r["net"], r["method"], "deployed"), []).append(r["deployed"])
        if r["predictive"] is not None:
            cell.setdefault((r["dataset"], r["net"], r["method"], "predictive"), []).append(r["predictive"])
    columns = [("ebp", "deployed", "EBP-D"), ("ebp", "predictive", "EBP-P"),
               ("ebp-dropout", "deployed", "EBP-D, dropout"), ("ebp-dropout", "predictive", "EBP-P, dropout"),
               ("ste", "deployed", "STE"), ("bop", "deployed", "Bop"), ("bayesbinn", "deployed", "BayesBiNN"),
               ("bayesbinn", "predictive", "BayesBiNN predictive")]
    lines = ["| data | net | " + " | ".join(c[2] for c in columns) + " |", "|" + "---|" * (2 + len(columns))]
    other_counts = False
    for dataset in EBP_PROFILES:
        for net in NETS:
            values = [cell.get((dataset, net, m, o), []) for m, o, _ in columns]
            if any(values):
                other_counts |= any(v and len(v) != PROTOCOL_SEEDS for v in values)
                lines.append(f"| {dataset} | {_net(net)} | " + " | ".join(
                    "–" if not v else _mean_sd(v) + ("" if len(v) == PROTOCOL_SEEDS else f" ({len(v)})")
                    for v in values) + " |")
    successors = [r for r in rows if r["method"] in SUCCESSORS]
    text = [f"Test error (%), mean ± SD over {PROTOCOL_SEEDS} seeds{' (other counts in brackets)' * other_counts}, of "
            f"the deployed ±1 nets (EBP: EBP-D) and the predictives; {len(successors)} of the {expected_runs} "
            "successor runs finished.", "\n".join(lines)]
    table, judged, total = difference_table(rows)
    if judged:
        text += [f"Successor − EBP, points, same test images ({band.LEVEL:.0%} Welch interval; **bold**: excludes 0; "
                 f"n.c.: under two seeds):", table, tally(rows)]
    waiting = f"{total - judged} of the {total} comparisons rest on one seed: not conclusive yet. " if judged < total else ""
    text.append(waiting + "The successors were tuned on a validation split; EBP ran untuned, at the paper's protocols.")
    return "\n\n".join(text)


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


def in_short(rows: list[dict]) -> str:
    """The page's answer in a few sentences, from tally_counts and the records' costs."""
    counts = tally_counts(rows)
    deployed = sum((c["deployed"] for c in counts.values()), Counter())
    mnist, fashion = (counts[d]["predictive"] for d in ("mnist", "fashion-mnist"))
    hours = sum(r["core_seconds"] or 0 for r in rows if r["method"] in SUCCESSORS) / 3600
    advice = ("train with a successor" if 2 * deployed["lower"] > deployed.total()
              else "EBP-D holds its own")
    return (f"> **In short.** For a deployed ±1 net, {advice}. Tuned STE, Bop and BayesBiNN err less than EBP-D in "
            f"{deployed['lower']} of {deployed.total()} comparisons with two seeds a side. EBP-P, the averaged "
            f"read-out, holds up better. BayesBiNN's averaged prediction beats it in {mnist['lower']} of "
            f"{mnist.total()} on MNIST and loses {fashion['higher']} of {fashion.total()} on Fashion-MNIST. EBP has "
            f"no learning rate and ran at the paper's settings; the successors' grids and runs took {hours:.0f} "
            "core-hours.")


EBP_LEGEND = {"ebp": "EBP-D", "ebp-dropout": "EBP-D, dropout"}


def _seconds_to_best(row: dict) -> float:
    """Core-seconds to the best epoch where the record has them, else (EBP, older records) wall seconds."""
    return row["s_to_best"] if row["cpu_s_to_best"] is None else row["cpu_s_to_best"]


def error_time_figure(rows: list[dict], datasets=("mnist", "fashion-mnist")):
    """Deployed net's test error against training seconds to the best epoch (_seconds_to_best): one point per run
    (seeds shown as separate points), colour per method, marker per net (o: 800, s: [800, 800])."""
    from matplotlib import ticker

    from ebp_analysis import subplots

    fig, axes = subplots(1, len(datasets), height=3.4, squeeze=False, layout="constrained")
    for ax, dataset in zip(axes[0], datasets):
        for method in METHODS:
            for net, marker in zip(NETS, "os"):
                group = [r for r in rows if r["method"] == method and r["net"] == net and r["dataset"] == dataset]
                if group:
                    ax.scatter([_seconds_to_best(r) for r in group], [r["deployed"] for r in group],
                               c=COLOURS[method], marker=marker, alpha=0.8,
                               label=f"{EBP_LEGEND.get(method) or METHOD_LABELS[method]} {_net(net)}")
        ax.set(xscale="log", yscale="log", xlabel="training seconds to the best epoch",
               ylabel="test error of the ±1 net (%)", title=dataset)
        for axis in (ax.xaxis, ax.yaxis):  # plain numbers; no labels on minor ticks (they overlap within a decade)
            axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            axis.set_minor_formatter(ticker.NullFormatter())
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1, 1.5, 2, 3, 5, 7)))
        ax.grid(alpha=0.3)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncols=4, fontsize=8)
    return fig


def calibration_plot(ax, rows: list[dict], dataset: str) -> None:
    """Reliability diagram per method on `ax` (probabilistic output: BayesBiNN's predictive, the others' softmax),
    the runs' bins pooled by count."""
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
    for method in SUCCESSORS:
        group = [r["reliability"] for r in rows if r["method"] == method and r["dataset"] == dataset]
        if not group:
            continue
        counts = [sum(g["count"][b] for g in group) for b in range(group[0]["bins"])]
        conf = [sum(g["count"][b] * g["confidence"][b] for g in group if g["count"][b]) / n if n else None
                for b, n in enumerate(counts)]
        acc = [sum(g["count"][b] * g["accuracy"][b] for g in group if g["count"][b]) / n if n else None
               for b, n in enumerate(counts)]
        pts = [(c, a) for c, a in zip(conf, acc) if c is not None]
        ax.plot(*zip(*pts), marker="o", color=COLOURS[method], label=METHOD_LABELS[method])
    ax.set(xlabel="confidence (top class)", ylabel="accuracy", title=f"calibration, {dataset}", xlim=(0, 1),
           ylim=(0, 1))
    ax.legend(fontsize=8, loc="lower right")


def paired_intervals(root, profile: str, data_dir=None, n_boot: int = 1000) -> list[dict]:
    """For every pair of methods (and outputs) on the same test images, per data set and net: the difference with
    the interval over seeds and test images beside the Welch interval, from the runs' per-image predictions
    (reproduction.paired.pair_rows; paired.table prints them)."""
    import ebp_data
    from reproduction import paired
    groups = paired.run_predictions(load_successors(root, profile), root)
    labels = {dataset: ebp_data.load_raw(dataset, data_dir)["test_labels"] for dataset, _ in groups}
    return paired.pair_rows(groups, labels, n_boot)
