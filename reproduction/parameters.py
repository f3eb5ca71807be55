"""The parameters of one experiment: their defaults, the profiles, validation, and what a run records of them.

One experiment is one execution of notebooks/experiment.ipynb: train one configuration, write its result. Its
configuration is a RunConfig, a frozen dataclass whose fields are the parameters with their defaults (written
there once; DEFAULT_PARAMETERS is their dict, which the notebook's `parameters` cell assigns with the same values:
tests/test_parameters.py holds the two together). A RunConfig validates itself when it is built, naming every
problem at once, so it is built once where parameters come in: the command line (paper_tables.make_jobs), the
papermill parameters (the experiment notebook) and a run record (records.record_problems, through
folder.ebp_expected); everything after takes the RunConfig as it is, down to the network (RunConfig.network) and
its checkpoint (checkpoint_config). A profile (PROFILES) is the protocol a batch of runs trains with: epochs,
training images and batch size.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

import ebp_data
import ebp_lib
import ebp_train
from reproduction.architectures import INPUT_SIDE, architecture_layers, is_spatial, paper_architecture
from reproduction.records import REPO

NOTEBOOK = REPO / "notebooks" / "experiment.ipynb"  # the experiment: its `parameters` cell assigns the defaults

# quick: a smoke test of every run, 3 epochs on the first 8,000 training images. It must stay cheap (minutes for
# all 50 runs) yet take every run below NOT_LEARNING: the slowest starters, the [800,800] nets with sampled
# dropout, are still at 56-57% EBP-P test error after 3 epochs on 6,000 images and at 36-37% on 8,000.
# paper: the paper's protocol (all 60,000 training images, 120 epochs; batch 10 as in the authors' code).
# Seeds are chosen per batch (make_jobs).
PROFILES = {
    "quick": {"name": "quick", "epochs": 3, "n_train": 8000, "batch_size": 10},
    "paper": {"name": "paper", "epochs": 120, "n_train": None, "batch_size": 10},
    # beyond the paper's protocol: where runs still falling at epoch 120 settle (the same seed draws the same
    # orders and masks, so its first 120 epochs retrace the paper profile's run)
    "extended": {"name": "extended", "epochs": 200, "n_train": None, "batch_size": 10},
}
# The paper's protocol with one setting changed: the candidate mechanisms of the one-layer binary offset (ours lower
# than the paper's B-EBP-P at every width), each paired by seed with the paper profile's run (same initial weights;
# the same example order where the training images are the same). 50k: the first 50,000 images, as when 10,000 are held
# out for validation; unit: pixels/255; image: each image standardised by its own mean and std; batch1: one image
# per update; f64: float64 arithmetic, the reference engine (ebp_lib's numpy) instead of the fast float32 one, a run
# option (RUN_OPTIONS) that the profile sets for each of its jobs and result.json records (binary-200 only: about
# 90-120 s an epoch on a loaded 2-core AMD EPYC, 3-4 hours a run; runner.ENGINE_SLOWDOWN sizes its timeout).
# Their runs land in outputs/runs/<profile>/.
MECHANISMS = {"paper-50k": {"n_train": 50000}, "paper-unit": {"preprocessing": "unit"},
              "paper-image": {"preprocessing": "image"}, "paper-batch1": {"batch_size": 1},
              "paper-f64": {"engine": "reference"}}
PROFILES.update({name: {**PROFILES["paper"], "name": name, **change} for name, change in MECHANISMS.items()})
# A finished run whose final EBP-P test error is not below this has not learned (predicting the commonest digit
# errs on 88.65% of MNIST's test images): the experiment notebook's check, which every profile's runs must pass.
NOT_LEARNING = 0.5
DROPOUT_READINGS = ("analytic", "sampled")  # analytic = the authors' code (notebooks/07_dropout.ipynb)
PAPER_EPOCHS, FULL_TRAIN = 120, ebp_data.train_size()

DATASET_CHOICES = tuple(ebp_data.DATASETS)  # the data sets experiments train on
WEIGHTS = ("binary", "real")
PREPROCESSINGS = ("pixel", "global", "unit", "image")
MASK_READINGS = ebp_lib.MASK_READINGS  # absent (default) or held: docs/maths.md §Spatial filtering
# spec (default) or one of the authors' codes: ebp_lib.UPDATES, each with its help line (updates_help)
UPDATES = ebp_lib.UPDATES  # the one catalogue itself, not a copy: an entry added there is known here at once
# What a checkpoint must have been trained with to be resumed, besides what ebp_train.fit compares itself (the
# network, seed, batch size, engine): passed to fit as run_config and stored in the checkpoint.
RUN_CONFIG_KEYS = ("dataset", "architecture", "weights", "dropout", "keep", "n_train", "preprocessing",
                   "std_floor", "init_scale")


# How a run is computed, not what it trains: options the experiment notebook's parameters cell assigns (with these
# defaults) and papermill may override, kept out of the run's parameters (same_configuration, the record's
# parameters): a run trained by another engine is the same experiment, and result.json names its engine.
RUN_OPTIONS = {"engine": ebp_train.DEFAULT_ENGINE}


class ParameterError(ValueError):
    """One or more experiment parameters are invalid; the message lists every problem."""


# The names IPython binds in a notebook's namespace as cells run (_, __, ___, _i, _ii, _iii, _i<N>, _<N>, _ih,
# _oh, _dh): not parameters. Any other name starting with "_" is one, and is refused as unknown.
IPYTHON_NAMES = re.compile(r"_{1,3}|_i{1,3}|_i?\d+|_ih|_oh|_dh")


def given_parameters(namespace: dict, bound_before: dict) -> dict:
    """The experiment's parameters as a notebook's global `namespace` holds them: every known parameter, and
    every other name bound or rebound since `bound_before` (a copy of the namespace taken before the parameters
    cell) was taken, so that a name papermill injected but the parameters cell does not know (`-p epoch 3`,
    `-p _epochs 3`, or `-p json 1` over a name the notebook imported) reaches RunConfig.of and is refused. Only the
    names IPython binds itself (IPYTHON_NAMES) and the run options (RUN_OPTIONS, checked by validate_engine) are
    left out. A `bound_before` that is no dict was itself replaced by a parameter (`-p bound_before 1`): refused."""
    if not isinstance(bound_before, dict):
        raise ParameterError(f"invalid experiment parameters:\n  - bound_before={bound_before!r}: the notebook's own "
                             f"name (what was bound before its parameters cell), not a parameter: leave it out")
    def rebound(name, value):
        return name not in bound_before or bound_before[name] is not value

    return {name: value for name, value in namespace.items()
            if name in DEFAULT_PARAMETERS or (rebound(name, value) and name not in RUN_OPTIONS
                                              and not IPYTHON_NAMES.fullmatch(name))}


def validate_engine(engine) -> str:
    """`engine` if it names an engine of ebp_train.ENGINES (the run option `engine`), else ParameterError naming
    them; checked before any work, as the parameters are."""
    if not isinstance(engine, str) or engine not in ebp_train.ENGINES:
        raise ParameterError(f"invalid run option:\n  - engine={engine!r}: choose one of {', '.join(ebp_train.ENGINES)} "
                             f"(default {ebp_train.DEFAULT_ENGINE!r})")
    return engine


def _is_int(value) -> bool:
    """An integer that is not a bool (True would pass for 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def updates_help() -> str:
    """Every update of ebp_lib.UPDATES with the weights it trains and its help line ('spec (both weights): the
    paper's equations (the default); authors (real weights): ...'): what the parameter check and the command line
    say of them, generated so that a new entry needs no word typed here."""
    return "; ".join(f"{name} ({update.weights or 'both'} weights): {update.help}"
                     for name, update in ebp_lib.UPDATES.items())


@dataclass(frozen=True)
class RunConfig:
    """The configuration of one experiment, validated when it is built (ParameterError listing every problem) and
    never changed after: what a run trains (every field but output_dir) and where it writes (output_dir). The
    defaults are a cheap run (2 epochs on 2,000 images) for trying the notebook; the mask reading's and the update's
    are the network's own (ebp_lib.DEFAULT_MASK_READING, ebp_lib.DEFAULT_UPDATE). Build one from a mapping of
    parameters with RunConfig.of (unknown names are refused: a typo must not fall back to a default)."""
    dataset: str = "mnist"
    architecture: str = "200"
    weights: str = "binary"
    mask_reading: str = ebp_lib.DEFAULT_MASK_READING
    update: str = ebp_lib.DEFAULT_UPDATE
    dropout: str | None = None
    keep: float = 0.8
    epochs: int = 2
    batch_size: int = 10
    seed: int = 0
    n_train: int | None = 2000
    preprocessing: str = "pixel"
    std_floor: float = 0.0
    init_scale: float = 1.0
    output_dir: str | None = None

    def __post_init__(self):
        values = dict(self.__dict__)
        problems = _problems(values)
        if problems:
            raise ParameterError("invalid experiment parameters:\n  - " + "\n  - ".join(problems))
        for name, value in values.items():  # normalised (e.g. papermill's -p architecture 200 gives an int)
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, params: Mapping) -> RunConfig:
        """The RunConfig of a mapping of parameters (missing ones take their default); ParameterError listing
        every problem, unknown names included."""
        unknown = sorted(set(params) - set(DEFAULT_PARAMETERS))
        if unknown:
            values = {**DEFAULT_PARAMETERS, **{k: v for k, v in params.items() if k in DEFAULT_PARAMETERS}}
            problems = [f"{name}: unknown parameter; correct its name or leave it out (known: "
                        f"{', '.join(DEFAULT_PARAMETERS)}; run option: {', '.join(RUN_OPTIONS)})" for name in unknown]
            raise ParameterError("invalid experiment parameters:\n  - "
                                 + "\n  - ".join(problems + _problems(values)))
        return cls(**params)

    def parameters(self) -> dict:
        """The parameters as a dict, in field order: what result.json records and papermill is given."""
        return dict(self.__dict__)

    def replace(self, **changes) -> RunConfig:
        """A copy with `changes`, validated again."""
        return dataclasses.replace(self, **changes)

    @property
    def layers(self) -> list:
        """The network's layer list (paper_architecture of the architecture's name)."""
        return architecture_layers(self.architecture)

    def network(self, dtype=np.float64) -> ebp_lib.Network:
        """The run's new network, as ebp_lib.init_network builds it: the one the notebook and a group
        (reproduction.group) start from, checkpoint aside. Its values were validated when this RunConfig was built,
        so they are not checked again (ebp_lib._new_network, init_network's unchecked half)."""
        return ebp_lib._new_network(paper_architecture(self.architecture), self.weights, self.seed, INPUT_SIDE,
                                    self.init_scale, self.dropout, self.keep, dtype, self.mask_reading,
                                    self.update)

    def describe(self) -> str:
        """One deterministic line saying what the run trains (describe_experiment)."""
        return describe_experiment(self.parameters())

    def load_data(self):
        """The run's data (ebp_data.load_dataset): its data set, preprocessing and training images."""
        import ebp_data

        return ebp_data.load_dataset(self.dataset, self.preprocessing, self.std_floor, self.n_train)

    def checkpoint_config(self) -> dict:
        """The settings a checkpoint of this run records and a resumed run must share (ebp_train.fit's
        run_config): data set and its preprocessing, training images, network and initialisation, dropout, and the
        mask reading and the update only where they are not the default: a checkpoint of the defaults records
        neither (as ebp_lib.network_config records neither), and must stay resumable by a run of them."""
        config = {name: getattr(self, name) for name in RUN_CONFIG_KEYS}
        if self.mask_reading != ebp_lib.DEFAULT_MASK_READING:
            config["mask_reading"] = self.mask_reading
        if self.update != ebp_lib.DEFAULT_UPDATE:  # under the network's name for it, which older checkpoints hold
            config["real_update"] = self.update
        return config


def _problems(p: dict) -> list[str]:
    """Every problem of a complete set of parameters `p`, each naming the parameter, its value and what is allowed;
    normalises `p` in place (architecture as a name, dropout "none" as None, numbers as floats, paths as str)."""
    problems = []

    def bad(name, why):
        problems.append(f"{name}={p[name]!r}: {why}")

    if p["dataset"] not in DATASET_CHOICES:
        bad("dataset", f"choose one of {', '.join(DATASET_CHOICES)}")
    if _is_int(p["architecture"]):
        p["architecture"] = str(p["architecture"])  # papermill -p architecture 200 gives an int
    if not isinstance(p["architecture"], str):
        bad("architecture", "give a name such as '200', '800-800', 'block13' or '361-100'")
    else:
        try:
            architecture_layers(p["architecture"])
        except ValueError as err:
            bad("architecture", str(err))
    if p["weights"] not in WEIGHTS:
        bad("weights", f"choose one of {', '.join(WEIGHTS)}")
    if p["mask_reading"] not in MASK_READINGS:
        bad("mask_reading", "choose 'absent' (non-connected weights do not exist) or 'held' (the paper's full "
                            "matrix: they stay posteriors at h = 0)")
    elif p["mask_reading"] == "held" and not any(problem.startswith("architecture=") for problem in problems) \
            and not is_spatial(p["architecture"]):
        bad("mask_reading", f"architecture {p['architecture']!r} has no locally connected layer, so there is "
                            "nothing to hold; 'held' applies to spatial architectures (block13, 361-100)")
    if p["update"] not in UPDATES:
        bad("update", f"choose one of: {updates_help()}")
    elif p["weights"] in WEIGHTS:
        try:
            ebp_lib.check_update(p["update"], p["weights"])
        except ValueError as err:
            bad("update", str(err))
    if isinstance(p["dropout"], str) and p["dropout"].lower() in ("none", "off", ""):
        p["dropout"] = None
    if p["dropout"] not in (None, *DROPOUT_READINGS):
        bad("dropout", "choose None (no dropout), 'analytic' (the authors' code) or 'sampled' (Bernoulli masks)")
    if not _is_number(p["keep"]) or not 0 < p["keep"] <= 1:
        bad("keep", "the dropout keep probability must be a number in (0, 1]")
    for name, low in (("epochs", 1), ("batch_size", 1), ("seed", 0)):
        if not _is_int(p[name]) or p[name] < low:
            bad(name, f"must be an integer >= {low}")
    if p["n_train"] is not None and (not _is_int(p["n_train"]) or not 1 <= p["n_train"] <= FULL_TRAIN):
        bad("n_train", f"must be None (all {FULL_TRAIN:,} training images) or an integer in 1..{FULL_TRAIN}")
    if p["preprocessing"] not in PREPROCESSINGS:
        bad("preprocessing", f"choose one of {', '.join(PREPROCESSINGS)}")
    if not _is_number(p["std_floor"]) or p["std_floor"] < 0:
        bad("std_floor", "must be a number >= 0")
    if not _is_number(p["init_scale"]) or p["init_scale"] <= 0:
        bad("init_scale", "must be a positive number (1.0 = the reference initialisation)")
    if p["output_dir"] is not None and not isinstance(p["output_dir"], (str, os.PathLike)):
        bad("output_dir", "must be None (a temporary folder) or a path")
    if not problems:
        if p["output_dir"] is not None:
            p["output_dir"] = str(p["output_dir"])
        p["keep"], p["std_floor"], p["init_scale"] = float(p["keep"]), float(p["std_floor"]), float(p["init_scale"])
    return problems


# Every parameter of one experiment with its default (RunConfig's fields).
DEFAULT_PARAMETERS = {f.name: f.default for f in dataclasses.fields(RunConfig)}


def validate_parameters(params: Mapping) -> dict:
    """The parameters of RunConfig.of(params), normalised, as a dict (a run record's); ParameterError listing all
    problems at once."""
    return RunConfig.of(params).parameters()


def protocol_relative_to_paper(params: dict) -> str:
    """'paper' for the paper's protocol (all 60,000 training images, 120 epochs), 'extended' for more epochs on
    all of them (beyond the paper's protocol), else 'shortened'."""
    full = params["n_train"] in (None, FULL_TRAIN)
    if full and params["epochs"] == PAPER_EPOCHS:
        return "paper"
    return "extended" if full and params["epochs"] > PAPER_EPOCHS else "shortened"


def describe_experiment(params: dict) -> str:
    """One deterministic line saying what the experiment trains (no paths)."""
    dropout = "no dropout" if params["dropout"] is None else f"{params['dropout']} dropout, p = {params['keep']}"
    n = f"{params['n_train']:,}" if params["n_train"] is not None else f"all {FULL_TRAIN:,}"
    masks = (f" (non-connected weights {params['mask_reading']})" if is_spatial(params["architecture"]) else "")
    if params["update"] != ebp_lib.DEFAULT_UPDATE:
        masks += f", update {params['update']} (the authors' code)"
    return (f"{params['dataset']}, {params['weights']} weights, architecture {params['architecture']} "
            f"{architecture_layers(params['architecture'])}{masks}, {dropout}; {n} training images "
            f"({params['preprocessing']} standardisation), {params['epochs']} epochs, batch size "
            f"{params['batch_size']}, seed {params['seed']}, init scale {params['init_scale']:g}; "
            f"protocol: {protocol_relative_to_paper(params)}")


def same_configuration(a: dict, b: dict) -> bool:
    """Whether two complete parameter sets (validate_parameters) train the same network the same way (the output
    folder aside)."""
    return all(a[k] == b[k] for k in DEFAULT_PARAMETERS if k != "output_dir")


def check_dataset(dataset: str) -> str:
    """`dataset` if it is a data set the experiments know (DATASET_CHOICES), else ValueError naming them."""
    if dataset not in DATASET_CHOICES:
        raise ValueError(f"unknown data set {dataset!r}; choose one of {', '.join(DATASET_CHOICES)}")
    return dataset


def profile_label(profile: str) -> str:
    """A profile with its protocol, e.g. 'paper (120 epochs on all 60,000 training images)'."""
    known = PROFILES.get(profile)
    if known is None:
        return profile
    n = f"all {FULL_TRAIN:,}" if known["n_train"] is None else f"the first {known['n_train']:,}"
    inputs = f", {known['preprocessing']} preprocessing" if "preprocessing" in known else ""
    inputs += f", {known['engine']} engine" if "engine" in known else ""
    return f"{profile} ({known['epochs']} epochs on {n} training images, batch {known['batch_size']}{inputs})"
