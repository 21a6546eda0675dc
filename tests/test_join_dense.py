"""The CPU's array-indexed build side (_join_dense) against the hash table on the same inputs:
every how, distinct and repeated keys, nulls on either side and nulls_equal, probe keys out of
the build's range, int64 probes of int32 keys, uint32 keys, chunked probes; and where it is
chosen and where not."""

from __future__ import annotations

import pytest
import torch

import gpuhash as gh
from conftest import covering
from gpuhash.join import dense as _join_dense

HOWS = ["inner", "left", "right", "full", "semi", "anti"]


def pairs(result, how) -> list:
    if how in ("semi", "anti"):
        return sorted(result.tolist())
    return sorted(zip(*(r.tolist() for r in result), strict=True))


def both_ways(monkeypatch, *args, **options):
    """The join with the array allowed, then with the hash table forced; their pairs."""
    dense = gh.join(*args, **options)
    with monkeypatch.context() as patch:
        patch.setattr(_join_dense, "DENSE_MIN_ROWS", 1 << 62)
        hashed = gh.join(*args, **options)
    return dense, hashed


def chosen(right, valid=None) -> bool:
    from gpuhash.join.dense import DenseTable

    built = gh.JoinBuild(right, right_valid=valid)
    return isinstance(built._table, DenseTable)


@pytest.mark.parametrize(("how", "repeats", "nulls"), covering(HOWS, [1, 3], [False, True]))
def test_the_array_joins_as_the_hash_table_does(how, repeats, nulls, monkeypatch):
    generator = torch.Generator().manual_seed(HOWS.index(how) * 10 + repeats)
    rows = 6000 * repeats
    right = (torch.randperm(rows, generator=generator) // repeats * 3 // 2 - 5000).to(torch.int32)
    left = torch.randint(-9000, 20000, (30000,), generator=generator, dtype=torch.int32)
    left_valid = torch.rand(30000, generator=generator) > 0.03 if nulls else None
    right_valid = torch.rand(rows, generator=generator) > 0.03 if nulls else None
    assert chosen(right, right_valid)  # and the join builds on the right, the smaller side:
    assert gh.explain_join(left, right, how=how).build_side == "right"
    for nulls_equal in ([False, True] if nulls else [False]):
        dense, hashed = both_ways(monkeypatch, left, right, how=how, left_valid=left_valid,
                                  right_valid=right_valid, nulls_equal=nulls_equal)
        assert pairs(dense, how) == pairs(hashed, how)
    if not nulls:  # chunks of the probe side through one prepared array
        plan = gh.explain_join(left, right, how=how, memory_budget=1_100_000)
        assert plan.strategy == "hash-table-chunked", plan
        dense, hashed = both_ways(monkeypatch, left, right, how=how, memory_budget=1_100_000)
        assert pairs(dense, how) == pairs(hashed, how)


@pytest.mark.parametrize("how", ["inner", "left", "anti"])
def test_wider_probes_and_unsigned_keys(how, monkeypatch):
    generator = torch.Generator().manual_seed(5)
    right = torch.randperm(8000, generator=generator).to(torch.int32)
    wide = torch.randint(-2**40, 2**40, (5000,), generator=generator)
    wide[::2] = torch.randint(0, 8000, (2500,), generator=generator)  # half of them in range
    dense, hashed = both_ways(monkeypatch, wide, right, how=how)
    assert pairs(dense, how) == pairs(hashed, how) and len(pairs(dense, "semi" if how ==
                                                                  "anti" else how)) > 0
    top = 2**32 - 1  # uint32 keys at the top of their range (the hash table's reserved codes)
    right_u = torch.tensor([top - i for i in range(5000)], dtype=torch.int64).to(
        torch.uint32)
    left_u = torch.tensor([top - 2 * i for i in range(4000)], dtype=torch.int64).to(
        torch.uint32)
    assert chosen(right_u)
    dense, hashed = both_ways(monkeypatch, left_u, right_u, how=how)
    assert pairs(dense, how) == pairs(hashed, how)


def test_where_the_array_is_chosen():
    keys = torch.arange(5000, dtype=torch.int32)
    assert chosen(keys * _join_dense.DENSE_SPAN)  # a range of DENSE_SPAN x 5000 - 1 values
    assert not chosen(keys * (_join_dense.DENSE_SPAN + 1))  # past it
    assert not chosen(keys[:100])  # too few rows
    assert not chosen(keys.to(torch.int64))  # not one 32-bit column
    assert not chosen(keys, torch.arange(5000) < 100)  # too few non-null rows


def test_a_prepared_dense_build_is_reusable_and_reports_uniqueness():
    right = torch.arange(0, 20000, 2, dtype=torch.int32)
    built = gh.JoinBuild(right)
    assert built.unique
    for _ in range(2):
        left, found = built.probe(torch.tensor([4, 5, 19998, -2, 40000], dtype=torch.int32),
                                  how="left")
        assert sorted(zip(left.tolist(), found.tolist())) == [(0, 2), (1, -1), (2, 9999),
                                                              (3, -1), (4, -1)]
    assert not gh.JoinBuild(torch.cat([right, right[:10]])).unique
