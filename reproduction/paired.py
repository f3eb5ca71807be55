"""Differences between two methods over seeds and test images: intervals that include both sources of variation,
beside the Welch interval that conditions on this test set.

Data: for method A, errors e_A[s, i] ∈ {0, 1} of seed s = 1..m_A on test image i = 1..n (for B likewise, on the same
images). The quantity: Δ = E[e_A] − E[e_B], the expectation over training seeds and over images from the
population the test set was drawn from. Its estimate is the difference of the seed-and-image means,
Δ̂ = ē_A − ē_B. Two things vary in Δ̂ and both are random: which seeds were trained and which test images were drawn.

- Welch (`welch`): the per-seed error rates r_A[s] = (1/n) Σ_i e_A[s, i] as two samples, t with Welch–Satterthwaite
  degrees of freedom. Its variance s²_A/m_A + s²_B/m_B is that of Δ̂ for a fixed test set: it says how far another
  set of seeds would move the difference on these 10,000 images, not how far another test set would.
- Images and seeds (`images_and_seeds`): as a crossed random-effects (method-of-moments) variance,

      Var(Δ̂) ≈ s²_A/m_A + s²_B/m_B + s²_d/n − MS_r,A/(m_A n) − MS_r,B/(m_B n),
      d_i = ē_A[·, i] − ē_B[·, i] (the seed-averaged paired difference),

  the seed terms of Welch plus the image-sampling variance of the paired differences (the images are the same for
  both methods, so what is shared cancels in d_i and only what differs counts). In the crossed decomposition
  e_msi = μ_m + u_ms + g_mi + r_msi, E s²_M = σ²_u,M + σ²_r,M/n and E s²_d = Var(g_A − g_B) + Σ_M σ²_r,M/m_M: the
  seed-by-image residual σ²_r (which images a seed happens to get wrong) is in both, so it is taken out of the
  image term once, estimated by the two-way ANOVA residual mean square MS_r (`residual_mean_square`). Without that
  correction the interval over-covers (about 0.98 at 0.95 in `coverage`'s default setting). The interval is
  Δ̂ ± t_ν SE with ν by Satterthwaite over the three terms (the image term with n − 1 degrees of freedom).
- Two-way bootstrap (`bootstrap`): images resampled (the same draw for both methods, keeping them paired), seeds
  resampled within each method, Δ̂ recomputed; percentile interval. It counts the residual twice, as the
  uncorrected moment sum does, and with 3 seeds per method its seed variance shrinks by (m − 1)/m: measured
  (`coverage`, 200 synthetic comparisons each, binomial SE 0.015) it over-covers where images matter (0.98-0.985)
  and under-covers where seeds do (0.895), where the images-and-seeds interval held 0.965-0.97 and Welch 0.85
  (images matter) to 0.97. A cross-check, not the interval to report.
- Ranks (`rank_test`): the exact distribution of the Mann–Whitney count U over all C(m_A + m_B, m_A) splits of the
  pooled per-seed rates. With 3 against 3 seeds the smallest two-sided p is 2/20 = 0.1 (complete separation), so
  ranks alone never reach 0.05: stated beside the intervals, never in place of them.
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
from scipy import stats

LEVEL = 0.95


def errors(predictions: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """e[s, i] = 1 where seed s's prediction of image i is not its label (predictions: seeds × images)."""
    predictions = np.atleast_2d(np.asarray(predictions))
    labels = np.asarray(labels)
    if predictions.shape[1] != len(labels):
        raise ValueError(f"predictions of {predictions.shape[1]} images, but {len(labels)} labels: the same test "
                         f"images, in the same order, are needed")
    return (predictions != labels).astype(np.float64)


def _check_pair(e_a: np.ndarray, e_b: np.ndarray) -> None:
    if e_a.ndim != 2 or e_b.ndim != 2 or e_a.shape[1] != e_b.shape[1]:
        raise ValueError(f"errors of shapes {e_a.shape} and {e_b.shape}: both need seeds × the same test images")
    if min(len(e_a), len(e_b)) < 2:
        raise ValueError(f"{len(e_a)} and {len(e_b)} seeds: a seed variance needs at least 2 seeds per method")


def _interval(estimate: float, se: float, df: float, level: float) -> list[float]:
    half = stats.t.ppf(0.5 + level / 2, df) * se if se > 0 else 0.0
    return [estimate - half, estimate + half]


def welch(e_a: np.ndarray, e_b: np.ndarray, level: float = LEVEL) -> dict:
    """Δ̂ and the Welch interval of the per-seed rates: conditional on this test set (the module's docstring)."""
    _check_pair(e_a, e_b)
    r_a, r_b = e_a.mean(axis=1), e_b.mean(axis=1)
    v_a, v_b = r_a.var(ddof=1) / len(r_a), r_b.var(ddof=1) / len(r_b)
    estimate, se = r_a.mean() - r_b.mean(), math.sqrt(v_a + v_b)
    df = _satterthwaite([(v_a, len(r_a) - 1), (v_b, len(r_b) - 1)])
    return {"estimate": estimate, "se": se, "df": df, "interval": _interval(estimate, se, df, level)}


def _satterthwaite(terms) -> float:
    """ν = (Σ v)² / Σ v²/df of variance terms (v, df); ∞ where all are 0."""
    total = sum(v for v, _ in terms)
    denominator = sum(v * v / df for v, df in terms if v > 0)
    return total * total / denominator if denominator > 0 else math.inf


def residual_mean_square(e: np.ndarray) -> float:
    """The two-way ANOVA residual mean square of one method's errors (seeds × images):
    Σ (e_si − ē_s· − ē_·i + ē)² / ((m − 1)(n − 1)), unbiased for the seed-by-image residual variance σ²_r."""
    m, n = e.shape
    resid = e - e.mean(axis=1, keepdims=True) - e.mean(axis=0, keepdims=True) + e.mean()
    return float(np.sum(resid * resid) / ((m - 1) * (n - 1)))


def images_and_seeds(e_a: np.ndarray, e_b: np.ndarray, level: float = LEVEL) -> dict:
    """Δ̂ with the interval over seeds and test images: Var = s²_A/m_A + s²_B/m_B + s²_d/n − Σ_M MS_r,M/(m_M n)
    (the module's docstring; the last terms take out the seed-by-image residual that s²_d counts a second time,
    the image term floored at 0); the terms, their SE, Satterthwaite's ν and the interval."""
    _check_pair(e_a, e_b)
    r_a, r_b = e_a.mean(axis=1), e_b.mean(axis=1)
    d = e_a.mean(axis=0) - e_b.mean(axis=0)
    n = len(d)
    twice = sum(residual_mean_square(e) / (len(e) * n) for e in (e_a, e_b))
    v_a, v_b = r_a.var(ddof=1) / len(r_a), r_b.var(ddof=1) / len(r_b)
    v_image = max(0.0, d.var(ddof=1) / n - twice)
    estimate, se = float(d.mean()), math.sqrt(v_a + v_b + v_image)
    df = _satterthwaite([(v_a, len(r_a) - 1), (v_b, len(r_b) - 1), (v_image, n - 1)])
    return {"estimate": estimate, "se": se, "se_seeds": math.sqrt(v_a + v_b), "se_images": math.sqrt(v_image),
            "df": df, "interval": _interval(estimate, se, df, level)}


def bootstrap(e_a: np.ndarray, e_b: np.ndarray, n_boot: int = 2000, seed: int = 0, level: float = LEVEL,
              chunk: int = 250) -> dict:
    """The two-way bootstrap of Δ̂: images resampled once per replicate for both methods (multinomial counts w),
    seeds resampled within each method; Δ̂* = mean_s* (e_A[s*] · w)/n − mean_s* (e_B[s*] · w)/n. Percentile
    interval at `level`, and the replicates' SD."""
    _check_pair(e_a, e_b)
    rng = np.random.default_rng(seed)
    n, replicates = e_a.shape[1], []
    for start in range(0, n_boot, chunk):
        k = min(chunk, n_boot - start)
        w = rng.multinomial(n, np.full(n, 1.0 / n), size=k).T.astype(np.float64) / n   # images × replicates
        means = []
        for e in (e_a, e_b):
            per_seed = e @ w                                                             # seeds × replicates
            pick = rng.integers(0, len(e), size=(len(e), k))
            means.append(np.take_along_axis(per_seed, pick, axis=0).mean(axis=0))
        replicates.append(means[0] - means[1])
    delta = np.concatenate(replicates)
    tail = (1 - level) / 2
    return {"estimate": float(e_a.mean() - e_b.mean()), "sd": float(delta.std(ddof=1)),
            "interval": [float(np.quantile(delta, tail)), float(np.quantile(delta, 1 - tail))], "n_boot": n_boot}


def rank_test(r_a, r_b) -> dict:
    """The exact Mann–Whitney test of per-seed rates r_a against r_b: U = #{(a, b): a < b} + ½ #{a = b}; the
    exact one-sided p of U at least as large (A below B) and the two-sided p, over all C(m_A + m_B, m_A) splits of
    the pooled rates; and the smallest two-sided p these seed counts allow (2 / C(m_A + m_B, m_A))."""
    r_a, r_b = list(map(float, r_a)), list(map(float, r_b))
    pooled, m = r_a + r_b, len(r_a)

    def u(a, b):
        return sum((x < y) + 0.5 * (x == y) for x in a for y in b)
    observed = u(r_a, r_b)
    values = []
    for chosen in itertools.combinations(range(len(pooled)), m):
        a = [pooled[i] for i in chosen]
        b = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        values.append(u(a, b))
    values = np.array(values)
    total = m * len(r_b)
    one_sided = float(np.mean(values >= observed - 1e-9))
    two_sided = float(min(1.0, np.mean(np.abs(values - total / 2) >= abs(observed - total / 2) - 1e-9)))
    return {"u": observed, "of": total, "p_one_sided": one_sided, "p_two_sided": two_sided,
            "smallest_two_sided_p": 2 / math.comb(len(pooled), m)}


def compare(e_a: np.ndarray, e_b: np.ndarray, n_boot: int = 2000, seed: int = 0, level: float = LEVEL) -> dict:
    """Every view of A − B (in error fractions): Welch (this test set), images and seeds, the two-way bootstrap
    (None where n_boot is 0: a verdict needs only the images-and-seeds interval), exact ranks; the per-seed
    rates."""
    return {"n_seeds": [len(e_a), len(e_b)], "n_images": e_a.shape[1],
            "rates_a": e_a.mean(axis=1).tolist(), "rates_b": e_b.mean(axis=1).tolist(),
            "welch": welch(e_a, e_b, level), "images_and_seeds": images_and_seeds(e_a, e_b, level),
            "bootstrap": bootstrap(e_a, e_b, n_boot, seed, level) if n_boot else None,
            "ranks": rank_test(e_a.mean(axis=1), e_b.mean(axis=1))}


# ----------------------------------------------------------------------------------------------------------
# Synthetic data with a known Δ: the coverage of each interval
# ----------------------------------------------------------------------------------------------------------

def simulate(rng, n_images: int, n_seeds: tuple[int, int], alpha: tuple[float, float], tau: float,
             sigma_image: float, sigma_method: float) -> tuple[np.ndarray, np.ndarray]:
    """Errors of two methods on n_images test images drawn afresh: e[m, s, i] ~ Bernoulli(Φ(α_m + u_ms + z_i +
    ε_mi)), seed effects u ~ N(0, τ²), image difficulty z ~ N(0, σ_image²) shared by both methods, a method-image
    interaction ε ~ N(0, σ_method²); seeds' errors on one image independent given these (they disagree on some)."""
    z = rng.normal(0, sigma_image, n_images)
    out = []
    for a, m in zip(alpha, n_seeds):
        eps = rng.normal(0, sigma_method, n_images)
        u = rng.normal(0, tau, (m, 1))
        out.append((rng.random((m, n_images)) < stats.norm.cdf(a + u + z + eps)).astype(np.float64))
    return out[0], out[1]


def true_difference(alpha, tau: float, sigma_image: float, sigma_method: float) -> float:
    """Δ of `simulate`'s model: E Φ(α + X), X ~ N(0, s²), is Φ(α / sqrt(1 + s²)), s² = τ² + σ_image² + σ_method²."""
    s = math.sqrt(1 + tau ** 2 + sigma_image ** 2 + sigma_method ** 2)
    return float(stats.norm.cdf(alpha[0] / s) - stats.norm.cdf(alpha[1] / s))


def coverage(n_sims: int = 400, n_images: int = 2000, n_seeds=(3, 3), alpha=(-2.0, -2.1), tau: float = 0.03,
             sigma_image: float = 1.0, sigma_method: float = 0.5, seed: int = 0, n_boot: int = 200,
             level: float = LEVEL) -> dict:
    """The fraction of `n_sims` synthetic comparisons (simulate, a new test set and new seeds each) whose interval
    holds the true Δ (true_difference), for Welch, images-and-seeds and the two-way bootstrap (left out where
    n_boot is 0); with its binomial standard error."""
    rng = np.random.default_rng(seed)
    truth = true_difference(alpha, tau, sigma_image, sigma_method)
    hits = dict.fromkeys(["welch", "images_and_seeds"] + (["bootstrap"] if n_boot else []), 0)
    for k in range(n_sims):
        e_a, e_b = simulate(rng, n_images, n_seeds, alpha, tau, sigma_image, sigma_method)
        found = {"welch": welch(e_a, e_b, level), "images_and_seeds": images_and_seeds(e_a, e_b, level)}
        if n_boot:
            found["bootstrap"] = bootstrap(e_a, e_b, n_boot, seed + k, level)
        for name, result in found.items():
            lo, hi = result["interval"]
            hits[name] += lo <= truth <= hi
    rates = {name: float(h / n_sims) for name, h in hits.items()}
    return {"truth": truth, "n_sims": n_sims, "level": level, "coverage": rates,
            "binomial_se": math.sqrt(level * (1 - level) / n_sims)}


# ----------------------------------------------------------------------------------------------------------
# The comparison's runs: their per-image predictions, every pair of methods on one data set and net
# ----------------------------------------------------------------------------------------------------------

OUTPUT_LABELS = {"deployed": "", "predictive": " predictive"}  # EBP-D / EBP-P for the tuned EBP runs
EBP_OUTPUT_LABELS = {"deployed": "-D", "predictive": "-P"}


def output_label(method: str, output: str) -> str:
    """How a pair's side is named: the method, and its output where it has two ("bayesbinn predictive",
    "ebp-tuned-P")."""
    labels = EBP_OUTPUT_LABELS if method.startswith("ebp") else OUTPUT_LABELS
    return method + labels[output]


def _same_net(folder_a, folder_b) -> bool:
    """Whether two runs saved the same ±1 net: every array of their binary_net.npz equal, bit for bit (the files'
    bytes differ by the zip's timestamps)."""
    from reproduction import successors as sc
    with np.load(Path(folder_a) / sc.NET_FILE, allow_pickle=False) as a, \
            np.load(Path(folder_b) / sc.NET_FILE, allow_pickle=False) as b:
        return sorted(a.files) == sorted(b.files) and all(
            a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a.files)


def rerun_outputs(record: dict, folder, arrays: dict, rerun_folder) -> tuple[dict, str | None]:
    """The per-image outputs a rerun of `record` adds to the record's own `arrays` (its predictions.npz, read from
    `folder`), and None; or nothing and why the rerun is not the same run. A rerun stands in for the record only
    where it is: finished with the same parameters, the same ±1 net (_same_net), the same deployed prediction on
    every test image, and the same recorded error of every output both hold. Used for records whose
    predictions.npz predates keeping the predictive's (BayesBiNN's dense runs)."""
    from reproduction import records, run_files
    from reproduction import successors as sc
    rerun_folder = Path(rerun_folder)
    if not (rerun_folder / sc.RESULT_FILE).exists():
        return {}, None
    rerun = records.read_record(rerun_folder / sc.RESULT_FILE)
    theirs = run_files.load_predictions(rerun_folder / run_files.PREDICTIONS_FILE) if rerun["finished"] else {}
    mine, yours = record["evaluation"]["outputs"], rerun["evaluation"]["outputs"] if rerun["finished"] else {}
    problem = ("unfinished" if not rerun["finished"]
               else "other parameters" if rerun["parameters"] != record["parameters"]
               else "another ±1 net" if not _same_net(folder, rerun_folder)
               else "other deployed predictions" if not np.array_equal(theirs.get("deployed"), arrays.get("deployed"))
               else "other recorded errors" if any(mine[k]["test_error"] != yours[k]["test_error"]
                                                   for k in mine.keys() & yours.keys())
               else None)
    if problem:
        return {}, f"{rerun_folder}: {problem}"
    return {k: v for k, v in theirs.items() if k not in arrays}, None


def run_predictions(results: list[dict], root, reruns=None) -> dict:
    """{(dataset, net): {side label: {"seeds": [...], "predictions": seeds × images uint8}}} from the
    predictions.npz beside every record of `results` (finished successor-harness records, e.g.
    successors_report.load_successors) under `root`; a run without one is left out of its side (named). `reruns`:
    a root of the same layout whose reruns supply the outputs a record's file lacks (rerun_outputs); a rerun that
    is not the same run is named and not used."""
    from reproduction import run_files
    from reproduction import successors as sc
    found: dict = {}
    missing = []
    for record in sorted(results, key=lambda r: r["parameters"]["seed"]):
        p = record["parameters"]
        path = sc.run_dir(p, root) / run_files.PREDICTIONS_FILE
        if not path.exists():
            missing.append(str(path))
            continue
        arrays = run_files.load_predictions(path)
        if reruns is not None:
            extra, problem = rerun_outputs(record, path.parent, arrays, sc.run_dir(p, reruns))
            arrays.update(extra)
            if problem:
                missing.append(f"rerun {problem}")
        for output, predicted in arrays.items():
            if output not in OUTPUT_LABELS:
                continue
            side = found.setdefault((p["dataset"], p["architecture"]), {}).setdefault(
                output_label(p["method"], output), {"seeds": [], "predictions": []})
            side["seeds"].append(p["seed"])
            side["predictions"].append(predicted)
    if missing:
        print("without per-image predictions (left out of the paired intervals):\n  " + "\n  ".join(missing))
    return {key: {label: {"seeds": side["seeds"], "predictions": np.stack(side["predictions"])}
                  for label, side in sides.items()} for key, sides in found.items()}


def pair_rows(groups: dict, labels: np.ndarray, n_boot: int = 1000, seed: int = 0, level: float = LEVEL) -> list[dict]:
    """One row per pair of sides with at least 2 seeds each, per (dataset, net) of `groups` (run_predictions): A − B
    in percentage points with the Welch interval (this test set), the images-and-seeds interval, the two-way
    bootstrap's, and the exact rank facts. `labels`: the test labels of the data set ({dataset: labels} or one
    array for all)."""
    rows = []
    for (dataset, net), sides in sorted(groups.items()):
        y = labels[dataset] if isinstance(labels, dict) else labels
        usable = {name: errors(side["predictions"], y) for name, side in sides.items() if len(side["seeds"]) >= 2}
        for a, b in itertools.combinations(sorted(usable), 2):
            c = compare(usable[a], usable[b], n_boot, seed, level)
            pp = [100 * v for v in c["images_and_seeds"]["interval"]]
            rows.append({"dataset": dataset, "net": net, "a": a, "b": b, "seeds": c["n_seeds"],
                         "difference": 100 * c["images_and_seeds"]["estimate"],
                         "welch": [100 * v for v in c["welch"]["interval"]], "images_and_seeds": pp,
                         "bootstrap": c["bootstrap"] and [100 * v for v in c["bootstrap"]["interval"]],
                         "se_seeds": 100 * c["images_and_seeds"]["se_seeds"],
                         "se_images": 100 * c["images_and_seeds"]["se_images"],
                         "separated": pp[0] > 0 or pp[1] < 0,
                         "rank_u": c["ranks"]["u"], "rank_of": c["ranks"]["of"],
                         "rank_p_two_sided": c["ranks"]["p_two_sided"],
                         "smallest_rank_p": c["ranks"]["smallest_two_sided_p"]})
    return rows


def table(rows: list[dict]) -> str:
    """The pairs as two markdown tables, each narrow enough for a page's column: A − B (points of test error) with
    the Welch interval (conditional on this test set) and the interval over images and seeds; then, for the same
    pairs, the bootstrap's interval, the two SE terms and the exact rank p."""
    def iv(v):
        return "–" if v is None else f"[{v[0]:+.2f}, {v[1]:+.2f}]"

    def pair(r):  # a dense net's hidden sizes in brackets ([800, 800]), any other net by its name (lenet)
        net = f"[{r['net'].replace('-', ', ')}]" if r["net"][0].isdigit() else r["net"]
        return f"| {r['dataset']} | {net} | {r['a']} − {r['b']} |"

    main = ["| data set | net | A − B | difference | Welch 95% (this test set) | images and seeds 95% |",
            "|" + "---|" * 6]
    main += [f"{pair(r)} {r['difference']:+.2f} | {iv(r['welch'])} | {iv(r['images_and_seeds'])} |" for r in rows]
    detail = ["| data set | net | A − B | two-way bootstrap 95% | SE seeds | SE images | rank p (smallest possible) |",
              "|" + "---|" * 7]
    detail += [f"{pair(r)} {iv(r['bootstrap'])} | {r['se_seeds']:.2f} | {r['se_images']:.2f} | "
               f"{r['rank_p_two_sided']:.2f} ({r['smallest_rank_p']:.2f}) |" for r in rows]
    return "\n".join(main) + "\n\n" + "\n".join(detail)


def oriented(rows: list[dict], dataset: str, net: str, a: str, b: str) -> dict | None:
    """The pair_rows row of A − B on `dataset` and `net`, turned round where pair_rows holds B − A (it names a pair
    in sorted order): the difference, every interval and the rank count U negated or mirrored (U of B below A is
    the count's complement); None where the pair has no row (a side with under 2 seeds)."""
    for r in rows:
        if (r["dataset"], r["net"]) != (dataset, net) or {r["a"], r["b"]} != {a, b}:
            continue
        if r["a"] == a:
            return r
        flip = {k: [-r[k][1], -r[k][0]] for k in ("welch", "images_and_seeds", "bootstrap") if r[k] is not None}
        return {**r, **flip, "a": a, "b": b, "seeds": r["seeds"][::-1], "difference": -r["difference"],
                "rank_u": r["rank_of"] - r["rank_u"]}
    return None
