"""The direct array a join build tries before its hash table (kernels/join_build.cuh:
gh_join_direct_rows; build.direct_words): dense distinct keys are held and probed through it,
repeated keys, keys colliding modulo its size and rows without a 32-bit code give it up for the
table, and every how, null rule, chunked probe and refit gives the pairs of the table alone.

On the CPU the join never makes one (the dense table takes such keys there), so the CPU tests
let it, through ``direct_anywhere``, to run the CPU engine's twin of the kernels; the GPU tests
compare the two engines' arrays byte for byte and their joins."""

from __future__ import annotations

import pytest
import torch
from join_arrays import HOWS, arrays_anywhere, engine_build, pairs

import gpuhash as gh
from conftest import covering
from gpuhash.join import build as join_build
from gpuhash.join import build_arrays
from gpuhash.join import plan as _join_plan


@pytest.fixture
def direct_anywhere(monkeypatch):
    """CPU joins through the hash table's path with a direct array (no dense table)."""
    arrays_anywhere(monkeypatch, ranked=False)


def without_direct(monkeypatch, *args, **options):
    with monkeypatch.context() as patch:
        patch.setattr(join_build, "direct_words", lambda *_: (0, 0))
        return gh.join(*args, **options)


def holds(build: gh.JoinBuild) -> bool | None:
    """Whether the build's direct array holds its rows (None: it has none)."""
    direct = build._table._built[3]
    return None if direct is None else int(direct[-1]) == 0


def dense_keys(rows: int, seed: int, dtype=torch.int32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randperm(rows, generator=generator) * 2 - rows // 3).to(dtype)


RIGHTS = {  # name -> (build keys, whether the array holds them)
    "distinct": (dense_keys(6000, 1), True),
    "repeated": (torch.cat([dense_keys(6000, 2), dense_keys(6000, 2)[:5]]), False),
    # 2**14 entries for 6,001 rows: a key 2**15 above another takes its entry
    "colliding": (torch.cat([dense_keys(6000, 3), dense_keys(6000, 3)[:1] + 2**15]), False),
    # Direct32 cannot code the largest int32 value: the table refits an encoder, which
    # knows the span (wider than the rows allow) and tries no array
    "reserved": (torch.cat([dense_keys(6000, 4), torch.tensor([2**31 - 1], dtype=torch.int32)]),
                 False),
}


@pytest.mark.parametrize(("how", "right", "nulls"), covering(HOWS, list(RIGHTS), [False, True]))
def test_the_array_joins_as_the_table_does(how, right, nulls, direct_anywhere, monkeypatch):
    build, held = RIGHTS[right]
    generator = torch.Generator().manual_seed(HOWS.index(how))
    left = torch.randint(-5000, 14000, (20000,), generator=generator, dtype=torch.int32)
    left[:50] = 2**31 - 1
    left_valid = torch.rand(20000, generator=generator) > 0.05 if nulls else None
    right_valid = torch.rand(build.shape[0], generator=generator) > 0.05 if nulls else None
    if nulls:  # the rows that give the array up are not null
        right_valid[:5] = right_valid[-5:] = True
    built = gh.JoinBuild(build, right_valid=right_valid)
    assert holds(built) is held or (right == "reserved" and holds(built) is None)
    for nulls_equal in ([False, True] if nulls else [False]):
        options = dict(how=how, left_valid=left_valid, right_valid=right_valid,
                       nulls_equal=nulls_equal)
        expected = pairs(without_direct(monkeypatch, left, build, **options), how)
        assert pairs(gh.join(left, build, **options), how) == expected
        got = built.probe(left, how=how, left_valid=left_valid, nulls_equal=nulls_equal)
        assert pairs(got, how) == expected
    # the probe side in chunks through one array
    assert gh.explain_join(left, build, how=how, memory_budget=400_000).chunk_rows
    expected = pairs(without_direct(monkeypatch, left, build, how=how), how)
    assert pairs(gh.join(left, build, how=how, memory_budget=400_000), how) == expected


def test_wide_probes_unsigned_and_fitted_keys(direct_anywhere, monkeypatch):
    """An int64 probe of int32 keys, uint32 keys past 2**31, and int64 keys whose fitted
    encoder knows their span (its array covers the span exactly)."""
    generator = torch.Generator().manual_seed(9)
    cases = [
        (torch.randint(-2**40, 2**40, (8000,), generator=generator), dense_keys(5000, 5)),
        (torch.randint(2**31 - 9000, 2**31 + 9000, (8000,), generator=generator).to(
            torch.uint32), (dense_keys(5000, 6).to(torch.int64) + 2**31).to(torch.uint32)),
        (torch.randint(2**40, 2**40 + 12000, (8000,), generator=generator),
         dense_keys(5000, 7, torch.int64) + 2**40),
    ]
    cases[0][0][::2] = dense_keys(5000, 5)[:4000].to(torch.int64)
    for left, right in cases:
        assert holds(gh.JoinBuild(right))
        for how in ("inner", "left", "anti"):
            expected = pairs(without_direct(monkeypatch, left, right, how=how), how)
            got = pairs(gh.join(left, right, how=how), how)
            assert got == expected and (how == "anti" or len(got) > 1000)


def test_uniqueness_and_sizes(direct_anywhere):
    assert gh.JoinBuild(RIGHTS["distinct"][0]).unique
    assert not gh.JoinBuild(RIGHTS["repeated"][0]).unique
    assert gh.JoinBuild(RIGHTS["colliding"][0]).unique  # the table says so, not the array
    assert holds(gh.JoinBuild(dense_keys(4095, 8))) is None  # too few rows to try one
    # the planner counts the array for a GPU's join, and only there
    assert (_join_plan.table_bytes(6000, 4, direct=True) - _join_plan.table_bytes(6000, 4)
            == 8 * (build_arrays.direct_entries(6000) + 1) == 8 * (2**14 + 1))
    assert build_arrays.direct_entries(2**22) == 0  # 64 MB of entries: past L2
    assert build_arrays.direct_entries(6000, code_span=13000) == 2**14  # at most 2x the rows
    assert build_arrays.direct_entries(6000, code_span=20000) == 0  # wider


def test_the_array_is_only_tried_on_a_gpu():
    built = gh.JoinBuild(dense_keys(6000, 1).to(torch.int64))
    assert holds(built) is None


# --- the GPU ----------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("right", list(RIGHTS))
def test_both_engines_write_the_same_array_and_pairs(right):
    build, held = RIGHTS[right]
    generator = torch.Generator().manual_seed(list(RIGHTS).index(right))
    valid = torch.rand(build.shape[0], generator=generator) > 0.1
    valid[:5] = valid[-5:] = True  # the rows that give the array up are not null
    words = build_arrays.direct_entries(build.shape[0]) + 1
    (cpu, cpu_direct, _), (gpu, gpu_direct, _) = (engine_build(d, build, valid, words)
                                                  for d in ("cpu", "cuda"))
    assert int(cpu_direct[-1]) == int(gpu_direct[-1]) == (0 if held else 1)
    if held:  # a failed array's entries depend on the order rows claimed them
        assert torch.equal(cpu_direct, gpu_direct.cpu())
    left = torch.randint(-5000, 14000, (30000,), generator=generator, dtype=torch.int32)
    left_valid = torch.rand(30000, generator=generator) > 0.1
    for options in ({}, {"keep_unmatched": True}):
        answers = []
        for table in (cpu, gpu):
            marks = torch.zeros(build.shape[0], dtype=torch.uint8, device=table.device)
            probe, found = table.pairs([left.to(table.device)], left_valid.to(table.device),
                                       build_hit=marks, **options)
            answers.append((sorted(zip(probe.tolist(), found.tolist())), marks.tolist()))
        assert answers[0] == answers[1]
    assert torch.equal(cpu.matched([left], left_valid),
                       gpu.matched([left.cuda()], left_valid.cuda()).cpu())


@pytest.mark.gpu
@pytest.mark.parametrize("how", HOWS)
def test_gpu_joins_through_the_array_match_the_cpu(how):
    generator = torch.Generator().manual_seed(20 + HOWS.index(how))
    # (uint32 keys past 2**31, clear of the dtype's two largest values, which Direct32 cannot
    # code: those give the array up, as test_the_array_joins_as_the_table_does checks)
    for right, offset in ((dense_keys(300_000, 11), 0),
                          ((dense_keys(8000, 12).to(torch.int64) + 2**31).to(torch.uint32),
                           2**31),
                          (dense_keys(50_000, 13, torch.int64) + 2**40, 2**40)):
        left = torch.randint(-200_000, 700_000, (400_000,), generator=generator) + offset
        left = left.to(right.dtype)
        # few nulls: with nulls_equal every null pair is output
        left_valid = torch.rand(400_000, generator=generator) > 0.001
        right_valid = torch.rand(right.shape[0], generator=generator) > 0.001
        built = gh.JoinBuild(right.cuda(), right_valid=right_valid.cuda())
        assert holds(built) is True
        for nulls_equal in (False, True):
            expected = pairs(gh.join(left, right, how=how, left_valid=left_valid,
                                     right_valid=right_valid, nulls_equal=nulls_equal), how)
            got = gh.join(left.cuda(), right.cuda(), how=how, left_valid=left_valid.cuda(),
                          right_valid=right_valid.cuda(), nulls_equal=nulls_equal)
            assert pairs(got, how) == expected
            got = built.probe(left.cuda(), how=how, left_valid=left_valid.cuda(),
                              nulls_equal=nulls_equal)
            assert pairs(got, how) == expected


def test_the_cpu_twin_reads_rows_past_two_to_the_31():
    """An entry's row is the high half, unsigned: a build row past 2**31 reads back whole."""
    from gpuhash.join.cpu import engine as cpu

    direct = torch.zeros(2**12 + 1, dtype=torch.int64)
    row, code = 2**31 + 5, 77
    direct[code] = ((row + 1) << 32) - 2**64 + code  # the kernel's bits, as int64
    found, rows = cpu._direct_matches(direct, torch.tensor([3, code], dtype=torch.int32))
    assert found.tolist() == [1] and rows.tolist() == [row]


def test_a_gpu_plan_counts_each_parts_array():
    """Split by key hash, each part keeps the whole code span, so its array may be as large as
    its rows allow: the parts are sized with it (a CUDA plan needs no GPU to be made)."""
    budget = 1_500_000
    plan = _join_plan.plan_join(200_000, 40_000, how="inner", key_bytes=4,
                                device=torch.device("cuda"), memory_budget=budget)
    assert plan.strategy == "hash-partitioned"
    part = 40_000 // plan.parts + 1
    assert build_arrays.direct_entries(part) > 0
    assert _join_plan.table_bytes(part, 4, direct=True) <= budget // 2
    cpu = _join_plan.plan_join(200_000, 40_000, how="inner", key_bytes=4,
                               device=torch.device("cpu"), memory_budget=budget)
    assert cpu.parts < plan.parts  # no array there


def test_a_gpu_plan_says_it_tries_the_array():
    plan = _join_plan.plan_join(1_000_000, 100_000, how="inner", key_bytes=4,
                                device=torch.device("cuda"), memory_budget=2**30)
    assert "direct array of 262144 entries" in str(plan)
    cpu = _join_plan.plan_join(1_000_000, 100_000, how="inner", key_bytes=4,
                               device=torch.device("cpu"), memory_budget=2**30)
    assert "direct array" not in str(cpu)
