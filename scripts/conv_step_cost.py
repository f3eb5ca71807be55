#!/usr/bin/env python
"""The step cost of convolutional EBP against an STE (BinaryConnect) step on the same CNN, in the same run.

Both are compiled JAX epochs (lax.scan over minibatches of 10) on the same images: EBP is ebp_jax.train_epoch (a mean
and a variance convolution forward, jax.grad with σ² frozen); STE is successors.ste.step with a convolutional loss
(sign weights and sign units with straight-through gradients, batch norm per unit, Adam). Each is timed after its
compilation, alternating, and the median of the repeats is reported; the ratio is EBP's seconds per step over
STE's. On a loaded machine the ratio is indicative, not a publishable timing (the script prints the load).

    python scripts/conv_step_cost.py --architecture c5x16s2-c5x32s2 --steps 600 --repeats 3
    python scripts/conv_step_cost.py --architecture lenet wide       # catalogue names (ebp_conv_catalogue)

Times are wall-clock (the compiled epochs run on this process's threads); above a load average of 1 per core the
ratio is printed labelled "measured under load".
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
import numpy as np

import ebp_conv_catalogue
import ebp_data
import ebp_jax
import ebp_lib
from reproduction.parameters import architecture_layers
from successors import mlp, ste


def ste_conv_loss(geometries):
    """successors.mlp.loss for a CNN: conv layers (latent weights stored (fan-in, channels), as mlp stores a dense
    layer's (inputs, units)), then dense layers; batch norm per unit, sign units with the hardtanh STE."""
    def loss(weights, real, stats, x, labels):
        h, new_stats = x, dict(stats)
        for l, (w, g) in enumerate(zip(weights[:-1], geometries), start=1):
            a = h @ w if g is None else ebp_jax.correlate(h, w.T, g)
            y, new = mlp.batch_norm(a, real, stats, l, True)
            new_stats.update(new)
            h = mlp.sign_htanh(y)
        z = jnp.exp(real["log_scale"]) * (h @ weights[-1]) + real["bias"]
        return mlp.cross_entropy(z, labels), new_stats
    return loss


def ste_state(net: ebp_lib.Network, key) -> dict:
    """ste.init's state for the layers of `net`: latent weights U(−1, 1) shaped (fan-in, channels or units)."""
    shapes = [layer.h.T.shape for layer in net.layers]
    latent = [jax.random.uniform(k, s, jnp.float32, -1.0, 1.0) for k, s in zip(jax.random.split(key, len(shapes)), shapes)]
    params = {"latent": latent, "real": mlp.init_real(tuple(net.sizes))}
    return {**params, "stats": mlp.init_stats(tuple(net.sizes)), "adam": ste.ADAM.init(params)}


def step_seconds(architecture: str, steps: int, repeats: int) -> dict:
    """Median seconds per step of a compiled EBP epoch and of a compiled STE epoch of `steps` minibatches of 10 on
    the same CNN and images, alternating, after one compiling call of each."""
    net = ebp_lib.init_network(architecture_layers(architecture), "binary", seed=0)
    data = ebp_data.load_dataset("mnist", n_train=10 * steps)
    x, y, labels = (jnp.asarray(a) for a in (data.x_train.astype(np.float32), data.y_train.astype(np.float32),
                                              data.labels_train))
    params, s = ebp_jax.parameters(net, jnp.float32), ebp_jax.structure(net, jnp.float32)
    order = jnp.arange(10 * steps)
    state = ste_state(net, jax.random.PRNGKey(0))
    hyper = {"learning_rate": 1e-3, "decay": 1.0}
    loss = ste_conv_loss([layer.conv for layer in net.layers[:-1]])
    ste_epoch = jax.jit(lambda st, xb, yb, key: mlp.run_epoch(
        lambda c, xi, li, k, hy: ste.step(c, xi, li, k, hy, loss=loss), st, xb, yb, key, hyper))
    xb, lb = x.reshape(steps, 10, -1), labels.reshape(steps, 10)
    runs = {"ebp": lambda: jax.block_until_ready(ebp_jax.train_epoch(params, x, y, order, s, 10)),
            "ste": lambda: jax.block_until_ready(ste_epoch(state, xb, lb, jax.random.PRNGKey(1)))}
    times = {"ebp": [], "ste": []}
    for name, run in runs.items():
        start = time.perf_counter()
        run()  # compiles
        print(f"{architecture} {name}: first call (compile + run) {time.perf_counter() - start:.1f} s")
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - start) / steps)
    return {name: float(np.median(t)) for name, t in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--architecture", nargs="+", default=["c5x16s2-c5x32s2"],
                        help=f"architecture names or catalogue names ({', '.join(ebp_conv_catalogue.CNNS)})")
    parser.add_argument("--steps", type=int, default=600, help="minibatches of 10 per timed epoch")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be at least 1")
    load_before = os.getloadavg()[0]
    results = {}
    for name in args.architecture:
        architecture = ebp_conv_catalogue.architecture_of(name)
        try:
            architecture_layers(architecture)
        except ValueError as err:
            parser.error(str(err))
        results[architecture] = step_seconds(architecture, args.steps, args.repeats)
    load_after = os.getloadavg()[0]
    loaded = max(load_before, load_after) > (os.cpu_count() or 1)
    label = " (MEASURED UNDER LOAD: indicative only, not to publish)" if loaded else ""
    for architecture, t in results.items():
        print(f"{architecture}, batch 10, {args.steps} steps, median of {args.repeats}: EBP {1e3 * t['ebp']:.2f} "
              f"ms/step, STE {1e3 * t['ste']:.2f} ms/step, ratio EBP/STE {t['ebp'] / t['ste']:.1f}{label}")
    print(f"load average {load_before:.1f} before, {load_after:.1f} after, on {os.cpu_count()} CPUs "
          f"({jax.devices()[0].platform})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
