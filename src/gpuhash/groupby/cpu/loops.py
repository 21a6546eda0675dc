"""The group-by's loops, compiled by numba: grouped sums, minima and maxima with counts, and
the hashes and equality check of string keys, and the numbering of short strings.

Rows are split into a fixed number of chunks (not one a thread), each accumulating into its
own row of the outputs, which the engine then combines: results, float sums included, are
the same whatever the thread count. Compiled on first use and cached on disk
(_common/cpu/runtime.py picks the directory; a forked child runs serial twins).
"""

from __future__ import annotations

import numba
import numpy as np

from gpuhash._common.constants import GOLDEN
from gpuhash._common.cpu.probe import mix64
from gpuhash._common.cpu.words import word_at

_JIT = {"cache": True, "nogil": True}
SUM, MIN, MAX = 0, 1, 2
BLOCK = 1 << 16  # rows a block of a parallel pass


@numba.njit(inline="always", **_JIT)
def _accumulate(g, i, values, valid, has_valid, every_value, op, acc, seen, held):
    """Row ``i`` of group ``g`` into its group's rows seen, values seen and accumulator."""
    held[g] += 1
    v = values[i]
    if not every_value:
        if has_valid and not valid[i]:
            return
        if v != v:  # NaN: a null, as pandas skips it (never true of integers)
            return
        seen[g] += 1
    if op == SUM:
        acc[g] += v
    elif op == MIN:
        if (seen[g] if not every_value else held[g]) == 1 or v < acc[g]:
            acc[g] = v
    elif (seen[g] if not every_value else held[g]) == 1 or v > acc[g]:
        acc[g] = v


@numba.njit(parallel=True, **_JIT)
def group_reduce(codes, low, values, valid, has_valid, op, out, counts, rows):
    """Per chunk ``c`` (a row of ``out``, ``counts``, ``rows``): rows seen, valid non-NaN
    values seen and their sum / min / max, per group ``code - low`` (below zero: dropped).
    Values seen are not counted where every row's value counts (integers without a validity
    mask): the engine takes the rows seen for them."""
    chunks = out.shape[0]
    n = codes.shape[0]
    per = (n + chunks - 1) // chunks
    every_value = not has_valid and values.dtype.kind != "f"
    for c in numba.prange(chunks):
        start = c * per
        stop = min(n, start + per)
        acc, seen, held = out[c], counts[c], rows[c]
        for i in range(start, stop):
            g = np.int64(codes[i]) - low
            if g < 0 or g >= acc.shape[0]:  # outside [0, groups): dropped, as on the GPU
                continue
            _accumulate(g, i, values, valid, has_valid, every_value, op, acc, seen, held)


@numba.njit(parallel=True, **_JIT)
def group_reduce_ranges(codes, low, values, valid, has_valid, op, acc, seen, held, parts):
    """group_reduce with one set of accumulators, for many groups: part ``p`` of ``parts``
    owns the groups of its range and reads every row, taking only its groups' rows. Each group
    still takes its rows in row order, on one thread: the results are a single pass's, bit for
    bit, whatever ``parts`` is."""
    n = codes.shape[0]
    groups = acc.shape[0]
    every_value = not has_valid and values.dtype.kind != "f"
    for p in numba.prange(parts):
        first = p * groups // parts
        stop = (p + 1) * groups // parts
        for i in range(n):
            g = np.int64(codes[i]) - low
            if g < first or g >= stop:  # another part's, or dropped (below zero)
                continue
            _accumulate(g, i, values, valid, has_valid, every_value, op, acc, seen, held)


@numba.njit(parallel=True, **_JIT)
def _place_by_group(slot, groups, values, count, out):
    """The values of the rows whose slot is below ``groups`` placed by group into ``out`` in
    row order; ``count`` (groups + 1 zeros) gets each group's rows. A counting sort in fixed
    chunks of rows (each chunk counts, then places its rows after the earlier chunks' rows of
    each group). Returns each group's start (and the rows placed, last)."""
    n = slot.shape[0]
    chunks = min(16, max(1, n // BLOCK))
    per = (n + chunks - 1) // chunks
    counts = np.zeros((chunks, groups + 1), dtype=np.int64)
    for c in numba.prange(chunks):
        mine = counts[c]
        for i in range(c * per, min(n, (c + 1) * per)):
            mine[slot[i]] += 1
    start = np.zeros(groups + 1, dtype=np.int64)
    place = np.empty((chunks, groups), dtype=np.int64)
    at = 0
    for g in range(groups):
        start[g] = at
        for c in range(chunks):
            place[c, g] = at
            at += counts[c, g]
        count[g] = at - start[g]
    start[groups] = at
    for c in numba.prange(chunks):
        mine = place[c]
        for i in range(c * per, min(n, (c + 1) * per)):
            g = slot[i]
            if g < groups:
                out[mine[g]] = values[i]
                mine[g] += 1
    return start


@numba.njit(parallel=True, **_JIT)
def group_sort(slot, groups, values, descending, count, out):
    """The values of the rows whose slot is below ``groups``, placed by group and then sorted
    within each group (each group's run on its own core); ``count`` (groups + 1 zeros) gets
    each group's rows. Returns how many values were placed."""
    start = _place_by_group(slot, groups, values, count, out)
    for g in numba.prange(groups):
        segment = out[start[g]:start[g + 1]]
        segment.sort()
        if descending:
            m = segment.shape[0]
            for j in range(m // 2):
                segment[j], segment[m - 1 - j] = segment[m - 1 - j], segment[j]
    return start[groups]


@numba.njit(**_JIT)
def _select(a, lo, hi, t):
    """The value at index ``t`` were ``a[lo:hi]`` sorted, found in place (Hoare's selection,
    a median-of-three pivot, an insertion sort below 17 values; past 2 log2 n partitions the
    rest is sorted, so an adversarial order costs n log n, not n squared); afterwards no
    value past ``t`` is below it."""
    depth = 2 * (int(np.log2(max(hi - lo, 2))) + 1)
    while hi - lo > 16:
        if depth == 0:
            a[lo:hi].sort()
            return a[t]
        depth -= 1
        x, y, z = a[lo], a[lo + (hi - lo) // 2], a[hi - 1]
        pivot = max(min(x, y), min(max(x, y), z))
        i, j = lo, hi - 1
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if t <= j:
            hi = j + 1
        elif t >= i:
            lo = i
        else:  # between the two halves: equal to the pivot
            return a[t]
    for m in range(lo + 1, hi):
        v = a[m]
        k = m - 1
        while k >= lo and a[k] > v:
            a[k + 1] = a[k]
            k -= 1
        a[k + 1] = v
    return a[t]


@numba.njit(parallel=True, **_JIT)
def group_quantile(slot, groups, values, q, count, placed, out):
    """Each group's ``q``-quantile (``out``, float64; 0.0 for an empty group) of the values
    whose slot is below ``groups``: placed by group, then in each group's run (on its own
    core) the rank below the position selected in place and the next one up taken as the
    least of the rest, with the CUDA engine's arithmetic: the same bits."""
    start = _place_by_group(slot, groups, values, count, placed)
    for g in numba.prange(groups):
        n = count[g]
        if n == 0:
            out[g] = 0.0
            continue
        position = q * np.float64(n - 1)
        below = np.int64(np.floor(position))
        above = np.int64(np.ceil(position))
        low = np.float64(_select(placed, start[g], start[g + 1], start[g] + below))
        high = low
        if above != below:
            high = np.float64(placed[start[g] + below + 1:start[g + 1]].min())
        out[g] = low + (high - low) * (position - np.float64(below))


@numba.njit(parallel=True, **_JIT)
def group_codes_digit(out, column, low, span, first):
    """One column's step of a mixed-radix code: ``out = out * span + (key - low)`` (the first
    column: ``out = key - low``), in parallel blocks; computed in int64 and stored as
    ``out``'s dtype (int32 where the codes fit it)."""
    n = out.shape[0]
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        start = block * BLOCK
        stop = min(n, start + BLOCK)
        if first:
            for i in range(start, stop):
                out[i] = np.int64(column[i]) - low
        else:
            for i in range(start, stop):
                out[i] = out[i] * span + (np.int64(column[i]) - low)


@numba.njit(parallel=True, **_JIT)
def group_comoments(codes, first, second, use, has_use, mean_first, mean_second, out):
    """Per chunk ``c``: sums of ``(a - mean_a)**2``, ``(b - mean_b)**2`` and their product
    over the rows that count, per group (``out``: chunks x 3 x groups), in one pass."""
    chunks = out.shape[0]
    n = codes.shape[0]
    per = (n + chunks - 1) // chunks
    for c in numba.prange(chunks):
        start = c * per
        stop = min(n, start + per)
        aa, bb, ab = out[c, 0], out[c, 1], out[c, 2]
        for i in range(start, stop):
            g = np.int64(codes[i])
            if g < 0 or g >= aa.shape[0] or (has_use and not use[i]):
                continue
            da = np.float64(first[i]) - mean_first[g]
            db = np.float64(second[i]) - mean_second[g]
            aa[g] += da * da
            bb[g] += db * db
            ab[g] += da * db


_GOLDEN = np.uint64(GOLDEN)  # gh_string_hash's seed and size factor


@numba.njit(parallel=True, **_JIT)
def group_string_hashes(offsets, data, words, out):
    """out[i] = the 64-bit hash of string ``i``'s bytes (groupby/kernels/strings.cu:
    gh_string_hash, the same bits), its bytes read eight at a time (``words``: the bytes as
    uint64, _common/cpu/words.py). Indices are unsigned: numba checks signed ones for
    wrap-around at every access."""
    n = out.shape[0]
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        for i in range(block * BLOCK, min(n, (block + 1) * BLOCK)):
            begin = np.uint64(offsets[np.uint64(i)])
            size = np.uint64(offsets[np.uint64(i + 1)]) - begin
            h = size * _GOLDEN + _GOLDEN
            at = np.uint64(0)
            while at < size:
                count = min(np.uint64(8), size - at)
                h = mix64(h ^ word_at(data, words, begin + at, count))
                at += count
            out[np.uint64(i)] = h


@numba.njit(parallel=True, **_JIT)
def group_string_mismatches(offsets, data, words, codes, first):
    """Rows whose string differs from their code's first row's (codes below zero skipped):
    gh_string_mismatches, eight bytes at a time."""
    n = codes.shape[0]
    blocks = (n + BLOCK - 1) // BLOCK
    found = np.zeros(blocks, dtype=np.int64)
    for block in numba.prange(blocks):
        for i in range(block * BLOCK, min(n, (block + 1) * BLOCK)):
            code = codes[np.uint64(i)]
            if code < 0 or first[np.uint64(code)] == i:
                continue
            row = np.uint64(first[np.uint64(code)])
            begin = np.uint64(offsets[np.uint64(i)])
            size = np.uint64(offsets[np.uint64(i + 1)]) - begin
            other = np.uint64(offsets[row])
            if np.uint64(offsets[row + np.uint64(1)]) - other != size:
                found[block] += 1
                continue
            at = np.uint64(0)
            while at < size:
                count = min(np.uint64(8), size - at)
                if (word_at(data, words, begin + at, count)
                        != word_at(data, words, other + at, count)):
                    found[block] += 1
                    break
                at += count
    return found.sum()


@numba.njit(inline="always", **_JIT)
def _slot_of(table_keys, table_codes, mask, key):
    """The slot of ``key`` in an open-addressing table (linear probing from its hash), or of
    the empty slot where it would go (code -1)."""
    slot = np.int64(mix64(np.uint64(key)) & mask)
    while table_codes[slot] >= 0 and table_keys[slot] != key:
        slot = (slot + 1) & mask
    return slot


@numba.njit(parallel=True, **_JIT)
def group_number_chunks(values, chunks, keys, first, local, counts):
    """Each chunk of ``values`` numbered alone, by first appearance: ``local[i]`` the row's
    code in its chunk, ``keys[c, j]`` / ``first[c, j]`` chunk c's code j's value and first
    row, ``counts[c]`` its codes, or -1 where its table (twice ``keys.shape[1]`` slots, a
    power of two) would pass half full (the caller retries with larger ones)."""
    n = values.shape[0]
    per = (n + chunks - 1) // chunks
    size = 2 * keys.shape[1]
    mask = np.int64(size - 1)
    for c in numba.prange(chunks):
        table_keys = np.empty(size, dtype=np.int64)
        table_codes = np.full(size, -1, dtype=np.int64)
        count = 0
        for i in range(c * per, min(n, (c + 1) * per)):
            key = values[i]
            slot = _slot_of(table_keys, table_codes, mask, key)
            if table_codes[slot] < 0:
                if 2 * (count + 1) > size:
                    count = -1
                    break
                table_keys[slot] = key
                table_codes[slot] = count
                keys[c, count] = key
                first[c, count] = i
                count += 1
            local[i] = table_codes[slot]
        counts[c] = count


@numba.njit(**_JIT)
def group_number_merge(keys, first, counts, size, mapping, out_first):
    """The chunks' codes made one numbering by first appearance (chunk order, then each
    chunk's own): ``mapping[c, j]`` the code of chunk c's code j, ``out_first`` each code's
    first row. Returns the codes' count. ``size``: slots of the table, a power of two more
    than twice the codes."""
    table_keys = np.empty(size, dtype=np.int64)
    table_codes = np.full(size, -1, dtype=np.int64)
    mask = np.int64(size - 1)
    total = 0
    for c in range(counts.shape[0]):
        for j in range(counts[c]):
            key = keys[c, j]
            slot = _slot_of(table_keys, table_codes, mask, key)
            if table_codes[slot] < 0:
                table_keys[slot] = key
                table_codes[slot] = total
                out_first[total] = first[c, j]
                total += 1
            mapping[c, j] = table_codes[slot]
    return total


@numba.njit(parallel=True, **_JIT)
def group_number_rows(local, chunks, mapping, out):
    """out[i] = the code of row i: its chunk's mapping of its code in the chunk (``out`` may
    be ``local`` itself: each row is read before it is written)."""
    n = local.shape[0]
    per = (n + chunks - 1) // chunks
    for c in numba.prange(chunks):
        for i in range(c * per, min(n, (c + 1) * per)):
            out[i] = mapping[c, local[i]]


SHORT_BYTES = 15  # strings numbered as two words: up to 15 bytes, and the length in the top byte


@numba.njit(inline="always", **_JIT)
def _short_words(begin, size, data, words):
    """The string of ``size`` (at most SHORT_BYTES) bytes at ``begin`` as two words: equal
    words, equal strings."""
    low = word_at(data, words, begin, min(size, np.uint64(8)))
    high = np.uint64(0)
    if size > np.uint64(8):
        high = word_at(data, words, begin + np.uint64(8), size - np.uint64(8))
    return low, high | (size << np.uint64(56))


VIEW_INLINE_BYTES = 12  # an Arrow string view of up to 12 bytes holds them: no buffer read
# the bits of a view's two words that hold its length and its first ``size`` bytes
_VIEW_LOW_MASKS = np.array([0xFFFFFFFF | (((1 << (8 * min(size, 4))) - 1) << 32)
                            for size in range(VIEW_INLINE_BYTES + 1)], dtype=np.uint64)
_VIEW_HIGH_MASKS = np.array([(1 << (8 * max(size - 4, 0))) - 1
                             for size in range(VIEW_INLINE_BYTES + 1)], dtype=np.uint64)


@numba.njit(inline="always", **_JIT)
def _row_words(at, offsets, data, words, views, is_views):
    """(low, high, short) of row ``at``: its string as two words (equal words, equal strings)
    where it is short (SHORT_BYTES with offsets, VIEW_INLINE_BYTES as a view)."""
    if is_views:
        low = views[np.uint64(2) * at]
        high = views[np.uint64(2) * at + np.uint64(1)]
        size = low & np.uint64(0xFFFFFFFF)
        if size > VIEW_INLINE_BYTES:
            return np.uint64(0), np.uint64(0), False
        return low & _VIEW_LOW_MASKS[size], high & _VIEW_HIGH_MASKS[size], True
    begin = np.uint64(offsets[at])
    size = np.uint64(offsets[at + np.uint64(1)]) - begin
    if size > SHORT_BYTES:
        return np.uint64(0), np.uint64(0), False
    low, high = _short_words(begin, size, data, words)
    return low, high, True


@numba.njit(inline="always", **_JIT)
def _short_slot(low, high, shift):
    return mix64(low ^ (high * _GOLDEN)) >> shift


@numba.njit(parallel=True, **_JIT)
def group_number_strings(n, offsets, data, words, views, is_views, valid, has_valid, parts,
                         bits):
    """(codes by first appearance, int32, 0 at nulls; each code's first row; status) of ``n``
    short strings (_row_words: by offsets and bytes, or as Arrow views, ``is_views``): each
    of ``parts`` runs of rows numbered in a table of its own (2**bits slots, at most half of
    them used), then the parts' numberings merged in row order on one thread and the rows
    of later parts renumbered. Status 1: a longer string; 2: a part met more than
    2**(bits - 1) strings (the caller tries larger tables). Equal words are equal strings:
    no hash is trusted."""
    codes = np.zeros(n, np.int32)
    per = (n + parts - 1) // parts
    slots = 1 << bits
    most = slots >> 1
    shift = np.uint64(64 - bits)
    found = np.zeros(parts, np.int64)
    status = np.zeros(parts, np.int64)
    lows = np.empty((parts, most), np.uint64)
    highs = np.empty((parts, most), np.uint64)
    firsts = np.empty((parts, most), np.int64)
    for part in numba.prange(parts):
        # a slot holds a code; the code's words are its part's lows / highs (a table of
        # codes alone stays in the nearest cache longer than one holding the words too)
        table = np.full(slots, -1, np.int32)
        part_lows, part_highs = lows[part], highs[part]
        k = 0
        for i in range(part * per, min(n, (part + 1) * per)):
            at = np.uint64(i)
            if has_valid and not valid[at]:
                continue
            low, high, short = _row_words(at, offsets, data, words, views, is_views)
            if not short:
                status[part] = 1
                break
            slot = _short_slot(low, high, shift)
            code = table[slot]
            while code >= 0 and (part_lows[code] != low or part_highs[code] != high):
                slot = (slot + np.uint64(1)) & np.uint64(slots - 1)
                code = table[slot]
            if code < 0:
                if k == most:
                    status[part] = 2
                    break
                code = k
                table[slot] = code
                part_lows[k], part_highs[k], firsts[part, k] = low, high, i
                k += 1
            codes[at] = code
        found[part] = k
    if status.max() > 0:  # a longer string anywhere: no larger table would do
        return codes, firsts[0, :0].copy(), 1 if (status == 1).any() else 2
    total = found.sum()
    bits_all = 1
    while (1 << bits_all) < 2 * total + 2:
        bits_all += 1
    slots_all = 1 << bits_all
    g_low = np.empty(slots_all, np.uint64)
    g_high = np.empty(slots_all, np.uint64)
    g_code = np.full(slots_all, -1, np.int32)
    renumber = np.empty((parts, max(1, found.max())), np.int32)
    first = np.empty(total, np.int64)
    count = 0
    for part in range(parts):  # in row order: codes follow first appearance
        for j in range(found[part]):
            low, high = lows[part, j], highs[part, j]
            slot = _short_slot(low, high, np.uint64(64 - bits_all))
            while g_code[slot] >= 0 and (g_low[slot] != low or g_high[slot] != high):
                slot = (slot + np.uint64(1)) & np.uint64(slots_all - 1)
            if g_code[slot] < 0:
                g_code[slot], g_low[slot], g_high[slot] = count, low, high
                first[count] = firsts[part, j]
                count += 1
            renumber[part, j] = g_code[slot]
    for part in numba.prange(parts):
        same = True  # the first part's numbering is the merged one's start
        for j in range(found[part]):
            same = same and renumber[part, j] == j
        if same:
            continue
        for i in range(part * per, min(n, (part + 1) * per)):
            at = np.uint64(i)
            if not has_valid or valid[at]:
                codes[at] = renumber[part, codes[at]]
    return codes, first[:count], 0
