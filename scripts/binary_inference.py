#!/usr/bin/env python
"""Benchmark: the deployed binary network (ebp_binary, bit-packed EBP-D) against the float32 BLAS EBP-D path.

One command, from the repository root, on an idle machine (EBP_DATA_DIR as for the tests; a few minutes: three
one-epoch trainings, then the checks and timings):

    make binary-benchmark BINARY_BENCHMARK_OUT=outputs/binary_inference.json
    # or: OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python scripts/binary_inference.py

`--quick` is a short look (2,000 training images, fewer images and rounds timed; it writes
.cache/binary_inference_quick.json unless --out says otherwise): not the numbers to quote. The machine is
recorded (reproduction.records.timing_record: CPU model and flags, library versions, load average before and
after); above a load average of 1 per core the script refuses to run, or with --allow-loaded records
"loaded": true.

For [784,800,10], [784,800,800,10] and the block-13 spatial net:
 1. Training protocol (stated in the JSON): binary weights, ebp_lib.init_network(seed 0), one epoch of
    ebp_train.train_epoch with the fast engine on all 60,000 training images (per-pixel standardisation), batch
    size 10, order from np.random.default_rng(0). `--checkpoint PATH` (repeatable) uses saved networks
    (ebp_lib.load_network) instead; `--n-train N` trains on fewer images (a quick look, not the committed numbers).
 2. Export with ebp_binary.export_network, calibrate engine "auto" on this machine (ebp_binary.calibrate, on
    training images: per layer, from which batch size the float32 BLAS product beats the packed kernel), save the
    model with its plan (ebp_binary_format.save_packed), load it (ebp_binary_format.load_packed); every number
    below uses the loaded model.
 3. Mismatches: test images (all 10,000) where the packed prediction differs from output_ebp_d(net, x).argmax(1)
    (float64), for the engines "auto" (the deployed choice; also one image at a time on the images timed at
    batch 1), "numba" (packed kernels only), "blas" (float32 BLAS on the ±1 weights) and "numpy" (readable; 1,000
    images with --quick); first-layer near-ties recomputed in float64 and those decided by the exact sum; also the
    float32 BLAS baseline's own disagreements with output_ebp_d, for comparison.
 4. Model bytes: packed arrays (sign planes, mask planes, float64 biases) and the .npz file; the float32 ⟨W⟩ =
    sign(h) (times the mask) that the float path multiplies by, with float32 biases; the float64 h and b of the
    checkpoint (arrays and a save_network file). Per layer: packed weight bytes against float32.
 5. Speed, one thread (threadpoolctl.threadpool_limits(1), NUMBA_NUM_THREADS=1): images/s at batch 1 (a loop of
    single images) and at batch 1,000 for engine "auto" ("chosen"), engine "numba" ("packed") and the float32 BLAS
    path ("float": x float32 @ sign(h).T float32, output_ebp_d's maths; its images are given to it already in
    float32, and to the packed engines in float64, each in the dtype it takes). The three are timed in the same
    run, in rounds with the order rotated every round; best of the rounds, in CPU seconds of this process
    (time.process_time); wall-clock images/s are recorded as well.
 6. The hidden [800, 800] layer of [784,800,800,10] alone, at batch 1 and 1,000: the packed step (XNOR-popcount,
    threshold, packing: ebp_binary_kernels.hidden_layer_kernel) against sgemm (±1 float32 activations @ W.T) and
    against the float path's whole layer (sgemm, p·+b, sign).
Results go to outputs/binary_inference.json (`--out`; its "schema" key says what each field is), a summary to
stdout.
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
import ebp_binary_format as ebf  # noqa: E402
import ebp_binary_kernels  # noqa: E402
import ebp_data  # noqa: E402
import ebp_lib as ebp  # noqa: E402
import ebp_train  # noqa: E402
from reproduction import records  # noqa: E402
from reproduction.parameters import paper_architecture  # noqa: E402

CASES = {"[784,800,10]": [800, 10], "[784,800,800,10]": [800, 800, 10],
         "block13 [784,(local 13: 256),10]": paper_architecture("block13")}
HIDDEN_CASE = "[784,800,800,10]"  # its [800, 800] layer is timed alone
BATCH_SIZE, SEED = 10, 0
BATCHES = {"b1": 1, "b1000": 1000}
QUICK = {"n_train": 2000, "single_images": 50, "rounds": 2, "numpy_images": 1000,
         "calibration_batches": (1, 4, 16, 64, 256, 1024)}
SCHEMA = {
    "cases[]": "one per network: network, description, training, checks, bytes, calibration and speed (flat keys)",
    "mismatches": "test images whose engine 'auto' prediction differs from output_ebp_d(net, x).argmax(1); "
                  "mismatches_{numba,blas,numpy}_engine the same for those engines, mismatches_auto_b1 one image at "
                  "a time on the images timed at batch 1",
    "first_layer_rechecked / first_layer_near_ties": "engine 'auto' on all test images: first-layer units within "
                                                     "the rounding bound of 0, recomputed in float64 / decided by "
                                                     "the exact rational sum",
    "bytes_packed / bytes_float32 / ratio_float32_over_packed": "packed arrays (sign planes, mask planes, float64 "
                                                                "biases) / float32 ⟨W⟩ (dense, as the float path "
                                                                "multiplies) and biases / their ratio",
    "images_per_s_{chosen,packed,float}_{b1,b1000}": "CPU-time images/s: engine 'auto' (per layer the faster of "
                                                     "packed and float32 BLAS by the calibration), engine 'numba' "
                                                     "(packed kernels only), float32 BLAS EBP-D; *_wall_clock by "
                                                     "time.perf_counter",
    "speed_ratio_{chosen,packed}_over_float_{b1,b1000}": "images/s over the float32 BLAS path's",
    "methods_chosen_{b1,b1000}": "the method engine 'auto' used per layer at that batch size",
    "calibration": "ebp_binary.calibrate's plan (blas_from_batch per layer) and its timings, seconds per image",
    "hidden_layer": "the [800, 800] hidden layer alone: µs per image of the packed step, of sgemm alone and of the "
                    "float path's whole layer",
    "targets": "the issue's targets against this run",
}


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
    ebp_train.train_epoch(net, data.x_train, data.y_train, BATCH_SIZE, np.random.default_rng(SEED), engine="fast")
    return net


def describe(net) -> str:
    return f"{net.sizes} architecture {net.architecture}" + (f", {net.dropout} dropout p={net.keep}"
                                                             if net.dropout else "")


def byte_counts(net, packed, packed_file: Path, workdir: Path) -> dict:
    """Model bytes: packed vs float32 ⟨W⟩ vs the float64 checkpoint, in total and per layer."""
    sizes = eb.model_bytes(packed)
    float32_w = sum(layer.h.size * 4 for layer in net.layers)
    float32_b = sum(layer.b.size * 4 for layer in net.layers)
    float64 = sum(layer.h.nbytes + layer.b.nbytes for layer in net.layers)
    checkpoint = workdir / "checkpoint.npz"
    ebp.save_network(checkpoint, net)
    per_layer = []
    for k, (layer, p) in enumerate(zip(net.layers, packed.layers)):
        signs, mask = p.signs.nbytes, (p.connected.nbytes if p.connected is not None else 0)
        connected = int(np.count_nonzero(layer.mask)) if layer.mask is not None else layer.h.size
        per_layer.append({
            "layer": k + 1, "kind": f"local, block {p.local[1]} on {p.local[0]}x{p.local[0]} (mask derived)"
            if p.local is not None else ("masked" if layer.mask is not None else "fully connected"),
            "hidden": k < len(net.layers) - 1, "shape": list(layer.h.shape), "connected_weights": connected,
            "bits_per_unit": p.n_positions, "bytes_float32_dense": layer.h.size * 4,
            "bytes_float32_connected_only": connected * 4, "bytes_packed_signs": signs, "bytes_packed_mask": mask,
            "ratio_float32_dense_over_packed": layer.h.size * 4 / (signs + mask),
            "ratio_float32_connected_only_over_packed": connected * 4 / (signs + mask)})
    return {
        "bytes_packed": sizes["total"], "bytes_packed_signs": sizes["signs"], "bytes_packed_masks": sizes["masks"],
        "bytes_packed_biases": sizes["biases"], "bytes_packed_file": packed_file.stat().st_size,
        "bytes_float32": float32_w + float32_b, "bytes_float32_weights": float32_w,
        "bytes_float64_checkpoint": float64, "bytes_float64_checkpoint_file": checkpoint.stat().st_size,
        "ratio_float32_over_packed": (float32_w + float32_b) / sizes["total"],
        "ratio_float64_checkpoint_over_packed": float64 / sizes["total"],
        "per_layer": per_layer,
    }


def agreement(net, packed, fw, scale32, data, n_numpy: int, n_single: int) -> dict:
    """Mismatches against output_ebp_d on all test images for every engine, and the float32 path's own."""
    reference = ebp.output_ebp_d(net, data.x_test).argmax(axis=1)
    out, counts = {}, {}
    out["mismatches"] = int(np.sum(eb.predict(packed, data.x_test, "auto", counts) != reference))
    out["first_layer_rechecked"] = counts.get("rechecked", 0)
    out["first_layer_near_ties"] = counts.get("near_ties", 0)
    single = np.array([eb.predict(packed, data.x_test[i:i + 1], "auto")[0] for i in range(n_single)])
    out["mismatches_auto_b1"] = int(np.sum(single != reference[:n_single]))
    out["n_auto_b1"] = n_single
    for engine in ("numba", "blas"):
        out[f"mismatches_{engine}_engine"] = int(np.sum(eb.predict(packed, data.x_test, engine) != reference))
    out["mismatches_numpy_engine"] = int(np.sum(eb.predict(packed, data.x_test[:n_numpy], "numpy")
                                                != reference[:n_numpy]))
    out["n_numpy_engine"] = n_numpy
    float32 = float32_predict(fw, scale32, data.x_test.astype(np.float32))
    return {**out, "mismatches_float32_blas_path": int(np.sum(float32 != reference)),
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
    """Images/s at batch 1 (n_single images one by one) and at batch 1,000: engine auto (chosen), engine numba
    (packed), float32 BLAS (float)."""
    x32 = x.astype(np.float32)
    single, batch, batch32 = x[:n_single], x[:1000], x32[:1000]
    runners = {
        "b1": {"chosen": lambda: [eb.predict(packed, single[i:i + 1], "auto") for i in range(n_single)],
               "packed": lambda: [eb.predict(packed, single[i:i + 1], "numba") for i in range(n_single)],
               "float": lambda: [float32_predict(fw, scale32, x32[i:i + 1]) for i in range(n_single)]},
        "b1000": {"chosen": lambda: eb.predict(packed, batch, "auto"),
                  "packed": lambda: eb.predict(packed, batch, "numba"),
                  "float": lambda: float32_predict(fw, scale32, batch32)},
    }
    out = {}
    with threadpool_limits(1):
        for group in runners.values():  # warm-up: compile, working copies, caches
            for run in group.values():
                run()
        for label, group in runners.items():
            n = n_single if label == "b1" else len(batch)
            for name, seconds in time_rounds(group, rounds).items():
                out[f"images_per_s_{name}_{label}"] = n / seconds["cpu"]
                out[f"images_per_s_{name}_{label}_wall_clock"] = n / seconds["wall"]
            for name in ("chosen", "packed"):
                out[f"speed_ratio_{name}_over_float_{label}"] = (out[f"images_per_s_{name}_{label}"]
                                                                 / out[f"images_per_s_float_{label}"])
            out[f"methods_chosen_{label}"] = eb.layer_methods(packed, BATCHES[label])
    return out


def hidden_layer(packed, fw, scale32, x: np.ndarray, n_single: int, rounds: int) -> dict:
    """The second layer of [784,800,800,10] alone, on the first layer's units for the test images: the packed step
    (count, threshold, pack) against sgemm alone and against the float path's whole layer."""
    first, layer = packed.layers[0], packed.layers[1]
    words = eb.compiled_first_layer_words(first, x[:1000], packed.scale)[0]
    pm1 = np.where(eb.unpack_bits(words, first.n_units), np.float32(1), np.float32(-1))
    w32, b32 = fw[1]
    signs_t, connected_t = eb.work_array(layer, "signs_t"), eb.work_array(layer, "connected_t")
    out_words = np.zeros((1000, eb.n_words(layer.n_units)), dtype=np.uint64)

    def packed_step(v):
        out = out_words[:len(v)]
        out[:] = 0
        ebp_binary_kernels.hidden_layer_kernel(signs_t, connected_t, layer.connected is not None, layer.fan_in,
                                               layer.b, packed.scale, v, out)

    def float_step(v):
        return ebp.hard_sign(scale32 * (v @ w32.T) + b32)

    result = {"shape": [layer.n_units, layer.n_inputs]}
    with threadpool_limits(1):
        groups = {"b1": {"packed": lambda: [packed_step(words[i:i + 1]) for i in range(n_single)],
                         "sgemm": lambda: [pm1[i:i + 1] @ w32.T for i in range(n_single)],
                         "float_layer": lambda: [float_step(pm1[i:i + 1]) for i in range(n_single)]},
                  "b1000": {"packed": lambda: packed_step(words), "sgemm": lambda: pm1 @ w32.T,
                            "float_layer": lambda: float_step(pm1)}}
        for label, group in groups.items():
            n = n_single if label == "b1" else len(words)
            for run in group.values():
                run()
            best = time_rounds(group, max(rounds, 3))
            row = {f"{name}_us_per_image": 1e6 * seconds["cpu"] / n for name, seconds in best.items()}
            row["ratio_sgemm_over_packed"] = row["sgemm_us_per_image"] / row["packed_us_per_image"]
            row["ratio_float_layer_over_packed"] = row["float_layer_us_per_image"] / row["packed_us_per_image"]
            result[label] = row
    return result


def machine(allow_loaded: bool = False, load=None) -> dict:
    """Where and with what the timings ran, and the load average when they started (reproduction.records.
    timing_record: it refuses a loaded machine unless allow_loaded); git_changed lists the timed code's files that
    differ from git_commit."""
    return records.timing_record(git_paths=("ebp_binary.py", "ebp_binary_kernels.py", "scripts/binary_inference.py"),
                                 allow_loaded=allow_loaded, load=load)


def targets(cases: list[dict]) -> list[dict]:
    """The issue's targets for packed inference against this run's numbers."""
    rows = []
    for case in cases:
        for label in BATCHES:
            ratio = case[f"speed_ratio_chosen_over_float_{label}"]
            rows.append({"target": f"{case['network']}: deployed packed inference (engine auto) >= 1.0x float32 "
                                   f"BLAS at batch {BATCHES[label]}", "measured": f"{ratio:.2f}x",
                         "met": bool(ratio >= 1.0)})
        rows.append({"target": f"{case['network']}: 0 mismatches against output_ebp_d on all {case['n_test']:,} "
                               f"test images (every engine)",
                     "measured": f"auto {case['mismatches']}, numba {case['mismatches_numba_engine']}, blas "
                                 f"{case['mismatches_blas_engine']}, numpy {case['mismatches_numpy_engine']} (of "
                                 f"{case['n_numpy_engine']:,})",
                     "met": not any(case[k] for k in ("mismatches", "mismatches_auto_b1", "mismatches_numba_engine",
                                                      "mismatches_blas_engine", "mismatches_numpy_engine"))})
        if case["network"].startswith("block13"):
            rows.append({"target": "block13: packed >= 30x smaller than float32 weights+biases",
                         "measured": f"{case['ratio_float32_over_packed']:.1f}x",
                         "met": bool(case["ratio_float32_over_packed"] >= 30)})
    return rows


# ----------------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", action="append", default=[], metavar="PATH",
                        help="a binary network saved by ebp_lib.save_network (repeatable); replaces the training")
    parser.add_argument("--n-train", type=int, default=None, help="training images (default all 60,000)")
    parser.add_argument("--single-images", type=int, default=None, help="images per batch-1 round (default 500)")
    parser.add_argument("--rounds", type=int, default=None, help="timing rounds, best taken (default 5)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a short look: {QUICK['n_train']:,} training images, {QUICK['single_images']} images "
                             f"and {QUICK['rounds']} rounds timed, the numpy engine on {QUICK['numpy_images']:,} "
                             f"test images, fewer calibration sizes; writes .cache/binary_inference_quick.json "
                             f"unless --out is given")
    parser.add_argument("--out", type=Path, default=None, help="the JSON record (default "
                                                               "outputs/binary_inference.json)")
    records.add_allow_loaded_option(parser)
    args = parser.parse_args(argv)
    quick = QUICK if args.quick else {}
    n_train = args.n_train or quick.get("n_train", 60000)
    n_single = args.single_images or quick.get("single_images", 500)
    rounds = args.rounds or quick.get("rounds", 5)
    out_path = args.out or records.REPO / (".cache/binary_inference_quick.json" if args.quick
                                           else "outputs/binary_inference.json")

    start = time.perf_counter()
    info = machine(args.allow_loaded)
    data = ebp_data.load_dataset("mnist", n_train=n_train)
    n_numpy = quick.get("numpy_images", len(data.x_test))
    if args.checkpoint:
        networks = {}
        for path in args.checkpoint:
            net, _ = ebp.load_network(path)
            networks[f"{path}: {describe(net)}"] = net
        protocol = {"source": "checkpoints", "paths": args.checkpoint}
    else:
        protocol = {"source": "trained by this script", "weights": "binary", "init_seed": SEED, "epochs": 1,
                    "n_train": n_train, "batch_size": BATCH_SIZE, "order_seed": SEED, "engine": "fast",
                    "preprocessing": "pixel (per-pixel standardisation, ebp_data.load_dataset defaults)"}
        networks = {}
        for name, architecture in CASES.items():
            t = time.perf_counter()
            networks[name] = trained_network(architecture, data)
            print(f"trained {name} in {time.perf_counter() - t:.0f} s", flush=True)

    cases, hidden = [], None
    for name, net in networks.items():
        packed = eb.export_network(net)
        t = time.perf_counter()
        with threadpool_limits(1):
            calibration = eb.calibrate(packed, data.x_train[:1024],
                                       batch_sizes=quick.get("calibration_batches", eb.CALIBRATION_BATCHES))
        calibration["seconds"] = time.perf_counter() - t
        with tempfile.TemporaryDirectory() as tmp:
            packed_file = Path(tmp) / "net.packed.npz"
            ebf.save_packed(packed_file, packed)
            packed = ebf.load_packed(packed_file)  # the deployed model: its plan travels with it
            sizes = byte_counts(net, packed, packed_file, Path(tmp))
        fw = float32_weights(net)
        scale32 = np.float32(packed.scale)
        case = {"network": name, "description": describe(net),
                **agreement(net, packed, fw, scale32, data, n_numpy, n_single), **sizes,
                "calibration": calibration, **speeds(packed, fw, scale32, data.x_test, n_single, rounds)}
        cases.append(case)
        if name == HIDDEN_CASE:
            hidden = hidden_layer(packed, fw, scale32, data.x_test, n_single, rounds)
        print(f"{name}: mismatches {case['mismatches']} (one at a time {case['mismatches_auto_b1']}; engines numba "
              f"{case['mismatches_numba_engine']}, blas {case['mismatches_blas_engine']}, numpy "
              f"{case['mismatches_numpy_engine']}; first layer rechecked {case['first_layer_rechecked']}, exact "
              f"{case['first_layer_near_ties']}; float32 path {case['mismatches_float32_blas_path']}), EBP-D test "
              f"error {100 * case['test_error_ebp_d']:.2f}%", flush=True)
        print(f"  bytes packed {case['bytes_packed']:,} (file {case['bytes_packed_file']:,}), float32 "
              f"{case['bytes_float32']:,} ({case['ratio_float32_over_packed']:.1f}x), float64 checkpoint "
              f"{case['bytes_float64_checkpoint']:,} ({case['ratio_float64_checkpoint_over_packed']:.1f}x)")
        print(f"  calibration ({calibration['seconds']:.1f} s): float32 BLAS from batch "
              f"{calibration['blas_from_batch']} per layer (None: packed at every size)")
        for label in BATCHES:
            print(f"  batch {BATCHES[label]:>4}: chosen {case[f'images_per_s_chosen_{label}']:,.0f} images/s "
                  f"({'/'.join(case[f'methods_chosen_{label}'])}), packed {case[f'images_per_s_packed_{label}']:,.0f}"
                  f", float32 BLAS {case[f'images_per_s_float_{label}']:,.0f}: chosen/float "
                  f"{case[f'speed_ratio_chosen_over_float_{label}']:.2f}, packed/float "
                  f"{case[f'speed_ratio_packed_over_float_{label}']:.2f}", flush=True)
    if hidden is not None:
        for label in BATCHES:
            row = hidden[label]
            print(f"hidden {hidden['shape']} alone, batch {BATCHES[label]}: packed {row['packed_us_per_image']:.2f} "
                  f"µs/image, sgemm {row['sgemm_us_per_image']:.2f} ({row['ratio_sgemm_over_packed']:.1f}x), float "
                  f"layer {row['float_layer_us_per_image']:.2f} ({row['ratio_float_layer_over_packed']:.1f}x)")

    loaded = records.finish_timing_record(info, args.allow_loaded)
    result = {"what": __doc__.split("\n")[0], "loaded": loaded, "quick": bool(args.quick), "machine": info,
              "training_protocol": protocol, "schema": SCHEMA,
              "timing": {"clock": "time.process_time (CPU seconds of this process); *_wall_clock: time.perf_counter",
                         "threads": 1, "single_images_per_round": n_single, "rounds": rounds,
                         "best_of_rounds": True,
                         "engines": "chosen: ebp_binary engine 'auto' with the calibrated plan; packed: engine "
                                    "'numba'; float: float32 BLAS",
                         "float_path": "float32 BLAS: x float32 @ sign(h).T float32, scale p, + b, sign"},
              "cases": cases, "hidden_layer": hidden, "targets": targets(cases), "seconds_total": None}
    result["seconds_total"] = time.perf_counter() - start
    for row in result["targets"]:
        print(f"{'met   ' if row['met'] else 'MISSED'} {row['target']}: {row['measured']}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    records.write_json(out_path, result)
    print(f"wrote {out_path} ({result['seconds_total']:.0f} s){' (LOADED MACHINE)' if loaded else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
