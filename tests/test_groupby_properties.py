"""gh.groupby of pyarrow tables against a plain-Python model, on tables Hypothesis draws: one to
three key columns of every kind the group-by takes (signed, unsigned and 64-bit integers,
floats with NaN and signed zeros, bools, strings), nulls anywhere, and value columns with
nulls and NaN; the aggregations the engines reduce, sorted groups, null keys kept or dropped.

The model states the rules the README gives: a null key (or NaN) is a group, last when sorted,
unless ``dropna``; -0.0 and 0.0 are one key; nulls and NaN in values are skipped; a sum of
nothing is 0, a mean, min, max, median, first or last of nothing is null, a variance (ddof=1)
of fewer than two values too; ``count`` counts values, ``size`` rows, ``nunique`` distinct
values; ``any`` / ``all`` of nothing are False / True; a correlation needs two rows where both
columns hold a value, and spread in each.
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
AGGS = {"vi": ["sum", "min", "max", "count", "mean", "nunique", "first", "any", "all",
               ("corr", "vf")],
        "vf": ["sum", "mean", "max", "size", "median", "var", "last", ("quantile", 0.25)]}
NAMES = {("corr", "vf"): "corr_vf", ("quantile", 0.25): "quantile_0.25"}


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
                if isinstance(agg, tuple):
                    out[f"{column}_{NAMES[agg]}"] = (
                        _corr(data[column], data[agg[1]], members) if agg[0] == "corr"
                        else _quantile(values, agg[1]))
                    continue
                out[f"{column}_{agg}"] = {
                    "sum": sum(values), "count": len(values), "size": len(members),
                    "mean": sum(values) / len(values) if values else None,
                    "min": min(values) if values else None,
                    "max": max(values) if values else None,
                    "nunique": len(set(values)),
                    "first": values[0] if values else None,
                    "last": values[-1] if values else None,
                    "median": statistics.median(values) if values else None,
                    "var": statistics.variance(values) if len(values) > 1 else None,
                    "any": any(v != 0 for v in values),
                    "all": all(v != 0 for v in values)}[agg]
        answer[key] = out
    return answer


def _quantile(values: list, q: float):
    """Linear interpolation between the two nearest ranks (pandas' default)."""
    if not values:
        return None
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _corr(first: list, second: list, members: list[int]):
    """Pearson's r over the rows where both are present; null for under two such rows or a
    column without spread."""
    pairs = [(first[r], second[r]) for r in members
             if _present([first[r]]) and _present([second[r]])]
    if len(pairs) < 2:
        return None
    a, b = zip(*pairs)
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    aa = sum((x - mean_a) ** 2 for x in a)
    bb = sum((y - mean_b) ** 2 for y in b)
    ab = sum((x - mean_a) * (y - mean_b) for x, y in pairs)
    return None if aa == 0 or bb == 0 else ab / math.sqrt(aa * bb)


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
