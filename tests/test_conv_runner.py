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
    selection = paper_tables.Selection(profile, runs_dir=tmp_path, seeds=args.seed, engine=args.engine)
    jobs = paper_tables.make_jobs(run.named_rows(args.architectures, args.weights), selection)
    assert [job.key for job in jobs][:3] == ["binary-c5x8s2-c5x16s2", "binary-c5x8s2-c5x16s2-seed1",
                                                "binary-c5x8s2-c5x16s2-seed2"]
    assert len(jobs) == 6 and all(job.engine == "jax" and job.config.epochs == 30 for job in jobs)
    assert jobs[3].config.layers == [("conv", 5, 16, 2), ("conv", 5, 32, 2), 10]


@pytest.mark.parametrize("argv", [["c5x16"], ["c5x16s2", "--group-seeds", "--engine", "fast"]])
def test_bad_names_and_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        script().parse_args(argv)
    assert stop.value.code == 2


def test_catalogue_names_and_init_schemes_become_jobs(tmp_path):
    """Catalogue names resolve to their architectures; --init variance1 gives every run init_scale = the first
    layer's fan-in (25 for a 5x5 convolution) and its own profile folder; the reference keeps init_scale 1."""
    run = script()
    args = run.parse_args(["lenet", "wide", "--init", "variance1", "--seed", "0", "1", "--runs-dir", str(tmp_path)])
    jobs = run.make_jobs(args)
    assert [job.key for job in jobs] == ["binary-c5x6s2-c5x16s2-100", "binary-c5x6s2-c5x16s2-100-seed1",
                                            "binary-c5x16s2-c5x32s2", "binary-c5x16s2-c5x32s2-seed1"]
    assert all(job.config.init_scale == 25.0 for job in jobs)
    assert all(Path(job.output_dir).parent.name == "named-e30-variance1" for job in jobs)
    assert jobs[0].config.layers == [("conv", 5, 6, 2), ("conv", 5, 16, 2), 100, 10]
    reference = run.make_jobs(run.parse_args(["lenet", "--runs-dir", str(tmp_path)]))
    assert reference[0].config.init_scale == 1.0 and Path(reference[0].output_dir).parent.name == "named-e30"


def test_catalogue_schemes_read_back():
    """variance1's init_scale is the first layer's fan-in: k² for a convolution, block² for a locally connected
    layer, every pixel for a dense one; scheme_of reads the scheme back from a run's init_scale."""
    import ebp_conv_catalogue as catalogue
    from reproduction.architectures import architecture_layers as layers

    assert [catalogue.init_scale("variance1", layers(name)) for name in ("c5x16s2-c5x32s2", "block13", "800")] == [
        25.0, 169.0, 784.0]
    assert catalogue.scheme_of(25.0, layers("c5x16s2-c5x32s2")) == "variance1"
    assert catalogue.scheme_of(784.0, layers("800-800")) == "variance1"
    assert catalogue.scheme_of(1.0, layers("800")) == "reference"
    assert catalogue.scheme_of(3.0, layers("800")) == "init_scale 3"
    assert catalogue.catalogue_name("c5x16s2-c5x32s2") == "wide" and catalogue.architecture_of("800") == "800"
    with pytest.raises(ValueError, match="unknown initialisation scheme"):
        catalogue.init_scale("glorot", layers("800"))
