"""gh.distributed.groupby and gh.distributed.merge over two gloo ranks against the same call
on the whole table in one process, on seeded random tables: one to three key columns of
every kind (narrow, unsigned and 64-bit integers, floats with NaN and signed zeros, bools,
strings), nulls anywhere. A row's owner must be the same for every row of its group: a NaN
key went to its own owner while the nulls it groups with went to theirs, and the null group
came out twice."""

from __future__ import annotations

import collections
import math
import random

import pyarrow as pa
from distributed_worlds import run_world

KINDS = {
    "int8": (pa.int8(), [-128, 127, 0, 1]), "uint16": (pa.uint16(), [0, 7, 65535]),
    "int64": (pa.int64(), [0, 1, -2**63, 2**63 - 1]),
    "uint64": (pa.uint64(), [0, 2**63, 2**64 - 1]),
    "float64": (pa.float64(), [0.0, -0.0, 1.5, math.nan]), "bool": (pa.bool_(), [True, False]),
    "string": (pa.string(), ["", "a", "b", "é"]),
}
AGGS = {"vi": ["sum", "min", "max", "count", "mean", "first"],
        "vf": ["sum", "mean", "max", "size", "var"]}
TABLES = 60


def random_table(seed: int) -> tuple[pa.Table, list[str], bool]:
    """(a table, its key columns, dropna) drawn from ``seed`` alike on every rank."""
    draw = random.Random(seed)
    rows = draw.randint(0, 40)
    kinds = draw.sample(sorted(KINDS), draw.randint(1, 3))
    columns = {}
    for i, kind in enumerate(kinds):
        type_, values = KINDS[kind]
        columns[f"k{i}"] = pa.array([None if draw.random() < 0.2 else draw.choice(values)
                                     for _ in range(rows)], type=type_)
    columns["vi"] = pa.array([None if draw.random() < 0.2 else draw.randint(-9, 9)
                              for _ in range(rows)], pa.int32())
    columns["vf"] = pa.array([None if draw.random() < 0.2 else draw.choice(
        [math.nan, 0.5, -1.0, 3.25]) for _ in range(rows)], pa.float64())
    return pa.table(columns), [f"k{i}" for i in range(len(kinds))], draw.random() < 0.5


def _cell(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(value + 0.0, 9) if isinstance(value, float) else value


def _rows(table: pa.Table) -> collections.Counter:
    data = table.to_pydict()
    names = sorted(data)
    return collections.Counter(tuple(_cell(data[n][i]) for n in names)
                               for i in range(table.num_rows))


def _part(table: pa.Table, rank: int, world: int) -> pa.Table:
    rows = table.num_rows
    return table.slice(rank * rows // world, (rank + 1) * rows // world - rank * rows // world)


def _gathered_differs(part: pa.Table, world: int, call, *args, **options) -> bool:
    """Whether every rank's part together differs from ``call(*args, **options)`` on the
    whole tables (asked on rank 0 only)."""
    import torch.distributed as dist

    parts = [None] * world
    dist.all_gather_object(parts, part)
    if dist.get_rank():
        return False
    whole = call(*args, **options)
    return _rows(pa.concat_tables([p.cast(whole.schema) for p in parts])) != _rows(whole)


def groupbys(rank: int, world: int, folder: str) -> None:
    import gpuhash as gh

    wrong = []
    for seed in range(TABLES):
        table, keys, dropna = random_table(seed)
        for method in ("rows", "partials"):
            part = gh.distributed.groupby(_part(table, rank, world), keys, AGGS, dropna=dropna,
                                          device="cpu", method=method)
            if _gathered_differs(part, world, gh.groupby, table, keys, AGGS, dropna=dropna,
                                 device="cpu"):
                wrong.append((seed, method))
    assert not wrong, wrong


def merges(rank: int, world: int, folder: str) -> None:
    import gpuhash as gh

    wrong = []
    for seed in range(TABLES):
        left, keys, _ = random_table(seed)
        draw = random.Random(seed + 1000)
        # the right side holds the left's keys (of the same types), some rows of them
        picks = pa.array([draw.randrange(left.num_rows) for _ in range(draw.randint(0, 30))]
                         if left.num_rows else [], pa.int64())
        right = pa.table({**{k: left.column(k).take(picks) for k in keys},
                          "w": pa.array(range(len(picks)), pa.int64())})
        how = draw.choice(["inner", "left", "right", "outer"])
        nulls_equal = draw.random() < 0.5
        part = gh.distributed.merge(_part(left, rank, world), _part(right, rank, world),
                                    on=keys, how=how, nulls_equal=nulls_equal, device="cpu")
        if _gathered_differs(part, world, gh.merge, left, right, on=keys, how=how,
                             nulls_equal=nulls_equal, device="cpu"):
            wrong.append((seed, how, nulls_equal))
    assert not wrong, wrong


def both(rank: int, world: int, folder: str) -> None:
    groupbys(rank, world, folder)
    merges(rank, world, folder)


def test_random_tables_over_two_ranks_answer_as_one_call(tmp_path):
    run_world("test_distributed_properties:both", 2, tmp_path)
