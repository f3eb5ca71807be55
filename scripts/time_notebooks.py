"""Time every numbered notebook as CI runs it: strict nbval (pytest.ini's options), one BLAS thread, and a cold numba
cache (a fresh, empty NUMBA_CACHE_DIR per notebook, so each pays every compilation it triggers, as on a fresh clone).

    python scripts/time_notebooks.py                      # notebooks/[0-9][0-9]*_*.ipynb -> outputs/notebook_times.json
    python scripts/time_notebooks.py notebooks/04_binary_weights.ipynb --out /tmp/t.json

The record says where it ran (reproduction.records.timing_record: CPU model and flags, cores, library versions,
git state, the load average before and after). Like the benchmarks it refuses a machine whose 1-minute load
average exceeds 1 per core, unless --allow-loaded (the record then says "loaded": true). A notebook that fails
is timed and recorded as failed, with the tail of pytest's output; the exit status is then 1.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reproduction import records

ROOT = Path(__file__).resolve().parent.parent
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def time_notebook(path: Path) -> dict:
    """Run one notebook under strict nbval with a cold numba cache; its wall time, pass/fail and, if it failed,
    the last lines of pytest's output."""
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
        env = {**os.environ, **THREAD_ENV, "NUMBA_CACHE_DIR": cache}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "pytest.ini"),
                   str(path)]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    entry = {"seconds": round(seconds, 1), "passed": done.returncode == 0}
    if done.returncode:
        entry["output_tail"] = (done.stdout + done.stderr)[-2000:]
    return entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to time (default: notebooks/[0-9][0-9]*_*.ipynb)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "notebook_times.json",
                        help="where to write the record (default: %(default)s)")
    records.add_allow_loaded_option(parser)
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing:
        parser.error("no such notebook: " + ", ".join(missing))

    record = records.timing_record(("numpy", "scipy", "numba", "nbval", "pytest"), allow_loaded=args.allow_loaded)
    record["what"] = ("wall seconds of `pytest <notebook>` with pytest.ini's strict nbval options, one BLAS thread "
                      "and an empty NUMBA_CACHE_DIR per notebook")
    record["notebooks"] = {}
    for path in notebooks:
        entry = record["notebooks"][path.name] = time_notebook(path.resolve())
        print(f"{path.name:40} {entry['seconds']:7.1f} s  {'passed' if entry['passed'] else 'FAILED'}", flush=True)
    record["loaded"] = records.finish_timing_record(record, args.allow_loaded)
    record["total_seconds"] = round(sum(e["seconds"] for e in record["notebooks"].values()), 1)
    print(f"{'total':40} {record['total_seconds']:7.1f} s  (load average at start {record['load_average_at_start']}, "
          f"end {record['load_average_at_end']})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    records.write_atomically(args.out, json.dumps(record, indent=1) + "\n")
    return 0 if all(e["passed"] for e in record["notebooks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
