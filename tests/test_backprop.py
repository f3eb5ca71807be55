"""The backprop baseline (ebp_backprop.py, scripts/run_backprop.py) on tiny subsets of the real MNIST files."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import ebp_backprop as bp
import ebp_lib

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import run_backprop  # noqa: E402

TINY = dict(n_train=500, n_validation=100, epochs=2, grid_epochs=1, learning_rate_grid=[0.01, 0.1])


@pytest.fixture
def tiny(real_data_dir):
    return bp.make_parameters("mnist", "tanh-200", **TINY)


def test_alpha_gives_the_tutorial_l2_objective():
    """sklearn's alpha = 2·l2·B makes one SGD step shrink W by (1 − 2·lr·l2), the gradient of l2·ΣW².

    Inputs of 0 give the first layer no data gradient, so only the penalty moves it."""
    params = bp.make_parameters("mnist", "tanh-500-l2", batch_size=8)
    x, labels = np.zeros((8, 784), np.float32), np.arange(8) % 10
    plain = bp.build_classifier({**params, "alpha": 0.0}, 0.1)
    penalised = bp.build_classifier(params, 0.1)
    for model in (plain, penalised):
        model.partial_fit(x, labels, classes=np.arange(10))
    ratio = penalised.coefs_[0] / plain.coefs_[0]
    np.testing.assert_allclose(ratio, 1 - 2 * 0.1 * params["l2"], rtol=1e-6)
    assert params["alpha"] == pytest.approx(2 * 1e-4 * 8)


def test_validation_split_is_the_tail_standardised_with_the_head():
    images = np.random.default_rng(0).integers(0, 256, (50, 28, 28), dtype=np.uint8)
    labels = np.arange(50) % 10
    x_fit, y_fit, x_val, y_val = bp.validation_split(images, labels, 10)
    assert x_fit.shape == (40, 784) and x_val.shape == (10, 784)
    np.testing.assert_array_equal(y_val, labels[40:])
    head = images[:40].reshape(40, -1).astype(np.float64)
    mean, std = head.mean(0), head.std(0)
    np.testing.assert_allclose(x_val, (images[40:].reshape(10, -1) - mean) / std, atol=1e-5)
    np.testing.assert_allclose(x_fit.mean(0), 0, atol=1e-5)
    with pytest.raises(ValueError, match="cannot hold out"):
        bp.validation_split(images, labels, 50)


class TrainOnly(dict):
    """load_raw's dict with the test split made untouchable."""
    def __getitem__(self, key):
        if key.startswith("test"):
            raise AssertionError(f"the learning-rate grid read {key}")
        return super().__getitem__(key)


def test_grid_never_touches_test_images_and_picks_the_lowest_validation_error(tiny, monkeypatch):
    real_load_raw = ebp_lib.load_raw
    monkeypatch.setattr(ebp_lib, "load_raw", lambda *a, **k: TrainOnly(real_load_raw(*a, **k)))
    monkeypatch.setattr(ebp_lib, "load_dataset", lambda *a, **k: pytest.fail("grid loaded the test set"))
    x_fit, y_fit, x_val, y_val = bp.grid_data(tiny)
    raw = real_load_raw("mnist")
    np.testing.assert_array_equal(y_val, raw["train_labels"][400:500])
    assert len(x_fit) == 400
    points = bp.tune_learning_rate(tiny, x_fit, y_fit, x_val, y_val)
    assert [p["learning_rate"] for p in points] == [0.01, 0.1]
    finals = {p["learning_rate"]: p["validation_error"][-1] for p in points}
    assert finals[0.01] != finals[0.1]  # the tiny grid still discriminates, so the choice below means something
    assert bp.choose_rate(points) == min(finals, key=finals.get)


def test_choose_rate_lowest_then_smaller():
    points = [{"learning_rate": r, "validation_error": [0.5, e]} for r, e in [(0.1, 0.05), (0.01, 0.05), (0.3, 0.2)]]
    assert bp.choose_rate(points) == 0.01
    assert bp.choose_rate(points[2:]) == 0.3
    with pytest.raises(ValueError):
        bp.choose_rate([])


def test_result_json_has_the_ebp_fields(tiny, tmp_path):
    result = bp.run(tiny, tmp_path / "run", echo=lambda *_: None)
    on_disk = json.loads((tmp_path / "run" / bp.RESULT_FILE).read_text())
    assert on_disk == result
    for key in ("format", "parameters", "protocol", "finished", "epochs_done", "n_train_images",
                "train_error_images", "final", "history", "train_seconds", "wall_seconds", "versions",
                "git_commit", "git_dirty", "sessions", "learning_rate", "learning_rate_grid"):
        assert key in result, key
    assert result["finished"] and result["epochs_done"] == 2 and result["protocol"] == "shortened"
    assert result["parameters"] == tiny and result["versions"]["scikit-learn"] is not None
    assert [r["epoch"] for r in result["history"]] == [1, 2]
    assert result["final"] == {k: result["history"][-1][k] for k in ("test_error", "train_error")}
    assert 0 < result["final"]["test_error"] < 0.5  # 500 images, 2 epochs: far better than chance (0.9)
    assert result["learning_rate"] == bp.choose_rate(result["learning_rate_grid"]["points"])
    assert {"host", "cpu", "git_commit", "wall_seconds"} <= set(result["sessions"][0])
    assert not (tmp_path / "run" / bp.CHECKPOINT_FILE).exists()


def test_interrupted_run_resumes_bit_identically(tiny, tmp_path, monkeypatch):
    straight = bp.run(tiny, tmp_path / "a", echo=lambda *_: None)
    calls = []
    real_point = bp.grid_point

    def interrupt_after_one(*args):
        if calls:
            raise KeyboardInterrupt
        calls.append(args[1])
        return real_point(*args)
    monkeypatch.setattr(bp, "grid_point", interrupt_after_one)
    with pytest.raises(KeyboardInterrupt):
        bp.run(tiny, tmp_path / "b", echo=lambda *_: None)
    partial = bp.read_result(tmp_path / "b")
    assert partial["phase"] == "grid" and len(partial["learning_rate_grid"]["points"]) == 1
    monkeypatch.setattr(bp, "grid_point", lambda *args: calls.append(args[1]) or real_point(*args))
    stopped = bp.run(tiny, tmp_path / "b", echo=lambda *_: None, stop_after_epochs=1)
    assert calls == [0.01, 0.1]  # the second session trained only the rate the first had not
    assert not stopped["finished"] and stopped["epochs_done"] == 1
    assert (tmp_path / "b" / bp.CHECKPOINT_FILE).exists()
    resumed = bp.run(tiny, tmp_path / "b", echo=lambda *_: None)
    strip = lambda h: [{k: v for k, v in r.items() if k != "train_seconds"} for r in h]  # noqa: E731
    assert strip(resumed["history"]) == strip(straight["history"])
    assert [p["validation_error"] for p in resumed["learning_rate_grid"]["points"]] == \
        [p["validation_error"] for p in straight["learning_rate_grid"]["points"]]
    assert len(resumed["sessions"]) == 3 and resumed["sessions"][-1]["from_epoch"] == 1


def test_a_folder_with_other_parameters_is_left_alone(tiny, tmp_path):
    bp.run(tiny, tmp_path / "run", echo=lambda *_: None)
    before = (tmp_path / "run" / bp.RESULT_FILE).read_text()
    other = {**tiny, "seed": 1}
    with pytest.raises(ValueError, match="other parameters.*seed"):
        bp.run(other, tmp_path / "run", echo=lambda *_: None)
    assert (tmp_path / "run" / bp.RESULT_FILE).read_text() == before


def test_ebp_neighbour_is_seed_0_whichever_seed_is_read_first():
    """With three finished seeds of a Table 2 run, the comparison uses seed 0 in any reading order; a more
    complete run of another seed still wins over an unfinished seed 0."""
    def run(seed, epochs=120, finished=True):
        return {"parameters": {"dataset": "mnist", "architecture": "800", "weights": "binary", "dropout": None,
                               "preprocessing": "pixel", "std_floor": 0, "init_scale": 1, "seed": seed},
                "protocol": "paper", "finished": finished, "epochs_done": epochs, "n_train_images": 60000}
    runs = [run(1), run(0), run(2)]
    for order in (runs, runs[::-1]):
        assert bp.ebp_table2_results(order, "mnist")[("800", "binary")]["parameters"]["seed"] == 0
    partial_seed0 = [run(0, epochs=50, finished=False), run(1)]
    assert bp.ebp_table2_results(partial_seed0, "mnist")[("800", "binary")]["parameters"]["seed"] == 1


def test_runner_skips_finished_runs_and_lists_them(real_data_dir, tmp_path, capsys):
    argv = ["tanh-200", "--dataset", "mnist", "--out", str(tmp_path), "--n-train", "500", "--n-validation",
            "100", "--epochs", "1", "--grid-epochs", "1", "--grid", "0.01", "0.1"]
    assert run_backprop.main(argv) == 0
    path = tmp_path / "mnist" / "tanh-200" / bp.RESULT_FILE
    before = path.read_text()
    capsys.readouterr()
    assert run_backprop.main(argv) == 0
    assert "finished, skipped" in capsys.readouterr().out
    assert path.read_text() == before
    assert run_backprop.main(argv + ["--list"]) == 0
    assert "finished: test error" in capsys.readouterr().out


def test_bad_input_is_refused_clearly():
    with pytest.raises(ValueError, match="unknown configuration"):
        bp.make_parameters("mnist", "relu-800")
    with pytest.raises(ValueError, match="unknown dataset"):
        bp.make_parameters("cifar", "tanh-800")
    with pytest.raises(ValueError, match="distinct positive"):
        bp.make_parameters("mnist", "tanh-800", learning_rate_grid=[0.1, -1])
    with pytest.raises(ValueError, match="n_validation"):
        bp.make_parameters("mnist", "tanh-800", n_train=100, n_validation=100)
    with pytest.raises(SystemExit):
        run_backprop.parse_args(["relu-800"])
