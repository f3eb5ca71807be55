#!/usr/bin/env python
"""Train architectures by name (beyond the paper's tables, e.g. the convolutional "c5x16s2-c5x32s2") with the
tables' runner: each run executes notebooks/experiment.ipynb into its own folder, with its record, checkpoint and
resume, skipping finished runs, exactly as scripts/run_tables.py runs a table's run.

Examples (from the repository root; `python` is the project's interpreter):

  python scripts/run_architecture.py c5x8s2-c5x16s2 c5x16s2-c5x32s2 --epochs 30 --seed 0 1 2
  python scripts/run_architecture.py c5x16s2-c5x32s2 --weights real --dataset fashion-mnist --epochs 30
  python scripts/run_architecture.py c5x16s2-c5x32s2 --epochs 30 --seed 0 1 2 --group-seeds   # seeds side by side
  python scripts/run_architecture.py c5x16s2-c5x32s2 --epochs 30 --list                     # states, no training
  python scripts/run_architecture.py lenet wide --epochs 30 --seed 0 1 2 --init variance1   # catalogue names

A name is an architecture name or an entry of ebp_conv_catalogue.CNNS ("lenet", "wide"); --init names an
initialisation scheme of ebp_conv_catalogue (default "reference": init_scale 1), recorded as the run's init_scale.
Runs land in <runs-dir>/<profile>[-<dataset>]/<weights>-<architecture>[-seed<N>]/, the profile being
"named-e<epochs>" (all 60,000 training images, batch 10, unless --n-train says otherwise), with "-<scheme>" added
for a scheme other than the reference (ebp_conv_catalogue.profile_name). Convolutional layers train
on the jax engine (the default here); the fast engine refuses them. Killing the runner loses at most each run's
epoch in progress: rerun the same command to resume.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ebp_conv_catalogue as catalogue
import ebp_train
from reproduction import architectures, folder, group, paper_tables, parameters, runner


def named_rows(architectures, weights) -> list[dict]:
    """One table-like row per (architecture, weight type): what paper_tables.make_jobs takes for a table's run."""
    return [{"table": "named", "row": f"{w} {name}", "column": name, "dataset": "mnist", "architecture": name,
             "weights": w, "dropout": "no", "keep": None, "run_id": f"{w}-{name}"}
            for name in architectures for w in weights]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("architectures", nargs="+", metavar="NAME",
                        help=f"e.g. c5x16s2-c5x32s2, 800-800, block13, or a catalogue name ({', '.join(catalogue.CNNS)})")
    parser.add_argument("--init", choices=catalogue.INIT_SCHEMES, default=catalogue.DEFAULT_SCHEME,
                        help="initialisation scheme (ebp_conv_catalogue)")
    parser.add_argument("--weights", nargs="+", choices=parameters.WEIGHTS, default=["binary"])
    parser.add_argument("--dataset", choices=parameters.DATASET_CHOICES, default="mnist")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--n-train", type=int, default=None, help="default: all 60,000 training images")
    parser.add_argument("--seed", nargs="+", type=int, default=[0])
    parser.add_argument("--engine", choices=list(ebp_train.ENGINES), default="jax")
    parser.add_argument("--group-seeds", action="store_true", help="train each run's seeds side by side (jax)")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    parser.add_argument("--runs-dir", type=Path, default=folder.RUNS_DIR)
    parser.add_argument("--list", action="store_true", help="show each run's state and train nothing")
    args = parser.parse_args(argv)
    args.architectures = [catalogue.architecture_of(name) for name in args.architectures]
    for name in args.architectures:
        try:
            architectures.architecture_layers(name)
        except ValueError as err:
            parser.error(str(err))
    if args.epochs < 1 or any(seed < 0 for seed in args.seed):
        parser.error("--epochs must be at least 1 and --seed values at least 0")
    if args.group_seeds and args.engine not in group.GROUPED_ENGINES:
        parser.error(f"--group-seeds needs --engine {' or '.join(group.GROUPED_ENGINES)}")
    return args


def make_jobs(args) -> list:
    """The runner's jobs of parsed arguments: one per architecture, weight type and seed, each RunConfig with the
    scheme's init_scale (the one setting the tables' jobs leave at its default). ValueError for a bad combination."""
    profile = {"name": catalogue.profile_name(args.epochs, args.n_train, args.init),
               "epochs": args.epochs, "n_train": args.n_train, "batch_size": 10}
    selection = paper_tables.Selection(profile, seeds=tuple(dict.fromkeys(args.seed)), engine=args.engine,
                                       dataset=None if args.dataset == "mnist" else args.dataset, runs_dir=args.runs_dir)
    jobs = paper_tables.make_jobs(named_rows(args.architectures, args.weights), selection)
    return [job.replace(config=job.config.replace(init_scale=catalogue.init_scale(args.init, job.config.layers)))
            for job in jobs]


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        jobs = make_jobs(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for job in jobs:
        state = folder.job_state(job)
        print(f"{job.key:<40} {state.state:<12} {state.epochs:>3}/{job.config.epochs} epochs  {job.output_dir}")
    if args.list:
        return 0
    outcomes = runner.run_batch(jobs, args.jobs, grouping=group if args.group_seeds else None)
    print(runner.summary(jobs, outcomes))
    return runner.exit_status(outcomes)


if __name__ == "__main__":
    sys.exit(main())
