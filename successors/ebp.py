"""EBP as a method of the successors' tuned harness (reproduction.successors): "EBP, tuned like the successors".

The harness gives it what it gives STE, Bop and BayesBiNN: the last 10,000 training images held out for
validation, a grid scored by the deployed net's validation error after `grid_epochs` epochs, the chosen point
trained to its best-validation epoch within `max_epochs` (early stopping after `stop_patience` epochs without a
new best). What differs is only what EBP is:

- training: the fast engine (ebp_train.train_steps, engine "fast": float32, one compiled call per epoch), binary
  weights, batch 10 (the paper's), the harness's epoch order (tuned.epoch_order); sampled dropout masks drawn
  from a generator seeded by (seed, 2, epoch), so that a resumed run draws what an uninterrupted one draws;
- no step size: the harness's halving after `patience` epochs without a best has nothing to halve (EBP's update
  is Bayes' rule, not a gradient step); only the early stop and the best-epoch rule act;
- the grid: input preprocessing (PREPROCESSINGS: per-pixel standardisation, pixels/255, per-pixel with the std
  floored at STD_FLOOR) x the initial scale of h (ebp_lib.init_network's init_scale: variance init_scale/K of each
  unit's h; 1 the reference initialisation, 784 the variance-1 initialisation of the spec's measurement,
  docs/maths.md). 3 x 2 = 6 points of 3 epochs, as STE's and BayesBiNN's grids (2 preprocessings x 3 rates): a
  third scale would make EBP's grid half again as long as theirs;
- two outputs of one net: EBP-D, the deployed ±1 net sign(h) (ebp_lib.output_ebp_d), which the rules choose by as
  they choose every successor by its deployed net; EBP-P, the predictive (ebp_lib.output_ebp_p), recorded beside it
  every epoch ("*_error_ebp_p") and evaluated at the chosen epoch (as BayesBiNN's predictive is).

EBP-P's class probabilities (for NLL, ECE): EBP's likelihood of the ±1 target vector y is Π_k Φ(y_k t_k),
t_k = μ_k/σ_k of the output layer (docs/maths.md §Output). Given that exactly one class is +1,

    p(c | x) = Π_k Φ(y^c_k t_k) / Σ_c' Π_k Φ(y^c'_k t_k) = softmax_c(ln Φ(t_c) − ln Φ(−t_c))   (`class_probabilities`)

(the factor Π_k Φ(−t_k) is common to every class); its argmax is EBP-P's (ν_k = 2Φ(t_k) − 1 is monotone in t_k).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy import special
from threadpoolctl import threadpool_limits

import ebp_data
import ebp_lib
import ebp_train

STD_FLOOR = 25.5  # a tenth of the pixel range: the floor of outputs/ablations/pixel-floor25.5
PREPROCESSINGS = {"pixel": ("pixel", 0.0), "unit": ("unit", 0.0), "pixel-floor": ("pixel", STD_FLOOR)}
GRID = {"init_scale": [1.0, 784.0]}
PROTOCOL = {"batch_size": 10, "preprocessing_grid": list(PREPROCESSINGS)}
NETWORK = ("binary EBP (ebp_lib): posterior h per weight, real bias b, ±1 targets one-vs-all; EBP-D deployed "
           "(sign(h) weights, sign hidden units), EBP-P predictive")
PACKAGES = ("numpy", "scipy", "numba")
STEP_SIZES = False   # the harness's halving has nothing to act on
EVAL_BATCH = 2000    # images per evaluation call (memory)
FIXED_KEEP = {"ebp-tuned": 1.0, "ebp-tuned-dropout": 0.8}  # the paper's sampled dropout keeps 0.8 (Table 3)


def load_split(params: dict, preprocessing: str, data_dir=None) -> dict[str, np.ndarray]:
    """tuned.load_split with the std floor of PREPROCESSINGS: the same 50,000 fit and 10,000 validation images
    (the last n_validation held out), statistics from the fit part only, float32."""
    if preprocessing not in PREPROCESSINGS:
        raise ValueError(f"unknown preprocessing {preprocessing!r}; choose one of {list(PREPROCESSINGS)}")
    mode, floor = PREPROCESSINGS[preprocessing]
    from reproduction import tuned
    return tuned.load_split(params, mode, data_dir, floor)


def class_probabilities(mu: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """p(c | x) = softmax_c(ln Φ(t_c) − ln Φ(−t_c)), t = μ/σ of the output layer (the module's docstring), in
    float64; log Φ through scipy's log_ndtr, which stays finite where Φ(−t) underflows."""
    t = np.asarray(mu, np.float64) / np.sqrt(np.asarray(sigma2, np.float64))
    logit = special.log_ndtr(t) - special.log_ndtr(-t)
    logit -= logit.max(axis=1, keepdims=True)
    p = np.exp(logit)
    return p / p.sum(axis=1, keepdims=True)


def copy_network(net: ebp_lib.Network, dtype=None) -> ebp_lib.Network:
    """A copy of `net` whose h and b are new arrays (in `dtype` if given): training one leaves the other."""
    return replace(net, layers=[replace(layer, h=np.array(layer.h, dtype=dtype or layer.h.dtype),
                                        b=np.array(layer.b, dtype=dtype or layer.b.dtype)) for layer in net.layers])


def _batched(fn, x: np.ndarray) -> np.ndarray:
    with threadpool_limits(limits=ebp_train.BLAS_THREADS, user_api="blas"):
        return np.concatenate([fn(x[s:s + EVAL_BATCH]) for s in range(0, len(x), EVAL_BATCH)])


class Trainer:
    """One EBP net and grid point, with the interface of the harness's Trainer (reproduction.successors): a state
    is an ebp_lib.Network (float32 h and b), never changed in place once returned (the harness keeps the best
    epoch's state beside the current one)."""

    def __init__(self, params: dict, point: dict, n_fit: int):
        from reproduction import tuned
        self.params, self.point, self.epoch_order = params, point, tuned.epoch_order
        self.architecture = [*tuned.hidden_layers(params["architecture"]), 10]
        self.keep = float(params["fixed"]["keep"])

    def initial(self) -> ebp_lib.Network:
        return ebp_lib.init_network(self.architecture, "binary", seed=self.params["seed"],
                                    init_scale=float(self.point["init_scale"]),
                                    dropout=None if self.keep == 1.0 else "sampled", keep=self.keep,
                                    dtype=np.float32)

    def train_epoch(self, state, x, y, epoch: int, decay: float):
        """One epoch on a copy of `state` (decay: unused, EBP has no step size); (new state, loss). The compiled
        epoch computes no loss: None, or NaN where the parameters overflowed (the harness's divergence)."""
        net = copy_network(state)
        order = self.epoch_order(self.params, len(x), epoch)
        rng = np.random.default_rng([self.params["seed"], 2, epoch])
        try:
            ebp_train.train_steps(net, x, ebp_data.one_vs_all(y, dtype=np.float32), order,
                                  self.params["batch_size"], rng, "fast", epoch)
        except FloatingPointError:
            return state, float("nan")
        return net, None

    def error(self, state, x, y) -> float:
        """EBP-D's error (the deployed ±1 net, float32)."""
        out = _batched(lambda xb: ebp_lib.output_ebp_d(state, xb), x)
        return round(float(np.mean(out.argmax(axis=1) != y)), 6)

    def more_errors(self, state, x, y) -> dict:
        """{"ebp_p": EBP-P's error} (ebp_fast.float32_ebp_p, the fast engine's evaluation)."""
        import ebp_fast
        moments = ebp_fast.float32_weight_moments(state)
        out = _batched(lambda xb: ebp_fast.float32_ebp_p(state, moments, xb), x)
        return {"ebp_p": round(float(np.mean(out.argmax(axis=1) != y)), 6)}

    def to_arrays(self, state, prefix: str) -> dict:
        return {f"{prefix}/{name}{k}": np.asarray(getattr(layer, name), np.float32)
                for k, layer in enumerate(state.layers) for name in ("h", "b")}

    def from_arrays(self, arrays: dict, prefix: str):
        net = self.initial()
        for k, layer in enumerate(net.layers):
            layer.h[...], layer.b[...] = arrays[f"{prefix}/h{k}"], arrays[f"{prefix}/b{k}"]
        return net

    def expected_headers(self, prefix: str) -> dict:
        return {name: (a.shape, a.dtype) for name, a in self.to_arrays(self.initial(), prefix).items()}

    def evaluate_outputs(self, best, x: np.ndarray, y: np.ndarray, net_path) -> tuple[dict, dict, dict]:
        """(packed, probabilistic, predictions) of the best epoch's net on the test images: EBP-D through
        ebp_binary's packed inference (engine "auto"; written to `net_path`) and its mismatches with the float64
        sign net (ebp_lib.output_ebp_d); EBP-P's error, NLL, ECE and reliability bins (class_probabilities of the
        float64 forward pass); the per-image predicted classes of both."""
        import ebp_binary as eb
        import ebp_binary_format
        from successors import evaluate
        packed_net = eb.export_network(best)
        ebp_binary_format.save_packed(net_path, packed_net)
        counts: dict = {}
        deployed = eb.predict(packed_net, x, engine="auto", counts=counts)
        net64, x64 = copy_network(best, np.float64), np.asarray(x, np.float64)
        float_pred = _batched(lambda xb: ebp_lib.output_ebp_d(net64, xb), x64).argmax(axis=1)
        packed = {"error": float(np.mean(deployed != y)), "mismatches": int(np.sum(deployed != float_pred)),
                  "near_ties": int(counts.get("near_ties", 0)), "model_bytes": eb.model_bytes(packed_net)["total"]}

        def last_moments(xb):
            fwd = ebp_lib.forward(net64, xb)
            return class_probabilities(fwd.mu[-1], fwd.sigma2[-1])
        p = _batched(last_moments, x64)
        bins = evaluate.reliability(p, y)
        probabilistic = {"predictive": {"test_error": round(evaluate.error(p, y), 6), "nll": round(evaluate.nll(p, y), 6),
                                        "ece": round(bins["ece"], 6), "reliability": bins}}
        return packed, probabilistic, {"deployed": deployed, "predictive": p.argmax(axis=1)}


class Method:
    """One EBP variant as the harness reads a method: NAME, GRID, FIXED (the dropout keep probability: 1 without
    dropout), its PROTOCOL defaults, PREPROCESSINGS, load_split and Trainer."""
    GRID, PROTOCOL, PREPROCESSINGS, NETWORK, PACKAGES, STEP_SIZES = GRID, PROTOCOL, PREPROCESSINGS, NETWORK, PACKAGES, \
        STEP_SIZES
    Trainer = Trainer

    def __init__(self, name: str):
        self.NAME, self.FIXED = name, {"keep": FIXED_KEEP[name]}

    @staticmethod
    def load_split(params, preprocessing, data_dir=None):
        return load_split(params, preprocessing, data_dir)


VARIANTS = {name: Method(name) for name in FIXED_KEEP}


def variant(name: str) -> Method:
    """The EBP variant `name` of successors.registry."""
    return VARIANTS[name]
