"""Register caps for the hot kernels (GH_MIN_BLOCKS in map.cu), timed on the H100: fewer
registers let more threads, and so more memory requests, be in flight, at the price of some
spills. 32M keys; finds of hits and misses and a plain insert, per cap (cap 1 is the bound
of 256 threads a block alone; the library compiles with no bound at all).
Usage: PYTHONPATH=src python scripts/occupancy_variants.py [caps...]   (default: 1 6 8)"""

import sys

import torch

import gpuhash as gh
from gpuhash._cuda.compile import load_module
from gpuhash._cuda.launch import launch
from gpuhash.bench.ceilings import measure as measure_ceilings
from gpuhash.bench.harness import time_gpu
from gpuhash.bench.map_suite import random_values, take, unique_keys
from gpuhash.engines.cuda import _table_args, defines

device = torch.device("cuda")
n = 32 * 2**20
c_hbm = measure_ceilings(device)["C_hbm"]
print(f"C_hbm {c_hbm:.1f} G/s")
for kind, key_dtype, value_dtype, load in (("u32->u32", torch.uint32, torch.uint32, 0.5),
                                           ("u32->u32", torch.uint32, torch.uint32, 0.9),
                                           ("u64->u64", torch.uint64, torch.uint64, 0.9),
                                           ("u64->u64", torch.uint64, torch.uint64, 0.99)):
    keys = unique_keys(2 * n, key_dtype, device)
    hits, misses = keys[:n], keys[n:]
    values = random_values(n, value_dtype, (), device)
    table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, capacity=n,
                       max_load_factor=load, growable=False, device=device)
    table.insert(hits, values)
    pick = torch.randperm(n, device=device)
    queries = {"hits": take(hits, pick), "misses": take(misses, pick)}
    out = torch.empty_like(values)
    default = torch.zeros(1, dtype=value_dtype, device=device)  # misses copy it
    found = torch.empty(n, dtype=torch.bool, device=device)
    inserted = torch.empty(n, dtype=torch.bool, device=device)
    state = table._state
    spare = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, capacity=n,
                       max_load_factor=load, growable=False, device=device, duplicates="any")
    row = []
    for cap in [int(c) for c in sys.argv[1:]] or (1, 6, 8):
        module = load_module("map.cu", defines(state.spec) + (("GH_MIN_BLOCKS", cap),), 0)
        lookup, insert = module.get_kernel("gh_lookup"), module.get_kernel("gh_insert")
        cells = []
        for name, q in queries.items():
            args = (*_table_args(state), q.data_ptr(), n, out.data_ptr(), default.data_ptr(),
                    0, found.data_ptr())
            timing = time_gpu(lambda k=lookup, a=args: launch(k, n, *a, device=device), runs=5)
            assert bool(found.all()) == (name == "hits")
            cells.append(f"{name} {timing.rate(n) / c_hbm:.2f}C")
        args = (*_table_args(spare._state), hits.data_ptr(), values.data_ptr(), 0,
                inserted.data_ptr(), n, 0)
        timing = time_gpu(lambda k=insert, a=args: launch(k, n, *a, device=device),
                          setup=spare.clear, runs=5)
        assert len(spare) == n
        cells.append(f"insert {timing.rate(n):.2f}")
        row.append(f"cap {cap}: " + " ".join(cells))
    print(f"{kind} load {load} (bucket {state.spec.bucket_slots}):\n  " + "\n  ".join(row))
    del table, spare, state
    torch.cuda.empty_cache()
