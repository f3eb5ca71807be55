"""Architecture names: the one place a name is read into its layers, and each layer given its kind.

A run names its network by a string (the paper's tables write them so, and a run's record and folder keep it); the
maths (ebp_lib.init_network) takes the layer list it stands for. The names are the paper's and this harness's, not
the maths'. Digits are ASCII, with no spaces or "_", so that a name is recorded and compared exactly as the tables
write it. Each hidden layer is of one kind (KINDS):

* dense: a layer size; hidden sizes joined by "-" ("800", "800-800": Tables 2 and 3);
* local: ("local", block), a locally connected layer of block×block receptive fields; "block<k>" (one such layer)
  or "361-100" (two of 10×10 blocks: 19² = 361 then 10² = 100 units; Table 4's spatial filtering);
* conv: ("conv", kernel, channels, stride) (ebp_conv); c<kernel>x<channels>s<stride> layers joined by "-", then
  optionally dense hidden sizes, e.g. "c5x16s2-c5x32s2" (5x5 kernels, 16 then 32 maps, stride 2: 28 → 12 → 4, then
  the output layer) or "c5x16s2-100". Beyond the paper.

A new kind of layer is one entry of KINDS, its clause of the grammar (ARCHITECTURE_NAME) and its reading in
layers(); the run's parameters, its record, the runner's cost and the tables read the kinds from here (kinds,
family, is_spatial, dense_sizes).
"""
from __future__ import annotations

import re

import ebp_conv
import ebp_data
import ebp_lib

KINDS = ("dense", "local", "conv")
INPUT_SIDE = ebp_data.image_side()  # the side of the data sets' images, 28x28 pixels

CONV_NAME = re.compile(r"c([0-9]+)x([0-9]+)s([0-9]+)", re.ASCII)  # one convolutional layer: kernel, maps, stride
CONV_ARCHITECTURE = r"c[0-9]+x[0-9]+s[0-9]+(?:-c[0-9]+x[0-9]+s[0-9]+)*(?:-[0-9]+)*"
ARCHITECTURE_NAME = re.compile(rf"(?:block[0-9]+|[0-9]+(?:-[0-9]+)*|{CONV_ARCHITECTURE})", re.ASCII)
SPATIAL_PAIR = "361-100"  # Table 4's two-layer net: two locally connected layers of 10×10 blocks


def paper_architecture(name: str, n_classes: int = 10) -> list:
    """The layer list (ebp_lib.init_network's architecture) of an architecture name: "800", "800-800" (dense),
    "block13" (local: one hidden layer of (28-13+1)² units), "361-100" (local: 10×10 blocks twice); beyond the paper,
    "c5x16s2-c5x32s2" (conv: [("conv", 5, 16, 2), ("conv", 5, 32, 2), 10]). ValueError for a name that is not of
    ARCHITECTURE_NAME's form; block and kernel sizes are checked by architecture_layers."""
    if not ARCHITECTURE_NAME.fullmatch(name):
        raise ValueError(f"unknown architecture {name!r}; use e.g. '800', '800-800', 'block13', '361-100' or "
                         f"'c5x16s2-c5x32s2' (ASCII digits, no spaces)")
    if name.startswith("c"):
        convs = [CONV_NAME.fullmatch(part) for part in name.split("-")]
        return [(ebp_conv.CONV, *map(int, m.groups())) if m else int(part)
                for m, part in zip(convs, name.split("-"))] + [n_classes]
    if name.startswith("block"):
        return [("local", int(name[5:])), n_classes]
    if name == SPATIAL_PAIR:
        return [("local", 10), ("local", 10), n_classes]
    return [int(v) for v in name.split("-")] + [n_classes]


def architecture_layers(name) -> list:
    """The layer list of an architecture name ("200", "800-800", "block13", "361-100", "c5x16s2-100"), validated:
    block and kernel sizes must fit the 28x28 image (ValueError)."""
    layers = paper_architecture(str(name))
    ebp_lib.check_architecture(layers, INPUT_SIDE)
    return layers


def layer_kind(spec) -> str:
    """The kind (KINDS) of one entry of a layer list: a size, ("local", block) or ("conv", k, channels, stride)
    (a list, as JSON stores it, too)."""
    if ebp_conv.is_conv_spec(spec):
        return "conv"
    return "local" if isinstance(spec, (tuple, list)) else "dense"


def kinds(name) -> tuple[str, ...]:
    """The kinds of the hidden layers of an architecture name, in order (the output layer is dense)."""
    return tuple(layer_kind(spec) for spec in architecture_layers(name)[:-1])


def family(name) -> str:
    """What a table calls the net: "conv" if it has a convolutional layer, else "local" if it has a locally
    connected one (Table 4), else "dense" (Tables 2 and 3)."""
    hidden = kinds(name)
    return next((kind for kind in ("conv", "local") if kind in hidden), "dense")


def is_spatial(name) -> bool:
    """Whether an architecture name has a locally connected layer (Table 4: "block13", "361-100")."""
    return "local" in kinds(name)


def dense_sizes(name) -> tuple[int, ...]:
    """The hidden layer sizes of a dense architecture name ("800", "200-200"): what the tuned baselines (dense
    multilayer perceptrons) train; ValueError for any other name."""
    try:
        dense = family(name) == "dense"
    except ValueError:
        dense = False
    if not dense:
        raise ValueError(f"architecture {name!r} is not hidden sizes joined by '-', e.g. '800' or '200-200'")
    return tuple(architecture_layers(name)[:-1])
