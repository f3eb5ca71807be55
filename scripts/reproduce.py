#!/usr/bin/env python
"""`make reproduce`: train the selected runs of Tables 2-4, render the tables from whatever finished, say where.

    python scripts/reproduce.py [the options of scripts/run_tables.py]     e.g. --all --profile quick

1. scripts/run_tables.py with these options trains the runs (skipping finished ones, resuming partial ones).
2. notebooks/tables.ipynb is executed into <runs>/<profile>[-<dataset>]/tables.ipynb with papermill, whether or
   not every run finished: the tables show what did, and say which cells are missing. It writes
   <runs>/<profile>/tables.md, summary.md and agreement.png (MNIST) and <runs>/<profile>-fashion-mnist/tables.md
   (MNIST beside Fashion-MNIST).
3. The last lines say where those files are; for a profile shorter than the paper's, that it is a smoke test; and
   when runs failed, how many, and that running the same command again resumes them.

Exit status: run_tables.py's (0 when every run finished or was skipped, 1 if one failed, 2 for a bad command line,
130 if interrupted), or 1 if the tables notebook failed.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from reproduction import folder, paper_tables, parameters, runner

ROOT = Path(__file__).resolve().parents[1]
TABLES_NOTEBOOK = ROOT / "notebooks" / "tables.ipynb"


def _run_tables():
    spec = importlib.util.spec_from_file_location("run_tables", ROOT / "scripts" / "run_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered_files(runs_dir: Path, profile: str) -> dict[str, Path]:
    """What the tables notebook writes for `profile` under `runs_dir`, by what it is."""
    mnist, fashion = runs_dir / profile, runs_dir / folder.results_folder(profile, "fashion-mnist")
    return {"tables": mnist / "tables.md", "summary": mnist / "summary.md", "figure": mnist / "agreement.png",
            "Fashion-MNIST beside MNIST": fashion / "tables.md"}


def render_tables(runs_dir: Path, profile: str, dataset: str) -> tuple[Path, BaseException | None, str | None]:
    """Execute the tables notebook on the runs under `runs_dir` (files on disk, not only committed ones):
    (the executed notebook, papermill's error or None, a sentence if its kernel had to be started again)."""
    executed = runs_dir / folder.results_folder(profile, dataset) / "tables.ipynb"
    executed.parent.mkdir(parents=True, exist_ok=True)
    error, retried = runner.execute_notebook(
        str(TABLES_NOTEBOOK), executed, cwd=str(TABLES_NOTEBOOK.parent), kernel_name="python3",
        progress_bar=False, log_output=False,
        parameters={"profile": profile, "committed_only": False, "runs_dir": str(runs_dir),
                    "tables_markdown": str(runs_dir / "{profile}" / "tables.md"),
                    "comparison_markdown": str(runs_dir / "{folder}" / "tables.md")})
    return executed, error, retried


def selection_note(args, selected: int) -> str:
    """Why the command trained `selected` runs: the tables' runs in one dropout reading; the other reading's runs
    (Table 3's dropout runs again, in their own folders) are a selection of their own."""
    rows = paper_tables.select_rows(paper_tables.read_paper_tables(), args.table, args.column, args.run_ids,
                                    args.weights)
    dropout_runs = len({r["run_id"] for r in rows if r["dropout"] == "yes"}) * len(args.seed)
    other = [r for r in parameters.DROPOUT_READINGS if r != args.dropout_reading]
    return (f"{selected} runs selected: Tables 2-4 with Table 3 in the {args.dropout_reading} dropout reading; the "
            f"{dropout_runs} dropout runs in the {' or '.join(other)} reading are a selection of their own: "
            f"make reproduce RUN_ARGS=\"--dropout-reading {other[0]}\"")


def seeds_note(args) -> str | None:
    """One seed per cell gives no run-to-run spread, so no band: the tables show the paper beside ours, unjudged."""
    if len(args.seed) > 1:
        return None
    return ("one seed: no band (the band needs two seeds or more per cell; the tables show the paper's number beside "
            "ours without judging it): RUN_ARGS=\"--seed 0 1 2\" trains three")


def closing_lines(runs_dir: Path, profile: str, executed: Path, failed: int, notes=()) -> list[str]:
    """Where the tables and the figure are; a smoke-test warning for a shortened profile; `notes`; last, what to do
    about failed runs (the line a reader acts on)."""
    lines = [f"{what}: {path}" for what, path in rendered_files(runs_dir, profile).items() if path.exists()]
    lines.append(f"the executed tables notebook: {executed}")
    known = parameters.PROFILES.get(profile)
    if known and parameters.protocol_relative_to_paper(known) == "shortened":
        lines.append(f"profile {parameters.profile_label(profile)} is a smoke test, not the paper's protocol: it "
                     f"checks that every run trains and learns, and its numbers are not comparable with the "
                     f"paper's (`make reproduce PROFILE=paper` runs the paper's protocol)")
    lines += [note for note in notes if note]
    if failed:
        lines.append(f"{failed} run{'s' if failed != 1 else ''} failed: re-run `make reproduce` to resume them")
    return lines


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_tables = _run_tables()
    args = run_tables.parse_args(argv)
    status, outcomes = run_tables.run(argv)
    if args.list or status == 2:
        return status
    print(selection_note(args, len(outcomes)))
    runs_dir = args.runs_dir.resolve()
    print(f"rendering the tables of profile {args.profile} from the runs in {runs_dir} (notebooks/tables.ipynb)")
    executed, error, retried = render_tables(runs_dir, args.profile, args.dataset)
    if retried:
        print(f"NOTE tables: {retried}")
    if error is not None:
        print(f"error: the tables notebook failed ({type(error).__name__}: {error}); its executed copy, up to the "
              f"failing cell: {executed}", file=sys.stderr)
        status = status or 1
    failed = sum(o["status"] == "failed" for o in outcomes)
    print("\n".join(closing_lines(runs_dir, args.profile, executed, failed, [seeds_note(args)])))
    return status


if __name__ == "__main__":
    sys.exit(main())
