"""Shared fixtures. Tests never download: every mirror URL is replaced by an unreachable local one."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import ebp_data
from reproduction import paper_tables

UNREACHABLE_MIRROR = "http://127.0.0.1:9/"  # the discard port: nothing listens, the connection is refused


@pytest.fixture(scope="session", autouse=True)
def no_downloads():
    """Point every dataset's mirrors at a closed local port for the whole session (before any data fixture)."""
    with pytest.MonkeyPatch.context() as mp:
        for spec in ebp_data.DATASETS.values():
            mp.setitem(spec, "mirrors", [UNREACHABLE_MIRROR])
        yield


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The folder holding mnist/ and fashion-mnist/ (the original IDX .gz files), from $EBP_DATA_DIR.

    Skips when the variable is unset: tests never download. `.ci/run` sets it to ../shared/data.
    """
    value = os.environ.get(ebp_data.DATA_ENV_VAR)
    if not value:
        pytest.skip(f"{ebp_data.DATA_ENV_VAR} is not set: these tests need the real MNIST files "
                    f"(set it to a folder holding mnist/ and fashion-mnist/; .ci/run uses ../shared/data)")
    path = Path(value)
    if not (path / "mnist").is_dir():
        pytest.fail(f"{ebp_data.DATA_ENV_VAR}={value} has no mnist/ folder")
    return path


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    """The rows of the paper's Tables 2-4 (reproduction.paper_tables.read_paper_tables): its 100 cells."""
    return paper_tables.read_paper_tables()
