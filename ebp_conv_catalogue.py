"""The catalogue of convolutional EBP networks and initialisation schemes (notebooks/11_convolutional_ebp.ipynb).

A new CNN is one entry of CNNS: a short name, its architecture name (reproduction.architectures' grammar:
c<kernel>x<channels>s<stride> layers, then dense hidden sizes, e.g. "c5x16s2-c5x32s2") and a sentence. Everything
else (scripts/run_architecture.py, the records, the report in reproduction.conv_report) reads it from here.

An initialisation scheme (the paper's third future-work item) names the init_scale that ebp_lib.init_network takes:
every h drawn uniform with variance init_scale/K (K: the unit's fan-in), b = 0.

* "reference": init_scale 1, variance 1/K in every layer (Soudry et al.'s, the paper's; the default).
* "variance1": init_scale = the first layer's fan-in K₁, so that the first layer's h has variance 1 and every
  other layer K₁/K times the reference. On the paper's dense nets this is the 784 of scripts/ebp_d_gap.py
  ("variance 1 instead of 1/784", ../shared/EBP_SPEC.md); on a 5x5 first convolution it is 25. One number per
  network, because init_scale is one number: the later layers of a CNN (fan-in 400) start wider than the
  reference, not at variance 1.

The schemes take the network's layer list (reproduction.architectures reads it from a name), so that this module
reads no name. A run's record holds its init_scale (result.json's parameters); scheme_of reads the scheme back. Runs of a scheme
other than the reference lie in their own profile folder, <profile>-<scheme> (profile_name), because a run's folder
name does not carry its init_scale (reproduction.folder.expected_run_folder).
"""
from __future__ import annotations

from dataclasses import dataclass

import ebp_data


@dataclass(frozen=True)
class Entry:
    architecture: str
    description: str


CNNS = {
    "lenet": Entry("c5x6s2-c5x16s2-100", "LeNet-like, small: 6 then 16 maps of 5x5 kernels (stride 2), a dense "
                                         "layer of 100"),
    "wide": Entry("c5x16s2-c5x32s2", "wider: 16 then 32 maps of 5x5 kernels (stride 2), then the output layer"),
}
INIT_SCHEMES = ("reference", "variance1")
DEFAULT_SCHEME = "reference"


def architecture_of(name: str) -> str:
    """The architecture name of a catalogue entry ("lenet"), or `name` itself when it is not one."""
    return CNNS[name].architecture if name in CNNS else name


def catalogue_name(architecture: str) -> str | None:
    """The catalogue entry whose architecture is `architecture`, None if none."""
    return next((name for name, entry in CNNS.items() if entry.architecture == architecture), None)


def first_fan_in(layers: list) -> int:
    """K₁, the fan-in of the first layer of a layer list on the data sets' one-channel images: k² for a
    convolution ("conv", k, channels, stride), block² for a locally connected layer ("local", block), every pixel
    (784) for a dense layer."""
    first = layers[0]  # ("conv", k, ...) and ("local", block) both hold their side second
    return first[1] ** 2 if isinstance(first, (tuple, list)) else ebp_data.image_side() ** 2


def init_scale(scheme: str, layers: list) -> float:
    """The init_scale of a scheme for a network's layer list (module docstring); ValueError naming the schemes."""
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown initialisation scheme {scheme!r}; choose one of {', '.join(INIT_SCHEMES)}")
    return 1.0 if scheme == "reference" else float(first_fan_in(layers))


def scheme_of(scale: float, layers: list) -> str:
    """The scheme whose init_scale for the layer list `layers` is `scale` (a run's); "init_scale <x>" for
    another value."""
    for scheme in INIT_SCHEMES:
        if scale == init_scale(scheme, layers):
            return scheme
    return f"init_scale {scale:g}"


def profile_name(epochs: int, n_train: int | None = None, scheme: str = DEFAULT_SCHEME) -> str:
    """The profile (folder) of named runs: "named-e<epochs>", "-n<N>" for fewer training images, "-<scheme>" for a
    scheme other than the reference."""
    return (f"named-e{epochs}" + (f"-n{n_train}" if n_train else "")
            + (f"-{scheme}" if scheme != DEFAULT_SCHEME else ""))
