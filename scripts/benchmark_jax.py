#!/usr/bin/env python
"""Time the JAX engine (ebp_jax: EBP as jax.grad, many runs at once with vmap) beside the fast engine, on whatever
device JAX finds (a CPU, or a GPU with the jax[cuda] wheels).

For each architecture ([784, 800, 10] and [784, 800, 800, 10] by default, binary weights) and group size G (1, 3,
10, 30), G runs of one configuration (own initial weights, own data order) train one epoch of --images training
images at batch 10 side by side, as `run_tables.py --engine jax --group-seeds` trains them (ebp_jax.train_group,
one compiled call), after a warm-up call that compiles it; the compile time is recorded apart. After each epoch the
runner evaluates every run alone on 20,000 images (10,000 test, 10,000 training: fit's evaluation); one run's
evaluation is timed too. The fast engine (numba, one run, one CPU thread) is timed on the same images in the same
process. Written to JSON and printed:

- images per second over all runs of a group, µs per step (one minibatch of every run), and the scaling of a group
  against G runs one after another (1.0: a group costs what its runs cost alone; G: it costs what one run costs);
- paper-protocol runs per hour (120 epochs of 60,000 images), training only and with the runner's evaluation,
  extrapolated from the timed epoch (fewer images with --images: extrapolated further) and labelled so;
- the whole MNIST grid with three seeds (every run of Tables 2-4, scripts/run_tables.py --all --seed 0 1 2, about
  150 runs) in device-hours, extrapolated by the weights of each run from groups of three (what --group-seeds
  makes of it) and from the fastest group measured, and what limits it;
- whether the engine computes EBP on this device (agreement): 300 updates against the float64 reference within
  the tests' tolerance, runs in a group against runs alone, and full float32 precision of its products;
- the device, its driver, the library versions, CPU model and flags and the load average before and after
  (machine_info, records.timing_record): above 1 per core it refuses to run, or with --allow-loaded records
  "loaded": true (such a measurement must not be quoted).

  python scripts/benchmark_jax.py --out outputs/benchmark_jax_{device}.json   # one epoch per group, ~1 h on a CPU
  python scripts/benchmark_jax.py --images 2000 --groups 1 3 --architectures 800   # a short look
  scripts/gpu_check.sh                                                         # the GPU run, a few minutes
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

import numpy as np

import ebp_data
import ebp_lib
import ebp_train
from reproduction import paper_tables, records
from reproduction.parameters import paper_architecture

PAPER_EPOCHS, PAPER_IMAGES = 120, 60000
EVAL_IMAGES = 20000  # evaluated after every epoch of a run: 10,000 test and 10,000 training images (fit)
SEEDS = 3            # the grid with three seeds
TARGET_HOURS = 1.0   # the aim: the MNIST grid with three seeds in under one GPU-hour


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=PAPER_IMAGES,
                        help="training images per timed epoch (default: all 60,000; fewer for a quick look, "
                             "extrapolated to 60,000)")
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 3, 10, 30], help="runs per group")
    parser.add_argument("--architectures", nargs="+", default=["800", "800-800"], help="hidden layers")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--weights", choices=ebp_lib.WEIGHTS, default="binary")
    parser.add_argument("--skip-fast", action="store_true", help="do not time the fast engine")
    parser.add_argument("--synthetic", action="store_true",
                        help="random images of MNIST's shape instead of MNIST (a machine without the data files: "
                             "the JAX engine's arithmetic does not depend on the values; the fast engine's does a "
                             "little, as it skips MNIST's always-zero pixels)")
    parser.add_argument("--out", help="write the measurements as JSON here; {device} is replaced by the device's "
                                      "name, e.g. outputs/benchmark_jax_{device}.json")
    records.add_allow_loaded_option(parser)
    args = parser.parse_args(argv)
    if args.images < args.batch_size or args.images % args.batch_size:
        parser.error(f"--images must be a positive multiple of the batch size {args.batch_size}")
    if any(g < 1 for g in args.groups):
        parser.error("--groups must be positive")
    return args


def machine_info(allow_loaded: bool = False, load=None) -> dict:
    """Where this ran: the shared timing record (records.timing_record: library versions, CPU model, flags and
    cores, git state, the load average at the start; it refuses a loaded machine unless allow_loaded) and JAX's
    device (platform, kind, count; the GPU's name, driver and memory from nvidia-smi when it answers)."""
    import jax
    import jaxlib

    device = jax.devices()[0]
    info = records.timing_record(("numpy", "numba", "jax", "jaxlib"), allow_loaded=allow_loaded, load=load)
    info["device"] = {"platform": device.platform, "device_kind": device.device_kind, "devices": len(jax.devices()),
                      "jax": jax.__version__, "jaxlib": jaxlib.__version__, "xla_flags": os.environ.get("XLA_FLAGS", "")}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if smi.returncode == 0:
            info["device"]["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def device_slug(info: dict) -> str:
    """The device's name for a file name: 'cpu', or the GPU's kind, e.g. 'nvidia-h100-80gb-hbm3'."""
    device = info["device"]
    name = "cpu" if device["platform"] == "cpu" else device["device_kind"]
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def load_images(args):
    """(x, y) of --images training images (float32), MNIST standardised with all 60,000 images' statistics, or random
    images of that shape with --synthetic."""
    if args.synthetic:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((args.images, 784)).astype(np.float32)
        return x, ebp_data.one_vs_all(rng.integers(0, 10, args.images), dtype=np.float32)
    data = ebp_data.load_dataset("mnist", dtype=np.float32)
    return data.x_train[:args.images], data.y_train[:args.images]


def time_fast(net_args: dict, x, y, batch_size: int) -> float:
    """Seconds for the fast engine to train one run on x (after a warm-up that compiles its kernels)."""
    warm = ebp_lib.init_network(**net_args)
    ebp_train.train_steps(warm, x[:100], y[:100], np.arange(100), batch_size, np.random.default_rng(0), "fast")
    net = ebp_lib.init_network(**net_args)
    start = time.perf_counter()
    ebp_train.train_steps(net, x, y, np.arange(len(x)), batch_size, np.random.default_rng(0), "fast")
    return time.perf_counter() - start


def time_group(net_args: dict, x, y, batch_size: int, group: int) -> dict:
    """One epoch of `group` runs side by side (ebp_jax.train_group), as run_group trains them: the seconds of the
    compiling call and of a second, timed call, and the device memory in use at the end (GPUs only)."""
    import jax
    import jax.numpy as jnp

    import ebp_jax

    nets = [ebp_lib.init_network(**{**net_args, "seed": seed}) for seed in range(group)]
    s = ebp_jax.structure(nets[0], jnp.float32)
    params = ebp_jax.stack_runs([ebp_jax.parameters(net, jnp.float32) for net in nets])
    orders = jnp.asarray(np.stack([np.random.default_rng(seed).permutation(len(x)) for seed in range(group)]))
    x32, y32 = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
    start = time.perf_counter()
    jax.block_until_ready(ebp_jax.train_group(params, x32, y32, orders, s, batch_size))
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(ebp_jax.train_group(params, x32, y32, orders, s, batch_size))
    seconds = time.perf_counter() - start
    stats = jax.devices()[0].memory_stats() or {}
    return {"seconds": seconds, "compile_seconds": compile_seconds,
            **({"peak_device_bytes": stats["peak_bytes_in_use"]} if "peak_bytes_in_use" in stats else {})}


def time_evaluation(net_args: dict, x) -> float:
    """Seconds for the JAX engine to evaluate one run on EVAL_IMAGES images (EBP-P and EBP-D, as ebp_train.evaluate
    does after every epoch, in batches of 2,000), after a warm-up that compiles it."""
    net = ebp_lib.init_network(**net_args)
    images = np.resize(x, (EVAL_IMAGES, x.shape[1]))  # x repeated: the time does not depend on the values
    labels = np.zeros(EVAL_IMAGES, int)
    ebp_train.evaluate(net, images[:2000], labels[:2000], engine="jax")
    start = time.perf_counter()
    ebp_train.evaluate(net, images, labels, engine="jax")
    return time.perf_counter() - start


def agreement(x, y) -> dict:
    """Whether the JAX engine computes EBP on this device, checked on the images timed: (1) 300 updates of
    [784, 100, 10] binary and [784, 100, 100, 10] real with sampled dropout at batch 10 against the float64
    reference (numpy, on the CPU): every h and b within 1e-4 of the layer's largest |h| (|b|, at least 1), the
    tolerance of tests/test_fast.py; (2) three runs of [784, 100, 10] trained side by side (group_epoch) against each
    trained alone: the largest difference (0 on the CPU; a GPU's batched products may round differently); (3) a
    float32 product at MATMUL_PRECISION against float64: about 1e-5 in float32, about 1e-2 in TF32."""
    import jax.numpy as jnp

    import ebp_jax

    out, worst = {"tolerance": 1e-4}, 0.0
    x, y = (np.resize(a, (3000, a.shape[1])).astype(np.float64) for a in (x, y))  # repeated if fewer were timed
    for layers, weights, dropout in (([100, 10], "binary", None), ([100, 100, 10], "real", "sampled")):
        nets = [ebp_lib.init_network(layers, weights, seed=2, dropout=dropout) for _ in range(2)]
        for net, engine in zip(nets, ("jax", "reference")):
            ebp_train.train_steps(net, x, y, np.arange(3000), 10, np.random.default_rng(5), engine)
        for a, b in zip(*(n.layers for n in nets)):
            worst = max(worst, np.abs(a.h - b.h).max() / np.abs(b.h).max(),
                        np.abs(a.b - b.b).max() / max(np.abs(b.b).max(), 1.0))
    out["jax_vs_reference_after_300_updates"] = float(worst)
    together = [ebp_lib.init_network([100, 10], "binary", seed=seed) for seed in range(3)]
    ebp_jax.group_epoch(together, x[:2000], y[:2000], 10, [np.random.default_rng(seed) for seed in range(3)])
    differences = []
    for seed, grouped in enumerate(together):
        alone = ebp_lib.init_network([100, 10], "binary", seed=seed)
        ebp_train.train_epoch(alone, x[:2000], y[:2000], 10, np.random.default_rng(seed), engine="jax")
        differences += [float(np.abs(a.h - b.h).max()) for a, b in zip(grouped.layers, alone.layers)]
    out["group_vs_alone_max_abs_difference"] = max(differences)
    a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    product = np.asarray(ebp_jax.matmul(jnp.asarray(a), jnp.asarray(a)), np.float64)
    out["matmul_max_abs_error"] = float(np.abs(product - a.astype(np.float64) @ a.astype(np.float64)).max())
    out["passed"] = bool(worst <= 1e-4 and out["matmul_max_abs_error"] < 1e-3)
    return out


def grid_runs() -> list[int]:
    """The weights of each run of the MNIST grid with three seeds (run_tables.py --all --seed 0 1 2)."""
    jobs = paper_tables.make_jobs(paper_tables.read_paper_tables(), paper_tables.Selection("paper", seeds=range(SEEDS)))
    weights = []
    for job in jobs:
        sizes = ebp_lib.check_architecture(job.config.layers)
        weights.append(sum(a * b for a, b in zip(sizes, sizes[1:])))
    return weights


def grid_estimate(results: list[dict]) -> dict:
    """The MNIST grid with three seeds in device-hours, extrapolated: every run costs its weights' share of an
    architecture's measured seconds per run-epoch (training and the runner's evaluation), 120 epochs of 60,000
    images. `grid_hours_extrapolated` takes the group of three, what --group-seeds makes of the grid (its runs differ
    in configuration but for the seed); `if_groups_of_best` the fastest group measured, which the grid reaches only
    with more seeds or several groups sharing the device at once (not measured). Small runs are charged less than
    they cost where a step is launch-bound rather than compute-bound: the larger architecture's figure is safer."""
    weights = grid_runs()
    out = {"runs": len(weights), "target_hours": TARGET_HOURS, "label": "extrapolated",
           "method": "each run of the grid (Tables 2-4, seeds 0-2, 120 epochs of 60,000 images) charged its number of "
                     "weights times the seconds per weight per run-epoch measured for this architecture, training "
                     "and the runner's per-run evaluation; one group at a time on the device", "by_architecture": []}

    def hours(entry, row):
        return sum(weights) * entry["seconds_per_run_epoch_with_evaluation"] / row["weights"] * PAPER_EPOCHS / 3600

    for row in results:
        seeds = [g for g in row["groups"] if g["runs"] <= SEEDS]
        grid_group = max(seeds, key=lambda g: g["runs"]) if seeds else row["groups"][0]
        best = min(row["groups"], key=lambda g: g["seconds_per_run_epoch_with_evaluation"])
        out["by_architecture"].append({
            "architecture": row["architecture"], "group": grid_group["runs"],
            "grid_hours_extrapolated": round(hours(grid_group, row), 3),
            "times_target": round(hours(grid_group, row) / TARGET_HOURS, 2),
            "if_groups_of_best": {"group": best["runs"], "grid_hours_extrapolated": round(hours(best, row), 3)}})
    return out


def limits(results: list[dict], platform: str) -> list[str]:
    """What bounds the throughput, read off the measurements: how a group's step time grows with its size (flat:
    launch- or latency-bound; proportional: compute-bound), and the share of a run's epoch spent evaluating."""
    notes = []
    for row in results:
        first, last = row["groups"][0], row["groups"][-1]
        growth = last["us_per_step"] / first["us_per_step"]
        size = last["runs"] / first["runs"]
        kind = ("compute-bound: the step time grows with the runs" if growth > 0.7 * size else
                "launch- or latency-bound: more runs per step cost little" if growth < 0.3 * size else "in between")
        share = last["evaluation_seconds_per_run_epoch"] / last["seconds_per_run_epoch_with_evaluation"]
        notes.append(f"{row['architecture']} on {platform}: {first['runs']} -> {last['runs']} runs per group makes a "
                     f"step {growth:.1f}x longer ({kind}); evaluation is {100 * share:.0f}% of a run's epoch in a "
                     f"group of {last['runs']} (each run evaluated alone after every epoch)")
    return notes


def main(argv=None) -> int:
    args = parse_args(argv)
    info = machine_info(args.allow_loaded)
    x, y = load_images(args)
    scale = PAPER_IMAGES / args.images * PAPER_EPOCHS  # timed epochs -> one paper run
    out = {"what": "EBP training throughput of the JAX engine (groups of runs side by side, vmap) beside the fast "
                   "engine (one run, one CPU thread), in one process",
           "images_per_epoch_timed": args.images, "batch_size": args.batch_size, "weights": args.weights,
           "data": "synthetic" if args.synthetic else "mnist",
           "extrapolation": f"runs per hour = 3600 / (seconds per run-epoch x {PAPER_IMAGES:,} / images timed x "
                            f"{PAPER_EPOCHS}): extrapolated from one timed epoch, not measured over a whole run",
           "machine": info, "results": []}
    for architecture in args.architectures:
        layers = paper_architecture(architecture)
        sizes = ebp_lib.check_architecture(layers)
        net_args = {"architecture": layers, "weights": args.weights, "dtype": np.float32}
        row = {"architecture": str(sizes), "weights": sum(a * b for a, b in zip(sizes, sizes[1:])), "groups": []}
        evaluation = time_evaluation(net_args, x)
        row["evaluation_seconds_per_run"] = round(evaluation, 4)
        if not args.skip_fast:
            seconds = time_fast(net_args, x, y, args.batch_size)
            row["fast"] = {"seconds": round(seconds, 3), "images_per_second": round(args.images / seconds, 1),
                           "runs_per_hour_extrapolated": round(3600 / (seconds * scale), 4)}
            print(f"{row['architecture']} fast engine, 1 run: {args.images / seconds:,.0f} images/s")
        for group in args.groups:
            timed = time_group(net_args, x, y, args.batch_size, group)
            seconds, steps = timed["seconds"], args.images // args.batch_size
            per_run = seconds / group
            entry = {"runs": group, "seconds": round(seconds, 4), "compile_seconds": round(timed["compile_seconds"], 2),
                     "images_per_second": round(group * args.images / seconds, 1),
                     "us_per_step": round(1e6 * seconds / steps, 2),
                     "seconds_per_run_epoch_with_evaluation": round(per_run * PAPER_IMAGES / args.images + evaluation,
                                                                    4),
                     "evaluation_seconds_per_run_epoch": round(evaluation, 4),
                     "runs_per_hour_training_only_extrapolated": round(3600 / (per_run * scale), 4),
                     "runs_per_hour_extrapolated": round(
                         3600 / ((per_run * PAPER_IMAGES / args.images + evaluation) * PAPER_EPOCHS), 4),
                     **{k: v for k, v in timed.items() if k == "peak_device_bytes"}}
            entry["scaling"] = round(group * row["groups"][0]["seconds"] / seconds / row["groups"][0]["runs"], 3) \
                if row["groups"] else 1.0
            if "fast" in row:
                entry["ratio_to_fast"] = round(entry["images_per_second"] / row["fast"]["images_per_second"], 3)
            row["groups"].append(entry)
            print(f"{row['architecture']} jax, {group} runs: {entry['images_per_second']:,.0f} images/s over all runs,"
                  f" {entry['us_per_step']:.0f} µs per step, {entry['runs_per_hour_extrapolated']:.2f} paper runs "
                  f"per hour with evaluation (extrapolated)"
                  + (f", {entry['ratio_to_fast']:.2f}x the fast engine" if "fast" in row else ""))
        out["results"].append(row)
    out["agreement"] = agreement(x, y)
    print(f"agreement on {info['device']['platform']}: {out['agreement']}")
    out["grid"] = grid_estimate(out["results"])
    out["limits"] = limits(out["results"], info["device"]["platform"])
    for line in [*(f"grid ({out['grid']['runs']} runs, three seeds) from {g['architecture']}: "
                   f"{g['grid_hours_extrapolated']:.2f} device-hours in groups of {g['group']}, "
                   f"{g['if_groups_of_best']['grid_hours_extrapolated']:.2f} if in groups of "
                   f"{g['if_groups_of_best']['group']} (extrapolated; target {TARGET_HOURS:g})"
                   for g in out["grid"]["by_architecture"]), *out["limits"]]:
        print(line)
    out["loaded"] = records.finish_timing_record(info, args.allow_loaded)
    if args.out:
        records.write_json(args.out.replace("{device}", device_slug(info)), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
