"""The CPU engine's probe loop, compiled by numba: the scalar twin of
_common/kernels/open_addressing.cuh (gh_home, gh_next_bucket, gh_probe), one row at a time as
one CUDA thread runs it.

Every function takes the table's slot words as stored (``table``: ``TableState.slots``: int64,
one row per slot, the key in the low bytes of its first word), buckets of ``width``
consecutive slots, the two sentinel keys out of band in slots ``num_slots`` and
``num_slots + 1``, and keys as int64 (a 32-bit key sign-extended, as its word's low half is
read). One array type for every table keeps numba to one compile per function, not one per
key width and layout. Reads run in parallel over rows (numba ``prange``); claims
(table/cpu/claims.py) call the same probe from parallel passes over parts of the table's
buckets. Compiled on first use and cached on disk (numba's ``cache=True``;
_common/cpu/runtime.py picks the directory and serialises calls where numba's threading layer
needs it).
"""

from __future__ import annotations

import numba
import numpy as np

from gpuhash._common.constants import MIX_1, MIX_2, MIX_SHIFT, RANDOM_STEPS

SEARCH, CLAIM, CLAIM_NEW = 0, 1, 3  # gh_probe's modes (GhMode); passed as np.int64(...) where
#                                     constant, or numba compiles the probe again for the literal
CLAIM_AT = 8        # CLAIM_AT + k: claim in the bucket of step k alone (k = 0: GH_CLAIM_B1)
CLAIM_NEW_AT = 40   # CLAIM_NEW_AT + k: the same for a multimap's new copy (k < 32)
DEFERRED = -3       # CLAIM_AT: not in its bucket, which is full
DEFERRED_HOLE = -4  # CLAIM_AT: as DEFERRED, but the bucket holds an erased slot the key may take
GROUP = 32  # rows whose first lines a lookup touches before probing any of them
NO_SLOT = -2        # a claim walked every bucket and found no room

_M32 = np.uint64(0xFFFFFFFF)
_MIX1 = np.uint64(MIX_1)
_MIX2 = np.uint64(MIX_2)
_SHIFT = np.uint64(MIX_SHIFT)
_JIT = {"cache": True, "nogil": True}


@numba.njit(inline="always", **_JIT)
def mix64(x):
    x ^= x >> _SHIFT
    x *= _MIX1
    x ^= x >> _SHIFT
    x *= _MIX2
    return x ^ (x >> _SHIFT)


@numba.njit(inline="always", **_JIT)
def _range(bits, num_buckets):
    return np.int64(((bits & _M32) * np.uint64(num_buckets)) >> np.uint64(32))


@numba.njit(inline="always", **_JIT)
def home(key, key_bytes, seed, num_buckets):
    """(hash, b1, b2, filter bit in b1, filter bit in b2) of a key: gh_home."""
    bits = np.uint64(np.int64(key))
    if key_bytes == 4:
        bits &= _M32
    h = mix64(bits ^ seed)
    b1 = _range(h, num_buckets)
    b2 = _range(h >> np.uint64(32), num_buckets)
    low = np.int64(h & np.uint64(7))
    return h, b1, b2, b1 * 16 + low, b2 * 16 + 8 + low


@numba.njit(inline="always", **_JIT)
def next_bucket(h, b2, step, bucket, num_buckets):
    """The bucket of step ``step + 1``: b2, RANDOM_STEPS drawn buckets, then linear."""
    following = step + 1
    if following == 1:
        return b2
    if following < 2 + RANDOM_STEPS:
        return _range(mix64(h + np.uint64(following)), num_buckets)
    return 0 if bucket + 1 == num_buckets else bucket + 1


@numba.njit(inline="always", **_JIT)
def bucket_at(h, b1, b2, step, num_buckets):
    """The bucket of step ``step`` of a key's sequence, for steps before the linear part."""
    if step == 0:
        return b1
    if step == 1:
        return b2
    return _range(mix64(h + np.uint64(step)), num_buckets)


@numba.njit(inline="always", **_JIT)
def _key_at(table, slot, key_bytes):
    word = table[slot, 0]
    if key_bytes == 4:
        return np.int64(np.int32(word & 0xFFFFFFFF))
    return word


@numba.njit(inline="always", **_JIT)
def _set_key(table, slot, key_bytes, key):
    if key_bytes == 4:
        table[slot, 0] = (table[slot, 0] & ~np.int64(0xFFFFFFFF)) | (key & 0xFFFFFFFF)
    else:
        table[slot, 0] = key


@numba.njit(inline="always", **_JIT)
def _overflowed(overflow, bit):
    return (np.int64(overflow[bit >> 5]) >> (bit & 31)) & 1 == 1


@numba.njit(inline="always", **_JIT)
def _mark(overflow, bit):
    flag = np.int64(1) << (bit & 31)
    if flag >= np.int64(1) << 31:
        flag -= np.int64(1) << 32
    overflow[bit >> 5] |= np.int32(flag)


@numba.njit(inline="always", **_JIT)
def new_copy(mode):
    """Whether a claim mode places a multimap's new copy (matches and erased slots ignored)."""
    return mode == CLAIM_NEW or mode >= CLAIM_NEW_AT


@numba.njit(inline="always", **_JIT)
def pass_step(mode):
    """The step of the sequence a CLAIM_AT / CLAIM_NEW_AT mode claims in (0 for the others)."""
    if mode < CLAIM_AT:
        return 0
    return mode - (CLAIM_NEW_AT if mode >= CLAIM_NEW_AT else CLAIM_AT)


@numba.njit(**_JIT)
def probe(table, overflow, key, key_bytes, seed, num_buckets, width, empty, tomb, mode):
    """Find ``key`` or, by ``mode``, claim a slot for it: (slot, claimed, reused).

    The walk follows the key's bucket sequence. A match ends it (CLAIM_NEW, a multimap's new
    copy, ignores matches). A bucket with an EMPTY slot ends it too: by the invariant every
    writer keeps (slots never become EMPTY again; the buckets of a sequence before the one
    holding a key are full) the key is absent, so a SEARCH returns -1 and a claim takes the
    first erased slot its walk passed (rows of one key claim one after another, so reusing one
    cannot make two copies) or else the bucket's first EMPTY slot. A SEARCH also stops after a
    full b1 / b2 whose filter bit for the key is clear. CLAIM_AT + k looks at the bucket of
    step k alone (k = 0: every first bucket is filled before any key settles for its second), for a
    key whose earlier buckets were full, without it and without erased slots: it takes the
    bucket's first erased or EMPTY slot, or returns DEFERRED (DEFERRED_HOLE if the bucket holds
    an erased slot); it sets no filter bit (those are other threads' words: the caller sets
    them after its pass). CLAIM_NEW_AT + k is CLAIM_AT + k for a new copy: matches ignored,
    EMPTY slots only, as CLAIM_NEW. A claim past b1 sets the key's filter bits. Slot -1 /
    NO_SLOT: none found.
    """
    num_slots = num_buckets * width
    if (key == empty) | (key == tomb):  # out of band; the other sentinel marks the slot absent
        slot = num_slots + (1 if key == tomb else 0)
        if _key_at(table, slot, key_bytes) == key:
            return slot, False, False
        if mode == SEARCH:
            return -1, False, False
        _set_key(table, slot, key_bytes, key)
        return slot, True, False
    h, b1, b2, left_first, left_second = home(key, key_bytes, seed, num_buckets)
    copy = new_copy(mode)
    first = pass_step(mode)
    bucket = bucket_at(h, b1, b2, first, num_buckets)
    erased, erased_step = -1, 0
    for step in range(first, num_buckets + RANDOM_STEPS + 2):
        base = bucket * width
        match, free, hole = -1, -1, -1
        for lane in range(width - 1, -1, -1):  # downwards: the lowest lane of each kind stays
            word = _key_at(table, base + lane, key_bytes)
            if word == key:
                match = lane
            if word == empty:
                free = lane
            if word == tomb:
                hole = lane
        if match >= 0 and not copy:
            return base + match, False, False
        if erased < 0 and hole >= 0 and mode != SEARCH and not copy:
            erased, erased_step = base + hole, step
        if free >= 0:
            if mode == SEARCH:
                return -1, False, False
            slot, at, reused = base + free, step, False
            if erased >= 0:
                slot, at, reused = erased, erased_step, True
            _set_key(table, slot, key_bytes, key)
            if at >= 1 and mode < CLAIM_AT:
                _mark(overflow, left_first)
            if at >= 2 and mode < CLAIM_AT:
                _mark(overflow, left_second)
            return slot, True, reused
        if mode >= CLAIM_AT:  # full: whether the key is further on, a later pass finds
            return (DEFERRED_HOLE if erased >= 0 else DEFERRED), False, False
        if mode == SEARCH and step == 0 and not _overflowed(overflow, left_first):
            return -1, False, False
        if mode == SEARCH and step == 1 and not _overflowed(overflow, left_second):
            return -1, False, False
        bucket = next_bucket(h, b2, step, bucket, num_buckets)
    return (-1 if mode == SEARCH else NO_SLOT), False, False


@numba.njit(inline="always", **_JIT)
def _read_first_lines(table, keys, start, stop, key_bytes, seed, num_buckets, width, empty,
                      tomb):
    """Read the first bucket line of keys[start:stop] (their misses overlap before any probe
    walks); returns the sum of what it read, for the caller to keep (else the compiler drops
    the reads)."""
    touched = np.int64(0)
    for i in range(start, stop):
        key = keys[i]
        if (key != empty) & (key != tomb):
            touched += table[home(key, key_bytes, seed, num_buckets)[1] * width, 0]
    return touched


@numba.njit(parallel=True, **_JIT)
def lookup(table, overflow, keys, key_bytes, seed, num_buckets, width, empty, tomb, raw,
           offset, default, out, slots):
    """find / find_index in one pass: slots[i] = slot of keys[i] (-1 where absent) and, if
    ``out`` has columns, its value bytes (``default`` where absent): gh_lookup. The copies
    loop over bytes with the branch outside (a branch per byte made copies of value rows far
    slower).

    Rows go in groups of GROUP: first each row's b1 line is read, then each row probes, then
    each found row's value line is read, then values are copied. A probe is a chain of
    dependent loads, and one row at a time leaves the CPU one cache miss in flight; the
    untaken reads of a group let it overlap GROUP of them (the pattern of a gather). Their sums
    are returned, a group's in its own word (a reduction variable over the parallel loop is
    refused by numba's parfor pass under Python 3.12), so the compiler keeps them."""
    size = out.shape[1]
    rows = keys.shape[0]
    kept = np.empty((rows + GROUP - 1) // GROUP, np.int64)
    for group in numba.prange((rows + GROUP - 1) // GROUP):
        start = group * GROUP
        stop = min(start + GROUP, rows)
        touched = _read_first_lines(table, keys, start, stop, key_bytes, seed, num_buckets,
                                    width, empty, tomb)
        for i in range(start, stop):
            slots[i] = probe(table, overflow, keys[i], key_bytes, seed, num_buckets, width,
                             empty, tomb, np.int64(SEARCH))[0]
        if size > 0:
            for i in range(start, stop):
                if slots[i] >= 0:
                    touched += raw[slots[i], offset]
            for i in range(start, stop):
                slot = slots[i]
                if slot >= 0:
                    for j in range(size):
                        out[i, j] = raw[slot, offset + j]
                else:
                    for j in range(size):
                        out[i, j] = default[j]
        kept[group] = touched
    return kept


@numba.njit(inline="always", **_JIT)
def _visited_before(h, b1, b2, step, bucket, num_buckets):
    """Whether the key's sequence reached ``bucket`` before ``step`` (gh_visited_before). Only
    the steps before the linear part can come back: a walk is too short for the linear part
    to come round to itself, so at most 2 + RANDOM_STEPS earlier steps are read."""
    earlier = b1
    for j in range(min(step, 2 + RANDOM_STEPS)):
        if earlier == bucket:
            return True
        earlier = next_bucket(h, b2, j, earlier, num_buckets)
    return False


@numba.njit(**_JIT)
def each_match(table, overflow, key, key_bytes, seed, num_buckets, width, empty, tomb, out,
               start, limit):
    """Count the slots holding ``key`` (a multimap's copies), walking as a search does; with
    ``out`` non-empty, also write the first ``limit`` of them from ``out[start]`` on
    (gh_for_each_match). The sentinel keys are never stored in buckets: they match
    nothing."""
    if (key == empty) | (key == tomb):
        return 0
    h, b1, b2, left_first, left_second = home(key, key_bytes, seed, num_buckets)
    bucket = b1
    found = 0
    for step in range(num_buckets + RANDOM_STEPS + 2):
        again = -1  # worked out at the bucket's first copy only
        room = False
        for lane in range(width):
            word = _key_at(table, bucket * width + lane, key_bytes)
            if word == key and again < 0:
                again = np.int64(step > 0 and _visited_before(h, b1, b2, step, bucket,
                                                              num_buckets))
            if word == key and again == 0:
                if out.shape[0] > 0 and found < limit:
                    out[start + found] = bucket * width + lane
                found += 1
            room |= word == empty
        if room:
            return found
        if step == 0 and not _overflowed(overflow, left_first):
            return found
        if step == 1 and not _overflowed(overflow, left_second):
            return found
        bucket = next_bucket(h, b2, step, bucket, num_buckets)
    return found


@numba.njit(parallel=True, **_JIT)
def matches(table, overflow, keys, key_bytes, seed, num_buckets, width, empty, tomb, offsets,
            rows, slots):
    """With ``rows`` empty: offsets[i] = the matches of row i (a count), and, if ``slots`` is
    not empty, slots[i] = the first of them (where there is one). Otherwise every match of row
    i at offsets[i], offsets[i] + 1, ... (offsets: an exclusive scan of the counts). One
    function for both phases: each parallel loop costs numba a compile of its own.
    Rows go in groups of GROUP whose b1 lines are read before any of them walks, as in
    lookup (the misses overlap); the reads' sums are returned so the compiler keeps them."""
    counting = rows.shape[0] == 0
    count = keys.shape[0]
    kept = np.empty((count + GROUP - 1) // GROUP, np.int64)
    for group in numba.prange((count + GROUP - 1) // GROUP):
        start = group * GROUP
        stop = min(start + GROUP, count)
        touched = _read_first_lines(table, keys, start, stop, key_bytes, seed, num_buckets,
                                    width, empty, tomb)
        for i in range(start, stop):
            if counting:
                offsets[i] = each_match(table, overflow, keys[i], key_bytes, seed, num_buckets,
                                        width, empty, tomb, slots, np.int64(i), np.int64(1))
            else:
                found = each_match(table, overflow, keys[i], key_bytes, seed, num_buckets,
                                   width, empty, tomb, slots, offsets[i], np.int64(1) << 62)
                rows[offsets[i]: offsets[i] + found] = i
        kept[group] = touched
    return kept
