"""Merges of host tables by lookup (join/table_merge.py) and the Arrow gathers under them
(join/arrow_gather.py): every type against Arrow's own ``take``, every ``how`` the lookup
takes against pandas (rows and their order) and against the general path, string keys,
nulls, keys that repeat on the right (the general path then), and reused host memory."""

from __future__ import annotations

import decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import gpuhash as gh
from gpuhash._common import host_buffers
from gpuhash.join import arrow_gather
from gpuhash.join.arrow_gather import take_column
from gpuhash.join.table_merge import try_lookup_merge


def _columns(rng, n: int) -> list[pa.Array]:
    nulls = rng.random(n) < 0.1
    return [
        pa.array(rng.integers(-100, 100, n), pa.int64()),
        pa.array(rng.integers(0, 100, n).astype(np.uint8)),
        pa.array(rng.random(n), mask=nulls),
        pa.array(rng.integers(0, 2, n).astype(bool), mask=rng.random(n) < 0.2),
        pa.array([f"s{i}" * (i % 4) for i in range(n)], mask=nulls),
        pa.array([f"é{i}" for i in range(n)], pa.large_string()),
        pa.array([b"xy" * (i % 3) for i in range(n)], pa.binary()),
        pa.array([decimal.Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
        pa.array(rng.integers(0, 10**12, n), pa.timestamp("us")),
        pa.array([bytes([i % 256] * 3) for i in range(n)], pa.binary(3)),
        pa.array(["a", "b", None] * (n // 3)).dictionary_encode(),
        pa.array([[1, 2]] * n),  # no gather of its own: Arrow's take
        pa.array(np.arange(n, dtype=np.int16)).slice(7, n - 20),
        pa.array([f"t{i}" for i in range(n)], mask=rng.random(n) < 0.3).slice(13, n - 100),
        pa.nulls(n),
        pa.chunked_array([pa.array([1.5, None]), pa.array([3.5] * (n - 2))]),
    ]


def _expected(column, rows: np.ndarray):
    array = arrow_gather.single(column)
    return array.take(pa.array(rows, mask=rows < 0))


def _plain(result):
    return result.combine_chunks() if isinstance(result, pa.ChunkedArray) else result


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("cached", [True, False], ids=["small_columns", "large_columns"])
def test_gathers_match_arrows_take_for_every_type(seed, cached, monkeypatch):
    if not cached:  # every string column gathered as a large one (rows copy independently)
        monkeypatch.setattr(arrow_gather, "CACHED_BYTES", 0)
    rng = np.random.default_rng(seed)
    for column in _columns(rng, 70_001):
        size = len(column)
        for rows in (rng.integers(-1, size, 90_000), np.arange(size),
                     np.array([], np.int64), np.sort(rng.integers(0, size, 1001)),
                     np.full(5, -1)):
            rows = rows.astype(np.int64)
            got = _plain(take_column(column, rows, ascending=bool(np.all(np.diff(rows) > 0))))
            got.validate(full=True)
            assert got.equals(_expected(column, rows)), column.type


@pytest.mark.parametrize("large", [False, True])
def test_strings_past_what_their_offsets_address_come_in_pieces(monkeypatch, large):
    # the pieces' byte limit made small: the same code splits where 32-bit offsets end
    monkeypatch.setattr(arrow_gather, "PIECE_BYTES", {np.int32: 1000, np.int64: 3000})
    rng = np.random.default_rng(5)
    kind = pa.large_string() if large else pa.string()
    column = pa.array([f"v{i}" * (i % 7) for i in range(5000)], kind,
                      mask=rng.random(5000) < 0.2)
    rows = rng.integers(-1, 5000, 20_000).astype(np.int64)
    got = take_column(column, rows)
    assert isinstance(got, pa.ChunkedArray) and got.num_chunks > 1
    for chunk in got.chunks:
        chunk.validate(full=True)
    assert got.combine_chunks().equals(_expected(column, rows))


def _frames(rng, rows: int, keys: int, *, strings: bool, sparse: bool):
    values = rng.permutation(keys)[: max(1, keys // 2)]
    right_keys = values * (1_000_003 if sparse else 1)
    left_keys = rng.choice(np.concatenate([values, values + keys]), rows) * (
        1_000_003 if sparse else 1)
    if strings:
        left_keys = np.array([f"k{v}" for v in left_keys], dtype=object)
        right_keys = np.array([f"k{v}" for v in right_keys], dtype=object)
    left = pd.DataFrame({"k": left_keys, "a": rng.random(rows),
                         "s": [f"row{i}" for i in range(rows)]})
    right = pd.DataFrame({"k": right_keys, "b": np.arange(len(right_keys)),
                          "t": [f"r{i}" for i in range(len(right_keys))]})
    return left, right


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize(("strings", "sparse"), [(False, False), (False, True), (True, False)],
                         ids=["dense", "sparse", "strings"])
def test_lookup_merges_match_pandas_rows_and_order(how, strings, sparse):
    rng = np.random.default_rng(11)
    left, right = _frames(rng, 5000, 800, strings=strings, sparse=sparse)
    got = gh.merge(left, right, on="k", how=how, device="cpu")
    want = pd.merge(left, right, on="k", how=how)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True),
                                  check_dtype=False)


@pytest.mark.parametrize("how", ["semi", "anti"])
def test_semi_and_anti_lookups_keep_the_left_rows_in_order(how):
    rng = np.random.default_rng(3)
    left, right = _frames(rng, 3000, 500, strings=True, sparse=False)
    got = gh.merge(pa.table(left), pa.table(right), on="k", how=how, device="cpu")
    inside = left["k"].isin(set(right["k"]))
    want = left[inside if how == "semi" else ~inside]
    assert got.column("s").to_pylist() == want["s"].tolist()


@pytest.mark.parametrize("kind", ["int32", "string"])
@pytest.mark.parametrize("how", ["inner", "left", "semi", "anti"])
def test_null_keys_match_nothing_as_in_the_general_path(kind, how):
    rng = np.random.default_rng(8)
    values = [None if v < 3 else (f"k{v}" if kind == "string" else v)
              for v in rng.integers(0, 60, 400)]
    right_values = [None, None] + [f"k{v}" if kind == "string" else v for v in range(3, 40)]
    left = pa.table({"k": pa.array(values, pa.string() if kind == "string" else pa.int32()),
                     "a": np.arange(400)})
    right = pa.table({"k": pa.array(right_values, left.schema.field("k").type),
                      "b": np.arange(len(right_values))})
    names = ({"k": "k", "a": "a"}, {} if how in ("semi", "anti") else {"b": "b"})
    fast = try_lookup_merge(left, right, "k", "k", how=how, names=names, device="cpu")
    assert fast is not None
    general = gh.merge(left, right, on="k", how=how, device="cpu", validate="m:m",
                       nulls_equal=False, suffixes=("_x", "_y"))
    key = [("a", "ascending")]
    assert fast.sort_by(key).equals(general.select(fast.column_names).sort_by(key))


def test_repeated_right_keys_take_the_general_path():
    left = pa.table({"k": [1, 2, 3, 2], "a": [1, 2, 3, 4]})
    right = pa.table({"k": [2, 2, 3], "b": [20, 21, 30]})
    assert try_lookup_merge(left, right, "k", "k", how="inner",
                            names=({"k": "k", "a": "a"}, {"b": "b"}), device="cpu") is None
    strings = pa.table({"k": ["x", "x"], "b": [1, 2]})
    assert try_lookup_merge(pa.table({"k": ["x"], "a": [1]}), strings, "k", "k",
                            how="inner", names=({"k": "k", "a": "a"}, {"b": "b"}),
                            device="cpu") is None
    out = gh.merge(left, right, on="k").sort_by([("a", "ascending"), ("b", "ascending")])
    assert out.to_pydict() == {"k": [2, 2, 3, 2, 2], "a": [2, 2, 3, 4, 4],
                               "b": [20, 21, 30, 20, 21]}


def test_a_left_lookup_returns_the_left_columns_themselves():
    left = pa.table({"k": np.arange(100_000), "a": np.random.default_rng(1).random(100_000)})
    right = pa.table({"k": [5, 7], "b": ["five", "seven"]})
    out = gh.merge(left, right, on="k", how="left", device="cpu")
    assert out.column("a").chunk(0).buffers()[1].address == (
        left.column("a").chunk(0).buffers()[1].address)
    assert out.column("b").null_count == 99_998


def test_freed_host_buffers_are_reused():
    first = host_buffers.take(3 << 20, np.int64)
    address = first.__array_interface__["data"][0]
    del first
    again = host_buffers.take(3 << 20, np.int64)
    assert again.__array_interface__["data"][0] == address
    small = host_buffers.take(10, np.int64)
    assert small.base is None  # small requests are NumPy's own


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["inner", "left", "semi", "anti"])
def test_sparse_keys_looked_up_on_the_gpu_match_the_cpu(how):
    """Integer keys too far apart for an index by key go to a HashMap on the join's device."""
    rng = np.random.default_rng(21)
    left, right = _frames(rng, 200_000, 50_000, strings=False, sparse=True)
    left, right = pa.table(left), pa.table(right)
    on_gpu = gh.merge(left, right, on="k", how=how, device="cuda")
    on_cpu = gh.merge(left, right, on="k", how=how, device="cpu")
    assert on_gpu.equals(on_cpu)


def test_blocks_freed_by_the_garbage_collector_inside_take_do_not_deadlock():
    """A block whose last array sits in a reference cycle is freed when a collection runs,
    which may be inside take() itself (an allocation there triggers it): run in a child with
    a time limit, since the failure is a hang."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import gc
        import numpy as np
        from gpuhash._common import host_buffers
        for threshold in range(1, 20):
            gc.set_threshold(threshold)
            for _ in range(100):
                kept = host_buffers.take(1 << 21, np.uint8)
                cycle = [host_buffers.take(1 << 22, np.uint8)]
                cycle.append(cycle)
                del cycle, kept
        print("done")
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("take() deadlocked on a block the garbage collector freed")
    assert done.stdout.strip() == "done", done.stderr


@pytest.mark.parametrize("kind", ["float", "timestamp", "dictionary"])
def test_other_key_types_keep_the_left_order_too(kind):
    """Keys that are neither integers nor strings go through one dictionary of both sides'
    values, and still keep the left rows in order (a review found them unordered)."""
    rng = np.random.default_rng(1)
    right_keys, left_keys = rng.permutation(1000), rng.integers(0, 2000, 3000)
    convert = {"float": lambda x: pa.array(x.astype(float)),
               "timestamp": lambda x: pa.array(x, pa.timestamp("s")),
               "dictionary": lambda x: pa.array(x.astype(str)).dictionary_encode()}[kind]
    left = pa.table({"k": convert(left_keys), "a": np.arange(3000)})
    right = pa.table({"k": convert(right_keys), "b": np.arange(1000)})
    for how in ("inner", "left"):
        got = gh.merge(left, right, on="k", how=how, device="cpu")
        assert bool(np.all(np.diff(got["a"].to_numpy()) > 0))
        want = pd.merge(left.to_pandas(), right.to_pandas(), on="k", how=how)
        assert got["b"].to_pandas().fillna(-1).tolist() == want["b"].fillna(-1).tolist()


def test_findings_of_the_review():
    """Each case a review of the merge options found wrong, now as pandas / polars give it."""
    left = pa.table({"k": [1, 2, 3], "a": [1, 2, 3]})
    right = pa.table({"k": [2], "b": [1]})
    anti = gh.merge(left, right, on="k", how="anti", indicator=True, device="cpu")
    assert anti["_merge"].to_pylist() == ["left_only", "left_only"]
    ordered = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()),
                                             pa.array(["lo", "hi"]), ordered=True)
    out = gh.merge(pa.table({"k": [1, 2, 3], "c": ordered}), pa.table({"k": [1, 3]}), on="k",
                   device="cpu")
    assert out.schema.field("c").type.ordered
    views = pa.table({"k": [2, 1], "s": pa.array(["x", "y"], pa.string_view())})
    assert gh.merge(pa.table({"k": [1, 2]}), views, on="k", device="cpu")["s"].to_pylist() == (
        ["y", "x"])
    signed = pd.DataFrame({"k": np.array([1, 2], np.int64), "a": [1, 2]})
    unsigned = pd.DataFrame({"k": np.array([2, 2**53 + 1], np.uint64), "b": [1, 2]})
    assert gh.merge(signed, unsigned, on="k", how="right_anti", device="cpu")["k"].tolist() == (
        pd.merge(signed, unsigned, on="k", how="right_anti")["k"].tolist())
    named = pd.DataFrame({"a": [3, 1, 2], "x": [1, 2, 3]})
    other = pd.DataFrame({"b": [2, 5, 0, 3], "y": [1, 2, 3, 4]})
    for how in ("right", "outer"):
        got = gh.merge(named, other, left_on="a", right_on="b", how=how, sort=True, device="cpu")
        want = pd.merge(named, other, left_on="a", right_on="b", how=how, sort=True)
        assert got["b"].fillna(-1).tolist() == want["b"].fillna(-1).tolist()
    assert gh.merge(named, other, how="cross", sort=True, device="cpu").shape == (12, 4)
    categories = pd.CategoricalDtype(["z", "b", "a"])
    first = pd.DataFrame({"k": pd.Categorical(["a", "z", "b"], dtype=categories), "x": [1, 2, 3]})
    second = pd.DataFrame({"k": pd.Categorical(["b", "a", "z"], dtype=categories), "y": [1, 2, 3]})
    assert gh.merge(first, second, on="k", sort=True, device="cpu")["k"].tolist() == (
        pd.merge(first, second, on="k", sort=True)["k"].tolist())


def test_eight_strings_past_their_offsets_are_refused(monkeypatch):
    monkeypatch.setattr(arrow_gather, "PIECE_BYTES", {np.int32: 20, np.int64: 2**62})
    monkeypatch.setattr(arrow_gather, "CACHED_BYTES", 0)
    column = pa.array(["x" * 10] * 16)
    with pytest.raises(ValueError, match="cast the column to large_string"):
        take_column(column, np.arange(16, dtype=np.int64))


@pytest.mark.parametrize("seed", range(3))
def test_string_keys_of_every_length_and_byte(seed):
    """Keys of 0 to 20 random bytes (zeros among them, some sharing their first eight bytes),
    sliced so that their bytes start anywhere in the buffer: the lookup finds what a set of
    Python bytes finds."""
    rng = np.random.default_rng(seed)
    values = [bytes(rng.integers(0, 3, rng.integers(0, 21)).astype(np.uint8)) for _ in range(600)]
    values += [b"\x00" * 8 + bytes([k]) for k in range(5)] + [b"\x00" * 8]
    right_values = list(dict.fromkeys(values))[::2]
    left = pa.table({"k": pa.array([b"pad"] + values, pa.binary()).slice(1),
                     "a": np.arange(len(values))})
    right = pa.table({"k": pa.array(right_values, pa.binary()), "b": np.arange(len(right_values))})
    got = gh.merge(left, right, on="k", how="left", device="cpu")
    where = {v: i for i, v in enumerate(right_values)}
    assert got["b"].to_pylist() == [where.get(v) for v in values]
