"""gh.join and gh.JoinBuild against DuckDB's joins, every how, on the CPU engine; the chunked
and partitioned strategies (forced by a tiny memory budget) against the in-memory one; bad
input; and, on a GPU, the CUDA engine against the CPU engine."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuhash as gh
from conftest import few_then_many
from gpuhash.join import build as join_build
from gpuhash.join import plan as _join_plan
from gpuhash.join.engine import engine_for as join_engine_for
from gpuhash.join.keys import BITS, SIGNED, UNSIGNED

duckdb = pytest.importorskip("duckdb")
pd = pytest.importorskip("pandas")

HOWS = ["inner", "left", "right", "full", "semi", "anti", "cross"]
SQL = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL JOIN",
       "semi": "SEMI JOIN", "anti": "ANTI JOIN"}


def make_keys(values: list[int], dtype: torch.dtype) -> torch.Tensor:
    """A tensor of ``dtype`` holding ``values`` (Python ints in the dtype's own range)."""
    bits = BITS[dtype]
    if dtype in UNSIGNED and bits > 8:
        signed = {16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]
        patterns = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in values]
        return torch.tensor(patterns, dtype=signed).view(dtype)
    return torch.tensor(values, dtype=dtype)


def duckdb_join(left_cols, right_cols, left_valid, right_valid, how, nulls_equal, signed):
    """DuckDB's answer as a sorted list of pairs (or of left rows for semi / anti)."""
    kind = "Int64" if signed else "UInt64"

    def frame(cols, valid):
        data = {"rid": np.arange(len(cols[0]), dtype=np.int64)}
        for i, col in enumerate(cols):
            data[f"k{i}"] = pd.array([v if valid is None or valid[j] else None
                                      for j, v in enumerate(col)], dtype=kind)
        return pd.DataFrame(data)

    con = duckdb.connect()
    con.register("l", frame(left_cols, left_valid))
    con.register("r", frame(right_cols, right_valid))
    same = " IS NOT DISTINCT FROM " if nulls_equal else " = "
    on = " AND ".join(f"l.k{i}{same}r.k{i}" for i in range(len(left_cols)))
    if how == "cross":
        rows = con.sql("SELECT l.rid, r.rid FROM l CROSS JOIN r").fetchall()
    elif how in ("semi", "anti"):
        return sorted(r[0] for r in con.sql(f"SELECT l.rid FROM l {SQL[how]} r ON {on}")
                      .fetchall())
    else:
        rows = con.sql(f"SELECT l.rid, r.rid FROM l {SQL[how]} r ON {on}").fetchall()
    return sorted((-1 if a is None else a, -1 if b is None else b) for a, b in rows)


def as_pairs(result, how):
    if how in ("semi", "anti"):
        return sorted(np.asarray(result).tolist())
    left, right = result
    assert left.dtype == right.dtype and str(left.dtype).endswith("int64")
    return sorted(zip(np.asarray(left).tolist(), np.asarray(right).tolist()))


def dtype_range(dtype):
    bits = BITS[dtype]
    return (0, (1 << bits) - 1) if dtype in UNSIGNED else (-(1 << bits - 1), (1 << bits - 1) - 1)


@st.composite
def join_inputs(draw):
    signed = draw(st.booleans())
    family = SIGNED if signed else UNSIGNED
    ncols = draw(st.sampled_from([1, 1, 2]))
    sides = []
    pools = []
    dtypes = [[draw(st.sampled_from(family)) for _ in range(ncols)] for _ in range(2)]
    for c in range(ncols):
        lo = max(dtype_range(dtypes[0][c])[0], dtype_range(dtypes[1][c])[0])
        hi = min(dtype_range(dtypes[0][c])[1], dtype_range(dtypes[1][c])[1])
        special = [lo, hi, 0, 1, -1, -2, hi - 1]  # extremes and the reserved patterns
        pool = draw(st.lists(st.integers(lo, hi), min_size=1, max_size=6))
        pools.append(pool + [v for v in special if lo <= v <= hi])
    for side in range(2):
        rows = draw(st.integers(0, 24))
        skew = draw(st.booleans())
        cols = []
        for c in range(ncols):
            full_lo, full_hi = dtype_range(dtypes[side][c])
            values = st.one_of(st.sampled_from(pools[c]), st.integers(full_lo, full_hi))
            col = draw(st.lists(values, min_size=rows, max_size=rows))
            if skew and rows:  # one key in half the rows
                col = [pools[c][0] if i % 2 else v for i, v in enumerate(col)]
            cols.append(col)
        valid = None
        if draw(st.booleans()):
            valid = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
        sides.append((cols, valid))
    return signed, dtypes, sides


def tensors(cols, dtypes, valid):
    keys = tuple(make_keys(c, d) for c, d in zip(cols, dtypes))
    mask = None if valid is None else torch.tensor(valid, dtype=torch.bool)
    return (keys[0] if len(keys) == 1 else keys), mask


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
    (lambda: gh.join(torch.arange(3), torch.arange(3), how="outer"), ValueError,
     ["how", "'outer'"]),
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


def _cpu(result):
    return result.cpu() if isinstance(result, torch.Tensor) else tuple(t.cpu() for t in result)


def _cuda(keys):
    return tuple(k.cuda() for k in keys) if isinstance(keys, tuple) else keys.cuda()


@pytest.mark.gpu
@pytest.mark.parametrize("how", [h for h in HOWS if h != "cross"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint32, torch.uint64])
def test_cuda_engine_matches_cpu_engine(how, dtype):
    """CUDA against the CPU engine on random keys with nulls, one and two key columns, whole
    and under a tiny memory budget. (A cross join of these sides has 10**8 pairs, minutes of
    Python to compare, and no kernel of its own: test_cuda_edge_cases_match_cpu_engine joins
    small sides with every how.)"""
    generator = torch.Generator().manual_seed(HOWS.index(how) * 10 + BITS[dtype])
    for rows_l, rows_r, distinct in ((20_000, 5_000, 10_000), (3_000, 30_000, 200),
                                     (50, 40, 10)):
        def draw(rows, distinct=distinct):
            return torch.randint(0, distinct, (rows,), generator=generator).to(dtype)

        valid = torch.rand(rows_l, generator=generator) > 0.1
        single = (draw(rows_l), draw(rows_r))
        def small(rows):  # values 0-2 (torch has no remainder for uint32 on the CPU)
            return (draw(rows).to(torch.int64) % 3).to(dtype)

        double = ((single[0], small(rows_l)), (single[1], small(rows_r)))
        for left, right in (single, double):
            expected = as_pairs(gh.join(left, right, how=how, left_valid=valid,
                                        nulls_equal=True), how)
            for budget in (None, 20_000):
                got = gh.join(_cuda(left), _cuda(right), how=how, left_valid=valid.cuda(),
                              nulls_equal=True, memory_budget=budget)
                assert as_pairs(_cpu(got), how) == expected, budget


@pytest.mark.gpu
def test_cuda_edge_cases_match_cpu_engine():
    """The kernels' other code paths: wide keys used as codes, reserved patterns (ranked),
    empty and all-null sides, one key in half the rows, many pairs per probe row (the output
    sized by a second run), unsigned 32-bit keys past 2**31."""
    top = 2**63 - 1
    cases = [
        (torch.tensor([-2, 5, top, 7, -1, -1]), torch.tensor([-1, -2, top, -(2**63), 5])),
        (torch.tensor([top, 0, 3]), torch.tensor([-(2**63), top, 3])),
        (torch.zeros(0, dtype=torch.int32), torch.tensor([1, 2], dtype=torch.int32)),
        (torch.tensor([1, 2], dtype=torch.int32), torch.zeros(0, dtype=torch.int32)),
        (torch.where(torch.arange(20_000) % 2 == 0, 7, torch.arange(20_000)),
         torch.cat([torch.full((30,), 7), torch.arange(100, 2000)])),
        (torch.randint(0, 50, (40_000,)), torch.randint(0, 50, (3_000,))),
        (make_keys([2**32 - 3, 2**31, 5, 2**31 + 7], torch.uint32),
         make_keys([2**31, 2**32 - 3, 9], torch.uint32)),
        # the two largest values of each 32-bit dtype: a direct build refits
        (make_keys([2**31 - 1, 4, 2**31 - 2, -(2**31)], torch.int32),
         make_keys([2**31 - 2, -(2**31), 2**31 - 1, 4], torch.int32)),
        (make_keys([2**32 - 1, 0, 2**32 - 2], torch.uint32),
         make_keys([2**32 - 2, 2**32 - 1, 1], torch.uint32)),
    ]
    for left, right in cases:
        for how in HOWS:
            expected = as_pairs(gh.join(left, right, how=how), how)
            got = gh.join(left.cuda(), right.cuda(), how=how)
            assert as_pairs(_cpu(got), how) == expected, (how, left[:5], right[:5])
            # a prepared build probes on its device whatever the sizes (no CPU detour)
            got = gh.JoinBuild(right.cuda()).probe(left.cuda(), how=how)
            assert as_pairs(_cpu(got), how) == expected, (how, left[:5], right[:5])
    nulls = torch.tensor([False, False])
    keys = torch.tensor([1, 2], dtype=torch.int32)
    for equal in (False, True):
        expected = as_pairs(gh.join(keys, keys, how="full", left_valid=nulls,
                                    right_valid=nulls, nulls_equal=equal), "full")
        got = gh.JoinBuild(keys.cuda(), right_valid=nulls.cuda()).probe(
            keys.cuda(), how="full", left_valid=nulls.cuda(), nulls_equal=equal)
        assert as_pairs(_cpu(got), "full") == expected


def _probe_both(table, probe, valid, code=(0, 0, 0), **options):
    """The join engine's probe of one table's bytes on the CPU and the CUDA engine: each engine's
    pairs as a sorted list, and its build_hit / probe_hit masks when asked for. ``code``:
    how a probe value becomes a key code (shape, low, high; 0: the column holds codes)."""
    answers = []
    on_gpu = table.to("cuda")
    on_gpu._state.join_groups = tuple(t.cuda() for t in table._state.join_groups)
    for t in (table, on_gpu):
        device = t._state.slots.device
        flags = {name: v for name, v in options.items() if name == "keep_unmatched"}
        marks = {name: torch.zeros(options[name][0], dtype=options[name][1], device=device)
                 for name in options if name not in flags}
        probe_rows, build_rows, unplaced, _ = join_engine_for(t.device).probe(
            t._state, probe.to(device), None if valid is None else valid.to(device), *code,
            **flags, **marks)
        pairs = sorted(zip(probe_rows.tolist(), build_rows.tolist()))
        answers.append((pairs, unplaced, {k: v.cpu().tolist() for k, v in marks.items()}))
    return answers


@pytest.mark.gpu
@pytest.mark.parametrize("key_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("value_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("load", [0.5, 0.9, 0.97])
@pytest.mark.parametrize("together", [False, True])
def test_join_probe_kernel_matches_cpu_engine_on_full_buckets(key_dtype, value_dtype, load,
                                                             together, monkeypatch):
    """The probe kernel's paths, against the CPU engine over the same table bytes (built by
    the CPU engine's build): first buckets read by the warp together (the code or
    none, the bucket with room or full with the key's filter bit clear; forced here, the
    engine does it for tables past L2), the lane's own walk (codes past the first bucket),
    groups of rows (codes held by several rows), keys and values that need all 64 bits, keys
    next to the reserved patterns and the patterns themselves, a probe column wider than the
    table's keys, and a last warp of fewer than 32 rows. Loads 0.5 / 0.9 / 0.97 give every
    slot layout and bucket width a join table can have (packed and pair slots, 4- and 8-slot
    buckets)."""
    from gpuhash.join.cuda import engine as cuda

    monkeypatch.setattr(cuda, "_past_l2", lambda spec: together)
    generator = torch.Generator().manual_seed(int(load * 100) + BITS[key_dtype] + BITS[value_dtype])
    capacity = 4_000
    table = gh.MultiMap(key_dtype=key_dtype, value_dtype=value_dtype, capacity=capacity,
                        max_load_factor=load, growable=False)
    rows = int(capacity * 0.98)
    # 64-bit keys with their high half in use: a 32-bit compare would match k with k + 2**32
    # and take 0x1_ffffffff for an EMPTY slot
    edge = [2**32 + 5, 5, 0x1_FFFFFFFF, 0x1_FFFFFFFE] if key_dtype == torch.int64 else [-3, 5]
    keys = torch.cat([torch.tensor(edge),
                      torch.randint(0, 300, (rows // 4,), generator=generator),
                      torch.randint(0, 2**30, (rows - rows // 4 - len(edge),),
                                    generator=generator)])
    groups = torch.zeros(join_build.group_words(table._state.spec), dtype=torch.int64)
    join_engine_for(table.device).build(table._state, keys.to(key_dtype), None, 0, 0, 0,
                                   groups=groups)
    assert int(groups[0]) > 0  # some codes are groups
    # 64-bit build rows past 2**32 (a value cut to 32 bits would show) for the codes of one
    # row; build_hit indexes by build row, so it runs on the 32-bit tables only
    offset = 2**33 if value_dtype == torch.int64 else 0
    values = table._state.value_view()
    values += torch.where(values >= 0, offset, 0).to(values.dtype)
    probe = torch.cat([keys[torch.randperm(rows, generator=generator)],
                       torch.randint(0, 2**30, (3_000,), generator=generator),
                       torch.tensor([-1, -2, 7, 2**32 + 6])]).to(key_dtype)
    valid = torch.rand(probe.shape[0], generator=generator) > 0.05
    marks = [{"build_hit": (rows, torch.uint8)}] if not offset else []
    for options in ({}, {"keep_unmatched": True}, {"probe_hit": (probe.shape[0], torch.bool)},
                    *marks):
        for v in (None, valid):
            cpu, cuda = _probe_both(table, probe, v, **options)
            assert cuda == cpu, (options, v is None)
    if key_dtype == torch.int32:  # an int64 column probing 32-bit codes: code = value - low
        wide = torch.cat([probe.to(torch.int64) + 10, torch.tensor([2**40, -(2**40)])])
        cpu, cuda = _probe_both(table, wide, None, code=(1, 10, 2**32 + 7), keep_unmatched=True)
        assert cuda == cpu
    spec = table._state.spec
    assert spec.bucket_slots == (8 if load > 0.75 and spec.words_per_slot == 1 or load > 0.95
                                 else 4)


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
