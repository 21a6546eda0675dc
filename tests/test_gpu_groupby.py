"""The group-by on a GPU against its CPU engine on fresh random inputs: the reductions byte
for byte (sums of floats to rounding), and every aggregation of gh.groupby and gh.factorize on
CUDA tensors and on host tables. Marked gpu."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from compaction_cases import FIRST_BATCH, assert_numbered_by_first_row, compaction_cases

import gpuhash as gh
from gpuhash.groupby.cpu import engine as cpu_engine
from gpuhash.groupby.cuda import engine as cuda_engine

pytestmark = pytest.mark.gpu

DTYPES = [torch.int8, torch.uint8, torch.bool, torch.int16, torch.int32, torch.int64,
          torch.float32, torch.float64]
AGGS = ["count", "size", "sum", "mean", "min", "max", "var", "std", "median", "first", "last",
        "nunique", ("quantile", 0.7)]


# shared windows: one (up to 6,144 groups), two, four; none (global atomics)
@pytest.mark.parametrize("groups", [1, 100, 256, 257, 1024, 1025, 7000, 20_000, 300_000])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "min", "max"])
def test_group_reduce_matches_the_cpu_engine(groups, dtype, op):
    rows = 200_000
    codes = torch.randint(-1, groups, (rows,))
    if dtype.is_floating_point:
        values = torch.randn(rows).to(dtype)
        values[::17] = float("nan")
    else:
        values = torch.randint(-100, 100, (rows,)).to(dtype)
    valid = torch.rand(rows) < 0.9
    for mask in (None, valid):
        want = cpu_engine.group_reduce(codes, 0, groups, values, mask, op)
        got = cuda_engine.group_reduce(codes.cuda(), 0, groups, values.cuda(),
                                       None if mask is None else mask.cuda(), op)
        assert torch.equal(got[1].cpu(), want[1]) and torch.equal(got[2].cpu(), want[2])
        if got[0].dtype.is_floating_point and op == "sum":
            torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-12, atol=1e-9)
        else:
            assert torch.equal(got[0].cpu(), want[0]), op


@pytest.mark.parametrize("seed", range(4))
def test_groupby_on_cuda_tensors_matches_the_cpu(seed):
    rng = np.random.default_rng(seed)
    rows = 50_000
    groups = [3, 700, 40_000, 10**12][seed]
    data = {"k": torch.from_numpy(rng.integers(0, groups, rows)),
            "k2": torch.from_numpy(rng.integers(0, 3, rows).astype(np.int32)),
            "v": torch.from_numpy(rng.normal(size=rows)),
            "w": torch.from_numpy(rng.integers(-9, 9, rows).astype(np.int32))}
    aggs = {"v": AGGS + [("corr", "w")], "w": ["sum", "min", "max", "nunique", "mean"]}
    for by in (["k"], ["k", "k2"]):
        want = gh.groupby(data, by, aggs, sort=True)
        got = gh.groupby({n: t.cuda() for n, t in data.items()}, by, aggs, sort=True)
        assert list(got) == list(want)
        for name in want:
            torch.testing.assert_close(got[name].cpu(), want[name], rtol=1e-9, atol=1e-9,
                                       equal_nan=True, check_dtype=True)
        top = gh.groupby({n: t.cuda() for n, t in data.items()}, by, {"v": ("top_k", 3)},
                         sort=True)
        want_top = gh.groupby(data, by, {"v": ("top_k", 3)}, sort=True)
        for name in want_top:
            assert torch.equal(top[name].cpu(), want_top[name])


def test_host_tables_on_the_gpu_match_the_cpu_engine():
    rng = np.random.default_rng(5)
    rows = 30_000
    table = pa.table({"s": pa.array([f"k{i}" for i in rng.integers(0, 50, rows)],
                                    mask=rng.random(rows) < 0.05),
                      "v": pa.array(rng.normal(size=rows), mask=rng.random(rows) < 0.1)})
    aggs = {"v": ["sum", "mean", "max", "median", "count", "size"], "s": ["min"]}
    want = gh.groupby(table, "s", aggs, sort=True, device="cpu")
    got = gh.groupby(table, "s", aggs, sort=True, device="cuda")
    assert got.column_names == want.column_names
    for name in want.column_names:
        a, b = got.column(name).to_pylist(), want.column(name).to_pylist()
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert (x is None and y is None) or x == pytest.approx(y, rel=1e-9), name


def test_factorize_on_cuda_matches_the_cpu():
    keys = torch.randint(-(2**40), 2**40, (100_000,))
    keys[::3] = 5
    for sort in (False, True):
        ids, uniques = gh.factorize(keys, sort=sort)
        got_ids, got_uniques = gh.factorize(keys.cuda(), sort=sort)
        assert torch.equal(got_ids.cpu(), ids) and torch.equal(got_uniques.cpu(), uniques)


def test_group_codes_match_the_cpu_engine():
    columns = [torch.randint(-5, 5, (70_000,), dtype=torch.int8),
               torch.randint(-300, 300, (70_000,), dtype=torch.int16),
               torch.randint(0, 10**6, (70_000,), dtype=torch.int32),
               torch.randint(-(2**20), 2**20, (70_000,), dtype=torch.int64)]
    lows = [int(c.min()) for c in columns]
    spans = [int(c.max()) - low + 1 for c, low in zip(columns, lows)]
    for dtype, used in ((torch.int64, columns), (torch.int32, columns[:2])):
        want = cpu_engine.group_codes(used, lows, spans, dtype)
        got = cuda_engine.group_codes([c.cuda() for c in used], lows, spans, dtype)
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("groups", [3, 5000, 9000, 40_000])  # comoment windows: 1, 2, 3, none
def test_group_sort_comoments_and_compact_match_the_cpu_engine(groups):
    rows = 60_000
    slot = torch.randint(0, groups + 1, (rows,))  # groups: the rows left out
    values = torch.randn(rows)
    for descending in (False, True):
        want = cpu_engine.group_sort(slot, groups, values, descending=descending)
        got = cuda_engine.group_sort(slot.cuda(), groups, values.cuda(), descending=descending)
        for a, b in zip(got, want):
            assert torch.equal(a.cpu(), b)
    codes = torch.randint(-1, groups, (rows,))
    other = torch.randn(rows).double()
    use = torch.rand(rows) < 0.8
    means = torch.randn(groups).double(), torch.randn(groups).double()
    small = torch.randint(-9, 9, (rows,), dtype=torch.int32)
    pairs = ((values, other), (small, small.flip(0)), (small.long(), small.long()),
             (values, values))  # mixed dtypes (as float64), and each dtype read as it is
    for first, second in pairs:
        for mask in (use, None):
            want = cpu_engine.group_comoments(codes, groups, first, second, mask, *means)
            got = cuda_engine.group_comoments(
                codes.int().cuda(), groups, first.cuda(), second.cuda(),
                None if mask is None else mask.cuda(), *(m.cuda() for m in means))
            for a, b in zip(got, want):
                torch.testing.assert_close(a.cpu(), b, rtol=1e-10, atol=1e-9)
    keys = torch.randint(-(2**40), 2**40, (rows,))
    keys[::2] = 7
    for engine, where in ((cpu_engine, "cpu"), (cuda_engine, "cuda")):
        numbered, uniques, first = engine.group_compact(keys.to(where))
        if first is not None:  # numbered by first appearance, each code's first row given
            assert_numbered_by_first_row(keys, numbered.cpu(), uniques.cpu(), first.cpu())
        else:
            assert torch.equal(uniques[numbered].cpu(), keys)
            assert uniques.unique().shape == uniques.shape


@pytest.mark.parametrize("groups", [1, 50, 5000, 200_000])
@pytest.mark.parametrize("dtype", DTYPES)
def test_group_quantile_matches_the_cpu_engine(groups, dtype):
    """The selection kernel against the CPU engine's sorted runs, to the bit: ties (few
    distinct values), empty groups, the rows left out, one group of every row."""
    rows = 300_000
    slot = torch.randint(0, groups + 1, (rows,))  # groups: the rows left out
    if dtype.is_floating_point:
        values = torch.randn(rows).to(dtype)
        values[::5] = values[::5].round()  # ties, -0.0 beside 0.0
    else:
        values = torch.randint(-3 if dtype != torch.uint8 else 0, 4, (rows,)).to(dtype)
    for q in (0.0, 0.25, 0.5, 0.7, 1.0):
        want = cpu_engine.group_quantile(slot, groups, values, q)
        got = cuda_engine.group_quantile(slot.cuda(), groups, values.cuda(), q)
        assert torch.equal(got[1].cpu(), want[1])
        assert torch.equal(got[0].cpu(), want[0]), (q, dtype)


def test_a_kernel_launched_with_less_shared_memory_still_takes_more_later():
    """The dynamic shared-memory limit only rises: many groups, few, many again on one
    kernel (a smaller launch once lowered the limit under the next larger one)."""
    values = torch.randint(0, 9, (50_000,), dtype=torch.int32)
    for groups in (7000, 100, 7000, 20_000, 3):
        codes = torch.randint(0, groups, (50_000,), dtype=torch.int32)
        want = cpu_engine.group_reduce(codes, 0, groups, values, None, "sum")
        got = cuda_engine.group_reduce(codes.cuda(), 0, groups, values.cuda(), None, "sum")
        assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[2].cpu(), want[2])


@pytest.mark.parametrize("case", list(compaction_cases()))
def test_group_compact_in_batches(monkeypatch, case):
    monkeypatch.setattr(cuda_engine, "COMPACT_BATCH", FIRST_BATCH)
    keys = compaction_cases()[case]
    codes, uniques, first = cuda_engine.group_compact(keys.cuda())
    assert_numbered_by_first_row(keys, codes.cpu(), uniques.cpu(), first.cpu())
