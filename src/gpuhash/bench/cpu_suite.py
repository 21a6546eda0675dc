"""The CPU engine's benchmark: the main job on a machine without a GPU, at small sizes."""

from __future__ import annotations

import torch

from gpuhash import HashMap
from gpuhash.bench.harness import time_cpu
from gpuhash.bench.map_suite import TYPES, random_values, same, unique_keys
from gpuhash.bench.progress import Step, quiet

KINDS = ("u32->u32", "u64->f32x8")
LOADS = (0.5, 0.9)
STEPS = len(KINDS) * len(LOADS)  # the steps ``run`` announces


def run(*, quick: bool, runs: int = 5, step: Step = quiet) -> list[dict]:
    """Insert and find (hits, misses) for two table types at two load factors, each figure the
    median of ``runs`` timed runs; ``step`` is told of each configuration as it starts."""
    device = torch.device("cpu")
    n = 2**15 if quick else 2**18
    results = []
    for kind in KINDS:
        key_dtype, value_dtype, shape = TYPES[kind]
        for load in LOADS:
            step(f"CPU engine {kind}, {n >> 10}K keys, load {load}")
            keys = unique_keys(2 * n, key_dtype, device)
            hits, misses = keys[:n], keys[n:]
            values = random_values(n, value_dtype, shape, device)
            table = HashMap(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                            capacity=n, max_load_factor=load, growable=False)
            insert = time_cpu(lambda t=table, k=hits, v=values: t.insert(k, v),
                              setup=table.clear, runs=runs)
            got, found = table.find(hits)
            assert bool(found.all()) and same(got, values)
            assert not bool(table.find(misses)[1].any())
            find_hit = time_cpu(lambda t=table, k=hits: t.find(k), runs=runs)
            find_miss = time_cpu(lambda t=table, k=misses: t.find(k), runs=runs)
            results.append({
                "kind": kind, "keys": n, "load": load,
                "insert_m_per_s": insert.rate(n) * 1e3,
                "find_hit_m_per_s": find_hit.rate(n) * 1e3,
                "find_miss_m_per_s": find_miss.rate(n) * 1e3,
                "timings": {"insert": insert.as_dict(), "find_hit": find_hit.as_dict(),
                            "find_miss": find_miss.as_dict()},
            })
    return results
