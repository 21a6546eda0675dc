"""Experiment for the CPU-engine issue: is a scalar probe loop compiled by numba the right
CPU twin? A stand-alone prototype of the table format's probe (same hash, two bucket choices,
8-slot buckets of int64 keys, a float32 value row per slot, EMPTY = -1) timed beside what a
Python user already has, on the same 5M random int64 keys -> float32:

* the prototype: build (one thread, no atomics) and find (numba prange over the queries);
* pandas: Index(keys) build (its hash table is built on first lookup, so build = Index +
  get_indexer of one key), get_indexer of all keys;
* a Python dict from lists, and torch sort + searchsorted.

It uses nothing of gpuhash's internals; it answers "how fast can the scalar loop be here".
Usage: python bench/experiments/cpu_probe_loop.py [--keys N] [--runs R]
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

EMPTY = -1
BUCKET = 8
M1 = np.uint64(0xFF51AFD7ED558CCD)
M2 = np.uint64(0xC4CEB9FE1A85EC53)


@numba.njit(inline="always")
def mix64(x):
    x ^= x >> np.uint64(33)
    x *= M1
    x ^= x >> np.uint64(33)
    x *= M2
    x ^= x >> np.uint64(33)
    return x


@numba.njit(inline="always")
def choices(key, seed, buckets):
    h = mix64(np.uint64(key) ^ seed)
    b1 = ((h & np.uint64(0xFFFFFFFF)) * np.uint64(buckets)) >> np.uint64(32)
    b2 = ((h >> np.uint64(32)) * np.uint64(buckets)) >> np.uint64(32)
    return np.int64(b1), np.int64(b2)


@numba.njit
def build(slots, values, keys, rows, seed):
    """Insert distinct keys in order: first free slot of b1, else b2, else linear from b2."""
    buckets = slots.shape[0] // BUCKET
    for i in range(keys.shape[0]):
        key = keys[i]
        b1, b2 = choices(key, seed, buckets)
        bucket = b1
        for step in range(buckets + 2):
            base = bucket * BUCKET
            placed = False
            for lane in range(BUCKET):
                if slots[base + lane] == EMPTY:
                    slots[base + lane] = key
                    values[base + lane] = rows[i]
                    placed = True
                    break
            if placed:
                break
            bucket = b2 if step == 0 else (bucket + 1) % buckets


@numba.njit(parallel=True)
def find(slots, values, queries, seed, out, found):
    buckets = slots.shape[0] // BUCKET
    for i in numba.prange(queries.shape[0]):
        key = queries[i]
        b1, b2 = choices(key, seed, buckets)
        bucket = b1
        out[i] = 0.0
        found[i] = False
        for step in range(buckets + 2):
            base = bucket * BUCKET
            room = False
            hit = False
            for lane in range(BUCKET):
                word = slots[base + lane]
                if word == key:
                    out[i] = values[base + lane]
                    found[i] = True
                    hit = True
                    break
                if word == EMPTY:
                    room = True
            if hit or room:
                break
            bucket = b2 if step == 0 else (bucket + 1) % buckets


def best(fn, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3  # median, ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    n = args.keys
    rng = np.random.default_rng(1)
    keys = np.unique(rng.integers(0, 2**62, int(n * 1.01)))[:n]
    rng.shuffle(keys)
    rows = rng.random(n, dtype=np.float32)
    queries = keys[rng.permutation(n)]
    seed = np.uint64(0x2545F4914F6CDD1D)
    slots_count = int(np.ceil(n / 0.9 / BUCKET)) * BUCKET
    out = np.empty(n, np.float32)
    found = np.empty(n, np.bool_)

    def numba_build():
        slots = np.full(slots_count, EMPTY, np.int64)
        values = np.zeros(slots_count, np.float32)
        build(slots, values, keys, rows, seed)
        return slots, values

    slots, values = numba_build()  # compiles
    find(slots, values, queries[:10], seed, out[:10], found[:10])
    t_build = best(numba_build, args.runs)
    t_find = best(lambda: find(slots, values, queries, seed, out, found), args.runs)
    assert found.all() and np.array_equal(out, rows[np.argsort(keys)][
        np.searchsorted(np.sort(keys), queries)])
    gather_index = rng.integers(0, slots_count, n)
    t_gather = best(lambda: values[gather_index], args.runs)
    print(f"cores {os.cpu_count()}, numba threads {numba.get_num_threads()}, {n:,} keys")
    print(f"numba probe loop  build {t_build:8.0f} ms   find {t_find:8.0f} ms   "
          f"(numpy gather of as many random rows {t_gather:.0f} ms)")

    import pandas as pd

    def pandas_build():
        index = pd.Index(keys)
        index.get_indexer(keys[:1])  # pandas builds its hash table on the first lookup
        return index

    index = pandas_build()
    t_pb = best(pandas_build, args.runs)
    t_pf = best(lambda: index.get_indexer(queries), args.runs)
    print(f"pandas Index      build {t_pb:8.0f} ms   get_indexer {t_pf:8.0f} ms")

    key_list, row_list, query_list = keys.tolist(), rows.tolist(), queries.tolist()
    t_db = best(lambda: dict(zip(key_list, row_list)), 1)
    table = dict(zip(key_list, row_list))
    t_df = best(lambda: [table.get(q) for q in query_list], 1)
    print(f"Python dict       build {t_db:8.0f} ms   find {t_df:8.0f} ms")

    import torch

    tk, tv, tq = torch.from_numpy(keys), torch.from_numpy(rows), torch.from_numpy(queries)
    state = {}

    def sort_build():
        state["keys"], order = torch.sort(tk)
        state["values"] = tv[order]

    def sort_find():
        pos = torch.searchsorted(state["keys"], tq)
        return state["values"][pos.clamp_(max=n - 1)]

    t_sb = best(sort_build, args.runs)
    t_sf = best(sort_find, args.runs)
    print(f"torch sort+search build {t_sb:8.0f} ms   find {t_sf:8.0f} ms")


if __name__ == "__main__":
    main()
