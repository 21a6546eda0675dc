"""gh.distributed.merge and gh.distributed.groupby on worlds of 2 and 4 CPU processes over
gloo, checked against DuckDB and against gh.merge / gh.groupby on the concatenation of every
rank's partition (in rank order).

Every rank draws every rank's partition from one seed, so each rank can build the whole table
itself; the ranks' answers are gathered and their union compared with the reference as a
multiset of rows. Each spawned world runs many checks (a world costs seconds to start), in
the children of tests/distributed_worlds.py's run_world.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch
from distributed_worlds import run_world

HOWS = ("inner", "left", "right", "outer")


# --- partitions every rank can draw -----------------------------------------------------------
def left_part(rank: int, world: int, seed: int = 0, *, empty_on: int | None = None):
    """Rank ``rank``'s left rows: int and string keys with nulls, repeats and one key of a
    third of the rows (a skewed key); rank ``empty_on``'s partition empty."""
    rng = np.random.default_rng(1000 * seed + rank)
    rows = 0 if rank == empty_on else int(rng.integers(40, 120))
    k1 = rng.integers(0, 25, rows)
    k1[rng.random(rows) < 0.33] = 7  # the skewed key
    k1_null = rng.random(rows) < 0.08
    k2 = np.array([f"s{v}" for v in rng.integers(0, 12, rows)], dtype=object)
    k2[rng.random(rows) < 0.08] = None
    return pa.table({
        "k1": pa.array(k1, pa.int64(), mask=k1_null),
        "k2": pa.array(k2, pa.string()),
        "a": pa.array(rng.normal(size=rows).round(3)),
        "s": pa.array([f"{rank}-{i}" for i in range(rows)], pa.string()),
    })


def right_part(rank: int, world: int, seed: int = 0, *, empty_on: int | None = None):
    rng = np.random.default_rng(50_000 + 1000 * seed + rank)
    rows = 0 if rank == empty_on else int(rng.integers(20, 60))
    k1 = rng.integers(0, 30, rows)
    k1[rng.random(rows) < 0.2] = 7
    k1_null = rng.random(rows) < 0.08
    k2 = np.array([f"s{v}" for v in rng.integers(0, 15, rows)], dtype=object)
    k2[rng.random(rows) < 0.1] = None
    return pa.table({
        "k1": pa.array(k1, pa.int64(), mask=k1_null),
        "kf": pa.array(k1.astype(np.float64), mask=k1_null),  # k1 as floats
        "k2": pa.array(k2, pa.large_string()),  # another string type than the left's
        "b": pa.array(rng.integers(0, 1000, rows)),
    })


def whole(make, world: int, **options) -> pa.Table:
    return pa.concat_tables([make(r, world, **options) for r in range(world)],
                            promote_options="permissive")


# --- comparing as multisets -------------------------------------------------------------------
def _value(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, float):
        return round(v, 6) + 0.0
    return v


def rows_of(table) -> Counter:
    """A table's rows (pyarrow, pandas or polars) as a multiset, nulls and NaN alike."""
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False) if hasattr(
            table, "iloc") else table.to_arrow()
    columns = [table.column(n).to_pylist() for n in table.column_names]
    return Counter(tuple(_value(v) for v in row) for row in zip(*columns))


def gathered(obj) -> list:
    import torch.distributed as dist

    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def types_of(table):
    """A table's column types: a pandas frame's dtypes, else its schema."""
    return table.dtypes.to_dict() if hasattr(table, "iloc") else table.schema


def check(part, reference, *, groups=None, types: bool = True) -> None:
    """Every rank's ``part`` gathered to rank 0, which compares them with ``reference()``
    (made there only: one rank builds the references): each part's column types, and their
    union as a multiset of rows (``groups``: the key names, then floats to a relative 1e-9,
    the partials' sums and variances adding in another order)."""
    parts = gathered(part)
    import torch.distributed as dist

    if dist.get_rank() != 0:
        return
    model = reference()
    for rank, got in enumerate(parts):
        assert not types or types_of(got) == types_of(model), (rank, types_of(got),
                                                               types_of(model))
    if groups is None:
        total = Counter()
        for got in parts:
            total.update(rows_of(got))
        assert total == rows_of(model)
    else:
        assert_same_groups(parts, model, groups)


def as_arrow(table) -> pa.Table:
    if isinstance(table, pa.Table):
        return table
    if hasattr(table, "iloc"):  # pandas
        return pa.Table.from_pandas(table, preserve_index=False)
    return table.to_arrow()


def assert_same_groups(parts, model, by) -> None:
    """Every rank's groups together are ``model``'s, each once."""
    keys = [by] if isinstance(by, str) else by
    got = pa.concat_tables([as_arrow(p) for p in parts])
    want = as_arrow(model)
    assert got.num_rows == want.num_rows, (got.num_rows, want.num_rows)
    order = [(k, "ascending") for k in keys]
    got = got.take(pc.sort_indices(got, order, null_placement="at_end"))
    want = want.take(pc.sort_indices(want, order, null_placement="at_end"))
    for name in want.column_names:
        a, b = got.column(name).to_pylist(), want.column(name).to_pylist()
        if pa.types.is_floating(want.schema.field(name).type):
            a, b = (np.array([np.nan if v is None else v for v in x], float) for x in (a, b))
            assert np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True), name
        else:
            assert a == b, name


def duckdb_join(left: pa.Table, right: pa.Table, left_keys, right_keys, how: str, columns):
    """The join by DuckDB, its columns as gh.merge names them for pyarrow (a key named alike
    on both sides once, coalesced)."""
    import duckdb

    con = duckdb.connect()
    con.register("l", left)
    con.register("r", right)
    on = " AND ".join(f'l."{a}" = r."{b}"' for a, b in zip(left_keys, right_keys))
    kind = {"outer": "FULL OUTER"}.get(how, how.upper())
    picks = []
    for name in columns:
        if name in left_keys and name in right_keys:
            picks.append(f'COALESCE(l."{name}", r."{name}") AS "{name}"')
        elif name.endswith("_x") or name.endswith("_y"):
            side = "l" if name.endswith("_x") else "r"
            picks.append(f'{side}."{name[:-2]}" AS "{name}"')
        else:
            side = "l" if name in left.column_names else "r"
            picks.append(f'{side}."{name}" AS "{name}"')
    sql = f"SELECT {', '.join(picks)} FROM l {kind} JOIN r ON {on}"
    return con.sql(sql).to_arrow_table()


# --- scenarios (run in the children) ----------------------------------------------------------
def merges(rank: int, world: int, folder: str) -> None:
    import gpuhash as gh

    empty = {"empty_on": world - 1}
    cases = [  # (left_on, right_on, left options, right options)
        (["k1"], ["k1"], {}, {}),
        (["k2"], ["k2"], {"seed": 1}, empty),
        (["k1", "k2"], ["k1", "k2"], empty, {"seed": 2}),
        (["k1"], ["kf"], {"seed": 3}, {}),  # int keys against float keys, by value
    ]
    for left_keys, right_keys, lo, ro in cases:
        left, right = left_part(rank, world, **lo), right_part(rank, world, **ro)
        keys = dict(on=left_keys) if left_keys == right_keys else dict(left_on=left_keys,
                                                                        right_on=right_keys)

        def model(how, lo=lo, ro=ro, keys=keys):
            return gh.merge(whole(left_part, world, **lo), whole(right_part, world, **ro),
                            how=how, device="cpu", **keys)

        for how in HOWS:
            for broadcast in ("auto", None):  # a small side broadcast where it may go; a shuffle
                part = gh.distributed.merge(left, right, how=how, device="cpu",
                                            broadcast=broadcast, **keys)
                check(part, lambda how=how: model(how))
            if left_keys == right_keys:
                check(part, lambda how=how, lo=lo, ro=ro, keys=left_keys: duckdb_join(
                    whole(left_part, world, **lo), whole(right_part, world, **ro), keys, keys,
                    how, model(how).column_names), types=False)
    left, right = left_part(rank, world, seed=4), right_part(rank, world, seed=4)

    def joined(**options):
        return gh.merge(whole(left_part, world, seed=4), whole(right_part, world, seed=4),
                        device="cpu", **options)

    # null keys meet (nulls_equal), semi / anti joins, a broadcast side, validate
    for how, options in (("inner", {"nulls_equal": True}), ("outer", {"nulls_equal": True}),
                         ("semi", {}), ("anti", {}), ("left_anti", {}),
                         ("inner", {"broadcast": "right"}), ("left", {"broadcast": "right"}),
                         ("right", {"broadcast": "left"})):
        part = gh.distributed.merge(left, right, on="k2", how=how, device="cpu", **options)
        options.pop("broadcast", None)
        check(part, lambda how=how, options=options: joined(on="k2", how=how, **options))

    def unique(rank: int, world: int):  # each key once over every rank
        return pa.table({"k1": pa.array(range(rank, 40, world), pa.int64())})

    part = gh.distributed.merge(left, unique(rank, world), on="k1", validate="m:1",
                                device="cpu")
    check(part, lambda: gh.merge(whole(left_part, world, seed=4), whole(unique, world),
                                 on="k1", validate="m:1", device="cpu"))
    # pandas: pandas' names and, on every rank, the whole join's dtypes
    for how in ("left", "outer"):
        part = gh.distributed.merge(left.to_pandas(), right.to_pandas(), on="k1", how=how,
                                    device="cpu")
        check(part, lambda how=how: gh.merge(whole(left_part, world, seed=4).to_pandas(),
                                             whole(right_part, world, seed=4).to_pandas(),
                                             on="k1", how=how, device="cpu"))
    # polars: polars' names (k2 of both sides for a full join)
    import polars as pl

    for how in ("inner", "full"):
        part = gh.distributed.merge(pl.from_arrow(left), pl.from_arrow(right), on="k2",
                                    how=how, device="cpu")
        check(part, lambda how=how: gh.merge(pl.from_arrow(whole(left_part, world, seed=4)),
                                             pl.from_arrow(whole(right_part, world, seed=4)),
                                             on="k2", how=how, device="cpu"))


def group_table(rank: int, world: int, seed: int = 0, *, empty_on: int | None = None):
    rng = np.random.default_rng(7000 + 1000 * seed + rank)
    rows = 0 if rank == empty_on else int(rng.integers(50, 150))
    k2 = np.array([f"g{v}" for v in rng.integers(0, 20, rows)], dtype=object)
    k2[rng.random(rows) < 0.1] = None
    v = rng.normal(size=rows).round(3)
    return pa.table({
        "k1": pa.array(rng.integers(0, 30, rows), mask=rng.random(rows) < 0.1),
        "k2": pa.array(k2, pa.string()),
        "v": pa.array(v, mask=rng.random(rows) < 0.15),
        "w": pa.array(rng.integers(-50, 50, rows)),
    })


PARTIAL_AGGS = {"v": ["sum", "count", "mean", "min", "max", "var", "std", "first", "last"],
                "w": ["sum", "min", "max", "size"]}
ROW_AGGS = {"v": ["sum", "count", "mean", "min", "max", "var", "std", "median", "nunique"],
            "w": ["median", "nunique", "last"]}


def groupbys(rank: int, world: int, folder: str) -> None:
    import gpuhash as gh

    cases = [("k2", {}), ("k1", {"seed": 1, "empty_on": 0}), (["k1", "k2"], {"seed": 2})]
    for by, options in cases:
        table = group_table(rank, world, **options)
        for aggs, method in ((PARTIAL_AGGS, "auto"), (ROW_AGGS, "auto"),
                             (PARTIAL_AGGS, "rows")):
            for dropna in (False, True):
                part = gh.distributed.groupby(table, by, aggs, dropna=dropna, method=method,
                                              device="cpu")
                check(part, lambda by=by, options=options, aggs=aggs, dropna=dropna: gh.groupby(
                    whole(group_table, world, **options), by, aggs, dropna=dropna,
                    device="cpu"), groups=by)

    def duckdb_groups():  # DuckDB on the concatenation, for aggregations named alike
        import duckdb

        con = duckdb.connect()
        con.register("t", whole(group_table, world))
        return con.sql("SELECT k2, sum(v) AS v_sum, count(v) AS v_count, median(v) AS v_median, "
                       "count(DISTINCT v) AS v_nunique, var_samp(v) AS v_var FROM t GROUP BY "
                       "k2").to_arrow_table()

    part = gh.distributed.groupby(group_table(rank, world), "k2",
                                  {"v": ["sum", "count", "median", "nunique", "var"]},
                                  device="cpu")
    check(part, duckdb_groups, groups="k2", types=False)
    # pandas and polars: the whole answer's dtypes on every rank
    import polars as pl

    table = group_table(rank, world, seed=3)
    for aggs in (PARTIAL_AGGS, ROW_AGGS):
        part = gh.distributed.groupby(table.to_pandas(), "k1", aggs, sort=True, device="cpu")
        assert part["k1"].dropna().is_monotonic_increasing
        check(part, lambda aggs=aggs: gh.groupby(whole(group_table, world, seed=3).to_pandas(),
                                                 "k1", aggs, device="cpu"), groups="k1")
        part = gh.distributed.groupby(pl.from_arrow(table), ["k2", "k1"], aggs, device="cpu")
        check(part, lambda aggs=aggs: gh.groupby(pl.from_arrow(whole(group_table, world, seed=3)),
                                                 ["k2", "k1"], aggs, device="cpu"),
              groups=["k2", "k1"])


def bad_input(rank: int, world: int, folder: str) -> None:
    import gpuhash as gh
    from gpuhash.distributed import PeerError

    left, right = left_part(rank, world), right_part(rank, world)

    def expect(error_here, call) -> str:
        try:
            call()
        except error_here as caught:
            return str(caught)
        raise AssertionError("the call did not raise")

    last = world - 1
    # a key column one rank lacks: that rank's KeyError, a PeerError quoting it elsewhere
    message = expect(KeyError if rank == 1 else PeerError, lambda: gh.distributed.merge(
        left.drop(["k2"]) if rank == 1 else left, right, on="k2", device="cpu"))
    assert "k2" in message
    # another kind of table on the last rank
    expect(TypeError if rank == last else PeerError, lambda: gh.distributed.merge(
        left.to_pandas() if rank == last else left, right, on="k1", device="cpu"))
    # another schema on rank 0, another option on rank 1: a ValueError on every rank
    expect(ValueError, lambda: gh.distributed.merge(
        left.append_column("x", pa.array([1] * left.num_rows)) if rank == 0 else left, right,
        on="k1", device="cpu"))
    expect(ValueError, lambda: gh.distributed.merge(left, right, on="k1", device="cpu",
                                                    how="left" if rank == 1 else "inner"))
    expect(ValueError, lambda: gh.distributed.merge(left, right, on="k1", how="outer",
                                                    broadcast="right", device="cpu"))
    # a failure at one owner only (a repeated key that validate refuses): every rank raises
    repeated = pa.table({"k1": pa.array([5, 5] if rank == 0 else [], pa.int64()),
                         "b": pa.array([1, 2] if rank == 0 else [], pa.int64())})
    owner = int(gh.distributed.owner_of(torch.tensor([5]), world)[0])
    expect(ValueError if rank == owner else PeerError, lambda: gh.distributed.merge(
        left, repeated, on="k1", validate="m:1", device="cpu"))
    # group-bys: a missing column on rank 1, an aggregation of a string's mean everywhere
    table = group_table(rank, world)
    expect(KeyError if rank == 1 else PeerError, lambda: gh.distributed.groupby(
        table, "k2", {"nope" if rank == 1 else "v": "sum"}, device="cpu"))
    expect(TypeError, lambda: gh.distributed.groupby(table, "k1", {"k2": "mean"},
                                                     device="cpu"))
    expect(ValueError, lambda: gh.distributed.groupby(table, "k1", {"v": "median"},
                                                      method="partials", device="cpu"))
    expect(TypeError if rank == 0 else PeerError, lambda: gh.distributed.groupby(
        {"k1": [1]} if rank == 0 else table, "k1", {"v": "sum"}, device="cpu"))
    # still in step: sound calls work
    part = gh.distributed.merge(left, right, on="k1", device="cpu")
    check(part, lambda: gh.merge(whole(left_part, world), whole(right_part, world), on="k1",
                                 device="cpu"))
    assert sum(gathered(gh.distributed.groupby(table, "k1", {"v": "sum"}).num_rows)) == len(
        set(whole(group_table, world).column("k1").to_pylist()))


def explained(rank: int, world: int, folder: str) -> None:
    """explain=True: the same answer, and rank 0 alone prints every rank's time a phase."""
    import contextlib
    import io

    import gpuhash as gh

    table = group_table(rank, world)
    calls = {"groupby": lambda **o: gh.distributed.groupby(table, "k2", PARTIAL_AGGS,
                                                           device="cpu", **o),
             "merge": lambda **o: gh.distributed.merge(left_part(rank, world),
                                                       right_part(rank, world), on="k1",
                                                       device="cpu", broadcast=None, **o)}
    for name, call in calls.items():
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            part = call(explain=True)
        assert rows_of(part) == rows_of(call())
        lines = printed.getvalue().splitlines()
        if rank:
            assert not lines
            continue
        assert lines[0].startswith(f"gh.distributed.{name} on {world} ranks")
        phases = {line.split()[0]: line.split() for line in lines[1:]}
        assert {"agreement", "serialise", "all-to-all", "tables"} <= set(phases), lines
        timed = phases["serialise"][1:1 + world]
        assert len(timed) == world and all(float(t) >= 0 for t in timed), lines
    # explain is an option every rank must give alike: else every rank refuses the call
    with pytest.raises(ValueError, match="every rank must pass"):
        gh.distributed.groupby(table, "k2", PARTIAL_AGGS, device="cpu", explain=rank == 0)


def everything(rank: int, world: int, folder: str) -> None:
    merges(rank, world, folder)
    groupbys(rank, world, folder)
    bad_input(rank, world, folder)
    explained(rank, world, folder)


# --- the tests --------------------------------------------------------------------------------
@pytest.mark.parametrize("world", [2, 4])
def test_merge_and_groupby_over_ranks_answer_as_one_call_on_every_partition(world, tmp_path):
    run_world("test_distributed_frames:everything", world, tmp_path)


# --- the key hash, without a process group ----------------------------------------------------
def test_auto_broadcasts_a_small_side_that_may_go():
    from gpuhash.distributed.joins import BROADCAST_BYTES, _broadcast_side

    assert _broadcast_side("auto", "inner", None, [4000, 100], 4) == "right"
    assert _broadcast_side("auto", "inner", None, [100, 4000], 4) == "left"
    assert _broadcast_side("auto", "left", None, [100, 4000], 4) is None  # its rows must stay
    assert _broadcast_side("auto", "right", None, [100, 4000], 4) == "left"
    assert _broadcast_side("auto", "outer", None, [4000, 10], 4) is None
    assert _broadcast_side("auto", "inner", None, [4000, 1001], 4) is None  # > a rank's share
    assert _broadcast_side("auto", "inner", "m:1", [4000, 100], 4) is None  # validate: shuffle
    assert _broadcast_side("auto", "inner", None, [4000, 100], 1) is None
    assert _broadcast_side("auto", "inner", None, [8 * BROADCAST_BYTES, BROADCAST_BYTES + 1],
                           2) is None
    assert _broadcast_side(None, "inner", None, [4000, 100], 4) is None
    assert _broadcast_side("left", "inner", None, [4000, 100], 4) == "left"


def test_equal_keys_hash_alike_whatever_their_types():
    from gpuhash.distributed.key_hash import key_types, row_hashes

    left = pa.table({"i": pa.array([1, 2, None, 3], pa.int32()),
                     "s": pa.array(["ab", "ba", None, ""]).dictionary_encode(),
                     "t": pa.array([1, 2, 3, 4], pa.timestamp("s"))})
    right = pa.table({"i": pa.array([3.0, 2.0, -0.0, 1.0]),
                      "s": pa.array(["", "ba", "x", "ab"], pa.large_string()),
                      "t": pa.array([4000, 2000, 0, 1000], pa.timestamp("ms"))})
    names = ["i", "s", "t"]
    types = key_types([left.schema.field(n).type for n in names],
                      [right.schema.field(n).type for n in names])
    a, nulls = row_hashes(left, names, types)
    b, _ = row_hashes(right, names, types)
    assert nulls.tolist() == [False, False, True, False]
    assert a[0] == b[3] and a[1] == b[1] and a[3] == b[0]
    assert a[0] != a[1]  # the place of a byte counts
    single = row_hashes(left, ["s"], types[1:2])[0]
    assert single[0] != single[1]
    with pytest.raises(TypeError, match="cannot be compared"):
        key_types([pa.string()], [pa.int64()])


def test_string_keys_spread_evenly_over_the_ranks():
    from gpuhash.distributed import owner_of
    from gpuhash.distributed.key_hash import key_types, row_hashes

    table = pa.table({"s": [f"id{i:06d}" for i in range(40_000)]})
    hashes, _ = row_hashes(table, ["s"], key_types([pa.string()]))
    counts = torch.bincount(owner_of(hashes, 4), minlength=4)
    assert counts.min() > 9_500 and counts.max() < 10_500


def test_without_a_process_group_the_error_says_what_to_do():
    import gpuhash as gh

    with pytest.raises(RuntimeError, match="init_process_group"):
        gh.distributed.merge(pa.table({"k": [1]}), pa.table({"k": [1]}), on="k")
