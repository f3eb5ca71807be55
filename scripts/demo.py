"""A short demonstration: train a [784, 200, 10] binary-weight network with EBP for one epoch on MNIST.

Usage: python scripts/demo.py [--epochs N] [--hidden H] [--weights binary|real]
Prints the EBP-P and EBP-D test error after every epoch (the paper's protocol is 120 epochs). The compiled
engine is compiled first, on a throwaway network and 20 images (about 30 s the first time, a few seconds once
numba's cache holds it), so the epoch times printed are training alone.
"""
import argparse
import time

import numpy as np

import ebp_data
import ebp_lib as ebp
import ebp_train
from reproduction.parameters import paper_architecture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--hidden", default="200", help="hidden layer sizes, e.g. 200 or 800-800, or block13")
    parser.add_argument("--weights", default="binary", choices=ebp.WEIGHTS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data = ebp_data.load_dataset("mnist")
    architecture = paper_architecture(args.hidden)
    compile_engine(data, architecture, args.weights)
    net = ebp.init_network(architecture, args.weights, seed=args.seed)
    print(f"EBP, {args.weights} weights, network {net.sizes}, batch size 10, "
          f"{len(data.x_train)} training images, {args.epochs} epoch(s)")
    ebp_train.fit(net, data, args.epochs, seed=args.seed, n_train_eval=0,
            on_epoch=lambda r: print(f"epoch {r['epoch']}: test error EBP-P {100 * r['test_ebp_p']:.2f}%, "
                                     f"EBP-D {100 * r['test_ebp_d']:.2f}% ({r['train_seconds']:.0f} s)"))


def compile_engine(data, architecture, weights) -> None:
    """Train and evaluate a throwaway network on 20 images, so that numba compiles (or loads from its cache) the
    engine's functions before the epochs are timed."""
    print("compiling the engine (about 30 s the first time; numba caches it for the next runs) ...", flush=True)
    start = time.perf_counter()
    warm = ebp.init_network(architecture, weights, seed=0)
    ebp_train.train_steps(warm, data.x_train[:20], data.y_train[:20], np.arange(20), 10, np.random.default_rng(0))
    ebp_train.evaluate(warm, data.x_test[:20], data.labels_test[:20])
    print(f"compiled in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
