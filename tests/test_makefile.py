"""`make` with no target lists every target of the Makefile, one line each (make help)."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def makefile_targets() -> list[str]:
    """The Makefile's named targets (not variables, not .PHONY, not file targets such as $(STAMP))."""
    text = (ROOT / "Makefile").read_text()
    return re.findall(r"^([a-z][a-z0-9_-]*)\s*:(?!=)", text, re.MULTILINE)


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_make_alone_lists_every_target():
    targets = makefile_targets()
    # No make flags inherited from a make running the tests (`make test PYTEST_ARGS=...`).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    assert {"reproduce", "test", "book", "help"} <= set(targets), targets
    for command in (["make", "-s", "help"], ["make", "-s"]):
        out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                             check=True).stdout
        listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ") and line.split()]
        missing = [t for t in targets if t not in listed]
        assert not missing, f"`{' '.join(command)}` has no line for {missing}"
        assert len(listed) == len(set(listed)), f"a target is listed twice: {listed}"
        unknown = [t for t in listed if t not in targets]
        assert not unknown, f"`{' '.join(command)}` lists targets the Makefile lacks: {unknown}"


def test_test_fast_leaves_out_the_slow_notebooks_and_tests():
    """`make test-fast` runs pytest -m "not slow"; conftest marks a notebook slow unless notebook_times.json times it
    at most FAST_NOTEBOOK_SECONDS, and a test slow when tests/durations.json lists it (or its module) above
    FAST_TEST_SECONDS; every entry there names a test module that exists."""
    import json

    import conftest

    times = json.loads(conftest.NOTEBOOK_TIMES.read_text())["notebooks"]
    durations = json.loads(conftest.DURATIONS.read_text())["seconds"]
    fast = []
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        seconds = times.get(notebook.name, {}).get("seconds")
        expected_fast = seconds is not None and seconds <= conftest.FAST_NOTEBOOK_SECONDS
        assert (conftest.slow_reason(f"notebooks/{notebook.name}::Cell 2", times, durations) is None) == expected_fast
        fast += [notebook.name] if expected_fast else []
    assert 0 < len(fast) < len(list((ROOT / "notebooks").glob("*.ipynb")))
    assert all((ROOT / key.split("::")[0]).is_file() for key in durations)
    slow = [key for key, seconds in durations.items() if seconds > conftest.FAST_TEST_SECONDS]
    assert slow and all(conftest.slow_reason(key + ("" if "::" in key else "::test_any[case]"), times, durations)
                        for key in slow)
    assert conftest.slow_reason("tests/test_makefile.py::test_make_alone_lists_every_target", times, durations) is None
    recipe = re.search(r"^test-fast:.*\n\t(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)[1]
    assert '-m "not slow"' in recipe
