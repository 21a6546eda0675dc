"""A join build stores each key code once; the rows of a code held by several build rows form
a group (the join engine's build; join/kernels/join_build.cuh: gh_join_group_rows), so a key
held many times costs neither the build nor the probe a walk past its copies. Every how, nulls,
both key widths and heavy skew against a pandas reference, on either engine, and the GPU
engine against the CPU engine."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

import gpuhash as gh
from gpuhash.join import dense as _join_dense

HOWS = ["inner", "left", "right", "full", "semi", "anti"]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def reference(left, right, left_valid, right_valid, how):
    """The pairs pandas gives (nulls never match), sorted; semi / anti: the left rows."""
    lf = pd.DataFrame({"k": left.tolist(), "l": range(left.shape[0])})[left_valid.tolist()]
    rf = pd.DataFrame({"k": right.tolist(), "r": range(right.shape[0])})[right_valid.tolist()]
    inner = lf.merge(rf, on="k")
    if how in ("semi", "anti"):
        hit = set(inner["l"])
        return sorted(i for i in range(left.shape[0]) if (i in hit) == (how == "semi"))
    pairs = list(zip(inner["l"], inner["r"], strict=True))
    if how in ("left", "full"):
        pairs += [(i, -1) for i in sorted(set(range(left.shape[0])) - set(inner["l"]))]
    if how in ("right", "full"):
        pairs += [(-1, j) for j in sorted(set(range(right.shape[0])) - set(inner["r"]))]
    return sorted(pairs)


def got(result, how):
    if how in ("semi", "anti"):
        return sorted(result.cpu().tolist())
    return sorted(zip(*(r.cpu().tolist() for r in result), strict=True))


def skewed(rows: int, hot_share: float, seed: int, dtype=torch.int64):
    """Keys of ``rows`` rows, ``hot_share`` of them one key, the rest from a few hundred."""
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randint(-300, 300, (rows,), generator=generator)
    keys[torch.rand(rows, generator=generator) < hot_share] = 7
    valid = torch.rand(rows, generator=generator) > 0.05
    return keys.to(dtype), valid


@pytest.fixture
def table_path(monkeypatch):
    """Joins through the hash table (the CPU's dense table would take these small ranges)."""
    monkeypatch.setattr(_join_dense, "DENSE_MIN_ROWS", 1 << 62)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_grouped_builds_match_pandas(device, how, dtype, table_path):
    for seed, (build_rows, share) in enumerate(((3000, 0.5), (2000, 0.0), (50, 0.9))):
        right, right_valid = skewed(build_rows, share, seed, dtype)
        left, left_valid = skewed(700, 0.2, seed + 10, dtype)
        result = gh.join(left.to(device), right.to(device), how=how,
                         left_valid=left_valid.to(device), right_valid=right_valid.to(device))
        assert got(result, how) == reference(left, right, left_valid, right_valid, how), seed


@pytest.mark.parametrize("device", DEVICES)
def test_unique_counts_the_repeated_rows(device, table_path):
    keys = torch.arange(5000).to(device)
    assert gh.JoinBuild(keys).unique
    repeated = keys.clone()
    repeated[4999] = 17
    assert not gh.JoinBuild(repeated).unique
    # a null repeat is no repeat
    valid = torch.ones(5000, dtype=torch.bool, device=device)
    valid[4999] = False
    assert gh.JoinBuild(repeated, right_valid=valid).unique


@pytest.mark.parametrize("device", DEVICES)
def test_one_key_in_most_build_rows_is_found_for_every_probe_row(device, table_path):
    """A key held by 60,000 of 100,000 build rows: stored as copies, each copy walked past the
    others; grouped, each row is claimed once."""
    right = torch.arange(100_000)
    right[::5] = right[1::5] = right[2::5] = 3
    left = torch.tensor([3, 4, 3, 100_001, 99_999])
    left_rows, right_rows = gh.JoinBuild(right.to(device)).probe(left.to(device), how="left")
    expected = sorted([(0, int(j)) for j in (right == 3).nonzero().squeeze(1)]
                      + [(2, int(j)) for j in (right == 3).nonzero().squeeze(1)]
                      + [(1, 4), (3, -1), (4, 99_999)])
    assert sorted(zip(left_rows.tolist(), right_rows.tolist(), strict=True)) == expected


@pytest.mark.gpu
@pytest.mark.parametrize("how", HOWS)
def test_gpu_grouped_probes_match_the_cpu_engine_at_scale(how):
    """Past L2 (the warp's first-bucket reads) with groups of one to 200,000 rows: a lane
    writes (and marks) the rows of groups below 32 rows, the warp those of larger ones."""
    generator = torch.Generator().manual_seed(HOWS.index(how))
    right = torch.randint(10, 2_000_000, (3_000_000,), generator=generator)
    right[:200_000] = 5
    right[200_000:260_000] = torch.arange(6_000).repeat(10)
    right[260_000:260_032] = 8
    right[260_032:260_063] = 9
    right = right[torch.randperm(right.shape[0], generator=generator)]
    left = torch.cat([torch.randint(0, 4_000_000, (1_000_000,), generator=generator),
                      torch.tensor([5, 5, 6, 8, 9, 8])])
    cpu = gh.join(left, right, how=how)
    cuda = gh.join(left.cuda(), right.cuda(), how=how)
    assert got(cuda, how) == got(cpu, how)
