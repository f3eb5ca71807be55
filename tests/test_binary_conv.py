"""The deployed binary CNN (ebp_binary_conv): every engine gives exactly the output sums of the float sign network
(ebp_lib.output_ebp_d on convolutional layers), ties included; a single flipped bit is seen; sizes; refusals."""
from __future__ import annotations

import numpy as np
import pytest

import ebp_binary
import ebp_binary_conv
import ebp_lib

SIDE = 12
# 12x12 → 8 maps 5x5 (fan-in 9) → 6 maps 3x3 (fan-in 72: two words) → output; and a dense hidden layer after
CONV_CONV = [("conv", 3, 8, 2), ("conv", 3, 6, 1), 4]
CONV_DENSE = [("conv", 3, 8, 2), ("conv", 3, 6, 1), 9, 4]


def random_cnn(architecture, seed=0, zeros=False):
    """A binary CNN with random fields h (some exactly 0 if `zeros`: their EBP-D weight is 0) and biases that are
    integers or half-integers, so that integer inputs give exact ties p·S + b = 0."""
    net = ebp_lib.init_network(architecture, "binary", seed=seed, input_side=SIDE)
    rng = np.random.default_rng(seed + 1)
    for layer in net.layers:
        layer.h[...] = rng.standard_normal(layer.h.shape)
        if zeros:
            layer.h[rng.random(layer.h.shape) < 0.1] = 0.0
        layer.b[...] = rng.integers(-2, 3, layer.b.shape) / rng.choice([1, 2], layer.b.shape)
    return net


def images(n, seed=0):
    """Half real (Gaussian) images, half of integers in {−1, 0, 1}, whose first-layer sums tie at 0 often."""
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.standard_normal((n // 2, SIDE * SIDE)),
                           rng.integers(-1, 2, (n - n // 2, SIDE * SIDE)).astype(np.float64)])


@pytest.mark.parametrize("engine", ebp_binary_conv.ENGINES)
@pytest.mark.parametrize("architecture, zeros", [(CONV_CONV, False), (CONV_DENSE, False), (CONV_CONV, True)])
def test_packed_cnn_equals_the_float_sign_network(engine, architecture, zeros):
    """0 mismatches: the packed output sums equal output_ebp_d's exactly (float64) on every image, with exact ties
    in the first layer decided as output_ebp_d decides them (+1 at 0)."""
    net = random_cnn(architecture, zeros=zeros)
    x = images(600)  # more than ebp_binary_conv.CHUNK: two chunks
    counts = {}
    packed = ebp_binary_conv.export_cnn(net)
    sums = ebp_binary_conv.output_sums(packed, x, engine, counts)
    reference = ebp_lib.output_ebp_d(net, x)
    assert sums.shape == reference.shape == (600, 4)
    assert np.array_equal(sums, reference)
    assert counts["near_ties"] > 0  # the tie rule was exercised
    for i in [*range(5), *range(300, 305)]:  # one image at a time (engine "auto" convolves small batches directly)
        assert np.array_equal(ebp_binary_conv.output_sums(packed, x[i:i + 1], engine), reference[i:i + 1])


@pytest.mark.parametrize("engine", ebp_binary_conv.ENGINES)
def test_one_convolution_then_the_output_and_no_images(engine):
    """The smallest CNN (a convolution, then the output layer) and an empty batch."""
    net = random_cnn([("conv", 3, 4, 2), 4])
    packed, x = ebp_binary_conv.export_cnn(net), images(7)
    assert np.array_equal(ebp_binary_conv.output_sums(packed, x, engine), ebp_lib.output_ebp_d(net, x))
    assert ebp_binary_conv.output_sums(packed, x[:0], engine).shape == (0, 4)


@pytest.mark.parametrize("masked", [False, True])
def test_direct_kernel_equals_its_numpy_reference(masked):
    """ebp_binary_conv_kernels.direct_conv_sums against hidden_sums with the readable engine, random ±1 maps."""
    net = random_cnn(CONV_CONV, seed=3, zeros=masked)
    packed = ebp_binary_conv.export_cnn(net)
    layer, g = packed.layers[1], packed.convs[1]
    assert (layer.connected is not None) == masked
    v = np.random.default_rng(4).random((ebp_binary_conv.DIRECT_BELOW_BATCH - 1, g.inputs)) < 0.5
    expected = ebp_binary_conv.hidden_sums(layer, g, v, "numpy")
    assert np.array_equal(ebp_binary_conv.direct_sums(layer, g, v), expected)
    assert np.array_equal(ebp_binary_conv.hidden_sums(layer, g, v, "auto"), expected)  # auto's choice here


def test_one_flipped_bit_is_seen():
    """The comparison above can fail: one kernel bit of the hidden convolution flipped changes some output sum."""
    net = random_cnn(CONV_CONV)
    packed = ebp_binary_conv.export_cnn(net)
    x = images(200)
    for engine in ("numba", "auto"):
        assert np.array_equal(ebp_binary_conv.output_sums(packed, x, engine), ebp_lib.output_ebp_d(net, x))
    packed.layers[1].signs[2, 1] ^= np.uint64(1 << 3)  # map 2, weight 67 (word 1, bit 3)
    packed.layers[1]._work.clear()
    for engine in ("numba", "auto"):
        assert not np.array_equal(ebp_binary_conv.output_sums(packed, x, engine), ebp_lib.output_ebp_d(net, x))


def test_patch_rows_and_maps_layout():
    """im2col rows are ebp_conv's patches image by image, and to_maps puts channel o of position p at o·P + p."""
    net = random_cnn(CONV_CONV)
    g = net.layers[0].conv
    x = images(3)
    rows = ebp_binary_conv.patch_rows(x, g)
    assert rows.shape == (3 * g.positions, g.fan_in)
    assert np.array_equal(rows[g.positions + 7], x[1].reshape(SIDE, SIDE)[2:5, 4:7].ravel())  # position 7: (1, 2)
    values = np.arange(3 * g.positions * g.channels).reshape(3 * g.positions, g.channels)
    maps = ebp_binary_conv.to_maps(values, g)
    assert maps[1, 5 * g.positions + 7] == values[g.positions + 7, 5]


def test_sizes():
    """Sign planes: one word per 64 kernel weights per map; float32: 4 bytes per weight and bias."""
    net = ebp_lib.init_network([("conv", 5, 16, 2), ("conv", 5, 32, 2), 10], "binary", seed=0)
    size = ebp_binary_conv.model_bytes(ebp_binary_conv.export_cnn(net))
    assert size["signs"] == 8 * (16 * 1 + 32 * 7 + 10 * 8)  # fan-ins 25, 400, 512 → 1, 7, 8 words
    assert size["masks"] == 0 and size["biases"] == 8 * (16 + 32 + 10)
    assert size["float32"] == 4 * (16 * 25 + 32 * 400 + 10 * 512 + 16 + 32 + 10)
    assert size["ratio_float32_over_packed"] == pytest.approx(73512 / 3024)


def test_refusals():
    with pytest.raises(ValueError, match="real"):
        ebp_binary_conv.export_cnn(ebp_lib.init_network(CONV_CONV, "real", input_side=SIDE))
    with pytest.raises(ValueError, match="export_network"):
        ebp_binary_conv.export_cnn(ebp_lib.init_network([20, 4], "binary", input_side=SIDE))
    net = random_cnn(CONV_CONV)
    net.layers[1].h[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        ebp_binary_conv.export_cnn(net)
    packed = ebp_binary_conv.export_cnn(random_cnn(CONV_CONV))
    with pytest.raises(ValueError, match=r"\(n, 144\)"):
        ebp_binary_conv.output_sums(packed, np.zeros((2, 100)))
    with pytest.raises(ValueError, match="unknown engine"):
        ebp_binary_conv.output_sums(packed, np.zeros((2, 144)), "blas")
    assert isinstance(packed.layers[0], ebp_binary.PackedLayer)
