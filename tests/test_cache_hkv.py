"""CacheMap against the behaviours HierarchicalKV's own test suite states (its merlin_hashtable,
find_or_insert, accum_or_assign, insert_and_evict, erase_if, export_batch_if and score-policy
tests), rewritten as this project's cases and run on both engines: the CPU engine always, the
CUDA engine where there is a GPU. Where CacheMap differs on purpose the test says so.
"""

from __future__ import annotations

import pytest
import torch

import gpuhash as gh

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
M32 = 2**32 - 1


def _cache(device, *, policy="lru", capacity=1024, dim=4, bucket_slots=128, **options):
    return gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(dim,),
                       capacity=capacity, device=device, policy=policy,
                       bucket_slots=bucket_slots, **options)


def _scores_of(cache, keys):
    got, _, scores = cache.export()
    table = dict(zip(got.tolist(), scores.view(torch.int64).tolist()))
    return [table.get(k) for k in keys]


@pytest.mark.parametrize("device", DEVICES)
def test_insert_and_evict_returns_every_key_it_does_not_keep(device):
    """Each key given ends in the cache or in the output, with random scores at full load
    (HierarchicalKV returns a refused key among the evicted, with its value and score)."""
    g = torch.Generator().manual_seed(7)
    cache = _cache(device, policy="custom", capacity=512, bucket_slots=16)
    held: dict[int, tuple[int, list]] = {}
    for step in range(12):
        keys = torch.randperm(10_000, generator=g)[:256] + step * 10_000
        scores = torch.randint(0, 1000, (256,), generator=g)
        values = torch.rand(256, 4, generator=g)
        status, (out_keys, out_values, out_scores) = cache.insert_and_evict(
            keys.to(device), values.to(device), scores=scores.to(device))
        for k, s, v in zip(keys.tolist(), scores.tolist(), values.tolist()):
            held[k] = (s, v)
        for k, s, v in zip(out_keys.cpu().tolist(), out_scores.view(torch.int64).cpu().tolist(),
                           out_values.cpu().tolist()):
            assert held.pop(k) == (s, v)
        assert int((status.cpu() == gh.REFUSED).sum()) + int(
            (status.cpu() == gh.INSERTED_EVICTING).sum()) == out_keys.numel()
    in_cache, values, scores = cache.export()
    assert sorted(in_cache.cpu().tolist()) == sorted(held)
    for k, s, v in zip(in_cache.cpu().tolist(), scores.view(torch.int64).cpu().tolist(),
                       values.cpu().tolist()):
        assert held[k] == (s, v)


@pytest.mark.parametrize("device", DEVICES)
def test_accum_or_assign_ignores_a_mismatched_flag(device):
    """flag True on an absent key and flag False on a present key change nothing, value or
    score; flag True adds to a present key, flag False inserts an absent one."""
    cache = _cache(device, policy="custom")
    cache.insert_or_assign(torch.tensor([1, 2], device=device), torch.ones(2, 4, device=device),
                           scores=torch.tensor([10, 20], device=device))
    status = cache.accum_or_assign(
        torch.tensor([1, 2, 3, 4], device=device), torch.full((4, 4), 5.0, device=device),
        torch.tensor([True, False, True, False], device=device),
        scores=torch.tensor([11, 21, 31, 41], device=device))
    assert status.cpu().tolist() == [gh.ASSIGNED, gh.SKIPPED, gh.SKIPPED, gh.INSERTED]
    values, found = cache.find(torch.tensor([1, 2, 3, 4], device=device))
    assert found.cpu().tolist() == [True, True, False, True]
    assert values[:, 0].cpu().tolist() == [6.0, 1.0, 0.0, 5.0]
    assert _scores_of(cache, [1, 2, 4]) == [11, 20, 41]


@pytest.mark.parametrize("device", DEVICES)
def test_epoch_lfu_counts_on_across_epochs(device):
    cache = _cache(device, policy="epoch_lfu")
    key = torch.tensor([9], device=device)
    cache.set_global_epoch(1)
    cache.insert_or_assign(key, torch.zeros(1, 4, device=device))
    assert _scores_of(cache, [9]) == [(1 << 32) | 1]
    cache.set_global_epoch(2)
    cache.insert_or_assign(key, torch.zeros(1, 4, device=device))
    assert _scores_of(cache, [9]) == [(2 << 32) | 2]
    # counts given by the caller add, and the low half saturates
    cache.insert_or_assign(key, torch.zeros(1, 4, device=device),
                           scores=torch.tensor([M32 - 1], device=device))
    assert _scores_of(cache, [9]) == [(2 << 32) | M32]


@pytest.mark.parametrize("device", DEVICES)
def test_lfu_admits_new_keys_into_a_warm_cache_over_the_least_frequent(device):
    """Every entry seen many times: a new key still enters, replacing the least frequent
    (HierarchicalKV's lfu); its count starts at its increment."""
    cache = _cache(device, policy="lfu", capacity=16, bucket_slots=16, dim=1)
    keys = torch.arange(16, device=device)
    cache.insert_or_assign(keys, torch.zeros(16, 1, device=device))
    for _ in range(3):
        cache.insert_or_assign(keys[1:], torch.zeros(15, 1, device=device))
    status = cache.insert_or_assign(torch.tensor([100], device=device),
                                    torch.ones(1, 1, device=device))
    assert status.cpu().tolist() == [gh.INSERTED_EVICTING]
    assert cache.contains(torch.tensor([0, 100], device=device)).cpu().tolist() == [False, True]
    assert _scores_of(cache, [1, 100]) == [4, 1]


@pytest.mark.parametrize("device", DEVICES)
def test_lfu_takes_the_callers_counts_and_saturates(device):
    cache = _cache(device, policy="lfu")
    key = torch.tensor([5], device=device)
    cache.insert_or_assign(key, torch.zeros(1, 4, device=device),
                           scores=torch.tensor([7], device=device))
    cache.find_or_insert(key, scores=torch.tensor([3], device=device))
    assert _scores_of(cache, [5]) == [10]
    cache.assign(key, scores=torch.tensor([2**64 - 2], dtype=torch.uint64, device=device))
    assert _scores_of(cache, [5]) == [-1]  # 2**64 - 1 as int64 bits: saturated


@pytest.mark.parametrize("policy", ["lru", "epoch_lru"])
@pytest.mark.parametrize("device", DEVICES)
def test_scores_given_under_a_clock_policy_are_the_scores(device, policy):
    """A restored checkpoint keeps its scores: under lru and epoch_lru ``scores=`` sets them
    as given; without them the policy's clock does."""
    cache = _cache(device, policy=policy)
    cache.set_global_epoch(3)
    cache.insert_or_assign(torch.tensor([1, 2], device=device), torch.zeros(2, 4, device=device),
                           scores=torch.tensor([123, 456], device=device))
    cache.insert_or_assign(torch.tensor([3], device=device), torch.zeros(1, 4, device=device))
    got = _scores_of(cache, [1, 2, 3])
    assert got[:2] == [123, 456]
    assert got[2] == (2 if policy == "lru" else (3 << 32) | 2)


@pytest.mark.parametrize("device", DEVICES)
def test_erase_if_export_and_size_if_by_key_pattern_and_score_range(device):
    cache = _cache(device, policy="custom", capacity=4096)
    table = torch.arange(600, device=device) // 200            # three tables of 200 ids
    keys = (table << 56) | torch.arange(600, device=device)
    scores = torch.arange(600, device=device) % 50
    cache.insert_or_assign(keys, torch.zeros(600, 4, device=device), scores=scores)
    high = 0xFF << 56
    assert cache.size_if(key_mask=high, key_pattern=1 << 56) == 200
    assert cache.size_if(min_score=10, max_score=19) == 120
    got, _, got_scores = cache.export(key_mask=high, key_pattern=2 << 56, min_score=45)
    assert sorted(got.cpu().tolist()) == sorted(
        k for k, s in zip(keys.cpu().tolist(), scores.cpu().tolist())
        if k >> 56 == 2 and s >= 45)
    assert (got_scores.view(torch.int64) >= 45).all()
    assert cache.erase_if(key_mask=high, key_pattern=0, max_score=9) == 40
    assert len(cache) == 560
    assert cache.contains(keys[:10]).cpu().tolist() == [False] * 10
    assert cache.size_if(key_mask=2**64 - 1, key_pattern=int(keys[599])) == 1


def test_filters_are_checked_before_anything_changes():
    cache = _cache("cpu")
    cache.insert_or_assign(torch.tensor([1]), torch.zeros(1, 4))
    with pytest.raises(ValueError, match="needs a filter"):
        cache.erase_if()
    with pytest.raises(ValueError, match="key_pattern=5 needs key_mask"):
        cache.size_if(key_pattern=5)
    with pytest.raises(ValueError, match="min_score"):
        cache.export(min_score=-1)
    assert len(cache) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_unique_batches_skip_the_repeat_check_and_match_the_checked_path(device):
    g = torch.Generator().manual_seed(3)
    keys = torch.randperm(50_000, generator=g)[:4000].to(device)
    values = torch.rand(4000, 4, generator=g).to(device)
    # below capacity: on the GPU, rows racing to evict may choose differently call by call
    checked, vouched = _cache(device, capacity=8192), _cache(device, capacity=8192)
    a = checked.insert_or_assign(keys, values)
    b = vouched.insert_or_assign(keys, values, unique=True)
    assert a.cpu().tolist() == b.cpu().tolist()
    got_a, found_a = checked.find_or_insert(keys[:100].flip(0), init=1.0)
    got_b, found_b = vouched.find_or_insert(keys[:100].flip(0), init=1.0, unique=True)
    assert torch.equal(got_a, got_b) and torch.equal(found_a, found_b)


@pytest.mark.parametrize("device", DEVICES)
def test_merge_from_restores_a_checkpoint_into_a_cache_of_another_size(device, tmp_path):
    """Entries keep their scores; a smaller cache keeps the highest ones of each full pair of
    buckets; a present key takes the checkpoint's value and score."""
    big = _cache("cpu", policy="lfu", capacity=4096, bucket_slots=16)
    keys = torch.arange(3000)
    big.insert_or_assign(keys, torch.rand(3000, 4), scores=keys % 97 + 1)
    big.save(tmp_path / "c.gh")
    small = _cache(device, policy="lfu", capacity=1024, bucket_slots=16)
    small.insert_or_assign(torch.tensor([5], device=device), torch.zeros(1, 4, device=device),
                           scores=torch.tensor([1000], device=device))
    small.merge_from(tmp_path / "c.gh")
    got, values, scores = small.export()
    assert 900 <= len(small) <= 1024
    expected = dict(zip(*[t.tolist() for t in big.export()[::2]]))
    for k, s in zip(got.cpu().tolist(), scores.view(torch.int64).cpu().tolist()):
        assert expected[k] == s
    want_values = big.find(got.cpu())[0]
    assert torch.equal(values.cpu(), want_values)
    # the lowest score kept is at least the highest dropped, pair by pair: overall, the mean
    # of what stayed is above the checkpoint's
    assert sum(scores.view(torch.int64).tolist()) / len(got) > sum(expected.values()) / 3000
    with pytest.raises(ValueError, match="value_shape"):
        small.merge_from(_cache("cpu", dim=2))


def test_the_cache_grows_past_its_first_maximum_when_allowed():
    cache = _cache("cpu", capacity=1024, initial_capacity=128, max_load_factor=0.5)
    cache.insert_or_assign(torch.arange(200), torch.zeros(200, 4))
    assert cache.capacity == 512  # 200 entries past half of 256
    with pytest.raises(ValueError, match="slots must be an int"):
        cache.set_max_capacity(100)
    cache.set_max_capacity(8192)
    cache.insert_or_assign(torch.arange(200, 3000), torch.zeros(2800, 4))
    assert cache.capacity == 8192 and len(cache) == 3000
    with pytest.raises(ValueError, match="max_load_factor"):
        cache.max_load_factor = 0.95
