#!/usr/bin/env python
"""Train the backpropagation baseline (ebp_backprop.py): scikit-learn tanh MLPs on MNIST and Fashion-MNIST.

One process, one BLAS thread, runs one after another: for each selected configuration and dataset, the
learning-rate grid on a validation split of the training set, then the chosen rate on all training images.
Finished runs are skipped; an interrupted run resumes (grid per rate, training per epoch). Results land in
outputs/backprop/<dataset>/<config>/result.json (checkpoint.pkl while unfinished; do not commit it).

Examples (from the repository root; `python` is the project's interpreter, e.g. .venv/bin/python):

  python scripts/run_backprop.py --paper                   # the paper's two configurations, both datasets
  python scripts/run_backprop.py --all                     # and every EBP Table 2 width (200 ... [800,800])
  python scripts/run_backprop.py tanh-400 --dataset mnist  # one configuration on one dataset
  python scripts/run_backprop.py --all --list              # state of every run; runs nothing
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ebp_backprop as bp  # noqa: E402


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
    parser.add_argument("--out", type=Path, default=bp.OUTPUT_DIR, help="default: outputs/backprop")
    parser.add_argument("--data-dir", type=Path, help="folder holding mnist/ and fashion-mnist/ "
                                                      "(default: $EBP_DATA_DIR or .cache/data)")
    parser.add_argument("--epochs", type=int, help=f"final epochs (default {bp.PROTOCOL['epochs']})")
    parser.add_argument("--batch-size", type=int, help=f"default {bp.PROTOCOL['batch_size']}")
    parser.add_argument("--grid", type=float, nargs="+", metavar="RATE", dest="learning_rate_grid",
                        help=f"learning rates (default {bp.PROTOCOL['learning_rate_grid']})")
    parser.add_argument("--grid-epochs", type=int, help=f"default {bp.PROTOCOL['grid_epochs']}")
    parser.add_argument("--n-validation", type=int, help=f"default {bp.PROTOCOL['n_validation']}")
    parser.add_argument("--n-train", type=int, help="only the first N training images (default: all)")
    parser.add_argument("--seed", type=int, help=f"default {bp.PROTOCOL['seed']}")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    parser.add_argument("--list", action="store_true", help="show the selected runs' state; run nothing")
    args = parser.parse_args(argv)
    unknown = [c for c in args.configs if c not in bp.CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; choose from {', '.join(bp.CONFIGS)}")
    if not (args.configs or args.paper or args.all):
        parser.error("choose what to run: --paper, --all and/or configuration names")
    return args


def select_jobs(args) -> list[tuple[dict, Path]]:
    """(parameters, folder) of every selected run: the paper's configurations first (dataset by dataset, in
    the order given), then the others."""
    chosen = set(args.configs) | (set(bp.CONFIGS) if args.all else set()) | (
        set(bp.PAPER_CONFIGS) if args.paper else set())
    overrides = {k: getattr(args, k) for k in ("epochs", "batch_size", "learning_rate_grid", "grid_epochs",
                                                "n_validation", "n_train", "seed")}
    jobs = []
    for group in ([c for c in bp.CONFIGS if c in bp.PAPER_CONFIGS], [c for c in bp.CONFIGS
                                                                       if c not in bp.PAPER_CONFIGS]):
        for dataset in args.dataset:
            for config in group:
                if config in chosen:
                    jobs.append((bp.make_parameters(dataset, config, **overrides),
                                 bp.run_dir(dataset, config, args.out)))
    return jobs


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        jobs = select_jobs(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.list:
        for params, folder in jobs:
            print(f"{params['dataset']:>13} {params['config']:<12} {bp.run_state(folder, params)}")
        return 0
    from threadpoolctl import threadpool_limits

    bp.process_git_state()  # every run of this process records the commit its code was imported from
    failed = 0
    with threadpool_limits(limits=args.threads):
        for params, folder in jobs:
            if bp.is_finished(folder, params):
                print(f"{params['dataset']} {params['config']}: finished, skipped")
                continue
            try:
                result = bp.run(params, folder, data_dir=args.data_dir)
            except ValueError as err:  # e.g. a folder holding other parameters: leave it, go on
                print(f"error: {params['dataset']} {params['config']}: {err}", file=sys.stderr)
                failed += 1
                continue
            print(f"{params['dataset']} {params['config']}: test error {100 * result['final']['test_error']:.2f}% "
                  f"after {result['epochs_done']} epochs at rate {result['learning_rate']:g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
