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
