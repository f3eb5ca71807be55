"""Shared fixtures. Tests never download: every mirror URL is replaced by an unreachable local one.

The `slow` marker (pytest.ini): `make test-fast` runs `pytest -m "not slow"`, the unit tests and notebooks that
take at most a few seconds each. A notebook is slow unless outputs/notebook_times.json (make time-notebooks)
times it at most FAST_NOTEBOOK_SECONDS; a test is slow if tests/durations.json lists it, or its module, above
FAST_TEST_SECONDS. Tests and notebooks measured in neither file run in both.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import ebp_data
from reproduction import paper_tables

UNREACHABLE_MIRROR = "http://127.0.0.1:9/"  # the discard port: nothing listens, the connection is refused

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_TIMES = ROOT / "outputs" / "notebook_times.json"
DURATIONS = Path(__file__).with_name("durations.json")
FAST_NOTEBOOK_SECONDS = 16.0  # idle seconds of a notebook under strict nbval
FAST_TEST_SECONDS = 2.0  # idle seconds of one test (or of a whole module listed as one)


def slow_reason(nodeid: str, notebook_times: dict, durations: dict) -> str | None:
    """Why the test `nodeid` (relative to the repository root) is marked slow, or None. `notebook_times` is
    outputs/notebook_times.json's "notebooks", `durations` tests/durations.json's "seconds" ({module or test node
    id: idle seconds})."""
    nodeid = re.sub(r"<module '([\w.]+)' from '[^']*'>", r"<module '\1'>", nodeid)  # ids naming a module by its path
    path = nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        seconds = notebook_times.get(Path(path).name, {}).get("seconds")
        if seconds is None:
            return f"{path} is not timed in {NOTEBOOK_TIMES.name}"
        return f"{path} takes {seconds} s" if seconds > FAST_NOTEBOOK_SECONDS else None
    for key in (path, nodeid, nodeid.split("[")[0]):
        if durations.get(key, 0.0) > FAST_TEST_SECONDS:
            return f"{key} takes {durations[key]} s"
    return None


def pytest_collection_modifyitems(config, items):
    """Mark the slow tests and notebooks (slow_reason) with the `slow` marker."""
    notebook_times = json.loads(NOTEBOOK_TIMES.read_text())["notebooks"]
    durations = json.loads(DURATIONS.read_text())["seconds"]
    for item in items:
        reason = slow_reason(item.nodeid, notebook_times, durations)  # node ids are relative to pytest.ini's folder
        if reason:
            item.add_marker(pytest.mark.slow(reason=reason))


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
