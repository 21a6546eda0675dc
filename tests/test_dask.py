"""gh.dask.merge and gh.dask.groupby on a local Dask cluster of CPU workers, against DuckDB's
join and group-by of the same rows (and gh.groupby / pandas where DuckDB has no twin): every
how, both ways of bringing rows together (a broadcast side, Dask's shuffle), int, string and
two-column keys with nulls, repeated keys and one key in 40% of the rows, partitions left
empty, and results that stay lazy until computed."""

from __future__ import annotations

import math
import random

import pytest

import gpuhash as gh
from conftest import covering

pd = pytest.importorskip("pandas")
np = pytest.importorskip("numpy")
duckdb = pytest.importorskip("duckdb")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

from gpuhash.dask.merging import _broadcast_side  # noqa: E402 (after the importorskips)

HOWS = ["inner", "left", "right", "outer", "semi", "anti"]
SQL = {"inner": "INNER JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN",
       "outer": "FULL OUTER JOIN", "semi": "SEMI JOIN", "anti": "ANTI JOIN"}
KEYS = {"int": ["k1"], "str": ["k2"], "both": ["k1", "k2"]}
PATHS = ["broadcast", "shuffle"]


@pytest.fixture(scope="module")
def client():
    # threads in this process: workers of their own would each import torch and numba anew
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def _side(seed: int, rows: int, payload: str) -> pd.DataFrame:
    """Keys with nulls (10%), repeats and one key in 40% of the rows: an int column k1 (a
    nullable Int64) and a string column k2."""
    rng = random.Random(seed)
    k1 = [None if rng.random() < 0.1 else 3 if rng.random() < 0.4 else rng.randrange(40)
          for _ in range(rows)]
    k2 = [None if rng.random() < 0.1 else f"s{rng.randrange(6)}" for _ in range(rows)]
    return pd.DataFrame({"k1": pd.array(k1, dtype="Int64"), "k2": k2,
                         payload: np.arange(rows, dtype=np.int64) + seed * 10_000})


def _rows(frame: pd.DataFrame) -> list[tuple]:
    """The rows as tuples of Python values (None for every kind of null), sorted."""
    def value(v):
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            return None
        return float(v) if isinstance(v, (int, float, np.number)) else v

    rows = [tuple(value(v) for v in row) for row in frame.astype(object).itertuples(index=False)]
    return sorted(rows, key=lambda row: tuple((v is None, v if v is not None else 0)
                                              for v in row))


def _duckdb_join(left_t: pd.DataFrame, right_t: pd.DataFrame, keys: list[str], how: str):
    on = " AND ".join(f"l.{k} = r.{k}" for k in keys)
    if how in ("semi", "anti"):
        return duckdb.sql(f"SELECT l.* FROM left_t l {SQL[how]} right_t r ON {on}").df()
    others = [c for c in ("k1", "k2") if c not in keys]
    columns = [f"COALESCE(l.{k}, r.{k}) AS {k}" if k in keys else f"l.{k} AS {k}_x"
               for k in ("k1", "k2")]
    columns += ["l.a"] + [f"r.{k} AS {k}_y" for k in others] + ["r.b"]
    order = [k if k in keys else f"{k}_x" for k in ("k1", "k2")]
    query = f"SELECT {', '.join(columns)} FROM left_t l {SQL[how]} right_t r ON {on}"
    return duckdb.sql(query).df()[order + ["a"] + [f"{k}_y" for k in others] + ["b"]]


@pytest.mark.parametrize(("how", "path", "keys"), covering(HOWS, PATHS, list(KEYS)))
def test_merge_matches_duckdb(client, how, path, keys):
    left, right = _side(1, 900, "a"), _side(2, 300, "b")
    lazy_left = dd.from_pandas(left, npartitions=4)
    lazy_right = dd.from_pandas(right, npartitions=1 if path == "broadcast" else 3)
    broadcast = {"broadcast": None, "shuffle": False}[path]
    out = gh.dask.merge(lazy_left, lazy_right, on=KEYS[keys], how=how, broadcast=broadcast)
    assert isinstance(out, dd.DataFrame)
    if path == "broadcast" and how not in ("right", "outer"):  # the right side went whole
        assert out.npartitions == 4
    got = out.compute()
    # the rows as dask holds them (from_pandas makes strings Arrow-backed)
    left, right = lazy_left.compute(), lazy_right.compute()
    expected = _duckdb_join(left, right, KEYS[keys], how)
    assert list(got.columns) == list(expected.columns)
    assert _rows(got) == _rows(expected)
    assert list(got.columns) == list(out.columns)
    assert dict(got.dtypes) == dict(out.dtypes), "the partitions' dtypes are meta's"


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
def test_merge_int_and_float_keys_meet_after_the_shuffle(client, how):
    """Dask hashes numbers as float64, so an int key meets a float key of the same value."""
    left = pd.DataFrame({"k": np.arange(200) % 50, "a": np.arange(200)})
    right = pd.DataFrame({"key": np.arange(0, 60, 2, dtype=np.float64),
                          "b": np.arange(30, dtype=np.float64)})
    out = gh.dask.merge(dd.from_pandas(left, npartitions=3), dd.from_pandas(right, npartitions=2),
                        left_on="k", right_on="key", how=how, broadcast=False,
                        shuffle_method="tasks", suffixes=("_l", "_r"))
    expected = gh.merge(left, right, left_on="k", right_on="key", how=how)
    assert _rows(out.compute()) == _rows(expected)


def test_merge_broadcasts_the_side_a_join_may_drop_rows_of():
    assert _broadcast_side("inner", 10, 1, None) == "right"
    assert _broadcast_side("inner", 1, 10, None) == "left"
    assert _broadcast_side("left", 1, 10, None) is None  # the left's unmatched rows stay
    assert _broadcast_side("right", 1, 10, None) == "left"
    assert _broadcast_side("outer", 1, 1, None) is None
    assert _broadcast_side("inner", 3, 256, None) == "left"  # Dask's rule: 3 < log2(256) / 2
    assert _broadcast_side("inner", 4, 256, None) is None
    assert _broadcast_side("semi", 40, 30, True) == "right"
    assert _broadcast_side("inner", 1, 10, False) is None
    with pytest.raises(ValueError, match="how='outer' cannot broadcast"):
        _broadcast_side("outer", 4, 1, True)


def _group_frame(seed: int, rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 30, rows).astype(np.float64)
    k[rng.random(rows) < 0.3] = 7  # one key in 30% of the rows
    k[rng.random(rows) < 0.05] = np.nan
    v = rng.normal(100.0, 3.0, rows)  # a mean far from 0: a variance's cancellation shows
    v[rng.random(rows) < 0.1] = np.nan
    return pd.DataFrame({"k": k, "s": rng.choice(["a", "b", "c"], rows), "v": v,
                         "i": rng.integers(-5, 50, rows)})


DUCKDB_AGGS = {"sum": "COALESCE(SUM(v), 0)", "count": "COUNT(v)", "mean": "AVG(v)",
               "min": "MIN(v)", "max": "MAX(v)", "median": "MEDIAN(v)", "var": "VAR_SAMP(v)",
               "std": "STDDEV_SAMP(v)", "nunique": "COUNT(DISTINCT v)"}


@pytest.mark.parametrize(("aggs", "method"), [
    (["sum", "count", "mean", "min", "max", "var", "std"], "auto"),  # the tree
    (["sum", "count", "mean", "min", "max", "var", "std"], "shuffle"),
    (["median", "nunique", "sum", "var"], "auto"),  # the shuffle
])
def test_groupby_matches_duckdb(client, aggs, method):
    frame = _group_frame(3, 3000)
    lazy = dd.from_pandas(frame, npartitions=9)
    out = gh.dask.groupby(lazy, ["k", "s"], {"v": aggs}, method=method, split_every=2)
    assert isinstance(out, dd.DataFrame)
    got = out.compute()
    frame = lazy.compute()
    query = ", ".join(f"{DUCKDB_AGGS[a]} AS v_{a}" for a in aggs)
    expected = duckdb.sql(f"SELECT k, s, {query} FROM frame GROUP BY k, s").df()
    assert list(got.columns) == ["k", "s", *(f"v_{a}" for a in aggs)]
    assert len(got) == len(expected)
    merged = got.merge(expected, on=["k", "s"], how="outer", suffixes=("", "_duckdb"))
    assert len(merged) == len(got)  # the same groups, null keys included
    for agg in aggs:
        np.testing.assert_allclose(merged[f"v_{agg}"].to_numpy(dtype=float),
                                   merged[f"v_{agg}_duckdb"].to_numpy(dtype=float),
                                   rtol=1e-9, atol=1e-9, err_msg=agg)


def test_groupby_is_gh_groupby_of_the_whole_frame(client):
    """Columns, dtypes and values, sorted, as gh.groupby gives them for the concatenated
    frame; first and last by the rows' order across partitions."""
    lazy = dd.from_pandas(_group_frame(4, 2000), npartitions=6)
    aggs = {"v": ["first", "last", "size", "mean"], "i": ["sum", "min", "max", "std"],
            "s": ["min", "count"]}
    out = gh.dask.groupby(lazy, "k", aggs, sort=True, split_every=3)
    expected = gh.groupby(lazy.compute(), "k", aggs, sort=True)
    pd.testing.assert_frame_equal(out.compute(), expected, check_exact=False, rtol=1e-9)
    shuffled = gh.dask.groupby(lazy, "k", {"v": ("quantile", 0.25)}, sort=True)
    expected = gh.groupby(lazy.compute(), "k", {"v": ("quantile", 0.25)}, sort=True)
    pd.testing.assert_frame_equal(shuffled.compute(), expected)
    dropped = gh.dask.groupby(lazy, "k", {"v": "sum"}, dropna=True).compute()
    assert dropped["k"].notna().all() and len(dropped) == lazy["k"].dropna().nunique().compute()


def test_empty_partitions(client):
    frame = _group_frame(5, 400).reset_index(drop=True)
    lazy = dd.from_pandas(frame, npartitions=4)
    lazy = lazy.map_partitions(lambda f: f[f.index >= 200])  # two without rows
    assert lazy.map_partitions(len).compute().tolist() == [0, 0, 100, 100]
    whole = lazy.compute()
    for method in ("tree", "shuffle"):
        out = gh.dask.groupby(lazy, "k", {"v": ["sum", "mean"]}, sort=True, method=method)
        pd.testing.assert_frame_equal(out.compute(),
                                      gh.groupby(whole, "k", {"v": ["sum", "mean"]}, sort=True))
    right = dd.from_pandas(pd.DataFrame({"k": [7.0, 1.0, 2.0], "b": [1, 2, 3]}), npartitions=1)
    for broadcast in (None, False):
        out = gh.dask.merge(lazy, right, on="k", how="left", broadcast=broadcast)
        assert _rows(out.compute()) == _rows(gh.merge(whole, right.compute(), on="k",
                                                      how="left"))
    nothing = gh.dask.groupby(lazy[lazy.v > 1e9], "k", {"v": "sum"}).compute()
    assert len(nothing) == 0 and list(nothing.columns) == ["k", "v"]


def test_results_stay_lazy(client):
    """Nothing is read until compute(): building the graphs calls no partition's loader."""
    loads = []

    def load(i: int) -> pd.DataFrame:
        loads.append(i)
        return pd.DataFrame({"k": np.arange(10) % 3 + i, "v": np.arange(10.0)})

    meta = pd.DataFrame({"k": np.zeros(0, np.int64), "v": np.zeros(0)})
    lazy = dd.from_map(load, range(3), meta=meta)
    grouped = gh.dask.groupby(lazy, "k", {"v": ["sum", "median"]})
    tree = gh.dask.groupby(lazy, "k", {"v": "sum"})
    joined = gh.dask.merge(lazy, lazy, on="k", broadcast=False)
    assert loads == []
    assert all(isinstance(x, dd.DataFrame) for x in (grouped, tree, joined))
    assert len(tree.compute()) == 5 and loads


def test_errors_name_the_argument_and_the_fix():
    frame = pd.DataFrame({"k": [1, 2], "v": [1.0, 2.0]})
    lazy = dd.from_pandas(frame, npartitions=1)
    with pytest.raises(TypeError, match=r"left must be a dask DataFrame.*dd\.from_pandas"):
        gh.dask.merge(frame, lazy, on="k")
    with pytest.raises(TypeError, match=r"ddf must be a dask DataFrame"):
        gh.dask.groupby(frame, "k", {"v": "sum"})
    with pytest.raises(KeyError, match=r"by names column 'x'.*has \['k', 'v'\]"):
        gh.dask.groupby(lazy, "x", {"v": "sum"})
    with pytest.raises(KeyError, match=r"aggs names column 'w'"):
        gh.dask.groupby(lazy, "k", {"w": "sum"})
    with pytest.raises(KeyError, match=r"on names column 'x', which the right"):
        gh.dask.merge(lazy, lazy[["v"]].rename(columns={"v": "y"}), left_on="k",
                      right_on="x")
    with pytest.raises(ValueError, match=r"how must be one of"):
        gh.dask.merge(lazy, lazy, on="k", how="sideways")
    with pytest.raises(ValueError, match=r"method='tree' cannot compute median.*'shuffle'"):
        gh.dask.groupby(lazy, "k", {"v": "median"}, method="tree")
    with pytest.raises(ValueError, match=r"first follow the rows' order"):
        gh.dask.groupby(lazy, "k", {"v": ["first", "median"]})
    with pytest.raises(ValueError, match=r"split_every must be an int >= 2"):
        gh.dask.groupby(lazy, "k", {"v": "sum"}, split_every=1)


def test_import_gpuhash_leaves_dask_alone():
    import subprocess
    import sys

    code = "import sys, gpuhash as gh; assert 'dask' not in sys.modules; gh.dask.merge"
    subprocess.run([sys.executable, "-c", code], check=True)
