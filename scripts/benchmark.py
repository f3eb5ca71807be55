#!/usr/bin/env python
"""Benchmark: the fast training path (engine="fast") against the reference code (engine="reference").

One command, from the repository root (about 3 minutes on the 2-core machine; EBP_DATA_DIR as for the tests):

    make benchmark            # or: OMP_NUM_THREADS=1 .venv/bin/python scripts/benchmark.py

What it does, in this order:
 1. Agreement. Fast and reference train the same networks (binary and real, dense and local, analytic and
    sampled dropout, depth 2 and 3) on the same MNIST images, 300 updates at batch size 1 and at 10; every h and
    b must agree to 1e-4 of the layer's largest |h| (|b|, at least 1). Otherwise it stops here with exit status 1.
 2. Throughput of the benchmark cases ([784,800,10] binary and real, [784,800,800,10] binary, the spatial net
    with 13x13 blocks, at batch size 1 and 10): fast and reference on the same images in the same process,
    alternating in rounds; samples per second of CPU time, seconds per 60,000-sample epoch, the ratio.
 3. Whole paper: every run of Tables 2-4 (50 trainings: EBP-P and EBP-D come from the same run; Table 3 with
    the analytic dropout reading, as scripts/run_tables.py runs it), 120 epochs of
    60,000 images at batch size 1 and at 10, projected from the fast engine's throughput measured in two
    worker processes running at the same time (both cores busy), plus the cost of fit's per-epoch evaluation.
 4. One-epoch test error: [784,200,10] binary, batch 10, one full epoch with each engine from the same seed;
    both EBP-P/EBP-D test errors are reported (they must agree within noise: a few test images).
Results go to the --out file (make benchmark: .cache/benchmark.json; outputs/benchmark.json is the committed
record) and a summary to stdout, with the machine: CPU model and flags, library versions, load average before
and after (reproduction.records.timing_record: above 1 per core it refuses to run, or with --allow-loaded marks
the record "loaded": true). Times are CPU seconds of the timed process
(time.process_time): other people's jobs on the machine inflate wall-clock times but much less CPU times;
wall-clock samples/s are recorded as well. Ratios compare fast and reference measured in the same run.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy is imported
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import ebp_data  # noqa: E402
import ebp_lib as ebp  # noqa: E402
import ebp_train  # noqa: E402
from reproduction import paper_tables, records  # noqa: E402
from reproduction.parameters import paper_architecture  # noqa: E402

EPOCH, EPOCHS = 60_000, 120
RTOL = 1e-4
AGREEMENT_CASES = [  # (architecture, weights, dropout)
    ([200, 10], "binary", None),
    ([200, 10], "real", None),
    ([("local", 13), 10], "binary", None),
    ([100, 100, 10], "binary", "sampled"),
    ([100, 10], "real", "analytic"),
]
TIMING_CASES = [  # the networks of the paper's tables that dominate its runtime
    ([800, 10], "binary"),
    ([800, 10], "real"),
    ([800, 800, 10], "binary"),
    ([("local", 13), 10], "binary"),
]


def paper_runs(dropout_reading: str = "analytic") -> list[dict]:
    """The 50 trainings behind Tables 2-4: the runs of the paper's tables (reproduction.paper_tables.table_runs),
    each with its layer list as `architecture`; Table 3's dropout read as `dropout_reading`."""
    return [{**run, "architecture": paper_architecture(run["architecture"])}
            for run in paper_tables.table_runs(reading=dropout_reading)]


def name(architecture) -> str:
    """The layer sizes, e.g. '[784, 800, 10]'; a locally connected layer as its units and block, '256 local13'."""
    sizes = ebp.check_architecture(architecture)
    return "[" + ", ".join([str(sizes[0])] + [f"{n} local{spec[1]}" if isinstance(spec, (list, tuple)) else str(n)
                                              for spec, n in zip(architecture, sizes[1:])]) + "]"


def load(n_train=None):
    data = ebp_data.load_dataset("mnist", n_train=n_train)
    return data


# --- 1. agreement --------------------------------------------------------------------------------------------

def agreement(x, y) -> list[dict]:
    """Train fast and reference side by side for 300 updates; the largest relative difference per case."""
    out = []
    for architecture, weights, dropout in AGREEMENT_CASES:
        for batch_size in (1, 10):
            n = 300 * batch_size
            nets = {e: ebp.init_network(architecture, weights, seed=1, dropout=dropout) for e in ebp_train.ENGINES}
            for engine, net in nets.items():
                ebp_train.train_epoch(net, x[:n], y[:n], batch_size, np.random.default_rng(2), engine=engine)
            dh = max(np.abs(f.h - r.h).max() / np.abs(r.h).max()
                     for f, r in zip(nets["fast"].layers, nets["reference"].layers))
            db = max(np.abs(f.b - r.b).max() / max(np.abs(r.b).max(), 1.0)
                     for f, r in zip(nets["fast"].layers, nets["reference"].layers))
            out.append({"network": name(architecture), "weights": weights, "dropout": dropout,
                        "batch_size": batch_size, "updates": 300, "max_rel_diff_h": float(dh),
                        "max_rel_diff_b": float(db), "ok": bool(dh <= RTOL and db <= RTOL)})
    return out


# --- 2. throughput -------------------------------------------------------------------------------------------

def time_engine(net, x, y, batch_size, engine, seconds, chunk, rng) -> tuple[float, float, int]:
    """Train in chunks of `chunk` images until `seconds` of CPU time are spent; (cpu s, wall s, images)."""
    cpu = wall = 0.0
    done = 0
    while cpu < seconds:
        start = int(rng.integers(0, len(x) - chunk))
        c0, w0 = time.process_time(), time.perf_counter()
        ebp_train.train_epoch(net, x[start:start + chunk], y[start:start + chunk], batch_size, rng, engine=engine)
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        done += chunk
    return cpu, wall, done


def throughput(x, y, architecture, weights, batch_size, seconds, rounds=2, dropout=None,
               engines=ebp_train.ENGINES, chunk_fast=1000) -> dict:
    """Samples/s of each engine, measured alternately in `rounds` rounds of `seconds` CPU seconds in all.
    The fast engine trains `chunk_fast` (x3 at batch 10) images per call (each call copies the network to
    float32 and back, as one epoch does)."""
    nets = {e: ebp.init_network(architecture, weights, seed=0, dropout=dropout) for e in engines}
    rng = np.random.default_rng(0)
    for engine in engines:  # warm-up: numba's compiled kernels load, BLAS starts
        ebp_train.train_epoch(nets[engine], x[:2 * batch_size], y[:2 * batch_size], batch_size, rng, engine=engine)
    totals = {e: [0.0, 0.0, 0] for e in engines}
    for _ in range(rounds):
        for engine in engines:
            chunk = (chunk_fast if engine == "fast" else 20) * (1 if batch_size == 1 else 3)  # <= ~1 CPU s
            cpu, wall, n = time_engine(nets[engine], x, y, batch_size, engine, seconds / rounds, chunk, rng)
            for k, v in enumerate((cpu, wall, n)):
                totals[engine][k] += v
    out = {}
    for engine, (cpu, wall, n) in totals.items():
        out[engine] = {"samples_per_s": n / cpu, "samples_per_s_wall": n / wall,
                       "ms_per_sample": 1e3 * cpu / n, "s_per_epoch": EPOCH * cpu / n, "samples_timed": n}
    return out


# --- 3. whole paper ------------------------------------------------------------------------------------------

def project_worker(args) -> list[dict]:
    """In a worker process: fast-engine ms/sample of every paper run at batch 1 and 10, and evaluation cost."""
    worker, seconds = args
    data = load()
    x, y = data.x_train[:20000], data.y_train[:20000]
    out = []
    for run in paper_runs():
        row = {"worker": worker}
        for batch_size in (1, 10):
            t = throughput(x, y, run["architecture"], run["weights"], batch_size, seconds, rounds=1,
                           dropout=run["dropout"], engines=("fast",), chunk_fast=300)
            row[f"ms_per_sample_b{batch_size}"] = t["fast"]["ms_per_sample"]
        net = ebp.init_network(run["architecture"], run["weights"], seed=0, dropout=run["dropout"])
        c0 = time.process_time()
        ebp_train.evaluate(net, data.x_test[:2000], data.labels_test[:2000], engine="fast")
        row["eval_ms_per_image"] = 1e3 * (time.process_time() - c0) / 2000
        out.append(row)
    return out


def whole_paper(seconds) -> dict:
    """Both cores busy: two workers time every run at once; projected wall time = total CPU time / 2."""
    with mp.get_context("spawn").Pool(2) as pool:
        results = pool.map(project_worker, [(0, seconds), (1, seconds)])
    runs = []
    for k, run in enumerate(paper_runs()):
        row = {key: run[key] for key in ("run_id", "table", "column", "weights", "dropout")}
        row["network"] = name(run["architecture"])
        for key in ("ms_per_sample_b1", "ms_per_sample_b10", "eval_ms_per_image"):
            row[key] = float(np.mean([r[k][key] for r in results]))
        for b in (1, 10):
            row[f"train_hours_b{b}"] = row[f"ms_per_sample_b{b}"] * 1e-3 * EPOCH * EPOCHS / 3600
        # fit's default evaluation after each epoch: 10,000 test + 10,000 training images
        row["eval_hours"] = row["eval_ms_per_image"] * 1e-3 * 20_000 * EPOCHS / 3600
        runs.append(row)
    total = {}
    for b in (1, 10):
        cpu = sum(r[f"train_hours_b{b}"] for r in runs)
        cpu_eval = cpu + sum(r["eval_hours"] for r in runs)
        total[f"batch_{b}"] = {"cpu_hours_training": cpu, "wall_hours_training_2_cores": cpu / 2,
                               "cpu_hours_with_evaluation": cpu_eval,
                               "wall_hours_with_evaluation_2_cores": cpu_eval / 2}
    return {"runs": runs, "total": total, "dropout_reading_for_table_3": "analytic",
            "method": "two worker processes time every run concurrently (fast engine, CPU time, 20,000 MNIST "
                      "training images); per-run hours = ms/sample x 60,000 x 120; wall time on 2 cores = "
                      "sum of run CPU hours / 2 (runs scheduled two at a time); evaluation = fit's default "
                      "per-epoch evaluate() on 10,000 test + 10,000 training images (engine='fast': float32, as fit "
                      "evaluates with its training engine)"}


# --- 4. one-epoch test error ---------------------------------------------------------------------------------

def one_epoch_errors(data) -> dict:
    """Both engines train [784,200,10] binary for one epoch (6,000 updates) from the same seed: test errors,
    and how far apart the two posteriors drifted (float32 against float64 over a whole epoch)."""
    out, nets = {}, {}
    for engine in ebp_train.ENGINES:
        nets[engine] = ebp.init_network([200, 10], "binary", seed=0)
        c0 = time.process_time()
        _, history = ebp_train.fit(nets[engine], data, 1, batch_size=10, seed=0, n_train_eval=0, engine=engine)
        out[engine] = {"test_error_ebp_p": history[0]["test_ebp_p"], "test_error_ebp_d": history[0]["test_ebp_d"],
                       "cpu_seconds": time.process_time() - c0}
    out["max_rel_diff_h"] = float(max(np.abs(f.h - r.h).max() / np.abs(r.h).max()
                                      for f, r in zip(nets["fast"].layers, nets["reference"].layers)))
    out["sign_h_differs_fraction"] = float(np.mean(np.concatenate(
        [(np.sign(f.h) != np.sign(r.h)).ravel() for f, r in zip(nets["fast"].layers, nets["reference"].layers)])))
    out["difference_in_test_images"] = {
        k: round(abs(out["fast"][f"test_error_{k}"] - out["reference"][f"test_error_{k}"]) * len(data.x_test))
        for k in ("ebp_p", "ebp_d")}
    return out


# --- 5. targets ---------------------------------------------------------------------------------------------

def targets(result) -> list[dict]:
    """The speed targets set for the fast engine, against this run's numbers."""
    case = {(c["network"], c["weights"], c["batch_size"]): c for c in result["cases"]}
    rows = []
    for network in ("[784, 800, 10]", "[784, 800, 800, 10]"):
        for batch_size, needed in ((1, 10.0), (10, 3.0)):
            ratio = case[(network, "binary", batch_size)]["ratio"]
            rows.append({"target": f"{network} binary, batch {batch_size}: fast >= {needed:g}x the reference",
                         "measured": f"{ratio:.1f}x", "met": bool(ratio >= needed)})
    ms = case[("[784, 800, 10]", "binary", 1)]["fast"]["ms_per_sample"]
    rows.append({"target": "[784, 800, 10] binary, batch 1: ~0.3 ms per sample or less", "measured": f"{ms:.3f} ms",
                 "met": bool(ms <= 0.3)})
    total = result["whole_paper"]["total"]["batch_10"]
    rows.append({"target": "whole paper at batch 10 in 6 h or less on 2 cores (training)",
                 "measured": f"{total['wall_hours_training_2_cores']:.1f} h",
                 "met": bool(total["wall_hours_training_2_cores"] <= 6.0)})
    rows.append({"target": "the same with fit's per-epoch evaluation",
                 "measured": f"{total['wall_hours_with_evaluation_2_cores']:.1f} h",
                 "met": bool(total["wall_hours_with_evaluation_2_cores"] <= 6.0)})
    if "one_epoch" in result:
        diff = result["one_epoch"]["difference_in_test_images"]
        rows.append({"target": "one-epoch test errors identical within noise (at most 5 of 10,000 test images)",
                     "measured": f"EBP-P differs by {diff['ebp_p']}, EBP-D by {diff['ebp_d']} images",
                     "met": bool(max(diff.values()) <= 5)})
    return rows


# --- machine and main ----------------------------------------------------------------------------------------

def machine(allow_loaded: bool = False, load=None) -> dict:
    """Where and with what the benchmark ran, and the load average when it started (reproduction.records.
    timing_record: it refuses a loaded machine unless allow_loaded); git_changed lists the timed code's files that
    differ from git_commit."""
    return records.timing_record(git_paths=("ebp_lib.py", "ebp_train.py", "ebp_fast.py", "scripts/benchmark.py"),
                                 allow_loaded=allow_loaded, load=load)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0,
                        help="CPU seconds per engine and throughput case (default 4)")
    parser.add_argument("--project-seconds", type=float, default=0.3,
                        help="CPU seconds per paper run and batch size in the whole-paper projection (default 0.3)")
    parser.add_argument("--out", default=str(records.REPO / "outputs" / "benchmark.json"))
    parser.add_argument("--skip-epoch", action="store_true", help="skip the one-epoch test-error comparison")
    records.add_allow_loaded_option(parser)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = {"machine": machine(args.allow_loaded), "loaded": None, "tolerance": RTOL}

    data = load()
    x, y = data.x_train, data.y_train
    print("1. agreement: fast vs reference after 300 updates (max |Δh| / max|h| per network)")
    result["agreement"] = agreement(x, y)
    for row in result["agreement"]:
        print(f"   {row['network']:22s} {row['weights']:6s} dropout={str(row['dropout']):8s} batch {row['batch_size']:2d}: "
              f"h {row['max_rel_diff_h']:.1e}  b {row['max_rel_diff_b']:.1e}  {'ok' if row['ok'] else 'FAIL'}")
    if not all(row["ok"] for row in result["agreement"]):
        print(f"FAILED: the fast path does not agree with the reference to {RTOL}; not timing it.", file=sys.stderr)
        return 1

    print("2. throughput (CPU time; samples/s, s per 60,000-image epoch)")
    result["cases"] = []
    for architecture, weights in TIMING_CASES:
        for batch_size in (1, 10):
            t = throughput(x, y, architecture, weights, batch_size, args.seconds)
            row = {"network": name(architecture), "weights": weights, "batch_size": batch_size,
                   "fast": t["fast"], "reference": t["reference"],
                   "ratio": t["fast"]["samples_per_s"] / t["reference"]["samples_per_s"],
                   "ratio_wall": t["fast"]["samples_per_s_wall"] / t["reference"]["samples_per_s_wall"]}
            result["cases"].append(row)
            print(f"   {row['network']:22s} {weights:6s} batch {batch_size:2d}: fast {t['fast']['samples_per_s']:8.0f}/s "
                  f"({t['fast']['ms_per_sample']:.3f} ms, {t['fast']['s_per_epoch']:6.0f} s/epoch)  reference "
                  f"{t['reference']['samples_per_s']:7.0f}/s ({t['reference']['ms_per_sample']:.3f} ms, "
                  f"{t['reference']['s_per_epoch']:6.0f} s/epoch)  ratio {row['ratio']:.1f}x")

    print("3. whole paper (50 runs x 120 epochs), fast engine, both cores busy")
    result["whole_paper"] = whole_paper(args.project_seconds)
    for b in (1, 10):
        t = result["whole_paper"]["total"][f"batch_{b}"]
        print(f"   batch {b:2d}: training {t['cpu_hours_training']:.1f} CPU-hours = {t['wall_hours_training_2_cores']:.1f} h "
              f"on 2 cores; with fit's per-epoch evaluation {t['wall_hours_with_evaluation_2_cores']:.1f} h")

    if not args.skip_epoch:
        print("4. one epoch, [784,200,10] binary, batch 10: test errors")
        result["one_epoch"] = one_epoch_errors(data)
        for engine in ebp_train.ENGINES:
            r = result["one_epoch"][engine]
            print(f"   {engine:9s}: EBP-P {100 * r['test_error_ebp_p']:.2f}%  EBP-D {100 * r['test_error_ebp_d']:.2f}%"
                  f"  ({r['cpu_seconds']:.0f} CPU s)")
        print(f"   after one epoch: max |Δh| / max|h| = {result['one_epoch']['max_rel_diff_h']:.1e}, "
              f"sign(h) differs for {100 * result['one_epoch']['sign_h_differs_fraction']:.4f}% of the weights")

    result["targets"] = targets(result)
    print("5. the speed targets")
    for row in result["targets"]:
        print(f"   {'met ' if row['met'] else 'MISSED'} {row['target']}: {row['measured']}")

    result["loaded"] = records.finish_timing_record(result["machine"], args.allow_loaded)
    result["benchmark_wall_seconds"] = time.perf_counter() - started
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    records.write_json(args.out, result)
    print(f"wrote {args.out} ({result['benchmark_wall_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
