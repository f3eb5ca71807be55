#!/usr/bin/env python
"""Train EBP's successors (reproduction/successors.py): STE / BinaryConnect, Bop and BayesBiNN on the paper's nets,
and on EBP's CNNs (--arch lenet, wide or a c<k>x<channels>s<stride> name: successors.cnn, profile "cnn", 30 epochs at most).

One process, one CPU thread (XLA's and BLAS's), runs one after another: for each selected method, net, dataset and
seed, the grid (preprocessing x the method's hyperparameters) on a validation split of the training set, then the
chosen point with its schedule and early stopping, then the evaluation of the best epoch's ±1 net through
ebp_binary's packed inference. Every seed runs its own grid (--tune-seed 0: the grid runs once per method, net
and dataset, on seed 0, and the other seeds train at the point it chose, recorded as protocol "shortened").
Order: the seeds in increasing order (every seed-0 run first), then the datasets, nets and methods in the order
given (by default MNIST [784, 800, 10] with all three methods first). Finished runs are skipped; an interrupted
run resumes (grid per point, training per epoch): run the same command again. Two processes with disjoint --seed
(without --tune-seed) or disjoint --dataset share a 2-core machine.
Results: outputs/successors/<profile>/<dataset>/<method>-<arch>[-seed<N>]/result.json and binary_net.npz
(checkpoint.npz while unfinished; never commit it).

Examples (from the repository root; `python` is the project's interpreter, e.g. .venv/bin/python):

  python scripts/run_successors.py --profile smoke                       # every run, smoke profile (minutes)
  python scripts/run_successors.py --seed 0 1 2                           # the full protocol: 3 methods x 2 nets x 2 datasets
                                                                          # (at most ~8.5 core-hours: notebooks/successors.ipynb)
  python scripts/run_successors.py --method bop --arch 800 --dataset mnist
  python scripts/run_successors.py --method ebp-tuned ebp-tuned-dropout --seed 0 1 2   # EBP tuned like them
  python scripts/run_successors.py --seed 0 1 2 --list                    # state of every run; runs nothing
  python scripts/run_successors.py --profile sensitivity --method ste --arch 800 --dataset fashion-mnist --seed 0 1 2
  python scripts/run_successors.py --arch lenet --dataset mnist fashion-mnist --seed 0 1 2    # the CNN comparison
"""
from __future__ import annotations

import argparse
import os
import sys

from reproduction import successors as sc
from reproduction import tuned
from successors import registry

SUCCESSOR_NAMES = registry.SUCCESSORS  # the registry imports no method: the command line is parsed without JAX
METHOD_NAMES = tuple(registry.METHODS)  # and EBP on the successors' terms (successors.ebp)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="run_successors.py", description=__doc__.split("\nExamples")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", nargs="+", choices=METHOD_NAMES, default=list(SUCCESSOR_NAMES),
                        help="default: the three successors; ebp-tuned (-dropout): EBP tuned like them")
    parser.add_argument("--arch", nargs="+", default=list(sc.ARCHITECTURES),
                        help="hidden sizes joined by '-' (default: the paper's 800 and 800-800), or a CNN: lenet, wide "
                             "(ebp_conv_catalogue) or its c<k>x<channels>s<stride> name")
    parser.add_argument("--dataset", nargs="+", choices=sc.DATASETS, default=list(sc.DATASETS))
    parser.add_argument("--seed", nargs="+", type=int, default=[0], help="seeds (default 0)")
    parser.add_argument("--profile", choices=sc.PROFILES, default=None,
                        help="tuned: the full protocol (default for a dense net); cnn: the same at EBP's CNN budget of "
                             "30 epochs (default, and with smoke the only choice, for a CNN); "
                             "sensitivity: the grid scored after 10 epochs and "
                             "stopping after 30 without a best (outputs/successors/sensitivity); smoke: a pipeline "
                             "check in minutes, recorded as protocol 'smoke' under outputs/successors/smoke")
    for name in ("grid_epochs", "max_epochs", "patience", "stop_patience", "n_train", "n_validation", "mc_samples"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, dest=name)
    parser.add_argument("--tune-seed", type=int, dest="tune_seed",
                        help="run the grid on this seed only and train the other seeds at its choice (default: "
                             "every seed runs its own grid)")
    parser.add_argument("--out", default=sc.OUTPUT_DIR, help="default: outputs/successors")
    parser.add_argument("--data-dir", help="folder holding mnist/ and fashion-mnist/ (default: $EBP_DATA_DIR)")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="run although the code differs from its commit (development only; recorded)")
    parser.add_argument("--list", action="store_true", help="show the selected runs' state; run nothing")
    return parser.parse_args(argv)


def select_jobs(args) -> list[tuple[dict, object]]:
    """(parameters, folder) of every selected run, all validated: seed by seed (increasing; with --tune-seed, that
    seed first, whose grid the others use), dataset, net, method."""
    overrides = {k: getattr(args, k) for k in ("grid_epochs", "max_epochs", "patience", "stop_patience", "n_train",
                                               "n_validation", "mc_samples", "tune_seed")}
    jobs = []
    for seed in sorted(set(args.seed), key=lambda s: (s != args.tune_seed, s)):
        for dataset in args.dataset:
            for arch in args.arch:
                for method in args.method:
                    params = sc.make_parameters(method, dataset, arch, args.profile, seed=seed, **overrides)
                    jobs.append((params, sc.run_dir(params, args.out)))
    return jobs


def one_thread() -> None:
    """XLA on one CPU thread (set before JAX is imported), BLAS too: runs share the machine fairly."""
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")


def main(argv=None) -> int:
    one_thread()
    args = parse_args(argv)
    return tuned.command(args, select_jobs, sc.run, sc.run_state, name_width=24)


if __name__ == "__main__":
    sys.exit(main())
