"""CacheMap against the behaviours HierarchicalKV's own test suite states (its merlin_hashtable,
find_or_insert(_ptr), accum_or_assign, insert_and_evict, assign_score, assign_values,
uint32_score, erase_if, export_batch_if and score-policy tests), rewritten as this project's
cases and run on both engines: the CPU engine always, the CUDA engine where there is a GPU.
Where CacheMap differs on purpose the test says so. test_cache_hkv_more.py has the rest.
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


def _rows(keys, dim=4):
    """A value row that names its key (exact in float32 for keys below 2**24)."""
    return keys.to(torch.float32).unsqueeze(1).expand(-1, dim).contiguous()


def _table(cache):
    """Everything in the cache: {key: (score as int64 bits, value row)}."""
    keys, values, scores = cache.export()
    rows = zip(keys.cpu().tolist(), scores.view(torch.int64).cpu().tolist(), values.cpu().tolist())
    return {k: (s, v) for k, s, v in rows}


@pytest.mark.parametrize("writer", ["insert_or_assign", "find_or_insert", "find_or_insert_index"])
@pytest.mark.parametrize("device", DEVICES)
def test_one_batch_through_every_operation(device, writer):
    """HKV's basic cases (merlin_hashtable, find_or_insert, find_or_insert_ptr): write a batch,
    read it back, overwrite it, add to it, erase half, clear, write again; below capacity every
    step is exact. The _ptr variant writes values through the slots it is given."""
    g = torch.Generator().manual_seed(11)
    keys = (torch.randperm(1 << 20, generator=g)[:1000] + 1).to(device)
    values = _rows(keys)
    cache = _cache(device, policy="custom", capacity=4000)  # not a whole number of buckets

    def write():
        if writer == "insert_or_assign":
            status = cache.insert_or_assign(keys, values, scores=keys)
            assert (status.cpu() == gh.INSERTED).all()
        elif writer == "find_or_insert":
            got, found = cache.find_or_insert(keys, init=values, scores=keys)
            assert not found.cpu().any() and torch.equal(got, values)
        else:
            index, found = cache.find_or_insert_index(keys, scores=keys)
            assert not found.cpu().any() and (index >= 0).all()
            cache.values[index] = values
        assert len(cache) == 1000
        got, found = cache.find(keys)
        assert found.cpu().all() and torch.equal(got, values)
        assert cache.contains(keys).cpu().all()
        assert _table(cache) == {k: (k, v) for k, v in zip(keys.cpu().tolist(),
                                                           values.cpu().tolist())}

    write()
    if writer == "insert_or_assign":
        status = cache.insert_or_assign(keys, values + 0.5, scores=keys)
        assert (status.cpu() == gh.ASSIGNED).all()
    else:
        assert cache.assign(keys, values + 0.5, scores=keys).cpu().all()
    assert len(cache) == 1000 and torch.equal(cache.find(keys)[0], values + 0.5)
    status = cache.accum_or_assign(keys, values, cache.contains(keys), scores=keys)
    assert (status.cpu() == gh.ASSIGNED).all() and len(cache) == 1000
    assert torch.equal(cache.find(keys)[0], 2 * values + 0.5)
    assert cache.erase(keys[:500]).cpu().all() and len(cache) == 500
    assert cache.contains(keys).cpu().tolist() == [False] * 500 + [True] * 500
    cache.clear()
    assert len(cache) == 0 and not cache.contains(keys).cpu().any() and cache.capacity == 4096
    write()


@pytest.mark.parametrize("device", DEVICES)
def test_a_full_batch_into_a_full_size_cache_keeps_what_it_reports(device):
    """As many random-scored keys as slots in one call: what the cache holds is what find
    finds, with the right values; erasing every key empties it, and the same batch again
    fills it about as far (HKV: exactly as far; the CPU engine is deterministic)."""
    g = torch.Generator().manual_seed(5)
    keys = (torch.randperm(1 << 20, generator=g)[:1024] << 10).to(device)
    scores = torch.randint(0, 1 << 40, (1024,), generator=g).to(device)
    cache = _cache(device, policy="custom", capacity=1024, bucket_slots=32)
    status = cache.insert_or_assign(keys, _rows(keys), scores=scores)
    held = len(cache)
    assert held > 0.9 * 1024
    got, found = cache.find(keys)
    assert int(found.sum()) == held
    assert torch.equal(got[found], _rows(keys)[found])
    assert ((status.cpu() == gh.REFUSED) <= ~found.cpu()).all()  # refused rows are absent
    assert int(cache.erase(keys).sum()) == held and len(cache) == 0
    cache.insert_or_assign(keys, _rows(keys), scores=scores)
    if device == "cpu":
        assert len(cache) == held
    else:  # racing rows may pick other victims
        assert len(cache) > 0.9 * 1024


def _one_bucket(device, policy):
    # 128 slots in one bucket: both candidate buckets of every key are the same full bucket
    return _cache(device, policy=policy, capacity=128, bucket_slots=128)


# HKV's evict-strategy cases: a full bucket, then two new keys and two present ones.
BASE = torch.arange(1000, 1128)
PRESENT, NEW = [1126, 1127], [5, 6]


def _counts(keys):
    """lfu counts: the two present test keys are the most frequent, so no eviction can take
    them before their row lands (on the GPU rows race)."""
    return torch.where(keys >= 1126, 500, keys % 97 + 1)


@pytest.mark.parametrize("writer", ["insert_or_assign", "find_or_insert", "accum_or_assign",
                                    "assign"])
@pytest.mark.parametrize("policy", ["lru", "lfu", "epoch_lru", "epoch_lfu"])
@pytest.mark.parametrize("device", DEVICES)
def test_a_write_into_a_full_bucket_scores_by_the_policy(device, policy, writer):
    cache = _one_bucket(device, policy)
    counting = policy.endswith("lfu")
    cache.set_global_epoch(1)
    for part in (BASE[:126], BASE[126:]):  # the present test keys written last (newest)
        part = part.to(device)
        cache.insert_or_assign(part, _rows(part),
                               scores=_counts(part) if counting else None)
    before = _table(cache)
    assert len(before) == 128
    cache.set_global_epoch(2)
    keys = torch.tensor(NEW + PRESENT, device=device)
    given = _rows(keys) + 0.25
    scores = _counts(keys) if counting else None
    if writer == "insert_or_assign":
        status = cache.insert_or_assign(keys, given, scores=scores)
        assert status.cpu().tolist() == [gh.INSERTED_EVICTING] * 2 + [gh.ASSIGNED] * 2
    elif writer == "find_or_insert":
        got, found = cache.find_or_insert(keys, init=given, scores=scores)
        assert found.cpu().tolist() == [False, False, True, True]
        assert torch.equal(got[2:], _rows(keys[2:]))
    elif writer == "accum_or_assign":
        flags = torch.tensor([False, False, True, True], device=device)
        status = cache.accum_or_assign(keys, given, flags, scores=scores)
        assert status.cpu().tolist() == [gh.INSERTED_EVICTING] * 2 + [gh.ASSIGNED] * 2
    else:  # HKV's assign_scores (and assign): absent keys are left out
        assert cache.assign(keys, None, scores=scores).cpu().tolist() == [False, False,
                                                                           True, True]
    after = _table(cache)
    assert len(after) == 128
    touched = PRESENT + ([] if writer == "assign" else NEW)
    assert sorted(set(NEW) & set(after)) == ([] if writer == "assign" else NEW)
    expected_values = {
        "insert_or_assign": {k: [k + 0.25] * 4 for k in touched},
        "find_or_insert": {**{k: [k + 0.25] * 4 for k in NEW}, **{k: [k] * 4 for k in PRESENT}},
        "accum_or_assign": {**{k: [k + 0.25] * 4 for k in NEW},
                            **{k: [2 * k + 0.25] * 4 for k in PRESENT}},
        "assign": {k: [k] * 4 for k in PRESENT},
    }[writer]
    for k in touched:
        assert after[k][1] == expected_values[k]
    untouched = {k: v for k, v in after.items() if k not in touched}
    assert len(untouched) == 128 - len(touched)
    assert all(before[k] == v for k, v in untouched.items())  # score and value as they were
    new_scores = [after[k][0] for k in touched]
    if policy in ("lru", "epoch_lru"):
        assert len(set(new_scores)) == 1  # one call, one step
        assert new_scores[0] > max(s for s, _ in untouched.values())
        if policy == "epoch_lru":
            assert new_scores[0] >> 32 == 2
            assert {s >> 32 for s, _ in untouched.values()} == {1}
    else:
        count = {k: int(_counts(torch.tensor(k))) for k in touched}
        epoch = (2 << 32) if policy == "epoch_lfu" else 0
        for k in touched:  # a present key's count adds the given one; a new key starts at it
            assert after[k][0] == epoch | (count[k] * (2 if k in PRESENT else 1))


@pytest.mark.parametrize("device", DEVICES)
def test_custom_scores_decide_what_a_full_bucket_keeps(device):
    """HKV's customized_basic: 64 new keys scored above the bucket and 64 present keys given
    higher scores leave exactly the 128 newest scores. customized_advanced: new keys scored
    below the bucket's lowest are refused; present keys take their new scores, even one below
    every other entry."""
    cache = _one_bucket(device, "custom")
    base = BASE.to(device)
    cache.insert_or_assign(base, _rows(base), scores=base)  # scores 1000..1127
    keys = torch.cat([torch.arange(64, device=device), base[64:]])
    cache.insert_or_assign(keys, _rows(keys), scores=torch.arange(1128, 1256, device=device))
    table = _table(cache)
    assert sorted(s for s, _ in table.values()) == list(range(1128, 1256))
    assert sorted(table) == sorted(keys.cpu().tolist())
    assert all(v == [k] * 4 for k, (_, v) in table.items())

    cache = _one_bucket(device, "custom")
    cache.insert_or_assign(base, _rows(base), scores=base)
    keys = torch.tensor([1, 2, 3, 4, 1072, 1073, 1074, 1075], device=device)
    status = cache.insert_or_assign(keys, _rows(keys) + 0.5, scores=torch.tensor(
        [20, 78, 97, 98, 99, 1010, 1020, 1035], device=device))
    assert status.cpu().tolist() == [gh.REFUSED] * 4 + [gh.ASSIGNED] * 4
    assert len(cache) == 128
    assert cache.contains(keys).cpu().tolist() == [False] * 4 + [True] * 4
    assert _scores_of(cache, [1072, 1073, 1074, 1075]) == [99, 1010, 1020, 1035]


@pytest.mark.parametrize("device", DEVICES)
def test_rising_custom_scores_keep_the_latest_keys(device):
    """HKV's customized_correct_rate (and uint32_score's): keys written in rising order with
    their own value as score; after each round of one capacity's worth, at least 96.4% of the
    slots hold that round's keys, the newest key among them, scores and values intact."""
    cap = 8192
    cache = _cache(device, policy="custom", capacity=cap, dim=1)
    start = 100_000
    for r in range(3):
        low = start + r * cap
        for s in range(8):
            keys = torch.arange(low + s * 1024, low + (s + 1) * 1024, device=device)
            cache.insert_or_assign(keys, _rows(keys, 1), scores=keys)
        if r == 0:
            assert len(cache) >= 0.964 * cap
        keys, values, scores = cache.export()
        assert torch.equal(scores.view(torch.int64), keys)
        assert torch.equal(values, _rows(keys, 1))
        assert int(keys.max()) == low + cap - 1
        assert int((keys >= low).sum()) >= 0.964 * cap


@pytest.mark.parametrize("device", DEVICES)
def test_assign_sets_scores_over_the_whole_range(device):
    """HKV's assign_scores (uint32_score's AssignScoresAndExport, here over uint64): present
    keys take the scores given, the extremes included; values stay; absent keys are left
    out."""
    cache = _cache(device, policy="custom")
    keys = torch.arange(1, 65, device=device)
    cache.insert_or_assign(keys, _rows(keys), scores=keys)
    wanted = [0, 2**64 - 1, 1, 2**64 - 2] + [1000 + i for i in range(4, 64)]
    scores = torch.tensor([w - 2**64 if w >= 2**63 else w for w in wanted], device=device)
    found = cache.assign(torch.cat([keys, keys + 1000]), None,
                         scores=torch.cat([scores, scores]))
    assert found.cpu().tolist() == [True] * 64 + [False] * 64
    table = _table(cache)
    assert len(table) == 64
    assert [table[k][0] % 2**64 for k in range(1, 65)] == wanted
    assert all(table[k][1] == [k] * 4 for k in range(1, 65))


@pytest.mark.parametrize("device", DEVICES)
def test_assign_of_values_alone(device):
    """HKV's assign_values changes values and leaves scores under every policy. CacheMap
    differs on purpose under lru (and the other clock or counting policies): an assign is a
    write, so it scores the key as any write does. Under custom it keeps the scores, as HKV."""
    cache = _cache(device, policy="lru")
    keys = torch.arange(10, device=device)
    cache.insert_or_assign(keys, _rows(keys))
    first = _scores_of(cache, [3])[0]
    assert cache.assign(keys[3:4], _rows(keys[3:4]) * 2).cpu().tolist() == [True]
    assert cache.find(keys[3:5])[0][:, 0].cpu().tolist() == [6.0, 4.0]
    assert _scores_of(cache, [3, 4]) == [first + 1, first]  # HKV: [first, first]

    cache = _cache(device, policy="custom")
    cache.insert_or_assign(keys, _rows(keys), scores=keys + 7)
    assert cache.assign(keys[:2], _rows(keys[:2]) + 1).cpu().all()
    assert _table(cache)[1] == (8, [2.0] * 4)


@pytest.mark.parametrize("device", DEVICES)
def test_assign_of_values_alone_keeps_custom_scores(device):
    """HierarchicalKV's assign_values under custom scores: the values change, the scores
    stay (CacheMap reads them and writes them back in the same operation)."""
    cache = _cache(device, policy="custom")
    cache.insert_or_assign(torch.tensor([1, 2], device=device), torch.zeros(2, 4, device=device),
                           scores=torch.tensor([10, 20], device=device))
    found = cache.assign(torch.tensor([2, 3], device=device), torch.ones(2, 4, device=device))
    assert found.cpu().tolist() == [True, False]
    assert _scores_of(cache, [1, 2]) == [10, 20]
    assert cache.find(torch.tensor([2], device=device))[0].cpu().tolist() == [[1.0] * 4]
