"""gh.merge against polars' DataFrame.join on the inputs of polars' own join tests.

Each case builds the frames a polars test builds, runs ``DataFrame.join`` and ``gh.merge`` on
them and compares the frames with polars.testing.assert_frame_equal: columns, dtypes and
values, and row order only where polars defines it (``maintain_order="left_right"`` or
``"right_left"``; ``"left"`` and ``"right"`` fix that side's order, checked on its columns).
The cases follow py-polars/tests/unit/operations/test_join.py (semi and anti joins, keys of
every integer width, nulls, ``nulls_equal``, ``validate``, ``coalesce``, ``maintain_order``,
suffixes, categoricals, empty frames, key type upcasts, nested keys), test_join_right.py (the
columns of right joins) and test_cross_join.py. polars' ``suffix`` is gh.merge's
``suffixes=("", suffix)``. Where gh.merge refuses a case with a clear error the case asserts
the refusal; where it answers otherwise the case is an expected failure naming the difference.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuhash as gh

pl = pytest.importorskip("polars")
from polars.testing import assert_frame_equal  # noqa: E402

HOWS = ["inner", "left", "right", "full", "semi", "anti"]
ORDERED = ("left_right", "right_left")


def _same(left, right, **options):
    """polars' join and gh.merge of the same frames give the same frame."""
    want = left.join(right, **options)
    if "suffix" in options:
        options["suffixes"] = ("", options.pop("suffix"))
    got = gh.merge(left, right, device="cpu", **options)
    ordered = options.get("maintain_order") in ORDERED
    assert_frame_equal(got, want, check_row_order=ordered)
    return got


def _differs(reason: str):
    return pytest.mark.xfail(strict=True, reason=reason)


def _case(name, left, right, *, marks=(), **options):
    return pytest.param(left, right, options, id=name, marks=marks)


DF = pl.DataFrame
SEMI = (DF({"key": [1, 2, 3], "payload": ["f", "i", None]}), DF({"key": [3, 4, 5, None]}))
SEMI2 = (DF({"a": [1, 2, 3, 1], "b": ["a", "b", "c", "a"], "payload": [10, 20, 30, 40]}),
         DF({"a": [3, 3, 4, 5], "b": ["c", "c", "d", "e"]}))
STRINGS = (DF({"a": ["a", "b", "a", "z"], "b": [1, 2, 3, 4], "c": [6, 5, 4, 3]}),
           DF({"a": ["b", "c", "b", "a"], "k": [0, 3, 9, 6], "c": [1, 0, 2, 1]}))
MULTI = (DF({"a": [1, 2, 1, 1], "b": ["a", "b", "c", "c"]}),
         DF({"foo": [1, 1, 1], "bar": ["a", "c", "c"], "ham": ["let", "var", "const"]}))
NULLS = (DF({"x": [0, 1, 0]}).sort("x"), DF({"x": [0, None], "y": [0, 1]}))
CAT = DF({"column": ["a", "a", "b"], "more": [1, 2, 3]},
         schema={"column": pl.Categorical, "more": pl.Int32})
CROSSED = DF({"index1": [0, 1], "index2": [10, 11]}).join(DF({"index3": [100, 101]}),
                                                          how="cross")
THREE = DF({"index1": [0, 1], "index2": [10, 11], "index3": [100, 101]})
ORDER_LEFT = DF({"a": [None, 2, 1, 1, 5]})
ORDER_RIGHT = DF({"a": [1, None, 2, 6], "b": [6, 7, 8, 9]})
LETTERS = (DF({"x": ["a", "b", "c", "d"]}).with_columns(xc=pl.col.x.cast(pl.Categorical)),
           DF({"x": ["c", "d", "e", "f"]}).with_columns(xc=pl.col.x.cast(pl.Categorical)))
RIGHT = (DF({"a": [1, 2, 3], "b": [1, 2, 3]}), DF({"a": [1, 3], "b": [1, 3], "c": [1, 3]}))
RIGHT3 = (DF({"a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 2, 3]}),
          DF({"a": [1, 3], "b": [1, 3], "c": [1, 3]}))
WITH_NULLS = DF({"a": [None if a % 6 == 0 else a for a in range(138)]}).with_columns(
    b=pl.col("a"), c=pl.col("a"), d=pl.col("a"))
PAIR = (DF({"a": [5, 6], "b": [1, 2]}), DF(schema={"a": pl.Int64, "b": pl.Int64}))

CASES = [
    # test_join.py
    *(_case(f"{how}, a null on the right", *SEMI, on="key", how=how) for how in HOWS),
    *(_case(f"{how} on two keys", *SEMI2, on=["a", "b"], how=how) for how in HOWS),
    _case("categorical self join on an aggregate", CAT,
          CAT.group_by("column").agg(pl.col("more").mean()), on="column"),
    *(_case(f"text keys, {how}", *STRINGS, on="a", how=how, maintain_order="left_right")
      for how in ("inner", "left", "full")),
    _case("text keys, full, unordered", *STRINGS, on="a", how="full"),
    _case("two keys of other names", *MULTI, left_on=["a", "b"], right_on=["foo", "bar"]),
    _case("one key of another name", *MULTI, left_on="a", right_on="foo"),
    *(_case(f"{how}, sorted left, null on the right", *NULLS, on="x", how=how)
      for how in HOWS),
    *(_case(f"cross then left on keys in order {on}", CROSSED, THREE, on=on, how="left")
      for on in (["index1", "index2", "index3"], ["index3", "index1", "index2"])),
    _case("list values, full, right_left", DF({"id": [1], "vals": [[]]}, schema={
        "id": pl.Int64, "vals": pl.List(pl.Float64)}), DF({"id": [2, 3], "vals": [[], [4]]},
                                                          schema={"id": pl.Int64,
                                                                  "vals": pl.List(pl.Float64)}),
          on="id", how="full", maintain_order="right_left"),
    _case("bool keys, full", DF({"id": [True, False], "val": [1, 2]}),
          DF({"id": [True, False], "val": [0, -1]}), on="id", how="full"),
    _case("full coalesce on keys of other names", DF({"L1": ["a", "b", "c"], "L3": ["b", "c", "d"],
                                                      "L2": [1, 2, 3]}),
          DF({"L3": ["a", "c", "d"], "R2": [7, 8, 9]}), left_on="L1", right_on="L3",
          how="full", coalesce=True),
    *(_case(f"four keys with nulls, nulls_equal={eq}", WITH_NULLS, WITH_NULLS,
            on=["a", "b", "c", "d"], nulls_equal=eq) for eq in (True, False)),
    _case("cross, left_right", DF({"frame2": np.arange(10)}), DF({"col1": ["a"], "col2": ["d"]}),
          how="cross", maintain_order="left_right"),
    *(_case(f"coalesce={c}, on={on}", DF({"a": [1, 2], "b": [1, 2]}), DF({
        "a": [1, 2, 1, 2], "b": [5, 7, 8, 9], "c": [1, 2, 1, 2]}), on=on, coalesce=c)
      for c, on in ((False, "a"), (False, ["a", "b"]), (True, ["a", "b"]))),
    *(_case(f"frames of null columns, {how}", DF({"col1": [], "col2": [], "col3": []}),
            DF({"col2": [], "col4": [], "col5": []}), on="col2", how=how)
      for how in ("left", "inner", "full")),
    _case("full coalesce, a null categorical", DF({"a": [1], "c": [None]}, schema={
        "a": pl.Int64, "c": pl.Categorical}), DF({"a": [1, 3, 4]}), on="a", how="full",
          coalesce=True),
    *(_case(f"nulls_equal, {how}, {order}", DF({"x": [1, None, None], "y": [1, 2, 3]}),
            DF({"x": [1, None] if other else [1, 3], "z": [1, 2] if other else [1, 3]}),
            on="x", how=how, nulls_equal=True, maintain_order=order,
            coalesce=True if how == "full" and other else None)
      for how in ("inner", "left", "full") for order in ("none", "left_right", "right_left")
      for other in (True, False)),
    *(_case(f"categorical {on}, full", *LETTERS, on=on, how="full") for on in ("xc", "x")),
    _case("full coalesce with an empty right", *PAIR, on=["a", "b"], how="full", coalesce=True),
    _case("full coalesce with an empty left", *PAIR[::-1], on=["a", "b"], how="full",
          coalesce=True),
    _case("full coalesce, the left all key", DF({"y": [2]}), DF({"x": [1], "y": [2]}), on="y",
          how="full", coalesce=True),
    _case("full coalesce, keys in other column orders", DF({"time": ["09:00:21"], "symbol": [
        5253]}), DF({"symbol": [5253], "time": ["09:00:21"]}), on=["time", "symbol"],
          how="full", coalesce=True),
    _case("full coalesce, empty suffix", DF({"a": [0, 1], "b": [10, 11]}),
          DF({"a": [1, 2], "c": [11, 12]}), how="full", on="a", coalesce=True, suffix=""),
    _case("inner, empty suffix", DF({"k": [1], "a": [2]}), DF({"k": [1], "b": [3]}), on="k",
          suffix=""),
    # test_join_right.py
    *(_case(f"right, coalesce={c}", *RIGHT, on="a", how="right", coalesce=c)
      for c in (True, False)),
    *(_case(f"right, reversed, coalesce={c}", *RIGHT[::-1], on="a", how="right", coalesce=c)
      for c in (True, False)),
    _case("right, coalesce, right order", *RIGHT, on="a", how="right", coalesce=True,
          maintain_order="right_left"),
    *(_case(f"right on two keys, coalesce={c}", *RIGHT3, on=["a", "b"], how="right", coalesce=c)
      for c in (True, False)),
    _case("right on two keys, reversed", *RIGHT3[::-1], on=["a", "b"], how="right",
          coalesce=True),
    _case("right, keys of other names", DF({"foo": [1, 2, 3], "bar": [6.0, 7.0, 8.0],
                                            "ham1": ["a", "b", "c"]}),
          DF({"apple": ["x", "y", "z"], "ham2": ["a", "b", "d"]}), left_on="ham1",
          right_on="ham2", how="right", maintain_order="right_left"),
    _case("right on two keys of other names", DF({"a": [1, 2], "b": [1, 2]}),
          DF({"c": [1, 2], "d": [1, 2]}), left_on=["a", "b"], right_on=["c", "d"], how="right"),
    _case("right, a partly null key", DF({"x": [0, 0]}), DF({"x": np.arange(50), "y": [None, 0] + [
        None] * 48}), left_on="x", right_on="y", how="right"),
]


@pytest.mark.parametrize(("left", "right", "options"), CASES)
def test_the_same_frame_as_polars(left, right, options):
    _same(left, right, **options)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("cast", [int, str, float])
@pytest.mark.parametrize("how", ["left", "inner"])
def test_sorted_keys_of_each_kind(reverse, cast, how):
    rng = np.random.default_rng(1)
    left = DF({"a": np.sort(rng.integers(0, 15, 30))}).with_row_index("row_a")
    right = DF({"a": np.sort(rng.integers(0, 15, 15))}).with_row_index("row_b")
    if reverse:
        left, right = left.reverse(), right.reverse()
    _same(left.with_columns(pl.col("a").cast(cast)), right.with_columns(pl.col("a").cast(cast)),
          on="a", how=how)


@pytest.mark.parametrize("dtype", [pl.Int8, pl.Int16, pl.Int32, pl.Int64])
def test_negative_integer_keys(dtype):
    left = DF({"a": [-1, -6, -3, 0]}).cast(dtype)
    _same(left, DF({"a": [-6, -1, -4, -2, 0], "b": [-6, -1, -4, -2, 0]}).cast(dtype), on="a")


UPCASTS = [("Int64", "Int32"), ("Int64", "Int16"), ("Int64", "Int8"), ("UInt32", "Int64"),
           ("UInt32", "Int32"), ("UInt32", "Int16"), ("UInt32", "Int8"), ("UInt16", "Int64"),
           ("UInt8", "Int64"), ("Int32", "Int16"), ("Int32", "Int8"), ("UInt16", "Int32"),
           ("UInt16", "Int16"), ("UInt16", "Int8"), ("UInt8", "Int32"), ("Int16", "Int8"),
           ("UInt8", "Int16"), ("UInt8", "Int8"), ("UInt64", "UInt32"), ("UInt64", "UInt16"),
           ("UInt64", "UInt8"), ("UInt32", "UInt16"), ("UInt32", "UInt8"),
           ("UInt16", "UInt8"), ("Float64", "Float32"), ("UInt64", "Int64")]


@pytest.mark.parametrize(("ltype", "rtype"), UPCASTS + [pair[::-1] for pair in UPCASTS])
def test_numeric_keys_of_two_widths(ltype, rtype):
    left = pl.select(pl.Series("a", [1, 1, 3]).cast(getattr(pl, ltype)))
    right = pl.select(pl.Series("a", [1]).cast(getattr(pl, rtype)), b=pl.lit("A"))
    try:
        left.join(right, on="a")
    except pl.exceptions.SchemaError:  # polars has no common type for them (uint64, int64)
        with pytest.raises(TypeError, match="key column"):
            gh.merge(left, right, on="a", device="cpu")
        return
    for options in ({"how": "left"}, {"how": "left", "coalesce": False}, {"how": "full"},
                    {"how": "full", "coalesce": True}, {"how": "semi"}):
        _same(left, right, on="a", **options)


@pytest.mark.parametrize("order", ["none", "left", "left_right", "right", "right_left"])
@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
def test_maintain_order_with_null_and_repeated_keys(order, how):
    got = _same(ORDER_LEFT, ORDER_RIGHT, on="a", how=how, maintain_order=order)
    want = ORDER_LEFT.join(ORDER_RIGHT, on="a", how=how, maintain_order=order)
    if order in ("left", "right"):  # that side's rows keep their order, others come after
        column = "b" if order == "right" else ("a" if how != "right" else "b")
        kept = want[column].drop_nulls().to_list()
        assert got[column].drop_nulls().to_list()[:len(kept)] == kept


@pytest.mark.parametrize("how", ["inner", "full", "left"])
@pytest.mark.parametrize("on", ["id", "id_str"])
@pytest.mark.parametrize("sizes", [(5, 5), (5, 4), (4, 5)])
def test_validate_as_polars(how, on, sizes):
    names = ["hello", "world", "rust", "polars", "meow"]
    unique = DF({"id": [1, 2, 3, 4, 5], "id_str": list("12345"), "name": names})[:sizes[0]]
    repeated = DF({"id": [1, 2, 3, 1, 5], "id_str": list("12315"),
                   "cnt": [2, 4, 6, 1, 8]})[:sizes[1]]
    for left, right, validate in ((unique, repeated, "1:m"), (repeated, unique, "1:m"),
                                  (unique, repeated, "1:1"), (repeated, unique, "1:1"),
                                  (unique, repeated, "m:1"), (repeated, unique, "m:1"),
                                  (unique, repeated, "m:m"), (repeated, unique, "m:m")):
        try:
            left.join(right, on=on, how=how, validate=validate)
        except pl.exceptions.ComputeError:
            with pytest.raises(ValueError, match=f"validate='{validate}' failed"):
                gh.merge(left, right, on=on, how=how, validate=validate, device="cpu")
            continue
        _same(left, right, on=on, how=how, validate=validate)


def test_validate_on_two_keys():
    unique = DF({"val1": [11, 12, 13, 14], "val2": [1, 2, 3, 4]})
    repeated = DF({"val1": [11, 11, 12, 13, 14], "val2": [1, 1, 2, 3, 4]})
    for how in ("inner", "left", "full"):
        for validate in ("m:m", "m:1", "1:1", "1:m"):
            _same(unique, unique, on=["val1", "val2"], how=how, validate=validate)
        for left, right, bad in ((repeated, unique, ("1:1", "1:m")),
                                 (unique, repeated, ("m:1", "1:1"))):
            for validate in bad:
                with pytest.raises(ValueError, match="hold a key more than once"):
                    gh.merge(left, right, on=["val1", "val2"], how=how, validate=validate,
                             device="cpu")


@pytest.mark.parametrize(("left", "right", "options", "match"), [
    (DF({"a": [1, 2, 3], "b": [4, 5, 6], "c": [1, 2, 3], "c_right": [1, 2, 3]}), None,
     {"on": ["a", "b"], "how": "left"}, "repeated column names.*c_right"),
    (DF({"a": [1], "b": [1], "b_right": [1]}), None, {"on": "a"}, "repeated column names"),
    (DF({"a": [0, 1], "b": [10, 11]}), DF({"a": [1, 2], "b": [11, 12]}),
     {"how": "full", "on": "a", "coalesce": True, "suffixes": ("", "")},
     "repeated column names"),
    (DF({"a": [1], "b": [2]}), DF({"a": [1], "c": [3]}), {"on": "a", "left_on": "a",
                                                          "right_on": "a"}, "either on or"),
    (DF({"a": [1], "b": [2]}), DF({"a": [1], "c": [3]}), {"on": "a", "left_on": "a"},
     "either on or"),
    (DF({"a": [1]}), DF({"a": [1]}), {"left_on": "a"}, "left_on and right_on go together"),
    (DF({"a": [1]}), DF({"a": [1]}), {"right_on": "a"}, "left_on and right_on go together"),
    *((DF({"a": [1, 2]}), DF({"b": [3, 4]}), {"how": "cross", **keys},
       "how='cross' takes no on") for keys in ({"on": "a"}, {"left_on": "a", "right_on": "b"})),
], ids=lambda v: None if not isinstance(v, str) else v[:20])
def test_what_polars_refuses_is_refused(left, right, options, match):
    """polars raises DuplicateError or ValueError for these; gh.merge a ValueError."""
    with pytest.raises(ValueError, match=match):
        gh.merge(left, left if right is None else right, device="cpu", **options)


@pytest.mark.parametrize("how", ["inner", "left", "full", "semi", "anti"])
@pytest.mark.parametrize(("dtype", "present"), [
    (pl.List(pl.Int64), [1]), (pl.Array(pl.Int64, 1), [1]),
    (pl.Struct({"a": pl.Int64}), {"a": 1})], ids=["list", "array", "struct"])
def test_nested_keys_are_refused_naming_the_column(how, dtype, present):
    left = DF({"k": pl.Series([present, None], dtype=dtype), "l": [0, 1]})
    right = DF({"k": pl.Series([None, present], dtype=dtype), "r": [10, 11]})
    assert left.join(right, on="k", how=how).height >= 1
    with pytest.raises(TypeError, match="key column 'k' of the left side is .*nested"):
        gh.merge(left, right, on="k", how=how, device="cpu")


def test_a_join_without_keys_is_refused():
    with pytest.raises(ValueError, match="must specify"):
        STRINGS[0].join(STRINGS[1])
    with pytest.raises(ValueError, match="give on="):
        gh.merge(*STRINGS, device="cpu")


@pytest.mark.parametrize("how", ["inner", "left", "full", "semi", "anti"])
def test_int128_keys_near_the_int64_minimum(how):
    left = DF({"a": pl.Series([1, 1, 2], dtype=pl.Int128)})
    right = DF({"a": pl.Series([-(2**63), -(2**63) + 1, -(2**63) + 2], dtype=pl.Int128)})
    _same(left, right, on="a", how=how, coalesce=False)
    _same(left.with_columns(b=pl.col("a")), right.with_columns(b=pl.col("a")), on=["a", "b"],
          how=how, coalesce=False)


@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "semi", "anti"])
@pytest.mark.parametrize("other", [pl.Int8, pl.UInt64, pl.Int128])
def test_int128_keys_against_other_integers(how, other):
    left = DF({"a": pl.Series([1, -(2**63), 3, 2**100], dtype=pl.Int128), "x": [1, 2, 3, 4]})
    right = DF({"a": pl.Series([1, 3, 5], dtype=other), "y": [7, 8, 9]})
    for coalesce in (None, True):
        _same(left, right, on="a", how=how, coalesce=coalesce, maintain_order="left_right")
        _same(right, left, on="a", how=how, coalesce=coalesce, maintain_order="left_right")


def test_int128_values_past_38_digits_are_refused_naming_the_column():
    """gh.merge carries 128-bit columns through Arrow as decimal128(38, 0)."""
    left = DF({"a": [1], "big": pl.Series([-(2**127)], dtype=pl.Int128)})
    with pytest.raises(TypeError, match="column 'big' of the left frame is Int128"):
        gh.merge(left, DF({"a": [1]}), on="a", device="cpu")


@pytest.mark.parametrize("order", ["none", "left_right", "right_left"])
def test_cross_join_orders(order):
    left, right = DF({"a": [1, 2, 3]}), DF({"b": ["x", "y"]})
    _same(left, right, how="cross", maintain_order=order)
