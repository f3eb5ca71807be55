"""The compiled (numba) kernels of the deployed binary network (ebp_binary.output_sums, engines "numba", "blas"
and "auto").

Each kernel computes what a readable numpy function of ebp_binary computes, without temporaries: REFERENCES names
that function for every kernel (PARTS the kernel each helper belongs to), and tests/test_kernels.py checks every
pair on random inputs. ebp_binary makes the working copies of the weights these kernels read (transposed words and
bytes, patch weights, ±1 rows) and calls them.

* XNOR-popcount of a dense layer on ±1 inputs (popcount_sums_kernel, hidden_layer_kernel): the weights are stored
  transposed, (word, unit), so that the unit loop is innermost and vectorises (vpopcntq counts 8 words at once on
  AVX-512 VPOPCNTDQ CPUs; elsewhere LLVM expands the count). Blocked for reuse: two images at a time (each weight
  word loaded once for both; a last odd image, or batch 1, alone) and four words at a time (each unit's running
  count loaded and stored once per four words instead of once per word). Measured on the AMD EPYC (znver4) of
  this project, 800x800 layer: batch 1000 1.2 ms unblocked, 0.8-1.0 ms blocked; batch 1 2.6 µs paired with itself,
  1.7 µs alone (rough: taken at a load average of about 7 on 2 cores). Four images at a time, or units in blocks
  of 256 (their weight words in L1), measured no better.
* Byte tables of a dense first layer on real inputs (first_layer_sums_kernel): per image, the 256 subset sums of
  every group of 8 inputs, then per unit the entries its weight bytes select, four bytes per pass over the units
  (22 instead of 31 µs per image for [784, 800], same rough conditions).
* A locally connected layer (local_sums_kernel): its connectivity is the architecture's (block size, input side),
  so only each unit's block x block patch of signs is stored, and the sums are taken over the patch; in float32,
  vectorised over the units (see the kernel).
* Thresholds (threshold_kernel, sign_words_kernel, recheck_kernel): p·S + b ≥ 0 packed into words; for a first
  layer, whose real sums are rounded, the units within a rigorous rounding bound of 0 are listed as near-ties,
  recomputed in float64 (recheck_kernel), and those still within the float64 bound go to ebp_binary's exact
  rational decider.

No fastmath: the float operations are the ones written (no reassociation), so the float64 p·S + b is rounded as in
ebp_lib.output_ebp_d, and the sums of real inputs have the error bounds ebp_binary.near_tie_tolerance states.
Integer sums (popcounts, float32 sums of ±1 values below 2^24) are exact whatever the CPU. This module imports
nothing of the project.
"""
from __future__ import annotations

import numpy as np
from numba import njit

# Each compiled kernel and the readable function whose numbers it computes.
REFERENCES = {
    "popcount64": "numpy.bitwise_count",
    "popcount_sums_kernel": "ebp_binary.popcount_sums",
    "hidden_layer_kernel": "ebp_binary.popcount_sums",       # then p·S + b ≥ 0, packed (ebp_binary.pack_bits)
    "output_layer_kernel": "ebp_binary.popcount_sums",       # then p·S + b (float64)
    "first_layer_sums_kernel": "ebp_binary.first_layer_sums",
    "local_sums_kernel": "ebp_binary.local_sums",
    "threshold_kernel": "ebp_binary.first_layer_signs",      # without the exact decider of near-ties
    "sign_words_kernel": "ebp_binary.pack_bits",             # of p·S + b ≥ 0 for exact integer sums S
    "recheck_kernel": "ebp_binary.float64_pre_activations",  # then the sign where it is clear of the float64 bound
}
# The band around 0 of threshold_kernel and recheck_kernel is tolerance·(p·Σ|x| + 2^-126 + |b|), as
# ebp_binary.near_tie_tolerance: the 2^-126 covers inputs below float32's normal range, which it rounds to within
# 2^-150 absolutely, not relatively. Above LARGE (p·Σ|x|), where float32 sums could overflow, every unit of the
# image is listed as a near-tie and recomputed in float64 (standardised pixels are far from both limits).
SMALLEST_NORMAL32 = 2.0 ** -126
LARGE = 2.0 ** 100

# Compiled helpers without a readable counterpart of their own: the kernel whose test covers each.
PARTS = {"count_differences": "popcount_sums_kernel", "count_differences_pair": "popcount_sums_kernel",
         "count_differences_single": "popcount_sums_kernel", "count_block": "popcount_sums_kernel",
         "sign_words": "sign_words_kernel", "absolute_sum": "threshold_kernel"}


@njit(cache=True, nogil=True)
def popcount64(word):
    """Bits set in a uint64 (the SWAR count; LLVM recognises the idiom and emits the popcnt instruction)."""
    word = word - ((word >> np.uint64(1)) & np.uint64(0x5555555555555555))
    word = (word & np.uint64(0x3333333333333333)) + ((word >> np.uint64(2)) & np.uint64(0x3333333333333333))
    word = (word + (word >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (word * np.uint64(0x0101010101010101)) >> np.uint64(56)


@njit(cache=True, nogil=True)
def count_differences(signs_t, connected_t, v_words, n, differ):
    """With a mask plane: differ[unit] = Σ_j popcount((w_unit,j XOR v_n,j) AND m_unit,j), one image, one word at a
    time (masked dense layers are rare: only where some h is exactly 0)."""
    differ[:] = 0
    for j in range(signs_t.shape[0]):
        v = v_words[n, j]
        for unit in range(signs_t.shape[1]):
            differ[unit] += popcount64((signs_t[j, unit] ^ v) & connected_t[j, unit])


@njit(cache=True, nogil=True)
def count_differences_pair(signs_t, v_words, n, m, differ_n, differ_m):
    """Without a mask: differ_n[unit] = Σ_j popcount(w_unit,j XOR v_n,j), and the same for image m, at once.

    Why this shape: the unit loop is innermost (independent counts, vectorised); each weight word is loaded once for
    the two images, and words go four at a time, so each running count is loaded and stored once per four words.
    The counts are integers: the grouping of the additions changes nothing."""
    n_words, units = signs_t.shape
    differ_n[:] = 0
    differ_m[:] = 0
    j = 0
    while j + 4 <= n_words:
        a0, a1, a2, a3 = v_words[n, j], v_words[n, j + 1], v_words[n, j + 2], v_words[n, j + 3]
        c0, c1, c2, c3 = v_words[m, j], v_words[m, j + 1], v_words[m, j + 2], v_words[m, j + 3]
        for unit in range(units):
            s0, s1, s2, s3 = signs_t[j, unit], signs_t[j + 1, unit], signs_t[j + 2, unit], signs_t[j + 3, unit]
            differ_n[unit] += ((popcount64(s0 ^ a0) + popcount64(s1 ^ a1))
                               + (popcount64(s2 ^ a2) + popcount64(s3 ^ a3)))
            differ_m[unit] += ((popcount64(s0 ^ c0) + popcount64(s1 ^ c1))
                               + (popcount64(s2 ^ c2) + popcount64(s3 ^ c3)))
        j += 4
    while j < n_words:
        a0, c0 = v_words[n, j], v_words[m, j]
        for unit in range(units):
            differ_n[unit] += popcount64(signs_t[j, unit] ^ a0)
            differ_m[unit] += popcount64(signs_t[j, unit] ^ c0)
        j += 1


@njit(cache=True, nogil=True)
def count_differences_single(signs_t, v_words, n, differ):
    """count_differences_pair for one image (the last of an odd batch, or batch 1), words four at a time."""
    n_words, units = signs_t.shape
    differ[:] = 0
    j = 0
    while j + 4 <= n_words:
        a0, a1, a2, a3 = v_words[n, j], v_words[n, j + 1], v_words[n, j + 2], v_words[n, j + 3]
        for unit in range(units):
            differ[unit] += ((popcount64(signs_t[j, unit] ^ a0) + popcount64(signs_t[j + 1, unit] ^ a1))
                             + (popcount64(signs_t[j + 2, unit] ^ a2) + popcount64(signs_t[j + 3, unit] ^ a3)))
        j += 4
    while j < n_words:
        a0 = v_words[n, j]
        for unit in range(units):
            differ[unit] += popcount64(signs_t[j, unit] ^ a0)
        j += 1


@njit(cache=True, nogil=True)
def count_block(signs_t, connected_t, has_mask, v_words, n, differ_n, differ_m):
    """The differing bits of images n and n + 1 (differ_n, differ_m), or of image n alone when it is the last one;
    returns the number of images counted (2 or 1)."""
    pair = n + 1 < v_words.shape[0]
    if has_mask:
        count_differences(signs_t, connected_t, v_words, n, differ_n)
        if pair:
            count_differences(signs_t, connected_t, v_words, n + 1, differ_m)
    elif pair:
        count_differences_pair(signs_t, v_words, n, n + 1, differ_n, differ_m)
    else:
        count_differences_single(signs_t, v_words, n, differ_n)
    return 2 if pair else 1


@njit(cache=True, nogil=True)
def popcount_sums_kernel(signs_t, connected_t, has_mask, fan_in, v_words, out):
    """popcount_sums into out (n, V) int64: |M| − 2·popcount((w XOR v) AND m), or K − 2·popcount(w XOR v) without a
    mask, images two at a time (count_block)."""
    units = signs_t.shape[1]
    differ = np.zeros((2, units), dtype=np.uint64)
    for n in range(0, v_words.shape[0], 2):
        for i in range(count_block(signs_t, connected_t, has_mask, v_words, n, differ[0], differ[1])):
            for unit in range(units):
                out[n + i, unit] = fan_in[unit] - 2 * np.int64(differ[i, unit])


@njit(cache=True, nogil=True)
def output_layer_kernel(signs_t, connected_t, has_mask, fan_in, b, scale, v_words, out):
    """The output layer on packed ±1 inputs: out (n, V) float64 = p·S + b, with S as in popcount_sums_kernel (the
    float64 p·S + b rounded as output_ebp_d rounds it: S is an exact integer)."""
    units = signs_t.shape[1]
    differ = np.zeros((2, units), dtype=np.uint64)
    for n in range(0, v_words.shape[0], 2):
        for i in range(count_block(signs_t, connected_t, has_mask, v_words, n, differ[0], differ[1])):
            for unit in range(units):
                out[n + i, unit] = scale * np.float64(fan_in[unit] - 2 * np.int64(differ[i, unit])) + b[unit]


@njit(cache=True, nogil=True)
def hidden_layer_kernel(signs_t, connected_t, has_mask, fan_in, b, scale, v_words, out_words):
    """A dense hidden layer on packed ±1 inputs: out_words (n, words) = the bits p·S + b ≥ 0, with S as in
    popcount_sums_kernel (the float64 p·S + b is rounded as output_ebp_d rounds it)."""
    units = signs_t.shape[1]
    sums = np.empty((2, units), dtype=np.int64)
    differ = np.zeros((2, units), dtype=np.uint64)
    for n in range(0, v_words.shape[0], 2):
        for i in range(count_block(signs_t, connected_t, has_mask, v_words, n, differ[0], differ[1])):
            for unit in range(units):
                sums[i, unit] = fan_in[unit] - 2 * np.int64(differ[i, unit])
            sign_words(sums, i, b, scale, out_words, n + i)


@njit(cache=True, nogil=True)
def first_layer_sums_kernel(x, plus_t, minus_t, has_mask, unit_span, out):
    """first_layer_sums of a dense layer, one image at a time: its byte tables (byte_tables), then the table entries
    that the units' weight bytes select (stored transposed, (byte, unit), so that the unit loop is innermost:
    independent sums, no dependency chain). Without a mask, four bytes per pass over the units: each running sum
    is loaded and stored once per four table entries. With a mask, byte j is read only for the units
    unit_span[j, 0] to unit_span[j, 1] − 1, the range of units with a connected input in it."""
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
        if has_mask:
            for j in range(groups):
                row = table[j]
                for unit in range(unit_span[j, 0], unit_span[j, 1]):
                    positive[unit] += row[plus_t[j, unit]]
                    negative[unit] += row[minus_t[j, unit]]
            for unit in range(n_units):
                out[n, unit] = positive[unit] - negative[unit]
        else:
            j = 0
            while j + 4 <= groups:
                r0, r1, r2, r3 = table[j], table[j + 1], table[j + 2], table[j + 3]
                for unit in range(n_units):  # constant bounds: this loop vectorises, a variable-bounds one did not
                    positive[unit] += ((r0[plus_t[j, unit]] + r1[plus_t[j + 1, unit]])
                                       + (r2[plus_t[j + 2, unit]] + r3[plus_t[j + 3, unit]]))
                j += 4
            while j < groups:
                row = table[j]
                for unit in range(n_units):
                    positive[unit] += row[plus_t[j, unit]]
                j += 1
            total = 0.0
            for i in range(k):
                total += x[n, i]
            for unit in range(n_units):
                out[n, unit] = (positive[unit] + positive[unit]) - total


@njit(cache=True, nogil=True)
def local_sums_kernel(images, patch, out):
    """local_sums in float32: images (n, side, side) (real pixels, or ±1 units of a previous local layer), patch
    (block, block, units) float32 with patch[r, q, a·m + c] the weight of unit (a, c) on input (a + r, c + q)
    (0 where not connected), out (n, units) float32.

    Why this shape: for one column shift q, the shifted copy xq[i, c] = images[n, i, q + c] (side x m, rounded to
    float32) makes the inputs of patch position (r, q) of all m² units the contiguous run xq[r : r + m] (flattened),
    so the unit loop is one long vectorised loop. Positions are added q outer, r inner, four rows r at a time
    (measured about 10% faster than one); with ±1 inputs and ±1/0 weights every partial sum is an integer below
    2^24, so the sums are exact. On the AMD EPYC here, block 13 at batch 1000: about 4.4 µs per image, sgemm on the
    dense 784x256 matrix about 4.3 (rough, at a load average of about 6 on 2 cores)."""
    n_images, side, _ = images.shape
    block, _, units = patch.shape
    m = side - block + 1
    xq = np.empty((side, m), dtype=np.float32)
    flat = xq.ravel()
    acc = np.empty(units, dtype=np.float32)
    for n in range(n_images):
        acc[:] = 0.0
        for q in range(block):
            for i in range(side):
                for c in range(m):
                    xq[i, c] = images[n, i, q + c]
            r = 0
            while r + 4 <= block:  # four rows per pass: each running sum loaded and stored once per four products
                w0, w1, w2, w3 = patch[r, q], patch[r + 1, q], patch[r + 2, q], patch[r + 3, q]
                x0 = flat[r * m:r * m + units]  # slices: an index computed from r would block vectorisation
                x1 = flat[(r + 1) * m:(r + 1) * m + units]
                x2 = flat[(r + 2) * m:(r + 2) * m + units]
                x3 = flat[(r + 3) * m:(r + 3) * m + units]
                for unit in range(units):
                    acc[unit] += ((w0[unit] * x0[unit] + w1[unit] * x1[unit])
                                  + (w2[unit] * x2[unit] + w3[unit] * x3[unit]))
                r += 4
            while r < block:
                w0 = patch[r, q]
                x0 = flat[r * m:r * m + units]
                for unit in range(units):
                    acc[unit] += w0[unit] * x0[unit]
                r += 1
        for unit in range(units):
            out[n, unit] = acc[unit]


@njit(cache=True, nogil=True)
def absolute_sum(x, n):
    """Σ_i |x[n, i]| in 8 interleaved partial sums (8 independent chains, not one: it is only a tolerance's scale)."""
    k = x.shape[1]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    i = 0
    while i + 8 <= k:
        s0 += abs(x[n, i])
        s1 += abs(x[n, i + 1])
        s2 += abs(x[n, i + 2])
        s3 += abs(x[n, i + 3])
        s4 += abs(x[n, i + 4])
        s5 += abs(x[n, i + 5])
        s6 += abs(x[n, i + 6])
        s7 += abs(x[n, i + 7])
        i += 8
    while i < k:
        s0 += abs(x[n, i])
        i += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@njit(cache=True, nogil=True)
def threshold_kernel(sums, x, b, scale, tolerance, out_words, row0, near, start):
    """first_layer_signs without the exact decider, for approximate sums S̃ (float64 or float32) of the real inputs
    x (the same rows, float64): word w of row row0 + n of out_words holds bits p·S̃ + b ≥ 0 of units 64w..64w+63,
    and the pairs (row0 + n, unit) with |p·S̃ + b| ≤ tolerance·(p·Σ|x_n| + |b_unit|) are written to the rows of
    `near` from `start` on, as many as fit (every unit of an image with p·Σ|x| ≥ LARGE, see above). Returns the
    number of near-ties found (all of them, even beyond the buffer).

    Why this shape: each word is built in a register over its 64 units and the near-ties are only counted there
    (both loops vectorise); the rare word with a near-tie is visited again to list them. Setting one bit of the
    output array per unit, with a branch per unit, took 7 µs per image for 800 units."""
    found = 0
    units = sums.shape[1]
    for n in range(sums.shape[0]):
        magnitude = scale * absolute_sum(x, n) + SMALLEST_NORMAL32
        suspect = not magnitude < LARGE  # float32 may overflow (or x is not finite): every unit is a near-tie
        for w in range(out_words.shape[1]):
            first, stop = 64 * w, min(64 * w + 64, units)
            word = np.uint64(0)
            ties = 0
            for unit in range(first, stop):
                u = scale * np.float64(sums[n, unit]) + b[unit]
                word |= np.uint64(u >= 0) << np.uint64(unit - first)
                ties += abs(u) <= tolerance * (magnitude + abs(b[unit]))
            out_words[row0 + n, w] = word
            if ties or suspect:
                for unit in range(first, stop):
                    if suspect or (abs(scale * np.float64(sums[n, unit]) + b[unit])
                                   <= tolerance * (magnitude + abs(b[unit]))):
                        if start + found < near.shape[0]:
                            near[start + found, 0], near[start + found, 1] = row0 + n, unit
                        found += 1
    return found


@njit(cache=True, nogil=True)
def sign_words(sums, n, b, scale, out_words, row):
    """Word w of out_words[row] = the bits p·S + b ≥ 0 of units 64w..64w+63 of sums[n], built in a register."""
    units = sums.shape[1]
    for w in range(out_words.shape[1]):
        first, stop = 64 * w, min(64 * w + 64, units)
        word = np.uint64(0)
        for unit in range(first, stop):
            word |= np.uint64(scale * np.float64(sums[n, unit]) + b[unit] >= 0) << np.uint64(unit - first)
        out_words[row, w] = word


@njit(cache=True, nogil=True)
def sign_words_kernel(sums, b, scale, out_words):
    """out_words (n, words) = the bits p·S + b ≥ 0, for exact integer sums S (int64, or float32 integers)."""
    for n in range(sums.shape[0]):
        sign_words(sums, n, b, scale, out_words, n)


@njit(cache=True, nogil=True)
def recheck_kernel(x, weights, b, scale, tolerance, near, count, out_words):
    """The near-ties near[:count] (rows (image, unit)) of a first layer, recomputed in float64: u = p·Σ_i w_i x_i + b
    (weights: (V, K) int8 of −1, 0, +1; the products are exact). Where |u| > tolerance·(p·Σ|x| + |b|) the float64
    sign is the exact sign, and the bit is set or cleared; the others are moved to the front of `near` for the
    exact rational decider, and their number is returned.

    The sum is taken in 8 interleaved partial sums (inputs i ≡ j mod 8), added pairwise at the end: a fixed order,
    8 independent chains instead of one (the float64 bound holds for any order)."""
    left = 0
    k = x.shape[1]
    for t in range(count):
        n, unit = near[t, 0], near[t, 1]
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
        i = 0
        while i + 8 <= k:
            s0 += np.float64(weights[unit, i]) * x[n, i]
            s1 += np.float64(weights[unit, i + 1]) * x[n, i + 1]
            s2 += np.float64(weights[unit, i + 2]) * x[n, i + 2]
            s3 += np.float64(weights[unit, i + 3]) * x[n, i + 3]
            s4 += np.float64(weights[unit, i + 4]) * x[n, i + 4]
            s5 += np.float64(weights[unit, i + 5]) * x[n, i + 5]
            s6 += np.float64(weights[unit, i + 6]) * x[n, i + 6]
            s7 += np.float64(weights[unit, i + 7]) * x[n, i + 7]
            i += 8
        while i < k:
            s0 += np.float64(weights[unit, i]) * x[n, i]
            i += 1
        total = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
        u = scale * total + b[unit]
        if abs(u) <= tolerance * (scale * absolute_sum(x, n) + SMALLEST_NORMAL32 + abs(b[unit])):
            near[left, 0], near[left, 1] = n, unit
            left += 1
        elif u >= 0:
            out_words[n, unit >> 6] |= np.uint64(1) << np.uint64(unit & 63)
        else:
            out_words[n, unit >> 6] &= ~(np.uint64(1) << np.uint64(unit & 63))
    return left
