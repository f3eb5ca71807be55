"""One rule for every comparison of test errors: a t interval on the run-to-run spread, no binomial term.

Every error compared here, ours and the paper's, is measured on the same 10,000 test images. The test set's
sampling noise is shared by both sides of a comparison, so it does not separate them; what does is training:
another seed (another initialisation, example order, dropout masks) gives another error on the same images. With
s the run-to-run standard deviation on this test set, estimated with df degrees of freedom, two means of n_a and
n_b runs differ beyond chance when

    |x̄_a − x̄_b| > t_{df, (1 + LEVEL)/2} · s · sqrt(1/n_a + 1/n_b).

No rounding term: one run's error on 10,000 images is a count of images over 10,000, a multiple of 0.01 points,
so the paper's two decimals give it exactly. Two uses:

- ours against the paper (n_b = 1): could the paper's single run be one more run of ours? A prediction interval
  for one run, ours ± t·s·sqrt(1 + 1/n). s is pooled over a *family* of cells, the cells of one table and one row
  (B-EBP-P, B-EBP-D, R-EBP-P or R-EBP-D) in one variant (family_spreads), s² = Σ (n_i − 1)·s_i² / Σ (n_i − 1),
  df = Σ (n_i − 1) (18 for nine cells of three seeds), but only where its cells are alike: Bartlett's test of equal
  variances (scipy.stats.bartlett) must not reject at HOMOGENEITY_LEVEL. Where it does, the family is split by
  depth (one or two hidden layers), each depth tested again, and a depth that still rejects is split per cell,
  each cell's s on its own n − 1 degrees of freedom (split_family);
- paired differences (findings): the per-seed differences d_i of two cells evaluated on the same seed, their SD
  s_d, n_b = ∞ (their mean against zero), df = n − 1 (paired_spread).

Why Bartlett and not Levene: with three seeds per cell, Levene's test on deviations from the median (the
Brown-Forsythe form) has one zero deviation in every cell and almost no power: on Table 2's B-EBP-D, cell SDs from
0.05 to 4.48, it gives p = 0.14, Bartlett p ≈ 1e-10. Bartlett's test assumes normal errors, which a count of
errors over 10,000 images averaged over a run's training noise is close to.

leave_one_seed_out checks the first rule on our own runs: a seed held out of every cell should fall within the
band the other seeds give in about LEVEL of the cells.
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass

from scipy import stats

LEVEL = 0.95              # the coverage the band claims for one more run
HOMOGENEITY_LEVEL = 0.05  # Bartlett's p below this: the cells' variances differ, their spreads are not pooled


@dataclass(frozen=True)
class Spread:
    """A run-to-run standard deviation s (points) estimated with df degrees of freedom from `cells` cells."""
    s: float
    df: int
    cells: int = 1


@dataclass(frozen=True)
class Group:
    """Cells whose spreads are pooled: their family, the part of it (None: the whole family; a depth; a cell's
    column), the cell keys, their Spread (None without two seeds in any cell) and Bartlett's p across the cells
    whose test decided the split (None where fewer than two cells could be tested)."""
    family: tuple
    part: str | None
    cells: tuple
    spread: Spread | None
    p: float | None


class Spreads(dict):
    """family_spreads' answer: {cell key: Spread} for every cell whose group has a spread; `groups`, every Group
    in the order formed; `family_p`, {family: Bartlett's p across all its cells}."""

    def __init__(self, spreads=(), groups=(), family_p=None):
        super().__init__(spreads)
        self.groups = list(groups)
        self.family_p = dict(family_p or {})

    def splits(self) -> dict:
        """{family: (Bartlett's p across its cells, [the Group of each part])} of the families not pooled whole."""
        out = {}
        for group in self.groups:
            if group.part is not None:
                out.setdefault(group.family, (self.family_p.get(group.family), []))[1].append(group)
        return out


def variance(x) -> float:
    """The sample variance Σ (x_i − x̄)² / (n − 1) of n ≥ 2 numbers (math.fsum: a few ulps, and fast)."""
    mean = math.fsum(x) / len(x)
    return math.fsum((v - mean) ** 2 for v in x) / (len(x) - 1)


def pooled_spread(samples) -> Spread | None:
    """The pooled SD of several cells' per-seed errors (each a sequence): s² = Σ (n_i − 1)·s_i² / Σ (n_i − 1),
    df = Σ (n_i − 1); cells of one seed add nothing. None when no cell has two seeds."""
    used = [list(x) for x in samples if len(x) > 1]
    df = sum(len(x) - 1 for x in used)
    if df == 0:
        return None
    return Spread(math.sqrt(sum((len(x) - 1) * variance(x) for x in used) / df), df, len(used))


def homogeneity_p(samples) -> float | None:
    """Bartlett's p for equal variances across cells (per-seed errors each), over the cells of two seeds or more
    whose seeds do not all tie (a zero variance has no logarithm: such a cell is pooled, not tested); None for
    fewer than two such cells."""
    return _bartlett(tuple(tuple(x) for x in samples if len(x) > 1 and max(x) > min(x)))


@functools.lru_cache(maxsize=4096)
def _bartlett(tested: tuple) -> float | None:
    """scipy.stats.bartlett's p of the cells `tested` (cached: the tables ask for the same families many times)."""
    if len(tested) < 2:
        return None
    return float(stats.bartlett(*tested).pvalue)


def depth(key: tuple) -> str:
    """The depth of a cell key (table, row, column): 'two hidden layers' for a column such as [200,200]."""
    return "two hidden layers" if "," in str(key[2]) else "one hidden layer"


def split_family(name: tuple, samples: dict, depth=depth) -> list[Group]:
    """The Groups of one family ({cell key: per-seed errors}): the whole family where Bartlett's test does not
    reject at HOMOGENEITY_LEVEL; else each depth alike by the same test; else each cell alone."""
    p = homogeneity_p(samples.values())
    if p is None or p >= HOMOGENEITY_LEVEL:
        return [Group(name, None, tuple(samples), pooled_spread(samples.values()), p)]
    depths = {}
    for key, errors in samples.items():
        depths.setdefault(depth(key), {})[key] = errors
    groups = []
    for part, inner in depths.items():
        q = homogeneity_p(inner.values())
        if len(depths) > 1 and len(inner) > 1 and (q is None or q >= HOMOGENEITY_LEVEL):
            groups.append(Group(name, part, tuple(inner), pooled_spread(inner.values()), q))
        else:  # one depth only, or this depth's cells unalike too: each cell on its own degrees of freedom
            groups += [Group(name, str(key[-1]), (key,), pooled_spread([e]), q) for key, e in inner.items()]
    return groups


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


def family_spreads(samples: dict, family=family, depth=depth) -> Spreads:
    """{cell key: Spread} from {cell key: per-seed errors}: each family (`family` names a key's; by default its
    table and row) pooled where its cells are alike, else split (split_family; `depth` names a key's depth). A
    cell whose group has no cell of two seeds has no entry."""
    grouped = {}
    for key, errors in samples.items():
        grouped.setdefault(family(key), {})[key] = errors
    groups = [g for name, inner in grouped.items() for g in split_family(name, inner, depth)]
    return Spreads({key: g.spread for g in groups if g.spread is not None for key in g.cells}, groups,
                   {name: homogeneity_p(inner.values()) for name, inner in grouped.items()})


def prediction_band(ours, paper: float, spread: Spread | None) -> dict | None:
    """Whether a single run `paper` could be one more run of ours (`ours`: per-seed errors): the difference
    mean(ours) − paper, the tolerance t·s·sqrt(1 + 1/n), and `outside`; None without a spread."""
    if spread is None:
        return None
    difference = statistics.fmean(ours) - paper
    tolerance = half_width(spread, len(ours), 1)
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
    or more, whether the held-out seed's error lies within the prediction band that the other seeds give, s from
    family_spreads of the cells with that seed left out of every cell (pooled or split as they are then alike)."""
    inside = judged = 0
    for seed in sorted({s for errors in by_seed.values() for s in errors}, key=str):
        rest = without_seed(by_seed, seed)
        spreads = family_spreads(rest)
        for key, errors in by_seed.items():
            if seed in errors and len(rest[key]) > 1 and key in spreads:
                band = prediction_band(rest[key], errors[seed], spreads[key])
                inside += not band["outside"]
                judged += 1
    return inside, judged
