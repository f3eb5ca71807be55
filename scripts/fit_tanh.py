"""Reproduce the coefficients of the fast engine's tanh (ebp_lib._tanh32) and measure its error.

    python scripts/fit_tanh.py

tanh x ≈ z P(z²) / Q(z²), z = clip(x, −c, c), P of degree 3, Q of degree 4 with Q(0) = 1, c = 7.9. The fit is
Lawson's iteration on the linearised problem min Σ w (z P − tanh(x) Q)² / Q_prev² over a fine grid of x in [0, 14]
(points beyond c see the clamped z, so the clamp's own error 1 − tanh c is part of the fit); the weights w grow
where the error is large, which drives the fit towards the minimax one. Prints the float32 coefficients and the
largest error of ebp_lib._tanh32 (float32, as compiled) against float64 tanh.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ebp_lib  # noqa: E402

CLAMP, DEGREE_P, DEGREE_Q = 7.9, 3, 4


def fit(c: float = CLAMP, k: int = DEGREE_P, l: int = DEGREE_Q, iterations: int = 800):
    """(p, q, max error in float64) of the rational fit described above; q[0] = 1."""
    x = np.unique(np.concatenate([np.linspace(0, c, 20000), np.linspace(0, 1, 2000)]))
    beyond = np.linspace(c, 14, 2000)
    t = np.tanh(np.concatenate([x, beyond]))
    z = np.concatenate([x, np.full_like(beyond, c)])
    u = z * z
    columns = [z * u**i for i in range(k + 1)] + [-t * u**j for j in range(1, l + 1)]
    a = np.stack(columns, axis=1)
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


def main() -> int:
    p, q, err = fit()
    print(f"clamp {CLAMP}; float32 coefficients, constant term first (as in ebp_lib._tanh32):")
    print("  P:", ", ".join(str(np.float32(v)) for v in p))
    print("  Q:", ", ".join(str(np.float32(v)) for v in q))
    print(f"max error of the fit (float64): {err:.2e}")
    x = np.linspace(-20, 20, 4_000_001).astype(np.float32)
    m = np.empty_like(x)
    ebp_lib._refresh_row(x, m)  # the compiled loop that refreshes ⟨W⟩ = tanh h
    print(f"max error of ebp_lib._tanh32 (float32): {np.abs(m - np.tanh(x.astype(np.float64))).max():.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
