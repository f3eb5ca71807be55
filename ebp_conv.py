"""The mean-field convolutional layer of EBP, written like the maths (notebooks/11_convolutional_ebp.ipynb).

A convolutional layer is a locally connected layer (notebook 08) whose units at every position share one kernel.
Output unit (o, p), channel o at position p, sees the k×k×C patch x_p of its input map, whose corner is p·stride:

    u_{o,p} = (Σ_r W_{o,r} v_{p,r} + b_o) / √N,   N = k·k·C + 1   (the fan-in and the bias, as for dense layers)

With independent weights and inputs (the mean-field posterior) and the central limit theorem, as in ebp_lib:

    μ_{o,p}  = (Σ_r ⟨W_{o,r}⟩ ν_{p,r} + b_o) / √N                      a convolution of ν with ⟨W⟩
    σ²_{o,p} = (Σ_r ⟨W²_{o,r}⟩⟨v²_{p,r}⟩ − Σ_r ⟨W_{o,r}⟩² ν²_{p,r} + 1) / N     two more convolutions

EBP's step is ∂ln P/∂⟨W⟩ with every σ² frozen (notebook 10). A shared weight enters the μ of every position, so
its increment sums the positions' contributions, and the backward pass is the transposed convolution:

    δh_{o,r} = Σ_batch Σ_p Δ_{o,p} ν_{p,r} / √N,        δb_o = Σ_batch Σ_p Δ_{o,p} / √N
    Δ_{l−1} = 2 N(0|μ_{l−1}, σ²_{l−1}) · Σ_{o,p} ⟨W_{o,·}⟩ Δ_{o,p} / √N     scattered back onto the patches

The maps shrink by strided convolutions ("valid", no padding): the output of a convolution of ±1 units is again a
sign unit with a Gaussian input, so the next layer's moments are those above. A pooling of ±1 units is not ±1
(the mean of four signs takes five values, the max of signs is a sign of a non-Gaussian field), so it would need
its own moments; a stride needs none.

Maps are stored flat, channel-major: a map of C channels of side S is a row of C·S·S numbers, as an image is a
row of 784 pixels, so a dense layer can follow a convolutional one unchanged. A layer's kernel is ebp_lib.Layer's
h of shape (channels, C·k·k), its bias b of shape (channels,). ebp_lib dispatches to this module for a Layer
whose `conv` is a Conv; ebp_jax computes the same with jax.lax.conv_general_dilated. The reference section at the
end writes the same layer as a loop over positions (the shared kernel copied into a dense masked matrix), which
the tests and the notebook check the vectorised code against.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A convolutional layer in an architecture list: ("conv", kernel, channels, stride).
CONV = "conv"  # named c<kernel>x<channels>s<stride> in an architecture name (reproduction/architectures.py)


@dataclass(frozen=True)
class Conv:
    """The geometry of one convolutional layer: `in_channels` input maps of side `in_side`, `channels` output maps,
    `kernel`×`kernel` patches every `stride` pixels, no padding."""
    in_channels: int
    in_side: int
    kernel: int
    channels: int
    stride: int

    @property
    def out_side(self) -> int:
        return (self.in_side - self.kernel) // self.stride + 1

    @property
    def positions(self) -> int:
        """P, the number of output positions: how many times every shared weight is used."""
        return self.out_side ** 2

    @property
    def fan_in(self) -> int:
        """k·k·C, the inputs of one unit (N = fan_in + 1 with the bias)."""
        return self.in_channels * self.kernel ** 2

    @property
    def units(self) -> int:
        return self.channels * self.positions

    @property
    def inputs(self) -> int:
        return self.in_channels * self.in_side ** 2


def is_conv_spec(spec) -> bool:
    """Whether an architecture entry is ("conv", kernel, channels, stride) (a list, as JSON stores it, too)."""
    return isinstance(spec, (tuple, list)) and len(spec) == 4 and spec[0] == CONV


def conv_geometry(spec, in_channels: int, in_side: int, where: str = "") -> Conv:
    """The Conv of an architecture entry ("conv", k, channels, stride) on `in_channels` maps of side `in_side`;
    ValueError saying what is wrong (a kernel that does not fit the map, a non-positive number)."""
    _, kernel, channels, stride = spec
    for name, value in (("kernel", kernel), ("channels", channels), ("stride", stride)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{where}conv {name}={value!r} must be a positive integer")
    if kernel > in_side:
        raise ValueError(f"{where}conv kernel {kernel} is larger than its {in_side}x{in_side} input map")
    return Conv(int(in_channels), int(in_side), int(kernel), int(channels), int(stride))


def geometries(architecture, input_side: int) -> list:
    """The Conv of every convolutional entry of a (validated) architecture list, None for the other layers."""
    out, side, channels = [], input_side, 1
    for spec in architecture:
        if is_conv_spec(spec):
            out.append(conv_geometry(spec, channels, side))
            side, channels = out[-1].out_side, out[-1].channels
        else:
            out.append(None)
            if isinstance(spec, (tuple, list)):  # ("local", block): one map
                side, channels = side - spec[1] + 1, 1
    return out


# ----------------------------------------------------------------------------------------------------------
# Patches: the map ↔ (position, patch) views that turn a convolution into one matrix product
# ----------------------------------------------------------------------------------------------------------

def patches(v: np.ndarray, g: Conv) -> np.ndarray:
    """(B, C·S·S) flat maps → (B, P, C·k·k): row p holds the patch x_p of position p, ordered (channel, row,
    column) like a kernel's columns."""
    maps = v.reshape(len(v), g.in_channels, g.in_side, g.in_side)
    windows = np.lib.stride_tricks.sliding_window_view(maps, (g.kernel, g.kernel), axis=(2, 3))
    windows = windows[:, :, ::g.stride, ::g.stride][:, :, :g.out_side, :g.out_side]  # (B, C, S', S', k, k)
    return windows.transpose(0, 2, 3, 1, 4, 5).reshape(len(v), g.positions, g.fan_in)


def unpatch(cols: np.ndarray, g: Conv) -> np.ndarray:
    """The adjoint of `patches`: (B, P, C·k·k) → (B, C·S·S), every patch entry added back onto its input pixel
    (overlapping patches sum)."""
    b, s, end = len(cols), g.stride, g.stride * (g.out_side - 1) + 1
    cols = cols.reshape(b, g.out_side, g.out_side, g.in_channels, g.kernel, g.kernel)
    maps = np.zeros((b, g.in_channels, g.in_side, g.in_side), cols.dtype)
    for a in range(g.kernel):
        for c in range(g.kernel):  # k² shifted, strided slices: each adds one kernel offset of every position
            maps[:, :, a:a + end:s, c:c + end:s] += cols[:, :, :, :, a, c].transpose(0, 3, 1, 2)
    return maps.reshape(b, g.inputs)


def correlate(v: np.ndarray, w: np.ndarray, g: Conv) -> np.ndarray:
    """Σ_r w_{o,r} v_{p,r} for every channel o and position p: (B, C·S·S) maps, (channels, C·k·k) kernel →
    (B, channels·P) flat output maps (the cross-correlation that deep-learning libraries call a convolution)."""
    return (patches(v, g) @ w.T).transpose(0, 2, 1).reshape(len(v), g.units)


def per_unit(values: np.ndarray, g: Conv) -> np.ndarray:
    """A (channels,) array repeated over the P positions: (channels·P,), channel-major like the output maps."""
    return np.repeat(values, g.positions)


# ----------------------------------------------------------------------------------------------------------
# Forward, backward, update (the equations of the module docstring)
# ----------------------------------------------------------------------------------------------------------

def moments(g: Conv, w_mean, w2, b, normaliser, nu_prev, v2_prev, nu2_prev):
    """μ and σ² of every output unit (o, p), as ebp_lib.layer_moments for one dense unit but with shared weights:

        μ  = (⟨W⟩ ⋆ ν + b) / √N
        σ² = (⟨W²⟩ ⋆ ⟨v²⟩ − ⟨W⟩² ⋆ ν² + 1) / N          (⋆: correlate; N per unit, `normaliser`)

    v2_prev None: ±1 inputs (⟨v²⟩ = 1), whose first term is Σ_r ⟨W²_{o,r}⟩ at every position."""
    second = (per_unit(w2.sum(axis=1), g) if v2_prev is None else correlate(v2_prev, w2, g))
    mu = (correlate(nu_prev, w_mean, g) + per_unit(b, g)) / np.sqrt(normaliser)
    sigma2 = (second - correlate(nu2_prev, w_mean * w_mean, g) + 1.0) / normaliser
    return mu, sigma2


def back_project(g: Conv, scaled_delta: np.ndarray, w_mean: np.ndarray) -> np.ndarray:
    """Σ_{o,p} ⟨W_{o,r}⟩ (Δ_{o,p}/√N) summed onto the input that weight r of position p reads: the transposed
    convolution, (B, channels·P) → (B, C·S·S). ebp_lib.backward multiplies it by 2N(0|μ,σ²)."""
    per_position = scaled_delta.reshape(len(scaled_delta), g.channels, g.positions).transpose(0, 2, 1)
    return unpatch(per_position @ w_mean, g)


def increment(g: Conv, nu_prev: np.ndarray, scaled_delta: np.ndarray) -> np.ndarray:
    """δh_{o,r} = Σ_batch Σ_p (Δ_{o,p}/√N) ν_{p,r}: every position's contribution to the shared weight, summed."""
    per_position = scaled_delta.reshape(len(scaled_delta), g.channels, g.positions)
    return np.einsum("bop,bpr->or", per_position, patches(nu_prev, g))


def bias_increment(g: Conv, scaled_delta: np.ndarray) -> np.ndarray:
    """δb_o = Σ_batch Σ_p Δ_{o,p}/√N: the shared bias sums its positions too."""
    return scaled_delta.reshape(len(scaled_delta), g.channels, g.positions).sum(axis=(0, 2))


def sign_layer(v: np.ndarray, w: np.ndarray, b: np.ndarray, g: Conv, scale: float = 1.0) -> np.ndarray:
    """u = p·(W ⋆ v) + b of the deterministic network (EBP-D, ebp_lib.output_ebp_d) for one convolutional layer."""
    return scale * correlate(v, w, g) + per_unit(b, g)


# ----------------------------------------------------------------------------------------------------------
# Reference: the same layer as a loop over positions, each a dense unit with a copy of the kernel
# ----------------------------------------------------------------------------------------------------------

def unrolled(w: np.ndarray, g: Conv) -> tuple[np.ndarray, np.ndarray]:
    """The shared kernel (channels, C·k·k) copied into the dense (channels·P, C·S·S) matrix of the locally
    connected layer it equals, position by position, and its 0/1 mask (notebook 08's masks): (matrix, mask)."""
    return placed(w, g), placed(np.ones_like(w), g) > 0


def placed(w: np.ndarray, g: Conv) -> np.ndarray:
    """The loop over positions: row (o, p) of the dense matrix holds kernel o on the patch of position p."""
    dense = np.zeros((g.channels, g.positions, g.in_channels, g.in_side, g.in_side), w.dtype)
    kernel = w.reshape(g.channels, g.in_channels, g.kernel, g.kernel)
    for p in range(g.positions):
        row, col = divmod(p, g.out_side)
        a, c = row * g.stride, col * g.stride
        dense[:, p, :, a:a + g.kernel, c:c + g.kernel] = kernel
    return dense.reshape(g.units, g.inputs)


def folded(dense_increment: np.ndarray, g: Conv) -> np.ndarray:
    """A dense (channels·P, C·S·S) increment summed back onto the shared kernel, position by position: the
    Bayes update of a shared weight adds the contributions of every position it is used at."""
    dense = dense_increment.reshape(g.channels, g.positions, g.in_channels, g.in_side, g.in_side)
    total = np.zeros((g.channels, g.in_channels, g.kernel, g.kernel), dense_increment.dtype)
    for p in range(g.positions):
        row, col = divmod(p, g.out_side)
        a, c = row * g.stride, col * g.stride
        total += dense[:, p, :, a:a + g.kernel, c:c + g.kernel]
    return total.reshape(g.channels, g.fan_in)
