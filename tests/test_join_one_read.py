"""Joins whose one probe tells the host everything in one read: semi and anti (the probe
writes the rows they return, one (row, -1) a row) and right and full (the build rows no
probe row met, compacted on the device and counted beside the pairs). Both engines on every
build the probe can meet (direct array, hash table, repeated build keys), with null rows,
chunked probes and prepared builds; and on a GPU no more synchronisations than an inner
join."""

from __future__ import annotations

import warnings

import pytest
import torch

import gpuhash as gh
from conftest import SLOW

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _reference(left, right, valid, how):
    """Rows of ``left`` with (semi) or without (anti) a key in ``right``, nulls matching
    nothing."""
    present = set(right.tolist())
    hit = [bool(ok) and k in present for k, ok in zip(left.tolist(), valid.tolist())]
    return [r for r, h in enumerate(hit) if h == (how == "semi")]


def _builds(generator):
    """(name, build keys): dense distinct int32 (the direct array on a GPU), sparse distinct
    (the hash table), and keys repeated 1-40 times (groups)."""
    dense = torch.randperm(20_000, generator=generator).to(torch.int32) * 2
    sparse = torch.randint(0, 2**31 - 3, (20_000,), generator=generator, dtype=torch.int32)
    repeated = torch.randint(0, 2_000, (30_000,), generator=generator, dtype=torch.int32)
    return [("dense", dense), ("sparse", sparse.unique()), ("repeated", repeated)]


def _probe_of(build, shared, others, generator):
    """The first ``shared`` build keys and ``others`` random ones, as probe keys."""
    random = torch.randint(0, 2**31 - 3, (others,), generator=generator, dtype=torch.int32)
    return torch.cat([build[:shared], random])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", ["semi", "anti"])
def test_semi_and_anti_rows_on_every_build(how, device):
    generator = torch.Generator().manual_seed(5)
    for name, build in _builds(generator):
        probe = _probe_of(build, 7_000, 9_000, generator)
        probe = probe[torch.randperm(probe.shape[0], generator=generator)]
        valid = torch.rand(probe.shape[0], generator=generator) > 0.1
        want = _reference(probe, build, valid, how)
        on = (probe.to(device), build.to(device), valid.to(device))
        for budget in (None, 50_000):  # whole, and the probe in chunks
            got = gh.join(on[0], on[1], how=how, left_valid=on[2], memory_budget=budget)
            assert sorted(got.cpu().tolist()) == want, (name, budget)
        prepared = gh.JoinBuild(on[1])
        assert sorted(prepared.probe(on[0], how=how, left_valid=on[2]).cpu().tolist()) == want


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", ["right", pytest.param("full", marks=SLOW)])
def test_right_and_full_keep_every_unmatched_build_row_on_every_build(how, device):
    generator = torch.Generator().manual_seed(9)
    for name, build in _builds(generator):
        # more probe rows than build rows: the right side is the one built and kept
        probe = _probe_of(build, 10_000, 25_000, generator)
        valid = torch.rand(probe.shape[0], generator=generator) > 0.1
        present = {}
        for row, key in enumerate(build.tolist()):
            present.setdefault(key, []).append(row)
        want = [(p, b) for p, (k, ok) in enumerate(zip(probe.tolist(), valid.tolist()))
                for b in (present.get(k, []) if ok else [])]
        met = {b for _, b in want}
        want += [(-1, b) for b in range(build.shape[0]) if b not in met]
        if how == "full":
            hit = {p for p, _ in want if p >= 0}
            want += [(p, -1) for p in range(probe.shape[0]) if p not in hit]
        for budget in (None, 50_000):
            got = gh.join(probe.to(device), build.to(device), how=how,
                          left_valid=valid.to(device), memory_budget=budget)
            pairs = sorted(zip(got[0].cpu().tolist(), got[1].cpu().tolist()))
            assert pairs == sorted(want), (name, budget)


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["semi", "anti", "left", "right", "full"])
def test_one_column_joins_synchronise_as_often_as_an_inner_join(how):
    """Counted by torch's sync debug mode, which flags each implicit synchronisation (a
    nonzero, a read of a CUDA tensor): a semi, anti, left, right or full join of one int32
    column makes no more of them than an inner join of the same keys, which reads its pair
    count once."""
    generator = torch.Generator().manual_seed(3)
    build = (torch.randperm(50_000, generator=generator).to(torch.int32) * 2).cuda()
    probe = torch.randint(0, 100_000, (80_000,), generator=generator,
                          dtype=torch.int32).cuda()

    assert _flagged(probe, build, how) <= _flagged(probe, build, "inner")


def _flagged(probe, build, how, **options):
    """The synchronisations torch's sync debug mode flags in one gh.join."""
    gh.join(probe, build, how=how, **options)  # warm: compiles, plans and pools uncounted
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            gh.join(probe, build, how=how, **options)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return len(seen)


@pytest.mark.gpu
def test_a_wide_key_column_adds_one_read_its_range():
    """Full-range int64 keys are coded by the build side's range and whether it holds a
    reserved value, learnt in one read: one more than a 32-bit column needs."""
    generator = torch.Generator().manual_seed(4)
    wide = torch.randint(-(2**63), 2**63 - 1, (50_000,), generator=generator).cuda()
    narrow = (torch.randperm(50_000, generator=generator).to(torch.int32) * 2).cuda()
    assert _flagged(wide[:30_000], wide, "inner") <= _flagged(narrow[:30_000], narrow,
                                                               "inner") + 1


@pytest.mark.gpu
def test_two_key_columns_with_null_rows_add_one_read_their_ranges():
    """Every key column's range, null build rows left out without dropping them first,
    comes back in one read: two int32 columns with a validity mask on the build side take
    one synchronisation more than one column without (each column's own read, and a
    masked_select each, would take four more)."""
    generator = torch.Generator().manual_seed(6)
    narrow = (torch.randperm(50_000, generator=generator).to(torch.int32) * 2).cuda()
    second = torch.randint(0, 5, (50_000,), generator=generator, dtype=torch.int32).cuda()
    valid = (torch.rand(50_000, generator=generator) > 0.1).cuda()

    one = _flagged(narrow, narrow[:30_000], "inner")
    # the right side, smaller, is built: its null rows are masked
    two = _flagged((narrow, second), (narrow[:30_000], second[:30_000]), "inner",
                   right_valid=valid[:30_000])
    assert two <= one + 1
