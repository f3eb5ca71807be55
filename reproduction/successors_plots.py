"""The successors page's two figures: each run's test error against its training cost, and the reliability diagrams
of the probabilistic outputs (notebooks/successors.ipynb), drawn from reproduction.successors_report's rows."""
from __future__ import annotations

from reproduction.successors_report import (
    COLOURS,
    COLUMNS,
    METHOD_LABELS,
    NETS,
    SUCCESSORS,
    TUNED_EBP,
    cost_unit,
    net_label,
    run_cost,
)

EBP_LEGEND = {"ebp": "EBP-D (wall s)", "ebp-dropout": "EBP-D, dropout (wall s)", "ebp-tuned": "EBP-D tuned",
              "ebp-tuned-dropout": "EBP-D tuned, dropout"}


def error_time_figure(rows: list[dict], datasets=("mnist", "fashion-mnist")):
    """Deployed net's test error against training seconds to the best epoch, each method in its cost_unit: filled
    markers core-seconds, hollow ones wall seconds (the paper-protocol EBP records hold no CPU time); one point per
    run (seeds shown as separate points), colour per method, marker per net (o: 800, s: [800, 800])."""
    from matplotlib import ticker

    from ebp_analysis import subplots

    fig, axes = subplots(1, len(datasets), height=3.4, squeeze=False, layout="constrained")
    for ax, dataset in zip(axes[0], datasets):
        for method in COLUMNS:
            for net, marker in zip(NETS, "os"):
                group = [r for r in rows if r["method"] == method and r["net"] == net and r["dataset"] == dataset]
                if group:
                    unit = cost_unit(group)
                    colour = {"facecolors": "none", "edgecolors": COLOURS[method]} if unit == "wall s" else \
                        {"c": COLOURS[method]}
                    ax.scatter([run_cost(r, unit, "to_best") for r in group], [r["deployed"] for r in group],
                               marker=marker, alpha=0.8, **colour,
                               label=f"{EBP_LEGEND.get(method) or METHOD_LABELS[method]} {net_label(net)}")
        ax.set(xscale="log", yscale="log", xlabel="core-s to the best epoch (hollow: wall s)",
               ylabel="test error of the ±1 net (%)", title=dataset)
        for axis in (ax.xaxis, ax.yaxis):  # plain numbers; no labels on minor ticks (they overlap within a decade)
            axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            axis.set_minor_formatter(ticker.NullFormatter())
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1, 1.5, 2, 3, 5, 7)))
        ax.grid(alpha=0.3)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize=8)
    return fig


def calibration_plot(ax, rows: list[dict], dataset: str) -> None:
    """Reliability diagram per method on `ax` (probabilistic output: BayesBiNN's predictive, STE's and Bop's
    softmax, tuned EBP's EBP-P: successors.ebp.class_probabilities), the runs' bins pooled by count."""
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
    for method in SUCCESSORS + TUNED_EBP:
        group = [r["reliability"] for r in rows if r["method"] == method and r["dataset"] == dataset]
        if not group:
            continue
        counts = [sum(g["count"][b] for g in group) for b in range(group[0]["bins"])]
        conf = [sum(g["count"][b] * g["confidence"][b] for g in group if g["count"][b]) / n if n else None
                for b, n in enumerate(counts)]
        acc = [sum(g["count"][b] * g["accuracy"][b] for g in group if g["count"][b]) / n if n else None
               for b, n in enumerate(counts)]
        pts = [(c, a) for c, a in zip(conf, acc) if c is not None]
        label = METHOD_LABELS[method].replace("(D / P)", "(EBP-P)")
        ax.plot(*zip(*pts), marker="o", color=COLOURS[method], label=label)
    ax.set(xlabel="confidence (top class)", ylabel="accuracy", title=f"calibration, {dataset}", xlim=(0, 1),
           ylim=(0, 1))
    ax.legend(fontsize=8, loc="lower right")
