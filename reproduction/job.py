"""The runner's job: one run of the experiment notebook, a frozen value validated once when it is built.

paper_tables.make_jobs builds the jobs of a batch (scripts/run_tables.py, scripts/run_architecture.py); the runner
(reproduction.runner) and a group of seeds (reproduction.group) take them as they are. A job is the run's
configuration (a RunConfig, whose output_dir is the run's folder relative to the notebook's, as the notebook reads
it), the notebook, the run's name in its batch (its folder's name), its profile, the table cells it fills, the
environment its notebook kernel needs (the data folder), and the engine when the batch names one (a run option).
The folder the runner locks and checks is the one the notebook writes: output_dir, read from the configuration.

A job crosses to a Dask worker pickled as it is (its fields are plain values and a RunConfig); to_dict and Job.of
are its plain form, for a process given the job as JSON.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import ebp_lib
from reproduction.parameters import FULL_TRAIN, NOTEBOOK, RunConfig, validate_engine

# Set to one thread in every notebook kernel: a batch runs one job per core.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
# Set for the JAX engine: each process takes GPU memory as it needs it, instead of 75% of it at its first array
# (a group's worker process and then each run's notebook kernel use the same GPU one after the other).
JAX_VARS = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


@dataclass(frozen=True)
class Job:
    """One run as the runner executes it: `key` (its folder's name, which names it in its batch), `profile` (the
    profile's name), `config` (its RunConfig, output_dir included), `cells` (the table cells it fills),
    `notebook` (the experiment notebook's path), `env` (variables its notebook kernel needs, as sorted (name,
    value) pairs; a mapping is accepted) and `engine` (None: the notebook's default). ValueError naming every
    problem when built."""
    key: str
    profile: str
    config: RunConfig
    cells: tuple[str, ...] = ()
    notebook: str = str(NOTEBOOK)
    env: tuple[tuple[str, str], ...] = ()
    engine: str | None = None

    def __post_init__(self):
        env = dict(self.env)
        object.__setattr__(self, "env", tuple(sorted(env.items())))
        object.__setattr__(self, "cells", tuple(self.cells))
        object.__setattr__(self, "notebook", str(self.notebook))
        problems = []
        if not isinstance(self.key, str) or not self.key or "/" in self.key:
            problems.append(f"key={self.key!r}: the run's folder name, a non-empty string without '/'")
        if not isinstance(self.profile, str) or not self.profile:
            problems.append(f"profile={self.profile!r}: a profile's name")
        if not isinstance(self.config, RunConfig) or self.config.output_dir is None:
            problems.append(f"config={self.config!r}: a RunConfig with its output_dir (RunConfig.of builds one)")
        if not all(isinstance(cell, str) for cell in self.cells):
            problems.append(f"cells={self.cells!r}: table cells as strings, e.g. 'Table 2 B-EBP-P 200'")
        if not all(isinstance(name, str) and isinstance(value, str) for name, value in env.items()):
            problems.append(f"env={env!r}: environment variables, names and values strings")
        if self.engine is not None:
            try:
                validate_engine(self.engine)
            except ValueError as err:
                problems.append(str(err).split("\n  - ")[-1])
        if problems:
            raise ValueError("invalid job:\n  - " + "\n  - ".join(problems))

    @property
    def output_dir(self) -> Path:
        """The run's folder, absolute: the configuration's output_dir from the notebook's folder, where the
        notebook (run there) writes."""
        return (Path(self.notebook).parent / self.config.output_dir).resolve()

    @property
    def environment(self) -> dict[str, str]:
        """`env` as a dict."""
        return dict(self.env)

    def replace(self, **changes) -> Job:
        """A copy with `changes`, validated again."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The job as plain values (JSON-ready): its fields, the configuration as its parameters."""
        return {"key": self.key, "profile": self.profile, "config": self.config.parameters(),
                "cells": list(self.cells), "notebook": self.notebook, "env": self.environment, "engine": self.engine}

    @classmethod
    def of(cls, plain: Mapping) -> Job:
        """The job of its plain form (to_dict); ValueError (ParameterError for the configuration) if invalid."""
        return cls(**{**plain, "config": RunConfig.of(plain["config"])})


@contextlib.contextmanager
def job_environment(job: Job):
    """Set the job's environment (its data folder; one BLAS thread; JAX_VARS for the JAX engine) for the notebook
    kernel it starts, and restore the previous values afterwards (a worker thread may run other jobs later)."""
    wanted = {**{var: "1" for var in THREAD_VARS}, **(JAX_VARS if job.engine == "jax" else {}), **job.environment}
    previous = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def notebook_parameters(job: Job) -> dict:
    """What papermill gives the experiment notebook for `job`: its configuration's parameters, and its engine when
    the job names one (a run option, parameters.RUN_OPTIONS); a job without one runs the notebook's default engine."""
    return {**job.config.parameters(), **({"engine": job.engine} if job.engine else {})}


def job_cost(job: Job) -> float:
    """Relative cost of one epoch: images seen × weights (dense, as the engine multiplies dense matrices);
    evaluation (10,000 test + up to 10,000 training images, forward only) counted at a third per image."""
    sizes = ebp_lib.check_architecture(job.config.layers)
    weights = sum(a * b for a, b in zip(sizes, sizes[1:]))
    n = job.config.n_train or FULL_TRAIN
    return weights * (n + (10000 + min(n, 10000)) / 3)
