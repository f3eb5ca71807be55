"""Run the whole test suite under other CPU kernel selections, to show it passes on machines other than this one.

    python scripts/portability.py                      # every configuration below, summary printed
    python scripts/portability.py --only haswell-generic --output outputs/portability.json

The committed notebook outputs were recorded on one CPU; a user's CPU picks other kernels: OpenBLAS chooses its
kernels by processor (Haswell, SkylakeX, Zen, ...), numba compiles for the host's vector width, and numpy
dispatches its loops to the widest SIMD it finds. Each configuration forces other choices through the variables
these libraries read (OPENBLAS_CORETYPE, NUMBA_CPU_NAME, NPY_DISABLE_CPU_FEATURES) and runs `pytest` (unit
tests and strict nbval over every notebook) in a fresh process. The record says, per configuration, which
kernels were really in use (threadpoolctl's OpenBLAS architecture, numba's target CPU, numpy's dispatch list) and
pytest's closing line. Exit status 1 if any configuration failed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reproduction import records

# numpy's dispatched (non-baseline) x86 features of the pinned wheels; disabling them leaves the SSE4.2 baseline
NUMPY_WIDE_SIMD = "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"
NUMPY_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR"

CONFIGURATIONS = {
    "default": {},
    "haswell-generic": {"OPENBLAS_CORETYPE": "Haswell", "NUMBA_CPU_NAME": "generic"},
    "sandybridge-sse": {"OPENBLAS_CORETYPE": "Sandybridge", "NPY_DISABLE_CPU_FEATURES": NUMPY_WIDE_SIMD},
    "skylakex-noavx512numpy": {"OPENBLAS_CORETYPE": "SkylakeX", "NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512},
}

PROBE = """
import json, numba, threadpoolctl, numpy as np
from numpy._core._multiarray_umath import __cpu_dispatch__
blas = [i.get("architecture") for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]
print(json.dumps({"openblas": blas, "numba_cpu": numba.config.CPU_NAME or "host",
                  "numpy_dispatch": [f for f in __cpu_dispatch__ if np._core._multiarray_umath.__cpu_features__[f]]}))
"""


def kernels_in_use(env: dict) -> dict:
    """Which kernels the libraries really select under `env` (a variable a library ignores shows up here)."""
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def closing_line(output: str) -> str:
    """pytest's last summary line, e.g. '362 passed in 301.2s', without the '=' frame and colours."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip("= ") for line in output.splitlines() if line.strip()]
    return next((line for line in reversed(lines) if re.search(r"\d+ (passed|failed|error)", line)), "no summary")


def run(name: str, overrides: dict, pytest_args: list[str]) -> dict:
    env = {**os.environ, **overrides, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix=f"numba-cache-{name}-") as cache:
        env["NUMBA_CACHE_DIR"] = cache  # compiled kernels of one target are never reused for another
        kernels = kernels_in_use(env)
        print(f"[{name}] {overrides or 'no overrides'}; kernels: {kernels}", flush=True)
        start = time.time()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
                              cwd=records.REPO, env=env, capture_output=True, text=True)
    summary = closing_line(proc.stdout)
    failures = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    print(f"[{name}] {summary} (exit {proc.returncode}, {time.time() - start:.0f} s)", flush=True)
    for line in failures:
        print(f"[{name}]   {line}", flush=True)
    return {"configuration": name, "environment": overrides, "kernels": kernels, "pytest": summary,
            "exit_status": proc.returncode, "failures": failures, "seconds": round(time.time() - start)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=sorted(CONFIGURATIONS), help="run only these configurations")
    parser.add_argument("--output", type=Path, help="write the record as JSON here (e.g. outputs/portability.json)")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (default: the whole suite)")
    args = parser.parse_args(argv)
    results = [run(name, CONFIGURATIONS[name], args.pytest_args) for name in (args.only or CONFIGURATIONS)]
    report = {"machine": records.machine_record(), "configurations": results}
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        records.write_json(args.output, report)
        print(f"written to {args.output}")
    return 0 if all(r["exit_status"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
