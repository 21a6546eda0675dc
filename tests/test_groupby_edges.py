"""gh.groupby and gh.factorize at their edges: chunked variances of large values, every row's
key dropped, int64 and uint64 means, dictionaries that repeat a value or hold a null, pandas
nullable and categorical keys, unsigned and half-float values, null-typed columns, and the
errors for a corr with a string, values of another length and a key named twice; and long key
columns whose bounds come from a sample."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from compaction_cases import FIRST_BATCH, assert_numbered_by_first_row, compaction_cases

import gpuhash as gh

# --- wrong answers ------------------------------------------------------------------------


def test_chunked_var_of_values_with_a_large_mean():
    values = 1e9 + np.arange(10, dtype=np.float64)
    table = pa.table({"k": [1] * 10, "v": values})
    out = gh.groupby(table, "k", {"v": ["var", "std"]}, device="cpu", chunk_rows=1)
    expected = float(np.var(values, ddof=1))
    assert out.column("v_var").to_pylist()[0] == pytest.approx(expected, rel=1e-6)
    assert out.column("v_std").to_pylist()[0] == pytest.approx(math.sqrt(expected), rel=1e-6)


def test_all_null_key_dropped_leaves_no_phantom_group():
    table = pa.table({"a": pa.array([None, None], pa.int64()), "b": [1, 2], "c": [0, 60000],
                      "v": [5, 7]})
    out = gh.groupby(table, ["a", "b", "c"], {"v": ["sum", "size"]}, dropna=True,
                     device="cpu")
    assert out.num_rows == 0  # pandas / DuckDB: every row has a null key, all dropped


def test_factorize_every_key_null_dropped():
    keys = (torch.tensor([0, 0]), torch.tensor([1, 2]), torch.tensor([0, 60000]))
    ids, uniques = gh.factorize(keys, valid=(torch.tensor([False, False]), None, None),
                                dropna=True)
    assert ids.tolist() == [-1, -1]
    assert all(u.shape[0] == 0 for u in uniques)


def test_int64_mean_does_not_wrap():
    frame = pd.DataFrame({"k": [1] * 4, "v": np.full(4, 2**62, dtype=np.int64)})
    out = gh.groupby(frame, "k", {"v": "mean"}, device="cpu")
    assert out["v"].tolist() == [pytest.approx(float(2**62))]


def test_uint64_mean_and_var():
    values = np.array([2**64 - 2, 5], dtype=np.uint64)
    frame = pd.DataFrame({"k": [1, 1], "v": values})
    out = gh.groupby(frame, "k", {"v": ["mean", "var"]}, device="cpu")
    expected = frame.groupby("k").v.agg(["mean", "var"])
    assert out["v_mean"].tolist() == [pytest.approx(expected["mean"].iloc[0])]
    assert out["v_var"].tolist() == [pytest.approx(expected["var"].iloc[0])]


_VALUE_DTYPES = [torch.int8, torch.uint8, torch.int16, torch.uint16, torch.int32, torch.uint32,
                 torch.int64, torch.uint64, torch.float16, torch.bfloat16, torch.float32,
                 torch.float64, torch.bool]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", _VALUE_DTYPES, ids=str)
def test_every_value_dtype_aggregates_as_pandas(dtype, device):
    """Small values of every dtype a dict of tensors may hold, through every aggregation of
    numbers, against pandas on their float64 (or bool) copies. Small uint64 values once
    had a mean, median and variance of 0 (their float64 conversion lost them)."""
    generator = torch.Generator().manual_seed(9)
    keys = torch.randint(0, 4, (60,), generator=generator)
    if dtype == torch.bool:
        values = torch.rand(60, generator=generator) < 0.5
    else:
        values = torch.randint(0, 9, (60,), generator=generator).to(dtype)
    aggs = ["sum", "min", "max", "mean", "count", "median", "nunique", "first", "last", "var",
            "any", "all"]
    got = gh.groupby({"k": keys.to(device), "v": values.to(device)}, "k", {"v": aggs},
                     sort=True)
    plain = values.numpy() if dtype == torch.bool else values.to(torch.float64).numpy()
    want = pd.DataFrame({"k": keys.numpy(), "v": plain}).groupby("k")["v"].agg(aggs)
    for agg in aggs:
        mine = got[f"v_{agg}"].cpu()
        mine = mine.numpy() if mine.dtype == torch.bool else mine.to(torch.float64).numpy()
        assert np.allclose(mine.astype(np.float64), want[agg].to_numpy(np.float64)), agg


def test_corr_with_a_string_column_is_refused():
    table = pa.table({"k": [1, 2, 1], "v": [1.0, 2.0, 3.0], "s": ["a", "b", "c"]})
    with pytest.raises(TypeError, match="s"):
        gh.groupby(table, "k", {"v": ("corr", "s")}, device="cpu")


def test_dictionary_with_repeated_values_groups_by_value():
    keys = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 0]), pa.array(["a", "a", "b"]))
    table = pa.table({"k": keys, "v": [1, 2, 3, 4]})
    out = gh.groupby(table, "k", {"v": "sum"}, sort=True, device="cpu")
    assert out.to_pydict() == {"k": ["a", "b"], "v": [7, 3]}  # DuckDB: a -> 7, b -> 3


def test_dictionary_null_value_is_a_null_key():
    keys = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 0]), pa.array(["a", None]))
    table = pa.table({"k": keys, "v": [1, 2, 3, 4]})
    out = gh.groupby(table, "k", {"v": "sum"}, sort=True, device="cpu")
    assert out.to_pydict() == {"k": ["a", None], "v": [5, 5]}
    dropped = gh.groupby(table, "k", {"v": "sum"}, sort=True, dropna=True, device="cpu")
    assert dropped.to_pydict() == {"k": ["a"], "v": [5]}


def test_dictionary_null_value_is_a_null_value():
    values = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 0]), pa.array(["a", None]))
    table = pa.table({"k": [1, 1, 1, 1], "v": values})
    out = gh.groupby(table, "k", {"v": ["count", "nunique"]}, device="cpu")
    assert out.to_pydict() == {"k": [1], "v_count": [2], "v_nunique": [1]}


def test_pandas_nullable_int_key_keeps_its_values():
    frame = pd.DataFrame({"k": pd.array([2**53 + 1, None, 2**53 + 1], dtype="Int64"),
                          "v": [1, 2, 3]})
    out = gh.groupby(frame, "k", {"v": "sum"}, sort=True, device="cpu")
    assert int(out["k"].iloc[0]) == 2**53 + 1
    assert out["k"].dtype == frame["k"].dtype


def test_sort_follows_an_ordered_categorical():
    frame = pd.DataFrame({"k": pd.Categorical(["low", "high", "mid", "low"],
                                              categories=["low", "mid", "high"], ordered=True),
                          "v": [1, 2, 3, 4]})
    out = gh.groupby(frame, "k", {"v": "sum"}, sort=True, device="cpu")
    assert list(out["k"]) == ["low", "mid", "high"]


# --- errors on valid input, and unclear errors ----------------------------------------------


def test_array_groupby_checks_value_length():
    with pytest.raises(ValueError, match="length"):
        gh.groupby(np.array([2, 1]), np.array([1, 5, 3]), "sum")


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("agg", ["min", "max"])
def test_unsigned_min_max(dtype, agg):
    frame = pd.DataFrame({"k": [1, 1, 2], "v": np.array([np.iinfo(dtype).max, 5, 7],
                                                        dtype=dtype)})
    out = gh.groupby(frame, "k", {"v": agg}, sort=True, device="cpu")
    assert out["v"].tolist() == frame.groupby("k").v.agg(agg).tolist()


@pytest.mark.parametrize("agg", ["median", "var"])
def test_float16_median_and_var(agg):
    table = pa.table({"k": [1, 1, 2],
                      "v": pa.array(np.array([1.5, 5.0, 7.0], dtype=np.float16))})
    out = gh.groupby(table, "k", {"v": agg}, sort=True, device="cpu")
    expected = {"median": [3.25, 7.0], "var": [6.125, None]}[agg]
    assert out.column("v").to_pylist() == expected


def test_chunked_empty_table():
    table = pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], pa.float64())})
    out = gh.groupby(table, "k", {"v": "sum"}, device="cpu", chunk_rows=3)
    assert out.num_rows == 0 and out.column_names == ["k", "v"]


def test_null_typed_key_column():
    table = pa.table({"k": pa.nulls(3), "v": [1, 2, 3]})
    out = gh.groupby(table, "k", {"v": "sum"}, device="cpu")
    assert out.column("v").to_pylist() == [6]


def test_repeated_key_error_names_by():
    table = pa.table({"k": [1, 2, 1], "v": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="by"):
        gh.groupby(table, ["k", "k"], {"v": "sum"}, device="cpu")


def test_a_list_of_numbers_as_keys_names_the_fix():
    with pytest.raises(TypeError, match="list of numbers: pass one array"):
        gh.factorize([3, 1, 3])


def test_a_dictionary_of_integers_is_aggregated_by_value():
    values = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1]), pa.array([10, 20]))
    table = pa.table({"k": [1, 1, 2], "v": values})
    out = gh.groupby(table, "k", {"v": ["sum", "max"]}, sort=True, device="cpu")
    assert out.to_pydict() == {"k": [1, 2], "v_sum": [30, 20], "v_max": [20, 20]}


def test_chunked_pandas_answer_keeps_nullable_dtypes():
    """A pandas frame grouped in chunks answers with the dtypes of the whole frame's answer:
    nullable integer keys and a min of them stay Int64 (Arrow's plain conversion gives
    float64 for a column with nulls)."""
    frame = pd.DataFrame({"k": pd.array([1, 2, None, 1], dtype="Int64"),
                          "v": pd.array([1, 2, 3, None], dtype="Int64")})
    whole = gh.groupby(frame, "k", {"v": "min"}, device="cpu")
    chunked = gh.groupby(frame, "k", {"v": "min"}, device="cpu", chunk_rows=2)
    assert chunked.dtypes.tolist() == whole.dtypes.tolist()
    pd.testing.assert_frame_equal(chunked.sort_values("k", ignore_index=True),
                                  whole.sort_values("k", ignore_index=True))


@pytest.mark.parametrize("case", ["repeating", "distinct", "sample_misleads", "empty"])
def test_cpu_compaction_numbers_every_value_once(case):
    """The CPU engine's group_compact: repeating values numbered by first appearance with
    each code's first row (the CUDA engine's codes), mostly distinct ones by a sort; a sample
    that promised few values (every sampled row alike) still numbers every value, its tables
    grown as they fill."""
    from gpuhash.groupby.cpu import engine

    generator = torch.Generator().manual_seed(3)
    rows = 200_000
    if case == "repeating":
        values = torch.randint(0, 5000, (rows,), generator=generator) * 1_000_003 - 7
    elif case == "distinct":
        values = torch.randperm(rows, generator=generator) * 31
    elif case == "sample_misleads":  # one chunk of distinct values, the rest one value
        rows = 1 << 20
        values = torch.zeros(rows, dtype=torch.int64)
        values[: rows // engine.COMPACT_CHUNKS] = torch.arange(rows // engine.COMPACT_CHUNKS) * 17
    else:
        values = torch.zeros(0, dtype=torch.int64)
    codes, uniques, first = engine.group_compact(values)
    assert torch.equal(uniques[codes], values)
    assert uniques.unique().shape == uniques.shape == values.unique().shape
    if case in ("repeating", "sample_misleads"):
        assert first is not None
        want = torch.full((uniques.shape[0],), rows, dtype=torch.int64)
        want.scatter_reduce_(0, codes, torch.arange(rows), "amin")
        assert torch.equal(first, want)  # each code's least row ...
        assert bool((first[1:] > first[:-1]).all())  # ... numbered in that order


@pytest.mark.parametrize("case", list(compaction_cases()))
def test_cuda_compaction_logic_over_cpu_tables(case, monkeypatch):
    """The CUDA engine's group_compact decides and numbers through HashMap only, so over CPU
    tensors it runs the same steps on the CPU engine's tables: each of its ways gives
    pandas' factorize codes."""
    from gpuhash.groupby.cuda import engine as cuda_engine

    monkeypatch.setattr(cuda_engine, "COMPACT_BATCH", FIRST_BATCH)
    keys = compaction_cases()[case]
    codes, uniques, first = cuda_engine.group_compact(keys)
    assert_numbered_by_first_row(keys, codes, uniques, first)
    assert np.array_equal(codes.numpy(), pd.factorize(keys.numpy())[0])


@pytest.mark.parametrize("op", ["sum", "min", "max"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int32, torch.int64])
def test_reductions_by_ranges_of_groups_equal_one_pass_bit_for_bit(op, dtype, monkeypatch):
    from gpuhash.groupby.cpu import engine as cpu_engine

    generator = torch.Generator().manual_seed(3)
    rows, groups = 50_000, 20_000  # under four rows a group: one set of accumulators
    codes = torch.randint(-5, groups, (rows,), generator=generator)  # below zero: dropped
    if dtype.is_floating_point:
        values = (torch.randn(rows, generator=generator) * 1e6).to(dtype)
        values[torch.rand(rows, generator=generator) < 0.05] = float("nan")
    else:
        values = torch.randint(-10**6, 10**6, (rows,), generator=generator).to(dtype)
    for valid in (None, torch.rand(rows, generator=generator) > 0.1):
        monkeypatch.setattr(cpu_engine, "RANGED_GROUPS", 1 << 40)  # one pass
        whole = cpu_engine.group_reduce(codes, 0, groups, values, valid, op)
        monkeypatch.setattr(cpu_engine, "RANGED_GROUPS", 64)  # ranges of groups
        monkeypatch.setattr(cpu_engine, "_cores", lambda: 7)
        assert cpu_engine._chunks(rows, groups) == 1
        ranged = cpu_engine.group_reduce(codes, 0, groups, values, valid, op)
        for a, b in zip(whole, ranged):
            assert torch.equal(a.view(torch.int64) if a.is_floating_point() else a,
                               b.view(torch.int64) if b.is_floating_point() else b)


@pytest.mark.parametrize("dropna", [True, False])
@pytest.mark.parametrize("sort", [True, False])
def test_integer_keys_with_nulls_code_in_one_pass_as_pandas_groups(dropna, sort):
    """Several dense integer key columns with nulls take one mixed-radix pass, a null its
    own digit, as columns without nulls do; a column holding its dtype's largest value
    cannot (its nulls would read one past it) and takes the column-by-column path."""
    rng = np.random.default_rng(int(dropna) + 2 * int(sort))
    rows = 400
    frame = pd.DataFrame({
        "a": pd.array(rng.integers(-3, 4, rows), dtype="Int32"),
        "b": pd.array(rng.integers(0, 3, rows), dtype="Int8"),
        "c": pd.array(rng.integers(125, 128, rows), dtype="Int8"),  # up to int8's largest
        "v": rng.integers(0, 100, rows)})
    for name in ("a", "b", "c"):
        frame.loc[rng.random(rows) < 0.2, name] = pd.NA
    for by in (["a", "b"], ["a", "b", "c"]):
        want = frame.groupby(by, dropna=dropna, sort=True)["v"].sum().reset_index()
        got = gh.groupby(frame, by, {"v": "sum"}, dropna=dropna, sort=sort, device="cpu")
        got = got.sort_values(by, na_position="last").reset_index(drop=True)
        for name in [*by, "v"]:
            assert got[name].astype(object).where(got[name].notna(), None).tolist() == \
                want[name].astype(object).where(want[name].notna(), None).tolist(), name
    columns = [torch.from_numpy(frame[n].fillna(0).to_numpy(np.int64)) for n in ("a", "b")]
    valids = [torch.from_numpy(frame[n].notna().to_numpy()) for n in ("a", "b")]
    from gpuhash.groupby.keys import factorize_columns

    groups = factorize_columns(columns, valids, dropna=dropna, order="first")
    assert groups.strategy.startswith("offset+offset keys")


_DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_keys_past_a_sampled_span_are_still_grouped(device, dtype, monkeypatch, capsys):
    """A long key column takes its sample's bounds where every aggregation is an engine pass;
    keys the sample missed (here the least and the greatest, off its rows) make the
    group-by run again on the column's own bounds, so no row is lost."""
    from gpuhash.groupby import keys as keys_module

    monkeypatch.setattr(keys_module, "BOUNDS_SAMPLE_FROM", 1 << 12)
    monkeypatch.setattr(keys_module, "BOUNDS_SAMPLE", 1 << 6)  # every 256th row
    rows = 1 << 14
    generator = torch.Generator().manual_seed(11)
    key = torch.randint(0, 40, (rows,), generator=generator).to(dtype)
    values = torch.randint(-9, 9, (rows,), generator=generator, dtype=torch.int32)
    floats = torch.rand(rows, generator=generator, dtype=torch.float64)
    floats[::9] = float("nan")
    frame = pd.DataFrame({"k": key.numpy(), "v": values.numpy(), "f": floats.numpy()})
    aggs = {"v": ["sum", "min", "max", "count", "size"], "f": ["mean", "sum"]}
    for outliers in ({}, {5: -7, 12_345: 900}):
        for row, value in outliers.items():
            key[row] = value
            frame.loc[row, "k"] = value
        table = {"k": key.to(device), "v": values.to(device), "f": floats.to(device)}
        got = gh.groupby(table, "k", aggs, sort=True, explain=True)
        shown = capsys.readouterr().out
        assert "bounds sampled" in shown  # the first run, shown even when it is run again
        assert ("grouped again" in shown) == bool(outliers)
        want = frame.groupby("k").agg(aggs)
        assert got["k"].cpu().tolist() == want.index.tolist()
        for name, agg in [(n, a) for n, a_list in aggs.items() for a in a_list]:
            mine = got[f"{name}_{agg}"].cpu().double().numpy()
            assert np.allclose(mine, want[(name, agg)].to_numpy(np.float64)), (name, agg)


def test_a_sampled_span_is_not_taken_for_a_pass_that_reads_codes(monkeypatch, capsys):
    """The median reads every row's code: a sample's bounds could send a row past the groups,
    so its group-by reads the column's own bounds; so does a key column of many values."""
    from gpuhash.groupby import keys as keys_module

    monkeypatch.setattr(keys_module, "BOUNDS_SAMPLE_FROM", 1 << 12)
    monkeypatch.setattr(keys_module, "BOUNDS_SAMPLE", 1 << 6)
    key = torch.arange(1 << 13) % 50
    got = gh.groupby({"k": key, "v": key.double()}, "k", {"v": ["median", "sum"]},
                     sort=True, explain=True)
    assert "bounds sampled" not in capsys.readouterr().out
    assert got["v_median"].tolist() == [float(k) for k in range(50)]
    # nor for a sample spanning many values (each seen a few times: its extremes are often
    # missed, and a second run would cost more than the pass it spares)
    wide = torch.arange(1 << 13) % 3000
    got = gh.groupby({"k": wide, "v": wide}, "k", {"v": "sum"}, explain=True)
    assert "bounds sampled" not in capsys.readouterr().out
    assert got["k"].shape[0] == 3000


@pytest.mark.parametrize("device", _DEVICES)
def test_strided_arrays_group_as_their_copies(device):
    """Views with strides (every other row, a column of a matrix) give the answers of their
    contiguous copies: the CUDA kernels read rows one after another."""
    generator = torch.Generator().manual_seed(5)
    matrix = torch.randint(0, 50, (4000, 3), generator=generator).to(device)
    floats = torch.rand((4000, 3), generator=generator, dtype=torch.float64).to(device)
    keys, values = matrix[::2, 0], floats[1::2, 2]
    assert not keys.is_contiguous() and not values.is_contiguous()
    got = gh.groupby({"k": keys, "v": values}, "k", {"v": ["sum", "max", "median"]}, sort=True)
    want = gh.groupby({"k": keys.contiguous(), "v": values.contiguous()}, "k",
                      {"v": ["sum", "max", "median"]}, sort=True)
    for name in want:  # float sums by atomics on a GPU: equal up to their order of adding
        torch.testing.assert_close(got[name], want[name], rtol=1e-12, atol=0, msg=name)
    ids, uniques = gh.factorize((keys, matrix[::2, 1]))
    want_ids, want_uniques = gh.factorize((keys.contiguous(), matrix[::2, 1].contiguous()))
    assert torch.equal(ids, want_ids)
    assert all(torch.equal(a, b) for a, b in zip(uniques, want_uniques))
    uniques, sums = gh.groupby(keys, values, "sum", sort=True)
    torch.testing.assert_close(sums["value"], want["v_sum"], rtol=1e-12, atol=0)


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("dtype", [pa.uint16(), pa.uint32(), pa.uint64()], ids=str)
@pytest.mark.parametrize("dropna", [True, False])
def test_unsigned_keys_with_nulls_group_as_a_model(device, dtype, dropna):
    """Unsigned keys with nulls, their extremes among them: the null key is zeroed through the
    signed twin (CUDA has no select kernel for these dtypes). pandas makes uint64 keys with
    nulls float64, which rounds 2**64 - 1: the expected groups are written out."""
    top = {pa.uint16(): 2**16 - 1, pa.uint32(): 2**32 - 1, pa.uint64(): 2**64 - 1}[dtype]
    keys = pa.array([top, None, 0, top, None, 7], type=dtype)
    table = pa.table({"k": keys, "v": pa.array([1, 2, 3, 4, 5, 6], type=pa.int64())})
    got = gh.groupby(table, "k", {"v": "sum"}, sort=True, dropna=dropna, device=device)
    want = {0: 3, 7: 6, top: 5} if dropna else {0: 3, 7: 6, top: 5, None: 7}
    assert got.column("k").to_pylist() == list(want)  # nulls last, as in pandas
    assert got.column("v").to_pylist() == list(want.values())
    ids, uniques = gh.factorize(torch.tensor([top, 0, top, 5], dtype=getattr(
        torch, str(dtype))).to(device), sort=True)
    assert ids.tolist() == [2, 0, 2, 1] and uniques.cpu().tolist() == [0, 5, top]


def test_polars_binary_columns_group_and_aggregate():
    """polars gives its Binary columns as Arrow binary views: keys and values both work."""
    pl = pytest.importorskip("polars")
    frame = pl.DataFrame({"k": [b"ab", b"cd", b"ab"], "b": [b"x", b"z", b"y"], "v": [1, 2, 3]})
    got = gh.groupby(frame, "k", {"v": "sum", "b": "max"}, sort=True, device="cpu")
    assert got.to_dicts() == [{"k": b"ab", "v": 4, "b": b"y"}, {"k": b"cd", "v": 2, "b": b"z"}]


def test_polars_categoricals_of_chunks_with_their_own_categories_group_by_value():
    """Chunks of a polars Categorical that differ in their categories come as dictionaries of
    string views, which Arrow cannot cast: they are grouped by value."""
    pl = pytest.importorskip("polars")
    first = pl.DataFrame({"k": pl.Series(["b", "a"], dtype=pl.Categorical), "v": [1, 2]})
    second = pl.DataFrame({"k": pl.Series(["c", "a"], dtype=pl.Categorical), "v": [3, 4]})
    frame = pl.concat([first, second], rechunk=False)
    got = gh.groupby(frame, "k", {"v": "sum"}, sort=True, device="cpu")
    assert got.to_dicts() == [{"k": "a", "v": 6}, {"k": "b", "v": 1}, {"k": "c", "v": 3}]
