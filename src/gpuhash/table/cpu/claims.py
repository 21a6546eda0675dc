"""The CPU engine's claims, compiled by numba: a batch's keys placed in the table and their
values written as they settle (the twin of table/kernels/map.cu's insert), over the probe loop
of _common/cpu/probe.py.

No two threads may write one bucket, and a key's rows must settle in row order (the last row's
value stays, the last row of a new key is marked: dict semantics) whatever the thread count.
So a large batch of a map settles in passes, pass k placing each waiting row in the bucket of
step k of its sequence alone (first buckets fill before any key settles for its second, as
the CUDA engine's first pass does): its rows are partitioned by part of the table's buckets
(a stable radix scatter, keys and rows moved together), each part's rows settle in order on
one thread, and a part's buckets are its own. Rows of one key meet in one part of one pass, in
row order. A multimap's rows (each a new copy, EMPTY slots only) settle by the same passes.
What is left after PARALLEL_STEPS passes (rows that met an erased slot in a full bucket, rows
still waiting, the two sentinel keys) and small batches walk on one thread in row order.

Values are written where a row settles, by the thread that owns its bucket: a later row of a
key overwrites an earlier one, which is the dict semantics, and no pass over the batch
afterwards scatters them.
"""

from __future__ import annotations

import numba
import numpy as np

from gpuhash._common.cpu.probe import (
    CLAIM,
    CLAIM_AT,
    CLAIM_NEW,
    CLAIM_NEW_AT,
    DEFERRED,
    GROUP,
    NO_SLOT,
    SEARCH,
    bucket_at,
    home,
    new_copy,
    pass_step,
    probe,
)
from gpuhash._common.cpu.probe import _mark as mark_filter_bit
from gpuhash._common.cpu.probe import _set_key as set_key

CLAIMED, REUSED = 1, 2  # flags per row: added its key; took an erased slot
PART_BUCKETS = 2048     # buckets a part spans: 128 KiB of 64-byte buckets stay in a core's cache
PARALLEL_STEPS = 16     # steps of the sequence claimed by parallel passes before the walk
# a pass's mode, CLAIM_AT + step or CLAIM_NEW_AT + step, must name one mode
assert CLAIM_AT + PARALLEL_STEPS <= CLAIM_NEW_AT
SERIAL_ROWS = 1 << 14   # smaller batches walk on one thread: partitioning them costs more
CHUNK_ROWS = 1 << 16    # rows a thread partitions at a time (chunks keep the scatter stable)
ROWS_PER_THREAD = 1 << 12  # the fewest rows of a pass worth another thread
SWEEP_ROWS = 4          # a part with a row for 1 in SWEEP_ROWS of its buckets reads them all
_JIT = {"cache": True, "nogil": True}
# The parallel passes inline the probe (the same source, compiled into the pass: a call per row
# costs the pass a good share of its time); everything else calls it, which compiles faster.
_probe_inline = numba.njit(inline="always", **_JIT)(probe.py_func)


def _ranges(items: int, rows: int) -> np.ndarray:
    """[0, items) split into one contiguous range per thread (bounds[t]: bounds[t + 1]) for a
    pass over ``rows`` rows: numba's thread count at most (NUMBA_NUM_THREADS and
    numba.set_num_threads govern it; the claims' results do not depend on it), and at least
    ROWS_PER_THREAD rows a thread."""
    threads = max(1, min(numba.get_num_threads(), items, rows // ROWS_PER_THREAD))
    return np.array([items * t // threads for t in range(threads + 1)], np.int64)


@numba.njit(inline="always", **_JIT)
def _store_value(raw, slot, offset, area, values, row):
    """raw[slot, offset: offset + area] = values[row], zero-padded (the bytes above a packed or
    pair value are zero in both engines); nothing for a table without values."""
    given = min(values.shape[1], area)
    for j in range(given):
        raw[slot, offset + j] = values[row, j]
    for j in range(given, area):
        raw[slot, offset + j] = 0


@numba.njit(inline="always", **_JIT)
def _settle(table, overflow, key, at, walk, mode, slots, flags, last, base, first, raw,
            offset, area, values, row, locate):
    """Probe for the row at position ``at`` (its key ``key``, its batch row ``row``) by
    ``mode``, record the outcome there (slots[at], flags[at]) and, if it settled, write its
    value. Rows of one key settle one after another, positions rising with their rows, so
    ``last[slot - base]`` ends as the key's last row's position less ``first`` (the first
    position of the run of rows sharing ``last``); a row finding a key an earlier row claimed
    takes over its mark, so the last row of a new key is the one marked, as the CUDA engine
    marks it. ``last`` holds other values at slots not reached since it was last
    reset: a claim is recognised by the record at the position pointing back at the slot."""
    key_bytes, seed, num_buckets, width, empty, tomb = walk
    slot, new, hole = locate(table, overflow, key, key_bytes, seed, num_buckets, width, empty,
                             tomb, mode)
    slots[at] = slot
    if slot < 0:
        return
    if new:
        flags[at] = CLAIMED | (REUSED if hole else 0)
    elif not new_copy(mode):
        r = first + last[slot - base]
        if first <= r < at and slots[r] == slot and flags[r] & CLAIMED:
            flags[at], flags[r] = flags[r], 0
    last[slot - base] = at - first
    if area > 0:
        _store_value(raw, slot, offset, area, values, row)


@numba.njit(**_JIT)
def _count_parts(keys_in, count, walk, step, chunk_from, chunk_to, part, fill):
    """For chunks [chunk_from, chunk_to) of keys_in[:count]: part[j], the part of the bucket of
    step ``step`` of each key (-1 for the two sentinel keys, left out), and fill[c, p], how
    many of chunk c's keys lie in part p."""
    key_bytes, seed, num_buckets, empty, tomb = walk[0], walk[1], walk[2], walk[4], walk[5]
    for c in range(chunk_from, chunk_to):
        for j in range(c * CHUNK_ROWS, min(count, (c + 1) * CHUNK_ROWS)):
            key = keys_in[j]
            if (key == empty) | (key == tomb):
                part[j] = -1
                continue
            h, b1, b2, _, _ = home(key, key_bytes, seed, num_buckets)
            p = bucket_at(h, b1, b2, step, num_buckets) // PART_BUCKETS
            part[j] = p
            fill[c, p] += 1


@numba.njit(**_JIT)
def _part_starts(fill, starts):
    """Each chunk's first position in each part (part-major, then chunk order: the scatter is
    stable) in place of its count, and each part's first position in starts."""
    chunks, parts = fill.shape
    total = 0
    for p in range(parts):
        starts[p] = total
        for c in range(chunks):
            total, fill[c, p] = total + fill[c, p], total
    starts[parts] = total


@numba.njit(**_JIT)
def _scatter_parts(keys_in, rows_in, count, chunk_from, chunk_to, part, fill, keys_out,
                   rows_out):
    """Chunks [chunk_from, chunk_to) of keys_in[:count] and their rows (rows_in, or the
    positions if rows_in is empty) to their positions by part, each chunk into its own range."""
    positions = rows_in.shape[0] == 0
    for c in range(chunk_from, chunk_to):
        for j in range(c * CHUNK_ROWS, min(count, (c + 1) * CHUNK_ROWS)):
            p = part[j]
            if p < 0:
                continue
            at = fill[c, p]
            keys_out[at] = keys_in[j]
            rows_out[at] = j if positions else rows_in[j]
            fill[c, p] = at + 1


def _partition(keys_in, rows_in, count, walk, step, keys_out, rows_out, starts):
    """keys_in[:count] and their rows (rows_in[:count], or the positions if rows_in is empty)
    scattered by part of the bucket of their step ``step``, stably, leaving out the two
    sentinel keys: positions starts[p]: starts[p + 1] of keys_out / rows_out are part p's, in
    their given order. Chunks of rows count and scatter in parallel, by thread ranges; the parts
    depend on the table alone, so the result does not depend on the thread count."""
    chunks = (count + CHUNK_ROWS - 1) // CHUNK_ROWS
    part = np.empty(count, np.int32)
    fill = np.zeros((chunks, starts.shape[0] - 1), np.int64)
    bounds = _ranges(chunks, count)
    _count_in_parallel(keys_in, count, walk, step, bounds, part, fill)
    _part_starts(fill, starts)
    _scatter_in_parallel(keys_in, rows_in, count, bounds, part, fill, keys_out, rows_out)


# Each parallel loop below runs one compiled call per thread range on numba's pool: a loop
# body of one call keeps numba's parallel compile small (parallel loops with the work in
# their bodies compile markedly slower from a cold cache), and numba's pool ran the claims
# faster than a Python thread pool, whose dispatch holds the GIL once a thread a call.
@numba.njit(parallel=True, **_JIT)
def _count_in_parallel(keys_in, count, walk, step, bounds, part, fill):
    for t in numba.prange(bounds.shape[0] - 1):
        _count_parts(keys_in, count, walk, step, bounds[t], bounds[t + 1], part, fill)


@numba.njit(parallel=True, **_JIT)
def _scatter_in_parallel(keys_in, rows_in, count, bounds, part, fill, keys_out, rows_out):
    for t in numba.prange(bounds.shape[0] - 1):
        _scatter_parts(keys_in, rows_in, count, bounds[t], bounds[t + 1], part, fill, keys_out,
                       rows_out)


@numba.njit(**_JIT)
def _settle_parts(table, overflow, keyed, rowed, walk, mode, starts, slots, flags, raw, offset,
                  area, values, part_from, part_to, kept):
    """A pass over the positions of parts [part_from, part_to), on one thread of a parallel pass
    (no other thread has these parts): each row claims (or finds its key) in the bucket of the
    pass's step (``mode``: CLAIM_AT + step, or CLAIM_NEW_AT + step for a multimap's new
    copies), which lies in its part, and writes its value
    there. A part's rows touch its buckets about once each (a
    cache miss each) and lie scattered over the batch. So a part with rows for most of its
    buckets has its lines read in order first (the hardware prefetches them), one with few
    has the bucket line of each of a group of GROUP rows read before any of them settles, and
    the rows' values are read that way too: their misses overlap. The reads' sums go to
    kept[p] so the compiler keeps them."""
    key_bytes, seed, num_buckets, width = walk[0], walk[1], walk[2], walk[3]
    step = pass_step(mode)
    reading = values.shape[1] > 0 and area > 0
    for p in range(part_from, part_to):
        touched = np.int64(0)
        first, end = starts[p], starts[p + 1]
        low = p * PART_BUCKETS
        high = min(low + PART_BUCKETS, num_buckets)
        last = np.empty((high - low) * width, np.int32)  # the part's own: stays in cache
        sweep = (end - first) * SWEEP_ROWS >= high - low
        if sweep:  # most of the part's lines will be touched: read them all in order first
            for bucket in range(low, high):
                touched += table[bucket * width, 0]
        for start in range(first, end, GROUP):
            stop = min(start + GROUP, end)
            for j in range(start, stop):
                if not sweep:
                    h, b1, b2, _, _ = home(keyed[j], key_bytes, seed, num_buckets)
                    touched += table[bucket_at(h, b1, b2, step, num_buckets) * width, 0]
                if reading:
                    touched += np.int64(values[rowed[j], 0])
            for j in range(start, stop):
                _settle(table, overflow, keyed[j], j, walk, mode, slots, flags, last,
                        low * width, first, raw, offset, area, values, rowed[j], _probe_inline)
        kept[p] = touched


@numba.njit(parallel=True, **_JIT)
def _settle_in_parallel(table, overflow, keyed, rowed, walk, mode, starts, slots, flags, raw,
                        offset, area, values, bounds, kept):
    """_settle_parts over the part ranges bounds[t]: bounds[t + 1], one per thread."""
    for t in numba.prange(bounds.shape[0] - 1):
        _settle_parts(table, overflow, keyed, rowed, walk, mode, starts, slots, flags, raw,
                      offset, area, values, bounds[t], bounds[t + 1], kept)


@numba.njit(**_JIT)
def _write_back(rowed, pass_slots, pass_flags, slots, flags, low, high):
    """Positions [low, high) of a pass: their outcomes back in row order (flags; slots only if
    asked for: they cost a scattered store a row). Kept out of the pass, where stores scattered
    over the batch between the probes ran it far slower."""
    want_slots = slots.shape[0] > 0
    for j in range(low, high):
        flags[rowed[j]] = pass_flags[j]
        if want_slots:
            slots[rowed[j]] = pass_slots[j]


@numba.njit(parallel=True, **_JIT)
def _write_back_in_parallel(rowed, pass_slots, pass_flags, slots, flags, bounds):
    for t in numba.prange(bounds.shape[0] - 1):
        _write_back(rowed, pass_slots, pass_flags, slots, flags, bounds[t], bounds[t + 1])


@numba.njit(**_JIT)
def _after_pass(overflow, keyed, rowed, settled, walk, step, pass_slots, waiting_keys,
                waiting_rows, rest, aside):
    """After the pass of step ``step`` over ``settled`` positions: the filter bits of keys it
    settled past b1 (shared words: set here, not in the pass), the rows still waiting back in
    waiting_keys / waiting_rows and the rows that met an erased slot their key may take
    appended to rest[aside:], for the walk, both in their order. One thread: parallel chunks
    were no faster. Returns (waiting, aside)."""
    key_bytes, seed, num_buckets = walk[0], walk[1], walk[2]
    waiting = 0
    for j in range(settled):
        if pass_slots[j] >= 0:
            if step >= 1:
                _, _, _, left_first, left_second = home(keyed[j], key_bytes, seed, num_buckets)
                mark_filter_bit(overflow, left_first)
                if step >= 2:
                    mark_filter_bit(overflow, left_second)
        elif pass_slots[j] == DEFERRED:
            waiting_keys[waiting], waiting_rows[waiting] = keyed[j], rowed[j]
            waiting += 1
        else:  # DEFERRED_HOLE
            rest[aside] = rowed[j]
            aside += 1
    return waiting, aside


def _parallel_passes(table, overflow, keys, walk, multi, slots, flags, raw, offset, area,
                     values, rest):
    """A map's rows (not the sentinel keys; with ``multi``, a multimap's, each a new copy)
    settled by PARALLEL_STEPS parallel passes. Returns
    how many rows went on to rest[:count] (rows still waiting or that met an erased slot in a
    full bucket), in an order keeping each key's rows in row order. Driven from Python: a
    cached compiled function that calls a parallel one crashes when loaded from numba's cache
    (a known numba bug: numba/numba#8578)."""
    rows = keys.shape[0]
    parts = (walk[2] + PART_BUCKETS - 1) // PART_BUCKETS
    waiting_keys, waiting_rows = np.empty(rows, np.int64), np.empty(rows, np.int64)
    keyed, rowed = np.empty(rows, np.int64), np.empty(rows, np.int64)
    pass_slots = np.empty(rows, np.int64)
    pass_flags = np.empty(rows, np.uint8)
    starts = np.empty(parts + 1, np.int64)
    kept = np.empty(parts, np.int64)
    count, aside = rows, 0
    for step in range(PARALLEL_STEPS):
        if count == 0:
            break
        if step == 0:  # the batch itself, rows being positions
            _partition(keys, np.empty(0, np.int64), rows, walk, 0, keyed, rowed, starts)
        else:
            _partition(waiting_keys, waiting_rows, count, walk, step, keyed, rowed, starts)
        count = starts[-1]
        pass_flags[:count] = 0
        _settle_in_parallel(table, overflow, keyed, rowed, walk,
                            (CLAIM_NEW_AT if multi else CLAIM_AT) + step, starts,
                            pass_slots, pass_flags, raw, offset, area, values,
                            _ranges(parts, count), kept)
        _write_back_in_parallel(rowed, pass_slots, pass_flags, slots, flags,
                                _ranges(count, count))
        count, aside = _after_pass(overflow, keyed, rowed, count, walk, step, pass_slots,
                                   waiting_keys, waiting_rows, rest, aside)
    rest[aside: aside + count] = waiting_rows[:count]
    return aside + count


def claim(table, overflow, keys, key_bytes, seed, num_buckets, width, empty, tomb, multi,
          raw, offset, area, values, slots, flags):
    """Find or claim a slot for every row and write its value bytes (``values`` without
    columns: zeros; nothing if ``area`` is 0): flags[i] (CLAIMED: the row added its key;
    REUSED: in an erased slot) and, if ``slots`` is not empty, slots[i].
    A multimap's rows each claim a new copy. Returns (the first row that found no slot or -1,
    new entries, new bucket slots used: a sentinel key or a reused erased slot uses none). A row
    that finds no slot makes the call give back every claim it made; values it wrote to keys
    already present stay. Only a table whose counters lie about its use gets there: the room
    check before the call ensures a slot for every new key."""
    walk = (key_bytes, seed, num_buckets, width, empty, tomb)
    rows = keys.shape[0]
    if multi and slots.shape[0] == 0:  # a give-back finds a multimap's copies by their slots
        slots = np.empty(rows, np.int64)
    if rows < SERIAL_ROWS:
        rest, count = np.arange(rows, dtype=np.int64), rows
    else:
        rest = np.empty(rows, np.int64)
        count = _parallel_passes(table, overflow, keys, walk, multi, slots, flags, raw, offset,
                                 area, values, rest)
        sentinels = np.flatnonzero((keys == empty) | (keys == tomb))
        rest[count: count + sentinels.shape[0]] = sentinels
        count += sentinels.shape[0]
        rest[:count].sort()
    return _walk(table, overflow, keys, walk, multi, raw, offset, area, values, slots, flags,
                 rest[:count])


@numba.njit(**_JIT)
def _walk(table, overflow, keys, walk, multi, raw, offset, area, values, slots, flags, rest):
    """The rows of ``rest`` (in row order) on one thread, at positions of their own rising with
    their rows: a small batch, or what the passes left. Then the counts and, if a row found
    no slot, the give-back (see claim)."""
    key_bytes, seed, num_buckets, width, empty, tomb = walk
    rows = keys.shape[0]
    num_slots = num_buckets * width
    count = rest.shape[0]
    last = np.empty(num_slots + 2, np.int64)  # untouched pages cost nothing: see _settle
    walk_slots = np.empty(count, np.int64)
    walk_flags = np.zeros(count, np.uint8)
    mode = CLAIM_NEW if multi else CLAIM
    failed = -1
    for j in range(count):
        i = rest[j]
        _settle(table, overflow, keys[i], j, walk, mode, walk_slots, walk_flags, last, 0, 0,
                raw, offset, area, values, i, probe)
        if walk_slots[j] == NO_SLOT:
            failed = i
            break
    for j in range(count):
        flags[rest[j]] = walk_flags[j]
        if slots.shape[0] > 0:
            slots[rest[j]] = walk_slots[j]
    live, used = 0, 0
    for i in range(rows):
        if not flags[i] & CLAIMED:
            continue
        sentinel = (keys[i] == empty) | (keys[i] == tomb)
        live += 1
        used += not (sentinel or flags[i] & REUSED)
    if failed >= 0:  # give back every claim: EMPTY, erased, or an out-of-band slot's marker
        for i in range(rows if multi else 0):  # a multimap's copies, by their recorded slots
            if flags[i] & CLAIMED:  # (the passes' and the walk's: claim keeps every slot)
                _give_back(table, slots[i], keys[i], walk, flags[i])
        if not multi:  # a map's keys, one copy each: all found by a search before any goes
            claimed = np.flatnonzero(flags & CLAIMED)  # (a freed slot ends later searches)
            found = np.empty(claimed.shape[0], np.int64)
            for j in range(claimed.shape[0]):
                found[j] = probe(table, overflow, keys[claimed[j]], key_bytes, seed,
                                 num_buckets, width, empty, tomb, np.int64(SEARCH))[0]
            for j in range(claimed.shape[0]):
                i = claimed[j]
                _give_back(table, found[j], keys[i], walk, flags[i])
    return failed, live, used


@numba.njit(**_JIT)
def _give_back(table, slot, key, walk, flag):
    """Undo the claim of ``slot`` for ``key``: EMPTY again, erased again if it was, or an
    out-of-band slot absent again (it holds the other sentinel)."""
    key_bytes, _, num_buckets, width, empty, tomb = walk
    marker = tomb if flag & REUSED else empty
    if (key == empty) | (key == tomb):
        marker = tomb if slot == num_buckets * width else empty
    set_key(table, slot, key_bytes, marker)


@numba.njit(**_JIT)
def write_rows(raw, offset, area, slots, values):
    """raw[slots[i], offset: offset + area] = values[i], zero-padded, for distinct slots."""
    for i in range(slots.shape[0]):
        _store_value(raw, slots[i], offset, area, values, i)
