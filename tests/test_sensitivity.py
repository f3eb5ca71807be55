"""The sensitivity of the successors' protocol (reproduction.sensitivity) on synthetic per-image predictions: a cell
rerun under the longer protocol replaces its tuned runs, its shift is paired over seeds and images, and a verdict
that changes words is reported as moved."""
from __future__ import annotations

import numpy as np

from reproduction import paired, sensitivity
from reproduction import successors_report as report

CELL = ("mnist", "800", "ste")
LABELS = np.random.default_rng(5).integers(0, 10, 4000)
HARD = np.random.default_rng(6).random(4000)  # image difficulty shared by every method


def predictions(p: float, seeds: int, rng) -> np.ndarray:
    """seeds × images predicted classes, wrong on about a fraction p of the images (the hard ones most often)."""
    return np.stack([np.where(HARD + 0.3 * rng.random(4000) < p * 1.3, (LABELS + 1) % 10, LABELS).astype(np.uint8)
                     for _ in range(seeds)])


def rows_and_sides(plan: dict, rng) -> tuple[list[dict], dict]:
    """Report rows (deployed error, %) and pair sides of methods {name: error rate}, three seeds each."""
    rows, sides = [], {}
    for method, p in plan.items():
        pred = predictions(p, 3, rng)
        sides[paired.output_label(method, "deployed")] = {"seeds": [0, 1, 2], "predictions": pred}
        rows += [{"method": method, "dataset": "mnist", "net": "800", "seed": s, "predictive": None,
                  "deployed": 100 * float(np.mean(pred[s] != LABELS))} for s in range(3)]
    return rows, sides


def case(sensitivity_error: float):
    """STE erring most under the tuned protocol, tuned EBP less, the paper-protocol EBP at 8%; STE rerun at
    `sensitivity_error`. Returns the cell's summary."""
    rng = np.random.default_rng(7)
    rows, sides = rows_and_sides({"ste": 0.08, "ebp-tuned": 0.03}, rng)
    rows += [{"method": "ebp", "dataset": "mnist", "net": "800", "seed": s, "deployed": 8.0 + 0.05 * s,
              "predictive": 7.0} for s in range(3)]
    pairs = paired.pair_rows({("mnist", "800"): sides}, LABELS, n_boot=0)
    comparisons = report.tuned_comparisons(rows, pairs)
    sens_rows, sens_sides = rows_and_sides({"ste": sensitivity_error}, rng)
    pairs_after = paired.pair_rows({("mnist", "800"): {**sides, **sens_sides}}, LABELS, n_boot=0)
    both = {"ste": sides["ste"], "ste" + sensitivity.SUFFIX: sens_sides["ste"]}
    shift = paired.oriented(paired.pair_rows({("mnist", "800"): both}, LABELS, n_boot=0), "mnist", "800",
                            "ste" + sensitivity.SUFFIX, "ste")
    return sensitivity.summary(CELL, rows, comparisons, sens_rows, pairs_after, shift)


def test_a_rerun_that_errs_less_than_tuned_ebp_moves_the_verdict():
    found = case(0.01)
    assert np.mean(found["sensitivity"]) < np.mean(found["tuned"]) - 0.5  # the rerun replaced the tuned runs
    assert found["shift"]["images_and_seeds"][1] < 0  # lower beyond chance, over seeds and images
    tuned = next(v for v in found["verdicts"] if v["ebp"] == "ebp-tuned")
    assert tuned["tuned"] == ("higher", "lower") and tuned["sensitivity"] == ("lower", "lower")
    (sentence,) = sensitivity.moves([found])
    assert sentence == "STE on MNIST [800]: against tuned EBP, higher → lower."
    assert "| mnist | [800] | STE |" in sensitivity.table([found])


def test_a_rerun_like_the_tuned_runs_moves_nothing():
    found = case(0.08)
    assert found["shift"]["images_and_seeds"][0] < 0 < found["shift"]["images_and_seeds"][1]
    (sentence,) = sensitivity.moves([found])
    assert sentence == "STE on MNIST [800]: no verdict moves (4 compared)."
