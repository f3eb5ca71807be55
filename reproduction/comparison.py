"""EBP against the backprop baseline (notebooks/comparison.ipynb): reads result.json records only.

Both sides are summarised over their finished seeds as mean ± sample SD (n seeds); EBP from the no-dropout runs of
Table 2 at the paper's protocol, backprop from its runs at the fair protocol (reproduction/backprop.py).
"""
from __future__ import annotations

import statistics

from reproduction.backprop import CONFIGS, DATASETS, PAPER_CONFIGS, hidden_layers
from reproduction.parameters import MECHANISMS
from reproduction.results import DATASET_NAMES

TABLE2_ARCHITECTURES = ("200", "400", "600", "800", "1000", "200-200", "400-400", "600-600", "800-800")
EBP_OUTPUTS = (("binary", "test_ebp_p", "B-EBP-P"), ("binary", "test_ebp_d", "B-EBP-D"),
               ("real", "test_ebp_p", "R-EBP-P"), ("real", "test_ebp_d", "R-EBP-D"))
NOT_RUN = "not run yet"
ROW_ORDER = ("tanh-200", "tanh-400", "tanh-500-l2", "tanh-600", "tanh-800", "tanh-1000", "tanh-200-200",
             "tanh-400-400", "tanh-600-600", "tanh-800-800")


def is_table2_ebp(result: dict, dataset: str) -> bool:
    """A finished paper-protocol EBP run of Table 2's setting on `dataset`: no dropout, per-pixel
    standardisation, reference initialisation, the spec's update, batch 10, one of Table 2's architectures. The
    batch is checked because a mechanism profile (parameters.MECHANISMS) changes it within the paper's protocol;
    a run of a mechanism profile is refused by its folder too, as the float64 one changes only the engine."""
    p = result.get("parameters", {})
    return (result["method"] == "ebp" and result.get("protocol") == "paper" and p.get("batch_size") == 10
            and result.get("profile") not in MECHANISMS
            and bool(result.get("finished")) and p.get("dataset") == dataset and p.get("dropout") is None
            and p.get("architecture") in TABLE2_ARCHITECTURES and p.get("preprocessing") == "pixel"
            and p.get("std_floor") == 0 and p.get("init_scale") == 1 and p.get("update", "spec") == "spec")


def ebp_table2_results(results: list[dict], dataset: str) -> dict[tuple[str, str], list[dict]]:
    """(architecture, weights) -> the finished paper-protocol EBP runs of Table 2 on `dataset`, one per seed."""
    grouped: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        if is_table2_ebp(r, dataset):
            grouped.setdefault((r["parameters"]["architecture"], r["parameters"]["weights"]), []).append(r)
    return {k: sorted(v, key=lambda r: r["parameters"]["seed"]) for k, v in grouped.items()}


def backprop_results(results: list[dict], dataset: str) -> dict[str, list[dict]]:
    """config -> the finished fair-protocol backprop runs on `dataset`, one per seed."""
    grouped: dict[str, list[dict]] = {}
    for r in results:
        p = r.get("parameters", {})
        if (r["method"] == "backprop" and p.get("dataset") == dataset and r.get("finished")
                and r.get("protocol") == "fair"):
            grouped.setdefault(p["config"], []).append(r)
    return {k: sorted(v, key=lambda r: r["parameters"]["seed"]) for k, v in grouped.items()}


def summary(errors: list[float]) -> tuple[float, float | None, int]:
    """(mean, sample SD or None for one seed, n) of test errors in percent."""
    values = [100 * e for e in errors]
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None), len(values)


def summary_text(errors: list[float]) -> str:
    """'2.13 ± 0.05 (n = 3)', '2.13 (n = 1)', or 'not run yet'."""
    if not errors:
        return NOT_RUN
    mean, sd, n = summary(errors)
    return f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "") + f" (n = {n})"


def ebp_errors(runs: list[dict] | None, output: str) -> list[float]:
    return [r["final"][output] for r in runs or []]


def backprop_errors(runs: list[dict] | None) -> list[float]:
    return [r["final"]["test_error"] for r in runs or []]


def architecture_label(architecture: str) -> str:
    sizes = hidden_layers(architecture)
    return str(sizes[0]) if len(sizes) == 1 else "[" + ", ".join(map(str, sizes)) + "]"


def comparison_rows(ebp_results: list[dict], bp_results: list[dict], dataset: str) -> list[list[str]]:
    """Rows of one dataset's comparison: architecture, the four EBP outputs, backprop (ours), the paper's quoted
    backprop number (MNIST only). The L2 configuration has its own row beside 500 units."""
    ebp, bp = ebp_table2_results(ebp_results, dataset), backprop_results(bp_results, dataset)
    rows = []
    for config in ROW_ORDER:
        spec = CONFIGS[config]
        label = architecture_label(spec["architecture"])
        if spec["l2"]:
            label += ", L2"
            ebp_cells = ["—"] * len(EBP_OUTPUTS)
        else:
            ebp_cells = [summary_text(ebp_errors(ebp.get((spec["architecture"], w)), out))
                         for w, out, _ in EBP_OUTPUTS]
        paper = f"{spec['paper_error']:.2f}" if spec["paper_error"] is not None and dataset == "mnist" else "—"
        rows.append([label, *ebp_cells, summary_text(backprop_errors(bp.get(config))), paper])
    return rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def comparison_table(ebp_results: list[dict], bp_results: list[dict], dataset: str) -> str:
    """One dataset's comparison as a Markdown table (test error %, mean ± SD over seeds)."""
    header = ["hidden units", *[label for _, _, label in EBP_OUTPUTS], "backprop (ours)",
              "backprop quoted by the paper"]
    return markdown_table(header, comparison_rows(ebp_results, bp_results, dataset))


def runs_table(bp_results: list[dict]) -> str:
    """Every backprop run: the grid's choice, the epoch of the best validation error and the epochs trained,
    the rate at the end, and the validation and test errors of the best validation epoch (%)."""
    runs = sorted((r for r in bp_results if r["method"] == "backprop" and r.get("final")),
                  key=lambda r: (DATASETS.index(r["parameters"]["dataset"]),
                                 list(CONFIGS).index(r["parameters"]["config"]), r["parameters"]["seed"]))
    rows = [[r["parameters"]["dataset"], r["parameters"]["config"], str(r["parameters"]["seed"]), r["protocol"],
             r["grid"]["chosen"]["preprocessing"], f"{r['grid']['chosen']['learning_rate']:g}",
             f"{r['best_epoch']} / {r['epochs_done']}" + ("" if r["finished"] else " (running)"),
             f"{r['history'][-1]['learning_rate']:g}", f"{100 * r['final']['validation_error']:.2f}",
             f"{100 * r['final']['test_error']:.2f}"] for r in runs]
    return markdown_table(["dataset", "config", "seed", "protocol", "inputs", "rate", "best epoch / epochs",
                           "last rate", "validation", "test"], rows)


def width_series(ebp_results: list[dict], bp_results: list[dict], dataset: str) -> dict:
    """method -> {n_layers: [(width, mean test error %, SD or None), ...]} for the error-vs-width figure."""
    ebp, bp = ebp_table2_results(ebp_results, dataset), backprop_results(bp_results, dataset)
    series: dict = {}
    for weights, output, label in EBP_OUTPUTS:
        for (architecture, w), runs in ebp.items():
            if w == weights:
                sizes = hidden_layers(architecture)
                mean, sd, _ = summary(ebp_errors(runs, output))
                series.setdefault(label, {}).setdefault(len(sizes), []).append((sizes[0], mean, sd))
    for config, runs in bp.items():
        if CONFIGS[config]["l2"] == 0:
            sizes = hidden_layers(CONFIGS[config]["architecture"])
            mean, sd, _ = summary(backprop_errors(runs))
            series.setdefault("backprop", {}).setdefault(len(sizes), []).append((sizes[0], mean, sd))
    return {m: {n: sorted(points) for n, points in by_n.items()} for m, by_n in series.items()}


COLOURS = {"B-EBP-P": "tab:blue", "B-EBP-D": "tab:cyan", "R-EBP-P": "tab:red", "R-EBP-D": "tab:orange",
           "backprop": "black"}


def plot_width(ax, ebp_results: list[dict], bp_results: list[dict], dataset: str) -> None:
    """Test error vs hidden units per layer, mean over seeds with ±SD bars: one colour per method, solid one hidden
    layer, dashed two; the L2 backprop run and (MNIST) the paper's two quoted backprop numbers as markers."""
    series = width_series(ebp_results, bp_results, dataset)
    for method, by_n in series.items():
        for n, points in sorted(by_n.items()):
            x, y, sd = zip(*points)
            ax.errorbar(x, y, yerr=[s or 0.0 for s in sd], fmt="o-" if n == 1 else "s--", color=COLOURS[method],
                        ms=6 if method == "backprop" else 4, capsize=2, zorder=3 if method == "backprop" else 2,
                        label=f"{method}, {n} hidden layer{'s' if n > 1 else ''}")
    l2 = backprop_results(bp_results, dataset).get("tanh-500-l2")
    if l2:
        mean, sd, _ = summary(backprop_errors(l2))
        ax.errorbar([500], [mean], yerr=[sd or 0.0], fmt="D", color="black", mfc="white", capsize=2, zorder=3,
                    label="backprop 500, L2 (ours)")
    if dataset == "mnist":
        for config in PAPER_CONFIGS:
            spec = CONFIGS[config]
            ax.plot([hidden_layers(spec["architecture"])[0]], [spec["paper_error"]], "*", color="green", ms=12,
                    label="backprop quoted by the paper (800; 500 with L1 + L2)" if config == PAPER_CONFIGS[0]
                    else None)
    if not series:
        ax.text(0.5, 0.5, NOT_RUN, transform=ax.transAxes, ha="center")
    ax.set(title=dataset, xlabel="hidden units per layer", ylabel="test error (%)", xticks=[200, 400, 600, 800, 1000])


def width_figure(ebp_results: list[dict], bp_results: list[dict], y_max: dict | None = None):
    """One panel per dataset (plot_width), one legend below both; y_max cuts a panel's axis (dataset -> %)."""
    from ebp_analysis import subplots

    fig, axes = subplots(1, len(DATASETS), height=5.2, layout="constrained")
    handles = {}
    for ax, dataset in zip(axes, DATASETS):
        plot_width(ax, ebp_results, bp_results, dataset)
        top = (y_max or {}).get(dataset)
        ax.set_ylim(0, top if top is not None else max(1.0, 1.2 * ax.dataLim.ymax))
        handles.update(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    return fig


def headline(ebp_results: list[dict], bp_results: list[dict], dataset: str) -> str:
    """Backprop at the paper's two configurations against each EBP output at 800 units and at its best width."""
    ebp, bp = ebp_table2_results(ebp_results, dataset), backprop_results(bp_results, dataset)
    lines = []
    for config in PAPER_CONFIGS:
        spec = CONFIGS[config]
        quoted = f"; the paper quotes {spec['paper_error']:.2f}%" if dataset == "mnist" else ""
        reg = ", L2" if spec["l2"] else ""
        lines.append(f"backprop {architecture_label(spec['architecture'])}{reg} (ours): "
                     f"{summary_text(backprop_errors(bp.get(config)))}{quoted}")
    for weights, output, label in EBP_OUTPUTS:
        runs = {a: r for (a, w), r in ebp.items() if w == weights}
        if not runs:
            lines.append(f"{label}: {NOT_RUN}")
            continue
        best = min(runs, key=lambda a: (summary(ebp_errors(runs[a], output))[0], TABLE2_ARCHITECTURES.index(a)))
        lines.append(f"{label}: at 800 hidden units {summary_text(ebp_errors(runs.get('800'), output))}; best of "
                     f"Table 2 {summary_text(ebp_errors(runs[best], output))} at {architecture_label(best)}")
    return "\n".join(lines)


def _best(runs: dict, output: str) -> str:
    """The architecture of runs ({architecture: runs}) with the lowest mean error of `output`."""
    return min(runs, key=lambda a: (summary(ebp_errors(runs[a], output))[0], TABLE2_ARCHITECTURES.index(a)))


def headline_table(ebp_results: list[dict], bp_results: list[dict]) -> str:
    """Markdown, headline's numbers as a table: backprop at the paper's two configurations, and each EBP output
    at 800 units and at its best width of Table 2, one column per data set (mean ± SD (n seeds))."""
    header = ["method", "hidden units"] + [f"{DATASET_NAMES[d]}, test error %" for d in DATASETS] + ["the paper quotes"]
    ebp = {d: ebp_table2_results(ebp_results, d) for d in DATASETS}
    bp = {d: backprop_results(bp_results, d) for d in DATASETS}
    rows = []
    for config in PAPER_CONFIGS:
        spec = CONFIGS[config]
        rows.append([f"backprop{', L2' if spec['l2'] else ''} (ours)", architecture_label(spec["architecture"])]
                    + [summary_text(backprop_errors(bp[d].get(config))) for d in DATASETS]
                    + [f"{spec['paper_error']:.2f}"])
    for weights, output, label in EBP_OUTPUTS:
        runs = {d: {a: r for (a, w), r in ebp[d].items() if w == weights} for d in DATASETS}
        rows.append([label, "800"] + [summary_text(ebp_errors(runs[d].get("800"), output)) if runs[d] else NOT_RUN
                                      for d in DATASETS] + [""])
        rows.append([label, "Table 2's best"] + [
            f"{summary_text(ebp_errors(runs[d][_best(runs[d], output)], output))} at "
            f"{architecture_label(_best(runs[d], output))}" if runs[d] else NOT_RUN for d in DATASETS] + [""])
    return markdown_table(header, rows)


def in_short(ebp_results: list[dict], bp_results: list[dict]) -> str:
    """The page's answer in a few sentences: per data set, backprop at 800 units against EBP's best output there."""
    sentences = ["The paper calls EBP comparable to backprop. Here backprop is tuned on a validation split and set "
                 "beside EBP's Table 2 runs (no dropout)."]
    for dataset in DATASETS:
        bp = backprop_errors(backprop_results(bp_results, dataset).get("tanh-800"))
        ebp = ebp_table2_results(ebp_results, dataset)
        at_800 = [(summary(ebp_errors(ebp.get(("800", w)), o))[0], label) for w, o, label in EBP_OUTPUTS
                  if ebp_errors(ebp.get(("800", w)), o)]
        if not bp or not at_800:
            sentences.append(f"On {DATASET_NAMES[dataset]}: {NOT_RUN}.")
            continue
        best, label = min(at_800)
        side = "below" if summary(bp)[0] < best else "above"
        sentences.append(f"On {DATASET_NAMES[dataset]}, backprop with 800 tanh units errs {summary(bp)[0]:.2f}%, {side} EBP's best "
                         f"output at that width ({label}, {best:.2f}%).")
    sentences.append("No run here tests why either side leads.")
    return "> **In short.** " + " ".join(sentences)
