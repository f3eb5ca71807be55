"""Training EBP networks: the engines that compute the steps and the outputs, the training loop, evaluation, and
fit with checkpoint and resume.

ebp_lib.py is the model and its equations; this module runs them. An engine (ENGINES) computes ebp_lib's steps:
"reference" calls ebp_lib's numpy itself, in the network's dtype; "fast" (the default) trains a whole epoch in one
compiled float32 call (ebp_fast.py) and evaluates in float32 with BLAS; "jax" is EBP as jax.grad with every
variance frozen (ebp_jax.py). tests/test_fast.py and tests/test_jax.py hold the engines to the reference.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from ebp_checkpoint import check_same_run
from ebp_data import Dataset
from ebp_lib import (
    Network,
    check_data,
    check_finite_parameters,
    check_rng,
    ebp_step,
    lagged_step,
    load_network,
    network_config,
    output_ebp_d,
    output_ebp_p,
    save_network,
)

DEFAULT_ENGINE = "fast"  # float32 compiled loops (ebp_fast.py); "reference" runs ebp_lib's numpy


# ----------------------------------------------------------------------------------------------------------
# Engines: how the training steps and the outputs are computed. "reference" is ebp_lib's numpy in the
# network's dtype; "fast" trains with ebp_fast's compiled float32 epoch and evaluates in float32 with BLAS;
# "jax" is ebp_jax's float32 gradient step.
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Engine:
    """step(net, x, y, rng, step): one EBP step on the minibatch x, in place (train_step);
    steps(net, x, y, order, batch_size, rng, step_name): the steps on the minibatches of x[order] (train_steps);
    outputs(net): a context manager giving x ↦ (EBP-P outputs, EBP-D outputs) (evaluate)."""
    step: Callable
    steps: Callable
    outputs: Callable


def _reference_steps(net: Network, x, y, order, batch_size, rng, step_name) -> None:
    stale_h = [layer.h.copy() for layer in net.layers]  # (lagged_step) a call starts from h itself
    for k, start in enumerate(range(0, len(order), batch_size)):
        idx = order[start:start + batch_size]
        if net.lagged_mean:
            stale_h = lagged_step(net, stale_h, x[idx], y[idx], rng, step_name(k))
        else:
            ebp_step(net, x[idx], y[idx], rng, step_name(k))


def _reference_outputs(net: Network):
    return contextlib.nullcontext(lambda x: (output_ebp_p(net, x), output_ebp_d(net, x)))


BLAS_THREADS = 1  # the float32 evaluation's matrix products: one BLAS thread per process (several runs share cores)


@contextlib.contextmanager
def float32_outputs(net: Network):
    """The fast engine's evaluation: x ↦ (EBP-P, EBP-D outputs) in float32, BLAS limited to BLAS_THREADS threads
    while the context is open. Both run on a copy of `net` with h and b rounded to float32: EBP-D is output_ebp_d
    itself; EBP-P is ebp_fast.float32_ebp_p, with the weight moments computed once for all batches."""
    net32 = replace(net, layers=[replace(layer, h=layer.h.astype(np.float32), b=layer.b.astype(np.float32))
                                 for layer in net.layers])
    import ebp_fast  # (imported with the fast engine, whose evaluation this is)

    moments = ebp_fast.float32_weight_moments(net32)
    with threadpool_limits(limits=BLAS_THREADS, user_api="blas"):
        yield lambda x: (ebp_fast.float32_ebp_p(net32, moments, x), output_ebp_d(net32, x.astype(np.float32)))


def _reference_engine() -> Engine:
    return Engine(ebp_step, _reference_steps, _reference_outputs)


def _fast_engine() -> Engine:
    # ebp_fast is imported here, when the fast engine is first used, not with this module: importing numba costs
    # a second, which the notebooks that never train (00-03) do not pay.
    import ebp_fast

    return Engine(ebp_fast.train_step, ebp_fast.train_steps, float32_outputs)


def _jax_engine() -> Engine:
    # ebp_jax (EBP as jax.grad with frozen variances) is imported on first use: JAX is heavy to import.
    import ebp_jax

    return Engine(ebp_jax.train_step, ebp_jax.train_steps, ebp_jax.float32_outputs)


ENGINES = {"fast": _fast_engine, "reference": _reference_engine, "jax": _jax_engine}  # name → the engine


# The engines that compute convolutional layers (ebp_conv): ebp_fast's compiled loops are written for dense and
# locally connected layers only.
CONV_ENGINES = ("jax", "reference")


def check_engine_layers(net: Network, engine: str) -> None:
    """ValueError, before any work, if `engine` cannot compute one of `net`'s layers (a convolution on "fast")."""
    if engine not in CONV_ENGINES and any(layer.conv is not None for layer in net.layers):
        raise ValueError(f"engine={engine!r} does not compute convolutional layers: use engine='jax' (compiled) or "
                         f"engine='reference' (ebp_lib's numpy)")


def resolve_engine(name) -> Engine:
    """The engine called `name` in ENGINES; ValueError for any other name."""
    if not isinstance(name, str) or name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose 'fast' (float32, compiled epoch), 'jax' (float32, "
                         f"EBP as jax.grad) or 'reference'")
    return ENGINES[name]()


# ----------------------------------------------------------------------------------------------------------
# Steps and evaluation on an engine
# ----------------------------------------------------------------------------------------------------------

def train_step(net: Network, x: np.ndarray, y: np.ndarray, rng=None, step: int | None = None,
               engine: str = DEFAULT_ENGINE) -> None:
    """One EBP step on a minibatch (ebp_lib.ebp_step: forward, backward, update) on `engine`. `rng` draws the
    sampled dropout masks. engine="fast" runs the same step in float32 (ebp_fast.py); use train_epoch for speed."""
    chosen = resolve_engine(engine)
    check_engine_layers(net, engine)
    check_rng(net, rng)
    check_finite_parameters(net, step)
    chosen.step(net, x, y, rng, step)


def check_finite_images(x: np.ndarray) -> None:
    """ValueError naming the images that hold NaN/inf: every engine would score them (a NaN output's argmax is
    class 0), so an error rate would silently include them."""
    bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
    if len(bad):
        raise ValueError(f"{len(bad)} of the {len(x)} images to evaluate hold NaN/inf (rows {bad[:5].tolist()}"
                         f"{', ...' if len(bad) > 5 else ''}): drop or repair them before evaluating, e.g. "
                         f"x = x[np.isfinite(x).all(axis=1)] with the same rows of the labels")


def predict(net: Network, x: np.ndarray, batch: int = 2000,
            engine: str = DEFAULT_ENGINE) -> tuple[np.ndarray, np.ndarray]:
    """The class each output predicts for every image of x, (EBP-P, EBP-D): the argmax of ν_L and of the
    deterministic net's W_L v_{L-1} + b_L (docs/maths.md §Outputs), `batch` images at a time; engine="fast": the
    same outputs in float32 (they differ only on near-ties between two classes)."""
    chosen = resolve_engine(engine)
    check_engine_layers(net, engine)
    if len(x) == 0:
        raise ValueError("no images to evaluate: an error rate needs at least one image and its label")
    check_finite_images(x)
    ebp_p, ebp_d = [], []
    with chosen.outputs(net) as outputs:  # x ↦ (EBP-P, EBP-D)
        for start in range(0, len(x), batch):
            p, d = outputs(x[start:start + batch])
            ebp_p.append(p.argmax(axis=1))
            ebp_d.append(d.argmax(axis=1))
    return np.concatenate(ebp_p), np.concatenate(ebp_d)


def evaluate(net: Network, x: np.ndarray, labels: np.ndarray, batch: int = 2000,
             engine: str = DEFAULT_ENGINE) -> dict[str, float]:
    """Test errors of EBP-P and EBP-D: the fractions of x whose predicted class (predict) is not the label."""
    ebp_p, ebp_d = predict(net, x, batch, engine)
    return {"ebp_p": int(np.sum(ebp_p != labels)) / len(x), "ebp_d": int(np.sum(ebp_d != labels)) / len(x)}


# ----------------------------------------------------------------------------------------------------------
# Training: epochs in a new random order, evaluation after each, checkpoint and resume
# ----------------------------------------------------------------------------------------------------------

def check_training(net: Network, x: np.ndarray, y: np.ndarray, batch_size, engine) -> None:
    """Refuse, before any work, data that does not fit the network or a bad batch size (ebp_lib.check_data), and
    an unknown engine."""
    check_data(net, x, y, batch_size)
    resolve_engine(engine)
    check_engine_layers(net, engine)


def train_epoch(net: Network, x: np.ndarray, y: np.ndarray, batch_size: int, rng, epoch: int = 0,
                engine: str = DEFAULT_ENGINE) -> None:
    """One epoch: the training set in a new random order drawn from `rng`, one EBP step per minibatch.
    engine: "fast" (the whole epoch in one compiled call, float32) or "reference" (train_step, the net's dtype)."""
    check_training(net, x, y, batch_size, engine)
    train_steps(net, x, y, rng.permutation(len(x)), batch_size, rng, engine, epoch)


def train_steps(net: Network, x: np.ndarray, y: np.ndarray, order: np.ndarray, batch_size: int, rng,
                engine: str = DEFAULT_ENGINE, epoch: int = 0, first_step: int = 0) -> None:
    """EBP steps on the minibatches x[order[:batch_size]], x[order[batch_size:2 batch_size]], ... in turn; error
    messages call them steps first_step, first_step + 1, ... of epoch `epoch` (counted from 0)."""
    def step_name(k):
        return f"{first_step + k} of epoch {epoch + 1} (batch size {batch_size})"

    chosen = resolve_engine(engine)
    # Every engine refuses a NaN/inf parameter before its first step: an infinite b (or h of binary weights) gives
    # a finite Δ (⟨W⟩ = tanh(inf) = 1, ν = ±1), so nothing later would stop the reference from training on it.
    check_finite_parameters(net, step_name(0))
    chosen.steps(net, x, y, order, batch_size, rng, step_name)


def fit(net: Network, data: Dataset, epochs: int, batch_size: int = 10, seed: int = 0,
        checkpoint=None, n_train_eval: int = 10000, on_epoch=None,
        engine: str = DEFAULT_ENGINE, run_config: dict | None = None) -> tuple[Network, list[dict]]:
    """Train for `epochs` epochs, evaluating after each; returns the network and the per-epoch history.

    With `checkpoint` (a file path) the state (network, epoch, RNG, history) is saved after every epoch,
    and a run whose checkpoint exists resumes from it, bit-identical to a run that was never interrupted.
    The training error is measured on the first `n_train_eval` training images (0: not measured).
    `on_epoch(record)` is called after every epoch (progress display). `engine` trains and evaluates.
    `run_config` (JSON-serialisable: data set, preprocessing, ...) is stored in the checkpoint with the network's
    configuration, seed, batch size and engine; resuming from a checkpoint of any other run is refused
    (CheckpointMismatchError naming what differs), and an unreadable checkpoint raises CheckpointError.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"epochs={epochs!r} must be a non-negative integer")
    check_training(net, data.x_train, data.y_train, batch_size, engine)
    net, history, rng, run = start_run(net, seed, batch_size, engine, run_config, checkpoint)
    for epoch in range(len(history), epochs):
        start = time.perf_counter()
        train_epoch(net, data.x_train, data.y_train, batch_size, rng, epoch, engine=engine)
        record = end_epoch(net, data, time.perf_counter() - start, history, rng, n_train_eval, engine, checkpoint,
                           run)
        if on_epoch is not None:
            on_epoch(record)
    return net, history


def start_run(net: Network, seed: int, batch_size: int, engine: str, run_config: dict | None = None,
              checkpoint=None):
    """(network, history, generator, run) of a run about to train its next epoch (fit's start, and that of the
    runs a group trains together, reproduction/group.py): `net`, no history and a generator seeded `seed`; or, if
    `checkpoint` exists, the state it saved, refused (CheckpointMismatchError) if it was saved by another run. `run`
    is what its checkpoints record of it: the network, seed, batch size, engine and run_config."""
    run = {"network": network_config(net), "seed": seed, "batch_size": batch_size, "engine": engine, **(run_config or {})}
    rng, history = np.random.default_rng(seed), []
    if checkpoint is not None and Path(checkpoint).exists():
        saved, meta = load_network(checkpoint)
        check_same_run(checkpoint, {**meta, "config": network_config(saved)}, run)
        net, history = saved, meta["history"]
        rng.bit_generator.state = meta["rng_state"]
    return net, history, rng, run


def end_epoch(net: Network, data: Dataset, seconds: float, history: list, rng, n_train_eval: int, engine: str,
              checkpoint=None, run: dict | None = None) -> dict:
    """After an epoch of training (`seconds` long): evaluate both outputs with `engine`, append the epoch's record
    to `history`, save the checkpoint (the network, `run`, the history and the generator's state); the record."""
    test = evaluate(net, data.x_test, data.labels_test, engine=engine)
    train = (evaluate(net, data.x_train[:n_train_eval], data.labels_train[:n_train_eval], engine=engine)
             if n_train_eval else {"ebp_p": None, "ebp_d": None})
    record = {"epoch": len(history) + 1, "test_ebp_p": test["ebp_p"], "test_ebp_d": test["ebp_d"],
              "train_ebp_p": train["ebp_p"], "train_ebp_d": train["ebp_d"], "train_seconds": seconds}
    history.append(record)
    if checkpoint is not None:
        save_network(checkpoint, net, run=run, history=history, rng_state=rng.bit_generator.state)
    return record
