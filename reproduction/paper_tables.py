"""The paper's Tables 2-4 as data, and the jobs that reproduce them.

Every number of the three tables is a row of paper_tables.csv (beside this file): table, row (e.g. B-EBP-P),
column (e.g. 200, [200,200], 144), the paper's error, the output it reads (ebp_p or ebp_d), and the configuration
that reproduces it. EBP-P and EBP-D come from the same trained network, so the two rows of one configuration share
a run id: the 100 cells are 50 runs. select_rows picks rows as the command line asks; make_jobs turns them, with a
Selection (profile, seeds, readings, update, data set, engine, folders), into one job (reproduction.job.Job) per
run and seed, which reproduction.runner executes.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import ebp_data
from ebp_lib import DEFAULT_MASK_READING, DEFAULT_UPDATE, update_applies
from reproduction.architectures import is_spatial
from reproduction.folder import RUNS_DIR, results_folder, run_key
from reproduction.job import Job
from reproduction.parameters import (
    DROPOUT_READINGS,
    NOTEBOOK,
    PROFILES,
    UPDATES,
    WEIGHTS,
    RunConfig,
    check_dataset,
    validate_engine,
)

TABLES_CSV = Path(__file__).with_name("paper_tables.csv")

TABLE_TITLES = {2: "Table 2: 1D input, no dropout", 3: "Table 3: 1D input, dropout p = 0.8",
                4: "Table 4: spatial filtering (local receptive fields), no dropout"}
ROW_LABELS = ("B-EBP-P", "B-EBP-D", "R-EBP-P", "R-EBP-D")


def read_paper_tables(path=TABLES_CSV) -> list[dict]:
    """The rows of paper_tables.csv, read on every call (never at import): table, row (e.g. B-EBP-P), column
    (e.g. 200, [200,200], 144), paper_error (percent), output (ebp_p/ebp_d), run_id, dataset, architecture,
    weights, dropout, keep."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["table"], row["paper_error"] = int(row["table"]), float(row["paper_error"])
        row["keep"] = float(row["keep"]) if row["keep"] else None
    return rows


def check_reading(reading: str) -> None:
    """ValueError naming the dropout readings if `reading` is not one of them."""
    if reading not in DROPOUT_READINGS:
        raise ValueError(f"unknown dropout reading {reading!r}; choose one of {', '.join(DROPOUT_READINGS)}")


def table_runs(rows: list[dict] | None = None, reading: str = "analytic") -> list[dict]:
    """One entry per run among the table rows `rows` (default: all of them; EBP-P and EBP-D share a run), in
    table order: run_id, key (the run's folder name), table, column, dataset, architecture (a paper name),
    weights, dropout (None or `reading`), keep, and the table cells it fills."""
    check_reading(reading)
    runs = {}
    for row in read_paper_tables() if rows is None else rows:
        cell = f"Table {row['table']} {row['row']} {row['column']}"
        if row["run_id"] in runs:
            runs[row["run_id"]]["cells"].append(cell)
            continue
        dropout = reading if row["dropout"] == "yes" else None
        runs[row["run_id"]] = {
            "run_id": row["run_id"], "key": run_key(row["run_id"], dropout), "table": row["table"],
            "column": row["column"], "dataset": row["dataset"], "architecture": row["architecture"],
            "weights": row["weights"], "dropout": dropout, "keep": row["keep"] or 0.8, "cells": [cell]}
    return list(runs.values())


def _column_key(label: str) -> str:
    """'[200,200]', '200-200' and '200,200' all name the same column."""
    return label.strip().strip("[]").replace(" ", "").replace("-", ",")


def select_rows(rows: list[dict], tables=None, columns=None, run_ids=None, weights=None) -> list[dict]:
    """The table rows matching every filter given (None = no filter). Unknown values raise ValueError,
    naming what exists, so a typo never selects nothing silently."""
    def check(asked, known, what):
        unknown = [a for a in asked if a not in known]
        if unknown:
            raise ValueError(f"unknown {what} {', '.join(map(str, unknown))}; known: {', '.join(map(str, known))}")

    out = rows
    if tables:
        check([int(t) for t in tables], sorted({r["table"] for r in rows}), "table")
        out = [r for r in out if r["table"] in {int(t) for t in tables}]
    if columns:
        wanted = {_column_key(c) for c in columns}
        check(sorted(wanted), sorted({_column_key(r["column"]) for r in rows}, key=lambda c: (len(c), c)), "column")
        out = [r for r in out if _column_key(r["column"]) in wanted]
    if run_ids:
        known = {r["run_id"] for r in rows}
        aliases = {f"{r['run_id']}-{reading}": r["run_id"] for r in rows if r["dropout"] == "yes"
                   for reading in DROPOUT_READINGS}  # the folder names of dropout runs work too
        aliases.update({f"{r['run_id']}-held": r["run_id"] for r in rows if is_spatial(r["architecture"])})  # held
        aliases.update({f"{r['run_id']}-{update}": r["run_id"] for r in rows for update in UPDATES
                        if update != "spec" and update_applies(update, r["weights"])})  # and the authors' updates
        check([i for i in run_ids if i not in aliases], sorted(known), "run id")
        wanted = {aliases.get(i, i) for i in run_ids}
        out = [r for r in out if r["run_id"] in wanted]
    if weights:
        check(list(weights), list(WEIGHTS), "weight type")
        out = [r for r in out if r["weights"] in weights]
    return out


def dataset_rows(rows: list[dict], dataset: str) -> list[dict]:
    """The table rows (read_paper_tables) with their data set replaced by `dataset`: the same runs, trained on
    another data set. The paper's numbers are MNIST's, so on another data set a row has no paper_error (None)."""
    check_dataset(dataset)
    return [{**row, "dataset": dataset, "paper_error": row["paper_error"] if row["dataset"] == dataset else None}
            for row in rows]


def check_mask_reading(rows: list[dict], mask_reading: str) -> None:
    """The held mask reading exists for locally connected nets only (Table 4's; the others have no masks):
    ValueError, saying what to select, if `rows` hold other nets. The value itself is checked by RunConfig."""
    others = sorted({str(r["table"]) for r in rows if not is_spatial(r["architecture"])})
    if mask_reading == "held" and others:
        raise ValueError(f"the held mask reading applies to Table 4 (spatial filtering) only, but the selection "
                         f"holds runs of Table {', '.join(map(str, others))}, whose layers have no masks: "
                         f"select --table 4")


def check_update_applies(rows: list[dict], update: str) -> None:
    """Each of the authors' updates (UPDATES other than "spec") exists for one weight type: ValueError, saying
    what to select, if `rows` hold cells of the other. The value itself is checked by RunConfig."""
    if update not in UPDATES:
        return
    other = sorted({r["weights"] for r in rows if not update_applies(update, r["weights"])})
    if other:
        weights = UPDATES[update].weights
        raise ValueError(f"the update {update!r} applies to {weights} weights only, but the selection holds "
                         f"{' and '.join(other)}-weight runs: select --weights {weights}")


def profile_engine(profile: dict, engine: str | None) -> str | None:
    """The engine of a batch: `engine` (validate_engine), or the profile's own where it names one (the float64
    mechanism profile, parameters.MECHANISMS); ValueError if the two differ, as the profile is about its engine."""
    if engine is not None:
        validate_engine(engine)
    own = profile.get("engine")
    if own is not None and engine is not None and engine != own:
        raise ValueError(f"profile {profile['name']} trains with the {own} engine: drop --engine {engine} "
                         f"(or give --engine {own})")
    return engine if engine is not None else own


@dataclass(frozen=True)
class Selection:
    """How a batch trains the table rows it selected (make_jobs), validated when built (ValueError): `profile`, a
    name in PROFILES or a dict like them (tests use tiny custom ones); the dropout `reading` of dropout rows
    (DROPOUT_READINGS); the `seeds`; the `mask_reading` ("held": Table 4 rows only, check_mask_reading), the
    `update` (one of the authors': rows of its weight type only, check_update_applies), both checked by each run's
    RunConfig; the `dataset` (None: the rows' own, MNIST); the `engine` (None: the profile's, else the notebook's
    default: profile_engine); where runs land (`runs_dir`) and the data folder (`data_dir`, else $EBP_DATA_DIR)."""
    profile: str | dict = "quick"
    reading: str = "analytic"
    seeds: tuple[int, ...] = (0,)
    mask_reading: str = DEFAULT_MASK_READING
    dataset: str | None = None
    update: str = DEFAULT_UPDATE
    engine: str | None = None
    runs_dir: Path = RUNS_DIR
    data_dir: Path | None = None

    def __post_init__(self):
        if isinstance(self.profile, str) and self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r}; choose one of {', '.join(PROFILES)}")
        check_reading(self.reading)
        object.__setattr__(self, "seeds", tuple(self.seeds))
        if not self.seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in self.seeds):
            raise ValueError(f"seeds={self.seeds!r}: give one or more integers >= 0")
        if self.dataset is not None:
            check_dataset(self.dataset)
        profile_engine(self.profile_settings, self.engine)

    @property
    def profile_settings(self) -> dict:
        """The profile's dict (PROFILES' entry for a name)."""
        return PROFILES[self.profile] if isinstance(self.profile, str) else self.profile


def make_jobs(rows: list[dict], selection: Selection) -> list[Job]:
    """One job per run among `rows` and seed of `selection` (EBP-P and EBP-D rows share a run), in table order,
    seeds inner.

    The data folder travels inside the job (its env), so that workers on other machines or started from other
    shells read the same files. The held mask reading trains the spatial layers with the paper's non-connected
    weights held at h = 0, into folders ending in -held; another data set trains the same runs into
    <runs_dir>/<results_folder(profile, dataset)>/<run>/ (e.g. paper-fashion-mnist/binary-200); one of the authors'
    updates into folders ending in -authors (or -authors-delta, -authors-variance, -authors-2015). The engine is
    passed to the notebook as the run option `engine`; the run's folder is the same whichever engine trains it, and
    its result.json names the engine.

    The command line's boundary: each job's RunConfig (its `config`) is built and validated here, once
    (ParameterError, a ValueError, naming every problem), and carried unchanged to the notebook.
    """
    check_mask_reading(rows, selection.mask_reading)
    check_update_applies(rows, selection.update)
    profile = selection.profile_settings
    engine = profile_engine(profile, selection.engine)
    if selection.dataset is not None:
        rows = dataset_rows(rows, selection.dataset)
    data_dir = selection.data_dir or os.environ.get(ebp_data.DATA_ENV_VAR)
    env = {ebp_data.DATA_ENV_VAR: str(Path(data_dir).resolve())} if data_dir else {}
    # the one place where the selection's settings meet RunConfig's names for them
    settings = {"mask_reading": selection.mask_reading, "update": selection.update, "epochs": profile["epochs"],
                "batch_size": profile["batch_size"], "n_train": profile["n_train"],
                "preprocessing": profile.get("preprocessing", "pixel")}
    jobs = []
    for run in table_runs(rows, selection.reading):
        for seed in selection.seeds:
            key = run_key(run["run_id"], run["dropout"], seed, selection.mask_reading, selection.update)
            out = Path(selection.runs_dir) / results_folder(profile["name"], run["dataset"]) / key
            config = RunConfig(dataset=run["dataset"], architecture=run["architecture"], weights=run["weights"],
                               dropout=run["dropout"], keep=run["keep"], seed=seed, **settings,
                               output_dir=os.path.relpath(out, NOTEBOOK.parent))
            jobs.append(Job(key, profile["name"], config, run["cells"], str(NOTEBOOK), env, engine))
    return jobs
