"""The architecture catalogue (reproduction.architectures): a name's layer list and each layer's kind, read from one
place by the parameters, the records, the baselines and the reports."""
from __future__ import annotations

import pytest

from reproduction import architectures, parameters, tuned


@pytest.mark.parametrize("name, layers, kinds, family", [
    ("800", [800, 10], ("dense",), "dense"),
    ("200-200", [200, 200, 10], ("dense", "dense"), "dense"),
    ("block13", [("local", 13), 10], ("local",), "local"),
    ("361-100", [("local", 10), ("local", 10), 10], ("local", "local"), "local"),
    ("c5x16s2-100", [("conv", 5, 16, 2), 100, 10], ("conv", "dense"), "conv"),
])
def test_a_name_gives_its_layers_and_their_kinds(name, layers, kinds, family):
    assert architectures.architecture_layers(name) == layers
    assert architectures.kinds(name) == kinds and architectures.family(name) == family
    assert architectures.is_spatial(name) == (family == "local")
    assert parameters.architecture_layers is architectures.architecture_layers  # the parameters read it from here


def test_only_dense_names_are_the_baselines_hidden_sizes():
    """The tuned baselines are dense perceptrons: '361-100' is Table 4's locally connected net, not [361, 100]."""
    assert tuned.hidden_layers("800-800") == architectures.dense_sizes("800-800") == (800, 800)
    for name in ("361-100", "block13", "c5x16s2", "8 00", "0", "800-"):
        with pytest.raises(ValueError, match=f"architecture '{name}' is not hidden sizes joined by '-'"):
            tuned.hidden_layers(name)


def test_a_name_outside_the_grammar_or_the_image_is_refused():
    with pytest.raises(ValueError, match="unknown architecture 'dense800'"):
        architectures.architecture_layers("dense800")
    with pytest.raises(ValueError):
        architectures.architecture_layers("block29")  # a 29×29 block does not fit the 28×28 image
