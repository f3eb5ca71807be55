"""The prolonged runs of the extended profile (reproduction.plots): paired with the paper-profile run they
prolong, the settling table, and how long a prolonged run retraces its twin."""
from __future__ import annotations

import math

import pytest
from helpers import cell_row, fake_result, write_result

from reproduction.plots import prolonged_runs, retraced_epochs, settling_table, trend, twin_agreement
from reproduction.results import load_results, seed_of


def test_an_extended_run_is_paired_with_the_paper_run_it_prolongs(rows, tmp_path):
    """An extended run (200 epochs) is paired with the finished paper-profile run of its configuration and seed,
    not with another seed's; the table gives the error after epoch 120 and after epoch 200, the last-10 means
    ending there and the trend over the last 40 epochs; retraced_epochs counts the epochs identical to the twin."""
    row = cell_row(rows, 3, "B-EBP-D", "[800,800]")
    params = {"dropout": "sampled", "keep": 0.8}
    falling = [0.30 - 0.001 * e for e in range(120)]            # 0.1 points lower every epoch up to epoch 120
    extended = fake_result(row, 200, None, "extended", None, curve=falling + [0.181] * 80, **params)
    twin = fake_result(row, 120, None, "paper", None, curve=falling, **params)
    other_seed = fake_result(row, 120, None, "paper", None, seed=1, curve=falling, **params)  # read first
    for key, result in [("binary-800-800-dropout-sampled", extended), ("binary-800-800-dropout-sampled", twin),
                        ("binary-800-800-dropout-sampled-seed1", other_seed)]:
        write_result(tmp_path, key, result)
    pairs = prolonged_runs(load_results(tmp_path))
    assert len(pairs) == 1 and seed_of(pairs[0][1]) == 0 and pairs[0][1]["profile"] == "paper"
    assert prolonged_runs([r for r in load_results(tmp_path) if r["profile"] != "paper"])[0][1] is None
    assert retraced_epochs(*pairs[0]) == 120
    drifted = {**twin, "history": twin["history"][:50] + [{**twin["history"][50], "test_ebp_d": 0.5}]}
    assert retraced_epochs(extended, drifted) == 50
    assert twin_agreement(extended, drifted) == ("identical to its paper-profile twin for 50 of the 51 epochs both "
                                                    "ran; over those epochs their test errors differ by at most 25.00 "
                                                    "points (trained on unrecorded CPUs; the twin on unrecorded CPUs)")
    assert trend(twin, "ebp_d") == pytest.approx(-1.0) and trend(extended, "ebp_d") == pytest.approx(0.0)
    three_epochs = {**twin, "history": twin["history"][:3]}  # the quick profile: no 40-epoch trend to measure
    assert math.isnan(trend(three_epochs, "ebp_d")) and trend(three_epochs, "ebp_d", k=3) == pytest.approx(-1.0)
    table = settling_table(pairs)
    # epoch 120: 18.10; epochs 111-120: 18.55 on average; epoch 200 and its last 10: 18.10
    assert "| binary [800,800], sampled dropout, seed 0 | EBP-D | 18.10 | 18.55 | -1.00 | 18.10 (epoch 200) | " \
           "18.10 | +0.00 |" in table
    assert settling_table([]) == "No run of the extended profile has been committed yet."


def test_labels_of_a_cluster_of_points_do_not_overprint():
    """Eight points a few pixels apart (the agreement figure's red cells in the 3-5% cluster): every label is
    written, none overlaps another or leaves the axes, and each moved label has a line back to its point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from reproduction.plots import label_points

    fig, ax = plt.subplots(figsize=(6.4, 6.0))
    points = [(3 + 0.05 * i, 1.6 + 0.03 * i, f"T4 B-EBP-P {i}") for i in range(8)]  # near the bottom
    ax.set(xscale="log", yscale="log", xlim=(1.5, 30), ylim=(1.5, 30))
    label_points(ax, points)
    renderer = fig.canvas.get_renderer()
    boxes = [Text.get_window_extent(label, renderer) for label in ax.texts]
    assert sorted(label.get_text() for label in ax.texts) == sorted(text for _, _, text in points)
    assert not [(i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes[i + 1:], i + 1) if a.overlaps(b)]
    axes = ax.get_window_extent(renderer)
    assert all(axes.y0 <= b.y0 and b.y1 <= axes.y1 for b in boxes), "a label left the axes"
    assert sum(label.arrow_patch.get_visible() for label in ax.texts) == len(points) - 1
    plt.close(fig)
