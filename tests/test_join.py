"""gh.join and gh.JoinBuild against DuckDB's joins, every how, on the CPU engine; the chunked
and partitioned strategies (forced by a tiny memory budget) against the in-memory one; bad
input (the CUDA engine against the CPU engine: test_gpu_join.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from join_cases import HOWS, as_pairs, duckdb_join, join_inputs, make_keys, tensors

import gpuhash as gh
from conftest import few_then_many
from gpuhash.join import plan as _join_plan
from gpuhash.join.keys import SIGNED

duckdb = pytest.importorskip("duckdb")
pd = pytest.importorskip("pandas")



@pytest.mark.parametrize("how", HOWS)
@few_then_many(3, 20)
def test_every_how_matches_duckdb(how, examples):
    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=join_inputs(), nulls_equal=st.booleans())
    def check(data, nulls_equal):
        signed, dtypes, ((lcols, lvalid), (rcols, rvalid)) = data
        left, left_valid = tensors(lcols, dtypes[0], lvalid)
        right, right_valid = tensors(rcols, dtypes[1], rvalid)
        expected = duckdb_join(lcols, rcols, lvalid, rvalid, how, nulls_equal, signed)
        for budget in (None, 600, 150):  # in memory, then chunked / partitioned by the budget
            got = gh.join(left, right, how=how, left_valid=left_valid, right_valid=right_valid,
                          nulls_equal=nulls_equal, memory_budget=budget)
            assert as_pairs(got, how) == expected, budget
        if how != "cross":
            build = gh.JoinBuild(right, right_valid=right_valid)
            got = build.probe(left, how=how, left_valid=left_valid, nulls_equal=nulls_equal,
                              memory_budget=300)
            assert as_pairs(got, how) == expected

    check()


def test_tiny_budgets_pick_the_streaming_strategies():
    left, right = torch.arange(400) % 50, torch.arange(300) % 70
    assert gh.explain_join(left, right).strategy == "hash-table"
    chunked = gh.explain_join(left, right, how="left", memory_budget=28_000)
    # the probe side (left, 400 rows) comes in more than one chunk
    assert chunked.strategy == "hash-table-chunked" and chunked.chunk_rows < 400
    parted = gh.explain_join(left, right, how="left", memory_budget=2_000)
    assert parted.strategy == "hash-partitioned" and parted.parts > 1
    for how in HOWS:
        base = as_pairs(gh.join(left, right, how=how), how)
        for budget in (28_000, 2_000):
            assert as_pairs(gh.join(left, right, how=how, memory_budget=budget), how) == base
    assert "hash-partitioned" in parted.why or "parts" in str(parted)


def test_plan_explains_itself(capsys):
    plan = gh.explain_join(torch.arange(5), torch.arange(50), how="semi")
    assert plan.build_side == "right" and "fit the budget" in plan.why
    gh.join(torch.arange(5), torch.arange(50), how="semi", explain=True)
    assert "hash-table" in capsys.readouterr().out
    from gpuhash.join.strategies import STRATEGIES

    # every strategy the planner names has a function, in the one registry
    assert set(STRATEGIES) == {"hash-table", "hash-table-chunked", "hash-partitioned",
                               "cross-product", "gpu-radix", "out-of-core-streams"}
    assert all(callable(strategy.run) for strategy in STRATEGIES.values())


def test_many_to_many_is_sized_exactly():
    left = torch.tensor([1] * 30 + [2] * 5)
    right = torch.tensor([1] * 40 + [3])
    rows_l, rows_r = gh.join(left, right)
    assert rows_l.shape[0] == 30 * 40
    assert len(set(zip(rows_l.tolist(), rows_r.tolist()))) == 1200


def test_wide_and_reserved_keys():
    top = 2**63 - 1
    # one wide column holding the reserved patterns: ranked among the build's distinct keys
    right = torch.tensor([-1, -2, top, -(2**63), 5])
    left = torch.tensor([-2, 5, top, 7, -1, -1])
    pairs = as_pairs(gh.join(left, right), "inner")
    assert pairs == [(0, 1), (1, 4), (2, 2), (4, 0), (5, 0)]
    # wide without them: the keys themselves are the table keys
    assert as_pairs(gh.join(torch.tensor([top, 0]), torch.tensor([-(2**63), top])),
                    "inner") == [(0, 1)]
    # three wide columns: the mixed radix passes 2**62 and is ranked again
    cols = tuple(torch.tensor([top, -(2**63), 3]) * s for s in (1, -1, 1))
    assert as_pairs(gh.join(cols, cols), "inner") == [(0, 0), (1, 1), (2, 2)]
    u = torch.tensor([2**64 - 1, 2**64 - 2, 0], dtype=torch.uint64) if hasattr(
        torch, "uint64") else None
    assert as_pairs(gh.join(u, u[[1, 1]]), "inner") == [(1, 0), (1, 1)]


def test_direct_32_bit_keys_refit_for_the_two_largest_values():
    """One 32-bit column is read as it is; its two largest values would take the table's
    reserved codes, so a build holding one is rebuilt with a fitted encoder: no row lost,
    every how, either signedness, nulls included."""
    big = 2**31 - 1
    for dtype, right_values, left_values in (
            (torch.int32, [big, big - 1, 5, -(2**31), big], [big, 7, big - 1, -(2**31), 5]),
            (torch.uint32, [2**32 - 1, 2**32 - 2, 0], [2**32 - 2, 0, 2**32 - 1, 3])):
        right, left = make_keys(right_values, dtype), make_keys(left_values, dtype)
        valid = torch.tensor([True] * (len(right_values) - 1) + [False])
        for how in HOWS:
            build = gh.JoinBuild(right, right_valid=valid)
            got = as_pairs(build.probe(left, how=how), how)
            expected = duckdb_join([left_values], [right_values], None, valid.tolist(), how,
                                   False, dtype in SIGNED)
            assert got == expected, (dtype, how)
            if how != "cross":
                assert type(build._table.encoder).__name__ == "KeyEncoder"  # refitted
        # the refit reads the build keys at the first probe: a copy taken when the build was
        # prepared, so a caller changing its array afterwards changes nothing
        keys = make_keys(right_values, dtype)
        build = gh.JoinBuild(keys)
        expected = as_pairs(build.probe(left), "inner")
        keys2 = make_keys(right_values, dtype)
        build2 = gh.JoinBuild(keys2)
        keys2.copy_(make_keys([left_values[1]] * len(right_values), dtype))
        assert as_pairs(build2.probe(left), "inner") == expected, dtype
        plain = make_keys([1, 2, 3], dtype)  # no extreme value: no refit
        build = gh.JoinBuild(plain)
        assert as_pairs(build.probe(plain), "inner") == [(0, 0), (1, 1), (2, 2)]
        assert type(build._table.encoder).__name__ == "Direct32"


def test_empty_and_all_null_sides():
    empty = torch.zeros(0, dtype=torch.int32)
    keys = torch.tensor([1, 2], dtype=torch.int32)
    assert as_pairs(gh.join(empty, keys, how="full"), "full") == [(-1, 0), (-1, 1)]
    assert as_pairs(gh.join(keys, empty, how="left"), "left") == [(0, -1), (1, -1)]
    assert gh.join(keys, empty, how="anti").tolist() == [0, 1]
    assert as_pairs(gh.join(empty, empty, how="cross"), "cross") == []
    nulls = torch.tensor([False, False])
    assert as_pairs(gh.join(keys, keys, left_valid=nulls, right_valid=nulls), "inner") == []
    assert len(gh.join(keys, keys, left_valid=nulls, right_valid=nulls, nulls_equal=True)[0]) == 4


def test_heavy_skew():
    left = torch.where(torch.arange(2000) % 2 == 0, 7, torch.arange(2000))
    right = torch.cat([torch.full((3,), 7), torch.arange(100, 200)])
    left_rows, right_rows = gh.join(left, right)
    assert left_rows.shape[0] == 1001 * 3 + 50  # row 7 holds key 7 too
    assert torch.equal(left[left_rows], right[right_rows])
    assert gh.join(left, right, how="semi").shape[0] == 1051


def test_build_is_reusable_and_keeps_the_array_kind():
    build = gh.JoinBuild(np.array([3, 4, 4], dtype=np.int64))
    assert build.unique is False and build.rows == 3
    for _ in range(2):
        left_rows, right_rows = build.probe(np.array([4, 3], dtype=np.int64), how="inner")
        assert isinstance(left_rows, np.ndarray) and left_rows.dtype == np.int64
        assert sorted(zip(left_rows.tolist(), right_rows.tolist())) == [(0, 1), (0, 2), (1, 0)]
    assert gh.JoinBuild(torch.arange(4)).unique is True
    widened = gh.join(torch.tensor([1, 2], dtype=torch.int8), torch.tensor([2, 300]))
    assert as_pairs(widened, "inner") == [(1, 0)]


@pytest.mark.parametrize("call, error, words", [
    (lambda: gh.join(torch.arange(3), torch.arange(3), how="fullouter"), ValueError,
     ["how", "'fullouter'"]),
    (lambda: gh.join(torch.arange(3), torch.arange(3, dtype=torch.int32).view(torch.uint32)),
     TypeError, ["left_keys", "torch.int64", "torch.uint32"]),
    (lambda: gh.join(torch.arange(3), torch.arange(3), left_valid=torch.ones(2, dtype=bool)),
     ValueError, ["left_valid", "(2,)", "3 rows"]),
    (lambda: gh.join((torch.arange(3), torch.arange(2)), (torch.arange(3), torch.arange(3))),
     ValueError, ["left_keys[1]", "2 rows"]),
    (lambda: gh.join((torch.arange(3),), (torch.arange(3), torch.arange(3))), ValueError,
     ["1 key columns", "2"]),
    (lambda: gh.join(torch.ones(3), torch.arange(3)), TypeError, ["left_keys", "float32"]),
    (lambda: gh.join(torch.arange(3), [1, 2]), TypeError, ["right_keys", "list"]),
    (lambda: gh.join(torch.arange(3), torch.arange(3), right_valid=torch.ones(3)), TypeError,
     ["right_valid", "bool"]),
    (lambda: gh.JoinBuild(torch.arange(3)).probe(torch.arange(3), how="sideways"), ValueError,
     ["how", "sideways"]),
    (lambda: gh.join(torch.arange(3), torch.arange(3), memory_budget=0), ValueError,
     ["memory_budget", "got 0"]),
    (lambda: gh.join(_arrow([1, None]), torch.arange(3)), TypeError,
     ["left_keys", "1 nulls", "left_valid"]),
])
def test_bad_input_names_the_argument(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value)


def _arrow(values):
    return pytest.importorskip("pyarrow").array(values)


def test_numpy_keys_of_any_layout_join_as_copies():
    """Reversed (negative strides) and big-endian NumPy keys, which torch cannot view."""
    left = np.arange(5)[::-1]
    rows_l, rows_r = gh.join(left, np.array([2, 3, 9], dtype=">i8"))
    assert sorted(zip(left[rows_l].tolist(), rows_r.tolist())) == [(2, 0), (3, 1)]


@pytest.mark.parametrize("rows", [0, 1, 100, 5000, 3_000_000])
@pytest.mark.parametrize("key_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_build_tables_spec_is_the_constructors(rows, key_dtype, device):
    """A join's build table skips MultiMap's constructor (host time): it must be the table
    MultiMap(capacity=rows, max_load_factor=LOAD, growable=False) would make."""
    from gpuhash.join.build import RowTable as _RowTable
    from gpuhash.join.build import build_spec as _build_spec

    made = gh.MultiMap(key_dtype=key_dtype, value_dtype=torch.int32, capacity=max(rows, 1),
                       max_load_factor=_RowTable.LOAD, growable=False, device=device)
    spec = _build_spec(key_dtype, rows, _RowTable.LOAD)
    assert spec == made._state.spec
    lean = gh.MultiMap._empty(spec, made.device, growable=False, duplicates="any")
    assert all(torch.equal(a, made._state.tensors()[n]) for n, a in lean._state.tensors().items())
    assert (lean._growable, lean._duplicates, lean._used_bound, lean._device_index,
            lean._state.spec.multi) == (made._growable, made._duplicates, made._used_bound,
                                   made._device_index, made._state.spec.multi)


def test_a_shared_plan_off_the_gpu_is_planned_afresh():
    cpu = torch.device("cpu")
    first = _join_plan.shared_plan(1000, 5000, how="left", key_bytes=4, device=cpu)
    assert first == _join_plan.plan_join(1000, 5000, how="left", key_bytes=4, device=cpu)
    assert _join_plan.shared_plan(1000, 5000, how="left", key_bytes=4, device=cpu) is not first


@pytest.mark.gpu
def test_small_gpu_joins_share_one_plan_that_no_caller_gets_to_change(monkeypatch):
    device = torch.device("cuda", torch.cuda.current_device())
    plan = _join_plan.shared_plan(1000, 5000, how="left", key_bytes=4, device=device)
    assert _join_plan.shared_plan(1000, 5000, how="left", key_bytes=4, device=device) is plan
    assert plan == _join_plan.plan_join(1000, 5000, how="left", key_bytes=4, device=device)
    rows = _join_plan.total_bytes(device) // 16  # past SMALL_SHARE: free memory decides
    assert (_join_plan.shared_plan(rows, rows, how="inner", key_bytes=4, device=device)
            is not _join_plan.shared_plan(rows, rows, how="inner", key_bytes=4, device=device))
    keys = torch.arange(1000, dtype=torch.int32, device=device)
    mine = gh.explain_join(keys, keys)  # plans are frozen: a shared one cannot be changed
    with pytest.raises(dataclasses.FrozenInstanceError):
        mine.strategy = "changed"
    assert gh.explain_join(keys, keys).strategy == "hash-table"
    left, right = gh.join(keys, keys)
    assert torch.equal(left.sort().values, right.sort().values)


def test_explain_join_takes_the_arguments_join_takes():
    import inspect

    join_args = set(inspect.signature(gh.join).parameters) - {"explain"}
    assert join_args <= set(inspect.signature(gh.explain_join).parameters)
    plan = gh.explain_join(torch.arange(10), torch.arange(100), nulls_equal=True)
    assert plan.strategy == gh.explain_join(torch.arange(10), torch.arange(100)).strategy


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["inner", "left", "full", "semi"])
def test_cupy_keys_join_and_come_back_as_cupy(how):
    cupy = pytest.importorskip("cupy")
    left = cupy.asarray(np.array([5, 1, 7, 1, 9], np.int64))
    right = cupy.asarray(np.array([1, 9, 4], np.int32))
    mask = cupy.asarray(np.array([True, True, True, False, True]))
    got = gh.join(left, right, how=how, left_valid=mask)
    want = gh.join(torch.as_tensor(left.get()), torch.as_tensor(right.get()), how=how,
                   left_valid=torch.as_tensor(mask.get()), device="cpu")
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert all(isinstance(g, cupy.ndarray) for g in got)
    assert sorted(zip(*(g.get().tolist() for g in got))) == sorted(
        zip(*(w.tolist() for w in want)))


def test_outer_is_pandas_name_for_full():
    """gh.merge takes pandas' "outer" for a full join; so does gh.join of key arrays."""
    left, right = torch.tensor([1, 2, 3]), torch.tensor([3, 4])
    outer = gh.join(left, right, how="outer", device="cpu")
    full = gh.join(left, right, how="full", device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(outer, full))
    with pytest.raises(ValueError, match="'outer', pandas' name"):
        gh.join(left, right, how="outer join")
