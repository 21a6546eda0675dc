"""Arrow string and binary views (polars' strings) in merges: gathered as 16-byte views that
share the column's bytes (join/arrow_gather.py), looked up as keys by their views alone where
the right side's strings are at most 12 bytes (join/table_merge.py), polars frames merged
without their strings leaving the view layout, and the results the same as polars' join and
as the same merge of plain strings."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import gpuhash as gh
from gpuhash.join.arrow_gather import take_column
from gpuhash.join.table_merge import view_rows


def _strings(rng, n: int, *, longest: int = 20) -> list[str]:
    letters = np.array(list("abcxyz01é"))
    return ["".join(rng.choice(letters, rng.integers(0, longest + 1))) for _ in range(n)]


def _view_columns(rng, n: int) -> list:
    nulls = rng.random(n) < 0.15
    words = _strings(rng, n)
    return [
        pa.array(words, pa.string_view(), mask=nulls),
        pa.array([w.encode() for w in words], pa.binary_view()),
        pa.array(words, pa.string_view()).slice(11, n - 40),
        pa.chunked_array([pa.array(words[:100], pa.string_view()),
                          pa.array(words[100:], pa.string_view(), mask=nulls[100:])]),
        pa.array(words, pa.string()).cast(pa.string_view()),
    ]


@pytest.mark.parametrize("seed", range(3))
def test_view_gathers_equal_the_gather_of_plain_strings(seed):
    rng = np.random.default_rng(seed)
    for column in _view_columns(rng, 5003):
        size = len(column)
        plain = column.cast(pa.large_binary() if pa.types.is_binary_view(column.type)
                            else pa.large_string())
        for rows in (rng.integers(-1, size, 7000), np.arange(size), np.full(9, -1),
                     np.array([], np.int64), np.sort(rng.integers(0, size, 99))):
            for rows_type in (np.int32, np.int64):
                got = take_column(column, rows.astype(rows_type))
                got.validate(full=True)
                assert got.type == column.type
                want = take_column(plain, rows.astype(np.int64))
                assert got.cast(plain.type).equals(
                    want.combine_chunks() if isinstance(want, pa.ChunkedArray) else want)


def _with_garbage_padding(array, rng):
    """The same views with random bytes past each inline string's length (Arrow leaves
    them unspecified)."""
    views = np.frombuffer(array.buffers()[1], np.uint8).reshape(-1, 16).copy()
    sizes = views[:, :4].copy().view(np.uint32)[:, 0]
    for i, size in enumerate(sizes):
        if size <= 12:
            views[i, 4 + size:] = rng.integers(0, 256, 12 - size)
    return pa.Array.from_buffers(array.type, len(array), [array.buffers()[0],
                                 pa.py_buffer(views), *array.buffers()[2:]],
                                 null_count=array.null_count)


@pytest.mark.parametrize("seed", range(4))
def test_view_keys_find_the_same_rows_as_plain_strings(seed):
    rng = np.random.default_rng(seed)
    short = sorted({s for s in _strings(rng, 400, longest=12) if len(s.encode()) <= 12})
    right = pa.array(short + [None], pa.string_view())
    pool = short + _strings(rng, 50, longest=30) + ["", None]
    left = pa.array([pool[i] for i in rng.integers(0, len(pool), 20_000)], pa.string_view())
    right, left = _with_garbage_padding(right, rng), _with_garbage_padding(left, rng)
    rows, counts = view_rows(left, right)
    where = {s: i for i, s in enumerate(right.to_pylist()) if s is not None}
    want = np.array([where.get(s, -1) if s is not None else -1 for s in left.to_pylist()])
    np.testing.assert_array_equal(rows, want)
    assert counts.sum() == (want >= 0).sum()


def test_view_keys_longer_than_twelve_bytes_or_repeating():
    left = pa.array(["a", "a string of many bytes"], pa.string_view())
    assert view_rows(left, pa.array(["a string of many bytes"], pa.string_view())) == "long"
    assert view_rows(left, pa.array(["a", "b", "a"], pa.string_view())) is None
    # the merge takes plain strings then, with the same answer
    right = pa.table({"k": pa.array(["a string of many bytes", "a"], pa.string_view()),
                      "v": [1, 2]})
    out = gh.merge(pa.table({"k": left}), right, on="k", device="cpu")
    assert out.column("v").to_pylist() == [2, 1]


def _frames(rng, n: int, right_rows: int):
    keys = [f"id{k}" for k in range(right_rows)]
    x = pl.DataFrame({
        "k": [keys[i] if i < right_rows else f"gone{i}"
              for i in rng.integers(0, right_rows + 9, n)],
        "s": _strings(rng, n),
        "i": rng.integers(0, 9, n),
    }).with_columns(pl.when(pl.col("i") == 3).then(None).otherwise(pl.col("s")).alias("s"))
    right = pl.DataFrame({"k": keys, "t": _strings(rng, right_rows, longest=30),
                          "b": [w.encode() for w in _strings(rng, right_rows)]})
    return x, right


@pytest.mark.parametrize("how", ["inner", "left", "semi", "anti", "right", "full"])
@pytest.mark.parametrize("seed", range(2))
def test_polars_frames_merge_as_polars_joins(how, seed):
    rng = np.random.default_rng(seed)
    x, right = _frames(rng, 3000, 200)
    got = gh.merge(x, right, on="k", how=how, device="cpu")
    want = x.join(right, on="k", how=how, maintain_order="left" if how != "right" else "right")
    if how in ("full", "right"):  # the order of rows is polars' own choice there
        got, want = got.sort(got.columns, nulls_last=True), want.sort(want.columns,
                                                                      nulls_last=True)
    assert got.equals(want)
    assert got.schema == want.schema


def test_polars_strings_stay_views_and_share_their_bytes():
    rng = np.random.default_rng(9)
    x, right = _frames(rng, 2000, 50)
    got = gh.merge(x, right, on="k", how="inner", device="cpu", sort=True)
    want = x.join(right, on="k", how="inner").sort("k", "i", "s", nulls_last=True)
    assert got.sort("k", "i", "s", nulls_last=True).equals(want)
    arrow = got.to_arrow(compat_level=pl.CompatLevel.newest())
    assert pa.types.is_string_view(arrow.schema.field("t").type)


def test_polars_frames_with_strings_nested_in_lists_and_structs():
    left = pl.DataFrame({"k": [1, 2, 3], "words": [["a"], ["b", "c"], None],
                         "pair": [{"s": "x", "n": 1}, None, {"s": "yy", "n": 2}],
                         "two": pl.Series([["a", "b"], ["c", "d"], ["e", "f"]],
                                          dtype=pl.Array(pl.String, 2))})
    right = pl.DataFrame({"k": [3, 1, 1], "tags": [["q"], ["r"], ["s"]]})
    for how in ("inner", "left", "semi", "full"):
        got = gh.merge(left, right, on="k", how=how, device="cpu", sort=True)
        want = left.join(right, on="k", how=how)
        assert got.schema == want.schema
        order = ["k", "k_right"] if how == "full" else ["k"]
        assert got.sort(order, nulls_last=True).equals(want.sort(order, nulls_last=True))


@pytest.mark.parametrize("repeated", [False, True], ids=["lookup", "general"])
def test_view_keys_come_out_as_views_whichever_path_joins_them(repeated):
    left = pa.table({"k": pa.array(["a", "b", "c"], pa.string_view()), "v": [1, 2, 3]})
    keys = ["a", "c", "a"] if repeated else ["a", "c"]
    right = pa.table({"k": pa.array(keys, pa.string_view()), "w": range(len(keys))})
    for how in ("inner", "left", "outer"):
        out = gh.merge(left, right, on="k", how=how, device="cpu")
        assert out.schema.field("k").type == pa.string_view(), how
