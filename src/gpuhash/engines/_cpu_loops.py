"""The CPU engine's probe loop, compiled by numba: the scalar twin of kernels/open_addressing.cuh
(gh_home, gh_next_bucket, gh_probe), one row at a time as one CUDA thread runs it.

Every function takes the table's slot words as stored (``table``: ``TableState.slots``: int64,
one row per slot, the key in the low bytes of its first word), buckets of ``width``
consecutive slots, the two sentinel keys out of band in slots ``num_slots`` and
``num_slots + 1``, and keys as int64 (a 32-bit key sign-extended, as its word's low half is
read). One array type for every table keeps numba to one compile per function, not one per
key width and layout. Reads run in parallel over rows (numba ``prange``); claims of first
buckets run in parallel, a thread per bucket range, and the rest in row order on one thread,
so no two rows race for a slot and the result does not depend on the thread count. Compiled
on first use and cached on disk (numba's ``cache=True``; engines/_cpu_runtime.py picks the
directory and serialises calls where numba's threading layer needs it).
"""

from __future__ import annotations

import numba
import numpy as np

RANDOM_STEPS = 64  # kernels/open_addressing.cuh: GH_RANDOM_STEPS
SEARCH, CLAIM, CLAIM_FIRST, CLAIM_NEW = 0, 1, 2, 3  # gh_probe's modes (GhMode)
DEFERRED = -3       # CLAIM_FIRST: absent, and its first bucket is full
NO_SLOT = -2        # a claim walked every bucket and found no room

_M32 = np.uint64(0xFFFFFFFF)
_MIX1 = np.uint64(0xFF51AFD7ED558CCD)
_MIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_JIT = {"cache": True, "nogil": True}


@numba.njit(inline="always", **_JIT)
def _mix64(x):
    x ^= x >> np.uint64(33)
    x *= _MIX1
    x ^= x >> np.uint64(33)
    x *= _MIX2
    return x ^ (x >> np.uint64(33))


@numba.njit(inline="always", **_JIT)
def _range(bits, num_buckets):
    return np.int64(((bits & _M32) * np.uint64(num_buckets)) >> np.uint64(32))


@numba.njit(inline="always", **_JIT)
def home(key, key_bytes, seed, num_buckets):
    """(hash, b1, b2, filter bit in b1, filter bit in b2) of a key: gh_home."""
    bits = np.uint64(np.int64(key))
    if key_bytes == 4:
        bits &= _M32
    h = _mix64(bits ^ seed)
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
        return _range(_mix64(h + np.uint64(following)), num_buckets)
    return 0 if bucket + 1 == num_buckets else bucket + 1


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


@numba.njit(**_JIT)
def probe(table, overflow, key, key_bytes, seed, num_buckets, width, empty, tomb, mode):
    """Find ``key`` or, by ``mode``, claim a slot for it: (slot, claimed, reused).

    The walk follows the key's bucket sequence. A match ends it (CLAIM_NEW, a multimap's new
    copy, ignores matches). A bucket with an EMPTY slot ends it too: by the invariant every
    writer keeps (slots never become EMPTY again; the buckets of a sequence before the one
    holding a key are full) the key is absent, so a SEARCH returns -1 and a claim takes the
    first erased slot its walk passed (CLAIM, CLAIM_FIRST: distinct keys, so reusing one cannot
    make two copies) or else the bucket's first EMPTY slot. A SEARCH also stops after a full
    b1 / b2 whose filter bit for the key is clear. CLAIM_FIRST looks at b1 alone and, if it is
    full without the key, returns DEFERRED for a CLAIM later (every first bucket is filled
    before any key settles for its second, and a deferred key is read once more, not walked
    twice). A claim past b1 sets the key's filter bits. Slot -1 / NO_SLOT: none found.
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
    bucket = b1
    erased, erased_step = -1, 0
    for step in range(num_buckets + RANDOM_STEPS + 2):
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
        if match >= 0 and mode != CLAIM_NEW:
            return base + match, False, False
        if erased < 0 and hole >= 0 and mode != SEARCH and mode != CLAIM_NEW:
            erased, erased_step = base + hole, step
        if free >= 0:
            if mode == SEARCH:
                return -1, False, False
            slot, at, reused = base + free, step, False
            if erased >= 0:
                slot, at, reused = erased, erased_step, True
            _set_key(table, slot, key_bytes, key)
            if at >= 1:
                _mark(overflow, left_first)
            if at >= 2:
                _mark(overflow, left_second)
            return slot, True, reused
        if mode == CLAIM_FIRST:  # b1 is full: whether the key is further on, pass 2 finds
            return DEFERRED, False, False
        if mode == SEARCH and step == 0 and not _overflowed(overflow, left_first):
            return -1, False, False
        if mode == SEARCH and step == 1 and not _overflowed(overflow, left_second):
            return -1, False, False
        bucket = next_bucket(h, b2, step, bucket, num_buckets)
    return (-1 if mode == SEARCH else NO_SLOT), False, False


@numba.njit(parallel=True, **_JIT)
def _claim_first_buckets(table, overflow, keys, key_bytes, seed, num_buckets, width, empty,
                         tomb, order, starts, slots, claimed, reused):
    """claim's first pass: part p's rows, order[starts[p]:starts[p + 1]], in row order."""
    for p in numba.prange(starts.shape[0] - 2):
        for j in range(starts[p], starts[p + 1]):
            i = order[j]
            slots[i], claimed[i], reused[i] = probe(table, overflow, keys[i], key_bytes, seed,
                                                    num_buckets, width, empty, tomb,
                                                    CLAIM_FIRST)


@numba.njit(**_JIT)
def claim(table, overflow, keys, key_bytes, seed, num_buckets, width, empty, tomb, multi,
          parts, slots, claimed, reused):
    """Find or claim a slot for every row (rows hold distinct keys unless ``multi``, where
    every row claims a new copy, in row order on one thread). Distinct keys go in two passes:
    the first claims only in first buckets, in parallel, each thread owning a range of
    buckets and taking the rows whose b1 lies there in row order (no two threads touch one
    bucket, so no atomics, and the result does not depend on the thread count); the rows it
    defers, and the sentinel keys, walk on in row order on one thread. Returns (the first row
    that found no slot or -1, new entries, new bucket slots used: a sentinel key or a reused
    erased slot uses none). A row that finds no slot makes the call give back every claim it
    made: the table is unchanged but for filter bits, which only cost a search one more
    bucket. ``parts``: numba's thread count (read by the caller, which keeps this cacheable)."""
    rows = keys.shape[0]
    failed = -1
    if not multi:
        owner = np.empty(rows, np.int64)
        for i in range(rows):
            key = keys[i]
            if (key == empty) | (key == tomb):
                owner[i] = parts  # out of band: with the deferred rows
            else:
                owner[i] = home(key, key_bytes, seed, num_buckets)[1] * parts // num_buckets
        starts = np.zeros(parts + 2, np.int64)
        for i in range(rows):
            starts[owner[i] + 1] += 1
        for p in range(parts + 1):
            starts[p + 1] += starts[p]
        order = np.empty(rows, np.int64)
        fill = starts.copy()
        for i in range(rows):
            order[fill[owner[i]]] = i
            fill[owner[i]] += 1
        _claim_first_buckets(table, overflow, keys, key_bytes, seed, num_buckets, width, empty,
                             tomb, order, starts, slots, claimed, reused)
        for j in range(starts[parts], starts[parts + 1]):
            slots[order[j]] = DEFERRED
    # one call site of probe for the rest (each inlined copy costs compile time): every row
    # of a multimap, the deferred rows of a map
    mode = CLAIM_NEW if multi else CLAIM
    for i in range(rows):
        if multi or slots[i] == DEFERRED:
            slots[i], claimed[i], reused[i] = probe(table, overflow, keys[i], key_bytes, seed,
                                                    num_buckets, width, empty, tomb, mode)
            if slots[i] == NO_SLOT:
                failed = i
                break
    num_slots = num_buckets * width
    live, used = 0, 0
    for i in range(keys.shape[0]):
        if not claimed[i]:
            continue
        out_of_band = slots[i] >= num_slots
        if failed >= 0:  # give it back: EMPTY, erased, or an out-of-band slot's absent marker
            marker = tomb if reused[i] else empty
            if out_of_band:
                marker = tomb if slots[i] == num_slots else empty
            _set_key(table, slots[i], key_bytes, marker)
        live += 1
        used += not (out_of_band or reused[i])
    return failed, live, used


@numba.njit(parallel=True, **_JIT)
def write_rows(raw, offset, area, slots, rows):
    """raw[slots[i], offset: offset + area] = rows[i], zero-padded to ``area`` bytes (the bytes
    above a packed or pair value are zero in both engines). Slots are distinct."""
    given = rows.shape[1]
    for i in numba.prange(slots.shape[0]):
        at = slots[i]
        for j in range(area):
            raw[at, offset + j] = rows[i, j] if j < given else 0


GROUP = 16  # rows whose first lines a lookup touches before probing any of them


@numba.njit(parallel=True, **_JIT)
def lookup(table, overflow, keys, key_bytes, seed, num_buckets, width, empty, tomb, raw,
           offset, default, out, slots):
    """find / find_index in one pass: slots[i] = slot of keys[i] (-1 where absent) and, if
    ``out`` has columns, its value bytes (``default`` where absent): gh_lookup.

    Rows go in groups of GROUP: first each row's b1 line is read, then each row probes, then
    each found row's value line is read, then values are copied. A probe is a chain of
    dependent loads, and one row at a time leaves the CPU one cache miss in flight; the
    untaken reads of a group let it overlap GROUP of them (the pattern of a gather)."""
    size = out.shape[1]
    rows = keys.shape[0]
    for group in numba.prange((rows + GROUP - 1) // GROUP):
        start = group * GROUP
        stop = min(start + GROUP, rows)
        touched = np.int64(0)
        for i in range(start, stop):
            key = keys[i]
            if (key != empty) & (key != tomb):
                touched += table[home(key, key_bytes, seed, num_buckets)[1] * width, 0]
        for i in range(start, stop):
            slots[i] = probe(table, overflow, keys[i], key_bytes, seed, num_buckets, width,
                             empty, tomb, SEARCH)[0]
        if size == 0:
            continue
        for i in range(start, stop):
            if slots[i] >= 0:
                touched += raw[slots[i], offset]
        for i in range(start, stop):
            slot = slots[i]
            for j in range(size):
                out[i, j] = raw[slot, offset + j] if slot >= 0 else default[j]
        if touched == 0x7FFFFFFFFFFFFFFF:  # keeps the touching reads (never true in practice)
            slots[start] = slots[start]


@numba.njit(inline="always", **_JIT)
def _visited_before(h, b1, b2, step, bucket, num_buckets):
    """Whether the key's sequence reached ``bucket`` before ``step`` (gh_visited_before)."""
    earlier = b1
    for j in range(step):
        if earlier == bucket:
            return True
        earlier = next_bucket(h, b2, j, earlier, num_buckets)
    return False


@numba.njit(**_JIT)
def each_match(table, overflow, key, key_bytes, seed, num_buckets, width, empty, tomb, out,
               start):
    """Count the slots holding ``key`` (a multimap's copies), walking as a search does; with
    ``out`` non-empty, also write them from ``out[start]`` on (gh_for_each_match). The
    sentinel keys are never stored in buckets: they match nothing."""
    if (key == empty) | (key == tomb):
        return 0
    h, b1, b2, left_first, left_second = home(key, key_bytes, seed, num_buckets)
    bucket = b1
    found = 0
    for step in range(num_buckets + RANDOM_STEPS + 2):
        again = step > 0 and _visited_before(h, b1, b2, step, bucket, num_buckets)
        room = False
        for lane in range(width):
            word = _key_at(table, bucket * width + lane, key_bytes)
            if word == key and not again:
                if out.shape[0] > 0:
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
    """With ``rows`` empty: offsets[i] = the matches of row i (a count). Otherwise every match
    of row i at offsets[i], offsets[i] + 1, ... (offsets: an exclusive scan of the counts).
    One function for both phases: each parallel loop costs numba a compile of its own."""
    counting = rows.shape[0] == 0
    for i in numba.prange(keys.shape[0]):
        if counting:
            offsets[i] = each_match(table, overflow, keys[i], key_bytes, seed, num_buckets,
                                    width, empty, tomb, slots, 0)
        else:
            found = each_match(table, overflow, keys[i], key_bytes, seed, num_buckets, width,
                               empty, tomb, slots, offsets[i])
            rows[offsets[i]: offsets[i] + found] = i
