"""The CPU engine's probe loop, compiled by numba: the scalar twin of kernels/open_addressing.cuh
(gh_home, gh_next_bucket, gh_probe), one row at a time as one CUDA thread runs it.

Every function takes the table's slot words as stored (``table``: ``TableState.slots``: int64,
one row per slot, the key in the low bytes of its first word), buckets of ``width``
consecutive slots, the two sentinel keys out of band in slots ``num_slots`` and
``num_slots + 1``, and keys as int64 (a 32-bit key sign-extended, as its word's low half is
read). One array type for every table keeps numba to one compile per function, not one per
key width and layout. Reads run in parallel over rows (numba ``prange``); claims run in
parallel passes over parts of the table's buckets, a thread per part, each part's rows in row
order, and the rest in row order on one thread, so no two rows race for a slot, a key's rows
settle in row order (dict semantics) and the result does not depend on the thread count. Compiled
on first use and cached on disk (numba's ``cache=True``; engines/_cpu_runtime.py picks the
directory and serialises calls where numba's threading layer needs it).
"""

from __future__ import annotations

import numba
import numpy as np

RANDOM_STEPS = 64  # kernels/open_addressing.cuh: GH_RANDOM_STEPS
SEARCH, CLAIM, CLAIM_NEW = 0, 1, 3  # gh_probe's modes (GhMode)
CLAIM_AT = 8        # CLAIM_AT + k: claim in the bucket of step k alone (k = 0: GH_CLAIM_B1)
DEFERRED = -3       # CLAIM_AT: not in its bucket, which is full
DEFERRED_HOLE = -4  # CLAIM_AT: as DEFERRED, but the bucket holds an erased slot the key may take
CLAIMED, REUSED = 1, 2  # claim's flags per row: added its key; took an erased slot
GROUP = 16  # rows whose first lines a lookup touches before probing any of them
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
def bucket_at(h, b1, b2, step, num_buckets):
    """The bucket of step ``step`` of a key's sequence, for steps before the linear part."""
    if step == 0:
        return b1
    if step == 1:
        return b2
    return _range(_mix64(h + np.uint64(step)), num_buckets)


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
    first erased slot its walk passed (rows of one key claim one after another, so reusing one
    cannot make two copies) or else the bucket's first EMPTY slot. A SEARCH also stops after a
    full b1 / b2 whose filter bit for the key is clear. CLAIM_AT + k looks at the bucket of
    step k alone (k = 0: every first bucket is filled before any key settles for its second), for a
    key whose earlier buckets were full, without it and without erased slots: it takes the
    bucket's first erased or EMPTY slot, or returns DEFERRED (DEFERRED_HOLE if the bucket holds
    an erased slot); it sets no filter bit (those are other threads' words: the caller sets
    them after its pass). A claim past b1 sets the key's filter bits. Slot -1 / NO_SLOT: none
    found.
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
    first = mode - CLAIM_AT if mode >= CLAIM_AT else 0
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


PART_BUCKETS = 2048  # buckets a part of the parallel claim passes spans (128 KiB of 64-byte
#                     buckets: a part's claims stay in the core's cache)


@numba.njit(**_JIT)
def _partition(keys, rows, count, key_bytes, seed, num_buckets, step, order, keyed, starts):
    """rows[:count] by part of the bucket of their step ``step``, in their given order within
    each part: order[starts[p]:starts[p + 1]] are the rows whose bucket lies in part p, and
    keyed[j] the key of row order[j] (a pass then reads its keys in sequence, not scattered
    over the batch). Parts depend on the table alone, not on the thread count, so neither
    does the result."""
    parts = starts.shape[0] - 1
    part = np.empty(count, np.int32)
    starts[:] = 0
    for j in range(count):
        h, b1, b2, _, _ = home(keys[rows[j]], key_bytes, seed, num_buckets)
        part[j] = bucket_at(h, b1, b2, step, num_buckets) // PART_BUCKETS
        starts[part[j] + 1] += 1
    for p in range(parts):
        starts[p + 1] += starts[p]
    fill = starts.copy()
    for j in range(count):
        order[fill[part[j]]] = rows[j]
        keyed[fill[part[j]]] = keys[rows[j]]
        fill[part[j]] += 1


@numba.njit(**_JIT)
def _settle(table, overflow, key, at, key_bytes, seed, num_buckets, width, empty, tomb, mode,
            slots, flags, last):
    """Probe for the row at position ``at`` of a pass (its key: ``key``) by ``mode``, and
    record the outcome there: slots[at], flags[at] (CLAIMED, REUSED). Rows of one key settle in
    one pass, on one thread, in row order (their positions rise with their rows), so
    ``last[slot]`` ends as the position of the key's last row, whose value stays (dict
    semantics); a row finding a key an earlier row of the pass claimed takes over its mark, so
    the last row of a new key is the one marked, as the CUDA engine marks it. ``last`` holds
    other values at slots this pass did not reach: a claim is recognised by the pass's own
    record at the position pointing back at the slot."""
    slot, new, hole = probe(table, overflow, key, key_bytes, seed, num_buckets, width, empty,
                            tomb, mode)
    slots[at] = slot
    if slot < 0:
        return
    if new:
        flags[at] = CLAIMED | (REUSED if hole else 0)
    elif mode != CLAIM_NEW:
        r = last[slot]
        if 0 <= r < at and slots[r] == slot and flags[r] & CLAIMED:
            flags[at], flags[r] = flags[r], 0
    last[slot] = at


@numba.njit(parallel=True, **_JIT)
def _settle_parts(table, overflow, keyed, key_bytes, seed, num_buckets, width, empty, tomb,
                  mode, starts, slots, flags, last):
    """A parallel claim pass over positions in part order, a thread per part. A pass claims in
    the bucket of one step of each row's sequence (``mode``: CLAIM_AT + step) and a part's
    rows' buckets are its own: no two threads write one bucket."""
    for p in numba.prange(starts.shape[0] - 1):
        for j in range(starts[p], starts[p + 1]):
            _settle(table, overflow, keyed[j], j, key_bytes, seed, num_buckets, width, empty,
                    tomb, mode, slots, flags, last)


@numba.njit(parallel=True, **_JIT)
def _finish_parts(order, starts, pass_slots, pass_flags, last, slots, flags):
    """After a parallel pass: its outcomes back in row order, and ``last`` at each slot the
    pass reached rewritten from the winning position to -2 - its row (rows and positions then
    never meet: positions are not negative). Kept apart from the pass because outcome stores
    scattered over the batch, interleaved with the probes, ran the pass three times slower."""
    for p in numba.prange(starts.shape[0] - 1):
        for j in range(starts[p], starts[p + 1]):
            i = order[j]
            slot = pass_slots[j]
            slots[i] = slot
            flags[i] = pass_flags[j]
            if slot >= 0 and last[slot] == j:
                last[slot] = -2 - i


PARALLEL_STEPS = 6  # steps of the sequence claimed by parallel passes before the walk


@numba.njit(**_JIT)
def claim(table, overflow, keys, key_bytes, seed, num_buckets, width, empty, tomb, multi,
          slots, flags, last):
    """Find or claim a slot for every row: slots[i], flags[i] (CLAIMED: the row added its key;
    REUSED: in an erased slot), and last[slot] = -2 - the last row that reached the slot
    (write_rows stores that row's value). A map's rows settle in three passes, each keeping
    row order among the rows of a key (the last row's value stays; the last row of a new key
    is marked): PARALLEL_STEPS passes in parallel by part, pass k claiming in the bucket of
    step k of each row's sequence for the rows whose earlier buckets were full (first buckets
    fill before any key settles for its second), then the rest (rows that met an erased slot
    in a full bucket, those still waiting, the sentinel keys) walking on in row order on one
    thread. A multimap's rows each
    claim a new copy, in row order. Returns (the first row that found no slot or -1, new
    entries, new bucket slots used: a sentinel key or a reused erased slot uses none). A row
    that finds no slot makes the call give back every claim it made: the table is unchanged
    but for filter bits, which only cost a search one more bucket."""
    rows = keys.shape[0]
    num_slots = num_buckets * width
    failed = -1
    if not multi:
        parts = (num_buckets + PART_BUCKETS - 1) // PART_BUCKETS
        order = np.empty(rows, np.int64)
        keyed = np.empty(rows, np.int64)
        pass_slots = np.empty(rows, np.int64)
        pass_flags = np.empty(rows, np.uint8)
        starts = np.empty(parts + 1, np.int64)
        waiting = np.empty(rows, np.int64)  # rows for the next pass
        count = 0
        for i in range(rows):
            if (keys[i] != empty) & (keys[i] != tomb):
                waiting[count] = i
                count += 1
        step = 0
        while step < PARALLEL_STEPS and count > 0:
            _partition(keys, waiting, count, key_bytes, seed, num_buckets, step, order, keyed,
                       starts)
            pass_flags[:count] = 0
            _settle_parts(table, overflow, keyed, key_bytes, seed, num_buckets, width, empty,
                          tomb, CLAIM_AT + step, starts, pass_slots, pass_flags, last)
            _finish_parts(order, starts, pass_slots, pass_flags, last, slots, flags)
            settled, count = count, 0
            for j in range(settled):  # filter bits of keys settled past b1; rows still waiting
                if pass_slots[j] >= 0 and step >= 1:
                    _, _, _, left_first, left_second = home(keyed[j], key_bytes, seed,
                                                            num_buckets)
                    _mark(overflow, left_first)
                    if step >= 2:
                        _mark(overflow, left_second)
                elif pass_slots[j] == DEFERRED:
                    waiting[count] = order[j]
                    count += 1
            step += 1
    # the rest in row order, their positions being their rows: every multimap row; a map's
    # deferred rows and sentinel keys
    rest = np.empty(rows, np.int64)
    count = 0
    for i in range(rows):
        if multi or slots[i] < 0:
            rest[count] = i
            count += 1
    mode = CLAIM_NEW if multi else CLAIM
    for j in range(count):
        i = rest[j]
        flags[i] = 0
        _settle(table, overflow, keys[i], i, key_bytes, seed, num_buckets, width, empty, tomb,
                mode, slots, flags, last)
        if slots[i] == NO_SLOT:
            failed = i
            break
    for j in range(count):
        i = rest[j]
        if slots[i] >= 0 and last[slots[i]] == i:
            last[slots[i]] = -2 - i
    live, used = 0, 0
    for i in range(rows):
        if not flags[i] & CLAIMED:
            continue
        out_of_band = slots[i] >= num_slots
        if failed >= 0:  # give it back: EMPTY, erased, or an out-of-band slot's absent marker
            marker = tomb if flags[i] & REUSED else empty
            if out_of_band:
                marker = tomb if slots[i] == num_slots else empty
            _set_key(table, slots[i], key_bytes, marker)
        live += 1
        used += not (out_of_band or flags[i] & REUSED)
    return failed, live, used


@numba.njit(parallel=True, **_JIT)
def write_rows(raw, offset, area, slots, rows, last):
    """raw[slots[i], offset: offset + area] = rows[i], zero-padded to ``area`` bytes (the bytes
    above a packed or pair value are zero in both engines), for the rows i with
    last[slots[i]] == -2 - i (claim's record; every row if ``last`` is empty: distinct
    slots)."""
    given = rows.shape[1]
    everyone = last.shape[0] == 0
    for i in numba.prange(slots.shape[0]):
        at = slots[i]
        if everyone or last[at] == -2 - i:
            for j in range(area):
                raw[at, offset + j] = rows[i, j] if j < given else 0




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
