#!/usr/bin/env python
"""Benchmark: the deployed binary network (ebp_binary, bit-packed EBP-D) against the float32 BLAS EBP-D path.

One command, from the repository root (EBP_DATA_DIR as for the tests; a few minutes: three one-epoch trainings):

    OMP_NUM_THREADS=1 .venv/bin/python scripts/binary_inference.py

For [784,800,10], [784,800,800,10] and the block-13 spatial net:
 1. Training protocol (stated in the JSON): binary weights, ebp_lib.init_network(seed 0), one epoch of
    ebp_lib.train_epoch with the fast engine on all 60,000 training images (per-pixel standardisation), batch
    size 10, order from np.random.default_rng(0). `--checkpoint PATH` (repeatable) uses saved networks
    (ebp_lib.load_network) instead; `--n-train N` trains on fewer images (a quick look, not the committed numbers).
 2. Export with ebp_binary.export_network, save_packed, load_packed; every number below uses the loaded file.
 3. Mismatches: test images (all 10,000) where the packed prediction differs from output_ebp_d(net, x).argmax(1)
    (float64), for the numba and the numpy engines; first-layer near-ties decided by the exact sum; also the
    float32 BLAS path's own disagreements with output_ebp_d, for comparison.
 4. Model bytes: packed arrays (sign planes, mask planes, float64 biases) and the .npz file; the float32 ⟨W⟩ =
    sign(h) (times the mask) that the float path multiplies by, with float32 biases; the float64 h and b of the
    checkpoint (arrays and a save_network file). Per layer: packed weight bytes against float32.
 5. Speed, one thread (threadpoolctl.threadpool_limits(1), NUMBA_NUM_THREADS=1): images/s at batch 1 (a loop of
    single images) and at batch 1,000, for the packed numba engine, the packed numpy engine and the float32 BLAS
    path (x float32 @ sign(h).T float32, output_ebp_d's maths; the images are given to it already in float32,
    and to the packed engines in float64, each in the dtype it computes in). The three are timed in the same run,
    in rounds with the order rotated every round; best of the rounds, in CPU seconds of this process
    (time.process_time: other jobs on a busy machine inflate wall-clock times much more); wall-clock images/s
    are recorded as well.
Results go to outputs/binary_inference.json (`--out`), a summary to stdout.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy and numba are imported

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import ebp_binary as eb  # noqa: E402
import ebp_data  # noqa: E402
import ebp_lib as ebp  # noqa: E402
from reproduction import records  # noqa: E402

CASES = {"[784,800,10]": [800, 10], "[784,800,800,10]": [800, 800, 10],
         "block13 [784,(local 13: 256),10]": ebp.paper_architecture("block13")}
BATCH_SIZE, SEED = 10, 0


# ----------------------------------------------------------------------------------------------------------
# The baseline: output_ebp_d's maths in float32 with BLAS
# ----------------------------------------------------------------------------------------------------------

def float32_weights(net) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer, what the float path multiplies by: EBP-D's W = sign(h) (times the mask) and b
    (ebp_lib.ebp_d_parameters), as float32."""
    return [(np.ascontiguousarray(w, dtype=np.float32), b.astype(np.float32)) for w, b in ebp.ebp_d_parameters(net)]


def float32_predict(weights, scale: np.float32, x32: np.ndarray) -> np.ndarray:
    """output_ebp_d(net, x).argmax(1) in float32: ebp_lib.sign_network, u = p·(v @ W.T) + b, hidden units sign(u)
    (+1 at 0)."""
    return ebp.sign_network(x32, weights, scale)[-1].argmax(axis=1)


# ----------------------------------------------------------------------------------------------------------
# Networks, bytes, agreement
# ----------------------------------------------------------------------------------------------------------

def trained_network(architecture, data):
    """The stated protocol: binary, seed 0, one fast-engine epoch, batch 10 (module docstring)."""
    net = ebp.init_network(architecture, "binary", seed=SEED)
    ebp.train_epoch(net, data.x_train, data.y_train, BATCH_SIZE, np.random.default_rng(SEED), engine="fast")
    return net


def describe(net) -> str:
    return f"{net.sizes} architecture {net.architecture}" + (f", {net.dropout} dropout p={net.keep}"
                                                             if net.dropout else "")


def byte_counts(net, packed, packed_file: Path, workdir: Path) -> dict:
    """Model bytes: packed vs float32 ⟨W⟩ vs the float64 checkpoint, in total and per layer."""
    sizes = eb.model_bytes(packed)
    float32_w = sum(layer.h.size * 4 for layer in net.layers)
    float32_b = sum(layer.b.size * 4 for layer in net.layers)
    checkpoint = workdir / "checkpoint.npz"
    ebp.save_network(checkpoint, net)
    per_layer = []
    for k, (layer, p) in enumerate(zip(net.layers, packed.layers)):
        signs, mask = p.signs.nbytes, (p.connected.nbytes if p.connected is not None else 0)
        connected = int(layer.mask.sum()) if layer.mask is not None else layer.h.size
        per_layer.append({
            "layer": k + 1, "kind": "local (masked)" if layer.mask is not None else "fully connected",
            "hidden": k < len(net.layers) - 1, "shape": list(layer.h.shape), "connected_weights": connected,
            "bytes_float32_dense": layer.h.size * 4, "bytes_float32_connected_only": connected * 4,
            "bytes_packed_signs": signs, "bytes_packed_mask": mask,
            "ratio_float32_dense_over_packed_signs": layer.h.size * 4 / signs,
            "ratio_float32_dense_over_packed_signs_and_mask": layer.h.size * 4 / (signs + mask)})
    return {
        "bytes_packed": sizes["total"], "bytes_packed_signs": sizes["signs"], "bytes_packed_masks": sizes["masks"],
        "bytes_packed_biases": sizes["biases"], "bytes_packed_file": packed_file.stat().st_size,
        "bytes_float32": float32_w + float32_b, "bytes_float32_weights": float32_w,
        "bytes_float64_checkpoint": sum(layer.h.nbytes + layer.b.nbytes for layer in net.layers),
        "bytes_float64_checkpoint_file": checkpoint.stat().st_size,
        "ratio_float32_over_packed": (float32_w + float32_b) / sizes["total"],
        "ratio_float64_checkpoint_over_packed": sum(layer.h.nbytes + layer.b.nbytes for layer in net.layers)
        / sizes["total"],
        "per_layer": per_layer,
    }


def agreement(net, packed, fw, scale32, data) -> dict:
    """Mismatches against output_ebp_d on all test images, for both packed engines and the float32 path."""
    reference = ebp.output_ebp_d(net, data.x_test).argmax(axis=1)
    counts = {}
    numba = eb.predict(packed, data.x_test, "numba", counts)
    numpy_engine = eb.predict(packed, data.x_test, "numpy")
    float32 = float32_predict(fw, scale32, data.x_test.astype(np.float32))
    return {"mismatches": int(np.sum(numba != reference)), "mismatches_numpy_engine": int(np.sum(numpy_engine
                                                                                                 != reference)),
            "first_layer_near_ties": counts.get("near_ties", 0),
            "mismatches_float32_blas_path": int(np.sum(float32 != reference)),
            "test_error_ebp_d": float(np.mean(reference != data.labels_test)), "n_test": len(reference)}


# ----------------------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------------------

def time_rounds(runners: dict, rounds: int) -> dict:
    """Best CPU and wall seconds of each runner over `rounds` rounds, the order rotated every round."""
    names = list(runners)
    best = {name: {"cpu": np.inf, "wall": np.inf} for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            cpu, wall = time.process_time(), time.perf_counter()
            runners[name]()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            best[name]["cpu"] = min(best[name]["cpu"], cpu)
            best[name]["wall"] = min(best[name]["wall"], wall)
    return best


def speeds(packed, fw, scale32, x: np.ndarray, n_single: int, rounds: int) -> dict:
    """Images/s at batch 1 (n_single images one by one) and at batch 1,000, packed (numba, numpy) vs float32."""
    x32 = x.astype(np.float32)
    single = x[:n_single]
    runners_b1 = {
        "packed": lambda: [eb.predict(packed, single[i:i + 1], "numba") for i in range(n_single)],
        "packed_numpy": lambda: [eb.predict(packed, single[i:i + 1], "numpy") for i in range(n_single)],
        "float": lambda: [float32_predict(fw, scale32, x32[i:i + 1]) for i in range(n_single)],
    }
    batch = x[:1000]
    runners_b1000 = {
        "packed": lambda: eb.predict(packed, batch, "numba"),
        "packed_numpy": lambda: eb.predict(packed, batch, "numpy"),
        "float": lambda: float32_predict(fw, scale32, x32[:1000]),
    }
    out = {}
    with threadpool_limits(1):
        for runners in (runners_b1, runners_b1000):  # warm-up: compile, caches
            for run in runners.values():
                run()
        for label, runners, n in (("b1", runners_b1, n_single), ("b1000", runners_b1000, 1000)):
            best = time_rounds(runners, rounds)
            for name, seconds in best.items():
                out[f"images_per_s_{name}_{label}"] = n / seconds["cpu"]
                out[f"images_per_s_{name}_{label}_wall_clock"] = n / seconds["wall"]
            out[f"speed_ratio_packed_over_float_{label}"] = (out[f"images_per_s_packed_{label}"]
                                                             / out[f"images_per_s_float_{label}"])
            out[f"speed_ratio_packed_numpy_over_float_{label}"] = (out[f"images_per_s_packed_numpy_{label}"]
                                                                   / out[f"images_per_s_float_{label}"])
    return out


def machine(allow_loaded: bool = False, load=None) -> dict:
    """Where and with what the timings ran, and the load average when they started (reproduction.records.
    timing_record: it refuses a loaded machine unless allow_loaded); git_changed lists the timed code's files that
    differ from git_commit."""
    return records.timing_record(git_paths=("ebp_binary.py", "ebp_binary_kernels.py", "scripts/binary_inference.py"),
                                 allow_loaded=allow_loaded, load=load)


# ----------------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", action="append", default=[], metavar="PATH",
                        help="a binary network saved by ebp_lib.save_network (repeatable); replaces the training")
    parser.add_argument("--n-train", type=int, default=60000, help="training images (default all 60,000)")
    parser.add_argument("--single-images", type=int, default=500, help="images per batch-1 round (default 500)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds, best taken (default 5)")
    parser.add_argument("--out", type=Path, default=records.REPO / "outputs" / "binary_inference.json")
    records.add_allow_loaded_option(parser)
    args = parser.parse_args(argv)

    start = time.perf_counter()
    info = machine(args.allow_loaded)
    data = ebp_data.load_dataset("mnist", n_train=args.n_train)
    if args.checkpoint:
        networks = {}
        for path in args.checkpoint:
            net, _ = ebp.load_network(path)
            networks[f"{path}: {describe(net)}"] = net
        protocol = {"source": "checkpoints", "paths": args.checkpoint}
    else:
        protocol = {"source": "trained by this script", "weights": "binary", "init_seed": SEED, "epochs": 1,
                    "n_train": args.n_train, "batch_size": BATCH_SIZE, "order_seed": SEED, "engine": "fast",
                    "preprocessing": "pixel (per-pixel standardisation, ebp_data.load_dataset defaults)"}
        networks = {}
        for name, architecture in CASES.items():
            t = time.perf_counter()
            networks[name] = trained_network(architecture, data)
            print(f"trained {name} in {time.perf_counter() - t:.0f} s", flush=True)

    cases = []
    for name, net in networks.items():
        with tempfile.TemporaryDirectory() as tmp:
            packed_file = Path(tmp) / "net.packed.npz"
            eb.save_packed(packed_file, eb.export_network(net))
            packed = eb.load_packed(packed_file)
            sizes = byte_counts(net, packed, packed_file, Path(tmp))
        fw = float32_weights(net)
        scale32 = np.float32(packed.scale)
        case = {"network": name, "description": describe(net), **agreement(net, packed, fw, scale32, data), **sizes,
                **speeds(packed, fw, scale32, data.x_test, args.single_images, args.rounds)}
        cases.append(case)
        print(f"{name}: mismatches {case['mismatches']} (numpy engine {case['mismatches_numpy_engine']}, "
              f"near-ties {case['first_layer_near_ties']}; float32 path {case['mismatches_float32_blas_path']}), "
              f"EBP-D test error {100 * case['test_error_ebp_d']:.2f}%", flush=True)
        print(f"  bytes packed {case['bytes_packed']:,} (file {case['bytes_packed_file']:,}), float32 "
              f"{case['bytes_float32']:,} ({case['ratio_float32_over_packed']:.1f}x), float64 checkpoint "
              f"{case['bytes_float64_checkpoint']:,} ({case['ratio_float64_checkpoint_over_packed']:.1f}x)")
        for layer in case["per_layer"]:
            print(f"  layer {layer['layer']} ({layer['kind']}): float32 / packed signs "
                  f"{layer['ratio_float32_dense_over_packed_signs']:.1f}x, / signs+mask "
                  f"{layer['ratio_float32_dense_over_packed_signs_and_mask']:.1f}x")
        for label in ("b1", "b1000"):
            print(f"  batch {label[1:]}: packed {case[f'images_per_s_packed_{label}']:,.0f} images/s (numpy engine "
                  f"{case[f'images_per_s_packed_numpy_{label}']:,.0f}), float32 BLAS "
                  f"{case[f'images_per_s_float_{label}']:,.0f}: ratio packed/float "
                  f"{case[f'speed_ratio_packed_over_float_{label}']:.2f}", flush=True)

    loaded = records.finish_timing_record(info, args.allow_loaded)
    result = {"what": __doc__.split("\n")[0], "loaded": loaded, "machine": info, "training_protocol": protocol,
              "timing": {"clock": "time.process_time (CPU seconds of this process); *_wall_clock: time.perf_counter",
                         "threads": 1, "single_images_per_round": args.single_images, "rounds": args.rounds,
                         "best_of_rounds": True, "packed_engine": "numba (images_per_s_packed_*); numpy engine: "
                                                                  "images_per_s_packed_numpy_*",
                         "float_path": "float32 BLAS: x float32 @ sign(h).T float32, scale p, + b, sign"},
              "seconds_total": None, "cases": cases}
    result["seconds_total"] = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    records.write_json(args.out, result)
    print(f"wrote {args.out} ({result['seconds_total']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
