"""The compiled (numba) kernels of the deployed binary network's engine="numba" (ebp_binary.output_sums).

The same computation as ebp_binary's readable numpy functions, one image at a time, without temporaries, with
the threshold and the packing of each hidden layer fused into the loop that computes its sums, and the unit loop
innermost (weights stored transposed, (word or byte, unit)). A byte of a masked first layer is read only for the
units with a connected input in it (the others would add T[0] = 0). ebp_binary makes the transposed working
copies and calls these kernels; REFERENCES names the readable function each kernel computes (PARTS the kernel each
helper belongs to), and tests/test_kernels.py checks every pair on random inputs. No fastmath: the float64
operations must be the ones written (no reassociation, no fused multiply-add), so p·S + b is rounded exactly as in
ebp_lib.output_ebp_d. This module imports nothing of the project.
"""
from __future__ import annotations

import numpy as np
from numba import njit

# Each compiled kernel and the readable function whose numbers it computes.
REFERENCES = {
    "popcount64": "numpy.bitwise_count",
    "popcount_sums_kernel": "ebp_binary.popcount_sums",
    "hidden_layer_kernel": "ebp_binary.popcount_sums",       # then p·S + b ≥ 0, packed (ebp_binary.pack_bits)
    "first_layer_sums_kernel": "ebp_binary.first_layer_sums",
    "first_layer_signs_kernel": "ebp_binary.first_layer_signs",  # without the exact decider of near-ties
}
# Compiled helpers without a readable counterpart of their own: the kernel whose test covers each.
PARTS = {"count_differences": "popcount_sums_kernel"}


@njit(cache=True, nogil=True)
def popcount64(word):
    """Bits set in a uint64 (the SWAR count; LLVM recognises the idiom and emits the popcnt instruction)."""
    word = word - ((word >> np.uint64(1)) & np.uint64(0x5555555555555555))
    word = (word & np.uint64(0x3333333333333333)) + ((word >> np.uint64(2)) & np.uint64(0x3333333333333333))
    word = (word + (word >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (word * np.uint64(0x0101010101010101)) >> np.uint64(56)


@njit(cache=True, nogil=True)
def count_differences(signs_t, connected_t, has_mask, v_words, n, differ):
    """differ[unit] = Σ_j popcount((w_unit,j XOR v_n,j) AND m_unit,j) for every unit at once: the words are stored
    transposed (word, unit) so that the unit loop is innermost and vectorises (vpopcntq on AVX-512 CPUs)."""
    differ[:] = 0
    for j in range(signs_t.shape[0]):
        v = v_words[n, j]
        if has_mask:
            for unit in range(signs_t.shape[1]):
                differ[unit] += popcount64((signs_t[j, unit] ^ v) & connected_t[j, unit])
        else:
            for unit in range(signs_t.shape[1]):
                differ[unit] += popcount64(signs_t[j, unit] ^ v)


@njit(cache=True, nogil=True)
def popcount_sums_kernel(signs_t, connected_t, has_mask, fan_in, v_words, out):
    """popcount_sums into out (n, V) int64: |M| − 2·popcount((w XOR v) AND m)."""
    differ = np.zeros(signs_t.shape[1], dtype=np.uint64)
    for n in range(v_words.shape[0]):
        count_differences(signs_t, connected_t, has_mask, v_words, n, differ)
        for unit in range(signs_t.shape[1]):
            out[n, unit] = fan_in[unit] - 2 * np.int64(differ[unit])


@njit(cache=True, nogil=True)
def hidden_layer_kernel(signs_t, connected_t, has_mask, fan_in, b, scale, v_words, out_words):
    """A hidden layer on packed ±1 inputs: bit (n, unit) of out_words (zeroed) = p·S + b ≥ 0."""
    differ = np.zeros(signs_t.shape[1], dtype=np.uint64)
    for n in range(v_words.shape[0]):
        count_differences(signs_t, connected_t, has_mask, v_words, n, differ)
        for unit in range(signs_t.shape[1]):
            if scale * (fan_in[unit] - 2 * np.int64(differ[unit])) + b[unit] >= 0:
                out_words[n, unit >> 6] |= np.uint64(1) << np.uint64(unit & 63)


@njit(cache=True, nogil=True)
def first_layer_sums_kernel(x, plus_t, minus_t, has_mask, unit_span, out):
    """first_layer_sums, one image at a time: its byte tables (byte_tables), then, byte by byte, the table entries
    that the units' weight bytes select (stored transposed, (byte, unit), so that the unit loop is innermost:
    independent sums, no dependency chain). With a mask, byte j is read only for the units unit_span[j, 0] to
    unit_span[j, 1] − 1, the range of units with a connected input in it."""
    batch, k = x.shape
    groups, n_units = plus_t.shape
    table = np.empty((groups, 256))
    positive = np.empty(n_units)
    negative = np.empty(n_units)
    for n in range(batch):
        for j in range(groups):
            table[j, 0] = 0.0
            for bit in range(8):
                low = 1 << bit
                xi = x[n, 8 * j + bit] if 8 * j + bit < k else 0.0
                for c in range(low):
                    table[j, low + c] = table[j, c] + xi
        positive[:] = 0.0
        negative[:] = 0.0
        for j in range(groups):
            row = table[j]
            if has_mask:
                for unit in range(unit_span[j, 0], unit_span[j, 1]):
                    positive[unit] += row[plus_t[j, unit]]
                    negative[unit] += row[minus_t[j, unit]]
            else:
                for unit in range(n_units):  # constant bounds: this loop vectorises, a variable-bounds one did not
                    positive[unit] += row[plus_t[j, unit]]
        if has_mask:
            for unit in range(n_units):
                out[n, unit] = positive[unit] - negative[unit]
        else:
            total = 0.0
            for i in range(k):
                total += x[n, i]
            for unit in range(n_units):
                out[n, unit] = (positive[unit] + positive[unit]) - total


@njit(cache=True, nogil=True)
def first_layer_signs_kernel(sums, x, b, scale, n_inputs, safety, unit_roundoff, out_words, near):
    """first_layer_signs without the exact decider: bit (n, unit) of out_words (zeroed) = p·S + b ≥ 0; the
    (n, unit) pairs within near_tie_tolerance go to near (rows), and their count is returned."""
    n_near = 0
    for n in range(sums.shape[0]):
        magnitude = 0.0
        for i in range(x.shape[1]):
            magnitude += abs(x[n, i])
        magnitude *= scale
        for unit in range(sums.shape[1]):
            u = scale * sums[n, unit] + b[unit]
            if u >= 0:
                out_words[n, unit >> 6] |= np.uint64(1) << np.uint64(unit & 63)
            if abs(u) <= safety * (n_inputs + 2) * unit_roundoff * (magnitude + abs(b[unit])):
                if n_near < near.shape[0]:
                    near[n_near, 0], near[n_near, 1] = n, unit
                n_near += 1
    return n_near
