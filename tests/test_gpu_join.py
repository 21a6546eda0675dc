"""On a GPU, the join's CUDA engine against its CPU engine: random keys with nulls of every
width and how, one and two key columns, whole and under a tiny memory budget; the kernels'
other paths (wide keys as codes, reserved patterns, ranked arrays); and the probe kernel on
full buckets."""

from __future__ import annotations

import pytest
import torch
from join_cases import HOWS, as_pairs, make_keys

import gpuhash as gh
from gpuhash.join import build as join_build
from gpuhash.join.engine import engine_for as join_engine_for
from gpuhash.join.keys import BITS


def _cpu(result):
    return result.cpu() if isinstance(result, torch.Tensor) else tuple(t.cpu() for t in result)


def _cuda(keys):
    return tuple(k.cuda() for k in keys) if isinstance(keys, tuple) else keys.cuda()


@pytest.mark.gpu
@pytest.mark.parametrize("how", [h for h in HOWS if h != "cross"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint32, torch.uint64])
def test_cuda_engine_matches_cpu_engine(how, dtype):
    """CUDA against the CPU engine on random keys with nulls, one and two key columns, whole
    and under a tiny memory budget. (A cross join of these sides has 10**8 pairs, minutes of
    Python to compare, and no kernel of its own: test_cuda_edge_cases_match_cpu_engine joins
    small sides with every how.)"""
    generator = torch.Generator().manual_seed(HOWS.index(how) * 10 + BITS[dtype])
    for rows_l, rows_r, distinct in ((20_000, 5_000, 10_000), (3_000, 30_000, 200),
                                     (50, 40, 10)):
        def draw(rows, distinct=distinct):
            return torch.randint(0, distinct, (rows,), generator=generator).to(dtype)

        valid = torch.rand(rows_l, generator=generator) > 0.1
        single = (draw(rows_l), draw(rows_r))
        def small(rows):  # values 0-2 (torch has no remainder for uint32 on the CPU)
            return (draw(rows).to(torch.int64) % 3).to(dtype)

        double = ((single[0], small(rows_l)), (single[1], small(rows_r)))
        for left, right in (single, double):
            expected = as_pairs(gh.join(left, right, how=how, left_valid=valid,
                                        nulls_equal=True), how)
            for budget in (None, 20_000):
                got = gh.join(_cuda(left), _cuda(right), how=how, left_valid=valid.cuda(),
                              nulls_equal=True, memory_budget=budget)
                assert as_pairs(_cpu(got), how) == expected, budget


@pytest.mark.gpu
def test_cuda_edge_cases_match_cpu_engine():
    """The kernels' other code paths: wide keys used as codes, reserved patterns (ranked),
    empty and all-null sides, one key in half the rows, many pairs per probe row (the output
    sized by a second run), unsigned 32-bit keys past 2**31."""
    top = 2**63 - 1
    cases = [
        (torch.tensor([-2, 5, top, 7, -1, -1]), torch.tensor([-1, -2, top, -(2**63), 5])),
        (torch.tensor([top, 0, 3]), torch.tensor([-(2**63), top, 3])),
        (torch.zeros(0, dtype=torch.int32), torch.tensor([1, 2], dtype=torch.int32)),
        (torch.tensor([1, 2], dtype=torch.int32), torch.zeros(0, dtype=torch.int32)),
        (torch.where(torch.arange(20_000) % 2 == 0, 7, torch.arange(20_000)),
         torch.cat([torch.full((30,), 7), torch.arange(100, 2000)])),
        (torch.randint(0, 50, (40_000,)), torch.randint(0, 50, (3_000,))),
        (make_keys([2**32 - 3, 2**31, 5, 2**31 + 7], torch.uint32),
         make_keys([2**31, 2**32 - 3, 9], torch.uint32)),
        # the two largest values of each 32-bit dtype: a direct build refits
        (make_keys([2**31 - 1, 4, 2**31 - 2, -(2**31)], torch.int32),
         make_keys([2**31 - 2, -(2**31), 2**31 - 1, 4], torch.int32)),
        (make_keys([2**32 - 1, 0, 2**32 - 2], torch.uint32),
         make_keys([2**32 - 2, 2**32 - 1, 1], torch.uint32)),
    ]
    for left, right in cases:
        for how in HOWS:
            expected = as_pairs(gh.join(left, right, how=how), how)
            got = gh.join(left.cuda(), right.cuda(), how=how)
            assert as_pairs(_cpu(got), how) == expected, (how, left[:5], right[:5])
            # a prepared build probes on its device whatever the sizes (no CPU detour)
            got = gh.JoinBuild(right.cuda()).probe(left.cuda(), how=how)
            assert as_pairs(_cpu(got), how) == expected, (how, left[:5], right[:5])
    nulls = torch.tensor([False, False])
    keys = torch.tensor([1, 2], dtype=torch.int32)
    for equal in (False, True):
        expected = as_pairs(gh.join(keys, keys, how="full", left_valid=nulls,
                                    right_valid=nulls, nulls_equal=equal), "full")
        got = gh.JoinBuild(keys.cuda(), right_valid=nulls.cuda()).probe(
            keys.cuda(), how="full", left_valid=nulls.cuda(), nulls_equal=equal)
        assert as_pairs(_cpu(got), "full") == expected


def _probe_both(table, probe, valid, code=(0, 0, 0), **options):
    """The join engine's probe of one table's bytes on the CPU and the CUDA engine: each engine's
    pairs as a sorted list, and its build_hit / probe_hit masks when asked for. ``code``:
    how a probe value becomes a key code (shape, low, high; 0: the column holds codes)."""
    answers = []
    on_gpu = table.to("cuda")
    on_gpu._state.join_groups = tuple(t.cuda() for t in table._state.join_groups)
    for t in (table, on_gpu):
        device = t._state.slots.device
        flags = {name: v for name, v in options.items() if name == "keep_unmatched"}
        marks = {name: torch.zeros(options[name][0], dtype=options[name][1], device=device)
                 for name in options if name not in flags}
        probe_rows, build_rows, unplaced, _ = join_engine_for(t.device).probe(
            t._state, probe.to(device), None if valid is None else valid.to(device), *code,
            **flags, **marks)
        pairs = sorted(zip(probe_rows.tolist(), build_rows.tolist()))
        answers.append((pairs, unplaced, {k: v.cpu().tolist() for k, v in marks.items()}))
    return answers


@pytest.mark.gpu
@pytest.mark.parametrize("key_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("value_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("load", [0.5, 0.9, 0.97])
@pytest.mark.parametrize("together", [False, True])
def test_join_probe_kernel_matches_cpu_engine_on_full_buckets(key_dtype, value_dtype, load,
                                                             together, monkeypatch):
    """The probe kernel's paths, against the CPU engine over the same table bytes (built by
    the CPU engine's build): first buckets read by the warp together (the code or
    none, the bucket with room or full with the key's filter bit clear; forced here, the
    engine does it for tables past L2), the lane's own walk (codes past the first bucket),
    groups of rows (codes held by several rows), keys and values that need all 64 bits, keys
    next to the reserved patterns and the patterns themselves, a probe column wider than the
    table's keys, and a last warp of fewer than 32 rows. Loads 0.5 / 0.9 / 0.97 give every
    slot layout and bucket width a join table can have (packed and pair slots, 4- and 8-slot
    buckets)."""
    from gpuhash.join.cuda import engine as cuda

    monkeypatch.setattr(cuda, "_past_l2", lambda spec: together)
    generator = torch.Generator().manual_seed(int(load * 100) + BITS[key_dtype] + BITS[value_dtype])
    capacity = 4_000
    table = gh.MultiMap(key_dtype=key_dtype, value_dtype=value_dtype, capacity=capacity,
                        max_load_factor=load, growable=False)
    rows = int(capacity * 0.98)
    # 64-bit keys with their high half in use: a 32-bit compare would match k with k + 2**32
    # and take 0x1_ffffffff for an EMPTY slot
    edge = [2**32 + 5, 5, 0x1_FFFFFFFF, 0x1_FFFFFFFE] if key_dtype == torch.int64 else [-3, 5]
    keys = torch.cat([torch.tensor(edge),
                      torch.randint(0, 300, (rows // 4,), generator=generator),
                      torch.randint(0, 2**30, (rows - rows // 4 - len(edge),),
                                    generator=generator)])
    groups = torch.zeros(join_build.group_words(table._state.spec), dtype=torch.int64)
    join_engine_for(table.device).build(table._state, keys.to(key_dtype), None, 0, 0, 0,
                                   groups=groups)
    assert int(groups[0]) > 0  # some codes are groups
    # 64-bit build rows past 2**32 (a value cut to 32 bits would show) for the codes of one
    # row; build_hit indexes by build row, so it runs on the 32-bit tables only
    offset = 2**33 if value_dtype == torch.int64 else 0
    values = table._state.value_view()
    values += torch.where(values >= 0, offset, 0).to(values.dtype)
    probe = torch.cat([keys[torch.randperm(rows, generator=generator)],
                       torch.randint(0, 2**30, (3_000,), generator=generator),
                       torch.tensor([-1, -2, 7, 2**32 + 6])]).to(key_dtype)
    valid = torch.rand(probe.shape[0], generator=generator) > 0.05
    marks = [{"build_hit": (rows, torch.uint8)}] if not offset else []
    for options in ({}, {"keep_unmatched": True}, {"probe_hit": (probe.shape[0], torch.bool)},
                    *marks):
        for v in (None, valid):
            cpu, cuda = _probe_both(table, probe, v, **options)
            assert cuda == cpu, (options, v is None)
    if key_dtype == torch.int32:  # an int64 column probing 32-bit codes: code = value - low
        wide = torch.cat([probe.to(torch.int64) + 10, torch.tensor([2**40, -(2**40)])])
        cpu, cuda = _probe_both(table, wide, None, code=(1, 10, 2**32 + 7), keep_unmatched=True)
        assert cuda == cpu
    spec = table._state.spec
    assert spec.bucket_slots == (8 if load > 0.75 and spec.words_per_slot == 1 or load > 0.95
                                 else 4)
