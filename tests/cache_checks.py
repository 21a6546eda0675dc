"""Checks of a cache's own invariants that need no model of its history: the CUDA index from
key to slot (kernels/cache_index.cuh) against the slots, and the key hash every placement
derives from (MurmurHash3's finalizer, as _common/kernels/common.cuh: gh_mix64)."""

from __future__ import annotations

import torch

from gpuhash._common.constants import INDEX_SLOT_BITS

M64, M32 = 2**64 - 1, 2**32 - 1


def mix64(x: int) -> int:
    """The 64-bit mix of the engines' hash (gh_mix64), on Python ints."""
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & M64
    return x ^ (x >> 33)


def check_index(cache, *, entries: int | None = None) -> None:
    """A CUDA cache's index from key to slot (kernels/cache_index.cuh) holds every live key at
    its slot and nothing else, a free entry holds no slot bits, and each bucket's count is the
    number of keys stored past it (walking from their home bucket). Nothing to check on the
    CPU. ``entries``: an index bucket's entries (the engine's, by default)."""
    if entries is None:
        from gpuhash.cache.cuda.engine import INDEX_ENTRIES as entries
    state = cache._state
    index = state.caches.get("_cuda_index")
    if index is None:
        assert state.device.type == "cpu"
        return
    words = index.cpu()
    keys = state.keys.cpu()
    key_words, second = words[:, 0], words[:, 1]
    slot_bits = second & ((1 << INDEX_SLOT_BITS) - 1)
    counts = (second >> INDEX_SLOT_BITS) & ((1 << (64 - INDEX_SLOT_BITS)) - 1)
    used = key_words != -1
    live = (keys != -1) & (keys != -2)
    want = dict(zip(keys[live].tolist(), torch.nonzero(live).flatten().tolist()))
    assert dict(zip(key_words[used].tolist(), slot_bits[used].tolist())) == want
    assert int(used.sum()) == len(want)
    assert int(slot_bits[~used].count_nonzero()) == 0
    buckets = words.shape[0] // entries
    counts = counts.view(buckets, entries)
    assert int(counts[:, 1:].count_nonzero()) == 0  # only a bucket's first entry counts
    expected = [0] * buckets
    seed = state.spec.seed
    for at, key in zip(torch.nonzero(used).flatten().tolist(), key_words[used].tolist()):
        hash_ = mix64((key % 2**64) ^ seed)
        bucket = ((mix64(hash_) & M32) * buckets) >> 32
        while bucket != at // entries:
            expected[bucket] += 1
            bucket = (bucket + 1) % buckets
    assert counts[:, 0].tolist() == expected
