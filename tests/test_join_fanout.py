"""The join planner's estimate of repeated keys (_join_fanout) and where the planner uses it."""

from __future__ import annotations

import collections

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuhash as gh
from gpuhash.join import fanout as _join_fanout
from gpuhash.join import plan as plan_module
from gpuhash.join.fanout import estimate_fanout
from gpuhash.join.plan import plan_join, wants_fanout

CPU = torch.device("cpu")


def _exact(build: list[int], probe: list[int]) -> float:
    counts = collections.Counter(build)
    return sum(counts[k] for k in probe) / len(probe)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-5, 20), min_size=1, max_size=60),
       st.lists(st.integers(-5, 20), min_size=1, max_size=60))
def test_whole_sides_give_the_exact_fanout(build, probe):
    got = estimate_fanout([torch.tensor(build)], None, [torch.tensor(probe)], None)
    assert got == pytest.approx(max(1.0, _exact(build, probe)))


def test_null_keys_match_nothing():
    build = torch.tensor([1, 1, 1, 2])
    valid = torch.tensor([True, False, False, True])
    probe = torch.tensor([1, 1])
    assert estimate_fanout([build], None, [probe], None) == 3.0
    assert estimate_fanout([build], valid, [probe], None) == 1.0
    assert estimate_fanout([build], None, [probe], torch.tensor([False, False])) == 1.0


def test_multi_column_keys_and_mixed_widths():
    a = torch.arange(100).repeat_interleave(3)
    b = (a % 4).to(torch.int32)
    probe = (torch.arange(100), torch.arange(100) % 4)  # int64 against the build's int32
    assert estimate_fanout([a, b], None, list(probe), None) == 3.0
    assert estimate_fanout([a, b], None, [probe[0], probe[1] + 1], None) == 1.0


def test_empty_sides():
    empty = torch.zeros(0, dtype=torch.int64)
    assert estimate_fanout([empty], None, [torch.tensor([1])], None) == 1.0
    assert estimate_fanout([torch.tensor([1])], None, [empty], None) == 1.0


def test_sampled_sides_land_near_the_truth():
    g = torch.Generator().manual_seed(7)
    n = 400_000  # past SAMPLE_ROWS: both sides are sampled
    assert n > _join_fanout.SAMPLE_ROWS
    repeated = torch.arange(n // 10).repeat_interleave(10)
    probe = torch.randint(0, n // 10, (n,), generator=g)
    assert estimate_fanout([repeated], None, [probe], None) == pytest.approx(10, rel=0.1)
    unique = torch.randperm(n, generator=g)
    assert 1.0 <= estimate_fanout([unique], None, [unique.flip(0)], None) < 1.1
    # a skewed build probed by evenly spread keys: near the truth, far below the build's own
    # self-join figure, which the plan would otherwise take
    weights = 1.0 / torch.arange(1, 20_001, dtype=torch.float64)
    zipf = torch.multinomial(weights, n, replacement=True, generator=g)
    spread = torch.randint(0, 20_000, (n,), generator=g)
    counts = torch.bincount(zipf, minlength=20_000).double()
    truth = float(counts[spread].mean())
    self_join = float((counts * counts).sum()) / n
    got = estimate_fanout([zipf], None, [spread], None)
    assert truth / 2 < got < truth * 2
    assert got < self_join / 10


def test_unique_keys_read_one_on_sampled_sides():
    # drawn with replacement, a row drawn twice made an equal pair: this read 2.3-2.9
    unique = torch.randperm(600_000, generator=torch.Generator().manual_seed(5))
    assert estimate_fanout([unique], None, [unique.flip(0)], None, sample=1024) == 1.0


@pytest.mark.parametrize("dtype", [torch.uint32, torch.int32, torch.uint64])
def test_sampled_sides_with_masks_and_unsigned_keys(dtype):
    g = torch.Generator().manual_seed(11)
    keys = torch.arange(20_000).repeat_interleave(10)[torch.randperm(200_000, generator=g)]
    valid = torch.rand(200_000, generator=g) < 0.5      # about 5 valid rows a key
    high = 1 << (63 if dtype == torch.uint64 else 31) if dtype != torch.int32 else 0
    build = (keys + high).to(torch.int64).view(torch.uint64).to(dtype) if high else keys.to(dtype)
    probe = torch.arange(20_000)
    probe = (probe + high).to(torch.int64).view(torch.uint64).to(dtype) if high else probe.to(dtype)
    got = estimate_fanout([build], valid, [probe], None)
    assert got == pytest.approx(5, rel=0.15)
    # two columns, the second telling rows of one key apart for half of them
    second = (torch.arange(200_000) % 2).to(torch.int32)
    got = estimate_fanout([build, second], None, [probe, torch.zeros(20_000, dtype=torch.int32)],
                          None)
    assert got == pytest.approx(5, rel=0.15)


def test_the_same_inputs_get_the_same_estimate():
    g = torch.Generator().manual_seed(3)
    build = torch.randint(0, 50_000, (300_000,), generator=g)
    probe = torch.randint(0, 100_000, (300_000,), generator=g)
    first = estimate_fanout([build], None, [probe], None)
    assert estimate_fanout([build], None, [probe], None) == first


def test_wants_fanout_only_where_it_may_change_the_plan():
    small = plan_join(10, 10, how="inner", key_bytes=4, device=CPU, memory_budget=1 << 30)
    assert not wants_fanout(small, keys_on_gpu=False)  # a sliver of its budget
    tight = plan_join(10_000, 10_000, how="inner", key_bytes=4, device=CPU, memory_budget=4096)
    assert tight.chunk_rows or tight.parts > 1
    assert wants_fanout(tight, keys_on_gpu=False)
    assert wants_fanout(tight, keys_on_gpu=True)  # it streams: it synchronises a chunk anyway
    fits = plan_join(1000, 1000, how="inner", key_bytes=4, device=CPU,
                     memory_budget=200_000)
    assert not fits.chunk_rows and fits.parts == 1 and wants_fanout(fits, keys_on_gpu=False)
    assert not wants_fanout(fits, keys_on_gpu=True)  # in one go: its one synchronisation
    for how in ("semi", "anti"):
        assert not wants_fanout(plan_join(10_000, 10_000, how=how, key_bytes=4, device=CPU,
                                          memory_budget=4096), keys_on_gpu=False)


def test_repeated_keys_shrink_the_chunks_and_keep_the_result():
    left = torch.arange(3000) % 300           # each key 10 times on both sides: 30,000 pairs
    right = torch.arange(3000) % 300
    budget = 64_000
    plan = gh.explain_join(left, right, memory_budget=budget)
    once = plan_join(3000, 3000, how="inner", key_bytes=8, device=CPU, memory_budget=budget)
    assert plan.estimates["fanout"] == 10.0
    assert "build rows match a probe row" in plan.why
    assert once.parts == plan.parts > 1 and once.chunk_rows is None  # parts fit one a row
    assert plan.chunk_rows  # ten a row do not: each part's probe is streamed
    got = gh.join(left, right, memory_budget=budget)
    want = gh.join(left, right)
    assert sorted(zip(*(t.tolist() for t in got))) == sorted(zip(*(t.tolist() for t in want)))
    assert len(got[0]) == 30_000


def test_join_follows_the_plan_with_the_estimate(capsys, monkeypatch):
    left = torch.arange(3000) % 300
    right = torch.arange(3000) % 300
    gh.join(left, right, memory_budget=64_000, explain=True)
    assert "about 10 build rows match a probe row" in capsys.readouterr().out.lower()
    # the default budget (a share of the free memory), made small
    monkeypatch.setattr(plan_module, "free_bytes", lambda device: 200_000)
    got = gh.join(left, right, explain=True)
    shown = capsys.readouterr().out
    assert "about 10 build rows match a probe row" in shown.lower() and "chunks of" in shown
    assert str(gh.explain_join(left, right)) + "\n" == shown
    assert len(got[0]) == 30_000


def test_a_prepared_build_plans_with_the_estimate(capsys):
    build = gh.JoinBuild(torch.arange(3000) % 300)
    probe = torch.arange(3000) % 300
    got = build.probe(probe, memory_budget=64_000, explain=True)
    assert "about 10 build rows match a probe row" in capsys.readouterr().out.lower()
    want = gh.join(probe, torch.arange(3000) % 300)
    assert sorted(zip(*(t.tolist() for t in got))) == sorted(zip(*(t.tolist() for t in want)))


def test_unique_keys_keep_the_plan():
    keys = torch.randperm(5000, generator=torch.Generator().manual_seed(1))
    plan = gh.explain_join(keys, keys.flip(0), memory_budget=20_000)
    once = plan_join(5000, 5000, how="inner", key_bytes=8, device=CPU, memory_budget=20_000)
    assert plan.estimates["fanout"] == 1.0
    assert (plan.chunk_rows, plan.parts) == (once.chunk_rows, once.parts)


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["host keys streamed", "GPU keys chunked"])
def test_gpu_joins_plan_with_the_estimate(where, capsys):
    left = torch.arange(60_000) % 6000       # each key 10 times on both sides
    right = left.flip(0).clone()
    budget = 1_500_000
    if where == "GPU keys chunked":
        left, right = left.cuda(), right.cuda()
    plan = gh.explain_join(left, right, device="cuda", memory_budget=budget)
    assert plan.estimates["fanout"] == 10.0, plan
    got = gh.join(left, right, device="cuda", memory_budget=budget, explain=True)
    assert "about 10 build rows match a probe row" in capsys.readouterr().out.lower()
    want = gh.join(left.cpu(), right.cpu())
    assert sorted(zip(*(t.tolist() for t in got))) == sorted(zip(*(t.tolist() for t in want)))
