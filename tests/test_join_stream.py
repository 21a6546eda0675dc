"""The out-of-core join (gh.join(host keys, device="cuda")): its steps on the CPU against
DuckDB (the parts split by key hash, the probe side in chunks), the planner's choice, and on a
GPU the streamed path itself against the in-memory join."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from join_cases import as_pairs, duckdb_join, join_inputs, tensors

import gpuhash as gh
from conftest import few_then_many
from gpuhash.join import plan as _join_plan
from gpuhash.join.matches import _Matches
from gpuhash.join.plan import JoinPlan, plan_join
from gpuhash.join.sides import sides as _sides
from gpuhash.join.strategies import stream as _join_stream

pytest.importorskip("duckdb")  # the answers to compare with

HOWS = ["inner", "left", "right", "full", "semi", "anti"]


@pytest.mark.parametrize("how", HOWS)
@few_then_many(3, 15)
def test_streamed_steps_match_duckdb(how, examples):
    """The strategy's own steps on the CPU (nothing to copy): both sides split into parts by
    key hash, nulls together, int widths mixed, the probe side in chunks, either build side."""
    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=join_inputs(), nulls_equal=st.booleans(), parts=st.sampled_from([1, 2, 8]),
           chunk_rows=st.sampled_from([None, 1, 5]), build_left=st.booleans())
    def check(data, nulls_equal, parts, chunk_rows, build_left):
        signed, dtypes, ((lcols, lvalid), (rcols, rvalid)) = data
        left, left_valid = tensors(lcols, dtypes[0], lvalid)
        right, right_valid = tensors(rcols, dtypes[1], rvalid)
        sides = _sides(left, right, left_valid, right_valid)
        build_side = ("left" if build_left and how in ("inner", "left", "right", "full")
                      else "right")
        plan = JoinPlan("out-of-core-streams", how, build_side, "cpu", sides[0].rows,
                        sides[1].rows, 1 << 20, chunk_rows=chunk_rows, parts=parts)
        got = _join_stream.run_streamed(*sides, plan, nulls_equal)
        assert as_pairs(got, how) == duckdb_join(lcols, rcols, lvalid, rvalid, how,
                                                 nulls_equal, signed)

    check()


def test_the_planner_streams_host_keys_on_a_gpu():
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    plan = plan_join(10_000, 2_000, how="inner", key_bytes=4, device=gpu, data_device=cpu,
                     memory_budget=1 << 30)
    assert plan.strategy == "out-of-core-streams" and plan.chunk_rows is None
    assert "copied over at once" in plan.why
    chunked = plan_join(10_000_000, 2_000, how="left", key_bytes=4, device=gpu,
                        data_device=cpu, memory_budget=1 << 20)
    assert chunked.chunk_rows is not None and chunked.parts == 1
    assert "in chunks while the previous chunk is joined" in chunked.why
    # the chunk being joined (its codes and its raw columns: two int64 key columns and a null
    # mask a row) and the chunks waiting on the GPU fit the budget beside the table and the
    # build side's keys
    wide = plan_join(10_000_000, 2_000, how="left", key_bytes=8, device=gpu, data_device=cpu,
                     memory_budget=1 << 20, input_bytes=17)
    per_row = _join_plan.probe_bytes_per_row(8, 1.0) + (17 - 8) + _join_plan.STAGED_CHUNKS * 17
    built = _join_plan.table_bytes(2_000, 8) + 2_000 * 17
    assert built + wide.chunk_rows * per_row <= wide.memory_budget
    assert wide.memory_budget < built + (wide.chunk_rows + 1) * per_row
    parted = plan_join(10_000_000, 10_000_000, how="semi", key_bytes=8, device=gpu,
                       data_device=cpu, memory_budget=1 << 24)
    assert parted.parts > 1 and "split by key hash on the host" in parted.why
    # keys already on the GPU are not streamed
    assert plan_join(100, 100, how="inner", key_bytes=4, device=gpu,
                     memory_budget=1 << 20).strategy == "hash-table"


def test_consecutive_pieces_join_without_a_copy():
    """The streamed join's pieces lie one after another in one arena: the result is a view of
    them; pieces from separate tensors (or out of order) are copied."""
    arena = torch.arange(10)
    matches = _Matches("inner", True, 10, 10, torch.device("cpu"))
    joined = matches._joined([arena[0:3], arena[3:3], arena[3:7]])
    assert joined.tolist() == list(range(7))
    assert joined.untyped_storage().data_ptr() == arena.untyped_storage().data_ptr()
    apart = matches._joined([arena[4:6], arena[0:2]])
    assert apart.tolist() == [4, 5, 0, 1]
    assert apart.untyped_storage().data_ptr() != arena.untyped_storage().data_ptr()
    assert matches._joined([torch.tensor([1]), torch.tensor([2])]).tolist() == [1, 2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for machines without CUDA")
def test_device_cuda_without_cuda_names_the_device():
    with pytest.raises(ValueError,
                       match="device 'cuda' asked for CUDA but no CUDA device is available"):
        gh.join(torch.arange(3), torch.arange(3), device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("how", HOWS)
def test_host_keys_joined_on_the_gpu_match_the_in_memory_join(how):
    """Host keys (NumPy, pinned torch, two columns with nulls; distinct build keys, whose
    results fill one arena, and repeated ones, which pass it) joined with device="cuda" in
    memory, in chunks and in parts: results in host memory, as the in-memory CPU join."""
    generator = torch.Generator().manual_seed(7)
    left = torch.randint(0, 3000, (20_000,), generator=generator)
    right = torch.randint(0, 3000, (5_000,), generator=generator).to(torch.int32)
    valid = torch.rand(20_000, generator=generator) > 0.1
    expected = as_pairs(gh.join(left, right, how=how), how)
    unique = torch.randperm(5_000, generator=generator)  # results that fill the arenas
    want_unique = as_pairs(gh.join(left, unique, how=how), how)
    for budget in (None, 400_000, 60_000):
        got = gh.join(left.numpy(), unique.numpy(), how=how, device="cuda",
                      memory_budget=budget)
        assert as_pairs(got, how) == want_unique, budget
        plan = gh.explain_join(left, right, how=how, device="cuda", memory_budget=budget)
        assert plan.strategy == "out-of-core-streams", plan
        got = gh.join(left.numpy(), right.numpy(), how=how, device="cuda",
                      memory_budget=budget)
        assert isinstance(got if how in ("semi", "anti") else got[0], np.ndarray)
        assert as_pairs(got, how) == expected, budget
        pinned = gh.join(left.pin_memory(), right, how=how, device="cuda", memory_budget=budget)
        assert as_pairs(pinned, how) == expected, budget
        two = (left, left % 7), (right.to(torch.int64), right.to(torch.int64) % 7)
        want = as_pairs(gh.join(*two, how=how, left_valid=valid, nulls_equal=True), how)
        assert as_pairs(gh.join(*two, how=how, left_valid=valid, nulls_equal=True,
                                device="cuda", memory_budget=budget), how) == want, budget


def test_host_empty_gives_writable_memory_that_outlives_its_mapping():
    """Results of the streamed join land in host_empty's tensors: large ones in an mmap (huge
    pages where offered) that the tensor keeps alive, small ones from torch.empty."""
    import gc

    big = _join_stream.host_empty((128 << 20) // 8, torch.int64)
    gc.collect()
    big.fill_(7)
    assert big.shape == ((128 << 20) // 8,) and int(big[-1]) == 7
    assert big.numpy().sum() == 7 * big.numel()
    small = _join_stream.host_empty(3, torch.int32)
    assert small.shape == (3,) and small.dtype == torch.int32


def test_result_pieces_fill_an_arena_one_after_another():
    """_ToHost places each lane's pieces one after another in an arena sized for the probe
    rows, starts a new arena when a piece passes it, and the pieces join without a copy only
    while they stay in one arena (the GPU copies themselves need a device)."""
    sink = object.__new__(_join_stream._ToHost)
    sink.rows, sink.arenas = 10, {}
    first = sink._place("probe", 4, torch.int64)
    second = sink._place("probe", 6, torch.int64)
    other = sink._place("build", 4, torch.int64)
    assert second.storage_offset() == first.storage_offset() + 4
    assert other.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    first.copy_(torch.arange(4))
    second.copy_(torch.arange(4, 10))
    matches = _Matches("inner", True, 10, 10, torch.device("cpu"))
    joined = matches._joined([first, second])
    assert joined.tolist() == list(range(10))
    assert joined.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
    past = sink._place("probe", 3, torch.int64)  # no room left: a new arena
    assert past.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    past.copy_(torch.tensor([10, 11, 12]))
    assert matches._joined([first, second, past]).tolist() == list(range(13))
