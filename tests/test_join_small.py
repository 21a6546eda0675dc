"""The commonest gh.join call in fewer steps (_join_small.small_join): it must be taken where it
claims to be (int32 torch tensors on one GPU, no option, inner / left / semi / anti, one table
probed at once), give the general path's answer there for every kind of build side (a direct
array, a hash table, repeated keys whose pairs outnumber the probe rows, a key that makes the
table refit), and decline everything else."""

from __future__ import annotations

import importlib

import pytest
import torch
from join_arrays import pairs

import gpuhash as gh
from gpuhash import _join_small

join = importlib.import_module("gpuhash.join")  # the module: gh.join is the function


def _sides(kind: str, seed: int, *, build_rows: int = 30000, probe_rows: int = 50000):
    """(left, right) int32 keys; right is the build side where it is the smaller."""
    generator = torch.Generator().manual_seed(seed)
    if kind == "dense":  # distinct ids over twice their count: the direct array
        right = torch.randperm(build_rows, generator=generator).to(torch.int32) * 2
    elif kind == "sparse":  # distinct, spread over 2**31: the hash table
        right = (torch.randperm(2**20, generator=generator)[:build_rows] * 2039).to(torch.int32)
    elif kind == "repeated":  # each key ten times: every probe row meets ten build rows
        right = (torch.randperm(build_rows // 10, generator=generator) * 7).to(
            torch.int32).repeat(10)
    else:  # "reserved": Direct32 cannot code 2**31 - 1, so the table refits an encoder
        right = torch.randperm(build_rows, generator=generator).to(torch.int32) * 3
        right[17] = 2**31 - 1
    left = right[torch.randint(0, right.shape[0], (probe_rows,), generator=generator)]
    if kind != "repeated":  # about half the probe rows match
        left[::2] += 1
    return left, right


def test_the_cpu_and_other_calls_take_the_general_path():
    left, right = _sides("sparse", 1)
    assert _join_small.small_join(left, right, "inner", table=join._RowTable) is None  # CPU
    assert _join_small.small_join(left, right, "right", table=join._RowTable) is None
    assert _join_small.small_join(left.long(), right.long(), "inner",
                                  table=join._RowTable) is None
    assert _join_small.small_join(left.numpy(), right, "inner", table=join._RowTable) is None


# --- the GPU ----------------------------------------------------------------------------
@pytest.fixture
def taken(monkeypatch):
    """Whether each gh.join call took the small path (a list of bools)."""
    seen = []

    def spy(*args, **options):
        result = _join_small.small_join(*args, **options)
        seen.append(result is not None)
        return result

    monkeypatch.setattr(join, "small_join", spy)
    return seen


def _general(monkeypatch, *args, **options):
    with monkeypatch.context() as patch:
        patch.setattr(join, "small_join", lambda *a, **k: None)
        return gh.join(*args, **options)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["dense", "sparse", "repeated", "reserved"])
@pytest.mark.parametrize("how", ["inner", "left", "semi", "anti"])
def test_the_small_path_joins_as_the_general_path(kind, how, taken, monkeypatch):
    left, right = (t.cuda() for t in _sides(kind, ["dense", "sparse", "repeated",
                                                   "reserved"].index(kind)))
    for _ in range(2):  # the second join takes the first one's table from the pool
        taken.clear()
        got = pairs(gh.join(left, right, how=how), how)
        assert taken == [True]
        assert got == pairs(_general(monkeypatch, left, right, how=how), how)
        assert got == pairs(gh.join(left.cpu(), right.cpu(), how=how), how)
        if how != "anti" or kind != "repeated":  # every probe row of "repeated" matches
            assert len(got) > 1000


@pytest.mark.gpu
def test_an_inner_join_built_on_the_left_side_swaps_the_maps_back(taken, monkeypatch):
    right, left = _sides("sparse", 5)  # the left side is the smaller
    assert gh.explain_join(left.cuda(), right.cuda()).build_side == "left"
    for how in ("inner", "left", "semi", "anti", "right", "full"):
        taken.clear()
        got = pairs(gh.join(left.cuda(), right.cuda(), how=how), how)
        built_left = gh.explain_join(left.cuda(), right.cuda(), how=how).build_side == "left"
        small = how in _join_small.HOWS and (how == "inner" or not built_left)
        assert taken == ([small] if how in _join_small.HOWS else [False]), how
        assert got == pairs(gh.join(left, right, how=how), how)


@pytest.mark.gpu
def test_options_strided_keys_and_other_devices_decline_or_join_alike(taken, monkeypatch):
    left, right = (t.cuda() for t in _sides("dense", 6))
    want = pairs(gh.join(left, right), "inner")
    for options in ({"left_valid": torch.ones_like(left, dtype=torch.bool)},
                    {"memory_budget": 1 << 40}, {"device": "cuda"}, {"explain": False},
                    {"stream": torch.cuda.current_stream()}):
        taken.clear()
        assert pairs(gh.join(left, right, **options), "inner") == want
        assert taken == ([True] if options == {"explain": False} else []), options
    strided = torch.stack([left, left]).t()[:, 0]  # a column view of two rows' storage
    taken.clear()
    assert pairs(gh.join(strided, right), "inner") == want and taken == [True]
    taken.clear()
    assert pairs(gh.join(left, right.long()), "inner") == want and taken == [False]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs two GPUs")
@pytest.mark.parametrize("kind", ["dense", "sparse", "reserved"])
def test_the_small_path_on_the_second_gpu(kind, taken):
    torch.cuda.set_device(0)
    left, right = _sides(kind, 7)
    for how in ("inner", "left", "semi", "anti"):
        for _ in range(2):  # the second from the pool of cuda:1's stream
            taken.clear()
            got = gh.join(left.to("cuda:1"), right.to("cuda:1"), how=how)
            assert taken == [True] and torch.cuda.current_device() == 0
            first = got if isinstance(got, torch.Tensor) else got[0]
            assert first.device == torch.device("cuda:1")
            assert pairs(got, how) == pairs(gh.join(left, right, how=how), how)
