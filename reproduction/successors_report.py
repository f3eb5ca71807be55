"""The comparison of EBP with its successors, from the records: rows per method and net (seeds pooled), the table,
the figure of error against training time, the calibration plot (notebooks/successors.ipynb).

Successor runs: outputs/successors/<profile>/<dataset>/<method>-<arch>[-seed<N>]/result.json (reproduction.successors).
EBP: the committed records of the paper's protocol, outputs/runs/paper (MNIST) and paper-fashion-mnist, binary
weights at 800 and [800, 800] without dropout, seeds 0-2; EBP keeps its own protocol (120 epochs on all 60,000
images, no tuning), so its "time to best" is its training time and its deployable net is EBP-D.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from ebp_lib import DEFAULT_UPDATE
from reproduction import records
from reproduction import successors as sc

EBP_PROFILES = {"mnist": "paper", "fashion-mnist": "paper-fashion-mnist"}
NETS = ("800", "800-800")
METHOD_LABELS = {"ste": "STE / BinaryConnect", "bop": "Bop", "bayesbinn": "BayesBiNN", "ebp": "EBP (B-EBP-D / -P)"}
COLOURS = {"ste": "tab:blue", "bop": "tab:orange", "bayesbinn": "tab:green", "ebp": "black"}


def load_successors(root, profile: str) -> list[dict]:
    """Every finished, consistent successor record of `profile` under root (others are left out, named)."""
    found, left = [], []
    for path in sorted(Path(root, profile).glob("*/*/result.json")):
        try:
            record = records.read_record(path)
        except records.RecordError as err:
            left.append(f"{path}: {err}")
            continue
        problems = records.record_problems(record)
        if problems or not record["finished"]:
            left.append(f"{path}: {'; '.join(problems) or 'unfinished'}")
            continue
        found.append(record)
    if left:
        print("left out:\n  " + "\n  ".join(left))
    return found


def successor_rows(results: list[dict]) -> list[dict]:
    """One row per run: method, dataset, net, seed and what its evaluation says (errors in %)."""
    rows = []
    for r in results:
        p, e = r["parameters"], r["evaluation"]
        out = e["outputs"]
        prob = out.get("predictive", out["deployed"])
        rows.append({"method": p["method"], "dataset": p["dataset"], "net": p["architecture"], "seed": p["seed"],
                     "protocol": r["protocol"], "deployed": 100 * e["packed"]["error"],
                     "predictive": 100 * out["predictive"]["test_error"] if "predictive" in out else None,
                     "nll": prob["nll"], "ece": prob["ece"], "mismatches": e["packed"]["mismatches"],
                     "s_per_epoch": e["seconds_per_epoch"], "s_to_best": e["seconds_to_best_epoch"],
                     "best_epoch": r["best_epoch"], "epochs_to_target": e["epochs_to_target"],
                     "target": 100 * e["target_error"], "n_tuned": e["n_tuned"],
                     "reliability": prob["reliability"]})
    return rows


def ebp_rows(ebp_results, dataset: str) -> list[dict]:
    """One row per EBP run of the paper's protocol on `dataset`: binary weights, no dropout, the paper's nets, the
    spec's update (the authors' update variants are other algorithms)."""
    rows = []
    for r in ebp_results:
        p = r["parameters"]
        if (r["method"] != "ebp" or Path(r["run_dir"]).parts[0] != EBP_PROFILES[dataset] or p["dataset"] != dataset
                or p["weights"] != "binary" or p["dropout"] is not None or p["architecture"] not in NETS
                or p["real_update"] != DEFAULT_UPDATE or not r["finished"]):
            continue
        history, target = r["history"], sc.TARGET_ERROR[dataset]
        rows.append({"method": "ebp", "dataset": dataset, "net": p["architecture"], "seed": p["seed"],
                     "protocol": r["protocol"], "deployed": 100 * r["final"]["test_ebp_d"],
                     "predictive": 100 * r["final"]["test_ebp_p"], "nll": None, "ece": None, "mismatches": None,
                     "s_per_epoch": statistics.median(h["train_seconds"] for h in history),
                     "s_to_best": r["train_seconds"], "best_epoch": len(history),
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


def table(rows: list[dict], dataset: str) -> str:
    """Markdown: per method and net, seeds pooled (mean ± SD): deployed ±1 net's test error, predictive's, NLL, ECE,
    seconds per epoch and to the best epoch, best epochs and epochs to the target error per seed, tuned count."""
    head = ("| method | net | seeds | deployed ±1 net (%) | predictive (%) | NLL | ECE | s / epoch | s to best | "
            "best epoch | epochs to target | tuned | packed mismatches |\n|" + "---|" * 13)
    lines = [head]
    for method in ("ebp", "ste", "bop", "bayesbinn"):
        for net in NETS:
            group = sorted((r for r in rows if r["method"] == method and r["net"] == net and r["dataset"] == dataset),
                           key=lambda r: r["seed"])
            if not group:
                continue
            mismatches = [r["mismatches"] for r in group]
            lines.append(
                f"| {METHOD_LABELS[method]} | [{net.replace('-', ', ')}] | {_ints(r['seed'] for r in group)} | "
                f"{_mean_sd(r['deployed'] for r in group)} | {_mean_sd(r['predictive'] for r in group)} | "
                f"{_mean_sd(r['nll'] for r in group)} | {_mean_sd(r['ece'] for r in group)} | "
                f"{_mean_sd(r['s_per_epoch'] for r in group)} | {_mean_sd(r['s_to_best'] for r in group)} | "
                f"{_ints(r['best_epoch'] for r in group)} | {_ints(r['epochs_to_target'] for r in group)} | "
                f"{group[0]['n_tuned']} | {'–' if None in mismatches else sum(mismatches)} |")
    return "\n".join(lines)


def error_time_figure(rows: list[dict], datasets=("mnist", "fashion-mnist")):
    """Deployed net's test error against training seconds to the best epoch: one point per run (seeds shown as
    separate points), colour per method, marker per net (o: 800, s: [800, 800])."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for method, colour in COLOURS.items():
            for net, marker in zip(NETS, "os"):
                group = [r for r in rows if r["method"] == method and r["net"] == net and r["dataset"] == dataset]
                if group:
                    ax.scatter([r["s_to_best"] for r in group], [r["deployed"] for r in group], c=colour,
                               marker=marker, alpha=0.8, label=f"{'B-EBP-D' if method == 'ebp' else METHOD_LABELS[method]}"
                                                                f" [{net.replace('-', ', ')}]")
        ax.set(xscale="log", xlabel="training seconds to the best epoch (log)", ylabel="test error of the ±1 net (%)",
               title=dataset)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def calibration_plot(ax, rows: list[dict], dataset: str) -> None:
    """Reliability diagram per method on `ax` (probabilistic output: BayesBiNN's predictive, the others' softmax),
    the runs' bins pooled by count."""
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
    for method in ("ste", "bop", "bayesbinn"):
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
    ax.legend(fontsize=8)
