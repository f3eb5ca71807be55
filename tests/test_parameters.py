"""The parameters of one experiment (reproduction.parameters): the defaults are the experiment notebook's,
validation names every problem at once, normalisation, and the protocol a run is labelled with."""
from __future__ import annotations

import ast
import json

import pytest

from reproduction import parameters


def notebook_parameters(path) -> dict:
    """{name: value} of the cell tagged `parameters` in a notebook: its assignments of literal values, in order."""
    cells = json.loads(path.read_text())["cells"]
    [source] = ["".join(c["source"]) for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    values = {}
    for statement in ast.parse(source).body:
        assert isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(
            statement.targets[0], ast.Name), f"line {statement.lineno}: only literal values assigned to names"
        values[statement.targets[0].id] = ast.literal_eval(statement.value)
    return values


def test_the_notebooks_parameters_cell_assigns_exactly_the_defaults():
    """The experiment notebook's parameters cell (what papermill overrides) assigns every default, in order, with
    its value, then the run options (the engine, default the project's), and nothing else: a parameter added to
    one and not the other fails here."""
    cell = notebook_parameters(parameters.NOTEBOOK)
    assert list(cell.items()) == list({**parameters.DEFAULT_PARAMETERS, **parameters.RUN_OPTIONS}.items())
    assert parameters.RUN_OPTIONS == {"engine": "fast"} and not set(parameters.RUN_OPTIONS) & set(
        parameters.DEFAULT_PARAMETERS)


def test_the_engine_is_a_run_option_checked_apart_from_the_parameters():
    """`-p engine jax` is not an unknown parameter (given_parameters leaves it out); an unknown engine is refused
    naming the engines."""
    namespace = {**parameters.DEFAULT_PARAMETERS, "engine": "jax"}
    assert parameters.given_parameters(namespace, {}) == parameters.DEFAULT_PARAMETERS
    assert parameters.validate_engine("jax") == "jax"
    with pytest.raises(parameters.ParameterError, match="engine='gpu': choose one of fast, reference, jax"):
        parameters.validate_engine("gpu")
    assert list(parameters.DEFAULT_PARAMETERS)[:3] == ["dataset", "architecture", "weights"]


def test_defaults_are_valid_and_cheap():
    p = parameters.validate_parameters({})
    assert p == {**parameters.DEFAULT_PARAMETERS}
    assert p["n_train"] <= 2000 and p["epochs"] <= 2 and parameters.protocol_relative_to_paper(p) == "shortened"


@pytest.mark.parametrize("name, value, message", [
    ("dataset", "cifar10", "choose one of mnist, fashion-mnist"),
    ("architecture", "800x800", "unknown architecture"),
    ("architecture", "block30", "block size 30"),
    ("architecture", "0-10", "neither a positive layer size"),
    ("architecture", 3.5, "give a name such as"),
    ("weights", "ternary", "choose one of binary, real"),
    ("mask_reading", "partial", "choose 'absent'"),
    ("mask_reading", "held", "has no locally connected layer"),  # the default architecture "200" is dense
    ("dropout", "bernoulli", "choose None"),
    ("keep", 0.0, "in (0, 1]"),
    ("keep", 1.5, "in (0, 1]"),
    ("epochs", 0, "integer >= 1"),
    ("epochs", 2.0, "integer >= 1"),
    ("batch_size", True, "integer >= 1"),
    ("seed", -1, "integer >= 0"),
    ("n_train", 0, "1..60000"),
    ("n_train", 70000, "1..60000"),
    ("preprocessing", "zca", "choose one of pixel, global, unit"),
    ("std_floor", -1.0, ">= 0"),
    ("init_scale", 0, "positive"),
    ("init_scale", float("nan"), "positive"),
    ("output_dir", 5, "a path"),
])
def test_bad_parameter_is_named_with_what_is_allowed(name, value, message):
    with pytest.raises(parameters.ParameterError) as info:
        parameters.validate_parameters({name: value})
    text = str(info.value)
    assert f"{name}={value!r}" in text and message in text, text


def test_every_problem_is_reported_at_once_and_typos_are_errors():
    with pytest.raises(parameters.ParameterError) as info:
        parameters.validate_parameters({"epochs": 0, "weights": "ternary", "epoch": 5})
    text = str(info.value)
    assert "epochs=0" in text and "weights='ternary'" in text and "epoch: unknown parameter" in text


def test_mask_reading_is_a_parameter_of_spatial_runs():
    """held is valid for a spatial architecture; run_config records it only when it is not the default, so the
    checkpoints of the default reading (which record none) stay resumable; the reading tells two configurations
    apart. (Records of the old format, without the parameter, are upgraded on reading: tests/test_records.py.)"""
    held = parameters.validate_parameters({"architecture": "block13", "mask_reading": "held"})
    assert parameters.RunConfig.of(held).checkpoint_config()["mask_reading"] == "held"
    absent = parameters.validate_parameters({"architecture": "block13"})
    assert absent["mask_reading"] == "absent"
    assert "mask_reading" not in parameters.RunConfig.of(absent).checkpoint_config()
    assert "(non-connected weights held)" in parameters.describe_experiment(held)
    assert "non-connected" not in parameters.describe_experiment(parameters.validate_parameters({}))
    assert parameters.same_configuration(absent, {**absent, "output_dir": "elsewhere"})
    assert not parameters.same_configuration(absent, {**held, "architecture": "block13"})


def test_normalisation_and_the_protocol_relative_to_the_papers():
    protocol = parameters.protocol_relative_to_paper
    p = parameters.validate_parameters({"architecture": 800, "dropout": "None", "n_train": None, "epochs": 120})
    assert p["architecture"] == "800" and p["dropout"] is None and protocol(p) == "paper"
    assert protocol({**p, "n_train": 60000}) == "paper"
    assert protocol({**p, "epochs": 119}) == "shortened"
    assert protocol({**p, "n_train": 59999}) == "shortened"
    assert protocol({**p, "epochs": 200}) == "extended"  # beyond the paper: labelled, never "paper"
    assert protocol({**p, "epochs": 200, "n_train": 59999}) == "shortened"



def test_a_run_configuration_is_validated_when_built_and_frozen():
    """RunConfig is the one place the defaults are written (DEFAULT_PARAMETERS is its fields) and checks itself
    when built, by keyword or from a mapping (RunConfig.of, which refuses unknown names too); once built it cannot
    be changed, only replaced by a copy that is checked again. Its network is the one its fields describe."""
    import dataclasses

    config = parameters.RunConfig(architecture=200, dropout="none", keep=1)
    assert config.architecture == "200" and config.dropout is None and isinstance(config.keep, float)
    assert config.parameters() == {**parameters.DEFAULT_PARAMETERS, "keep": 1.0}
    assert list(config.parameters()) == list(parameters.DEFAULT_PARAMETERS)
    assert parameters.RunConfig.of({}) == parameters.RunConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.epochs = 3
    with pytest.raises(parameters.ParameterError, match="mask_reading='held': architecture '200' has no locally"):
        parameters.RunConfig(mask_reading="held")
    with pytest.raises(parameters.ParameterError, match="epochs=0"):
        config.replace(epochs=0)
    with pytest.raises(parameters.ParameterError) as info:
        parameters.RunConfig.of({"epoch": 3, "weights": "ternary"})
    assert "epoch: unknown parameter" in str(info.value) and "weights='ternary'" in str(info.value)
    held = parameters.RunConfig(architecture="361-100", weights="real", mask_reading="held",
                                update="authors")
    net = held.network()
    assert (net.mask_reading, net.real_update, net.weights) == ("held", "authors", "real")
    assert all(layer.held for layer in net.layers[:2]) and net.sizes == [784, 361, 100, 10]


@pytest.mark.parametrize("changes", [{}, {"architecture": "361-100", "weights": "real", "mask_reading": "held",
                                      "update": "authors", "dropout": "sampled", "init_scale": 0.5, "seed": 3}])
def test_a_run_configs_network_is_init_networks_built_without_checking_again(monkeypatch, changes):
    """RunConfig.network builds the network ebp_lib.init_network builds from the same values, bit for bit, without
    running init_network's checks again (the RunConfig validated them when it was built)."""
    import numpy as np

    import ebp_lib

    config = parameters.RunConfig(**changes)
    expected = ebp_lib.init_network(config.layers, config.weights, config.seed, init_scale=config.init_scale,
                                    dropout=config.dropout, keep=config.keep, mask_reading=config.mask_reading,
                                    real_update=config.update, dtype=np.float32)

    def checked_again(*args, **kwargs):
        raise AssertionError("a RunConfig's values were checked again")
    monkeypatch.setattr(ebp_lib, "check_architecture", checked_again)
    monkeypatch.setattr(ebp_lib, "check_update", checked_again)
    net = config.network(dtype=np.float32)
    assert ebp_lib.network_config(net) == ebp_lib.network_config(expected)
    for built, reference in zip(net.layers, expected.layers, strict=True):
        assert built.h.dtype == reference.h.dtype == np.float32 and built.held == reference.held
        np.testing.assert_array_equal(built.h, reference.h)
        np.testing.assert_array_equal(built.b, reference.b)
        np.testing.assert_array_equal(built.normaliser, reference.normaliser)
    with pytest.raises(AssertionError, match="checked again"):  # the public constructor still checks
        ebp_lib.init_network(config.layers, config.weights)


@pytest.mark.parametrize("name", ["1_000", "\uff12\uff10\uff10", "200 -100", "block 13", " 200", "200\n", "800-"])
def test_an_architecture_name_is_taken_only_as_the_tables_write_it(name):
    """Python's int() reads "1_000", full-width digits and surrounding spaces; an architecture name that only it
    would read is refused, so that a run records its architecture as the tables name it."""
    with pytest.raises(parameters.ParameterError, match="unknown architecture"):
        parameters.RunConfig(architecture=name)


def test_a_name_the_notebook_bound_before_its_parameters_cannot_be_injected():
    """`papermill ... -p json 1` rebinds a module the notebook imported before its parameters cell: it is given
    (and refused as unknown), while names still holding what they held before are not."""
    import json as json_module

    before = {"json": json_module, "np": object(), "In": []}
    namespace = {**before, **parameters.DEFAULT_PARAMETERS, "json": 1}
    given = parameters.given_parameters(namespace, before)
    assert given == {**parameters.DEFAULT_PARAMETERS, "json": 1}
    with pytest.raises(parameters.ParameterError, match="json: unknown parameter"):
        parameters.RunConfig.of(given)
    assert parameters.given_parameters({**before, **parameters.DEFAULT_PARAMETERS}, before) == \
        parameters.DEFAULT_PARAMETERS
