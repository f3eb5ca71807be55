"""Expectation BackPropagation (EBP) for binary and real-weight networks on MNIST, written like the maths.

The readable core of the reproduction of Cheng, Soudry, Mao & Lan (2015), "Training Binary Multilayer Neural
Networks for Image Classification using Expectation Backpropagation". The numbered notebooks derive every
equation; this file implements each one once, in the order they derive them, and `docs/maths.md` states
them (references "docs/maths.md §Forward pass" name its sections).

Sections: model: posterior and architecture (notebooks 01, 04, 05, 08) · forward pass (02, 07) · backward pass
(03) · update and one training step (03, 04) · outputs EBP-P / EBP-D and the sign network (06) · persistence.

Beside it: `ebp_train.py` runs these equations: the engines, the training loop, evaluation and fit with
checkpoint and resume; `ebp_data.py` loads and standardises the data (notebook 00); `ebp_checkpoint.py` is the
file format of saved networks and checkpoints; `ebp_fast.py` runs the same training steps in float32 as compiled
(numba) loops (`engine="fast"`, the default; ebp_train.ENGINES); `ebp_checks.py` holds the Monte Carlo, finite-difference and
exact-enumeration references that the tests and notebooks check this file against; `ebp_analysis.py` the
notebooks' helpers for trained networks (learning curves, calibration, receptive fields); `ebp_conv.py` the
convolutional layer (notebook 11), to which the functions below dispatch a Layer whose `conv` is set.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
from scipy import special

import ebp_checkpoint
import ebp_conv
from ebp_checkpoint import CheckpointError, float32_if_exact, open_checkpoint, write_checkpoint

# ----------------------------------------------------------------------------------------------------------
# Model: the mean-field posterior of every weight, and the architecture (docs/maths.md §Notation,
# §Posterior parametrisation, §Spatial filtering)
# ----------------------------------------------------------------------------------------------------------

WEIGHTS = ("binary", "real")
# The two readings of the paper's dropout (docs/maths.md §Dropout); None: no dropout.
DROPOUT_READINGS = ("analytic", "sampled")
# The weights outside a spatial unit's receptive field (docs/maths.md §Spatial filtering): "absent" (they do not
# exist: N counts the connected inputs) or "held" (the paper's full matrix with those elements kept at h = 0:
# mean 0 but variance 1, so they add to σ², and N counts every input).
MASK_READINGS = ("absent", "held")
DEFAULT_MASK_READING = "absent"
# The update as the spec writes it ("spec", the default), or as one of the authors' codes computed it. Real weights
# (docs/maths.md §The authors' real-weight code): Real_EBP_minibatch.m with its two differences together
# ("authors") or one at a time. Binary weights (docs/maths.md §The authors' binary code of 2015):
# Binary_EBP_minibatch.m as it was when the paper was written, before its fix of 2015-09-15, whose forward and
# backward passes used ⟨W⟩ one minibatch stale ("authors-2015"); since that fix it computes the spec's update.
# Each entry is the one place its words live: the command line, the parameter check, the tables and the mechanism
# list read them from here.


class Update(NamedTuple):
    """An update of UPDATES: the weight type it applies to (None: both); what it changes from the spec's equations
    (`through_updated`: Δ back-propagated through this step's updated ⟨W⟩; `extra_variance`: σ² of every layer
    after the first + 1/N; `lagged`: ⟨W⟩ = tanh h of the h before the previous step's update); `label`, a few words
    saying what it changes; `help`, one line saying whose code it is; `code`, the docs/maths.md section of the
    authors' code it transcribes (None: the spec's); and `as_paper_ran`, whether it is that code as it was when the
    paper was written."""
    weights: str | None
    through_updated: bool
    extra_variance: bool
    lagged: bool
    label: str
    help: str
    code: str | None = None
    as_paper_ran: bool = False


REAL_CODE, BINARY_CODE = "The authors' real-weight code", "The authors' binary code of 2015"  # docs/maths.md §
UPDATES = {
    "spec": Update(None, False, False, False, "the paper's equations", "the paper's equations (the default)"),
    "authors": Update("real", True, True, False, "both differences of Real_EBP_minibatch.m",
                      "the authors' Real_EBP_minibatch.m, both of its differences", REAL_CODE, True),
    "authors-delta": Update("real", True, False, False, "Δ through the updated ⟨W⟩",
                            "Real_EBP_minibatch.m's first difference alone: Δ back-propagated through the "
                            "updated weights", REAL_CODE),
    "authors-variance": Update("real", False, True, False, "σ² + 1/N after the first layer",
                               "Real_EBP_minibatch.m's second difference alone: σ² + 1/N after the first layer",
                               REAL_CODE),
    "authors-2015": Update("binary", False, False, True, "⟨W⟩ one minibatch stale",
                           "the authors' Binary_EBP_minibatch.m as the paper ran it (⟨W⟩ one step stale)",
                           BINARY_CODE, True)}
DEFAULT_UPDATE = "spec"


def update_applies(update: str, weights: str) -> bool:
    """Whether the update `update` (a name of UPDATES) can train weights of type `weights`."""
    return UPDATES[update].weights in (None, weights)


def check_update(update, weights: str) -> None:
    """ValueError unless `update` names an entry of UPDATES that applies to `weights`."""
    if update not in UPDATES:
        raise ValueError(f"unknown update {update!r}; choose one of {', '.join(UPDATES)}")
    if not update_applies(update, weights):
        usable = ", ".join(name for name in UPDATES if update_applies(name, weights))
        raise ValueError(f"the update {update!r} is the authors' code for {UPDATES[update].weights} weights; {weights} "
                         f"weights take one of {usable}")


@dataclass
class Layer:
    """One layer's posterior: h (V, K) natural parameters (binary) or means (real), b (V,) the real bias,
    an optional 0/1 connectivity mask (V, K). `normaliser` (V,) is N = fan-in + 1 of each unit (the +1 is the
    bias, docs/maths.md §Notation); with a mask the fan-in is the number of connected inputs, unless `held`:
    then the masked weights are held at h = 0 but still count (the "held" reading of MASK_READINGS). A
    convolutional layer (`conv`, ebp_conv.Conv) holds its shared kernels: h (channels, k·k·C), b (channels,);
    its normaliser is still per output unit (channels·positions,), N = k·k·C + 1."""
    h: np.ndarray
    b: np.ndarray
    mask: np.ndarray | None = None
    held: bool = False
    conv: ebp_conv.Conv | None = None
    normaliser: np.ndarray = field(init=False)

    def __post_init__(self):
        absent = self.mask is not None and not self.held
        if self.conv is not None:
            fan_in = np.full(self.conv.units, self.conv.fan_in)
        else:
            fan_in = self.mask.sum(axis=1) if absent else np.full(len(self.h), self.h.shape[1])
        self.normaliser = (fan_in + 1).astype(self.h.dtype)

    @property
    def units(self) -> int:
        return len(self.h) if self.conv is None else self.conv.units

    @property
    def inputs(self) -> int:
        return self.h.shape[1] if self.conv is None else self.conv.inputs


@dataclass
class Network:
    """An EBP network: layers, the weight type, its architecture and the dropout reading (keep probability p).
    `architecture` lists the layers after the input, e.g. [800, 800, 10] (fully connected) or
    [("local", 10), ("local", 10), 10] (spatial filtering, then a fully connected output layer) or
    [("conv", 5, 16, 2), ("conv", 5, 32, 2), 10] (convolutions: kernel, channels, stride; ebp_conv)."""
    layers: list[Layer]
    weights: str
    architecture: list
    input_side: int = 28
    dropout: str | None = None
    keep: float = 0.8
    mask_reading: str = DEFAULT_MASK_READING
    real_update: str = DEFAULT_UPDATE

    @property
    def sizes(self) -> list[int]:
        return [self.layers[0].inputs] + [layer.units for layer in self.layers]

    @property
    def real_update_parts(self) -> Update:
        """What this network's update (real_update, a name of UPDATES) changes from the spec's."""
        return UPDATES[self.real_update]

    @property
    def analytic_factor(self) -> float:
        """1 − 4p(1 − p) of this network's keep probability p (analytic_factor)."""
        return analytic_factor(self.keep)

    @property
    def lagged_mean(self) -> bool:
        """Whether a training step sees ⟨W⟩ = tanh h one step stale (UPDATES "authors-2015", lagged_step)."""
        return self.real_update_parts.lagged


def weight_moments(layer: Layer, weights: str) -> tuple[np.ndarray, np.ndarray]:
    """⟨W⟩ and ⟨W²⟩ of every weight (docs/maths.md §Posterior parametrisation); 0 where masked out (a held
    weight keeps h = 0: ⟨W⟩ = 0 but ⟨W²⟩ = 1).

        binary, P(W = ±1) ∝ exp(hW):  ⟨W⟩ = tanh h,  ⟨W²⟩ = 1
        real, W ~ N(h, 1):            ⟨W⟩ = h,       ⟨W²⟩ = h² + 1
    """
    if weights == "binary":
        mean, second = np.tanh(layer.h), np.ones_like(layer.h)
    else:
        mean, second = layer.h, layer.h * layer.h + 1.0
    if layer.mask is not None and not layer.held:
        mean, second = mean * layer.mask, second * layer.mask
    return mean, second


def local_mask(side: int, block: int) -> np.ndarray:
    """0/1 connectivity of a locally connected layer (docs/maths.md §Spatial filtering): unit (a, c) of the
    (side−block+1)² output map sees the block×block input patch whose corner is (a, c). Returns a boolean
    (out_side², side²) matrix with exactly block² ones per row."""
    if not 1 <= block <= side:
        raise ValueError(f"block size {block} must be between 1 and the image side {side}")
    out = side - block + 1
    mask = np.zeros((out, out, side, side), dtype=bool)
    for a in range(out):
        for c in range(out):
            mask[a, c, a:a + block, c:c + block] = True
    return mask.reshape(out * out, side * side)


def check_architecture(architecture, input_side: int = 28) -> list[int]:
    """Validate a layer list (block sizes must fit the map they act on); return the sizes [inputs, units...]."""
    if not architecture:
        raise ValueError("architecture is empty: give at least the output layer, e.g. [200, 10]")
    side, channels, sizes = input_side, 1, [input_side ** 2]
    for k, spec in enumerate(architecture):
        if ebp_conv.is_conv_spec(spec):
            if side is None:
                raise ValueError(f"layer {k + 1}: a conv layer must follow the image or another map layer")
            g = ebp_conv.conv_geometry(spec, channels, side, f"layer {k + 1}: ")
            side, channels = g.out_side, g.channels
            sizes.append(g.units)
        elif isinstance(spec, (tuple, list)) and len(spec) == 2 and spec[0] == "local":
            if side is None or channels != 1:
                raise ValueError(f"layer {k + 1}: a local layer must follow the image or another local layer")
            if not isinstance(spec[1], (int, np.integer)) or not 1 <= spec[1] <= side:
                raise ValueError(f"layer {k + 1}: block size {spec[1]!r} must be an integer between 1 and the "
                                 f"side {side} of its input map")
            side, channels = side - spec[1] + 1, 1
            sizes.append(side * side)
        elif isinstance(spec, (int, np.integer)) and not isinstance(spec, bool) and spec >= 1:
            side = None
            sizes.append(int(spec))
        else:
            raise ValueError(f"layer {k + 1}: {spec!r} is neither a positive layer size, ('local', block) nor "
                             f"('conv', kernel, channels, stride)")
    return sizes


def init_network(architecture, weights: str = "binary", seed: int = 0, input_side: int = 28,
                 init_scale: float = 1.0, dropout: str | None = None, keep: float = 0.8,
                 dtype=np.float64, mask_reading: str = DEFAULT_MASK_READING,
                 real_update: str = DEFAULT_UPDATE) -> Network:
    """A new network: h ~ Uniform with variance init_scale/K per unit (K: the connected inputs), b = 0
    (docs/maths.md §Posterior parametrisation). Masked-out weights are exactly 0 and stay 0; `mask_reading`
    says whether they are absent or held at h = 0 (MASK_READINGS); `real_update` which update trains it: the
    spec's, or one of the authors' codes for this weight type (UPDATES). The same seed gives the same network."""
    if weights not in WEIGHTS:
        raise ValueError(f"unknown weight type {weights!r}; choose 'binary' or 'real'")
    if dropout not in (None, *DROPOUT_READINGS):
        raise ValueError(f"unknown dropout {dropout!r}; choose None, 'analytic' or 'sampled'")
    if not 0 < keep <= 1:
        raise ValueError(f"dropout keep probability p={keep} must be in (0, 1]")
    if not init_scale > 0:
        raise ValueError(f"init_scale={init_scale} must be positive")
    if mask_reading not in MASK_READINGS:
        raise ValueError(f"unknown mask reading {mask_reading!r}; choose 'absent' or 'held'")
    check_update(real_update, weights)
    check_architecture(architecture, input_side)
    return _new_network(architecture, weights, seed, input_side, init_scale, dropout, keep, dtype, mask_reading,
                        real_update)


def _new_network(architecture, weights, seed, input_side, init_scale, dropout, keep, dtype, mask_reading,
                 real_update) -> Network:
    """init_network without its checks, for values validated already (reproduction.parameters.RunConfig.network)."""
    rng = np.random.default_rng(seed)
    layers, width, side, channels = [], input_side ** 2, input_side, 1
    for spec in architecture:
        if ebp_conv.is_conv_spec(spec):  # shared kernels, h ~ Uniform of variance init_scale/(k·k·C)
            g = ebp_conv.conv_geometry(spec, channels, side)
            h = (rng.random((g.channels, g.fan_in)) - 0.5) * np.sqrt(12 * init_scale / g.fan_in)
            layers.append(Layer(h.astype(dtype), np.zeros(g.channels, dtype), conv=g))
            width, side, channels = g.units, g.out_side, g.channels
            continue
        if isinstance(spec, (tuple, list)):
            mask = local_mask(side, spec[1])
            side, channels = side - spec[1] + 1, 1
        else:
            mask, side = None, None
        units = len(mask) if mask is not None else int(spec)
        fan_in = mask.sum(axis=1, keepdims=True) if mask is not None else width
        h = (rng.random((units, width)) - 0.5) * np.sqrt(12 * init_scale / fan_in)
        if mask is not None:
            h *= mask
        layers.append(Layer(h.astype(dtype), np.zeros(units, dtype), mask, held=mask_reading == "held"))
        width = units
    return Network(layers, weights, [list(s) if isinstance(s, tuple) else s for s in architecture],
                   input_side, dropout, keep, mask_reading, real_update)


# ----------------------------------------------------------------------------------------------------------
# Forward pass: Gaussian (central-limit) moments of every unit's input (docs/maths.md §Forward pass, §Dropout)
# ----------------------------------------------------------------------------------------------------------

def layer_moments(layer: Layer, weights: str, nu_prev, v2_prev, nu2_prev):
    """μ and σ² of u = (W v + b)/sqrt(N) for independent W and v (docs/maths.md §Forward pass):

        μ  = (⟨W⟩·ν + b) / sqrt(N)
        σ² = (Σ_r ⟨W_r²⟩⟨v_r²⟩ − Σ_r ⟨W_r⟩² ν_r² + 1) / N

    nu_prev = ⟨v⟩, v2_prev = ⟨v²⟩ (None for ±1 hidden units, where it is 1), nu2_prev = ⟨v⟩² (it differs
    from nu_prev² only for the analytic input dropout). Returns μ, σ² and ⟨W⟩ (the backward pass reuses it).
    A convolutional layer computes the same sums over every position's patch (ebp_conv.moments).
    """
    w_mean, w2 = weight_moments(layer, weights)
    if layer.conv is not None:
        return (*ebp_conv.moments(layer.conv, w_mean, w2, layer.b, layer.normaliser, nu_prev, v2_prev, nu2_prev),
                w_mean)
    second = w2.sum(axis=1) if v2_prev is None else v2_prev @ w2.T
    mu = (nu_prev @ w_mean.T + layer.b) / np.sqrt(layer.normaliser)
    sigma2 = (second - nu2_prev @ (w_mean * w_mean).T + 1.0) / layer.normaliser
    return mu, sigma2, w_mean


def mean_input(layer: Layer, nu_prev, w_mean):
    """μ = (⟨W⟩·ν + b)/sqrt(N) of layer_moments for given mean weights (dense, or a convolution: ebp_conv)."""
    if layer.conv is not None:
        product = ebp_conv.correlate(nu_prev, w_mean, layer.conv) + ebp_conv.per_unit(layer.b, layer.conv)
        return product / np.sqrt(layer.normaliser)
    return (nu_prev @ w_mean.T + layer.b) / np.sqrt(layer.normaliser)


def unit_mean(mu, sigma2):
    """ν = ⟨sign u⟩ for u ~ N(μ, σ²):  ν = 2Φ(μ/σ) − 1 = erf(μ / sqrt(2σ²))."""
    return special.erf(mu / np.sqrt(2.0 * sigma2))


def gaussian_at_zero(mu, sigma2):
    """N(0|μ,σ²) = φ(μ/σ)/σ, the density of u at 0:  d⟨sign u⟩/dμ = 2 N(0|μ,σ²)."""
    return np.exp(-0.5 * mu * mu / sigma2) / np.sqrt(2.0 * np.pi * sigma2)


@dataclass
class Pass:
    """What one forward pass keeps for the backward pass: per layer the (effective) input means ν_{l-1},
    the weight means w_mean = ⟨W_l⟩, μ_l, σ²_l, ν_l and the dropout masks of the inputs (None without sampled
    dropout)."""
    inputs: list
    w_mean: list
    mu: list
    sigma2: list
    nu: list
    masks: list


def analytic_factor(keep: float) -> float:
    """1 − 4p(1 − p): the factor of the image's ⟨v⟩² in the first layer's σ² under the analytic dropout reading
    (docs/maths.md §Dropout): a pixel x kept with probability p counts as noise of variance 4p(1 − p)x²."""
    return 1.0 - 4.0 * keep * (1.0 - keep)


def forward(net: Network, x: np.ndarray, train: bool = False, rng=None, hard=()) -> Pass:
    """The forward pass for a minibatch x (B, 784): layer_moments and unit_mean, layer by layer
    (docs/maths.md §Forward pass). Dropout with keep probability p = net.keep (docs/maths.md §Dropout):

    - "analytic" (the authors' code): the image keeps its mean but counts as noisy with variance 4p(1−p):
      Σ m² x² becomes (1 − 4p(1−p)) Σ m² x² in the first layer's σ², at train and test time;
    - "sampled": in training (train=True) the inputs of every layer (image and hidden units) are multiplied by
      Bernoulli(p) masks drawn from `rng`; at test time the weights are scaled by p: ⟨v⟩ → p⟨v⟩, ⟨v²⟩ → p²⟨v²⟩.

    The hidden layers listed in `hard` (1-based) pass on sign(μ_l) (hard_sign: certain ±1 units) instead of their
    means ν_l (ebp_analysis.partly_hard_outputs reads which layer's rounding costs what).
    """
    nu, v2, nu2 = x, x * x, x * x
    if net.dropout == "analytic":
        nu2 = net.analytic_factor * nu2
    out = Pass([], [], [], [], [], [])
    extra_variance = net.real_update_parts.extra_variance
    for k, layer in enumerate(net.layers):
        mask = None
        if net.dropout == "sampled":
            if train:
                mask = (rng.random(nu.shape) < net.keep).astype(nu.dtype)
                nu = nu * mask
                v2 = mask if v2 is None else v2 * mask
            else:
                nu = net.keep * nu
                v2 = np.full_like(nu, net.keep ** 2) if v2 is None else net.keep ** 2 * v2
            nu2 = nu * nu
        mu, sigma2, w_mean = layer_moments(layer, net.weights, nu, v2, nu2)
        if extra_variance and k > 0:
            sigma2 = sigma2 + authors_variance_term(layer)
        out.inputs.append(nu)
        out.w_mean.append(w_mean)
        out.masks.append(mask)
        out.mu.append(mu)
        out.sigma2.append(sigma2)
        nu = hard_sign(mu) if k + 1 in hard else unit_mean(mu, sigma2)
        out.nu.append(nu)
        v2, nu2 = None, nu * nu
    return out


def authors_variance_term(layer: Layer):
    """What the authors' real-weight code adds to σ² of every layer after the first: it computes
    σ² = 1 + (Σ_r ⟨W_r⟩²(1 − ν_r²) + 1)/N where layer_moments gives (K + Σ_r ⟨W_r⟩²(1 − ν_r²) + 1)/N for K
    inputs of ⟨v²⟩ = 1 and Var W = 1; with N = K + 1 the difference is 1/N (docs/maths.md §The authors'
    real-weight code)."""
    return 1.0 / layer.normaliser


# ----------------------------------------------------------------------------------------------------------
# Backward pass: Δ = ∂ ln P(v_L = y) / ∂μ with σ held fixed (docs/maths.md §Backward pass)
# ----------------------------------------------------------------------------------------------------------

def log_phi_ratio(t):
    """ln(φ(t)/Φ(t)) = ln sqrt(2/π) − ln erfcx(−t/√2), finite for every real t: since Φ(t) = ½ erfcx(−t/√2)
    e^{−t²/2}, the Gaussian factors cancel exactly (no 0/0 for t → −∞, where φ/Φ ~ −t; a clean 0 for t → +∞)."""
    return 0.5 * np.log(2.0 / np.pi) - np.log(special.erfcx(-t / np.sqrt(2.0)))


def output_delta(y, mu, sigma2):
    """Δ of the output layer, through log_phi_ratio (finite, with the sign of y, for any μ/σ and either label;
    the naive ratio is 0/0 once |μ/σ| ≳ 38):

        Δ_L = y N(0|μ,σ²) / Φ(yμ/σ) = (y/σ) φ(t)/Φ(t),   t = yμ/σ
    """
    sigma = np.sqrt(sigma2)
    return y / sigma * np.exp(log_phi_ratio(y * mu / sigma))


def backward(net: Network, fwd: Pass, y: np.ndarray, step: int | None = None) -> list[np.ndarray]:
    """Δ of every layer, output to input (docs/maths.md §Backward pass), with ⟨W⟩ from before this step's update:

        Δ_{l−1} = 2 N(0|μ_{l−1},σ²_{l−1}) Σ_j ⟨W_{j·,l}⟩ Δ_{j,l} / sqrt(N_{j,l})

    (the authors' real-weight code, UPDATES "authors" and "authors-delta", updates layer l first and uses
    ⟨W_l⟩ + δh_l instead). Sampled dropout zeroes the Δ of dropped units. Raises FloatingPointError naming the
    layer (and `step`) if a Δ is not finite, before any update.
    """
    through_updated = net.real_update_parts.through_updated
    deltas = [output_delta(y, fwd.mu[-1], fwd.sigma2[-1])]
    for k in range(len(net.layers) - 1, 0, -1):
        w_mean = fwd.w_mean[k]
        if through_updated:  # real weights: ⟨W⟩ = h, so the updated mean is ⟨W⟩ + δh
            w_mean = w_mean + layer_increment(net.layers[k], fwd.inputs[k], deltas[0])
        scaled = deltas[0] / np.sqrt(net.layers[k].normaliser)
        conv = net.layers[k].conv  # a convolution back-projects through its transpose (ebp_conv.back_project)
        back = scaled @ w_mean if conv is None else ebp_conv.back_project(conv, scaled, w_mean)
        delta = 2.0 * gaussian_at_zero(fwd.mu[k - 1], fwd.sigma2[k - 1]) * back
        if fwd.masks[k] is not None:
            delta *= fwd.masks[k]
        deltas.insert(0, delta)
    for k, delta in enumerate(deltas):
        if not np.all(np.isfinite(delta)):
            where = f" at step {step}" if step is not None else ""
            raise FloatingPointError(f"non-finite Δ in layer {k + 1}{where}: {nonfinite_origin(net, fwd)}; "
                                     f"training stopped before the update, so the parameters are those of the "
                                     f"last finite step")
    return deltas


def nonfinite_parameters(net: Network) -> list[str]:
    """The parameters that hold NaN/inf, e.g. ["b of layer 2"] ([] if all are finite)."""
    return [f"{name} of layer {k + 1}" for k, layer in enumerate(net.layers)
            for name, values in (("h", layer.h), ("b", layer.b)) if not np.isfinite(values).all()]


def check_finite_parameters(net: Network, step=None) -> None:
    """FloatingPointError naming the parameters that hold NaN/inf (and `step`, the first step of a call): Δ is then
    not finite (NaN) or the update meaningless (an infinite b or h passes ⟨W⟩ = ±1 and ν = ±1 on as if finite)."""
    bad = nonfinite_parameters(net)
    if bad:
        where = f" at step {step}" if step is not None else ""
        raise FloatingPointError(
            f"non-finite {bad[0]}{where}: NaN/inf in {', '.join(bad)}, so Δ is not finite (NaN) or the update is "
            f"meaningless (inf); training stopped before the first update, so the parameters are unchanged")


def nonfinite_origin(net: Network, fwd: Pass) -> str:
    """Where a NaN/inf came from: the parameters that hold one, else the first layer (from the input) whose
    forward moments are not finite (the input itself, or an overflow there)."""
    bad = nonfinite_parameters(net)
    if bad:
        return "NaN/inf in " + ", ".join(bad)
    for k, (mu, sigma2) in enumerate(zip(fwd.mu, fwd.sigma2)):
        if not (np.isfinite(mu).all() and np.isfinite(sigma2).all()):
            inputs = "the input images hold NaN/inf" if not np.isfinite(fwd.inputs[0]).all() else "an overflow"
            return f"every parameter is finite; μ or σ² first becomes non-finite in layer {k + 1} ({inputs})"
    return "every parameter and every forward moment is finite"


# ----------------------------------------------------------------------------------------------------------
# Update: the first-order Bayes update of every factor, summed over the minibatch (docs/maths.md §Update)
# ----------------------------------------------------------------------------------------------------------

def layer_increment(layer: Layer, nu_prev, delta) -> np.ndarray:
    """One layer's h increment, ∂ ln P(v_L = y)/∂⟨W⟩ summed over the minibatch (0 where masked out):

        δh_ij = Σ_batch Δ_i ν_j / sqrt(N_i)     (ν_j = x_j at the first layer)

    A shared (convolutional) weight sums the same terms over every position it is used at (ebp_conv.increment).
    """
    if layer.conv is not None:
        return ebp_conv.increment(layer.conv, nu_prev, delta / np.sqrt(layer.normaliser))
    inc = (delta / np.sqrt(layer.normaliser)).T @ nu_prev
    return inc * layer.mask if layer.mask is not None else inc


def increments(net: Network, fwd: Pass, deltas: list[np.ndarray]) -> list[np.ndarray]:
    """The h increment of every layer (layer_increment)."""
    return [layer_increment(layer, nu_prev, delta) for layer, nu_prev, delta in zip(net.layers, fwd.inputs, deltas)]


def update(net: Network, fwd: Pass, deltas: list[np.ndarray]) -> None:
    """The update, in place (docs/maths.md §Update): h += increments (the natural parameter of a binary weight, the
    mean of a real one, whose variance stays 1), and for the bias

        b_i += Σ_batch Δ_i / sqrt(N_i)      (a shared bias: summed over its positions too)
    """
    for layer, increment, delta in zip(net.layers, increments(net, fwd, deltas), deltas):
        layer.h += increment
        scaled = delta / np.sqrt(layer.normaliser)
        layer.b += scaled.sum(axis=0) if layer.conv is None else ebp_conv.bias_increment(layer.conv, scaled)


def check_data(net: Network, x: np.ndarray, y: np.ndarray, batch_size) -> None:
    """Refuse, before any work, data of the wrong shape and a batch size that is not a positive integer."""
    if x.ndim != 2 or x.shape[1] != net.sizes[0]:
        raise ValueError(f"inputs have shape {x.shape}; this network needs (n, {net.sizes[0]}) "
                         f"(flatten the {net.input_side}x{net.input_side} images)")
    if y.shape != (len(x), net.sizes[-1]):
        raise ValueError(f"targets have shape {y.shape}; need ({len(x)}, {net.sizes[-1]}) ±1 one-vs-all "
                         f"vectors (see ebp_data.one_vs_all)")
    # The likelihood Φ(y·μ/σ) is the paper's for y = ±1 only: a 0 target contributes nothing and trains no unit.
    if not np.isin(y, (-1, 1)).all():
        raise ValueError(f"targets hold values other than ±1 ({np.unique(y)[:5].tolist()}...): EBP's one-vs-all "
                         f"targets are +1 for the true class and -1 otherwise (ebp_data.one_vs_all)")
    # Raw pixels (0..255) would make every unit's input σ² thousands of times the standardised one.
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"inputs are {x.dtype}, not floating point: standardise the raw pixels first "
                         f"(ebp_data.standardise or ebp_data.load_dataset)")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1 (1 = the paper's online learning)")


def check_rng(net: Network, rng) -> None:
    """Sampled dropout draws its masks from a generator: ValueError if `rng` is None for such a network."""
    if rng is None and net.dropout == "sampled":
        raise ValueError("sampled dropout draws its masks from rng: pass rng=np.random.default_rng(seed)")


def ebp_step(net: Network, x: np.ndarray, y: np.ndarray, rng=None, step: int | None = None) -> None:
    """One EBP step on a minibatch, in place: forward, backward, update (the corrected Algorithm 1). `rng` draws
    the sampled dropout masks; `step` names the step in backward's error messages. ebp_train.train_step runs the
    same step on a faster engine."""
    check_rng(net, rng)
    fwd = forward(net, x, train=True, rng=rng)
    update(net, fwd, backward(net, fwd, y, step))


def lagged_step(net: Network, stale_h: list, x, y, rng, step) -> list:
    """One step of the authors' binary code as the paper ran it (UPDATES "authors-2015"; Binary_EBP_minibatch.m
    before its fix of 2015-09-15): the forward and backward passes read ⟨W⟩ = tanh of `stale_h`, the update goes
    to the network's h and b. The MATLAB loop stored the updated h but refreshed its tanh from the h of before the
    update, so `stale_h` is each layer's h before the previous step's update, and at the start of a call (one per
    epoch) h itself: the first two steps of an epoch see the same ⟨W⟩. Returns the stale_h of the next step."""
    seen = replace(net, layers=[replace(layer, h=h) for layer, h in zip(net.layers, stale_h)])
    fwd = forward(seen, x, train=True, rng=rng)
    deltas = backward(seen, fwd, y, step)
    before = [layer.h.copy() for layer in net.layers]
    update(net, fwd, deltas)
    return before


# ----------------------------------------------------------------------------------------------------------
# Outputs: EBP-P and EBP-D (docs/maths.md §Outputs)
# ----------------------------------------------------------------------------------------------------------

def output_ebp_p(net: Network, x: np.ndarray) -> np.ndarray:
    """EBP-P: the output means ν_L = 2Φ(μ_L/σ_L) − 1 of the forward pass; the predicted class is their argmax."""
    return forward(net, x).nu[-1]


def hard_sign(u: np.ndarray) -> np.ndarray:
    """sign(u) as ±1 with +1 at 0, in u's dtype: a hidden unit of the deterministic network."""
    return np.where(u >= 0, u.dtype.type(1), u.dtype.type(-1))


def sign_network(x: np.ndarray, parameters, scale: float = 1.0, sign=hard_sign, noise=None) -> list[np.ndarray]:
    """The deterministic network of ±1 units (docs/maths.md §Outputs): with v_0 = x and, for each layer l, its
    weights and bias (W_l, b_l) from `parameters`,

        u_l = p·(v_{l−1} W_lᵀ) + b_l,    v_l = sign(u_l) for the hidden layers,    the output layer linear;

    p = `scale`. `noise(V)`, if given, draws V numbers that are added to u_l after the bias. `parameters` is read
    one layer at a time, so weights it draws at random are drawn in layer order, each before that layer's noise.
    Returns [v_1, ..., v_{L−1}, u_L], in the dtype of the products."""
    values, v = [], x
    for w, b in parameters:
        if values:  # the previous layer was a hidden one
            v = values[-1] = sign(values[-1])
        u = scale * (v @ w.T) + b
        if noise is not None:
            u = u + noise(len(b))
        values.append(u)
    return values


def ebp_d_parameters(net: Network) -> list[tuple[np.ndarray, np.ndarray]]:
    """EBP-D's weights and biases, per layer: W = sign(h) (binary) or h (real), 0 off a mask, and the real bias b."""
    out = []
    for layer in net.layers:
        w = np.sign(layer.h) if net.weights == "binary" else layer.h
        out.append((w * layer.mask if layer.mask is not None else w, layer.b))
    return out


def output_ebp_d(net: Network, x: np.ndarray) -> np.ndarray:
    """EBP-D: the sign network with W = sign(h) (binary) or h (real) and the real bias (ebp_d_parameters): hidden
    units sign(W v + b) (+1 at 0), a linear output layer. Sampled dropout scales W by p. Computes in x's dtype;
    a convolutional layer's W v is its convolution (ebp_conv.sign_layer)."""
    scale = net.keep if net.dropout == "sampled" else 1.0
    if all(layer.conv is None for layer in net.layers):
        return sign_network(x, ebp_d_parameters(net), scale)[-1]
    v = x
    for k, (layer, (w, b)) in enumerate(zip(net.layers, ebp_d_parameters(net))):
        u = scale * (v @ w.T) + b if layer.conv is None else ebp_conv.sign_layer(v, w, b, layer.conv, scale)
        v = u if k == len(net.layers) - 1 else hard_sign(u)
    return v


# ----------------------------------------------------------------------------------------------------------
# Persistence: one .npz (ebp_checkpoint) holds the posterior, the configuration and, for checkpoints, the
# training state
# ----------------------------------------------------------------------------------------------------------

def network_config(net: Network) -> dict:
    """What a saved network records of its configuration (load_network rebuilds the network from it)."""
    return {"architecture": net.architecture, "weights": net.weights, "input_side": net.input_side,
            "dropout": net.dropout, "keep": net.keep, "dtype": str(net.layers[0].h.dtype),
            "mask_reading": net.mask_reading, "real_update": net.real_update}


def save_network(path, net: Network, **meta) -> None:
    """Write the network (and JSON-serialisable `meta`) atomically (ebp_checkpoint.write_checkpoint): an interrupted
    or failed save (a full disk) leaves the previous file as it was and no temporary behind; the OSError names the
    path. Float64 arrays that hold float32 values are stored as float32 (exact)."""
    arrays = {}
    for k, layer in enumerate(net.layers):
        arrays[f"h{k}"], arrays[f"b{k}"] = float32_if_exact(layer.h), float32_if_exact(layer.b)
    write_checkpoint(path, arrays, {"format": ebp_checkpoint.NETWORK_FORMAT, "config": network_config(net), **meta})


def stored_shapes(config: dict) -> dict[str, tuple]:
    """The shape of every array save_network stores for a network of configuration `config` (the `config` of its
    metadata): h<k> (units, inputs) and b<k> (units,) for each layer k, from the architecture and input side.
    ValueError (or KeyError, TypeError) if `config` describes no network."""
    architecture = [tuple(s) if isinstance(s, list) else s for s in config["architecture"]]
    sizes = check_architecture(architecture, config["input_side"])
    shapes = {}
    for k, (inputs, units) in enumerate(zip(sizes, sizes[1:])):
        shapes[f"h{k}"], shapes[f"b{k}"] = (units, inputs), (units,)
    for k, g in enumerate(ebp_conv.geometries(architecture, config["input_side"])):
        if g is not None:  # shared kernels (ebp_conv): channels × k·k·C
            shapes[f"h{k}"], shapes[f"b{k}"] = (g.channels, g.fan_in), (g.channels,)
    return shapes


def load_network(path) -> tuple[Network, dict]:
    """Read a network written by save_network; returns it and the saved metadata. Raises CheckpointError for
    an unreadable file (its path and what to do), and, before any array is read, for arrays that do not fit the
    recorded architecture (missing, extra, of another shape or not floating point: a wrong-shaped h would
    otherwise be broadcast into the network); then for non-finite values, or weights outside a unit's block."""
    with open_checkpoint(path) as (meta, arrays, stored):
        meta = {k: v for k, v in ebp_checkpoint.upgrade_network_meta(meta, path).items() if k != "format"}
        config = meta.pop("config")
        try:
            expected = stored_shapes(config)
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{path}: its recorded network configuration {config!r} describes no network "
                                  f"({type(err).__name__}: {err})") from None
        where = f"the recorded architecture {config['architecture']} on a {config['input_side']}x" \
                f"{config['input_side']} input"
        for name, shape in expected.items():
            if name not in stored:
                raise CheckpointError(f"{path}: array {name!r} is missing; {where} needs it")
            found, dtype, _ = stored[name]
            if found != shape or dtype.kind != "f":
                raise CheckpointError(f"{path}: array {name!r} is {dtype}{list(found)}; {where} needs a floating "
                                      f"point array of shape {list(shape)}")
        extra = sorted(set(stored) - set(expected) - {"meta"})
        if extra:
            raise CheckpointError(f"{path}: arrays {extra} are not part of {where}")
        net = init_network([tuple(s) if isinstance(s, list) else s for s in config["architecture"]],
                           config["weights"], 0, config["input_side"], dropout=config["dropout"],
                           keep=config["keep"], dtype=np.dtype(config["dtype"]),
                           mask_reading=config["mask_reading"], real_update=config["real_update"])
        for k, layer in enumerate(net.layers):
            h, b = arrays[f"h{k}"], arrays[f"b{k}"]
            if not (np.isfinite(h).all() and np.isfinite(b).all()):
                raise CheckpointError(f"{path}: layer {k + 1} holds non-finite values")
            if layer.mask is not None and np.any(h[~layer.mask.astype(bool)] != 0):
                raise CheckpointError(f"{path}: layer {k + 1} has weights outside its units' blocks")
            layer.h[...], layer.b[...] = h, b
    return net, meta
