"""The CPU engine's loops for CacheMap, compiled by numba: the scalar twin of
cache/kernels/cache.cuh, one row at a time as one CUDA thread runs it, over the bytes
cache/format.py describes.

Arrays arrive as NumPy views: keys and scores as uint64, digests as uint8, value rows as uint8
``(slots, value_bytes)``. A write runs in the CUDA engine's two passes (its two launches):
every row that finds its key or a free slot, then the rows whose two buckets were full, each
pass in row order on one thread; so the outcome is the sequential one the CUDA engine's racing
rows approximate (which slot a new key takes, which of two equal lowest scores goes, may
differ there; what each row reports may not). Near the relocation limit the two may also
differ in whether a row moves an entry or evicts: here the count is read before each row,
there once per warp of the evict launch, by every resident warp about together.
"""

from __future__ import annotations

import numba
import numpy as np

from gpuhash._common.constants import CACHE_STATUSES, POLICY_CODES, WRITE_MODES
from gpuhash._common.cpu.probe import _range, mix64

# score policies, write modes and row statuses: the kernels' codes (constants.py)
LRU, LFU, EPOCH_LRU, EPOCH_LFU, CUSTOM = (POLICY_CODES[name] for name in POLICY_CODES)
UPSERT, FIND_OR_INSERT, ASSIGN, ACCUMULATE = (WRITE_MODES[name] for name in WRITE_MODES)
INSERTED, ASSIGNED, INSERTED_EVICTING, REFUSED, SKIPPED, SUPERSEDED, _TO_EVICT = (
    CACHE_STATUSES[name] for name in CACHE_STATUSES)  # _TO_EVICT: within cache_write only

_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_RESERVED = np.uint64(0xFFFFFFFFFFFFFFFE)  # this and _EMPTY: no entry may hold them
_M32 = np.uint64(0xFFFFFFFF)
_JIT = {"cache": True, "nogil": True}


@numba.njit(inline="always", **_JIT)
def cache_home(key, seed, num_buckets):
    """(b1, b2, digest) of a key: the core's two buckets, and 8 bits of a second mix of its
    hash (bits no bucket choice uses), never 0 (the digest of a free slot)."""
    h = mix64(key ^ seed)
    digest = np.uint8(mix64(h) >> np.uint64(56))
    if digest == 0:
        digest = np.uint8(1)
    return _range(h, num_buckets), _range(h >> np.uint64(32), num_buckets), digest


@numba.njit(inline="always", **_JIT)
def _in_bucket(keys, digests, width, bucket, key, digest):
    base = bucket * width
    for lane in range(width):
        if digests[base + lane] == digest and keys[base + lane] == key:
            return base + lane
    return -1


@numba.njit(inline="always", **_JIT)
def locate(keys, digests, width, b1, b2, key, digest):
    """The slot holding key among its two buckets, -1 if none."""
    slot = _in_bucket(keys, digests, width, b1, key, digest)
    if slot < 0 and b2 != b1:
        slot = _in_bucket(keys, digests, width, b2, key, digest)
    return slot


@numba.njit(inline="always", **_JIT)
def _slot_of(keys, digests, width, num_buckets, seed, key):
    """The slot holding key, -1 if none (always -1 for the two reserved keys)."""
    if key >= _RESERVED:
        return -1
    b1, b2, digest = cache_home(key, seed, num_buckets)
    return locate(keys, digests, width, b1, b2, key, digest)


@numba.njit(inline="always", **_JIT)
def _first_free(digests, width, bucket):
    """(first free slot, free slots) of a bucket."""
    base = bucket * width
    first, free = -1, 0
    for lane in range(width - 1, -1, -1):
        if digests[base + lane] == 0:
            first = base + lane
            free += 1
    return first, free


@numba.njit(inline="always", **_JIT)
def _lowest(scores, pins, width, bucket, best, best_score):
    """The lowest score of a bucket's unlocked slots against (best, best_score) so far
    (best -1: none yet), the earlier slot on a tie."""
    base = bucket * width
    for lane in range(width):
        if pins[base + lane]:
            continue
        if best < 0 or scores[base + lane] < best_score:
            best, best_score = base + lane, scores[base + lane]
    return best, best_score


@numba.njit(inline="always", **_JIT)
def new_score(policy, old, present, has, given, step, epoch):
    """A key's score after this call touched it (present: it was in the table); ``has``: the
    caller gave ``given``, the score itself (lru, epoch_lru, custom) or the count to add (lfu,
    epoch_lfu; else 1). Counts saturate; epoch_lfu's goes on across epochs."""
    count = given if has else np.uint64(1)
    if policy == LRU:
        return given if has else step
    if policy == LFU:
        if not present:
            return count
        return _EMPTY if old > _EMPTY - count else old + count
    if policy == EPOCH_LRU:
        return given if has else (epoch << np.uint64(32)) | (step & _M32)
    if policy == EPOCH_LFU:
        low = count & _M32
        if present:
            low = min(low + (old & _M32), _M32)
        return (epoch << np.uint64(32)) | low
    return given


@numba.njit(inline="always", **_JIT)
def admission_score(policy, score):
    """What an absent key's score competes with when its buckets are full: under lfu the
    highest, so a new key always replaces the least frequent entry."""
    return _EMPTY if policy == LFU else score


@numba.njit(inline="always", **_JIT)
def _movable(keys, digests, pins, width, num_buckets, seed, b1, b2, digest):
    """(slot of an entry of b1 or b2 that can move to its other bucket, the free slot it would
    take there), or (-1, -1): of 16 candidates a bucket (locked ones left out), the one whose
    other bucket has the most free slots, the earliest on a tie (cache/format.py)."""
    step = width // 16
    offset = np.int64(digest) % step
    best, target, most = -1, -1, 0
    for which in range(2 if b2 != b1 else 1):
        bucket = b2 if which else b1
        for i in range(16):
            slot = bucket * width + i * step + offset
            if pins[slot]:
                continue
            c1, c2, _ = cache_home(keys[slot], seed, num_buckets)
            if c1 == c2:
                continue
            first, free = _first_free(digests, width, c2 if bucket == c1 else c1)
            if free > most:
                best, target, most = slot, first, free
    return best, target


@numba.njit(inline="always", **_JIT)
def _place(keys, digests, scores, values, counts, pins, width, num_buckets, seed, limit, b1,
           b2, key, digest, score, admission, row, ev_keys, ev_values, ev_scores, evicted,
           may_evict):
    """Put an absent key in a free slot of b1 or b2, or (``may_evict``) in a slot an entry
    left for its other bucket (below ``limit`` entries), or in place of their lowest score.
    ``admission`` is what the key's score competes with (admission_score).
    Returns (slot or -1, status: _TO_EVICT where both buckets are full and not
    ``may_evict``); the evicted entry goes to ev_* when they have room."""
    free1, count1 = _first_free(digests, width, b1)
    free2, count2 = _first_free(digests, width, b2)
    slot, status = free1, INSERTED
    if count2 > count1:
        slot = free2
    if slot < 0 and not may_evict:
        return -1, _TO_EVICT
    if slot < 0 and counts[0] < limit:
        slot, target = _movable(keys, digests, pins, width, num_buckets, seed, b1, b2,
                                digest)
        if slot >= 0:
            keys[target] = keys[slot]
            digests[target] = digests[slot]
            scores[target] = scores[slot]
            values[target, :] = values[slot, :]
    if slot < 0:
        slot, lowest = _lowest(scores, pins, width, b1, -1, np.uint64(0))
        if b2 != b1:
            slot, lowest = _lowest(scores, pins, width, b2, slot, lowest)
        if slot < 0 or admission < lowest:  # every slot locked, or the key scores below
            return -1, REFUSED
        status = INSERTED_EVICTING
        at = evicted[0]
        if at < ev_keys.shape[0]:
            ev_keys[at] = keys[slot]
            ev_scores[at] = scores[slot]
            ev_values[at, :] = values[slot, :]
        evicted[0] = at + 1
    else:
        counts[0] += 1
    keys[slot] = key
    digests[slot] = digest
    scores[slot] = score
    values[slot, :] = row
    return slot, status


@numba.njit(**_JIT)
def cache_write(keys, digests, scores, values, counts, width, num_buckets, seed, limit, policy,
                step, epoch, mode, rows, acting, accumulate, has_given, given, in_values,
                value_stride,
                has_values, status, index, found, out, copy_out, ev_keys, ev_values, ev_scores,
                evicted, pins):
    """Apply each acting row of a write (mode UPSERT, FIND_OR_INSERT, ASSIGN or ACCUMULATE) in
    two passes, as the CUDA engine's two launches (cache/kernels/cache.cu): first every row in row
    order finds its key or takes a free slot, then the rows whose two buckets were full move
    an entry or evict, in row order; so every row sees its key as it was before the call's
    evictions. status / index / found per acting row, and with ``copy_out`` its value as it
    found it, else its own. in_values row r is read at r * value_stride (0: one row for all).
    ACCUMULATE rows with accumulate[r] set only locate their key (the caller adds to the
    value) and are SKIPPED when it is absent; the other rows insert an absent key and are
    SKIPPED, the entry untouched, when it is present (HierarchicalKV's accum_or_assign)."""
    for r in range(rows.shape[0]):
        if not acting[r]:
            status[r] = SUPERSEDED
            index[r] = -1
            found[r] = False
            continue
        key = rows[r]
        mine = in_values[r * value_stride, :]
        if copy_out:
            out[r, :] = mine
        if key >= _RESERVED:
            status[r] = REFUSED
            index[r] = -1
            found[r] = False
            continue
        b1, b2, digest = cache_home(key, seed, num_buckets)
        slot = locate(keys, digests, width, b1, b2, key, digest)
        present = slot >= 0
        found[r] = present
        if present:
            if copy_out:
                out[r, :] = values[slot, :]
            index[r] = slot
            if mode == ACCUMULATE and not accumulate[r]:  # an assigning row leaves it be
                status[r] = SKIPPED
                continue
            scores[slot] = new_score(policy, scores[slot], True, has_given, given[r], step,
                                     epoch)
            if has_values and mode != FIND_OR_INSERT and mode != ACCUMULATE:
                values[slot, :] = mine
            status[r] = ASSIGNED
            continue
        if mode == ASSIGN or (mode == ACCUMULATE and accumulate[r]):
            status[r] = SKIPPED
            index[r] = -1
            continue
        score = new_score(policy, np.uint64(0), False, has_given, given[r], step, epoch)
        slot, status[r] = _place(keys, digests, scores, values, counts, pins, width,
                                 num_buckets, seed, limit, b1, b2, key, digest, score,
                                 admission_score(policy, score), mine, ev_keys, ev_values,
                                 ev_scores, evicted, False)
        index[r] = slot
    for r in range(rows.shape[0]):
        if status[r] != _TO_EVICT:
            continue
        key = rows[r]
        b1, b2, digest = cache_home(key, seed, num_buckets)
        score = new_score(policy, np.uint64(0), False, has_given, given[r], step, epoch)
        slot, status[r] = _place(keys, digests, scores, values, counts, pins, width,
                                 num_buckets, seed, limit, b1, b2, key, digest, score,
                                 admission_score(policy, score), in_values[r * value_stride, :],
                                 ev_keys, ev_values, ev_scores, evicted, True)
        index[r] = slot


@numba.njit(**_JIT)
def cache_lookup(keys, digests, scores, values, width, num_buckets, seed, policy, step, epoch,
                 rows, update, default, default_stride, out, copy, index, found):
    """Slot of each row's key (-1 where absent), its value bytes (row r * default_stride of
    ``default`` where absent) if ``copy``, and, on rows with update[r] set, the key's score
    raised as a touch does."""
    for r in range(rows.shape[0]):
        slot = _slot_of(keys, digests, width, num_buckets, seed, rows[r])
        index[r] = slot
        found[r] = slot >= 0
        if copy:
            out[r, :] = values[slot, :] if slot >= 0 else default[r * default_stride, :]
        if slot >= 0 and update.shape[0] and update[r]:
            scores[slot] = new_score(policy, scores[slot], True, False, np.uint64(0), step,
                                     epoch)


@numba.njit(**_JIT)
def cache_erase(keys, digests, scores, counts, width, num_buckets, seed, rows, erased, pins):
    """Free each row's key's slot (unlocking it); True on the row that did."""
    for r in range(rows.shape[0]):
        slot = _slot_of(keys, digests, width, num_buckets, seed, rows[r])
        erased[r] = slot >= 0
        if slot >= 0:
            keys[slot] = _EMPTY
            digests[slot] = 0
            scores[slot] = 0
            pins[slot] = 0
            counts[0] -= 1
