"""One rule for every comparison of test errors: a t interval on the run-to-run spread, no binomial term.

Every error compared here, ours and the paper's, is measured on the same 10,000 test images. The test set's
sampling noise is shared by both sides of a comparison, so it does not separate them; what does is training:
another seed (another initialisation, example order, dropout masks) gives another error on the same images. With
s the run-to-run standard deviation on this test set, estimated with df degrees of freedom, two means of n_a and
n_b runs differ beyond chance when

    |x̄_a − x̄_b| > t_{df, (1 + LEVEL)/2} · s · sqrt(1/n_a + 1/n_b) + r,

r the rounding of a number printed to two decimals (PAPER_ROUNDING per such number, worst case). Two uses:

- ours against the paper (n_b = 1): could the paper's single run be one more run of ours? A prediction interval
  for one run, ours ± t·s·sqrt(1 + 1/n). s is pooled over a *family* of cells, the cells of one table and one row
  (B-EBP-P, B-EBP-D, R-EBP-P or R-EBP-D) in one variant (family_spreads): the same weights, output and error level,
  s² = Σ (n_i − 1)·s_i² / Σ (n_i − 1), df = Σ (n_i − 1) (18 for nine cells of three seeds);
- paired differences (findings): the per-seed differences d_i of two cells evaluated on the same seed, their SD
  s_d, n_b = ∞ (their mean against zero), df = n − 1 (paired_spread).

leave_one_seed_out checks the first rule on our own runs: a seed held out of every cell should fall within the
band the other seeds give in about LEVEL of the cells.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import stats

LEVEL = 0.95             # the coverage the band claims for one more run
PAPER_ROUNDING = 0.005   # the paper prints errors to two decimals: its number is known to ±0.005 points


@dataclass(frozen=True)
class Spread:
    """A run-to-run standard deviation s (points) estimated with df degrees of freedom from `cells` cells."""
    s: float
    df: int
    cells: int = 1


def pooled_spread(samples) -> Spread | None:
    """The pooled SD of several cells' per-seed errors (each a sequence): s² = Σ (n_i − 1)·s_i² / Σ (n_i − 1),
    df = Σ (n_i − 1); cells of one seed add nothing. None when no cell has two seeds."""
    used = [list(x) for x in samples if len(x) > 1]
    df = sum(len(x) - 1 for x in used)
    if df == 0:
        return None
    return Spread(math.sqrt(sum((len(x) - 1) * statistics.variance(x) for x in used) / df), df, len(used))


def combined_spread(a: Spread | None, b: Spread | None) -> Spread | None:
    """The spread of a difference of one run of each of two independent families: s² = s_a² + s_b², with the
    smaller of their degrees of freedom (conservative); a missing side (a fixed number) adds nothing."""
    present = [x for x in (a, b) if x is not None]
    if not present:
        return None
    return Spread(math.sqrt(sum(x.s ** 2 for x in present)), min(x.df for x in present),
                  sum(x.cells for x in present))


def half_width(spread: Spread, n_a: float, n_b: float = math.inf, level: float = LEVEL) -> float:
    """t_{df, (1 + level)/2} · s · sqrt(1/n_a + 1/n_b): the half-width of the interval for x̄_a − x̄_b (n_b = ∞:
    x̄_a against a fixed number; n_b = 1: against one more run, the prediction interval)."""
    quantile = stats.t.ppf((1 + level) / 2, spread.df)
    return float(quantile * spread.s * math.sqrt(1 / n_a + 1 / n_b))


def family(key: tuple) -> tuple:
    """The family of a cell key (table, row, column): its table and row, e.g. (2, "B-EBP-P")."""
    return key[0], key[1]


def family_spreads(samples: dict, family=family) -> dict:
    """{family: Spread} pooled over the cells of each family, from {cell key: per-seed errors}; a family without
    any cell of two seeds has no entry. `family` names a key's family (by default its table and row)."""
    grouped = {}
    for key, errors in samples.items():
        grouped.setdefault(family(key), []).append(errors)
    spreads = {name: pooled_spread(group) for name, group in grouped.items()}
    return {name: spread for name, spread in spreads.items() if spread is not None}


def prediction_band(ours, paper: float, spread: Spread | None, rounding: float = PAPER_ROUNDING) -> dict | None:
    """Whether a single run `paper` could be one more run of ours (`ours`: per-seed errors): the difference
    mean(ours) − paper, the tolerance t·s·sqrt(1 + 1/n) + rounding, and `outside`; None without a spread."""
    if spread is None:
        return None
    difference = statistics.fmean(ours) - paper
    tolerance = half_width(spread, len(ours), 1) + rounding
    return {"difference": difference, "tolerance": tolerance, "outside": abs(difference) > tolerance,
            "s": spread.s, "df": spread.df}


def paired_spread(better: dict, worse: dict) -> tuple[list[float], Spread | None]:
    """The per-seed differences worse − better over the seeds both {seed: error} share, and their SD with n − 1
    degrees of freedom (None for fewer than two shared seeds)."""
    d = [worse[seed] - better[seed] for seed in sorted(set(better) & set(worse), key=str)]
    return d, (Spread(statistics.stdev(d), len(d) - 1) if len(d) > 1 else None)


def without_seed(by_seed: dict, seed) -> dict:
    """{cell key: per-seed errors} of {cell key: {seed: error}} with `seed` left out."""
    return {key: [e for s, e in errors.items() if s != seed] for key, errors in by_seed.items()}


def leave_one_seed_out(by_seed: dict, level: float = LEVEL) -> tuple[int, int]:
    """(inside, judged): for every seed and every cell {cell key: {seed: error}} holding it and two other seeds
    or more, whether the held-out seed's error lies within the prediction band (no rounding: our errors are
    exact) that the other seeds give, s pooled over the family with that seed left out of every cell."""
    inside = judged = 0
    for seed in sorted({s for errors in by_seed.values() for s in errors}, key=str):
        rest = without_seed(by_seed, seed)
        spreads = family_spreads(rest)
        for key, errors in by_seed.items():
            if seed in errors and len(rest[key]) > 1 and family(key) in spreads:
                band = prediction_band(rest[key], errors[seed], spreads[family(key)], rounding=0.0)
                inside += not band["outside"]
                judged += 1
    return inside, judged
