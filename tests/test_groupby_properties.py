"""gh.groupby of pyarrow tables against a plain-Python model, on tables Hypothesis draws: one to
three key columns of every kind the group-by takes (signed, unsigned and 64-bit integers,
floats with NaN and signed zeros, bools, strings), nulls anywhere, and value columns with
nulls and NaN; the aggregations the engines reduce, sorted groups, null keys kept or dropped.

The model states the rules the README gives: a null key (or NaN) is a group, last when sorted,
unless ``dropna``; -0.0 and 0.0 are one key; nulls and NaN in values are skipped; a sum of
nothing is 0, a mean, min, max, median, first or last of nothing is null, a variance (ddof=1)
of fewer than two values too; ``count`` counts values, ``size`` rows, ``nunique`` distinct
values.
"""

from __future__ import annotations

import math
import statistics

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuhash as gh

KEY_KINDS = {
    "int8": (pa.int8(), st.integers(-128, 127)),
    "int32": (pa.int32(), st.integers(-3, 3)),
    "int64": (pa.int64(), st.sampled_from([0, 1, -2**63, 2**63 - 1, 2**40])),
    "uint16": (pa.uint16(), st.sampled_from([0, 7, 65535])),
    "uint64": (pa.uint64(), st.sampled_from([0, 2**63, 2**64 - 1])),
    "float64": (pa.float64(), st.sampled_from([0.0, -0.0, 1.5, -2.25, math.nan, math.inf])),
    "bool": (pa.bool_(), st.booleans()),
    "string": (pa.string(), st.sampled_from(["", "a", "b", "ab", "é", "a" * 20])),
}
AGGS = {"vi": ["sum", "min", "max", "count", "mean", "nunique", "first"],
        "vf": ["sum", "mean", "max", "size", "median", "var", "last"]}


@st.composite
def tables(draw):
    rows = draw(st.integers(0, 40))
    kinds = draw(st.lists(st.sampled_from(sorted(KEY_KINDS)), min_size=1, max_size=3))
    columns = {}
    for i, kind in enumerate(kinds):
        type_, values = KEY_KINDS[kind]
        cells = draw(st.lists(st.one_of(st.none(), values), min_size=rows, max_size=rows))
        columns[f"k{i}"] = pa.array(cells, type=type_)
    columns["vi"] = pa.array(draw(st.lists(st.one_of(st.none(), st.integers(-9, 9)),
                                           min_size=rows, max_size=rows)), type=pa.int32())
    floats = st.one_of(st.none(), st.sampled_from([math.nan, 0.5, -1.0]),
                       st.floats(-100, 100, allow_nan=False))
    columns["vf"] = pa.array(draw(st.lists(floats, min_size=rows, max_size=rows)),
                             type=pa.float64())
    return pa.table(columns), [f"k{i}" for i in range(len(kinds))]


def _key(value):
    """A key cell as the model groups it: None for a null or NaN, 0.0 for -0.0."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value + 0.0 if isinstance(value, float) else value


def _present(values):
    return [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


def _model(table: pa.Table, keys: list[str], dropna: bool) -> dict:
    """Key tuple -> {output column: value}, by the module docstring's rules."""
    data = table.to_pydict()
    rows: dict[tuple, list[int]] = {}
    for row in range(table.num_rows):
        key = tuple(_key(data[k][row]) for k in keys)
        if dropna and None in key:
            continue
        rows.setdefault(key, []).append(row)
    answer = {}
    for key, members in rows.items():
        out = {}
        for column, aggs in AGGS.items():
            values = _present([data[column][r] for r in members])
            for agg in aggs:
                out[f"{column}_{agg}"] = {
                    "sum": sum(values), "count": len(values), "size": len(members),
                    "mean": sum(values) / len(values) if values else None,
                    "min": min(values) if values else None,
                    "max": max(values) if values else None,
                    "nunique": len(set(values)),
                    "first": values[0] if values else None,
                    "last": values[-1] if values else None,
                    "median": statistics.median(values) if values else None,
                    "var": statistics.variance(values) if len(values) > 1 else None}[agg]
        answer[key] = out
    return answer


def _sort_key(key: tuple):
    """Keys in order, a null last in each column."""
    return tuple((value is None, 0 if value is None else value) for value in key)


def _check(table: pa.Table, keys: list[str], dropna: bool, sort: bool, device: str) -> None:
    got = gh.groupby(table, keys, AGGS, sort=sort, dropna=dropna, device=device).to_pydict()
    want = _model(table, keys, dropna)
    got_keys = [tuple(_key(got[k][i]) for k in keys) for i in range(len(got[keys[0]]))]
    in_order = got_keys if sort else sorted(got_keys, key=_sort_key)
    assert in_order == sorted(want, key=_sort_key)  # each group once (sorted: in key order)
    for i, key in enumerate(got_keys):
        for name, expected in want[key].items():
            value = got[name][i]
            if expected is None or value is None:
                assert value is None and expected is None, (key, name, value, expected)
            else:
                assert value == pytest.approx(expected, rel=1e-9, abs=1e-9), (key, name)


@settings(max_examples=150, deadline=None)
@given(drawn=tables(), dropna=st.booleans(), sort=st.booleans())
def test_groupby_of_random_tables_matches_the_model(drawn, dropna, sort):
    table, keys = drawn
    _check(table, keys, dropna, sort, "cpu")


@pytest.mark.gpu
@settings(max_examples=60, deadline=None)
@given(drawn=tables(), dropna=st.booleans(), sort=st.booleans())
def test_groupby_of_random_tables_on_a_gpu_matches_the_model(drawn, dropna, sort):
    table, keys = drawn
    _check(table, keys, dropna, sort, "cuda")
