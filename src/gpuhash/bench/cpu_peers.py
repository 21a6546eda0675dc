"""The CPU engine beside what a Python user already has, on the same work: n random int64 keys
-> float32, a build of all n and a find of all n (hits, in another order). Every peer's
result is checked against the engine's before any time counts.

* pandas: ``Index(keys)`` and its first lookup (pandas builds its hash table, khash, lazily on
  the first lookup), then ``get_indexer(queries)`` and a gather of the values.
* polars: it keeps no hash index between calls, so its honest equivalent of a find is a left
  join of the queries on a key column, which builds the hash table inside every call: timed
  as a find, with no build.
* a Python dict from lists, ``get`` per query; torch sort + searchsorted.
* the random-access ceiling: a numpy gather of n random rows of an array as large as the
  table's values.

Also the engine's find of 32-byte rows (u64 -> f32x8, load 0.9) against a numpy gather of as
many random 32-byte rows.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from gpuhash import HashMap
from gpuhash.bench.harness import time_cpu
from gpuhash.bench.map_suite import unique_keys
from gpuhash.bench.progress import Step, quiet


def _engine(keys, values, queries, want, runs):
    def build():
        table = HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
        table.insert(keys, values)
        return table

    table = build()
    got, found = table.find(queries)
    assert bool(found.all()) and torch.equal(got, want), "CPU engine find is wrong"
    return time_cpu(build, runs=runs), time_cpu(lambda: table.find(queries), runs=runs)


def _pandas(keys, values, queries, want, runs):
    import pandas as pd

    keys_np, values_np, queries_np = keys.numpy(), values.numpy(), queries.numpy()

    def build():
        index = pd.Index(keys_np)
        index.get_indexer(keys_np[:1])
        return index

    index = build()

    def find():
        return values_np[index.get_indexer(queries_np)]

    assert np.array_equal(find(), want.numpy()), "pandas find is wrong"
    return time_cpu(build, runs=runs), time_cpu(find, runs=runs)


def _polars(keys, values, queries, want, runs):
    import polars as pl

    table = pl.DataFrame({"key": keys.numpy(), "value": values.numpy()})
    asked = pl.DataFrame({"key": queries.numpy()})

    def find():
        return asked.join(table, on="key", how="left", maintain_order="left")["value"]

    assert np.array_equal(find().to_numpy(), want.numpy()), "polars join is wrong"
    return None, time_cpu(find, runs=runs)


def _dict(keys, values, queries, want, runs):
    key_list, value_list, query_list = keys.tolist(), values.tolist(), queries.tolist()
    holder = {"d": dict(zip(key_list, value_list))}

    def build():
        holder["d"] = dict(zip(key_list, value_list))

    def find():
        get = holder["d"].get
        return [get(q) for q in query_list]

    assert find() == want.tolist(), "dict find is wrong"
    return time_cpu(build, runs=runs), time_cpu(find, runs=runs)


def _sort_search(keys, values, queries, want, runs):
    holder = {}

    def build():
        holder["keys"], order = torch.sort(keys)
        holder["values"] = values[order]

    def find():
        return holder["values"][torch.searchsorted(holder["keys"], queries)]

    build()
    assert torch.equal(find(), want), "sort + searchsorted find is wrong"
    return time_cpu(build, runs=runs), time_cpu(find, runs=runs)


PEERS = {"gpuhash CPU engine": _engine, "pandas Index / get_indexer": _pandas,
         "polars left join (builds per call)": _polars, "Python dict": _dict,
         "torch sort + searchsorted": _sort_search}


def _row_find_versus_gather(n: int, runs: int) -> dict:
    keys = unique_keys(n, torch.uint64, torch.device("cpu"))
    rows = torch.randn(n, 8)
    table = HashMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,),
                    capacity=n, max_load_factor=0.9, growable=False)
    table.insert(keys, rows)
    queries = keys[torch.randperm(n)]
    got, found = table.find(queries)
    assert bool(found.all()), "u64 -> f32x8 find missed"
    find = time_cpu(lambda: table.find(queries), runs=runs)
    storage = np.zeros((table.spec.num_slots, 8), np.float32)
    where = np.random.default_rng(0).integers(0, storage.shape[0], n)
    gather = time_cpu(lambda: storage[where], runs=runs)
    return {"keys": n, "load": len(table) / table.spec.num_slots,
            "find_ms": find.median_ms, "gather_ms": gather.median_ms,
            "ratio": gather.median_ms / find.median_ms}


STEPS = len(PEERS) + 2  # the steps ``run`` announces: each peer, the ceiling, the rows


def run(n: int, *, runs: int = 3, step: Step = quiet) -> dict:
    """Build and find times of every peer on the same n keys (ms, medians), and ratios of the
    engine's against each; the row find against its gather ceiling. ``step`` is told of each
    part as it starts."""
    generator = torch.Generator().manual_seed(1)
    keys = unique_keys(n, torch.int64, torch.device("cpu"))
    values = torch.rand(n, generator=generator)
    order = torch.randperm(n, generator=generator)
    queries, want = keys[order], values[order]
    figures = {}
    for name, peer in PEERS.items():
        step(f"peer: {name}")
        try:
            build, find = peer(keys, values, queries, want, 1 if name == "Python dict" else runs)
        except ImportError:
            continue
        figures[name] = {"build_ms": None if build is None else build.median_ms,
                         "find_ms": find.median_ms}
    ours = figures["gpuhash CPU engine"]
    for figure in figures.values():
        figure["engine_build_speedup"] = (None if figure["build_ms"] is None
                                          else figure["build_ms"] / ours["build_ms"])
        figure["engine_find_speedup"] = figure["find_ms"] / ours["find_ms"]
    storage = np.zeros(int(n / 0.9), np.float32)
    where = np.random.default_rng(0).integers(0, storage.shape[0], n)
    step("numpy random-gather ceiling")
    ceiling = time_cpu(lambda: storage[where], runs=runs)
    step("u64 -> f32x8 find against a row gather")
    return {"keys": n, "cores": os.cpu_count(), "peers": figures,
            "gather_ms": ceiling.median_ms,
            "rows_u64_f32x8": _row_find_versus_gather(n // 2, runs)}
