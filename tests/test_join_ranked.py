"""The ranked array a join build tries where a direct array would pass L2 (kernels/join_build.cuh:
gh_join_ranked_bits; build.direct_words): dense distinct keys, from any base, are held and
probed through it; repeated keys, keys past its bits and rows without a 32-bit code give it up
for the table, and every how and null rule gives the pairs of the table alone.

On the CPU the join never makes one (the dense table takes such keys there), and on a GPU only
builds past about 2M rows do, so the CPU tests let small builds take one (``ranked_anywhere``)
to run the CPU engine's twin of the kernels; the GPU tests compare the two engines' arrays byte
for byte and their joins, at a size whose ranks span many blocks of the launch."""

from __future__ import annotations

import pytest
import torch
from join_arrays import HOWS, arrays_anywhere, engine_build, pairs

import gpuhash as gh
from conftest import covering
from gpuhash.join import build as join_build
from gpuhash.join import build_arrays
from gpuhash.join import plan as _join_plan
from gpuhash.join.cpu import engine as cpu


@pytest.fixture
def ranked_anywhere(monkeypatch):
    """CPU joins through the hash table's path with a ranked array (no dense table, no direct
    array)."""
    arrays_anywhere(monkeypatch, ranked=True)


def without_arrays(monkeypatch, *args, **options):
    with monkeypatch.context() as patch:
        patch.setattr(join_build, "direct_words", lambda *_: (0, 0))
        return gh.join(*args, **options)


def holds(build: gh.JoinBuild) -> bool | None:
    """Whether the build's ranked array holds its rows (None: it has none)."""
    _, _, _, words, ranked = build._table._built
    return None if ranked is None else int(words[-1]) == 0


def dense_keys(rows: int, seed: int, base: int = -3000, dtype=torch.int32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randperm(rows, generator=generator) * 2 + base).to(dtype)


RIGHTS = {  # name -> (build keys, whether the array holds them)
    "distinct": (dense_keys(6000, 1), True),
    "repeated": (torch.cat([dense_keys(6000, 2), dense_keys(6000, 2)[:5]]), False),
    # 2**14 bits for 6,001 rows: a key 2**14 past the smallest is past them
    "past": (torch.cat([dense_keys(6000, 3), dense_keys(6000, 3).min(0, keepdim=True)[0]
                        + 2**15]), False),
    "spread": (dense_keys(6000, 4, base=2**30), True),  # far from zero: the base is its own
}


@pytest.mark.parametrize(("how", "right", "nulls"), covering(HOWS, list(RIGHTS), [False, True]))
def test_the_ranked_array_joins_as_the_table_does(how, right, nulls, ranked_anywhere,
                                                   monkeypatch):
    build, held = RIGHTS[right]
    generator = torch.Generator().manual_seed(HOWS.index(how))
    low = int(build.min())
    left = torch.randint(low - 3000, low + 16000, (20000,), generator=generator,
                         dtype=torch.int32)
    left[:50] = 2**31 - 1
    left_valid = torch.rand(20000, generator=generator) > 0.05 if nulls else None
    right_valid = torch.rand(build.shape[0], generator=generator) > 0.05 if nulls else None
    if nulls:  # the rows that give the array up, and the smallest key, are not null
        right_valid[:5] = right_valid[-5:] = True
        right_valid[build.argmin()] = True
    built = gh.JoinBuild(build, right_valid=right_valid)
    assert holds(built) is held
    for nulls_equal in ([False, True] if nulls else [False]):
        options = dict(how=how, left_valid=left_valid, right_valid=right_valid,
                       nulls_equal=nulls_equal)
        expected = pairs(without_arrays(monkeypatch, left, build, **options), how)
        got = pairs(gh.join(left, build, **options), how)
        assert got == expected and (how == "anti" or len(got) > 1000)
        got = built.probe(left, how=how, left_valid=left_valid, nulls_equal=nulls_equal)
        assert pairs(got, how) == expected


def test_the_twin_writes_bits_ranks_and_rows():
    """Codes 5, 9, 40 and 70 from rows 2, 0, 3 and 1 (base 5): bits 0, 4 in word 0, 35 in
    word 1, 65 in word 2; ranks 0, 2, 3; the rows in code order; the chunk's sum 0."""
    words = torch.zeros(4 + 1, dtype=torch.int64)
    ranked = torch.zeros(build_arrays.ranked_extra_words(4, 4), dtype=torch.int64)
    codes = torch.tensor([9, 70, 5, 40], dtype=torch.int32)
    assert cpu._ranked_build(words, ranked, codes, torch.ones(4, dtype=torch.bool), None)
    assert words.tolist() == [0b10001, (2 << 32) | 0b1000, (3 << 32) | 0b10, 4 << 32, 0]
    assert int(ranked[0]) == ~5 & 0xFFFFFFFF
    assert ranked[1:3].view(torch.int32).tolist() == [2, 0, 3, 1]
    found, rows = cpu._direct_matches(words, torch.tensor([70, 6, 5, 4, 200, 40]), ranked)
    assert found.tolist() == [0, 2, 5] and rows.tolist() == [1, 2, 3]
    again = torch.zeros_like(words)
    assert not cpu._ranked_build(again, ranked, torch.tensor([9, 9], dtype=torch.int32),
                                 torch.ones(2, dtype=torch.bool), None)
    assert int(again[-1]) == 1


def test_sizes_and_the_plan():
    assert build_arrays.ranked_words(10_000_000) == 2**25 // 32  # J4: codes below 2**25
    assert build_arrays.ranked_words(1_000_000) == 0  # a direct array in L2 instead
    assert build_arrays.ranked_words(3_000_000, code_span=40_000_000) == 1_250_000
    assert build_arrays.ranked_words(3_000_000, code_span=10**9) == 0  # wider than it allows
    assert build_arrays.ranked_words(14_000_000) > 0  # 8 + 56 MB
    assert build_arrays.ranked_words(17_000_000) == 0  # 16 + 68 MB: past L2 (J5 measured slower)
    # planned for the widest span a fitted encoder may bring: a word a row, up to 64 MB
    assert build_arrays.ranked_words(3_000_000, code_span=96_000_000) == 3_000_000
    words = (64 * 2**20 - 4 * 10_000_000) // 8
    assert (_join_plan.table_bytes(10_000_000, 4, direct=True)
            - _join_plan.table_bytes(10_000_000, 4)
            == 8 * (words + 1 + 1 + 5_000_000 + -(-words // 2048)))
    for rows in (5000, 3_000_000, 10_000_000, 16_000_000):
        planned = (_join_plan.table_bytes(rows, 4, direct=True)
                   - _join_plan.table_bytes(rows, 4))
        for span in (None, rows, 4 * rows, 32 * rows):
            entries = build_arrays.direct_entries(rows, span)
            words = build_arrays.ranked_words(rows, span)
            taken = (entries + 1 if entries else
                     words + 1 + build_arrays.ranked_extra_words(rows, words) if words else 0)
            assert 8 * taken <= planned, (rows, span)
    # builds whose direct array fits L2 keep to it or the table, whatever their span
    assert build_arrays.ranked_words(10_000, code_span=100_000) == 0
    plan = _join_plan.plan_join(100_000_000, 10_000_000, how="inner", key_bytes=4,
                                device=torch.device("cuda"), memory_budget=40 << 30)
    assert plan.parts == 1 and "ranked array of 33554432 bits" in plan.why


def test_the_array_is_only_tried_on_a_gpu():
    assert join_build.direct_words(join_build.build_encoder([dense_keys(3_000_000, 5)], None),
                              3_000_000, torch.device("cpu")) == (0, 0)
    assert join_build.direct_words(join_build.build_encoder([dense_keys(3_000_000, 5)], None),
                              3_000_000, torch.device("cuda"))[1] > 0


# --- the GPU ----------------------------------------------------------------------------
def _engine_build(device, keys, valid):
    """A build table and its ranked array filled by one engine: (table, words, ranked), the
    planner's rule for its size without the size limit (larger arrays than a join makes)."""
    count = 1 << ((2 * keys.shape[0] - 1).bit_length() - 5)
    return engine_build(device, keys, valid, count + 1,
                        build_arrays.ranked_extra_words(keys.shape[0], count))


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["distinct", "nulls", "repeated", "past"])
def test_both_engines_write_the_same_array_and_pairs(case):
    """20M build rows: 2**21 words of bits, 1,024 chunks, so the ranks take every block of
    the launch more than once and the one block's scan of the chunks runs four rounds."""
    rows = 20_000_000
    build = dense_keys(rows, 30, base=-12345)
    valid = None
    if case == "nulls":
        valid = torch.rand(rows, generator=torch.Generator().manual_seed(31)) > 0.1
    elif case == "repeated":
        build[-1] = build[7]
    elif case == "past":
        build[-1] = int(build.min()) + 2**26
    (cpu_table, cpu_words, cpu_ranked), (gpu_table, gpu_words, gpu_ranked) = (
        _engine_build(d, build, valid) for d in ("cpu", "cuda"))
    held = case in ("distinct", "nulls")
    assert int(cpu_words[-1]) == int(gpu_words[-1]) == (0 if held else 1)
    assert int(cpu_ranked[0]) == int(gpu_ranked[0])
    if held:  # a failed array's words depend on the order rows set them
        assert torch.equal(cpu_words, gpu_words.cpu())
        assert torch.equal(cpu_ranked, gpu_ranked.cpu())
    generator = torch.Generator().manual_seed(32)
    left = torch.randint(-20_000, 2 * rows, (3_000_000,), generator=generator,
                         dtype=torch.int32)
    left_valid = torch.rand(3_000_000, generator=generator) > 0.1
    for options in ({}, {"keep_unmatched": True}):
        answers = []
        for table in (cpu_table, gpu_table):
            marks = torch.zeros(rows, dtype=torch.uint8, device=table.device)
            probe, found = table.pairs([left.to(table.device)], left_valid.to(table.device),
                                       build_hit=marks, **options)
            order = torch.argsort(probe.cpu() * (rows + 1) + found.cpu())
            answers.append((probe.cpu()[order], found.cpu()[order], marks.cpu()))
        assert all(torch.equal(a, b) for a, b in zip(*answers, strict=True))


@pytest.mark.gpu
@pytest.mark.parametrize("how", HOWS)
def test_gpu_joins_through_the_ranked_array_match_the_cpu(how):
    generator = torch.Generator().manual_seed(40 + HOWS.index(how))
    right = dense_keys(2_500_000, 41, base=-777)  # the smaller side: the build of every how
    left = torch.randint(-10_000, 5_100_000, (3_000_000,), generator=generator,
                         dtype=torch.int32)
    left_valid = torch.rand(3_000_000, generator=generator) > 0.001
    right_valid = torch.rand(right.shape[0], generator=generator) > 0.001
    built = gh.JoinBuild(right.cuda(), right_valid=right_valid.cuda())
    assert holds(built) is True
    for nulls_equal in (False, True):
        options = dict(how=how, left_valid=left_valid, right_valid=right_valid,
                       nulls_equal=nulls_equal)
        expected = pairs(gh.join(left, right, **options), how)
        got = gh.join(left.cuda(), right.cuda(),
                      **{k: v.cuda() if isinstance(v, torch.Tensor) else v
                         for k, v in options.items()})
        assert pairs(got, how) == expected
        got = built.probe(left.cuda(), how=how, left_valid=left_valid.cuda(),
                          nulls_equal=nulls_equal)
        assert pairs(got, how) == expected
