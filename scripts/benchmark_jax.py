#!/usr/bin/env python
"""Time the JAX engine (ebp_jax: EBP as jax.grad, many runs at once with vmap) beside the fast engine.

For each architecture and group size G, G runs of one configuration (own initial weights, own data order) train
on the first --images training images at batch 10, in one compiled call per group (ebp_jax.train_group), after a
warm-up call that compiles it. The fast engine (numba, one run) is timed on the same images in the same process.
Printed and written to JSON: images per second over all runs of a group, and paper-protocol runs per hour
extrapolated from it (120 epochs of 60,000 images; training only, evaluation not included), labelled as
extrapolated, with the device, library versions, CPU model and flags and the load average before and after
(reproduction.records.timing_record): above 1 per core it refuses to run, or with --allow-loaded records
"loaded": true (such a measurement must not be quoted).

  python scripts/benchmark_jax.py --out .cache/benchmark_jax.json                  # whatever device JAX finds
  python scripts/benchmark_jax.py --images 2000 --groups 1 3 --architectures 800   # a short look
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np

import ebp_data
import ebp_lib
from reproduction import records

PAPER_IMAGES = 60000 * 120     # images one paper-protocol run trains on
GRID_RUNS = 150                # the MNIST grid with three seeds, about


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=6000, help="training images per timed call (default 6000)")
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 3, 10, 30], help="runs per group")
    parser.add_argument("--architectures", nargs="+", default=["800", "800-800"], help="hidden layers")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--weights", choices=ebp_lib.WEIGHT_TYPES, default="binary")
    parser.add_argument("--skip-fast", action="store_true", help="do not time the fast engine")
    parser.add_argument("--out", help="write the measurements as JSON here")
    records.add_allow_loaded_option(parser)
    args = parser.parse_args(argv)
    if args.images < args.batch_size or args.images % args.batch_size:
        parser.error(f"--images must be a positive multiple of the batch size {args.batch_size}")
    return args


def device_record() -> dict:
    """JAX's device and versions, and the GPU driver when nvidia-smi answers."""
    import jax
    import jaxlib

    device = jax.devices()[0]
    record = {"platform": device.platform, "device_kind": device.device_kind, "devices": len(jax.devices()),
              "jax": jax.__version__, "jaxlib": jaxlib.__version__}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if smi.returncode == 0:
            record["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return record


def time_fast(net_args: dict, x, y, batch_size: int) -> float:
    """Seconds for the fast engine to train one run on x (after a warm-up that compiles its kernels)."""
    warm = ebp_lib.init_network(**net_args)
    ebp_lib.train_steps(warm, x[:100], y[:100], np.arange(100), batch_size, np.random.default_rng(0), "fast")
    net = ebp_lib.init_network(**net_args)
    start = time.perf_counter()
    ebp_lib.train_steps(net, x, y, np.arange(len(x)), batch_size, np.random.default_rng(0), "fast")
    return time.perf_counter() - start


def time_group(net_args: dict, x, y, batch_size: int, group: int) -> float:
    """Seconds for ebp_jax.train_group to train `group` runs on x (after a warm-up call that compiles it)."""
    import jax
    import jax.numpy as jnp

    import ebp_jax

    nets = [ebp_lib.init_network(**{**net_args, "seed": seed}) for seed in range(group)]
    s = ebp_jax.structure(nets[0], jnp.float32)
    params = ebp_jax.stack_runs([ebp_jax.parameters(net, jnp.float32) for net in nets])
    orders = jnp.asarray(np.stack([np.random.default_rng(seed).permutation(len(x)) for seed in range(group)]))
    x32, y32 = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
    jax.block_until_ready(ebp_jax.train_group(params, x32, y32, orders, s, batch_size))  # compile
    start = time.perf_counter()
    jax.block_until_ready(ebp_jax.train_group(params, x32, y32, orders, s, batch_size))
    return time.perf_counter() - start


def main(argv=None) -> int:
    args = parse_args(argv)
    machine = records.timing_record(("numpy", "numba", "jax", "jaxlib"), allow_loaded=args.allow_loaded)
    data = ebp_data.load_dataset("mnist", dtype=np.float32)  # standardised with all 60,000 images' statistics
    x, y = data.x_train[:args.images], data.y_train[:args.images]
    out = {"what": "EBP training throughput, JAX engine (vmap over runs) beside the fast engine",
           "images_per_call": args.images, "batch_size": args.batch_size, "weights": args.weights,
           "extrapolation": f"runs per hour = 3600 x images per second / {PAPER_IMAGES:,} (120 epochs of 60,000 "
                            f"images, training only): extrapolated, not measured over a whole run",
           "machine": machine, "loaded": machine["loaded"], "device": device_record(), "results": []}
    for architecture in args.architectures:
        net_args = {"architecture": ebp_lib.paper_architecture(architecture), "weights": args.weights,
                    "dtype": np.float32}
        row = {"architecture": f"[784, {architecture.replace('-', ', ')}, 10]", "groups": []}
        if not args.skip_fast:
            seconds = time_fast(net_args, x, y, args.batch_size)
            row["fast"] = {"seconds": round(seconds, 3), "images_per_second": round(args.images / seconds, 1),
                           "runs_per_hour_extrapolated": round(3600 * args.images / seconds / PAPER_IMAGES, 3)}
            print(f"{row['architecture']} fast engine, 1 run: {args.images / seconds:,.0f} images/s")
        for group in args.groups:
            seconds = time_group(net_args, x, y, args.batch_size, group)
            rate = group * args.images / seconds
            entry = {"runs": group, "seconds": round(seconds, 3), "images_per_second": round(rate, 1),
                     "runs_per_hour_extrapolated": round(3600 * rate / PAPER_IMAGES, 3),
                     "grid_hours_extrapolated": round(GRID_RUNS * PAPER_IMAGES / rate / 3600, 2)}
            if "fast" in row:
                entry["ratio_to_fast"] = round(rate / row["fast"]["images_per_second"], 3)
            row["groups"].append(entry)
            print(f"{row['architecture']} jax, {group} runs: {rate:,.0f} images/s over all runs, "
                  f"{entry['runs_per_hour_extrapolated']:.2f} paper runs per hour (extrapolated)"
                  + (f", {entry['ratio_to_fast']:.2f}x the fast engine" if "fast" in row else ""))
        out["results"].append(row)
    out["loaded"] = records.finish_timing_record(machine, args.allow_loaded)
    if args.out:
        records.write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
