#!/usr/bin/env python
"""Benchmark: the deployed binary CNN (ebp_binary_conv: bit-packed EBP-D, im2col + XNOR-popcount) against a float32
convolution of the same sign network, in the same run.

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python scripts/binary_cnn_inference.py \\
        --checkpoint outputs/runs/named-e30/binary-c5x16s2-c5x32s2/checkpoint.npz

Without --checkpoint it packs a new network of --architecture (ebp_lib.init_network, seed 0): the checks hold for
any network, but only a trained one's error rate means anything. It prints:
 1. mismatches on all 10,000 MNIST test images (per-pixel standardisation on all 60,000 training images): images
    whose packed prediction differs from ebp_lib.output_ebp_d(net, x).argmax(1) (float64), for the engines "auto",
    "numba" and "numpy" (--numpy-images of them, default all: the readable engine is slower), and output sums that
    differ at all;
    the first layer's near-ties decided by the exact sum;
 2. the model's bytes, packed (sign planes, mask planes, float64 biases) against float32 (kernels and biases);
 3. images/s at batch 1 (a loop of --batch1-images single images) and at batch 1,000, for engine "auto" and the
    float32 baseline (ebp_binary_conv.float32_forward: im2col + sgemm, output_ebp_d's maths in float32), timed in
    the same run, alternating, best of --rounds, in CPU seconds of this process; their ratio.
The load average before and after is printed: a speed ratio measured above about 1 per core is labelled
"measured under load" and is not a number to publish.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import ebp_binary_conv
import ebp_data
import ebp_lib
from reproduction.parameters import architecture_layers


def mismatches(packed, net, x, engine: str) -> dict:
    """Prediction and output-sum disagreements of one engine with output_ebp_d on images x."""
    counts = {}
    sums = ebp_binary_conv.output_sums(packed, x, engine, counts)
    reference = ebp_lib.output_ebp_d(net, x)
    return {"images": len(x), "predictions_differ": int((sums.argmax(1) != reference.argmax(1)).sum()),
            "sums_differ": int((sums != reference).any(axis=1).sum()), "near_ties": counts["near_ties"]}


def best_seconds(run, rounds: int) -> float:
    """The least CPU time of `rounds` calls of run()."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def speeds(packed, net, x, batch1_images: int, rounds: int) -> dict:
    """Images/s of engine "auto" and of the float32 baseline at batch 1 and at batch 1,000 (x: ≥ 1,000 images)."""
    params32 = ebp_binary_conv.float32_parameters(net)
    x32, one = x[:1000].astype(np.float32), x[:batch1_images]
    one32 = one.astype(np.float32)
    runs = {
        ("packed", 1): lambda: [ebp_binary_conv.output_sums(packed, one[i:i + 1], "auto") for i in range(len(one))],
        ("float32", 1): lambda: [ebp_binary_conv.float32_forward(params32, one32[i:i + 1], packed.scale)
                                 for i in range(len(one))],
        ("packed", 1000): lambda: ebp_binary_conv.output_sums(packed, x[:1000], "auto"),
        ("float32", 1000): lambda: ebp_binary_conv.float32_forward(params32, x32, packed.scale)}
    for run in runs.values():
        run()  # compiles the kernels, warms the caches
    seconds = {key: [] for key in runs}
    for _ in range(rounds):  # alternating, so that a change of load falls on both
        for key, run in runs.items():
            seconds[key].append(best_seconds(run, 1))
    return {key: (len(one) if key[1] == 1 else 1000) / min(s) for key, s in seconds.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, help="a trained binary CNN (ebp_lib.save_network / a run's)")
    parser.add_argument("--architecture", default="c5x16s2-c5x32s2", help="without --checkpoint: a new network")
    parser.add_argument("--numpy-images", type=int, default=10000)
    parser.add_argument("--batch1-images", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    if args.checkpoint:
        try:
            net, _ = ebp_lib.load_network(args.checkpoint)
        except (OSError, ValueError) as err:
            print(f"error: cannot read {args.checkpoint}: {err}", file=sys.stderr)
            return 2
    else:
        net = ebp_lib.init_network(architecture_layers(args.architecture), "binary", seed=0)
    try:
        packed = ebp_binary_conv.export_cnn(net)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    data = ebp_data.load_dataset("mnist")
    x = data.x_test
    print(f"network {net.architecture} ({'checkpoint ' + str(args.checkpoint) if args.checkpoint else 'untrained'}); "
          f"EBP-D test error {np.mean(ebp_lib.output_ebp_d(net, x).argmax(1) != data.labels_test):.2%}")
    for engine, images in (("auto", x), ("numba", x), ("numpy", x[:args.numpy_images])):
        m = mismatches(packed, net, images, engine)
        print(f"engine {engine:<5}: {m['predictions_differ']} mismatched predictions and {m['sums_differ']} images "
              f"with any output sum different, of {m['images']:,} test images; {m['near_ties']} near-ties decided "
              f"by the exact sum")
    size = ebp_binary_conv.model_bytes(packed)
    print(f"size: packed {size['total']:,} bytes (signs {size['signs']:,}, masks {size['masks']:,}, float64 biases "
          f"{size['biases']:,}) against float32 {size['float32']:,}: {size['ratio_float32_over_packed']:.1f}x smaller")
    speed = speeds(packed, net, x, args.batch1_images, args.rounds)
    load_after = os.getloadavg()[0]
    loaded = max(load_before, load_after) > (os.cpu_count() or 1)
    label = " (MEASURED UNDER LOAD: indicative only, not to publish)" if loaded else ""
    for batch in (1, 1000):
        print(f"batch {batch:>4}: packed {speed['packed', batch]:,.0f} images/s, float32 convolution "
              f"{speed['float32', batch]:,.0f} images/s, ratio packed/float32 "
              f"{speed['packed', batch] / speed['float32', batch]:.2f}{label}")
    print(f"load average {load_before:.1f} before, {load_after:.1f} after, on {os.cpu_count()} CPUs; one thread "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, NUMBA_NUM_THREADS="
          f"{os.environ.get('NUMBA_NUM_THREADS')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
