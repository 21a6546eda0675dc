"""gh.merge as a drop-in for pandas.merge, cases in the manner of pandas' own merge tests
(pandas/tests/reshape/merge): the indicator column, sort, the anti joins pandas names
``left_anti`` / ``right_anti``, and integer keys of mixed signedness joined by value.
Every case runs pandas on the same frames and compares the frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gpuhash as gh

HOWS = ["inner", "left", "right", "outer"]


def _same(got: pd.DataFrame, want: pd.DataFrame, *, ordered: bool) -> None:
    got, want = got.reset_index(drop=True), want.reset_index(drop=True)
    if not ordered:
        got = got.sort_values(list(got.columns), ignore_index=True)
        want = want.sort_values(list(want.columns), ignore_index=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, check_categorical=False)


def _frames(seed: int, rows: int = 300):
    rng = np.random.default_rng(seed)
    left = pd.DataFrame({"key": rng.integers(0, 40, rows), "lvalue": rng.random(rows)})
    right = pd.DataFrame({"key": rng.integers(20, 60, rows // 3),
                          "rvalue": rng.integers(0, 1000, rows // 3)})
    return left, right


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("indicator", [True, "source"])
def test_the_indicator_column_says_where_each_row_came_from(how, indicator):
    left, right = _frames(1)
    got = gh.merge(left, right, on="key", how=how, indicator=indicator, device="cpu")
    want = pd.merge(left, right, on="key", how=how, indicator=indicator)
    name = "_merge" if indicator is True else indicator
    assert isinstance(got[name].dtype, pd.CategoricalDtype)
    assert list(got[name].cat.categories) == ["left_only", "right_only", "both"]
    _same(got.astype({name: str}), want.astype({name: str}), ordered=True)


def test_an_indicator_named_like_a_column_is_refused():
    left, right = _frames(2)
    with pytest.raises(ValueError, match="indicator='lvalue' names a column"):
        gh.merge(left, right, on="key", indicator="lvalue", device="cpu")
    with pytest.raises(ValueError, match="indicator must be"):
        gh.merge(left, right, on="key", indicator=3, device="cpu")


@pytest.mark.parametrize("how", HOWS)
def test_sort_orders_rows_by_the_keys_as_pandas(how):
    left, right = _frames(3)
    got = gh.merge(left, right, on="key", how=how, sort=True, device="cpu")
    want = pd.merge(left, right, on="key", how=how, sort=True)
    assert got["key"].tolist() == want["key"].tolist()
    _same(got, want, ordered=True)


@pytest.mark.parametrize("how", ["left_anti", "right_anti"])
@pytest.mark.parametrize("unique_right", [False, True])
def test_anti_joins_by_pandas_names(how, unique_right):
    left, right = _frames(4)
    if unique_right:
        right = right.drop_duplicates("key")
    got = gh.merge(left, right, on="key", how=how, device="cpu")
    want = pd.merge(left, right, on="key", how=how)
    _same(got, want, ordered=True)


@pytest.mark.parametrize(("left_type", "right_type"),
                         [("uint8", "int16"), ("uint32", "int64"), ("int8", "uint16"),
                          ("uint64", "int64")])
@pytest.mark.parametrize("how", HOWS)
def test_signed_and_unsigned_keys_join_by_value(left_type, right_type, how):
    left = pd.DataFrame({"key": np.array([0, 1, 2, 5, 7, 100], dtype=left_type),
                         "a": np.arange(6)})
    right_values = [1, 2, 2, 7, 9, 100] if right_type.startswith("u") else [-1, 1, 2, 2, 7, 9]
    right = pd.DataFrame({"key": np.array(right_values, dtype=right_type), "b": np.arange(6)})
    got = gh.merge(left, right, on="key", how=how, device="cpu")
    want = pd.merge(left, right, on="key", how=how)
    _same(got, want, ordered=True)


def test_uint64_keys_past_int64_equal_no_signed_key():
    left = pd.DataFrame({"key": np.array([1, 2**63, 2**64 - 1], dtype=np.uint64), "a": [1, 2, 3]})
    right = pd.DataFrame({"key": np.array([1, -1, -2], dtype=np.int64), "b": [4, 5, 6]})
    for how in HOWS:
        _same(gh.merge(left, right, on="key", how=how, device="cpu"),
              pd.merge(left, right, on="key", how=how), ordered=True)
    with pytest.raises(TypeError, match="past int64's range"):
        gh.merge(left, right, on="key", nulls_equal=True, device="cpu")


def test_dicts_of_tensors_refuse_what_only_tables_take():
    import torch

    side = {"k": torch.tensor([1, 2])}
    with pytest.raises(ValueError, match="dicts of tensors take none of"):
        gh.merge(side, side, on="k", indicator=True)


def test_period_keys_join_by_value():
    left = pd.DataFrame({"k": pd.period_range("2020-01", periods=4, freq="M"), "a": range(4)})
    right = pd.DataFrame({"k": pd.period_range("2020-02", periods=4, freq="M"), "b": range(4)})
    for how in HOWS:
        _same(gh.merge(left, right, on="k", how=how, device="cpu").astype({"k": str}),
              pd.merge(left, right, on="k", how=how).astype({"k": str}), ordered=True)


@pytest.mark.parametrize("keys", [[[1, 2], [3]], [{"x": 1}, {"x": 2}]], ids=["list", "struct"])
def test_nested_keys_are_refused_naming_the_column(keys):
    import pyarrow as pa

    left = pa.table({"k": keys, "a": [1, 2]})
    with pytest.raises(TypeError, match="key column 'k' of the left side is .*nested types"):
        gh.merge(left, left, on="k", device="cpu")
    intervals = pd.DataFrame({"k": pd.interval_range(0, 2), "a": [1, 2]})
    with pytest.raises(TypeError, match="nested types"):
        gh.merge(intervals, intervals, on="k", device="cpu")


@pytest.mark.parametrize("how", [*HOWS, "cross", "left_anti", "right_anti"])
@pytest.mark.parametrize("seed", range(3))
def test_frames_come_out_in_pandas_order_with_repeated_keys(how, seed):
    """Keys repeated on both sides (the general path): the same frame as pandas', row for
    row."""
    rng = np.random.default_rng(seed)
    left = pd.DataFrame({"k": rng.integers(0, 30, 200), "a": np.arange(200)})
    right = pd.DataFrame({"k": rng.integers(10, 50, 80), "b": np.arange(80)})
    on = {} if how == "cross" else {"on": "k"}
    _same(gh.merge(left, right, how=how, device="cpu", **on), pd.merge(left, right, how=how, **on),
          ordered=True)


def _anti_cases():
    """Frames of the kinds pandas' anti-join tests take (their values rewritten): keys named
    differently on each side, keys repeated, time-zone timestamps, extension dtypes, empty
    frames, no common key."""
    text = pd.DataFrame({"A": [1.0, 2.0, 3.0], "B": ["a", "b", "c"]})
    other = pd.DataFrame({"C": [1.0, 2.0, 4.0], "D": ["a", "d", "b"]})
    yield "left_on/right_on", text, other, {"left_on": "B", "right_on": "D"}
    repeated = pd.DataFrame({"A": [1.0, 2.0, 3.0], "B": ["a", "b", "b"]})
    repeated_other = pd.DataFrame({"C": [1.0, 2.0, 4.0], "D": ["b", "d", "d"]})
    yield "repeated keys", repeated, repeated_other, {"left_on": "B", "right_on": "D"}
    stamps = pd.DataFrame({"key": pd.date_range("20151010", periods=2, tz="US/Eastern"),
                           "value": [1.0, 2.0]})
    stamps_other = pd.DataFrame({"key": pd.date_range("20151011", periods=3, tz="US/Eastern"),
                                 "value": [1.0, 2.0, 3.0]})
    yield "timestamps with a time zone", stamps, stamps_other, {"on": "key"}
    for dtype in ("Int64", "int64[pyarrow]", "timestamp[s][pyarrow]", "string[pyarrow]"):
        first = pd.DataFrame({"k": [1, 3, 5], "a": [1, 2, 3]}).astype({"k": dtype})
        second = pd.DataFrame({"k": [2, 3, 4], "b": [1, 2, 3]}).astype({"k": dtype})
        yield f"{dtype} keys", first, second, {"on": "k"}
    empty = pd.DataFrame({"A": [], "B": []})
    yield "empty", empty, pd.DataFrame({"C": [], "D": []}), {"left_on": "A", "right_on": "C"}
    yield ("no common key", pd.DataFrame({"A": [1, 2, 3]}), pd.DataFrame({"B": [4, 5, 6]}),
           {"left_on": "A", "right_on": "B"})


@pytest.mark.parametrize("how", ["left_anti", "right_anti"])
@pytest.mark.parametrize("case", list(_anti_cases()), ids=lambda case: case[0])
def test_anti_joins_in_the_manner_of_pandas_own_tests(case, how):
    """Rows, values and order as pandas gives them (pandas' anti joins keep the input rows'
    index labels; gh.merge's output has a new index, as its other joins do)."""
    _, left, right, keys = case
    _same(gh.merge(left, right, how=how, device="cpu", **keys),
          pd.merge(left, right, how=how, **keys), ordered=True)


def test_dtypes_as_pandas_gives_them():
    """Object columns stay object (Arrow would make them str or bool); datetime keys of two
    units come out at the finer; a category key against an object key as object."""
    left = pd.DataFrame({"k": [1, 2, 3], "text": pd.Series(["a", "b", "c"], dtype=object),
                         "flag": pd.Series([True, False, True], dtype=object)})
    right = pd.DataFrame({"k": [2, 3], "b": [1, 2]})
    got = gh.merge(left, right, on="k", device="cpu")
    assert got.dtypes.to_dict() == pd.merge(left, right, on="k").dtypes.to_dict()
    seconds = pd.DataFrame({"k": pd.to_datetime(["2020-01-01", "2020-01-02"]).astype(
        "datetime64[s]"), "a": [1, 2]})
    nanos = pd.DataFrame({"k": pd.to_datetime(["2020-01-02"]).astype("datetime64[ns]"),
                          "b": [5]})
    for how in HOWS:
        assert gh.merge(seconds, nanos, on="k", how=how, device="cpu")["k"].dtype == (
            pd.merge(seconds, nanos, on="k", how=how)["k"].dtype)
    category = pd.DataFrame({"k": pd.Series(["x", "y"], dtype="category"), "a": [1, 2]})
    plain = pd.DataFrame({"k": pd.Series(["y", "z"], dtype=object), "b": [1, 2]})
    assert gh.merge(category, plain, on="k", how="outer", device="cpu")["k"].dtype == object


@pytest.mark.parametrize("how", [*HOWS, "left_anti", "right_anti"])
def test_merges_on_both_indexes(how):
    left = pd.DataFrame({"a": [1, 2, 3]}, index=pd.Index(["x", "y", "z"], name="id"))
    right = pd.DataFrame({"b": [5, 6, 7]}, index=["z", "x", "w"])
    got = gh.merge(left, right, left_index=True, right_index=True, how=how, device="cpu")
    want = pd.merge(left, right, left_index=True, right_index=True, how=how)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_an_index_against_a_column_is_refused_with_the_fix():
    left = pd.DataFrame({"a": [1, 2]})
    with pytest.raises(NotImplementedError, match="reset_index"):
        gh.merge(left, left, left_index=True, right_on="a", device="cpu")
