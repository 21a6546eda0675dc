"""CacheMap's lock_keys / unlock_keys on both engines (the CPU engine always, the CUDA engine
where there is a GPU): a locked entry keeps its slot and value through writes that evict and
move everything around it, refuses a key whose buckets are all locked, unlocks when erased,
and stops growth while held."""

from __future__ import annotations

import pytest
import torch

import gpuhash as gh

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _cache(device, *, policy="lru", capacity=512, bucket_slots=16, **options):
    return gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
                       capacity=capacity, device=device, policy=policy,
                       bucket_slots=bucket_slots, **options)


def _fill(cache, device, keys, *, scores=None):
    values = torch.stack([keys.float(), -keys.float()], 1)
    return cache.insert_or_assign(keys.to(device), values.to(device),
                                  scores=None if scores is None else scores.to(device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("policy", ["lru", "lfu", "custom"])
def test_locked_entries_keep_their_slots_through_evicting_writes(device, policy):
    cache = _cache(device, policy=policy)
    g = torch.Generator().manual_seed(3)
    first = torch.randperm(100_000, generator=g)[:400]
    low = torch.zeros(400, dtype=torch.int64)  # custom: the lowest scores, first to go
    _fill(cache, device, first, scores=low if policy == "custom" else None)
    held = first[::4].contiguous()
    index, locked = cache.lock_keys(held.to(device))
    assert bool(locked.all())
    for step in range(8):  # far past capacity: every unlocked entry is a candidate
        keys = torch.randperm(100_000, generator=g)[:400] + (step + 1) * 100_000
        scores = torch.full((400,), step + 1) if policy == "custom" else None
        _fill(cache, device, keys, scores=scores)
    again, found = cache.find_index(held.to(device))
    assert bool(found.all()) and torch.equal(again.cpu(), index.cpu())
    values = cache.values[again]
    assert torch.equal(values.cpu()[:, 0], held.float())
    assert cache.locked_count() == held.numel()


@pytest.mark.parametrize("device", DEVICES)
def test_a_key_whose_buckets_are_all_locked_is_refused_and_given_back(device):
    cache = _cache(device, policy="custom", capacity=16, bucket_slots=16)  # one bucket
    keys = torch.arange(16)
    _fill(cache, device, keys, scores=torch.zeros(16, dtype=torch.int64))
    assert len(cache) == 16
    cache.lock_keys(keys.to(device))
    status, (out_keys, _, _) = cache.insert_and_evict(
        torch.tensor([99]).to(device), torch.ones(1, 2).to(device),
        scores=torch.tensor([1 << 40]).to(device))
    assert status.cpu().tolist() == [gh.REFUSED] and out_keys.cpu().tolist() == [99]
    assert cache.unlock_keys(keys[:1].to(device)).cpu().tolist() == [True]
    status, (out_keys, _, _) = cache.insert_and_evict(
        torch.tensor([99]).to(device), torch.ones(1, 2).to(device),
        scores=torch.tensor([1 << 40]).to(device))
    assert status.cpu().tolist() == [gh.INSERTED_EVICTING] and out_keys.cpu().tolist() == [0]


@pytest.mark.parametrize("device", DEVICES)
def test_a_locked_entry_is_written_in_place(device):
    cache = _cache(device)
    _fill(cache, device, torch.tensor([5, 6]))
    index, _ = cache.lock_keys(torch.tensor([5]).to(device))
    cache.assign(torch.tensor([5]).to(device), torch.tensor([[7.0, 8.0]]).to(device))
    assert cache.values[index].cpu().tolist() == [[7.0, 8.0]]
    assert cache.find_index(torch.tensor([5]).to(device))[0].cpu().tolist() == index.cpu().tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_erasing_unlocks_and_locking_twice_or_absent_keys_changes_nothing(device):
    cache = _cache(device)
    _fill(cache, device, torch.arange(10))
    index, locked = cache.lock_keys(torch.tensor([1, 1, 2, 50]).to(device))
    assert locked.cpu().tolist() == [True, True, True, False] and int(index[3]) == -1
    assert cache.locked_count() == 2
    cache.erase(torch.tensor([1]).to(device))
    assert cache.locked_count() == 1
    cache.erase_if(key_mask=(1 << 64) - 1, key_pattern=2)
    assert cache.locked_count() == 0
    cache.lock_keys(torch.tensor([3]).to(device))
    cache.clear()
    assert cache.locked_count() == 0 and len(cache) == 0
    assert cache.unlock_keys(torch.tensor([3]).to(device)).cpu().tolist() == [False]


@pytest.mark.parametrize("device", DEVICES)
def test_no_growth_while_locked(device):
    cache = _cache(device, capacity=4096, initial_capacity=64)
    _fill(cache, device, torch.arange(32))
    index, _ = cache.lock_keys(torch.tensor([0]).to(device))
    with pytest.raises(ValueError, match="unlock_keys first"):
        cache.reserve(1024)
    assert cache.capacity == 64
    _fill(cache, device, torch.arange(32, 200))  # a growable cache stays at its size
    assert cache.capacity == 64
    assert cache.find_index(torch.tensor([0]).to(device))[0].cpu().tolist() == index.cpu().tolist()
    cache.unlock_keys(torch.tensor([0]).to(device))
    cache.reserve(1024)
    assert cache.capacity == 1024


def test_locks_do_not_travel():
    cache = _cache("cpu")
    _fill(cache, "cpu", torch.arange(4))
    cache.lock_keys(torch.arange(4))
    assert cache.to("cpu").locked_count() == 0 and cache.locked_count() == 4
