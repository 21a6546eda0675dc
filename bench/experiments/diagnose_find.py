"""Hits against misses: find / contains / find_index of one u32 -> u32 table, timed on hits
and on misses through the public API alone (gpuhash.HashMap and gpuhash.bench.harness).

Made to ask why misses run slower than hits at load 0.5; run it under ncu to read the lookup
kernels' counters (each query set is found twice as a warm-up before anything is timed).
Earlier runs: bench/results/experiments_2026-11-21.txt ("scripts/diagnose_find.py").
Usage: PYTHONPATH=src python bench/experiments/diagnose_find.py [--keys N] [--load 0.5]
       [--device cuda|cpu]   (the CPU engine is timed by wall clock, the GPU by CUDA events)
"""

import argparse

import torch

import gpuhash as gh
from gpuhash.bench.harness import time_cpu, time_gpu

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--keys", type=int, default=32 * 2**20, help="keys in the table")
parser.add_argument("--load", type=float, default=0.5, help="the table's load factor")
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--runs", type=int, default=5, help="timed runs per figure")
arguments = parser.parse_args()
device = torch.device(arguments.device)
n = arguments.keys

# 2n distinct random 32-bit keys in random order: the first n go in, the others miss
draw = torch.unique(torch.randint(0, 2**32, (2 * n + n // 8 + 1024,), device=device))
assert draw.numel() >= 2 * n, "too few distinct keys drawn; run again"
bits = draw[torch.randperm(draw.numel(), device=device)[: 2 * n]]
bits = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32)  # u32 bits in an int32
hits, misses = bits[:n], bits[n:]
values = torch.randint(0, 2**31 - 1, (n,), dtype=torch.int32, device=device)
table = gh.HashMap(key_dtype=torch.uint32, value_dtype=torch.uint32, capacity=n,
                   max_load_factor=arguments.load, growable=False, device=device)
table.insert(hits.view(torch.uint32), values.view(torch.uint32))
pick = torch.randperm(n, device=device)  # queries in an order other than the inserts'
hit_q, miss_q = hits[pick].view(torch.uint32), misses[pick].view(torch.uint32)
got, found = table.find(hit_q)
assert bool(found.all()) and torch.equal(got.view(torch.int32), values[pick]), "wrong hits"
assert not bool(table.find(miss_q)[1].any()), "a miss was found"
for queries in (hit_q, miss_q):  # warm-up
    table.find(queries)
    table.find(queries)
if device.type == "cuda":
    torch.cuda.synchronize()

time = time_gpu if device.type == "cuda" else time_cpu
print(f"u32->u32, {n} keys, load {arguments.load}, {device}:")
for op in ("find", "contains", "find_index"):
    for name, queries in (("hits", hit_q), ("misses", miss_q)):
        timing = time(lambda o=op, q=queries: getattr(table, o)(q), runs=arguments.runs)
        print(f"  {op:10s} {name:6s} {timing.rate(n):8.4f} G/s")
