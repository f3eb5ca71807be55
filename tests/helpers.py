"""Helpers shared by the tests, in one module (not a test module): fakes for the tests of the reproduction package
(result.json files as the experiment notebook writes them, table rows by cell, the scripts of scripts/ imported from
their files); small networks and data for the engines' tests and the checks they share (forward moments against
ebp_lib's); the resume check of the tuned baselines' runs."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

import ebp_data
import ebp_lib
from reproduction import folder, parameters, records

ROOT = Path(__file__).resolve().parents[1]
TINY = {"name": "tiny", "epochs": 3, "n_train": 300, "batch_size": 10}  # a profile of a few seconds per run


def load_script(name):
    """A module of scripts/ (command-line entry points), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_result(row_or_params, epochs_done, n, profile, final, epochs=None, seed=0, curve=None, **params):
    """A result.json as EpochRecorder writes it (a complete, consistent run record); the test error after every
    epoch is `final` (both outputs), or `curve` (one value per epoch done) when given. `profile` is not part of a
    record: load_results adds it, and write_result takes the folder from it."""
    params = parameters.validate_parameters({"architecture": row_or_params["architecture"],
                                     "weights": row_or_params["weights"], "epochs": epochs or epochs_done,
                                     "n_train": n, "seed": seed, **params})
    curve = curve or [final] * epochs_done
    history = [{"epoch": e + 1, "test_ebp_p": v, "test_ebp_d": v, "train_ebp_p": v / 2, "train_ebp_d": v / 2,
                "train_seconds": 1.0} for e, v in enumerate(curve)]
    n_images = n or 60000
    return {"format": records.RECORD_FORMAT, "method": "ebp", "parameters": params,
            "protocol": parameters.protocol_relative_to_paper(params), "finished": epochs is None,
            "epochs_done": epochs_done, "n_train_images": n_images, "train_error_images": min(n_images, 10000),
            "final": {k: history[-1][k] for k in records.HISTORY_ERRORS["ebp"]} if history else None,
            "history": history, "train_seconds": float(epochs_done), "wall_seconds": 2.0 * epochs_done,
            "engine": "fast", "versions": {}, "git_commit": None, "git_dirty": None, "sessions": [],
            "profile": profile}


def cell_row(rows, table, label, column):
    return next(r for r in rows if (r["table"], r["row"], r["column"]) == (table, label, column))


def fake_notebook(result: dict) -> dict:
    """An executed experiment notebook (nbformat JSON) printing what the notebook prints of a finished run
    `result`: its table of errors after every epoch and its final line, with papermill's parameters."""
    rows = ["epoch  test EBP-P  test EBP-D  train EBP-P  train EBP-D"]
    rows += [f"{r['epoch']:>5} " + " ".join(folder.percent(r[k]) for k in records.HISTORY_ERRORS["ebp"])
             for r in result["history"]]
    final = result["final"]
    line = (f"final test error after {result['epochs_done']} epochs on {result['n_train_images']:,} images: "
            f"EBP-P {folder.percent(final['test_ebp_p'])}%, EBP-D {folder.percent(final['test_ebp_d'])}% "
            f"(protocol: {result['protocol']}, finished: {result['finished']})")
    return {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout",
                                                         "text": "\n".join(rows + [line]) + "\n"}]}],
            "metadata": {"papermill": {"parameters": {**result["parameters"]}}}, "nbformat": 4}


def write_result(runs_dir, key, result, notebook=True):
    """Write `result` (less its `profile`) as outputs/runs/<its profile>/<key>/result.json under runs_dir, and for
    a finished EBP run (unless not `notebook`) the executed notebook that vouches for it (fake_notebook)."""
    path = Path(runs_dir) / result["profile"] / key / folder.RESULT_FILE
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({k: v for k, v in result.items() if k != "profile"}))
    if notebook and result.get("method") == "ebp" and result.get("finished"):
        path.with_name(folder.EXECUTED_FILE).write_text(json.dumps(fake_notebook(result)))


# ----------------------------------------------------------------------------------------------------------
# The engines' tests: small data and networks, and the reference they are held to
# ----------------------------------------------------------------------------------------------------------

SIDE = 12  # 144 inputs: small enough that 300 reference updates take milliseconds
RTOL = 1e-4  # of the largest |h| (and |b|) after 300 updates: float32 rounding, not a wrong equation (test_fast)


def data(n, seed=0, classes=10):
    """Inputs with a class-dependent mean (so the network learns and Δ is not just noise), ±1 targets."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    x = rng.standard_normal((n, SIDE * SIDE)) + 0.5 * np.cos(labels[:, None] + np.arange(SIDE * SIDE))
    return x, ebp_data.one_vs_all(labels, classes)


def net_for(weights, architecture, dropout, init_scale, dtype=np.float64):
    return ebp_lib.init_network(architecture, weights, seed=2, input_side=SIDE, init_scale=init_scale,
                                dropout=dropout, dtype=dtype)


def assert_close_networks(fast, reference):
    for k, (a, b) in enumerate(zip(fast.layers, reference.layers)):
        scale_h, scale_b = np.abs(b.h).max(), max(np.abs(b.b).max(), 1.0)
        assert np.abs(a.h - b.h).max() <= RTOL * scale_h, f"layer {k + 1}: h differs"
        assert np.abs(a.b - b.b).max() <= RTOL * scale_b, f"layer {k + 1}: b differs"


def check_forward(net, x):
    """μ and σ² of every layer at test time (sampled dropout: inputs scaled by p), ebp_jax's against ebp_lib.forward's
    (to 1e-12)."""
    import ebp_jax  # JAX starts slowly: only the tests that use it pay for it

    s, params = ebp_jax.structure(net), ebp_jax.parameters(net)
    moments = [ebp_jax.weight_moments(h, mask, s) for (h, _), mask in zip(params, s.masks)]
    scales = [net.keep if net.dropout == "sampled" else None] * len(net.layers)
    got = list(ebp_jax.forward([m for m, _ in moments], [b for _, b in params], [w2 for _, w2 in moments], x,
                               scales, s))
    reference = ebp_lib.forward(net, x)
    assert len(got) == len(reference.mu)
    for (mu, sigma2), mu_ref, sigma2_ref in zip(got, reference.mu, reference.sigma2):
        np.testing.assert_allclose(np.asarray(mu), mu_ref, rtol=0, atol=1e-12 * max(1.0, np.abs(mu_ref).max()))
        np.testing.assert_allclose(np.asarray(sigma2), sigma2_ref, rtol=1e-12)



def dropout_masks(net, batch, rng):
    """The Bernoulli masks ebp_lib.forward draws from `rng` for one training step, in the same order."""
    if net.dropout != "sampled":
        return (None,) * len(net.layers)
    return tuple((rng.random((batch, width)) < net.keep).astype(np.float64) for width in net.sizes[:-1])


def assert_grad_steps_are_ebp(net, x, y, steps=5, batch=8):
    """`steps` float64 steps of minibatch `batch` on (x, y), ebp_jax.ebp_step (jax.grad of ln P with frozen
    variances) beside ebp_lib's reference step from the same network and the same dropout masks: h and b agree to
    1e-12 of their largest entry (the two differ only in the rounding of erf, log Φ and summation order)."""
    import ebp_jax
    import ebp_train

    s, params = ebp_jax.structure(net), ebp_jax.parameters(net)
    rng_lib, rng_jax = np.random.default_rng(7), np.random.default_rng(7)
    for step in range(steps):
        xb, yb = x[batch * step:batch * (step + 1)], y[batch * step:batch * (step + 1)]
        ebp_train.train_step(net, xb, yb, rng=rng_lib, engine="reference")
        params = ebp_jax.ebp_step(params, xb, yb, dropout_masks(net, batch, rng_jax), s)
    for layer, (h, b) in zip(net.layers, params):
        np.testing.assert_allclose(np.asarray(h), layer.h, rtol=0, atol=1e-12 * max(1.0, np.abs(layer.h).max()))
        np.testing.assert_allclose(np.asarray(b), layer.b, rtol=0, atol=1e-12 * max(1.0, np.abs(layer.b).max()))

# ----------------------------------------------------------------------------------------------------------
# The tuned baselines' runs
# ----------------------------------------------------------------------------------------------------------

TIMINGS = ("train_seconds", "cpu_seconds")


def assert_resumes_to_the_same_record(sc, params, whole: dict, folder, data_dir):
    """A run of reproduction.successors (`sc`) stopped after one epoch in `folder`, then resumed: it kept its
    checkpoint meanwhile, and its history (times aside) and evaluation's outputs are those of `whole`, the
    uninterrupted run's record."""
    quiet = {"echo": lambda *_: None, "allow_dirty": True}
    partial = sc.run(params, folder, data_dir, stop_after_epochs=1, **quiet)
    assert not partial["finished"] and (folder / sc.CHECKPOINT_FILE).exists()
    resumed = sc.run(params, folder, data_dir, **quiet)
    untimed = [[{k: v for k, v in h.items() if k not in TIMINGS} for h in r["history"]] for r in (resumed, whole)]
    assert untimed[0] == untimed[1]
    assert resumed["evaluation"]["outputs"] == whole["evaluation"]["outputs"]
