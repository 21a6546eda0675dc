"""The CUDA cache's index from key to slot (kernels/cache_index.cuh), through which its finds
read: exact after every kind of write (inserts, moves, evictions, erase, erase_if, clear,
growth, a file loaded), and finds through it agree with the slots. Marked gpu."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
from cache_checks import check_index

import gpuhash as gh

pytestmark = pytest.mark.gpu


def finds_agree_with_slots(cache, absent: torch.Tensor) -> None:
    """find_index / find / contains of every live key give its slot and value; absent keys
    are not found."""
    check_index(cache)
    keys, values, _ = cache.export()
    index, found = cache.find_index(keys)
    assert bool(found.all())
    assert torch.equal(cache._state.keys[index], keys.view(torch.int64))
    got, found = cache.find(keys)
    assert bool(found.all()) and torch.equal(got, values)
    assert not bool(cache.contains(absent).any())
    check_index(cache)


@pytest.mark.parametrize("width", [16, 128])
@pytest.mark.parametrize("policy", ["custom", "lru"])
def test_the_index_stays_exact_through_every_write(width, policy):
    device = "cuda"
    generator = torch.Generator().manual_seed(width)
    cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(2,),
                        capacity=8 * width, device=device, policy=policy, bucket_slots=width)
    # absent keys: above every key written below
    absent = (torch.arange(64) + 2**61).view(torch.uint64).to(device)

    def batch(n):
        keys = torch.randint(0, 4 * cache.capacity, (n,), generator=generator)
        scores = torch.randint(0, 2**40, (n,), generator=generator)
        values = torch.rand(n, 2, generator=generator)
        return (keys.view(torch.uint64).to(device), values.to(device),
                scores.to(device) if policy == "custom" else None)

    # filled past its capacity (moves while below the relocation limit, then evictions)
    for _ in range(6):
        keys, values, scores = batch(cache.capacity // 2)
        cache.insert_and_evict(keys, values, scores=scores)
        finds_agree_with_slots(cache, absent)
    for _ in range(3):
        keys, values, scores = batch(cache.capacity // 3)
        cache.insert_or_assign(keys, values, scores=scores)
        cache.find_or_insert_index(batch(cache.capacity // 3)[0], scores=scores)
        half = keys.numel() // 2
        cache.assign(keys[:half], values[:half], scores=None if scores is None else scores[:half])
        cache.accum_or_assign(keys, values, torch.rand(keys.numel(), generator=generator)
                              .to(device) < 0.5, scores=scores)
        finds_agree_with_slots(cache, absent)
    cache.erase(cache.export()[0][::3].contiguous())
    finds_agree_with_slots(cache, absent)
    middle = int(cache.scores.view(torch.int64).cpu().median())
    cache.erase_if(max_score=max(middle, 0))
    finds_agree_with_slots(cache, absent)
    with tempfile.TemporaryDirectory() as folder:
        cache.save(Path(folder) / "c.gh")
        loaded = gh.CacheMap.load(Path(folder) / "c.gh", device=device)
    finds_agree_with_slots(loaded, absent)
    cache.clear()
    finds_agree_with_slots(cache, absent)
    keys, values, scores = batch(cache.capacity // 2)
    cache.insert_or_assign(keys, values, scores=scores)
    finds_agree_with_slots(cache, absent)


def test_the_index_of_a_grown_cache_is_exact():
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=4096,
                        initial_capacity=128, device="cuda", bucket_slots=16)
    absent = torch.arange(64, device="cuda") + 2**40
    for start in range(0, 2048, 256):
        keys = torch.arange(start, start + 256, device="cuda")
        cache.insert_or_assign(keys, keys.float())
        finds_agree_with_slots(cache, absent)
    assert cache.capacity > 128
    got, found = cache.find(torch.arange(2048, device="cuda"))
    assert bool(found.all()) and torch.equal(got, torch.arange(2048, device="cuda").float())


@pytest.mark.parametrize("change", ["erase_if", "clear"])
def test_reads_on_two_streams_after_torch_rewrote_the_key_words(change):
    """erase_if and clear change key words with torch, so the index is made again; that is
    part of their write, on their stream (here behind a long sleep): a read on another stream
    waits for it, and a read on the same stream follows it. (Made lazily by whichever read
    came first, the second reader would have met a stale or half-made index.)"""
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1 << 16,
                        device="cuda", policy="custom")
    keys = torch.arange(20_000, device="cuda")
    cache.insert_or_assign(keys, keys.float(), scores=keys)
    writer, other = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(writer):
        torch.cuda._sleep(500_000_000)
    if change == "erase_if":
        cache.erase_if(max_score=9_999, stream=writer)
    else:
        cache.clear(stream=writer)
    _, found_other = cache.find(keys, stream=other)
    _, found_writer = cache.find(keys, stream=writer)
    torch.cuda.synchronize()
    want = keys >= 10_000 if change == "erase_if" else torch.zeros_like(keys, dtype=torch.bool)
    assert torch.equal(found_other, want) and torch.equal(found_writer, want)
    check_index(cache)
