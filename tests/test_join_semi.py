"""Semi and anti joins, whose probe writes the rows it returns (one (row, -1) a returned row)
so the host learns their count in the probe's one read: both engines on every build the
probe can meet (direct array, hash table, repeated build keys), with null rows, chunked
probes and prepared builds; and on a GPU no more synchronisations than an inner join."""

from __future__ import annotations

import warnings

import pytest
import torch

import gpuhash as gh

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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", ["semi", "anti"])
def test_semi_and_anti_rows_on_every_build(how, device):
    generator = torch.Generator().manual_seed(5)
    for name, build in _builds(generator):
        probe = torch.cat([build[:7_000], torch.randint(0, 2**31 - 3, (9_000,),
                                                          generator=generator,
                                                          dtype=torch.int32)])
        probe = probe[torch.randperm(probe.shape[0], generator=generator)]
        valid = torch.rand(probe.shape[0], generator=generator) > 0.1
        want = _reference(probe, build, valid, how)
        on = (probe.to(device), build.to(device), valid.to(device))
        for budget in (None, 50_000):  # whole, and the probe in chunks
            got = gh.join(on[0], on[1], how=how, left_valid=on[2], memory_budget=budget)
            assert sorted(got.cpu().tolist()) == want, (name, budget)
        prepared = gh.JoinBuild(on[1])
        assert sorted(prepared.probe(on[0], how=how, left_valid=on[2]).cpu().tolist()) == want


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["semi", "anti"])
def test_a_semi_or_anti_join_synchronises_as_often_as_an_inner_join(how):
    """Counted by torch's sync debug mode, which flags each implicit synchronisation (a
    nonzero, a read of a CUDA tensor): a semi or anti join of one int32 column makes no more
    of them than an inner join of the same keys, which reads its pair count once."""
    generator = torch.Generator().manual_seed(3)
    build = (torch.randperm(50_000, generator=generator).to(torch.int32) * 2).cuda()
    probe = torch.randint(0, 100_000, (80_000,), generator=generator,
                          dtype=torch.int32).cuda()

    def flagged(kind):
        gh.join(probe, build, how=kind)  # warm: compiles, plans and pools outside the count
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                gh.join(probe, build, how=kind)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return len(seen)

    assert flagged(how) <= flagged("inner")
