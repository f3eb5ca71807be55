"""Reproduce the coefficients of the fast engine's tanh and erf (ebp_fast.tanh32, erf32) and measure their error.

    python scripts/fit_rational.py

Both are odd functions that reach ±1 in float32 at moderate |x|, written as f(x) ≈ z P(z²) / Q(z²) with
z = clip(x, −c, c) and Q(0) = 1. The fit is Lawson's iteration on the linearised problem
min Σ w (z P − f(x) Q)² / Q_prev² over a fine grid of x in [0, far] (points beyond c see the clamped z, so the
clamp's own error 1 − f(c) is part of the fit); the weights w grow where the error is large, which drives the
fit towards the minimax one. Prints the float32 coefficients and the largest error of the compiled float32
function against float64 tanh / erf.
"""
import sys

import numba
import numpy as np
from scipy import special

import ebp_fast

# name: (function, its compiled float32 version, clamp c, degree of P, degree of Q, far, iterations)
FITS = {"tanh": (np.tanh, ebp_fast.tanh32, 7.9, 3, 4, 14.0, 800),
        "erf": (special.erf, ebp_fast.erf32, 3.8, 6, 4, 6.0, 1500)}


def fit(f, c: float, k: int, l: int, far: float, iterations: int):
    """(p, q, max error in float64) of the rational fit described above; q[0] = 1."""
    x = np.unique(np.concatenate([np.linspace(0, c, 20000), np.linspace(0, 1, 2000)]))
    beyond = np.linspace(c, far, 2000)
    t = f(np.concatenate([x, beyond]))
    z = np.concatenate([x, np.full_like(beyond, c)])
    u = z * z
    a = np.stack([z * u**i for i in range(k + 1)] + [-t * u**j for j in range(1, l + 1)], axis=1)
    w, q_prev, best = np.ones_like(z), np.ones_like(z), (np.inf, None, None)
    for _ in range(iterations):
        scale = np.sqrt(w) / q_prev
        sol = np.linalg.lstsq(a * scale[:, None], t * scale, rcond=None)[0]
        p, q = sol[:k + 1], np.concatenate([[1.0], sol[k + 1:]])
        q_prev = np.polyval(q[::-1], u)
        error = z * np.polyval(p[::-1], u) / q_prev - t
        if np.abs(error).max() < best[0]:
            best = (np.abs(error).max(), p, q)
        w = w * np.abs(error)
        w /= w.sum()
    return best[1], best[2], best[0]


@numba.njit(fastmath=ebp_fast.FASTMATH)
def apply(f, x):
    """f (a compiled scalar function) at every element of x, with the fast engine's floating-point flags."""
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = f(x[i])
    return out


def main() -> int:
    for name, (f, compiled, c, k, l, far, iterations) in FITS.items():
        p, q, err = fit(f, c, k, l, far, iterations)
        print(f"{name}: clamp {c}; float32 coefficients, constant term first (ebp_fast lists them highest first):")
        print("  P:", ", ".join(str(np.float32(v)) for v in p))
        print("  Q:", ", ".join(str(np.float32(v)) for v in q))
        x = np.linspace(-2 * far, 2 * far, 4_000_001).astype(np.float32)
        error = np.abs(apply(compiled, x) - f(x.astype(np.float64))).max()
        print(f"  max error of the fit (float64) {err:.2e}; of the compiled float32 function {error:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
