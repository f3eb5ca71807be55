"""scripts/run_architecture.py: named architectures (the convolutional ones included) become the runner's jobs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from reproduction import paper_tables

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "run_architecture.py"


def script():
    spec = importlib.util.spec_from_file_location("run_architecture", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_named_architectures_become_jobs_with_their_layers(tmp_path):
    """Two CNNs × 3 seeds: six jobs, each a validated RunConfig of the conv layer list, in its own folder."""
    run = script()
    args = run.parse_args(["c5x8s2-c5x16s2", "c5x16s2-c5x32s2", "--seed", "0", "1", "2", "--runs-dir", str(tmp_path)])
    profile = {"name": "named-e30", "epochs": 30, "n_train": None, "batch_size": 10}
    jobs = paper_tables.make_jobs(run.named_rows(args.architectures, args.weights), profile, runs_dir=tmp_path,
                                  seeds=args.seed, engine=args.engine)
    assert [job["key"] for job in jobs][:3] == ["binary-c5x8s2-c5x16s2", "binary-c5x8s2-c5x16s2-seed1",
                                                "binary-c5x8s2-c5x16s2-seed2"]
    assert len(jobs) == 6 and all(job["engine"] == "jax" and job["config"].epochs == 30 for job in jobs)
    assert jobs[3]["config"].layers == [("conv", 5, 16, 2), ("conv", 5, 32, 2), 10]


@pytest.mark.parametrize("argv", [["c5x16"], ["c5x16s2", "--group-seeds", "--engine", "fast"]])
def test_bad_names_and_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        script().parse_args(argv)
    assert stop.value.code == 2
