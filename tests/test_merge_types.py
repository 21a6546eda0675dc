"""gh.merge's key and column types as a pandas user meets them: keys of two types compared
the same way whichever side is left (or refused), -0.0 equal to 0.0, and pandas' nullable
extension dtypes kept in the output (found by an exploratory review)."""

from __future__ import annotations

import pytest

import gpuhash as gh

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")


def _rows(frame, columns) -> list[tuple]:
    """The rows of ``columns`` as sorted tuples, missing values as None."""
    def clean(v):
        return None if v is None or v is pd.NA or v != v else v
    return sorted((tuple(clean(v) for v in row) for row in
                   frame[columns].astype(object).itertuples(index=False)), key=repr)


@pytest.mark.filterwarnings("ignore:You are merging on int and float")
@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
def test_an_integer_and_a_float_key_match_by_value_whichever_side_is_left(how):
    ints = pd.DataFrame({"k": [1, 2, 0, 7], "i": [10, 20, 30, 40]})
    floats = pd.DataFrame({"k": [1.0, 1.5, -0.0, 7.0], "f": [0.1, 0.2, 0.3, 0.4]})
    pandas_how = "outer" if how == "full" else how
    for left, right in ((ints, floats), (floats, ints)):
        got = gh.merge(left, right, on="k", how=how, device="cpu")
        want = pd.merge(left, right, on="k", how=pandas_how)
        assert _rows(got, ["i", "f"]) == _rows(want, ["i", "f"]), (how, list(left))


@pytest.mark.parametrize(("left", "right"), [
    (["1", "01"], [1, 2]),
    ([True, False], [1, 0]),
    ([b"a"], ["a"]),
])
def test_keys_of_kinds_that_do_not_compare_are_refused_either_way(left, right):
    a, b = pd.DataFrame({"k": left}), pd.DataFrame({"k": right, "v": range(len(right))})
    for x, y in ((a, b), (b, a)):
        with pytest.raises(TypeError, match="cannot be compared"):
            gh.merge(x, y, on="k", device="cpu")


def test_minus_zero_equals_zero_as_in_pandas():
    left = pd.DataFrame({"k": [0.0, -0.0, 2.5]})
    right = pd.DataFrame({"k": [-0.0, 2.5], "z": [1, 2]})
    got = gh.merge(left, right, on="k", device="cpu")
    assert sorted(got["z"].tolist()) == sorted(pd.merge(left, right, on="k")["z"].tolist())


def test_strings_timestamps_and_dates_of_two_arrow_types_join():
    left = pa.table({"s": pa.array(["a", "b"], pa.string()),
                     "t": pa.array([1, 2], pa.timestamp("s")),
                     "d": pa.array([1, 2], pa.date32())})
    right = pa.table({"s": pa.array(["b", "a"], pa.large_string()),
                      "t": pa.array([2000, 1000], pa.timestamp("ms")),
                      "d": pa.array([2 * 86_400_000, 86_400_000], pa.date64()),
                      "v": [20, 10]})
    for on in ("s", "t", "d"):
        got = gh.merge(left, right, on=on, device="cpu")
        assert sorted(got.column("v").to_pylist()) == [10, 20], on


@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
def test_nullable_pandas_columns_keep_their_dtypes_and_values(how):
    """A nullable Int64 column with missing rows stays Int64 with its exact values (not
    float64, which rounds past 2**53); a nullable boolean stays boolean; as pandas' merge."""
    left = pd.DataFrame({"k": pd.array([1, 3], dtype="Int64"),
                         "a": pd.array([2**53 + 1, None], dtype="Int64")})
    right = pd.DataFrame({"k": pd.array([2, 1], dtype="Int64"), "b": [0, 7],
                          "c": pd.array([True, None], dtype="boolean")})
    got = gh.merge(left, right, on="k", how=how, device="cpu")
    want = pd.merge(left, right, on="k", how="outer" if how == "full" else how)
    for column in ("k", "a", "b", "c"):
        assert got[column].dtype == want[column].dtype, column
    assert _rows(got, ["k", "a", "b", "c"]) == _rows(want, ["k", "a", "b", "c"])


def test_a_dict_column_no_tensor_holds_is_named():
    np = pytest.importorskip("numpy")
    left = {"k": np.array([1, 2]), "s": np.array(["a", "b"])}
    right = {"k": np.array([2, 3]), "v": np.array([1.0, 2.0])}
    with pytest.raises(TypeError, match=r"^left\['s'\] is a NumPy array of <U1"):
        gh.merge(left, right, on="k", device="cpu")


@pytest.mark.parametrize("how", ["inner", "left", "full"])
def test_pandas_frames_with_integer_column_labels_merge_as_pandas_merges_them(how):
    left = pd.DataFrame({0: [1, 2], 1: [3, 4]})
    right = pd.DataFrame({0: [2, 3], 2: [5, 6]})
    pandas_how = "outer" if how == "full" else how
    for on in (None, 0, [0]):
        got = gh.merge(left, right, on=on, how=how, device="cpu")
        want = pd.merge(left, right, on=on, how=pandas_how)
        assert list(got.columns) == list(want.columns), on
        assert _rows(got, list(want.columns)) == _rows(want, list(want.columns)), on


def test_multiindex_columns_are_refused_before_any_work():
    frame = pd.DataFrame([[1, 2]], columns=pd.MultiIndex.from_tuples([("k", ""), ("v", "a")]))
    with pytest.raises(TypeError, match="MultiIndex columns"):
        gh.merge(frame, frame, device="cpu")


def test_a_cross_join_has_no_keys_for_validate_to_check():
    left, right = pd.DataFrame({"a": [1, 2]}), pd.DataFrame({"b": [1]})
    for validate in ("1:1", "1:m", "m:1", "m:m"):
        assert len(gh.merge(left, right, how="cross", validate=validate, device="cpu")) == 2
    with pytest.raises(ValueError, match="validate must be one of"):
        gh.merge(left, right, how="cross", validate="bogus", device="cpu")


def test_polars_enum_columns_stay_enums():
    pl = pytest.importorskip("polars")
    kinds = pl.Enum(["a", "b", "c"])
    left = pl.DataFrame({"k": pl.Series(["a", "b"], dtype=kinds), "v": [1, 2]})
    right = pl.DataFrame({"k": pl.Series(["b", "c"], dtype=kinds),
                          "e": pl.Series(["c", "a"], dtype=kinds)})
    for how in ("inner", "full"):
        got = gh.merge(left, right, on="k", how=how, device="cpu")
        want = left.join(right, on="k", how=how)
        assert got.columns == want.columns
        assert all(got.schema[c] == kinds for c in got.columns if c != "v"), how
        assert sorted(got.rows(), key=repr) == sorted(want.select(got.columns).rows(), key=repr)


@pytest.mark.parametrize("how", ["right", "full"])
@pytest.mark.parametrize("case", ["all-null object", "empty object", "empty category",
                                  "all-null category", "arrow nulls"])
def test_a_left_key_column_of_no_values_takes_the_right_keys(how, case):
    """A left key column Arrow types as null (all None, or pandas' empty object column) or a
    dictionary of null (an empty category column): right and full joins fill the key column
    from the right side, as pandas does (a review found these raised ArrowNotImplementedError)."""
    right = pd.DataFrame({"k": ["x", "y"], "b": [1, 2]})
    if case == "all-null object":
        left = pd.DataFrame({"k": [None, None], "a": [1, 2]})
    elif case == "empty object":
        left = pd.DataFrame({"k": pd.Series([], dtype=object), "a": pd.Series([], dtype="int64")})
    elif case == "empty category":
        left = pd.DataFrame({"k": pd.Series([], dtype="category"),
                             "a": pd.Series([], dtype="int64")})
        right["k"] = right["k"].astype("category")
    elif case == "all-null category":  # no categories: Arrow types it a dictionary of double
        left = pd.DataFrame({"k": pd.Series([None, None], dtype="category"), "a": [1, 2]})
    else:
        left = pa.table({"k": pa.nulls(2), "a": [1, 2]})
        ours = gh.merge(left, pa.Table.from_pandas(right), on="k", how=how).to_pandas()
        theirs = pd.merge(left.to_pandas(), right, on="k", how="outer" if how == "full" else how)
        assert _rows(ours, ["k", "a", "b"]) == _rows(theirs, ["k", "a", "b"])
        return
    ours = gh.merge(left, right, on="k", how=how)
    theirs = pd.merge(left, right, on="k", how="outer" if how == "full" else how)
    assert _rows(ours, ["k", "a", "b"]) == _rows(theirs, ["k", "a", "b"])
    # and the other way round: the right side of no values
    ours = gh.merge(right, left, on="k", how="left" if how == "right" else how)
    theirs = pd.merge(right, left, on="k", how="left" if how == "right" else "outer")
    assert _rows(ours, ["k", "a", "b"]) == _rows(theirs, ["k", "a", "b"])


def test_dict_merges_name_the_column_whose_length_or_type_is_wrong():
    torch = pytest.importorskip("torch")
    lengths = r"left dict's columns differ in length: \{'k': 2, 'v': 3\}"
    with pytest.raises(ValueError, match=lengths):
        gh.merge({"k": torch.tensor([1, 2]), "v": torch.tensor([1, 2, 3])},
                 {"k": torch.tensor([1])}, on="k")
    for left, right, side in (([1.0, 2.0], [1], "left"), ([1, 2], [1.0], "right")):
        with pytest.raises(TypeError, match=f"key column 'k' of the {side} dict is torch.float32"):
            gh.merge({"k": torch.tensor(left)}, {"k": torch.tensor(right)}, on="k")


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
@pytest.mark.parametrize("other", [["x", "y"], [1, 2], [1.5, 2.0]], ids=["str", "int", "float"])
def test_an_all_null_category_key_joins_any_other_key_as_pandas_does(how, other):
    """pandas' category column of nulls only has no categories (typed float64): it compares
    with keys of any type, matching none (a review found every how raised against text)."""
    nulls = pd.DataFrame({"k": pd.Series([None, None], dtype="category"), "a": [1, 2]})
    keys = pd.DataFrame({"k": other, "b": [1, 2]})
    for left, right in ((nulls, keys), (keys, nulls)):
        ours = gh.merge(left, right, on="k", how=how)
        assert _rows(ours, ["k", "a", "b"]) == _rows(pd.merge(left, right, on="k", how=how),
                                                     ["k", "a", "b"])


@pytest.mark.parametrize("how", ["right", "outer"])
def test_a_category_of_integers_against_integers_keeps_the_right_keys(how):
    """A right or full join of a category of integers and an int64 key: the key column takes
    the right side's keys where the left lacks them (it raised: no cast from int64 into the
    category's dictionary type)."""
    left = pd.DataFrame({"k": pd.Categorical([1, 2]), "a": [1, 2]})
    right = pd.DataFrame({"k": [1, 3], "b": [1, 2]})
    ours = gh.merge(left, right, on="k", how=how)
    assert _rows(ours, ["k", "a", "b"]) == _rows(pd.merge(left, right, on="k", how=how),
                                                 ["k", "a", "b"])


_DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("dtype", ["UInt16", "UInt32", "UInt64"])
@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
def test_unsigned_nullable_keys_with_nulls_equal_merge_as_pandas(device, dtype, how):
    """Unsigned keys with nulls, their extremes among them, null meeting null: the null rows'
    codes are zeroed through the signed twin (CUDA has no select kernel for these dtypes)."""
    top = {"UInt16": 2**16 - 1, "UInt32": 2**32 - 1, "UInt64": 2**64 - 1}[dtype]
    left = pd.DataFrame({"k": pd.array([top, None, 0, 5], dtype=dtype), "a": [1, 2, 3, 4]})
    right = pd.DataFrame({"k": pd.array([None, top, 6, 0], dtype=dtype), "b": [5, 6, 7, 8]})
    got = gh.merge(left, right, on="k", how=how, nulls_equal=True, device=device)
    want = left.merge(right, on="k", how=how)  # pandas matches null keys
    assert _rows(got, ["k", "a", "b"]) == _rows(want, ["k", "a", "b"])


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_unsigned_tensor_keys_of_a_full_join_are_coalesced(device, dtype):
    import torch

    top = {"uint16": 2**16 - 1, "uint32": 2**32 - 1, "uint64": 2**64 - 1}[dtype]
    as_tensor = lambda values: torch.tensor(values, dtype=getattr(torch, dtype)).to(device)  # noqa: E731
    left = {"k": as_tensor([top, 3]), "a": torch.tensor([1, 2]).to(device)}
    right = {"k": as_tensor([3, 9]), "b": torch.tensor([5, 6]).to(device)}
    got = gh.merge(left, right, on="k", how="full")
    rows = sorted(zip(got["k"].cpu().tolist(), got["a"].cpu().tolist(), got["b"].cpu().tolist()))
    assert [k for k, _, _ in rows] == sorted([3, 9, top])
