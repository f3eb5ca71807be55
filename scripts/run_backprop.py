#!/usr/bin/env python
"""Train the backpropagation baseline (reproduction/backprop.py): tanh MLPs on MNIST and Fashion-MNIST.

One process, one BLAS thread, runs one after another: for each selected configuration, dataset and seed, the
grid (preprocessing x learning rate) on a validation split of the training set, then the chosen point with its
learning-rate schedule and early stopping. Finished runs are skipped; an interrupted run resumes (grid per point,
training per epoch). Results land in outputs/backprop/<dataset>/<config>[-seed<N>]/result.json
(checkpoint.npz while unfinished; never commit it).

Examples (from the repository root; `python` is the project's interpreter, e.g. .venv/bin/python):

  python scripts/run_backprop.py --paper --seed 0 1 2      # the paper's two configurations, both datasets
  python scripts/run_backprop.py --all                     # and every EBP Table 2 width (200 ... [800,800])
  python scripts/run_backprop.py tanh-400 --dataset mnist  # one configuration on one dataset
  python scripts/run_backprop.py --all --list              # state of every run; runs nothing
"""
from __future__ import annotations

import argparse
import sys

from reproduction import backprop as bp
from reproduction import tuned

OVERRIDES = ("batch_size", "learning_rate_grid", "preprocessing_grid", "grid_epochs", "max_epochs", "patience",
             "stop_patience", "n_validation", "n_train")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="run_backprop.py", description=__doc__.split("\nExamples")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Protocol (defaults): " + bp.describe_protocol(
                                         bp.make_parameters("mnist", "tanh-800")) + ".")
    parser.add_argument("configs", nargs="*", metavar="CONFIG", help=f"configurations: {', '.join(bp.CONFIGS)}")
    parser.add_argument("--paper", action="store_true", help=f"the paper's two: {', '.join(bp.PAPER_CONFIGS)}")
    parser.add_argument("--all", action="store_true", help="every configuration (the paper's first)")
    parser.add_argument("--dataset", nargs="+", choices=bp.DATASETS, default=list(bp.DATASETS),
                        help="default: both")
    parser.add_argument("--seed", nargs="+", type=int, default=[0], help="seeds (default 0)")
    parser.add_argument("--out", default=bp.OUTPUT_DIR, help="default: outputs/backprop")
    parser.add_argument("--data-dir", help="folder holding mnist/ and fashion-mnist/ "
                                           "(default: $EBP_DATA_DIR or .cache/data)")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--grid", type=float, nargs="+", metavar="RATE", dest="learning_rate_grid")
    parser.add_argument("--preprocessing", nargs="+", choices=bp.PREPROCESSINGS, dest="preprocessing_grid")
    for name in ("grid_epochs", "max_epochs", "patience", "stop_patience", "n_validation", "n_train"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, dest=name)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="run although the code differs from its commit (development only; recorded)")
    parser.add_argument("--list", action="store_true", help="show the selected runs' state; run nothing")
    args = parser.parse_args(argv)
    unknown = [c for c in args.configs if c not in bp.CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; choose from {', '.join(bp.CONFIGS)}")
    if not (args.configs or args.paper or args.all):
        parser.error("choose what to run: --paper, --all and/or configuration names")
    return args


def select_jobs(args) -> list[tuple[dict, str]]:
    """(parameters, folder) of every selected run, all validated: the paper's configurations first (seed by
    seed, dataset by dataset), then the others."""
    chosen = set(args.configs) | (set(bp.CONFIGS) if args.all else set()) | (
        set(bp.PAPER_CONFIGS) if args.paper else set())
    overrides = {k: getattr(args, k) for k in OVERRIDES}
    jobs = []
    for group in (bp.PAPER_CONFIGS, [c for c in bp.CONFIGS if c not in bp.PAPER_CONFIGS]):
        for seed in args.seed:
            for dataset in args.dataset:
                for config in group:
                    if config in chosen:
                        jobs.append((bp.make_parameters(dataset, config, seed=seed, **overrides),
                                     bp.run_dir(dataset, config, seed, args.out)))
    return jobs


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    args = parse_args(argv)
    with threadpool_limits(limits=args.threads):
        return tuned.command(args, select_jobs, bp.run, bp.run_state, name_width=18)


if __name__ == "__main__":
    sys.exit(main())
