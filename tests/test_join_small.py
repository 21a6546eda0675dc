"""The commonest gh.join call in fewer steps (_join_small.small_join): it must be taken where it
claims to be (int32 torch tensors on one GPU, no option, inner / left / semi / anti, one table
probed at once), give the general path's answer there for every kind of build side (a direct
array, a hash table, repeated keys whose pairs outnumber the probe rows, a key that makes the
table refit), and decline everything else."""

from __future__ import annotations

import pytest
import torch
from join_arrays import pairs

import gpuhash as gh
from gpuhash.join import api as join_api
from gpuhash.join.strategies import small as _join_small


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


def test_the_cpu_takes_the_general_path():
    left, right = _sides("sparse", 1)
    assert _join_small.small_join(left, right, "inner") is None


# --- the GPU ----------------------------------------------------------------------------
@pytest.fixture
def taken(monkeypatch):
    """Whether each gh.join call took the small path (a list of bools)."""
    seen = []

    def spy(*args, **options):
        result = _join_small.small_join(*args, **options)
        seen.append(result is not None)
        return result

    monkeypatch.setattr(join_api, "small_join", spy)
    return seen


def _expected(left: torch.Tensor, right: torch.Tensor, how: str) -> bool:
    """Whether gh.join(left, right, how=how) should take the small path, from its plan."""
    plan = gh.explain_join(left, right, how=how)
    return (how in _join_small.HOWS and plan.strategy == "hash-table"
            and (how == "inner" or plan.build_side == "right"))


def _general(monkeypatch, *args, **options):
    with monkeypatch.context() as patch:
        patch.setattr(join_api, "small_join", lambda *a, **k: None)
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
def test_other_calls_decline_and_bad_ones_fail_as_on_the_general_path(monkeypatch):
    left, right = (t.cuda() for t in _sides("sparse", 1))
    decline = _join_small.small_join
    assert decline(left, right, "inner") is not None  # the control: taken
    assert decline(left, right, "right") is None
    assert decline(left, right, "full") is None
    assert decline(left.long(), right.long(), "inner") is None
    assert decline(left.to(torch.uint32), right.to(torch.uint32), "inner") is None
    assert decline(left.cpu().numpy(), right, "inner") is None
    assert decline(left, right.cpu(), "inner") is None
    assert decline(left.view(-1, 2), right, "inner") is None
    for bad in ((left.view(-1, 2), right), (left, right.cpu())):  # the general path's errors
        with pytest.raises(ValueError) as small:
            gh.join(*bad)
        with pytest.raises(ValueError) as general:
            _general(monkeypatch, *bad)
        assert str(small.value) == str(general.value)


@pytest.mark.gpu
def test_empty_sides_and_a_side_stream_on_the_small_path(taken):
    left, right = (t.cuda() for t in _sides("dense", 8))
    for a, b in ((left[:0], right), (left, right[:0]), (left[:0], right[:0])):
        for how in _join_small.HOWS:
            taken.clear()
            got = gh.join(a, b, how=how)
            assert taken == [_expected(a, b, how)], (a.shape, b.shape, how)
            assert pairs(got, how) == pairs(gh.join(a.cpu(), b.cpu(), how=how), how)
    assert _expected(left, right[:0], "anti")  # an empty build side, on the small path
    want = pairs(gh.join(left.cpu(), right.cpu()), "inner")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # the keys, written on the default stream
    with torch.cuda.stream(side):  # the pool keeps a table a stream
        for _ in range(2):
            taken.clear()
            got = gh.join(left, right)
            assert taken == [True]
            copied = [t.to("cpu", non_blocking=False) for t in got]
    assert pairs(copied, "inner") == want


@pytest.mark.gpu
def test_an_inner_join_built_on_the_left_side_swaps_the_maps_back(taken, monkeypatch):
    right, left = _sides("sparse", 5)  # the left side is the smaller
    left[11] = 2**31 - 1  # and holds a key Direct32 cannot code: its table refits
    right[:7] = 2**31 - 1
    assert gh.explain_join(left.cuda(), right.cuda()).build_side == "left"
    assert _expected(left.cuda(), right.cuda(), "inner")  # the swap is on the small path
    for how in ("inner", "left", "semi", "anti", "right", "full"):
        taken.clear()
        got = pairs(gh.join(left.cuda(), right.cuda(), how=how), how)
        assert taken == [_expected(left.cuda(), right.cuda(), how)], how
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
def test_the_small_path_on_the_second_gpu(kind, taken, monkeypatch):
    before = torch.cuda.current_device()
    torch.cuda.set_device(0)
    try:
        _second_gpu_joins(kind, taken)
    finally:
        torch.cuda.set_device(before)


def _second_gpu_joins(kind: str, taken: list) -> None:
    left, right = _sides(kind, 7)
    for how in ("inner", "left", "semi", "anti"):
        for _ in range(2):  # the second from the pool of cuda:1's stream
            taken.clear()
            got = gh.join(left.to("cuda:1"), right.to("cuda:1"), how=how)
            assert taken == [True] and torch.cuda.current_device() == 0
            first = got if isinstance(got, torch.Tensor) else got[0]
            assert first.device == torch.device("cuda:1")
            assert pairs(got, how) == pairs(gh.join(left, right, how=how), how)
