"""A small workload that runs every kernel of every table layout once or twice; the GPU tests
run it under compute-sanitizer (memcheck, racecheck). Exits non-zero on a wrong result."""

from __future__ import annotations

import torch

import gpuhash as gh
from gpuhash.bench import ceilings, peers
from gpuhash.join import plan as _join_plan
from gpuhash.join import sides as join_sides
from gpuhash.join.strategies.radix import run_radix

torch.manual_seed(1)
LAYOUTS = [  # (key dtype, value dtype, value shape): packed, pair, rows, sets
    (torch.int32, torch.int32, ()),
    (torch.int64, torch.float64, ()),
    (torch.int32, torch.float32, (8,)),
    (torch.uint32, torch.uint8, (3,)),
]

for key_dtype, value_dtype, shape in LAYOUTS:
    table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                       capacity=64, device="cuda")
    keys = torch.randint(-1000, 1000, (3000,), dtype=torch.int64).to(torch.int32)
    keys[:2] = torch.tensor([-1, -2])  # the sentinel bit patterns, kept out of band
    keys = keys.view(torch.uint32) if key_dtype == torch.uint32 else keys.to(key_dtype)
    keys = keys.cuda()
    values = torch.randn(3000, *shape).to(value_dtype).cuda()
    table.insert(keys, values)  # grows several times: gh_rehash
    table.find(keys, default=1)
    table.find_index(keys)
    table.contains(keys)
    table.erase(keys[::2].contiguous())
    assert int(table.contains(keys[1::2].contiguous()).sum()) > 0
    torch.cuda.synchronize()

for key_dtype in (torch.int32, torch.uint64):
    keys = torch.arange(500).to(key_dtype).cuda()
    s = gh.HashSet(key_dtype=key_dtype, capacity=100, device="cuda", duplicates="any")
    assert bool(s.insert(keys).all())
    assert bool(s.contains(keys).all())
    assert bool(s.erase(keys).all())

# load 0.99 with distinct keys: gh_insert_deferred places the keys whose buckets are full
for key_dtype, value_dtype in ((torch.int32, torch.int32), (torch.int64, torch.int64)):
    keys = torch.randperm(4000).to(key_dtype).cuda()
    full = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, capacity=4000,
                      max_load_factor=0.99, growable=False, device="cuda")
    full.insert(keys, keys.to(value_dtype))
    assert bool(full.find(keys)[1].all())

# insert_or_apply on every layout, and the multimap's kernels
APPLY_LAYOUTS = [(torch.int32, torch.int32, ()), (torch.int64, torch.float64, ()),
                 (torch.int64, torch.float32, (8,))]
for key_dtype, value_dtype, shape in APPLY_LAYOUTS:
    table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                       capacity=64, device="cuda")
    keys = torch.randint(0, 500, (3000,)).to(key_dtype).cuda()
    for op in ("add", "min", "max"):  # the slots recorded too, in one case
        table.insert_or_apply(keys, torch.ones(3000, *shape, dtype=value_dtype).cuda(), op=op,
                              return_index=op == "min")
    multi = gh.MultiMap(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                        capacity=64, device="cuda")
    keys[:3] = torch.tensor([-1, -2, -1]).to(key_dtype)  # the sentinels: kept out of band
    multi.insert(keys, torch.ones(3000, *shape, dtype=value_dtype).cuda())
    assert multi.count(keys[:3].contiguous()).tolist() == [2, 1, 2]
    multi.find_all(keys[:100].contiguous())
    multi.erase(keys[::3].contiguous())
    assert len(multi) > 0
    torch.cuda.synchronize()

# one key held far more often than its random steps can place: walks into the linear part,
# where the revisit check reads only the steps before it
crowded = gh.MultiMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=40 * 8,
                      max_load_factor=0.97, growable=False, device="cuda")
crowded.insert(torch.full((250,), 5, dtype=torch.int64).cuda(), torch.arange(250).cuda())
assert crowded.count(torch.tensor([5]).cuda()).tolist() == [250]
assert crowded.find_all(torch.tensor([5]).cuda())[0].tolist() == [0] * 250

# rows layout at load 0.99: wide values placed by displacement
wide = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(8,),
                  capacity=4000, max_load_factor=0.99, growable=False, device="cuda")
keys = torch.randperm(4000).cuda()
wide.insert(keys, torch.ones(4000, 8).cuda())
assert bool(wide.find(keys)[1].all())

# erased slots reused by a batch of distinct keys (the first pass's CAS from an erased word)
for key_dtype, value_dtype, shape in APPLY_LAYOUTS:
    churn = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                       capacity=4000, device="cuda")
    keys = torch.randperm(100_000)[:3000].to(key_dtype).cuda()
    values = torch.ones(3000, *shape, dtype=value_dtype).cuda()
    churn.insert(keys, values)
    churn.erase(keys[::2].contiguous())
    churn.insert(keys, values)
    assert bool(churn.contains(keys).all())

# joins: the build and probe kernels on int32 keys (offset codes), int64 keys with the
# reserved patterns (encoded codes), repeated build keys (the output rerun) and every how
for dtype, low in ((torch.int32, -50), (torch.int64, -3)):
    left = torch.randint(low, 60, (5000,), dtype=dtype).cuda()
    right = torch.randint(low, 60, (700,), dtype=dtype).cuda()
    valid = (torch.rand(5000) > 0.2).cuda()
    for how in ("inner", "left", "right", "full", "semi", "anti"):
        gh.join(left, right, how=how, left_valid=valid, nulls_equal=True)
        gh.join(left, right, how=how, memory_budget=20_000)
# a table past L2 (48 MB of slots): the probe's warps read first buckets together
big = torch.randint(0, 2**30, (3_000_000,), dtype=torch.int32).cuda()
for how in ("inner", "left", "full", "semi"):
    gh.join(big.flip(0).contiguous(), big, how=how)  # each side 3M rows: either builds
# dense distinct int32 build keys: the direct array holds them (every how, nulls on both
# sides); one repeated key, and two keys equal modulo its size, give it up for the table
dense = (torch.randperm(20_000, dtype=torch.int32) * 2 - 7000).cuda()
dense_valid = (torch.rand(20_000) > 0.1).cuda()
probe = torch.randint(-8000, 40_000, (30_000,), dtype=torch.int32).cuda()
for right in (dense, torch.cat([dense, dense[:1]]), torch.cat([dense, dense[:1] + 2**16])):
    for how in ("inner", "left", "right", "full", "semi", "anti"):
        gh.join(probe, right, how=how)
    gh.join(probe, dense, how="full", right_valid=dense_valid, nulls_equal=True)
# a build past the direct array's L2 limit: the ranked array holds dense distinct keys (from
# a negative base, nulls on both sides); one repeated key, and one key past its bits, give
# it up for the table
ranked = (torch.randperm(2_200_000, dtype=torch.int32) * 2 - 90_000).cuda()
ranked_valid = (torch.rand(2_200_000) > 0.1).cuda()
probe = torch.randint(-100_000, 4_500_000, (3_000_000,), dtype=torch.int32).cuda()
for right in (ranked, torch.cat([ranked, ranked[:1]]), torch.cat([ranked, ranked[:1] + 2**24])):
    for how in ("inner", "left", "full", "anti"):
        gh.join(probe, right, how=how)
    gh.join(probe, ranked, how="right", right_valid=ranked_valid, nulls_equal=True)
# one int32 column read directly, then refitted: its build holds the two largest values,
# each in 300 rows (groups the warp writes and marks)
extreme = torch.tensor([2**31 - 1, 5, 2**31 - 2, -(2**31)] * 300, dtype=torch.int32).cuda()
for how in ("inner", "full", "semi"):
    gh.JoinBuild(extreme).probe(extreme[::3], how=how)

device = torch.device("cuda")
ceilings._gather_rate(2**20, 2**16, device)
peers.seed_layouts(2**12, device, 1.0, runs=1)
torch.cuda.synchronize()

# CacheMap: every write mode, lookups, erase, and at full load with racing rows, entries moved
# to their other bucket (the first call starts empty) and evictions, some entries locked; the
# third and fifth: value rows of half the buckets in host memory, and growth from one bucket;
# the last two: rows past 32 bytes, which the evict launch copies a warp at a time
for width, shape, hbm in ((16, (3,), None), (128, (8,), None), (16, (4,), 4 * 16 * 16),
                         (16, (16,), None), (128, (16,), 4 * 128 * 64)):
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=shape,
                        capacity=8 * width, device="cuda", policy="custom", bucket_slots=width,
                        max_hbm_bytes=hbm, initial_capacity=width if hbm else None)
    keys = torch.randint(0, 5 * cache.max_capacity, (4 * cache.max_capacity,)).cuda()
    keys[:2] = torch.tensor([-1, -2])  # the reserved keys: refused
    values = torch.ones(keys.numel(), *shape).cuda()
    scores = torch.randint(0, 1000, keys.shape).cuda()
    status, _ = cache.insert_and_evict(keys, values, scores=scores)
    assert int(status[0]) == gh.REFUSED and len(cache) == cache.capacity
    cache.lock_keys(keys[: 2 * width].contiguous())  # locked entries: no move, no eviction
    cache.insert_or_assign(keys, values, scores=scores)
    cache.assign(keys, values, scores=scores)
    cache.accum_or_assign(keys, values, keys % 2 == 0, scores=scores)
    cache.find_or_insert(keys, init=2.0, scores=scores)
    cache.find(keys, update_scores=True)
    cache.find_index(keys)
    index, found = cache.find_index(keys)
    cache.values[index] = cache.values[index] + 1
    cache.export()
    cache.erase(keys[::3].contiguous())
    cache.unlock_keys(keys[: 2 * width].contiguous())
    torch.cuda.synchronize()
# the radix join (gpu-radix): 4- and 8-byte codes, a skewed partition left to the global
# table, repeated keys whose pairs pass the probe rows (a second launch), semi and full
for right in (torch.randint(0, 3000, (8000,)), torch.randint(0, 2**40, (8000,))):
    right[:4000] = 7
    left = torch.cat([right[:5000:50], torch.randint(0, 3000, (5000,))])
    for how in ("inner", "full", "semi"):
        sides = join_sides.sides(left.cuda(), right.cuda(), None, None)
        plan = _join_plan.plan_join(10_000, 8000, how=how, key_bytes=8, device=device,
                                    memory_budget=2**30)
        got = run_radix(*sides, plan, False)
        want = gh.join(left.cuda(), right.cuda(), how=how)
        if how == "semi":
            assert torch.equal(got.sort().values, want.sort().values)
        else:
            got, want = ((pair[0] + 1) * 2**31 + pair[1] + 1 for pair in (got, want))
            assert torch.equal(got.sort().values, want.sort().values), how
torch.cuda.synchronize()
# the group-by's reductions: shared-memory accumulators (few groups) and global ones (many),
# dropped rows, validity masks, NaN, every value type's sum / min / max
from gpuhash.groupby.cuda import engine as group_cuda  # noqa: E402

for groups in (7, 7000, 40_000):  # one shared window, two, global atomics
    codes = torch.randint(-1, groups, (20_000,)).cuda()
    valid = torch.rand(20_000).cuda() < 0.8
    for dtype in (torch.int8, torch.int32, torch.int64, torch.float32, torch.float64,
                  torch.bool):
        values = (torch.randint(-50, 50, (20_000,)) if not dtype.is_floating_point else
                  torch.randn(20_000)).to(dtype).cuda()
        for op in ("sum", "min", "max"):
            group_cuda.group_reduce(codes, 0, groups, values, valid, op)
            group_cuda.group_reduce(codes.int(), -1, groups + 1, values, None, op)
keys = [torch.randint(-3, 3, (20_000,), dtype=torch.int8).cuda(),
        torch.randint(0, 500, (20_000,), dtype=torch.int32).cuda(),
        torch.randint(-(2**40), 2**40, (20_000,)).cuda()]
lows = [int(k.min()) for k in keys]
spans = [int(k.max()) - low + 1 for k, low in zip(keys, lows)]
group_cuda.group_codes(keys, lows, spans, torch.int64)
group_cuda.group_codes(keys[:2], lows[:2], spans[:2], torch.int32)
# quantiles by selection and the fused comoments, windowed and global
for groups in (1, 300, 9000, 40_000):
    slot = torch.randint(0, groups + 1, (20_000,)).cuda()
    for dtype in (torch.int8, torch.int64, torch.float32, torch.float64):
        values = torch.randint(-4, 4, (20_000,)).to(dtype).cuda()
        group_cuda.group_quantile(slot, groups, values, 0.3)
    codes = torch.randint(-1, groups, (20_000,)).cuda()
    means = torch.randn(groups).double().cuda()
    group_cuda.group_comoments(codes, groups, torch.randn(20_000).cuda(),
                               torch.randn(20_000).cuda(), valid, means, means)
# string keys: hashes of strings of 0-20 bytes (the last word partial), the collision check
import pyarrow as _pa  # noqa: E402

from gpuhash.groupby import string_keys  # noqa: E402

words = [None if i % 97 == 0 else "w" * (i % 21) + str(i % 300) for i in range(20_000)]
strings = _pa.chunked_array([_pa.array(words[:7000]), _pa.array(words[7000:])])
coded = string_keys.string_codes(strings, torch.device("cuda"), ordered=True)
assert coded is not None
offsets, data = string_keys.upload_strings(strings, torch.device("cuda"))
hashes = group_cuda.string_hashes(offsets, data)
codes, _, first = group_cuda.group_compact(hashes)
assert group_cuda.string_mismatches(offsets, data, codes, first.roll(1)) > 0
torch.cuda.synchronize()
print("sanitize workload done")
