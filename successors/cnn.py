"""The successors' net as a CNN: successors.mlp's ±1 net with convolutional hidden layers, the shape of EBP's CNNs.

An architecture is a name of EBP's grammar (reproduction.parameters: c<kernel>x<channels>s<stride> layers, then
dense hidden sizes, e.g. "c5x6s2-c5x16s2-100") or an entry of ebp_conv_catalogue.CNNS ("lenet", "wide"). Its
layers are EBP's (ebp_conv): "valid" convolutions (no padding) of stride s, 28 → (28 − k)//s + 1, maps stored
flat and channel-major (C·S·S numbers per image), so a dense layer after the convolutions reads the maps as EBP's
does. A convolutional hidden layer l computes, for channel o at position p (x_p: the k×k×C patch at p·stride),

    a_{o,p} = Σ_r W_{o,r} x_{p,r}                        (W ∈ {−1, +1}^{channels × C × k × k}, shared over p)
    y_{o,p} = γ_o (a_{o,p} − m_o) / sqrt(v_o + ε) + β_o   (batch normalisation per channel: m, v over batch and p)
    h_{o,p} = sign(y_{o,p})  (+1 at 0)                    (the hard-tanh straight-through gradient, mlp.sign_htanh)

the cross-correlation of jax.lax.conv_general_dilated (NCHW maps, OIHW kernels, stride s, padding "VALID"), which
is ebp_conv.correlate's. Dense hidden layers and the output z = e^s a_L + b are successors.mlp's. Batch
normalisation per channel, as BinaryConnect's and BayesBiNN's convolutional nets use it (a per-position γ could
not be one threshold per kernel), folds into one threshold per output map (successors.cnn_evaluate).

A CNN (the dataclass below) is what the methods' init(key, sizes, hyper) take in place of the dense net's layer
sizes (mlp.weight_shapes, mlp.init_real, mlp.init_stats read it); its `loss` goes to their step(..., loss=) and
its `predict_logits` replaces mlp.predict_logits. Weights: a convolution's (channels, C, k, k) (OIHW, whose rows
flattened are ebp_conv's kernel columns (channel, row, column)), a dense layer's (n_in, n_out) as in mlp.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import ebp_conv
import ebp_conv_catalogue
from successors import mlp

INPUT_SIDE = 28
NETWORK = ("±1 kernels and weights, sign hidden units (hard-tanh STE), affine BN per channel of every hidden layer "
           "(momentum 0.15, ε 1e-4), output e^s·(W h) + b, softmax cross-entropy (successors.cnn)")
DIMENSIONS = ("NCHW", "OIHW", "NCHW")  # maps channel-major as ebp_conv stores them; kernels (out, in, row, column)


@dataclass(frozen=True)
class CNN:
    """A convolutional net of the successors: its architecture name (the grammar's) and, per hidden layer, its
    ebp_conv.Conv (a convolution) or its number of units (a dense layer). Hashable: one compiled epoch per net."""
    architecture: str
    hidden: tuple

    def weight_shapes(self) -> list[tuple[int, ...]]:
        """A convolution's (channels, C, k, k), a dense layer's (n_in, n_out); the output layer last."""
        shapes, n_in = [], INPUT_SIDE ** 2
        for layer in self.hidden:
            if isinstance(layer, ebp_conv.Conv):
                shapes.append((layer.channels, layer.in_channels, layer.kernel, layer.kernel))
                n_in = layer.units
            else:
                shapes.append((n_in, layer))
                n_in = layer
        return [*shapes, (n_in, mlp.N_CLASSES)]

    def widths(self) -> list[int]:
        """The BN width of every hidden layer: a convolution's channels, a dense layer's units."""
        return [layer.channels if isinstance(layer, ebp_conv.Conv) else layer for layer in self.hidden]

    def init_real(self) -> dict:
        """As mlp.init_real: γ = 1, β = 0 per channel or unit; e^s = 1/sqrt(fan-in of the output layer); bias 0."""
        real = {}
        for l, n in enumerate(self.widths(), start=1):
            real[f"gamma{l}"], real[f"beta{l}"] = jnp.ones(n, jnp.float32), jnp.zeros(n, jnp.float32)
        real["log_scale"] = jnp.asarray(-0.5 * np.log(self.weight_shapes()[-1][0]), jnp.float32)
        real["bias"] = jnp.zeros(mlp.N_CLASSES, jnp.float32)
        return real

    def init_stats(self) -> dict:
        """BN running means 0 and variances 1 per channel or unit."""
        stats = {}
        for l, n in enumerate(self.widths(), start=1):
            stats[f"mean{l}"], stats[f"var{l}"] = jnp.zeros(n, jnp.float32), jnp.ones(n, jnp.float32)
        return stats

    def loss(self, weights: list, real: dict, stats: dict, x, labels):
        """Training loss (BN on batch statistics) and the running statistics after the batch (mlp.loss's face)."""
        z, new_stats = forward(self, weights, real, stats, x, train=True)
        return mlp.cross_entropy(z, labels), new_stats

    def predict_logits(self, weights: list, real: dict, stats: dict, x: np.ndarray, chunk: int = 2000) -> np.ndarray:
        """Test-time logits (BN on running statistics) as float32 numpy, `chunk` images at a time."""
        logits = compiled_logits(self)
        return np.concatenate([np.asarray(logits(weights, real, stats, jnp.asarray(x[i:i + chunk])))
                               for i in range(0, len(x), chunk)])


def resolve(name: str) -> str:
    """The grammar name of a catalogue entry ("lenet" → "c5x6s2-c5x16s2-100"), or `name` itself."""
    return ebp_conv_catalogue.architecture_of(str(name))


def is_cnn(name: str) -> bool:
    """Whether an architecture name (or catalogue entry) starts with a convolution."""
    from reproduction import architectures

    return bool(architectures.CONV_NAME.fullmatch(resolve(name).split("-")[0]))


def network(name: str) -> CNN:
    """The CNN of an architecture name or catalogue entry, its layers checked on 28x28 images (reproduction.parameters'
    grammar); ValueError saying what is wrong (not a CNN, a kernel larger than its map)."""
    from reproduction import architectures

    architecture = resolve(name)
    if not is_cnn(architecture):
        raise ValueError(f"architecture {name!r} is not a CNN: use a catalogue name ({', '.join(ebp_conv_catalogue.CNNS)})"
                         f" or c<kernel>x<channels>s<stride> layers joined by '-', e.g. 'c5x6s2-c5x16s2-100'")
    layers = architectures.architecture_layers(architecture)[:-1]  # the output layer is the successors' own
    hidden = tuple(g if g is not None else int(spec)
                   for g, spec in zip(ebp_conv.geometries(layers, INPUT_SIDE), layers))
    return CNN(architecture, hidden)


def describe(net: CNN) -> str:
    """The net in words for a record: its maps' sides and channels, its dense layers, 10 outputs."""
    parts = ["28x28"]
    for layer in net.hidden:
        parts.append(f"{layer.channels}x{layer.out_side}x{layer.out_side} (conv {layer.kernel}x{layer.kernel}, "
                     f"stride {layer.stride})" if isinstance(layer, ebp_conv.Conv) else str(layer))
    catalogue = ebp_conv_catalogue.catalogue_name(net.architecture)
    return f"the CNN {net.architecture}" + (f" ({catalogue})" if catalogue else "") + f": {' → '.join(parts)} → 10"


def network_text(architecture: str) -> str:
    """A net in a protocol description: "[784, 800, 10]" for a dense net, a CNN's layers (describe)."""
    return describe(network(architecture)) if is_cnn(architecture) else f"[784, {architecture.replace('-', ', ')}, 10]"


def batch_norm_maps(a, real: dict, stats: dict, l: int, train: bool):
    """mlp.batch_norm per channel of (B, channels, S, S) maps: m, v over the batch and the positions."""
    if train:
        mean, var = a.mean(axis=(0, 2, 3)), a.var(axis=(0, 2, 3))
        new = {f"mean{l}": (1 - mlp.BN_MOMENTUM) * stats[f"mean{l}"] + mlp.BN_MOMENTUM * jax.lax.stop_gradient(mean),
               f"var{l}": (1 - mlp.BN_MOMENTUM) * stats[f"var{l}"] + mlp.BN_MOMENTUM * jax.lax.stop_gradient(var)}
    else:
        mean, var, new = stats[f"mean{l}"], stats[f"var{l}"], {}

    def per_channel(v):
        return v[:, None, None]
    y = per_channel(real[f"gamma{l}"]) * (a - per_channel(mean)) / jnp.sqrt(per_channel(var) + mlp.BN_EPSILON) \
        + per_channel(real[f"beta{l}"])
    return y, new


def convolve(h, w, g: ebp_conv.Conv):
    """Σ_r W_{o,r} h_{p,r} at every channel o and position p: (B, C, S, S) → (B, channels, S', S'), no padding."""
    return jax.lax.conv_general_dilated(h, w, (g.stride, g.stride), "VALID", dimension_numbers=DIMENSIONS)


def forward(net: CNN, weights: list, real: dict, stats: dict, x, train: bool):
    """Logits z (B, 10) of the CNN on (B, 784) images, and the BN running statistics after this batch (train) or
    `stats` unchanged (test)."""
    h, new_stats = x.reshape(len(x), 1, INPUT_SIDE, INPUT_SIDE), dict(stats)
    for l, (layer, w) in enumerate(zip(net.hidden, weights[:-1]), start=1):
        if isinstance(layer, ebp_conv.Conv):
            y, new = batch_norm_maps(convolve(h, w, layer), real, stats, l, train)
        else:
            y, new = mlp.batch_norm(h.reshape(len(h), -1) @ w, real, stats, l, train)
        new_stats.update(new)
        h = mlp.sign_htanh(y)
    return jnp.exp(real["log_scale"]) * (h.reshape(len(h), -1) @ weights[-1]) + real["bias"], new_stats


@functools.cache
def compiled_logits(net: CNN):
    """forward's test-time logits, compiled once per net."""
    return jax.jit(lambda weights, real, stats, x: forward(net, weights, real, stats, x, train=False)[0])
