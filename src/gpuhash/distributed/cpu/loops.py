"""The sharded tables' routing loops, compiled by numba: each key's owner and the rows each
rank is sent (shard_owners, the twin of distributed/kernels/shard.cu), and the rows grouped by
owner, a stable counting sort (shard_order; on a GPU, torch's sort of the one-byte owners).

Rows are split into fixed chunks, each counting its own row of ``counts``, so the result is
the same whatever the thread count. Compiled on first use and cached on disk
(_common/cpu/runtime.py picks the directory; a forked child runs serial twins).
"""

from __future__ import annotations

import numba
import numpy as np

from gpuhash._common.constants import MIX_1, MIX_2, MIX_SHIFT, SHARD_BITS, SHARD_SALT

_JIT = {"cache": True, "nogil": True}
_M32 = np.uint64(0xFFFFFFFF)
_MIX1 = np.uint64(MIX_1)
_MIX2 = np.uint64(MIX_2)
_SHIFT = np.uint64(MIX_SHIFT)
_SALT = np.uint64(SHARD_SALT)
_HIGH = np.uint64(64 - SHARD_BITS)
_BITS = np.uint64(SHARD_BITS)


@numba.njit(inline="always", **_JIT)
def _owner(key, key_bytes, world):
    """gh_shard_owner: a 32-bit key's bits zero-extended, as the tables read it."""
    bits = np.uint64(np.int64(key))
    if key_bytes == 4:
        bits &= _M32
    x = bits ^ _SALT
    x ^= x >> _SHIFT
    x *= _MIX1
    x ^= x >> _SHIFT
    x *= _MIX2
    x ^= x >> _SHIFT
    return np.int64(((x >> _HIGH) * np.uint64(world)) >> _BITS)


@numba.njit(inline="always", **_JIT)
def _owners_of_chunk(keys, key_bytes, world, owners, counts, c, per):
    mine = counts[c]
    for i in range(c * per, min(keys.shape[0], (c + 1) * per)):
        owner = _owner(keys[i], key_bytes, world)
        owners[i] = owner
        mine[owner] += 1


@numba.njit(parallel=True, **_JIT)
def shard_owners(keys, key_bytes, world, owners, counts):
    """owners[i] = the owner of keys[i]; counts[c, r] += chunk c's rows owned by rank r (the
    chunks: ``counts.shape[0]`` equal runs of rows, in order)."""
    chunks = counts.shape[0]
    per = (keys.shape[0] + chunks - 1) // chunks
    for c in numba.prange(chunks):
        _owners_of_chunk(keys, key_bytes, world, owners, counts, c, per)


@numba.njit(**_JIT)
def shard_owners_serial(keys, key_bytes, world, owners, counts):
    """shard_owners on this thread: a small batch's rows cost less than waking the pool."""
    chunks = counts.shape[0]
    per = (keys.shape[0] + chunks - 1) // chunks
    for c in range(chunks):
        _owners_of_chunk(keys, key_bytes, world, owners, counts, c, per)


@numba.njit(**_JIT)
def _chunk_starts(counts):
    """Where chunk c's first row of rank r goes: after every row of a lower rank, then
    after the earlier chunks' rows of rank r."""
    chunks, world = counts.shape
    starts = np.empty((chunks, world), np.int64)
    at = 0
    for r in range(world):
        for c in range(chunks):
            starts[c, r] = at
            at += counts[c, r]
    return starts


@numba.njit(inline="always", **_JIT)
def _order_chunk(owners, cursor, order, c, per):
    for i in range(c * per, min(owners.shape[0], (c + 1) * per)):
        owner = np.int64(owners[i])
        order[cursor[owner]] = i
        cursor[owner] += 1


@numba.njit(parallel=True, **_JIT)
def shard_order(owners, counts, order):
    """order: the rows grouped by owner, each owner's in row order, from shard_owners' owners
    and per-chunk counts (a stable counting sort)."""
    chunks = counts.shape[0]
    per = (owners.shape[0] + chunks - 1) // chunks
    starts = _chunk_starts(counts)
    for c in numba.prange(chunks):
        _order_chunk(owners, starts[c], order, c, per)


@numba.njit(**_JIT)
def shard_order_serial(owners, counts, order):
    """shard_order on this thread."""
    chunks = counts.shape[0]
    per = (owners.shape[0] + chunks - 1) // chunks
    starts = _chunk_starts(counts)
    for c in range(chunks):
        _order_chunk(owners, starts[c], order, c, per)
