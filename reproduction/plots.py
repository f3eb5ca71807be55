"""Learning curves of the tables' runs, and the prolonged runs of the extended profile.

Beyond the paper's protocol, a run of the extended profile prolongs a paper-profile run (same configuration and
seed, 200 epochs instead of 120), to show where a curve still falling at epoch 120 settles: prolonged_runs pairs
each with its paper-profile twin, settling_table and plot_prolonged show both.
"""
from __future__ import annotations

import math
import statistics

from reproduction.parameters import PAPER_EPOCHS, same_configuration
from reproduction.results import cell_key, last_epochs_mean


def _log_error_axis(ax) -> None:
    """A log y axis for test errors in percent, ticks written 2, 3, 20, 30 rather than 2 × 10⁰, 2 × 10¹."""
    from matplotlib.ticker import FormatStrFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))


def label_points(ax, points: list[tuple[float, float, str]], fontsize: float = 8, color: str = "black") -> None:
    """Write each (x, y, text) just right of its point; a label that would overprint one already written (points
    in a cluster) or leave the axes moves to the nearest free line below or above, with a thin line back to its
    point. Call it once the axes' limits and the figure's layout are final: the overlap is judged on the drawn
    page."""
    from matplotlib.text import Text

    renderer = ax.figure.canvas.get_renderer()

    def text_box(label):  # the words alone: an annotation's own extent includes its line to the point
        label.update_positions(renderer)
        return Text.get_window_extent(label, renderer)

    inside = ax.get_window_extent(renderer)
    # Lines below and above the point, nearest first; the first free one inside the axes is taken.
    shifts = [0] + [sign * k for k in range(1, 4 * len(points) + 1) for sign in (-1, 1)]
    placed = []
    for x, y, text in sorted(points, key=lambda p: -p[1]):
        label = ax.annotate(text, (x, y), xytext=(4, -3), textcoords="offset points", fontsize=fontsize,
                            color=color, va="center", arrowprops={"arrowstyle": "-", "lw": 0.4, "color": color})
        for shift in shifts:
            label.xyann = (4, -3 + 1.1 * fontsize * shift)
            box = text_box(label)
            if box.y0 >= inside.y0 and box.y1 <= inside.y1 and not any(box.overlaps(b) for b in placed):
                break
        label.arrow_patch.set_visible(shift != 0)  # a line back to the point only for a label moved away
        placed.append(text_box(label))


def plot_learning_curves(ax, rows: list[dict], cells: dict, table: int, weights: str, legend: bool = True) -> None:
    """Test error (%) of EBP-P (solid) and EBP-D (dashed) against epoch, one colour per column of `table`: the
    first pooled seed of each cell (the title says which profile). legend=False leaves out the legend of the
    colours, for a panel beside another of the same table that has one."""
    runs = list(dict.fromkeys((r["column"], cell_key(r)) for r in rows
                              if r["table"] == table and r["weights"] == weights and r["output"] == "ebp_p"))
    profiles = set()
    for k, (column, key) in enumerate(runs):
        cell = cells.get(key)
        if cell is None:
            continue
        result = cell.pooled[0]
        profiles.add(result["profile"])
        epochs = [h["epoch"] for h in result["history"]]
        color = f"C{k % 10}"
        ax.plot(epochs, [100 * h["test_ebp_p"] for h in result["history"]], "-", color=color, label=column)
        ax.plot(epochs, [100 * h["test_ebp_d"] for h in result["history"]], "--", color=color)
    ax.set(xlabel="epoch", ylabel="test error (%)",
           title=f"Table {table}, {weights} ({', '.join(sorted(profiles)) or 'not yet run'})")
    ax.xaxis.get_major_locator().set_params(integer=True)
    if profiles:
        _log_error_axis(ax)
        if legend:
            ax.legend(fontsize=8, ncol=2)
    else:
        ax.text(0.5, 0.5, "not yet run", ha="center", va="center", transform=ax.transAxes, color="grey")


def prolonged_runs(results: list[dict]) -> list[tuple[dict, dict | None]]:
    """(extended result, the finished paper-profile result it prolongs, or None) for every result of the
    extended profile (load_results): the twin has the same configuration and seed and the paper's 120 epochs."""
    paper = [r for r in results if r["profile"] == "paper" and r["finished"]]
    pairs = []
    for result in (r for r in results if r["profile"] == "extended"):
        at_120 = {**result["parameters"], "epochs": PAPER_EPOCHS}
        pairs.append((result, next((p for p in paper if same_configuration(at_120, p["parameters"])), None)))
    return pairs


def retraced_epochs(result: dict, twin: dict) -> int:
    """How many leading epochs of `result` have exactly the test and training errors of `twin`'s (the same
    seed draws the same orders and masks, so a prolonged run retraces its twin until rounding differs)."""
    keys = ("test_ebp_p", "test_ebp_d", "train_ebp_p", "train_ebp_d")
    n = 0
    for a, b in zip(result["history"], twin["history"]):
        if any(a.get(k) != b.get(k) for k in keys):
            break
        n += 1
    return n


def twin_agreement(result: dict, twin: dict) -> str:
    """One sentence: how long a prolonged run retraces its twin, how far apart their test errors come over the
    epochs both ran, and the CPUs each trained on (rounding, which differs between CPUs, is what parts them)."""
    common = list(zip(result["history"], twin["history"]))
    gap = max((100 * abs(a[f"test_{o}"] - b[f"test_{o}"]) for a, b in common for o in ("ebp_p", "ebp_d")),
              default=0.0)

    def cpus(r):
        return ", ".join(sorted({s.get("cpu", "?") for s in r["sessions"]})) or "unrecorded CPUs"
    return (f"identical to its paper-profile twin for {retraced_epochs(result, twin)} of the {len(common)} epochs "
            f"both ran; over those epochs their test errors differ by at most {gap:.2f} points (trained on "
            f"{cpus(result)}; the twin on {cpus(twin)})")


def run_name(params: dict) -> str:
    """A run's configuration in words, e.g. "binary [800,800], sampled dropout, seed 0"."""
    return (f"{params['weights']} [{params['architecture'].replace('-', ',')}], {params['dropout'] or 'no'} dropout, "
            f"seed {params['seed']}")


def error_at(result: dict, output: str, epoch: int) -> float:
    """Test error (percent) of `output` (ebp_p or ebp_d) after `epoch` (counted from 1)."""
    return 100 * result["history"][epoch - 1][f"test_{output}"]


def trend(result: dict, output: str, k: int = 40) -> float:
    """Least-squares slope of the test error of `output` over the last k epochs, in points per 10 epochs:
    about zero once a curve has settled, negative while it still falls. NaN for a run of fewer than k epochs
    (the quick profile's 3): over its first epochs every curve falls steeply, which says nothing about settling."""
    tail = result["history"][-k:]
    if len(tail) < max(k, 2):
        return math.nan
    fit = statistics.linear_regression([h["epoch"] for h in tail], [100 * h[f"test_{output}"] for h in tail])
    return 10 * fit.slope


def settling_table(pairs: list[tuple[dict, dict | None]]) -> str:
    """Markdown: for each prolonged run (prolonged_runs) and output, the error after epoch 120 and after its
    last epoch, the last-10-epoch means ending there, and the trend (trend) over the last 40 epochs of each."""
    if not pairs:
        return "No run of the extended profile has been committed yet."
    lines = ["| run | output | epoch 120 | last 10 to 120 | trend to 120 | last epoch | last 10 to it | "
             "trend to it |", "|---|---|---|---|---|---|---|---|"]
    for result, _ in pairs:
        last = result["epochs_done"]
        at_120 = {**result, "history": result["history"][:PAPER_EPOCHS]}
        name = run_name(result["parameters"])
        for output in ("ebp_p", "ebp_d"):
            label = "EBP-P" if output == "ebp_p" else "EBP-D"
            early = (f"{error_at(result, output, PAPER_EPOCHS):.2f} | {last_epochs_mean(at_120, output):.2f} | "
                     f"{trend(at_120, output):+.2f}" if last >= PAPER_EPOCHS else "· | · | ·")
            lines.append(f"| {name} | {label} | {early} | {error_at(result, output, last):.2f} (epoch {last}) | "
                         f"{last_epochs_mean(result, output):.2f} | {trend(result, output):+.2f} |")
    return "\n".join(lines)


def plot_prolonged(ax, result: dict, twin: dict | None) -> None:
    """Test error (%) against epoch of a prolonged run, EBP-P solid and EBP-D dashed, over its paper-profile
    twin (grey, drawn wider: where the two coincide only the coloured line shows), with the paper's last epoch
    marked."""
    for output, style in (("ebp_p", "-"), ("ebp_d", "--")):
        label = "EBP-P" if output == "ebp_p" else "EBP-D"
        if twin is not None:
            ax.plot([h["epoch"] for h in twin["history"]], [100 * h[f"test_{output}"] for h in twin["history"]],
                    style, color="0.7", lw=4, label=f"{label}, paper profile")
        ax.plot([h["epoch"] for h in result["history"]], [100 * h[f"test_{output}"] for h in result["history"]],
                style, color="C0" if output == "ebp_p" else "C3", lw=1.2, label=f"{label}, extended profile")
    ax.axvline(PAPER_EPOCHS, color="k", ls=":", lw=1)
    ax.text(PAPER_EPOCHS, 0.98, "the paper's last epoch ", transform=ax.get_xaxis_transform(), ha="right", va="top",
            fontsize=10)
    ax.set(xlabel="epoch", ylabel="test error (%)", title=run_name(result["parameters"]))
    _log_error_axis(ax)
    ax.legend(fontsize=10, loc="center right")
