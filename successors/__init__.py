"""Successors of EBP for binary weights, in JAX, on the paper's nets: STE / BinaryConnect (ste), Bop (bop),
BayesBiNN (bayesbinn); EBP itself on their terms (ebp: "ebp-tuned", "ebp-tuned-dropout"); the shared ±1 network
(mlp) and what a run reports (evaluate). The methods are named in one registry (registry); the harness that tunes,
trains and records them is reproduction.successors."""
