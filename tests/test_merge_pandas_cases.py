"""gh.merge against pandas.merge on the inputs of pandas' own merge tests: keys and dtypes.

Each case builds the frames a pandas test builds, runs ``pandas.merge`` and ``gh.merge`` on
them and compares the frames: values, dtypes, column labels and row order (pandas defines the
order of every merge on columns). This file holds the cases about key and column types, from
pandas/tests/reshape/merge: test_merge.py (keys, dtypes, time zones, periods, categoricals,
missing values) and test_multi.py (several key columns), and the helpers that
test_merge_pandas_options.py (options, labels, indexes, order, anti and cross joins) shares.
Where gh.merge refuses a case with a clear error the case asserts the refusal; where it
answers otherwise than pandas the case is an expected failure naming the difference. pandas
matches missing keys to each other where gh.merge needs ``nulls_equal=True``; cases with
missing keys pass it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gpuhash as gh

HOWS = ["inner", "left", "right", "outer"]
EA_NUMBERS = ["Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64",
              "Float32", "Float64"]
DF = pd.DataFrame


def _same(left, right, *, check_index=True, nulls_equal=False, **options):
    """pandas.merge and gh.merge of the same frames give the same frame."""
    want = pd.merge(left, right, **options)
    got = gh.merge(left, right, device="cpu", nulls_equal=nulls_equal, **options)
    if not check_index:
        got, want = got.reset_index(drop=True), want.reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)
    return got


def _differs(reason: str):
    return pytest.mark.xfail(strict=True, reason=reason)


def _case(name, left, right, *, marks=(), **options):
    return pytest.param(left, right, options, id=name, marks=marks)


def _groups(groups: int, rows: int, seed: int) -> np.ndarray:
    values = np.resize(np.arange(groups), rows)
    np.random.default_rng(seed).shuffle(values)
    return values


RNG = np.random.default_rng(2)
TWO_KEYS = DF({"key1": _groups(8, 50, 1), "key2": _groups(8, 50, 2),
               "data1": RNG.standard_normal(50), "data2": RNG.standard_normal(50)})
TWO_KEYS = TWO_KEYS[TWO_KEYS["key2"] > 1]
TWO_KEYS_RIGHT = DF({"key1": _groups(8, 10, 3), "key2": _groups(4, 10, 4),
                     "value": RNG.standard_normal(10)})
DAYS = pd.to_datetime(["2012-01-12", "2011-02-04", "2010-02-03", "2012-01-12", "2011-02-04",
                       "2012-04-03", "2012-03-04", "2008-05-01", "2010-02-03", "2012-02-03"])
KINDS = pd.CategoricalDtype(["foo", "bar"])
CATEGORY_LEFT = DF({"X": pd.Series(RNG.choice(["foo", "bar"], 10)).astype(KINDS),
                    "Y": RNG.choice(["one", "two", "three"], 10)})
CATEGORY_RIGHT = DF({"X": pd.Series(["foo", "bar"]).astype(KINDS), "Z": [1, 2]})
DATES = [pd.Timestamp("2001-01-01").date(), pd.Timestamp("2001-01-02").date(),
         pd.Timestamp("2001-01-03").date()]
UTC = pd.DatetimeTZDtype(tz="UTC")
WITH_DATES = DF({"date": pd.DatetimeIndex(["2018"], dtype=UTC), "value": [4.0],
                 "date2": pd.DatetimeIndex(["2019"], dtype=UTC)})
STAMPS = pd.date_range("2025-07-06", periods=3, freq="h")
MADRID = pd.to_datetime(["2017-10-29 03:00", "2017-10-29 04:00", "2017-10-29 05:00"])
SELF_CATEGORIES = DF({"a": list("abcdefghij") * 5, "b": list("twxyz") * 10,
                      "c": [c for c in "mnupo" for _ in range(10)],
                      "d": [c * 2 for c in "abcdefghij" for _ in range(5)]}).astype("category")

CASES = [
    # test_merge.py: keys and columns
    *(_case(f"two int keys, on={on}, {how}", TWO_KEYS, TWO_KEYS_RIGHT, on=on, how=how)
      for on in (None, "key2") for how in HOWS),
    _case("int labels against float copies", DF({0: [1, 0, 1, 0], 1: [0, 1, 0, 0],
                                                 2: [0, 0, 2, 0], 3: [1, 0, 0, 3]}),
          DF({0: [1.0, 0, 1, 0], 1: [0.0, 1, 0, 0], 2: [0.0, 0, 2, 0], 3: [1.0, 0, 0, 3]})),
    _case("self merge on text", DF({"key": list("abcdeea"), "v1": np.arange(7.0)}),
          DF({"key": list("abcdeea"), "v1": np.arange(7.0)}), on="key"),
    *(_case(f"other key names, suffixes {s}", TWO_KEYS, TWO_KEYS_RIGHT, left_on="key2",
            right_on="key1", suffixes=s) for s in ((".foo", ".bar"), ("_l", None))),
    *(_case(f"lkey/rkey outer sort={sort}", DF({"lkey": ["foo", "bar", "baz", "foo"],
                                                "value": [1, 2, 3, 4]}),
            DF({"rkey": ["foo", "bar", "qux", "foo"], "value": [5, 6, 7, 8]}),
            left_on="lkey", right_on="rkey", how="outer", sort=sort) for sort in (False, True)),
    _case("key after the values, outer", DF({"value": range(5), "key": [1, 1, 2, 2, 3]}),
          DF({"key": [1, 1, 2, 3, 4, 5], "rvalue": range(6)}), on="key", how="outer"),
    _case("int keys outer", DF({"key": [1], "v1": [10]}), DF({"key": [2], "v1": [20]}),
          how="outer"),
    _case("bool keys outer", DF({"key": [True], "v1": [1]}), DF({"key": [False], "v1": [0]}),
          how="outer"),
    _case("left onto a right of no rows", DF({"key": [1], "value": [2]}), DF({"key": []}),
          on="key", how="left"),
    _case("right from a left of no rows", DF({"key": []}), DF({"key": [1], "value": [2]}),
          on="key", how="right"),
    _case("datetime keys without sort", DF({"var1": RNG.integers(0, 10, 10), "var3": DAYS}),
          DF({"var3": np.sort(DAYS.unique()), "var8": RNG.random(7)}), on="var3"),
    *(_case(f"self merge of repeats, {how}, sort={sort}", DF({"a": [1, 0, 1]}),
            DF({"a": [1, 0, 1]}), on="a", how=how, sort=sort)
      for how in ("left", "right") for sort in (False, True)),
    *(_case(f"two indexes, {how}, sort={sort}", DF({"a": [20, 10, 0]}, index=[2, 1, 0]),
            DF({"b": [300, 100, 200]}, index=[3, 1, 2]), left_index=True, right_index=True,
            how=how, sort=sort) for how in HOWS for sort in (False, True)),
    *(_case(f"every column a key, {how}", DF({"animal": ["dog", "pig"], "max_speed": [40, 11]}),
            DF({"animal": ["quetzal", "pig"], "max_speed": [80, 11]}),
            on=["animal", "max_speed"], how=how) for how in ("left", "right")),
    # test_merge.py: time zones, periods
    _case("tz keys outer", DF({"key": pd.date_range("20151010", periods=2, tz="US/Eastern"),
                               "value": [1, 2]}),
          DF({"key": pd.date_range("20151011", periods=3, tz="US/Eastern"),
              "value": [1, 2, 3]}), on="key", how="outer"),
    _case("tz values outer", DF({"key": [1, 2], "value": pd.date_range(
        "20151010", periods=2, tz="US/Eastern", unit="ns")}),
          DF({"key": [2, 3], "value": pd.date_range("20151011", periods=2, tz="US/Eastern",
                                                    unit="ns")}), on="key", how="outer"),
    _case("period values outer", DF({"key": [1, 2], "value": pd.period_range(
        "20151010", periods=2, freq="D")}), DF({"key": [2, 3], "value": pd.period_range(
            "20151011", periods=2, freq="D")}), on="key", how="outer"),
    _case("period keys outer", DF({"key": pd.period_range("20151010", periods=2, freq="D"),
                                   "value": [1, 2]}),
          DF({"key": pd.period_range("20151011", periods=3, freq="D"), "value": [1, 2, 3]}),
          on="key", how="outer"),
    _case("empty left, tz columns", WITH_DATES.iloc[:0], WITH_DATES, on="date"),
    _case("tz keys over a daylight saving change", DF({"date": pd.date_range(
        "2017-10-29 01:00", periods=4, freq="h", tz="Europe/Madrid"), "value": 1}),
          DF({"date": MADRID.tz_localize("UTC").tz_convert("Europe/Madrid"), "value": 2}),
          on="date", how="outer"),
    _case("datetime values missing after a left merge", DF({"x": list("abc"),
                                                            "y": ["1", "2", "4"]}),
          DF({"y": ["1", "2", "3"], "z": pd.to_datetime(["2000", "2001", "2002"])}),
          how="left", on="y"),
    _case("pyarrow timestamps repeated on the right",
          DF({"time": STAMPS, "val1": [1, 2, 3]}).convert_dtypes(dtype_backend="pyarrow"),
          DF({"time": STAMPS.repeat(2), "val2": [10, 20, 30, 40, 50, 60]}).convert_dtypes(
              dtype_backend="pyarrow"), on="time", how="left"),
    # test_merge.py: dtypes
    *(_case(f"ints {i} against floats {f}", DF({"X": i}), DF({"Y": f}), left_on="X",
            right_on="Y") for i, f in (([1, 2, 3], [1.0, 2.0, 3.0]), ([1, 2, 3], [1.0, 3.0]),
                                       ([1, 2], [1.0, 2.0, 3.0]), ([1, 2, 3], [1.1, 2.5, 3.0]))),
    _case("floats against ints", DF({"Y": [1.1, 2.5, 3.0]}), DF({"X": [1, 2, 3]}),
          left_on="Y", right_on="X"),
    _case("float key left-merged with int", DF({"key": [1.0, 2.0], "v1": [10, 20]}),
          DF({"key": [2], "v2": [200]}), on="key", how="left"),
    *(_case(f"bool keys, {how}", DF({"A": [True, False], "B": [1, 5]}),
            DF({"A": [False, True], "C": [3, 4]}), how=how) for how in HOWS),
    *(_case(f"{d.__name__} columns as keys, outer", DF({"a": ["foo", "bar"], "b": np.array(
        [1, 2], d)}), DF({"a": ["foo", "baz"], "b": np.array([3, 4], d)}), how="outer")
      for d in (np.uintc, np.intc)),
    _case("intc keys out of order, left", DF({"join_key": np.array([0, 2, 1], np.intc)}),
          DF({"join_key": np.array([0, 1, 2], np.intc), "value": list("abc")}),
          on="join_key", how="left"),
    *(_case(f"{d} against int64[pyarrow]", DF({"a": [1, 2]}, dtype=d),
            DF({"a": [1, 2]}, dtype="int64[pyarrow]")) for d in ("int64", "int64[pyarrow]")),
    _case("int64[pyarrow] against int64", DF({"a": [1, 2]}, dtype="int64[pyarrow]"),
          DF({"a": [1, 2]})),
    *(_case(f"Int64 with NA against {v}", DF([1.0, pd.NA], dtype="Int64"), DF([v]))
      for v in (1.5, 1.0)),
    *(_case(f"{v} against Int64 with NA", DF([v]), DF([1.0, pd.NA], dtype="Int64"))
      for v in (1.5, 1.0)),
    *(_case(f"missing keys on one side of an outer merge, {d}", DF({"key": [1, 2], "col1": [
        1, 2]}, dtype=d), DF({"key": [np.nan] * 2, "col2": [3, 4]}, dtype=d), on="key",
            how="outer") for d in (None, "Int64")),
    _case("all-NaN second key, outer", DF({"x": [1, 2, 3], "y": [np.nan] * 3, "z": [4, 5, 6]}),
          DF({"x": [1, 2, 3], "y": [np.nan] * 3, "zz": [4, 5, 6]}), on=["x", "y"], how="outer",
          nulls_equal=True),
    _case("Int64 keys with NA", DF({"A": pd.array([1, 2, pd.NA], dtype="Int64"), "B": 1}),
          DF({"A": pd.array([1, 2, pd.NA], dtype="Int64"), "B": 1}), on="A", nulls_equal=True),
    _case("str key against object", DF({"A": ["foo", "bar"], "B": [1, 2]}),
          DF({"A": pd.Series(["foo", "bar"], dtype=object)}), on="A"),
    *(_case(f"object booleans{' with NaN' * m} against bool", DF({"key": pd.Series(
        [True, False] + [np.nan] * m, dtype=object)}), DF({"key": [True, False]}), on="key")
      for m in (0, 1)),
    *(_case(f"bool against object booleans{' with NaN' * m}", DF({"key": [True, False]}),
            DF({"key": pd.Series([True, False] + [np.nan] * m, dtype=object)}), on="key")
      for m in (0, 1)),
    # test_merge.py: categoricals
    _case("category self merge", CATEGORY_LEFT, CATEGORY_LEFT, on="X"),
    _case("category keys of one dtype", CATEGORY_LEFT, CATEGORY_RIGHT, on="X"),
    _case("category values", CATEGORY_LEFT, CATEGORY_RIGHT.astype({"Z": "category"}), on="X"),
    *(_case(f"category key against {name}, {how}", CATEGORY_LEFT,
            CATEGORY_RIGHT.assign(X=CATEGORY_RIGHT["X"].astype(d)), on="X", how=how)
      for name, d in (("object", object), ("more categories", pd.CategoricalDtype(
          ["foo", "bar", "bah"])), ("ordered", pd.CategoricalDtype(ordered=True)))
      for how in HOWS),
    _case("category values, left merge", DF({"a": ["f"] * 5, "b": ["g"] * 5}),
          DF({"c": list("abcde"), "d": pd.Categorical(["null"] * 5)}), how="left",
          left_on="b", right_on="c"),
    _case("category key against str, left merge", DF({"a": ["f"] * 5, "b": pd.Categorical(
        ["g"] * 5)}), DF({"c": list("abcde"), "d": pd.Categorical(["null"] * 5)}), how="left",
          left_on="b", right_on="c"),
    _case("categories in another order", DF({"Foo": pd.Categorical(list("ABC")), "L": [0, 1, 2]}),
          DF({"Foo": pd.Categorical(list("CBA"), categories=list("CBA")), "R": [2, 1, 0]}),
          on=["Foo"]),
    _case("self merge on four category keys", SELF_CATEGORIES, SELF_CATEGORIES,
          on=list(SELF_CATEGORIES.columns)),
    *(_case(f"category keys of dates, {how}", DF({"date": pd.Categorical(DATES[:2]),
                                                  "num2": [1.1, 1.3]}),
            DF({"date": pd.Categorical(DATES[::2]), "num4": [1.3, 1.4]}), how=how, on=["date"])
      for how in ("outer", "inner")),
    *(_case(f"category values of {values}, ordered={o}", DF({"id": [1, 2, 3, 4], "cat": (
        pd.Categorical(values, categories=cats, ordered=o))}), DF({"id": [2, 4], "num": [1, 9]}))
      for values, cats in (([False, True, True, False], [True, False]), ([2, 1, 1, 2], [1, 2]),
                           (["False", "True", "True", "False"], ["True", "False"]))
      for o in (True, False)),
    _case("category keys of ints and of floats", DF({"key": pd.Categorical(
        [1, 2], categories=[1, 2, 3])}), DF({"key": pd.Categorical([1, 3], categories=[
            1.0, 2.0, 3.0])}), on="key", how="outer"),
    *(_case(f"category indexes, reversed={r}", DF({"left": [1, 2, 3]}, index=pd.CategoricalIndex(
        list("abc"), name="foo")), DF({"right": [3, 2, 1] if r else [1, 2, 3]},
                                      index=pd.CategoricalIndex(list("cba" if r else "abc"),
                                                                categories=list("abc"),
                                                                name="foo")),
            left_index=True, right_index=True) for r in (False, True)),
]


@pytest.mark.filterwarnings("ignore:You are merging on int and float")
@pytest.mark.parametrize(("left", "right", "options"), CASES)
def test_the_same_frame_as_pandas(left, right, options):
    _same(left, right, **options)


SERIES = {"int64": [1], "Int64": pd.array([1], dtype="Int64"), "float64": [1.23],
          "str": ["foo"], "bool": [True], "datetime": [pd.Timestamp("2018-01-01")],
          "datetime-tz": [pd.Timestamp("2018-01-01", tz="US/Eastern")]}
ALL_MISSING = {"Int64": pd.array([pd.NA], dtype="Int64"), "float64": [np.nan],
               "object": pd.array([np.nan], dtype=object), "NaT": [pd.NaT]}


@pytest.mark.parametrize("key", SERIES)
@pytest.mark.parametrize("value", [*SERIES, *(f"missing {k}" for k in ALL_MISSING)])
def test_value_dtypes_survive_an_empty_left_and_all_missing_values(key, value):
    if value.startswith("missing"):
        frame = DF({"key": SERIES[key], "value": ALL_MISSING[value.split()[1]]})
        _same(frame, frame.copy(), on="key")
    else:
        frame = DF({"key": SERIES[key], "value": SERIES[value]})
        _same(frame.iloc[:0], frame, on="key")


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("tz", [None, "America/Chicago"])
@pytest.mark.parametrize("units", [("ns", "s"), ("us", "ns")])
def test_datetime_keys_of_two_units(how, tz, units):
    stamps = pd.Series([pd.Timestamp(2023, 5, day, tz=tz) for day in (12, 13, 14)])
    _same(DF({"t": stamps[:2].dt.as_unit(units[0]), "a": [1.0, 2.0]}),
          DF({"t": stamps[1:].reset_index(drop=True).dt.as_unit(units[1]), "b": [1.0, 2.0]}),
          on="t", how=how)


@pytest.mark.parametrize("dtype", EA_NUMBERS)
@pytest.mark.parametrize("other", ["same", "numpy", "one row"])
def test_nullable_number_keys_by_every_how(dtype, other):
    for how in HOWS:
        if other == "one row":
            _same(DF({"id": [1]}, dtype=dtype), DF({"id": [2]}, dtype=dtype), how=how)
            continue
        _same(DF({"a": [1, 2, 3], "b": 1}, dtype=dtype),
              DF({"a": [1, 2, 3], "c": 2}, dtype=dtype.lower() if other == "numpy" else dtype),
              how=how)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("dtype", ["str", "string[python]", "string[pyarrow]", object])
def test_text_keys_of_one_row(how, dtype):
    _same(DF({"id": ["a"]}, dtype=dtype), DF({"id": ["b"]}, dtype=dtype), how=how)


EXTREMES = {
    "range int64": (np.array([0, 2, 4, 6, 8, 10]), np.array([6, 0, 2, 20])),
    "range uint64": (np.arange(5, 23, 3, dtype=np.uint64), np.array([14, 5, 8, 35], np.uint64)),
    "uint64 past int64": (np.array([2**63, 2**63 + 1, 2**63 + 2], np.uint64),
                          np.array([2**63 + 2, 2**63, 2**63 + 5], np.uint64)),
    "int64 minimum": (np.array([10, 11, 12]), np.array([11, np.iinfo(np.int64).min, 10])),
    "int64 ends": (np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max]),
                   np.array([np.iinfo(np.int64).max, 0, np.iinfo(np.int64).min])),
    "wide span": (np.array([-(2**62) - 1, -1, 2**62 - 1]), np.array([2**62 - 1, 5, -1])),
}


@pytest.mark.parametrize("how", ["left", "right"])
@pytest.mark.parametrize("name", EXTREMES)
def test_range_like_and_extreme_integer_keys_without_sort(how, name):
    ranged, other = EXTREMES[name]
    left_keys, right_keys = (other, ranged) if how == "left" else (ranged, other)
    _same(DF({"k": left_keys, "v": np.arange(len(left_keys))}),
          DF({"k": right_keys, "w": np.arange(len(right_keys))}), on="k", how=how, sort=False)


REFUSED = {  # pandas refuses these key pairs too (ValueError "You are trying to merge")
    "uint64 and text": (pd.Series([1, 2], dtype="uint64"), ["a", "b", "c"]),
    "int32 and text": (pd.Series([1, 2], dtype="int32"), ["a", "b", "c"]),
    "ints and digits": ([0, 1, 2], ["0", "1", "2"]),
    "floats and digits": ([0.0, 1.0, 2.0], ["0", "1", "2"]),
    "dates and text": (pd.date_range("1/1/2011", periods=2), ["2011-01-01", "2011-01-02"]),
    "dates and ints": (pd.date_range("1/1/2011", periods=2), [0, 1]),
    "dates and floats": (pd.date_range("1/1/2011", periods=2), [0.0, 1.0]),
    "naive and tz dates": (pd.date_range("20130101", periods=3),
                           pd.date_range("20130101", periods=3, tz="US/Eastern")),
    "datetime and timedelta": (pd.Series([1, None], dtype="datetime64[ns]"),
                               pd.Series([1], dtype="timedelta64[ns]")),
}
OBJECT_PAIRS = {  # pandas merges these as objects; gh.merge refuses them
    "ints and text categories": ([0, 1, 2], pd.Categorical(["a", "b", "a"])),
    "floats and text categories": ([0.0, 1.0, 2.0], pd.Categorical(["a", "b", "a"])),
    "ints and object booleans": ([0, 1], pd.Series([False, True], dtype=object)),
    "ints and booleans": ([0, 1], [False, True]),
    "two time zones": (pd.date_range("2023-05-12", periods=2, tz="US/Eastern"),
                       pd.date_range("2023-05-12", periods=2, tz="US/Pacific")),
}


@pytest.mark.parametrize("name", [*REFUSED, *OBJECT_PAIRS])
def test_keys_that_do_not_compare_are_refused_naming_the_column(name):
    first, second = REFUSED.get(name) or OBJECT_PAIRS[name]
    left, right = DF({"A": first}), DF({"A": second})
    for x, y in ((left, right), (right, left)):
        if name in REFUSED:
            with pytest.raises(ValueError, match="You are trying to merge"):
                pd.merge(x, y, on="A")
        with pytest.raises(TypeError, match="key column 'A'.*cannot be compared"):
            gh.merge(x, y, on="A", device="cpu")
    intervals = DF({"a": pd.Series([pd.Interval(0, 1), pd.Interval(1, 2)])})
    with pytest.raises(TypeError, match="key column 'a'"):
        gh.merge(intervals.astype("category"), intervals, on="a", device="cpu")


# --- test_multi.py: several key columns ---------------------------------------------------

IMIN, UMAX = np.iinfo(np.int64).min, np.iinfo(np.uint64).max
DAY3 = pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-01"])
NAT = pd.to_datetime(["1680-01-01", "NaT", "1680-01-03", "NaT"]).as_unit("ns")
MULTI = {
    "int64 near the minimum": ([IMIN, IMIN + 5, IMIN + 3], [-1, -2, -1], [IMIN + 5, IMIN],
                               [-2, -1]),
    "uint64 near the maximum": (np.array([UMAX, UMAX - 5, UMAX - 3], np.uint64),
                                np.array([1, 2, 3], np.uint64),
                                np.array([UMAX - 5, UMAX], np.uint64), np.array([2, 1], np.uint64)),
    "a wide span": ([0, 2**62, 5], [0, 2**61, 7], [5, 0, 2**62], [7, 0, 2**61]),
    "datetime and int": (DAY3, [1, 2, 1], DAY3[:2], [1, 2]),
    "time zone and int": (DAY3.tz_localize("US/Pacific"), [1, 2, 1],
                          DAY3[:2].tz_localize("US/Pacific"), [1, 2]),
    "timedelta and int": (pd.to_timedelta([1, 2, 1], unit="s"), [1, 2, 1],
                          pd.to_timedelta([1, 2], unit="s"), [1, 2]),
    "int32 and int64": (np.array([1, 2, 3, 2], np.int32), [1, 1, 2, 2], [2, 3],
                        np.array([1, 2], np.int32)),
    "bool and int": ([True, False, True, False], [1, 1, 2, 2], [True, False], [2, 1]),
    "NaT and int": (NAT, [1, 2, 3, 2], NAT[[1, 0]], [2, 1]),
    **{f"{np.dtype(d).name} sorted": (np.array([3, 1, 3, 2], d), np.array([10, 20, 5, 20], d),
                                      np.array([3, 2, 4], d), np.array([5, 20, 1], d))
       for d in (np.int64, np.int32, np.uint16)},
}


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("sort", [False, True])
@pytest.mark.parametrize("name", MULTI)
def test_two_keys_of_mixed_kinds(how, sort, name):
    k1, k2, r1, r2 = MULTI[name]
    _same(DF({"k1": k1, "k2": k2, "lval": np.arange(len(k2))}),
          DF({"k1": r1, "k2": r2, "rval": np.arange(len(r2))}), on=["k1", "k2"], how=how,
          sort=sort, nulls_equal=True)


def test_fourteen_integer_keys_and_two_text_keys():
    keys = {f"k{i}": np.arange(120) % (97 + i) for i in range(14)}
    left = DF({**keys, "lval": np.arange(120)})
    _same(left, left.iloc[::2].drop(columns=["lval"]).assign(rval=np.arange(60)), on=list(keys))
    text = DF({"key1": list("bbbffzzqqs"), "key2": list("tohotototh"), "data": np.arange(10.0)})
    index = pd.MultiIndex.from_product([list("fbzq"), list("oth")], names=["key1", "key2"])
    right = DF({"j": np.arange(12.0)}, index=index).reset_index()
    for how in HOWS:
        _same(text, right, on=["key1", "key2"], how=how, sort=how == "left")


def test_missing_keys_on_the_right_of_a_left_merge_and_in_one_of_three_keys():
    left = DF({"id": list("abcde"), "v1": np.arange(5.0), "dummy": list("abcde")})
    right = DF({"id": ["a", "b", np.nan, np.nan, np.nan], "sv3": [1.2, 5.6, np.nan, np.nan,
                                                                  np.nan]})
    _same(left, right, on="id", how="left")
    rows = [[1950, "A", 1.5], [1950, "B", 1.5], [1955, "B", 1.5], [1960, "B", np.nan],
            [1970, "B", 4.0], [1950, "C", 4.0], [1960, "C", np.nan], [1965, "C", 3.0]]
    other = [[1960, "A", np.nan], [1970, "A", np.nan], [1965, "B", np.nan], [1955, "C", np.nan]]
    columns = ["year", "panel", "data"]
    _same(DF(rows, columns=columns), DF(other, columns=columns), how="outer", nulls_equal=True)
