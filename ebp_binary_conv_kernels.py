"""The compiled (numba) kernel of the deployed binary CNN's hidden convolutions (ebp_binary_conv, engine "auto").

direct_conv_sums computes what ebp_binary_conv.hidden_sums computes with the readable numpy engine (REFERENCES),
without im2col's temporaries: for each image and position it packs the k×k×C patch of ±1 units into words on the
fly and XORs and popcounts them with every map's kernel words. tests/test_binary_conv.py checks it against its
reference on random bits, with and without a mask plane. No fastmath; integer sums are exact on every CPU.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ebp_binary_kernels import popcount64

REFERENCES = {"direct_conv_sums": "ebp_binary_conv.hidden_sums"}  # with engine "numpy", on a convolution


@njit(cache=True, nogil=True)
def direct_conv_sums(maps, signs, connected, has_mask, fan_in, kernel, stride, out):
    """Σ_r W_{o,r} v_{p,r} of a convolution on ±1 units: maps (B, C, S, S) uint8 (1 = +1), signs and connected
    (channels, words) uint64 in ebp_conv's column order (channel, row, column), fan_in (channels,) int64 (|M| with
    a mask plane), out (B, channels, S', S') int64 = fan_in − 2·popcount((w XOR patch) AND m)."""
    batch, channels_in, _, _ = maps.shape
    channels, words = signs.shape
    side = out.shape[2]
    patch = np.zeros(words, dtype=np.uint64)
    for b in range(batch):
        for row in range(side):
            for col in range(side):
                patch[:] = 0
                i = 0
                for c in range(channels_in):
                    for r in range(kernel):
                        for q in range(kernel):
                            if maps[b, c, row * stride + r, col * stride + q]:
                                patch[i >> 6] |= np.uint64(1) << np.uint64(i & 63)
                            i += 1
                for o in range(channels):
                    differ = np.uint64(0)
                    for w in range(words):
                        bits = signs[o, w] ^ patch[w]
                        if has_mask:
                            bits &= connected[o, w]
                        differ += popcount64(bits)
                    out[b, o, row, col] = fan_in[o] - 2 * np.int64(differ)
