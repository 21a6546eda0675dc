"""gh.merge against pandas.merge on the inputs of pandas' own merge tests: the options, labels,
indexes and row order.

The cases of pandas/tests/reshape/merge that exercise merge's options rather than its key
types (those are in test_merge_pandas_cases.py, whose helpers these share): the indicator
and validate, suffixes and column labels, joins of two indexes and keys that name index
levels, empty frames, row order with repeated and unsorted keys, the options pandas refuses,
anti joins (test_merge_antijoin.py) and cross joins (test_merge_cross.py). Where gh.merge
refuses a case with a clear error the case asserts the refusal; where it answers otherwise
than pandas the case is an expected failure naming the difference.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_merge_pandas_cases import DF, HOWS, _case, _same

import gpuhash as gh

INDICATOR = (DF({"col1": [0, 1], "col_conflict": [1, 2], "col_left": ["a", "b"]}),
             DF({"col1": [1, 2, 3, 4, 5], "col_conflict": [1, 2, 3, 4, 5],
                 "col_right": [2] * 5}))
VALIDATE = (DF({"a": ["a", "b", "c", "d"], "b": ["cat", "dog", "weasel", "horse"]}),
            DF({"a": ["a", "b", "c", "d", "e"], "c": ["meow", "bark", "um", "nay", "chirp"]}))

CASES = [
    # test_merge.py: the indicator and validate
    *(_case(f"indicator={ind}, {how}", *INDICATOR, on="col1", how=how, indicator=ind)
      for ind in (True, "custom_name") for how in HOWS),
    _case("indicator on two keys", DF({"col1": [0, 1], "col2": ["a", "b"]}),
          DF({"col1": [1, 1, 3], "col2": ["b", "x", "y"]}), on=["col1", "col2"], how="outer",
          indicator=True),
    *(_case(f"validate={v}", *VALIDATE, on="a", validate=v)
      for v in ("1:1", "one_to_one", "1:m", "m:1", "many_to_many")),
    _case("validate two keys together", DF({"a": list("aabb"), "b": [0, 1, 0, 1], "c": range(4)}),
          DF({"a": list("aab"), "b": [0, 1, 0], "d": range(3)}), on=["a", "b"], validate="1:1"),
    # test_merge.py: suffixes and labels
    *(_case(f"labels {a!r}/{b!r}, suffixes {s}", DF({a: [1, 2, 3]}), DF({b: [4, 5, 6]}),
            left_index=True, right_index=True, suffixes=s)
      for a, b, s in ((0, 0, ("", "_dup")), (0, 0, (None, "_dup")), (0, 0, ("_x", "_y")),
                      (0, 0, ["_x", "_y"]), ("a", 0, (None, "_y")), (0.0, 0.0, ("_x", None)),
                      ("b", "b", (None, "_y")), ("a", "a", ("_x", None)),
                      ("a", "b", ("_x", None)), ("a", "a", (None, "_x")), (0, 0, ("_a", None)))),
    _case("float and text labels", DF([[9, 10], [11, 12]], columns=["x", "y"]),
          DF([[1, 2], [3, 4]], columns=pd.Index(["a", 114.0])), left_index=True,
          right_index=True),
    _case("on names index levels", DF({"l": [1, 2, 3]}, index=pd.Index([1, 2, 4], name="i")),
          DF({"r": [1.0, 2.0, 3.0]}, index=pd.Index([1, 2, 4], name="i")), on=["i"]),
    # test_join.py: the merges joins are checked against, joins of two indexes
    *(_case(f"two indexes of mixed columns, {how}", DF({"bool": True, "string": "foo"},
                                                       index=np.arange(10)),
            DF({"int": 1, "float": 1.0}, index=np.arange(5, 15)), left_index=True,
            right_index=True, how=how)
      for how in HOWS),
    _case("two indexes, overlapping columns", DF({"A": 1.0, "B": 2, "C": "foo", "D": True},
                                                 index=np.arange(10)),
          DF({"A": 1.0, "B": 2, "C": "foo", "D": True}, index=np.arange(0, 10, 2)),
          left_index=True, right_index=True, how="left", suffixes=("_one", "_two")),
    _case("repeated period indexes", DF({"p": range(16)}, index=pd.period_range(
        "2016-01-01", periods=16, freq="M")), DF({"p": list(range(16)) * 2}, index=pd.period_range(
            "2016-01-01", periods=16, freq="M").append(pd.period_range(
                "2016-01-01", periods=16, freq="M"))), left_index=True, right_index=True),
    *(_case(f"indexes with the {side} empty, {how}", *(
        (lambda a, b: (a.head(0), b) if side == "left" else (a, b.head(0)))(
            DF({"A": [2, 1], "B": [3, 4]}).set_index("A"), DF({"A": [1], "C": [5]}).set_index(
                "A"))), left_index=True, right_index=True, how=how)
      for side in ("left", "right") for how in HOWS),
]


@pytest.mark.parametrize(("left", "right", "options"), CASES)
def test_the_same_frame_as_pandas(left, right, options):
    _same(left, right, **options)


def test_chained_outer_merges_on_keys_repeated_on_both_sides():
    both = _same(DF({"a": [1, 1], "b": [1, 1], "c": [10, 20]}),
                 DF({"a": [1, 1], "b": [1, 2], "d": [100, 200]}), on=["a", "b"], how="outer")
    _same(both, DF({"a": [1, 1], "b": [1, 2], "e": [1000, 2000]}), on=["a", "b"], how="outer")


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("empty", ["both", "left", "right"])
def test_empty_object_frames(how, empty):
    full = DF([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    left = DF(columns=list("abc")) if empty == "left" else full.set_axis(list("abc"), axis=1)
    right = DF(columns=list("xyz")) if empty == "right" else full.set_axis(list("xyz"), axis=1)
    _same(left.iloc[:0] if empty == "both" else left, right, left_on="a", right_on="x", how=how)


@pytest.mark.parametrize("how", [*HOWS, "cross"])
@pytest.mark.parametrize("left_empty", [False, True])
def test_one_side_without_rows(how, left_empty):
    left, right = DF({"A": [2, 1], "B": [3, 4]}), DF({"A": [1], "C": [5]})
    _same(*((left.head(0), right) if left_empty else (left, right.head(0))), how=how)


@pytest.mark.parametrize("left_empty", [True, False])
@pytest.mark.parametrize("right_empty", [True, False])
def test_outer_merge_of_empty_frames_keeps_the_column_order(left_empty, right_empty):
    left, right = DF(1, index=[0], columns=["A", "B"]), DF(1, index=[0], columns=["A", "C", "D"])
    _same(left.iloc[:0] if left_empty else left, right.iloc[:0] if right_empty else right,
          on=["A"], how="outer")



@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("on_index", [False, True])
def test_unique_or_repeated_sorted_or_unsorted_keys(how, on_index):
    """Each side's keys 2, 3 and then 4 (unique, sorted), 1 (unique), 3 (repeated, sorted) or
    2 (repeated), with and without sort."""
    for left_last, right_last, sort in np.ndindex(4, 4, 2):
        left = DF({"key": [2, 3, [4, 1, 3, 2][left_last]]})
        right = DF({"key": [2, 3, [4, 1, 3, 2][right_last]]})
        if on_index:
            _same(left.set_index("key"), right.set_index("key"), how=how, sort=bool(sort),
                  left_index=True, right_index=True)
        else:
            _same(left, right, on="key", how=how, sort=bool(sort))



@pytest.mark.parametrize(("options", "error", "match"), [
    ({"indicator": 5}, ValueError, "indicator must be"),
    ({"indicator": True, "right": DF({"col1": [1, 2], "_merge": [2, 2]})}, ValueError,
     "indicator='_merge' names a column"),
    ({"indicator": "name", "right": DF({"col1": [1, 2], "name": [2, 2]})}, ValueError,
     "indicator='name' names a column"),
    ({"validate": "jibberish"}, ValueError, "validate must be one of"),
    ({"validate": "1:1", "right": DF({"col1": [1, 1]})}, ValueError, "the right side's key"),
    ({"validate": "many_to_one", "right": DF({"col1": [1, 1]})}, ValueError, "the right side"),
    ({"validate": "one_to_many", "left": DF({"col1": [0, 0]})}, ValueError, "the left side"),
    ({"validate": "one_to_one", "left": DF({"col1": [0, 0]})}, ValueError, "the left side"),
    ({"how": "cross", "on": "col1"}, ValueError, "how='cross' takes no on"),
    ({"how": "cross", "left_on": "col1"}, ValueError, "how='cross' takes no on"),
    ({"how": "cross", "right_on": "col1"}, ValueError, "how='cross' takes no on"),
    *(({"suffixes": s}, ValueError, "suffixes") for s in (
        (None, None), ("", None), ("a", "b", "c"), ("a",), {"left", "right"})),
    *(({"left": DF({"col1": [1], "b": 1, "b_x": 2}), "right": DF({"col1": [1], "b": 2}),
        "suffixes": s}, ValueError, "repeated column names") for s in (("_x", "_y"), ("", "_x"))),
], ids=lambda v: repr(v) if isinstance(v, dict) else None)
def test_options_pandas_refuses_are_refused(options, error, match):
    options = {"left": INDICATOR[0], "right": INDICATOR[1], "on": "col1", **options}
    if "left_on" in options or "right_on" in options:
        options.pop("on")
    left, right = options.pop("left"), options.pop("right")
    with pytest.raises(error, match=match):
        gh.merge(left, right, device="cpu", **options)


IDENTICAL = (DF({"A": [100, 200, 1], "B": [60, 70, 80]}),
             DF({"A": [100, 200, 300], "B": [600, 700, 800]}))
LEVELS = DF({"l": [1, 2, 3], "c": [1, 1, 2]}, index=pd.Index([1, 2, 4], name="i"))
PAIRS = DF({"l": [1, 2]}, index=pd.MultiIndex.from_tuples([(1, "a"), (2, "b")],
                                                          names=["i", "k"]))


@pytest.mark.parametrize(("left", "right", "options", "match"), [
    # pandas repeats the label; gh.merge's output columns have distinct labels
    *((*IDENTICAL, {"on": "A", "how": how, "suffixes": ("_x", "_x")},
       r"suffixes \('_x', '_x'\) leave repeated column names \['B_x'\]")
      for how in ("right", "outer")),
    # pandas merges a frame with two columns of one label; gh.merge names Arrow columns by them
    (DF([[1, 1, 1], [2, 2, 2]], columns=["a", "b", "b"]), DF({"a": [1, 3], "b": 2}),
     {"on": "a"}, "the left frame has 2 columns labelled 'b'.*rename them"),
    (DF({"a": [1]}), DF({"a": [1], 0: [1], "0": [2]}), {"on": "a"},
     "the right frame has 2 columns labelled '0' and 0.*rename them"),
    # index levels as keys: through on=, and only where the index holds nothing but keys
    (LEVELS, DF({"i": [1, 2], "r": [1.0, 2.0]}), {"left_on": "i", "right_on": "i"},
     "left_on names 'i', a level of the left frame's index.*reset_index"),
    (PAIRS, DF({"i": [1, 2], "r": [1.0, 2.0]}), {"on": "i"},
     r"on names 'i', a level of the left frame's index, whose other levels \['k'\].*"
     r"reset_index\(\) the left frame"),
], ids=lambda v: None if not isinstance(v, str) else v[:24])
def test_what_gh_merge_refuses_names_the_fix(left, right, options, match):
    with pytest.raises(ValueError, match=match):
        gh.merge(left, right, device="cpu", **options)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("sort", [False, True])
def test_keys_that_name_index_levels(how, sort):
    """On both sides, levels make the output's index; against a column, a column."""
    other = DF({"r": [1.0, 2.0, 3.0], "c": [1, 1, 1]}, index=pd.Index([5, 2, 1], name="i"))
    column = other.reset_index()
    for left, right, on in ((LEVELS, other, ["i"]), (LEVELS, other, ["i", "c"]),
                            (LEVELS, column, "i"), (column, LEVELS, "i"), (PAIRS, PAIRS,
                                                                           ["k", "i"])):
        _same(left, right, on=on, how=how, sort=sort)


# --- test_merge_antijoin.py ---------------------------------------------------------------

ANTI = {
    "text keys of other names": (DF({"A": [1.0, 2.0, 3.0], "B": pd.array(list("abc"), object)}),
                                 DF({"C": [1.0, 2.0, 4.0], "D": pd.array(list("adb"), object)}),
                                 {"left_on": "B", "right_on": "D"}),
    "repeated keys": (DF({"A": [1.0, 2.0, 3.0], "B": pd.array(list("abb"), object)}),
                      DF({"C": [1.0, 2.0, 4.0], "D": pd.array(list("bdd"), object)}),
                      {"left_on": "B", "right_on": "D"}),
    "no common key": (DF({"A": [1, 2, 3]}), DF({"B": [4, 5, 6]}), {"left_on": "A",
                                                                 "right_on": "B"}),
    "empty": (DF({"A": [], "B": []}), DF({"C": [], "D": []}), {"left_on": "A", "right_on": "C"}),
    "missing keys": (DF({"A": [1.0, 2.0, None, 4.0]}), DF({"B": [2.0, None, 5.0]}),
                     {"left_on": "A", "right_on": "B", "nulls_equal": True}),
    "missing keys, one name": (DF({"A": [1.0, 2.0, np.nan], "C": list("abc")}),
                               DF({"A": [3.0, 2.0, np.nan], "D": list("def")}),
                               {"on": "A", "nulls_equal": True}),
    **{f"{d} keys": (DF({"k": [1, 3, 5], "lv": [1, 2, 3]}).astype({"k": d}),
                     DF({"k": [2, 3, 4], "rv": [1, 2, 3]}).astype({"k": d}), {"on": "k"})
       for d in ("Int64", "int64[pyarrow]", "timestamp[s][pyarrow]", "string[pyarrow]")},
}


@pytest.mark.parametrize("how", ["left_anti", "right_anti"])
@pytest.mark.parametrize("name", ANTI)
def test_anti_joins_as_pandas(how, name):
    left, right, keys = ANTI[name]
    _same(left, right, how=how, **keys)


@pytest.mark.parametrize("how", ["left_anti", "right_anti"])
def test_anti_joins_of_two_indexes(how):
    left, right = DF({"A": [1, 2, 3]}, index=list("abc")), DF({"B": [1, 2, 4]}, index=list("abd"))
    _same(left, right, how=how, left_index=True, right_index=True)
    _same(left, left, how=how, left_index=True, right_index=True)


@pytest.mark.parametrize("how", ["left_anti", "right_anti"])
def test_anti_joins_number_rows_by_their_place_in_the_one_sided_merge(how):
    _same(DF({"A": [1.0, 2.0, 4.0]}), DF({"B": [2.0, 5.0]}), how=how, left_on="A",
          right_on="B")
    labelled = DF({"A": [1.0, 2.0, 4.0]}, index=pd.Index(list("xyz"), name="at"))
    _same(labelled, DF({"B": [2.0, 5.0]}, index=[7, 8]), how=how, left_on="A", right_on="B")


# --- test_merge_cross.py ------------------------------------------------------------------

@pytest.mark.parametrize(("left", "right"), [
    ({"a": [1, 3]}, {"b": [3, 4]}), ({"a": [1, 3]}, {"a": [3, 4]}),
    ({"A": ["a", "b", "c"]}, {"B": [0, 1]}),
    ({"A": ["a", "b"], "B": [2, 1]}, {"C": [0, 1], "D": [4, 5]}),
    ({"a": [1, None]}, {"b": ["a", "b"], "c": [1.0, 2.0]}),
    ({"a": pd.array([1, None], dtype="Int64")}, {"b": ["a", "b"]}),
    ({"a": [1, pd.NA]}, {"b": ["a", "b"], "c": [1.0, 2.0]})])
def test_cross_merges_leave_the_inputs_alone(left, right):
    left, right = DF(left), DF(right)
    before = left.copy(), right.copy()
    _same(left, right, how="cross")
    pd.testing.assert_frame_equal(left, before[0])
    pd.testing.assert_frame_equal(right, before[1])


def test_object_columns_keep_their_objects():
    """Object columns other than keys travel as row numbers: None, pd.NA and mixed types come
    back as they were, and a row a side lacks is NaN, as pandas gives them."""
    left = DF({"k": [1, 2, 3], "o": pd.Series([None, pd.NA, "a"], dtype=object)})
    right = DF({"k": [3, 4, 1], "p": pd.Series([1, "b", 2.5], dtype=object)})
    for how in [*HOWS, "cross"]:
        _same(left, right, how=how, **({} if how == "cross" else {"on": "k"}))
    _same(left, right.rename(columns={"p": "o"}), on="k", how="outer", suffixes=("", "_r"))
