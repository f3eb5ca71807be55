"""Successors of EBP for binary weights, in JAX, on the paper's nets: STE / BinaryConnect (ste), Bop (bop),
BayesBiNN (bayesbinn); the shared ±1 network (mlp) and what a run reports (evaluate). The harness that tunes,
trains and records them is reproduction.successors."""
from successors import bayesbinn, bop, ste

METHODS = {m.NAME: m for m in (ste, bop, bayesbinn)}
