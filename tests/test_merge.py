"""gh.merge on pandas, polars, pyarrow and dicts of tensors, against pandas' merge and
polars' join; naming, validate and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuhash as gh
from conftest import covering, few_then_many

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")


def records(frame) -> list[tuple]:
    """Rows as tuples, nulls as None, sorted: merge's row order is unspecified."""
    if isinstance(frame, pl.DataFrame):
        rows = frame.rows()
    else:
        rows = [tuple(r) for r in frame.astype(object).itertuples(index=False)]

    def clean(v):
        missing = v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))
        return None if missing else v

    rows = [tuple(clean(v) for v in r) for r in rows]
    return sorted(rows, key=lambda r: [(v is None, str(type(v)), v if v is not None else 0)
                                       for v in r])


@st.composite
def frames(draw):
    def side(payload):
        rows = draw(st.integers(0, 12))
        ints = st.one_of(st.none(), st.integers(-3, 3))
        return {
            "k": draw(st.lists(ints, min_size=rows, max_size=rows)),
            "s": draw(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=rows,
                               max_size=rows)),
            payload: [float(i) for i in range(rows)],
        }
    return side("x"), side("y")


@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
@few_then_many(4, 15)
def test_pandas_merge_matches_pandas(how, examples):
    @settings(max_examples=examples, deadline=None)
    @given(data=frames(), on=st.sampled_from([["k"], ["s"], ["k", "s"]]))
    def check(data, on):
        left, right = ({**side, "k": pd.array(side["k"], dtype="Int64"),
                        "s": pd.array(side["s"], dtype="string")} for side in data)
        left, right = pd.DataFrame(left), pd.DataFrame(right)
        # pandas matches missing keys with each other: nulls_equal=True is its rule
        ours = gh.merge(left, right, on=on, how=how, nulls_equal=True)
        theirs = pd.merge(left, right, on=on, how={"full": "outer"}.get(how, how))
        assert list(ours.columns) == list(theirs.columns)
        assert records(ours) == records(theirs)

    check()


@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "semi", "anti"])
@few_then_many(4, 15)
def test_polars_merge_matches_polars(how, examples):
    """Columns, names and rows as polars' own join makes them by default (which keys it
    keeps differs by how)."""
    @settings(max_examples=examples, deadline=None)
    @given(data=frames(), on=st.sampled_from([["k"], ["s"], ["k", "s"]]))
    def check(data, on):
        schema = {"k": pl.Int64, "s": pl.String}
        left, right = pl.DataFrame(data[0], schema_overrides=schema), pl.DataFrame(
            data[1], schema_overrides=schema)
        ours = gh.merge(left, right, on=on, how=how)
        theirs = left.join(right, on=on, how=how)
        assert ours.columns == theirs.columns
        assert records(ours) == records(theirs)

    check()


@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
def test_polars_left_on_right_on_keeps_the_keys_polars_keeps(how):
    left = pl.DataFrame({"a": [1, 2, 3], "k": [1, 2, 3], "v": [10, 20, 30]})
    right = pl.DataFrame({"b": [5, 6], "rk": [2, 4], "v": [7, 8]})
    ours = gh.merge(left, right, left_on="k", right_on="rk", how=how)
    theirs = left.join(right, left_on="k", right_on="rk", how=how)
    assert ours.columns == theirs.columns
    assert records(ours) == records(theirs)


def test_pandas_names_for_outer_validate_and_suffixes():
    left = pd.DataFrame({"k": [1, 2], "v": [1.0, 2.0]})
    right = pd.DataFrame({"k": [2, 3], "v": [5.0, 6.0]})
    ours = gh.merge(left, right, on="k", how="outer", validate="one_to_one",
                    suffixes=(None, "_r"))
    theirs = pd.merge(left, right, on="k", how="outer", validate="one_to_one",
                      suffixes=(None, "_r"))
    assert list(ours.columns) == list(theirs.columns) == ["k", "v", "v_r"]
    assert records(ours) == records(theirs)
    with pytest.raises(ValueError, match="validate='m:1' failed"):
        gh.merge(left, pd.DataFrame({"k": [2, 2]}), on="k", validate="many_to_one")
    with pytest.raises(ValueError, match="suffixes"):
        gh.merge(left, right, on="k", suffixes=(None, None))  # v and v: as pandas, refused
    assert list(gh.merge(left, right.rename(columns={"v": "w"}), on="k",
                         suffixes=(None, None)).columns) == ["k", "v", "w"]


def test_pyarrow_dictionary_and_string_keys_share_one_encoding():
    left = pa.table({"id": pa.array(["x", "y", "z"]).dictionary_encode(), "a": [1, 2, 3]})
    right = pa.table({"id": ["z", "x", "q"], "b": [[1], [2, 3], []]})
    out = gh.merge(left, right, on="id", how="full")
    rows = sorted(zip(out.column("id").to_pylist(), out.column("a").to_pylist(),
                      out.column("b").to_pylist()), key=str)
    assert rows == sorted([("x", 1, [2, 3]), ("y", 2, None), ("z", 3, [1]),
                           ("q", None, [])], key=str)


def test_dict_of_tensors_marks_the_rows_a_side_lacks():
    left = {"k": torch.tensor([1, 2]), "v": torch.tensor([[1., 2.], [3., 4.]])}
    right = {"k": torch.tensor([2, 9], dtype=torch.int32), "v": torch.tensor([5, 6])}
    out = gh.merge(left, right, on="k", how="full")
    assert set(out) == {"k", "v_x", "v_y", "_left_found", "_right_found"}
    rows = sorted(zip(out["k"].tolist(), out["v_x"].tolist(), out["v_y"].tolist(),
                      out["_left_found"].tolist(), out["_right_found"].tolist()))
    assert rows == [(1, [1.0, 2.0], 0, True, False), (2, [3.0, 4.0], 5, True, True),
                    (9, [0.0, 0.0], 6, False, True)]
    cross = gh.merge(left, right, how="cross", suffixes=("_l", "_r"))
    assert set(cross) == {"k_l", "v_l", "k_r", "v_r"} and cross["k_l"].shape[0] == 4


@pytest.mark.parametrize(("how", "budget"),
                         covering(["inner", "left", "right", "full", "semi", "anti"], [None, 64]))
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_dict_columns_of_every_dtype_gather_as_the_join_maps_say(how, budget, device):
    """Each output column of a dict merge is its side's column at the join's gather map, zero
    where the map has -1: every how (each side's map prepared once, masked only where the how
    lets that side lack rows), with and without a tiny memory budget, and dtypes torch gathers
    only as signed integers (unsigned, float8), 1-D and 2-D; the inputs are left unchanged."""
    generator = torch.Generator().manual_seed(7)
    left_keys = torch.randint(0, 30, (40,), generator=generator)
    right_keys = torch.randint(10, 40, (25,), generator=generator)
    def columns(rows):
        values = torch.randint(1, 100, (rows, 2), generator=generator)
        return {"u32": values.to(torch.uint32), "f8": values[:, 0].float().to(torch.float8_e4m3fn),
                "b": values[:, 1] % 2 == 0}
    left = {"k": left_keys, **{f"{n}_l": c for n, c in columns(40).items()}}
    right = {"k": right_keys, **{f"{n}_r": c for n, c in columns(25).items()}}
    before = [{n: c.clone() for n, c in side.items()} for side in (left, right)]
    moved = [{n: c.to(device) for n, c in side.items()} for side in (left, right)]
    out = gh.merge(*moved, on="k", how=how, memory_budget=budget)
    assert all(c.device.type == device for c in out.values())
    out = {n: c.cpu() for n, c in out.items()}
    result = gh.join(left_keys, right_keys, how=how, memory_budget=budget)
    rows_l, rows_r = result if isinstance(result, tuple) else (result, None)
    def expected(column, rows):
        wide = column.to(torch.float64) if column.dtype != torch.bool else column.double()
        taken = wide[rows.clamp(min=0)]
        taken[rows < 0] = 0
        return taken
    def as_set(pairs):
        return sorted(map(repr, pairs))
    got = [[out[n].to(torch.float64)[i].tolist() for n in out if n.endswith("_l")]
           for i in range(rows_l.shape[0])]
    want = [[expected(left[n], rows_l)[i].tolist() for n in out if n.endswith("_l")]
            for i in range(rows_l.shape[0])]
    if rows_r is not None:
        got = [g + [out[n].to(torch.float64)[i].tolist() for n in out if n.endswith("_r")]
               for i, g in enumerate(got)]
        want = [w + [expected(right[n], rows_r)[i].tolist() for n in out if n.endswith("_r")]
                for i, w in enumerate(want)]
    assert as_set(got) == as_set(want)
    for side, kept in zip(moved, before):
        assert all(torch.equal(c.cpu(), kept[n]) for n, c in side.items())


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "semi", "anti"])
def test_frames_merged_on_the_gpu_match_the_cpu_merge(how):
    """pandas frames (nullable int and string keys, float, int and string payloads) merged on
    the GPU (device="cuda") and on the CPU engine give the same rows, also under a small
    budget."""
    generator = torch.Generator().manual_seed(3)
    def side(rows, payload):
        keys = torch.randint(0, rows // 3, (rows,), generator=generator).tolist()
        return pd.DataFrame({
            "k": pd.array([None if k % 17 == 0 else k for k in keys], dtype="Int64"),
            "s": pd.array([f"s{t}" for t in torch.randint(0, 3, (rows,), generator=generator)
                           .tolist()], dtype="string"),  # drawn apart from k: a second key
            payload: torch.rand(rows, generator=generator).tolist(),
            f"{payload}_i": torch.arange(rows).tolist(),
        })
    left, right = side(12_000, "x"), side(4_000, "y")
    for on in (["k"], ["k", "s"]):
        expected = records(gh.merge(left, right, on=on, how=how, device="cpu"))
        for budget in (None, 150_000):
            got = gh.merge(left, right, on=on, how=how, device="cuda", memory_budget=budget)
            assert records(got) == expected, (on, budget)


def test_validate():
    left = pd.DataFrame({"k": [1, 2, 2]})
    right = pd.DataFrame({"k": [1, 2]})
    assert len(gh.merge(left, right, on="k", validate="m:1")) == 3
    with pytest.raises(ValueError, match=r"validate='1:1' failed: the left side.*\['k'\]"):
        gh.merge(left, right, on="k", validate="1:1")
    with pytest.raises(ValueError, match="validate must be one of"):
        gh.merge(left, right, on="k", validate="one")


@pytest.mark.parametrize("call, error, words", [
    (lambda a, b: gh.merge(a, b, on="nope"), KeyError, ["'nope'", "left"]),
    (lambda a, b: gh.merge(a, b, left_on="k", right_on="zz"), KeyError, ["'zz'", "right"]),
    (lambda a, b: gh.merge(a, b, on="k", how="left_outer"), ValueError, ["how", "'left_outer'"]),
    (lambda a, b: gh.merge(a, b, on="k", left_on="k"), ValueError, ["either on"]),
    (lambda a, b: gh.merge(a, b, left_on="k", right_on="s"), TypeError, ["'k'", "'s'"]),
    (lambda a, b: gh.merge(a, b.to_dict(), on="k"), TypeError, ["pandas", "dict"]),
    (lambda a, b: gh.merge(a, b, on="k", suffixes=("", "")), ValueError, ["repeated", "'s'"]),
])
def test_bad_input_names_the_argument(call, error, words):
    left = pd.DataFrame({"k": [1, 2], "s": ["a", "b"]})
    right = pd.DataFrame({"k": [2, 3], "s": ["b", "c"]})
    with pytest.raises(error) as info:
        call(left, right)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
def test_unsigned_payload_columns_of_frames(dtype):
    """Arrow columns of unsigned ints gathered by torch (which gathers them as signed bits),
    values at the top of their range kept, rows a side lacks null."""
    import numpy as np

    top = np.iinfo(dtype).max
    left = pd.DataFrame({"k": [1, 2, 3], "a": np.array([7, 8, top], dtype=dtype)})
    right = pd.DataFrame({"k": [3, 1], "b": np.array([top - 1, 6], dtype=dtype)})
    ours = gh.merge(left, right, on="k", how="left")
    theirs = pd.merge(left, right, on="k", how="left")
    assert records(ours) == records(theirs)
    assert str(gh.merge(left, right, on="k").dtypes["a"]) == dtype
