"""gh.merge of pyarrow tables against DuckDB's join of the same tables (the issue's reference):
every how, key columns of every Arrow type a merge takes (integers of each width, floats,
text of both widths, dictionaries, dates, timestamps, two columns at once), with nulls,
repeated keys on both sides, one key in half the rows and empty sides."""

from __future__ import annotations

import datetime

import pytest

import gpuhash as gh
from conftest import covering

pa = pytest.importorskip("pyarrow")
duckdb = pytest.importorskip("duckdb")

HOWS = ["inner", "left", "right", "full", "semi", "anti"]
SQL = {"inner": "INNER JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN",
       "full": "FULL OUTER JOIN", "semi": "SEMI JOIN", "anti": "ANTI JOIN"}


def _values(kind: str, codes: list[int | None]) -> pa.Array:
    """An Arrow column of ``kind`` whose i-th value is made from codes[i] (None: null), so
    that equal codes give equal keys on either side."""
    def each(make):
        return [None if c is None else make(c) for c in codes]
    if kind in ("int8", "int16", "int32", "int64", "uint8", "uint32", "uint64"):
        offset = 0 if kind.startswith("u") else -20
        return pa.array(each(lambda c: c + offset), type=getattr(pa, kind)())
    if kind == "float64":
        return pa.array(each(lambda c: c / 4 - 3.5), type=pa.float64())
    if kind in ("string", "large_string"):
        return pa.array(each(lambda c: f"key-{c}"), type=getattr(pa, kind)())
    if kind == "dictionary":
        return pa.array(each(lambda c: f"k{c}")).dictionary_encode()
    if kind == "date32":
        return pa.array(each(lambda c: datetime.date(2020, 1, 1) + datetime.timedelta(c)),
                        type=pa.date32())
    assert kind == "timestamp"
    return pa.array(each(lambda c: datetime.datetime(2021, 3, 1) + datetime.timedelta(hours=c)),
                    type=pa.timestamp("us"))


def _table(rng, rows: int, kinds: list[str], payload: str, *, skew: bool) -> pa.Table:
    columns = {}
    for i, kind in enumerate(kinds):
        codes = [None if rng.random() < 0.1 else rng.randrange(12) for _ in range(rows)]
        if skew:  # one key in half the rows
            codes = [3 if rng.random() < 0.5 else c for c in codes]
        columns[f"k{i}"] = _values(kind, codes)
    columns[payload] = pa.array(list(range(rows)), type=pa.int64())
    return pa.table(columns)


def _duckdb(left: pa.Table, right: pa.Table, keys: list[str], how: str) -> list[tuple]:
    on = " AND ".join(f"l.{k} = r.{k}" for k in keys)
    if how in ("semi", "anti"):
        query = f"SELECT l.* FROM left_t l {SQL[how]} right_t r ON {on}"
    else:
        # gh.merge keeps a key named alike on both sides once: the left's, else the right's
        key_columns = ", ".join(f"COALESCE(l.{k}, r.{k}) AS {k}" if how in ("right", "full")
                                else f"l.{k}" for k in keys)
        query = f"SELECT {key_columns}, l.a, r.b FROM left_t l {SQL[how]} right_t r ON {on}"
    con = duckdb.connect()
    con.register("left_t", left)
    con.register("right_t", right)
    return sorted(con.execute(query).fetchall(), key=repr)


def _ours(left: pa.Table, right: pa.Table, keys: list[str], how: str) -> list[tuple]:
    merged = gh.merge(left, right, on=keys, how=how, device="cpu")
    names = keys + ["a"] if how in ("semi", "anti") else keys + ["a", "b"]
    columns = [merged.column(n).cast(merged.column(n).type.value_type)
               if pa.types.is_dictionary(merged.column(n).type) else merged.column(n)
               for n in names]
    return sorted(zip(*(c.to_pylist() for c in columns)), key=repr)


KINDS = ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float64", "string",
         "large_string", "dictionary", "date32", "timestamp", ("int32", "string")]


@pytest.mark.parametrize(("kind", "how"), covering(KINDS, HOWS), ids=str)
def test_merges_match_duckdb(kind, how):
    import random

    rng = random.Random(f"{kind}-{how}")
    kinds = list(kind) if isinstance(kind, tuple) else [kind]
    keys = [f"k{i}" for i in range(len(kinds))]
    for rows_left, rows_right, skew in ((60, 40, False), (80, 50, True), (0, 30, False),
                                        (30, 0, False)):
        left = _table(rng, rows_left, kinds, "a", skew=skew)
        right = _table(rng, rows_right, kinds, "b", skew=skew)
        assert _ours(left, right, keys, how) == _duckdb(left, right, keys, how), (
            rows_left, rows_right, skew)
