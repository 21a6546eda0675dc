"""gh.groupby and gh.factorize against pandas and DuckDB on the same inputs: random tables
with nulls, every aggregation, integer, float, string and multi-column keys, one group, every
row its own group, skewed keys; the array forms; bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuhash as gh

PLAIN = ["count", "size", "sum", "mean", "min", "max", "var", "std", "median", "first", "last",
         "nunique"]


def _table(seed: int, rows: int = 400, groups: int = 12, nulls: float = 0.1) -> pa.Table:
    rng = np.random.default_rng(seed)

    def masked(values):
        return pa.array(values, mask=rng.random(rows) < nulls)

    return pa.table({
        "k1": masked(rng.integers(-5, groups - 5, rows)),
        "k2": masked(np.array([f"s{i}" for i in rng.integers(0, 4, rows)], dtype=object)),
        "kf": pa.array(rng.choice([0.5, -1.25, 3.0], rows)),
        "v": masked(rng.normal(size=rows)),
        "w": masked(rng.integers(-100, 100, rows)),
    })


def _pandas(table: pa.Table, by: list[str], specs: dict[str, tuple[str, str]]) -> pd.DataFrame:
    frame = table.to_pandas()
    grouped = frame.groupby(by, dropna=False, sort=True)
    return grouped.agg(**specs).reset_index()


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    got = got.reset_index(drop=True)
    for name in want.columns:
        a = got[name].to_numpy(dtype=object)
        b = want[name].to_numpy(dtype=object)
        assert len(a) == len(b), name
        for x, y in zip(a, b):
            if pd.isna(y):
                assert pd.isna(x), (name, x, y)
            elif isinstance(y, (float, np.floating)):
                assert float(x) == pytest.approx(float(y), rel=1e-9, abs=1e-9), (name, x, y)
            else:
                assert x == y, (name, x, y)


@pytest.mark.parametrize("by", [["k1"], ["k2"], ["kf"], ["k1", "k2"], ["k2", "k1", "kf"]])
@pytest.mark.parametrize("column", ["v", "w"])
def test_every_aggregation_matches_pandas(by, column):
    table = _table(len(by) * 7 + len(column))
    got = gh.groupby(table, by, {column: PLAIN + [("quantile", 0.3)]}, sort=True,
                     device="cpu").to_pandas()
    specs = {f"{column}_{a}": (column, a) for a in PLAIN}
    want = _pandas(table, by, specs)
    want[f"{column}_quantile_0.3"] = _pandas(
        table, by, {"q": (column, lambda s: s.quantile(0.3))})["q"]
    _same(got, want)


def test_any_all_and_corr_match_duckdb():
    duckdb = pytest.importorskip("duckdb")
    table = _table(3)
    data = table.append_column("b", pa.array(np.random.default_rng(3).random(400) < 0.3))
    got = gh.groupby(data, ["k2"], {"b": ["any", "all"], "v": ("corr", "w")}, sort=True,
                     device="cpu").to_pandas()
    want = duckdb.sql("SELECT k2, bool_or(b) AS b_any, bool_and(b) AS b_all, corr(v, w) AS v "
                      "FROM data GROUP BY k2 ORDER BY k2 NULLS LAST").df()
    _same(got, want)


def test_sums_widen_and_strings_take_min_max_first_last():
    table = pa.table({"k": pa.array([1, 1, 2], pa.int8()),
                      "v": pa.array([100, 100, 7], pa.int8()),
                      "s": ["pear", "apple", None]})
    got = gh.groupby(table, "k", {"v": "sum", "s": ["min", "max", "first", "last"]},
                     sort=True, device="cpu")
    assert got.column("v").type == pa.int64() and got.column("v").to_pylist() == [200, 7]
    assert got.column("s_min").to_pylist() == ["apple", None]
    assert got.column("s_max").to_pylist() == ["pear", None]
    assert got.column("s_first").to_pylist() == ["pear", None]
    assert got.column("s_last").to_pylist() == ["apple", None]


@pytest.mark.parametrize("rows", [1, 50, 3000])
def test_one_group_every_row_its_own_group_and_skew(rows):
    rng = np.random.default_rng(rows)
    values = rng.normal(size=rows)
    for keys in (np.zeros(rows, dtype=np.int64), np.arange(rows) * 10**12,
                 np.where(rng.random(rows) < 0.9, 7, rng.integers(0, 10**9, rows))):
        frame = pd.DataFrame({"k": keys, "v": values})
        got = gh.groupby(frame, "k", {"v": ["sum", "max"]}, sort=True, device="cpu")
        want = frame.groupby("k", sort=True).agg(v_sum=("v", "sum"), v_max=("v", "max"))
        _same(got, want.reset_index())


def test_top_k_gives_the_largest_rows_of_each_group():
    frame = pd.DataFrame({"k": [1, 2, 1, 1, 2, 3], "v": [5.0, 1.0, 9.0, 7.0, None, 4.0]})
    got = gh.groupby(frame, "k", {"v": ("top_k", 2)}, sort=True, device="cpu")
    assert got["k"].tolist() == [1, 1, 2, 3] and got["v"].tolist() == [9.0, 7.0, 1.0, 4.0]
    got = gh.groupby(frame, "k", {"v": ("bottom_k", 1)}, sort=True, device="cpu")
    assert got["v"].tolist() == [5.0, 1.0, 4.0]


def test_dropna_drops_null_keys_and_unsorted_groups_hold_the_same_rows():
    table = _table(11)
    kept = gh.groupby(table, "k1", {"w": "sum"}, dropna=True, device="cpu").to_pandas()
    assert not kept["k1"].isna().any()
    anyorder = gh.groupby(table, ["k1", "k2"], {"w": "sum"}, device="cpu").to_pandas()
    ordered = gh.groupby(table, ["k1", "k2"], {"w": "sum"}, sort=True, device="cpu").to_pandas()
    key = ["k1", "k2"]
    _same(anyorder.sort_values(key, na_position="last").reset_index(drop=True), ordered)


def test_polars_and_dicts_come_back_as_their_kind():
    pl = pytest.importorskip("polars")
    frame = pl.DataFrame({"k": ["x", "y", "x"], "v": [1, 2, 3]})
    got = gh.groupby(frame, "k", {"v": "sum"}, sort=True, device="cpu")
    assert isinstance(got, pl.DataFrame) and got.to_dict(as_series=False) == {
        "k": ["x", "y"], "v": [4, 2]}
    got = gh.groupby({"k": torch.tensor([2, 1, 2]), "v": torch.tensor([1.0, 2.0, 3.0])}, "k",
                     {"v": "mean"}, sort=True)
    assert got["k"].tolist() == [1, 2] and got["v"].tolist() == [2.0, 2.0]
    uniques, results = gh.groupby(np.array([3, 3, 1]), np.array([1.0, 2.0, 5.0]),
                                  ["sum", "count"], sort=True)
    assert uniques.tolist() == [1, 3] and results["value_sum"].tolist() == [5.0, 3.0]
    assert isinstance(results["value_count"], np.ndarray)


def test_a_polars_frame_gives_only_the_columns_the_groupby_reads():
    pl = pytest.importorskip("polars")
    # an Object column, which no group-by reads here, beside the columns it does read
    frame = pl.DataFrame({"k": ["x", "y", "x"], "v": [1, 2, 3],
                          "other": pl.Series([object(), object(), object()], dtype=pl.Object)})
    got = gh.groupby(frame, "k", {"v": "sum"}, sort=True, device="cpu")
    assert got.to_dict(as_series=False) == {"k": ["x", "y"], "v": [4, 2]}
    with pytest.raises(KeyError, match="'missing'"):  # the error still lists every column
        gh.groupby(frame.drop("other"), "k", {"missing": "sum"}, device="cpu")


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda t: gh.groupby(t, "k1", {"v": "average"}), ValueError, "unknown aggregation"),
    (lambda t: gh.groupby(t, "k1", {"v": "quantile"}), ValueError, "takes a parameter"),
    (lambda t: gh.groupby(t, "k1", {"v": ("quantile", 2)}), ValueError, r"q in \[0, 1\]"),
    (lambda t: gh.groupby(t, "k1", {"k2": "mean"}), TypeError, "mean of a column of string"),
    (lambda t: gh.groupby(t, "nope", {"v": "sum"}), KeyError, "by names column 'nope'"),
    (lambda t: gh.groupby(t, "k1", {"nope": "sum"}), KeyError, "aggs names column 'nope'"),
    (lambda t: gh.groupby(t, "k1", {"v": ("corr", "zz")}), KeyError, "'zz'"),
    (lambda t: gh.groupby(t, "k1", {"v": [("top_k", 1), "sum"]}), ValueError, "alone"),
    (lambda t: gh.groupby(t, "k1", {}), TypeError, "non-empty dict"),
    (lambda t: gh.groupby({"k": torch.zeros(3), "v": torch.zeros(4)}, "k", {"v": "sum"}),
     ValueError, "differ in length"),
    (lambda t: gh.factorize((torch.zeros(3), torch.zeros(2))), ValueError, "differ in length"),
])
def test_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call(_table(1))


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.one_of(st.integers(-3, 3), st.sampled_from([2**40, -2**62])),
                     min_size=0, max_size=60),
       dtype=st.sampled_from([np.int64, np.int32, np.int16, np.uint8, np.float64]),
       sort=st.booleans(), nan=st.booleans())
def test_factorize_matches_pandas(keys, dtype, sort, nan):
    array = np.array(keys, dtype=np.int64)
    if dtype != np.float64:
        info = np.iinfo(dtype)
        array = np.clip(array, info.min, info.max)
    array = array.astype(dtype)
    if nan and dtype == np.float64 and len(array):
        array[::3] = np.nan
    for dropna in (True, False):
        ids, uniques = gh.factorize(array, sort=sort, dropna=dropna)
        want_ids, want_uniques = pd.factorize(array, sort=sort, use_na_sentinel=dropna)
        assert ids.tolist() == want_ids.tolist()
        np.testing.assert_array_equal(uniques, np.asarray(want_uniques, dtype=array.dtype))


def test_factorize_of_several_columns_and_masks():
    ids, (a, b) = gh.factorize((torch.tensor([1, 1, 2, 1]), torch.tensor([5, 6, 5, 5])))
    assert ids.tolist() == [0, 1, 2, 0] and a.tolist() == [1, 1, 2] and b.tolist() == [5, 6, 5]
    ids, uniques = gh.factorize(torch.tensor([4, 9, 4]), valid=torch.tensor([True, False, True]),
                                dropna=True)
    assert ids.tolist() == [0, -1, 0] and uniques.tolist() == [4]


_SMALL_INTS = (torch.int8, torch.int16, torch.int32, torch.int64)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), columns=st.integers(1, 3), rows=st.integers(0, 30),
       sort=st.booleans(), dropna=st.booleans())
def test_factorize_of_masked_integer_columns_matches_a_model(data, columns, rows, sort, dropna):
    """Integer key columns with masks (small values, coded by offset with a digit for the
    null; or up to the dtype's largest value, where a null cannot read as one past it)
    numbered as a model numbers the rows' tuples, None for a null."""
    arrays, masks = [], []
    for _ in range(columns):
        dtype = data.draw(st.sampled_from(_SMALL_INTS))
        top = torch.iinfo(dtype).max
        pool = [top - 2, top - 1, top] if data.draw(st.booleans()) else [-2, 0, 1, 5]
        values = data.draw(st.lists(st.sampled_from(pool), min_size=rows, max_size=rows))
        arrays.append(torch.tensor(values, dtype=dtype))
        masks.append(torch.tensor(data.draw(st.lists(st.booleans(), min_size=rows,
                                                     max_size=rows)), dtype=torch.bool))
    ids, _ = gh.factorize(tuple(arrays), valid=tuple(masks), sort=sort, dropna=dropna)
    keys = [tuple(int(a[i]) if m[i] else None for a, m in zip(arrays, masks))
            for i in range(rows)]
    kept = [None if dropna and None in k else k for k in keys]
    numbered = list(dict.fromkeys(k for k in kept if k is not None))
    if sort:  # nulls last in each column
        numbered.sort(key=lambda k: tuple((v is None, v or 0) for v in k))
    assert ids.tolist() == [-1 if k is None else numbered.index(k) for k in kept]


def test_the_groupby_command_writes_the_answer_and_names_bad_options(tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    from gpuhash.cli import main

    source, target = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(pa.table({"k": [2, 1, 2], "v": [1.0, 5.0, 3.0]}), source)
    argv = ["groupby", str(source), "--by", "k", "--agg", "v:sum", "--agg", "v:quantile=0.5",
            "-o", str(target), "--sort", "--cpu"]
    assert main(argv) == 0
    assert pq.read_table(target).to_pydict() == {"k": [1, 2], "v_sum": [5.0, 4.0],
                                                 "v_quantile_0.5": [5.0, 2.0]}
    chunked = ["groupby", str(source), "--by", "k", "--agg", "v:sum", "--agg", "v:max",
               "--chunk-rows", "2", "-o", str(target), "--sort", "--cpu"]
    assert main(chunked) == 0
    assert pq.read_table(target).to_pydict() == {"k": [1, 2], "v_sum": [5.0, 4.0],
                                                 "v_max": [5.0, 3.0]}
    for bad, message in ((["--agg", "v"], "write COLUMN:AGGREGATION"),
                         (["--agg", "v:top_k"], "top_k takes a parameter"),
                         (["--agg", "v:top_k=x"], "'x' is not a number"),
                         (["--by", "zz", "--agg", "v:sum"], "by names column 'zz'")):
        by = [] if "--by" in bad else ["--by", "k"]
        assert main(["groupby", str(source), *by, *bad, "-o", str(target), "--cpu"]) == 2
        assert message in capsys.readouterr().err


def test_strings_encoded_in_pieces_group_as_one_column(monkeypatch):
    from gpuhash.groupby import columns

    monkeypatch.setattr(columns, "PIECE_ROWS", 7)  # many pieces, each with its own dictionary
    rng = np.random.default_rng(9)
    words = [None if rng.random() < 0.1 else f"w{rng.integers(0, 12)}" for _ in range(100)]
    table = pa.table({"k": pa.chunked_array([words[:33], words[33:]]),
                      "v": rng.integers(0, 9, 100)})
    for sort in (True, False):
        got = gh.groupby(table, "k", {"v": ["sum", "size"], "k": ["min", "max"]}, sort=sort,
                         device="cpu").to_pandas()
        got = got.sort_values("k", na_position="last").reset_index(drop=True)
        want = table.to_pandas().groupby("k", dropna=False, sort=True).agg(
            v_sum=("v", "sum"), v_size=("v", "size"), k_min=("k", "min"),
            k_max=("k", "max")).reset_index()
        _same(got, want)


@pytest.mark.parametrize("chunk_rows", [1, 37, 1000])
def test_chunks_merged_give_the_whole_tables_answer(chunk_rows):
    table = _table(21, rows=300)
    aggs = {"v": ["sum", "mean", "var", "std", "min", "max", "count", "size", "first", "last"],
            "w": "sum", "k2": ["min", "max"]}
    for by in (["k1"], ["k2", "kf"]):
        whole = gh.groupby(table, by, aggs, sort=True, device="cpu").to_pandas()
        chunked = gh.groupby(table, by, aggs, sort=True, device="cpu",
                             chunk_rows=chunk_rows).to_pandas()
        assert list(chunked.columns) == list(whole.columns)
        _same(chunked, whole)
    top = gh.groupby(table, "k1", {"v": ("top_k", 2)}, sort=True, device="cpu")
    assert gh.groupby(table, "k1", {"v": ("top_k", 2)}, sort=True, device="cpu",
                      chunk_rows=chunk_rows).equals(top)


def test_chunks_refuse_what_needs_every_row_of_a_group():
    with pytest.raises(ValueError, match="median need every row"):
        gh.groupby(_table(1), "k1", {"v": "median"}, chunk_rows=10, device="cpu")
    with pytest.raises(ValueError, match="chunk_rows must be a positive int"):
        gh.groupby(_table(1), "k1", {"v": "sum"}, chunk_rows=0, device="cpu")


def test_the_key_columns_limit_is_the_kernels():
    from pathlib import Path

    from gpuhash.groupby.cuda import engine

    source = (Path(engine.__file__).parents[1] / "kernels" / "groupby.cu").read_text()
    assert f"#define GH_GROUP_MAX_KEYS {engine.MAX_KEYS}\n" in source


@pytest.mark.parametrize("seed", range(4))
def test_the_cpu_engines_quantiles_match_torch_quantile_per_group(seed):
    """The CPU engine's in-place selection against torch.quantile of each group's values
    (linear interpolation, as pandas): ties, tiny groups, empty groups, the rows left out."""
    from gpuhash.groupby.cpu import engine

    generator = torch.Generator().manual_seed(seed)
    groups = [1, 6, 300, 2000][seed]
    rows = [5000, 40, 20_000, 3000][seed]
    slot = torch.randint(0, groups + 1, (rows,), generator=generator)  # groups: left out
    values = torch.randint(-5, 5, (rows,), generator=generator).double()
    values[::2] += torch.rand(rows, generator=generator, dtype=torch.float64)[::2]
    for q in (0.0, 0.3, 0.5, 0.9, 1.0):
        got, count = engine.group_quantile(slot, groups, values, q)
        for g in range(groups):
            mine = values[slot == g]
            assert int(count[g]) == mine.shape[0]
            want = torch.quantile(mine, q).item() if mine.shape[0] else 0.0
            assert got[g].item() == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_the_cpu_quantile_selection_on_a_median_of_three_killer():
    """An order that makes every median-of-three pivot the worst (Musser's sequence): the
    in-place selection sorts the rest past its depth limit (a million such values took 84 s
    without it) and still finds the median."""
    from gpuhash.groupby.cpu import engine

    half = 1 << 15
    killer = np.empty(2 * half, dtype=np.float64)
    for i in range(1, half + 1):  # Musser's median-of-3 killer for 2k values
        if i % 2:
            killer[i - 1], killer[i] = i, half + i
        killer[half + i - 1] = 2 * i
    values = torch.from_numpy(killer)
    slot = torch.zeros(values.shape[0], dtype=torch.int64)
    got, count = engine.group_quantile(slot, 1, values, 0.5)
    assert got.item() == torch.quantile(values, 0.5).item() and count.item() == values.shape[0]


def test_the_cpu_reductions_drop_codes_past_the_groups():
    """As the CUDA kernels: a code outside [0, groups) is a dropped row, never a write."""
    from gpuhash.groupby.cpu import engine

    codes = torch.tensor([0, 1, 5, -1, 1])
    total, counts, rows = engine.group_reduce(codes, 0, 2, torch.tensor([1, 2, 3, 4, 5]), None,
                                              "sum")
    assert total.tolist() == [1, 7] and rows.tolist() == [1, 2]
    aa, _, _ = engine.group_comoments(codes, 2, torch.ones(5), torch.ones(5), None,
                                      torch.zeros(2, dtype=torch.float64),
                                      torch.zeros(2, dtype=torch.float64))
    assert aa.tolist() == [1.0, 2.0]
