"""Loops of merges of tables in host memory, compiled by numba: matching a key column against
a build side indexed by key, turning the matches into row maps, and gathering Arrow buffers
by those maps, every loop in parallel over rows on every core.

Arrays arrive as NumPy views of Arrow buffers: fixed-width values as unsigned integers of
their width, validity and boolean bitmaps as uint8 with a bit offset, string offsets as int32
or int64. A row map holds int64 row numbers, -1 where an output row has no source row (a null
comes out there). Rows go in blocks of BLOCK: a pass that must know where each block writes
first counts per block, then writes; so every output is the same whatever the thread count.
Indices inside blocks are unsigned: numba checks a signed index for wrap-around on every
access, which kept these loops from vectorising (two to four times slower). Compiled on first
use and cached on disk (_common/cpu/runtime.py picks the directory; a
forked child runs serial twins of these loops).
"""

from __future__ import annotations

import numba
import numpy as np

from gpuhash._common.cpu.probe import mix64
from gpuhash._common.cpu.words import word_at
from gpuhash.join.cpu import BLOCK, INLINE

_JIT = {"cache": True, "nogil": True}


@numba.njit(inline="always", **_JIT)
def _u(i):
    """An index as unsigned: no wrap-around check where it is used."""
    return np.uint64(i)


@numba.njit(parallel=True, **_JIT)
def merge_index_by_key(keys, low, index):
    """The build side indexed by key: index[key - low] = its row, -1 where no row has that key
    (``index``: one entry a key of the span, filled here). Returns whether every key was
    distinct; where not, the caller takes the general join. Rows write their entries in
    parallel and then check them: of rows sharing a key one write stays, and the others find
    it and report the repeat."""
    for slot in numba.prange(index.shape[0]):
        index[slot] = -1
    n = keys.shape[0]
    for row in numba.prange(n):
        index[_u(np.int64(keys[row]) - low)] = row
    repeats = np.zeros((n + BLOCK - 1) // BLOCK, np.int64)
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        for row in range(_u(block * BLOCK), _u(min(n, (block + 1) * BLOCK))):
            if index[_u(np.int64(keys[row]) - low)] != np.int64(row):
                repeats[block] = 1
    return repeats.sum() == 0


@numba.njit(parallel=True, **_JIT)
def merge_look_up(keys, valid, low, index, rows, counts):
    """rows[i] = the build row of probe key keys[i] (-1 where none, or where ``valid`` (uint8,
    empty: every row) is 0); counts[block] = the block's found rows."""
    span = index.shape[0]
    n = keys.shape[0]
    check = valid.shape[0] > 0
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        found = 0
        for i in range(_u(block * BLOCK), _u(min(n, (block + 1) * BLOCK))):
            slot = np.int64(keys[i]) - low
            row = -1
            if 0 <= slot < span and (not check or valid[i] != 0):
                row = index[_u(slot)]
            rows[i] = row
            if row >= 0:
                found += 1
        counts[block] = found


@numba.njit(parallel=True, **_JIT)
def merge_count_found(rows, counts):
    """counts[block] = rows of the block that are not -1."""
    n = rows.shape[0]
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        found = 0
        for i in range(_u(block * BLOCK), _u(min(n, (block + 1) * BLOCK))):
            if rows[i] >= 0:
                found += 1
        counts[block] = found


@numba.njit(parallel=True, **_JIT)
def merge_compact(rows, starts, keep_found, probe_out, build_out):
    """The probe rows whose build row is (``keep_found``) or is not -1, in probe order, into
    ``probe_out``, and their build rows into ``build_out`` (empty: not wanted); ``starts``:
    where each block writes (an exclusive sum of merge_look_up's counts, or of the missing
    rows' counts)."""
    n = rows.shape[0]
    want_build = build_out.shape[0] > 0
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        at = _u(starts[block])
        for i in range(_u(block * BLOCK), _u(min(n, (block + 1) * BLOCK))):
            if (rows[i] >= 0) == keep_found:
                probe_out[at] = np.int64(i)
                if want_build:
                    build_out[at] = rows[i]
                at += _u(1)


@numba.njit(parallel=True, **_JIT)
def merge_take(values, rows, out):
    """out[i] = values[rows[i]] (zero where rows[i] is -1): a fixed-width column (1-D) or one
    of rows of several words (2-D)."""
    for i in numba.prange(rows.shape[0]):
        row = rows[i]
        if row >= 0:
            out[i] = values[_u(row)]
        else:
            out[i] = 0


@numba.njit(parallel=True, **_JIT)
def merge_take_bits(bits, bit_offset, rows, out):
    """A bitmap (validity or booleans) gathered: bit i of ``out`` is bit rows[i] + bit_offset of
    ``bits`` (``bits`` empty: every bit 1), 0 where rows[i] is -1. Returns the zero bits a
    block (their sum is the null count of a validity bitmap). Each iteration writes whole
    bytes: blocks are multiples of 8 rows, so no two threads share a byte."""
    n = rows.shape[0]
    every = bits.shape[0] == 0
    blocks = (n + BLOCK - 1) // BLOCK
    zeros = np.zeros(blocks, np.int64)
    for block in numba.prange(blocks):
        zero = 0
        stop = min(n, (block + 1) * BLOCK)
        for byte in range(_u(block * BLOCK // 8), _u((stop + 7) // 8)):
            value = np.uint8(0)
            for j in range(8):
                i = np.int64(byte) * 8 + j
                if i >= stop:
                    break
                row = rows[_u(i)]
                bit = 0
                if row >= 0:
                    if every:
                        bit = 1
                    else:
                        at = row + bit_offset
                        bit = (bits[_u(at >> 3)] >> (at & 7)) & 1
                value |= np.uint8(bit << j)
                zero += 1 - bit
            out[byte] = value
        zeros[block] = zero
    return zeros


@numba.njit(parallel=True, **_JIT)
def merge_string_lengths(offsets, rows, begins, ends, sums):
    """ends[i + 1] = bytes of the string row i gathers (0 where rows[i] is -1; ``offsets``:
    the column's offsets from its first row) and begins[i] = where they start (``begins``
    empty: not kept); sums[block] = the block's bytes."""
    n = rows.shape[0]
    keep = begins.shape[0] > 0
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        total = 0
        for i in range(_u(block * BLOCK), _u(min(n, (block + 1) * BLOCK))):
            row = rows[i]
            size = 0
            begin = 0
            if row >= 0:
                begin = np.int64(offsets[_u(row)])
                size = np.int64(offsets[_u(row + 1)]) - begin
            if keep:
                begins[i] = begin
            ends[i + _u(1)] = size
            total += size
        sums[block] = total


@numba.njit(parallel=True, **_JIT)
def merge_string_ends(ends, starts):
    """merge_string_lengths' sizes made running ends in place, each block from ``starts``
    (the exclusive sums of its ``sums``); ends[0] is 0."""
    n = ends.shape[0] - 1
    ends[0] = 0
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        running = starts[block]
        for i in range(_u(block * BLOCK), _u(min(n, (block + 1) * BLOCK))):
            running += ends[i + _u(1)]
            ends[i + _u(1)] = running


@numba.njit(parallel=True, **_JIT)
def merge_take_strings(offsets, data, rows, begins, ends, first, out_offsets, out_data):
    """The strings of rows ``first`` .. ``first + out_offsets.shape[0] - 1`` gathered into one
    piece: its offsets (``ends`` less where the piece starts) and bytes, each row's from
    begins[i] (merge_string_lengths'), or where ``begins`` is empty from its offset. Every
    row's source and place are known beforehand, so rows copy independently; for rows in
    random order the kept ``begins`` leave one cache miss a row (reading the offset here
    chained a second one to it), for ascending rows the offsets read in order cost less than
    keeping them."""
    count = out_offsets.shape[0] - 1
    base = ends[_u(first)]
    kept = begins.shape[0] > 0
    for k in numba.prange(count):
        i = _u(first + k)
        at = ends[i] - base
        out_offsets[k] = at
        if kept:  # (a row of -1 has no bytes: its begin is never read)
            begin = begins[i]
        else:
            row = rows[i]
            if row < 0:
                continue
            begin = np.int64(offsets[_u(row)])
        for j in range(ends[i + _u(1)] - ends[i]):
            out_data[_u(at + j)] = data[_u(begin + j)]
    out_offsets[count] = ends[_u(first + count)] - base


GROUP = 32  # probe rows whose table entries are read before any of them is compared


@numba.njit(inline="always", **_JIT)
def _string_key(offsets, data, words, row):
    """(64-bit hash, first eight bytes as a word, length) of string ``row``: its bytes taken
    eight at a time as a word (word_at), each word mixed in by a multiply, the length last,
    then a 64-bit finaliser."""
    begin, end = _u(offsets[_u(row)]), _u(offsets[_u(row + 1)])
    h = np.uint64(0x9E3779B97F4A7C15)
    prefix = np.uint64(0)
    at = begin
    while at < end:
        count = min(_u(8), end - at)
        word = word_at(data, words, at, count)
        if at == begin:
            prefix = word
        h = (h ^ word) * np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(29)
        at += count
    h ^= end - begin
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h, prefix, np.int64(end - begin)


@numba.njit(inline="always", **_JIT)
def _same_tail(offsets_a, data_a, row_a, offsets_b, data_b, row_b, size):
    """Whether two strings of ``size`` bytes whose first eight agree agree past them."""
    begin_a, begin_b = np.int64(offsets_a[_u(row_a)]), np.int64(offsets_b[_u(row_b)])
    for j in range(8, size):  # noqa: SIM110 (numba compiles no generator)
        if data_a[_u(begin_a + j)] != data_b[_u(begin_b + j)]:
            return False
    return True


@numba.njit(inline="always", **_JIT)
def _find_string(table, mask, h, prefix, size, offsets, data, row, build_offsets, build_data):
    """The build row whose entry matches a string (-1: none). An entry is three words: the
    hash, (length << 32) | (build row + 1) (0: a free slot), and the first eight bytes, so
    strings of up to eight bytes are decided by the entry alone."""
    slot = h & mask
    while True:
        meta = table[slot, 1]
        if meta == 0:
            return np.int64(-1)
        if (table[slot, 0] == h and table[slot, 2] == prefix
                and np.int64(meta >> np.uint64(32)) == size):
            found = np.int64(meta & np.uint64(0xFFFFFFFF)) - 1
            if size <= 8 or _same_tail(offsets, data, row, build_offsets, build_data, found,
                                       size):
                return found
        slot = (slot + np.uint64(1)) & mask


@numba.njit(**_JIT)
def merge_index_strings(offsets, data, words, valid, table):
    """The build side's strings in an open-addressing table (``table``: zeros, a power of two
    of entries of three words, at most half full; _find_string says what an entry holds): each
    non-null row (``valid`` uint8, empty: every row) in the entry its hash probes to. False
    on a repeated string (the caller takes the general join). One thread: the writes would
    race."""
    mask = np.uint64(table.shape[0] - 1)
    check = valid.shape[0] > 0
    for row in range(offsets.shape[0] - 1):
        if check and valid[row] == 0:
            continue
        h, prefix, size = _string_key(offsets, data, words, row)
        if _find_string(table, mask, h, prefix, size, offsets, data, row, offsets, data) >= 0:
            return False
        slot = h & mask
        while table[slot, 1] != 0:
            slot = (slot + np.uint64(1)) & mask
        table[slot, 0] = h
        table[slot, 1] = (np.uint64(size) << np.uint64(32)) | np.uint64(row + 1)
        table[slot, 2] = prefix
    return True


@numba.njit(parallel=True, **_JIT)
def merge_look_up_strings(offsets, data, words, valid, build_offsets, build_data, table, rows,
                          counts):
    """rows[i] = the build row holding probe string i (-1 where none, or where ``valid`` is
    0); counts[block] = the block's found rows. Rows go in groups of GROUP: each row's entry is
    read first (reads that do not wait on each other, so their cache misses overlap), then
    each row is compared; the reads' sums are returned so the compiler keeps them."""
    mask = np.uint64(table.shape[0] - 1)
    n = offsets.shape[0] - 1
    check = valid.shape[0] > 0
    blocks = (n + BLOCK - 1) // BLOCK
    touched = np.zeros(blocks, np.uint64)
    for block in numba.prange(blocks):
        found = 0
        hashes = np.empty(GROUP, np.uint64)
        prefixes = np.empty(GROUP, np.uint64)
        sizes = np.empty(GROUP, np.int64)
        stop = min(n, (block + 1) * BLOCK)
        seen = np.uint64(0)
        for start in range(block * BLOCK, stop, GROUP):
            end = min(stop, start + GROUP)
            for i in range(start, end):
                h, prefix, size = _string_key(offsets, data, words, i)
                hashes[i - start], prefixes[i - start], sizes[i - start] = h, prefix, size
                seen += table[h & mask, 1]
            for i in range(start, end):
                row = np.int64(-1)
                if not check or valid[_u(i)] != 0:
                    row = _find_string(table, mask, hashes[i - start], prefixes[i - start],
                                       sizes[i - start], offsets, data, i, build_offsets,
                                       build_data)
                rows[_u(i)] = row
                if row >= 0:
                    found += 1
        counts[block] = found
        touched[block] = seen
    return touched


@numba.njit(parallel=True, **_JIT)
def merge_string_block_sizes(offsets, rows, sums):
    """sums[block] = bytes of the strings the block's rows gather."""
    n = rows.shape[0]
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        total = 0
        for i in range(_u(block * BLOCK), _u(min(n, (block + 1) * BLOCK))):
            row = rows[i]
            if row >= 0:
                total += np.int64(offsets[_u(row + 1)]) - np.int64(offsets[_u(row)])
        sums[block] = total


@numba.njit(parallel=True, **_JIT)
def merge_take_strings_in_order(offsets, data, rows, starts, out_offsets, out_data):
    """Strings gathered by ascending rows: each block's offsets and bytes from ``starts[block]``
    (merge_string_block_sizes' exclusive sums) on, in one pass with a running position.
    Rows in order read their offsets and bytes in order too, so the chain of each row's place
    on the row before costs nothing here and saves the per-row places' pass."""
    n = rows.shape[0]
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        at = starts[block]
        for i in range(_u(block * BLOCK), _u(min(n, (block + 1) * BLOCK))):
            out_offsets[i] = at
            row = rows[i]
            if row >= 0:
                begin = np.int64(offsets[_u(row)])
                size = np.int64(offsets[_u(row + 1)]) - begin
                for j in range(size):
                    out_data[_u(at + j)] = data[_u(begin + j)]
                at += size
    if n == 0:
        out_offsets[0] = 0


_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


@numba.njit(inline="always", **_JIT)
def _view_key(views, row):
    """String view ``row`` as two words: its length and first four bytes, then its next
    eight, the bytes past its length zeroed (Arrow does not promise what they hold), without
    a branch. For a string of up to INLINE bytes they name it alone; a longer one keeps its
    length (in the low 32 bits of the first), so it equals no key of a shorter string."""
    first, second = views[_u(row), 0], views[_u(row), 1]
    size = min(first & np.uint64(0xFFFFFFFF), np.uint64(INLINE))
    first &= _ONES >> (np.uint64(8) * (np.uint64(4) - min(size, np.uint64(4))))
    cut = np.uint64(8) * (np.uint64(INLINE) - max(size, np.uint64(4)))  # 0..64: two shifts
    second &= (_ONES >> (cut >> np.uint64(1))) >> (cut - (cut >> np.uint64(1)))
    return first, second


@numba.njit(inline="always", **_JIT)
def _find_view(table, mask, first, second):
    """The build row whose entry (first word, second word, build row + 1; 0: a free slot)
    holds the view key (first, second), -1 where none. One exit test a slot: the loop
    mispredicts once, not once per test."""
    slot = mix64(first ^ mix64(second)) & mask
    while True:
        entry = table[slot, 2]
        hit = (table[slot, 0] == first) & (table[slot, 1] == second)
        if hit | (entry == 0):
            return np.int64(entry) - 1 if hit else np.int64(-1)
        slot = (slot + np.uint64(1)) & mask


@numba.njit(**_JIT)
def merge_index_views(views, valid, table):
    """The build side's string views (every one of at most INLINE bytes: the caller checks) in
    an open-addressing table of three-word entries (_find_view), each non-null row (``valid``
    uint8, empty: every row) where its key probes to. False on a repeated string. One thread:
    the writes would race."""
    mask = np.uint64(table.shape[0] - 1)
    check = valid.shape[0] > 0
    for row in range(views.shape[0]):
        if check and valid[row] == 0:
            continue
        first, second = _view_key(views, row)
        if _find_view(table, mask, first, second) >= 0:
            return False
        slot = mix64(first ^ mix64(second)) & mask
        while table[slot, 2] != 0:
            slot = (slot + np.uint64(1)) & mask
        table[slot, 0], table[slot, 1], table[slot, 2] = first, second, np.uint64(row + 1)
    return True


@numba.njit(parallel=True, **_JIT)
def merge_look_up_views(views, valid, table, rows, counts):
    """rows[i] = the build row holding probe view i (-1 where none or where ``valid`` is 0);
    counts[block] = the block's found rows. A block goes in two passes: each row's first
    slot decides it or marks it -2 (a loop without branches, which the compiler makes
    vector code of), then the few marked rows walk on and the found rows are counted."""
    mask = np.uint64(table.shape[0] - 1)
    n = views.shape[0]
    check = valid.shape[0] > 0
    for block in numba.prange((n + BLOCK - 1) // BLOCK):
        begin, end = block * BLOCK, min(n, (block + 1) * BLOCK)
        for i in range(begin, end):
            first, second = _view_key(views, i)
            slot = mix64(first ^ mix64(second)) & mask
            entry = table[slot, 2]
            hit = (table[slot, 0] == first) & (table[slot, 1] == second)
            rows[_u(i)] = (np.int64(entry) - 1 if hit else
                           np.int64(-1) if entry == 0 else np.int64(-2))
        found = 0
        for i in range(begin, end):
            row = np.int64(rows[_u(i)])
            if check and valid[_u(i)] == 0:
                row = np.int64(-1)
            elif row == -2:
                first, second = _view_key(views, i)
                row = _find_view(table, mask, first, second)
            rows[_u(i)] = row
            if row >= 0:
                found += 1
        counts[block] = found
