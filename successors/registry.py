"""The one registry of the methods the tuned harness (reproduction.successors) trains beside EBP: one line each, its
name, module, label and colour. Importing it imports no method (JAX starts slowly, and a command line is parsed
without it); method(name) imports the module on first use. A new baseline is one module and one line here.

A method module's face: NAME; GRID ({hyperparameter: values}, the grid's own axes); FIXED (its fixed settings);
init(key, sizes, hyper), the initial state (sizes: the dense net's layer sizes or a successors.cnn.CNN, whose weight
shapes mlp.weight_shapes gives); step(state, x, labels, key, hyper, loss=mlp.loss), one minibatch's update (a CNN's
loss in place of the dense net's; successors.mlp runs an epoch of them); deployed(state), the ±1 weights its
deployed net uses; and, optionally, predictive_outputs(state, x, key, n_samples, predict=mlp.predict_logits),
{name: class probabilities} of its other outputs (BayesBiNN's predictive and mean net). EBP at the successors'
protocol (successors.ebp) also brings its own PROTOCOL defaults, PREPROCESSINGS and load_split, Trainer, NETWORK,
PACKAGES and STEP_SIZES.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """A method's line: the `module` that implements it, its `label` and `colour` in tables and figures, and whether
    it is one of EBP's `successor`s (not EBP itself at their protocol)."""
    module: str
    label: str
    colour: str | None
    successor: bool


METHODS = {
    "ste": Entry("successors.ste", "STE / BinaryConnect", "tab:blue", True),
    "bop": Entry("successors.bop", "Bop", "tab:orange", True),
    "bayesbinn": Entry("successors.bayesbinn", "BayesBiNN", "tab:green", True),
    "ebp-tuned": Entry("successors.ebp", "EBP, tuned like the successors", None, False),
    "ebp-tuned-dropout": Entry("successors.ebp", "EBP with dropout 0.8, tuned like the successors", None, False),
}
SUCCESSORS = tuple(name for name, entry in METHODS.items() if entry.successor)


def method(name: str):
    """The module (or, for a module of several variants, its variant(name)) of method `name`; ValueError naming the
    registered methods for an unknown one."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose one of {list(METHODS)}")
    module = importlib.import_module(METHODS[name].module)
    return module.variant(name) if hasattr(module, "variant") else module
