#!/usr/bin/env python
"""Regenerate the paper's Tables 2-4: run notebooks/experiment.ipynb once per table run, with papermill.

Every number of the paper's Tables 2, 3 and 4 is a row of scripts/paper_tables.csv, with the configuration
that reproduces it. EBP-P and EBP-D come from the same trained network, so the two rows share a run id and
are produced by one run. This script executes the experiment notebook for a selection of runs and seeds, on
local worker processes (or an existing Dask cluster), skipping runs already finished and resuming interrupted
ones from their checkpoint. Results land in outputs/runs/<profile>/<run>/ for MNIST, the paper's data set, and in
outputs/runs/<profile>-<dataset>/<run>/ for another (--dataset fashion-mnist; see outputs/README.md).

Examples (from the repository root; `python` is the project's interpreter, e.g. .venv/bin/python):

  python scripts/run_tables.py --all                       # every run, quick profile, all local cores
  python scripts/run_tables.py --table 2 --jobs 1          # Table 2 only, one worker
  python scripts/run_tables.py --table 3 --column 200 800  # two columns of Table 3
  python scripts/run_tables.py binary-200 real-800-800     # runs by id (see --list)
  python scripts/run_tables.py --all --profile paper       # the full protocol: 60,000 images, 120 epochs
  python scripts/run_tables.py --table 2 --seed 0 1 2      # three seeds (folders binary-200, binary-200-seed1, ...)
  python scripts/run_tables.py --table 4 --mask-reading held   # Table 4, masked weights held at h = 0 (-held)
  python scripts/run_tables.py --all --profile paper --dataset fashion-mnist   # into outputs/runs/paper-fashion-mnist/
  python scripts/run_tables.py --profile extended binary-800-800-dropout-sampled   # 200 epochs: where it settles
  python scripts/run_tables.py --all --list                # show what would run and each run's state
  python scripts/run_tables.py --all --profile paper --scheduler tcp://host:8786   # on a Dask cluster
  python scripts/run_tables.py --table 2 --engine jax      # the JAX engine (EBP as jax.grad) in each notebook
  python scripts/run_tables.py --table 2 --seed 0 1 2 --engine jax --group-seeds   # each run's seeds side by side

Killing the runner (Ctrl-C, SIGTERM, or the machine going away) loses at most the epoch in progress of each
running job: rerun the same command and it skips finished runs and resumes the others from their checkpoint.
The work is done by the package reproduction (paper_tables makes the jobs, runner runs them); this file is its
command line.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ebp_lib
import ebp_train
from reproduction import folder, group, paper_tables, parameters, records, runner

STATES_HELP = """\
Run states (--list): new; partial (resumes after its last epoch); running (another process holds its lock);
finished (skipped); stale (a finished run of other parameters: left alone, never trained over; move its folder
away to train this run there); corrupt (its checkpoint or result.json cannot be read: when the batch runs, the file
is moved aside to <name>.corrupt-<UTC time> and the run restarts without it); inconsistent (result.json disagrees
with itself, with checkpoint.npz or with what its executed notebook printed, e.g. an edited result: the field and
the files are named, nothing is touched or trained); unverified (a finished result.json without its evidence: no
executed notebook and no verification.json from `python -m reproduction.verify`; left alone, and not published);
newer (a result.json written by a newer version of the project: left alone).

Results: outputs/runs/<profile>[-<dataset>]/<run>[-seed<N>]/{experiment.ipynb, result.json, learning_curve.png}
and, while a run is unfinished, checkpoint.npz (deleted once the finished result, the checkpoint and the executed
notebook have been checked to agree); -<dataset> only for data sets other than
MNIST (e.g. paper-fashion-mnist), so the MNIST folders keep their names and two data sets never share a folder.

Exit status: 0 when every selected run finished, was skipped, or is busy in another process (a run another
runner is training is not a failure); 1 if a run failed or was left alone (inconsistent, stale, unverified, newer); 2 for a bad
command line; 130 if interrupted.
"""


def parse_args(argv=None) -> argparse.Namespace:
    quick, paper, extended = parameters.PROFILES["quick"], parameters.PROFILES["paper"], parameters.PROFILES["extended"]
    parser = argparse.ArgumentParser(
        prog="run_tables.py", description=__doc__.split("\nThe work is done by")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Profiles: quick = {quick['epochs']} epochs on the first {quick['n_train']:,} training images; "
               f"paper = {paper['epochs']} epochs on all {parameters.FULL_TRAIN:,} training images (the paper's "
               f"protocol); extended = {extended['epochs']} epochs on all of them (beyond the paper's protocol, for "
               f"runs still improving at epoch {paper['epochs']}).\n\n{STATES_HELP}")
    parser.add_argument("run_ids", nargs="*", metavar="RUN_ID",
                        help="runs by id, e.g. binary-200, real-800-800-dropout, binary-block13 (see --list)")
    parser.add_argument("--all", action="store_true", help="every run of Tables 2, 3 and 4")
    parser.add_argument("--table", nargs="+", type=int, metavar="N", help="only these tables (2, 3, 4)")
    parser.add_argument("--column", nargs="+", metavar="COL",
                        help="only these columns, e.g. 200 [800,800] 800-800 144 361-100")
    parser.add_argument("--weights", nargs="+", choices=parameters.WEIGHTS, help="only binary or only real weights")
    parser.add_argument("--profile", choices=sorted(parameters.PROFILES), default="quick", help="default: quick")
    parser.add_argument("--seed", nargs="+", type=int, default=[0], metavar="N",
                        help="train each run with these seeds (default 0); seed 0 keeps the run's folder name, "
                             "others get -seed<N> appended, e.g. binary-200-seed1")
    parser.add_argument("--dropout-reading", choices=parameters.DROPOUT_READINGS, default="sampled",
                        help="how dropout enters EBP for Table 3 runs: sampled (default; Bernoulli masks on the "
                             "inputs and hidden units, the paper's text and the reading Table 3 shows first) or "
                             "analytic (the authors' code); recorded in each result and in the run's folder name")
    parser.add_argument("--mask-reading", choices=parameters.MASK_READINGS, default=ebp_lib.DEFAULT_MASK_READING,
                        help="Table 4 only: the weights outside a spatial unit's block are absent (default) or "
                             "held at h = 0 as in the paper's full matrix (docs/maths.md, Spatial filtering); "
                             "held runs go to <run>-held/, e.g. binary-block13-held")
    parser.add_argument("--update", "--real-update", dest="update", choices=parameters.UPDATES,
                        default=ebp_lib.DEFAULT_UPDATE,
                        help="the spec's update or one of the authors' codes (docs/maths.md): "
                             f"{parameters.updates_help()}. Such runs go to <run>-<update>/, e.g. "
                             "binary-200-<update> (--real-update: its earlier name, still accepted)")
    parser.add_argument("--dataset", choices=parameters.DATASET_CHOICES, default="mnist",
                        help="train the same runs on this data set (default mnist, the paper's); another data set's "
                             "runs go to outputs/runs/<profile>-<dataset>/, e.g. paper-fashion-mnist/binary-200")
    parser.add_argument("--jobs", type=int, default=None,
                        help="runs (with --group-seeds: groups of runs) at once (default: the number of local "
                             "cores; with --scheduler: all)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="an existing Dask scheduler (e.g. tcp://10.0.0.5:8786) to run the jobs on instead "
                             "of local worker processes; its workers must have this project installed in their "
                             "environment and see this repository and the data folder at the same paths (workers "
                             "that cannot import it are named and given no run)")
    parser.add_argument("--run-timeout", type=float, metavar="SECONDS",
                        help="fail a run that has not answered this long after it was sent to a worker (default: "
                             "from its cost estimate, 15 min plus 5 times its expected time); the batch goes on")
    parser.add_argument("--runs-dir", type=Path, default=folder.RUNS_DIR, help="default: outputs/runs")
    parser.add_argument("--data-dir", type=Path,
                        help="folder holding mnist/ and fashion-mnist/ (default: $EBP_DATA_DIR); it travels with "
                             "every job, so Dask workers read the same folder")
    parser.add_argument("--progress-every", type=float, default=30.0, metavar="SECONDS",
                        help="print a progress line at least this often (default 30)")
    parser.add_argument("--engine", choices=list(ebp_train.ENGINES),
                        help=f"the engine that trains and evaluates each run (default: the notebook's, "
                             f"{ebp_train.DEFAULT_ENGINE!r}); passed to the notebook as its run option `engine`, named in "
                             f"each result.json; a run is resumed only by the engine that began it, and a finished run "
                             f"is skipped whichever engine trained it")
    parser.add_argument("--group-seeds", action="store_true",
                        help="with --engine jax: train the runs that differ only in their seed side by side in one "
                             "task (vmap over the runs, reproduction/group.py), each run exactly as it trains alone; "
                             "each run's folder, checkpoint, result.json and resume are those of a run alone (on a "
                             "CPU, JAX spreads one group over every core: --jobs 1 avoids two groups competing)")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="let runs of the paper's or a longer protocol start from code (modules, scripts, the "
                             "experiment notebook, the pinned environment) that differs from its commit; refused "
                             "otherwise, since their results are quoted. Each record's git_dirty and git_changed "
                             "say so")
    parser.add_argument("--list", action="store_true",
                        help="list the selected runs, their state and epochs done; run nothing")
    args = parser.parse_args(argv)
    if not (args.all or args.table or args.column or args.run_ids or args.weights):
        parser.error("choose what to run: --all, --table, --column, --weights and/or run ids")
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.run_timeout is not None and not args.run_timeout > 0:
        parser.error("--run-timeout must be a positive number of seconds")
    if args.group_seeds and args.engine not in group.GROUPED_ENGINES:
        parser.error(f"--group-seeds trains runs side by side with the JAX engine: add --engine "
                     f"{' or '.join(group.GROUPED_ENGINES)}")
    if any(seed < 0 for seed in args.seed):
        parser.error("--seed values must be integers >= 0")
    args.seed = list(dict.fromkeys(args.seed))
    return args


def list_jobs(jobs: list) -> None:
    """One line per run: its folder name, state, epochs done and table cells; the files of corrupt and
    inconsistent runs and what is wrong with them below it."""
    for job in jobs:
        state = folder.job_state(job)
        name = state.state
        if name not in ("finished", *runner.LEFT_ALONE) and folder.is_locked(job.output_dir):
            name = "running"
        print(f"{job.key:<32} {name:<12} {state.epochs:>3}/{job.config.epochs} epochs  {'; '.join(job.cells)}")
        for problem in state.problems:
            print(f"    {problem}")
        if state.problems:
            print(f"    files: {', '.join(map(str, state.files))}")


def run(argv=None) -> tuple[int, list[dict]]:
    """The command line `argv` carried out: (its exit status, the outcome of every run it ran; none for --list or an
    error before any run)."""
    args = parse_args(argv)
    try:
        rows = paper_tables.select_rows(paper_tables.read_paper_tables(), args.table, args.column, args.run_ids,
                                        args.weights)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2, []
    if not rows:
        print("error: these filters select no table cell", file=sys.stderr)
        return 2, []
    try:  # every job's RunConfig is built and validated here, once (paper_tables.make_jobs)
        jobs = paper_tables.make_jobs(rows, paper_tables.Selection(
            args.profile, args.dropout_reading, args.seed, args.mask_reading, args.dataset, args.update,
            args.engine, args.runs_dir, args.data_dir))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2, []
    if args.list:
        list_jobs(jobs)
        return 0, []
    profile = parameters.PROFILES[args.profile]
    quoted = parameters.protocol_relative_to_paper(profile) != "shortened"
    try:
        records.code_state(allow_dirty=args.allow_dirty or not quoted)
    except records.DirtyTreeError as err:
        print(f"error: profile {args.profile}: {err}", file=sys.stderr)
        return 2, []
    if args.allow_dirty:
        jobs = [job.replace(env={**job.environment, records.ALLOW_DIRTY_VAR: "1"}) for job in jobs]
    n_train = profile["n_train"] or parameters.FULL_TRAIN
    print(f"profile {args.profile}: {profile['epochs']} epochs, {n_train:,} training images of {args.dataset}; "
          f"seeds {', '.join(map(str, args.seed))}; dropout reading "
          f"{args.dropout_reading}; mask reading {args.mask_reading}; update {args.update}; engine "
          f"{jobs[0].engine or ebp_train.DEFAULT_ENGINE}{', seeds of a run trained together' if args.group_seeds else ''}; "
          f"results in "
          f"{args.runs_dir / folder.results_folder(args.profile, args.dataset)}")
    try:
        outcomes = runner.run_batch(jobs, args.jobs, args.scheduler, args.progress_every,
                                    run_timeout_s=args.run_timeout,
                                    grouping=group if args.group_seeds else None)
    except OSError as err:  # e.g. no scheduler at that address
        print(f"error: {records.describe_error(err)}", file=sys.stderr)
        return 1, []
    print(runner.summary(jobs, outcomes))
    return runner.exit_status(outcomes), outcomes


def main(argv=None) -> int:
    return run(argv)[0]


if __name__ == "__main__":
    sys.exit(main())
