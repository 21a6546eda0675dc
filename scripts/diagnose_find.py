"""Why do misses run slower than hits at load 0.5? Times find / contains / find_index on hits
and on misses of one 32M-key u32 table; run it under ncu to read the lookup kernels' counters
(the 4th and 5th gh_lookup launches are the find of hits and the find of misses)."""

import torch

import gpuhash as gh
from gpuhash.bench.harness import time_gpu
from gpuhash.bench.map_suite import take, unique_keys

n = 32 * 2**20
device = torch.device("cuda")
keys = unique_keys(2 * n, torch.uint32, device)
hits, misses = keys[:n], keys[n:]
values = torch.randint(0, 2**31 - 1, (n,), dtype=torch.int32, device=device).view(torch.uint32)
table = gh.HashMap(key_dtype=torch.uint32, value_dtype=torch.uint32, capacity=n,
                   max_load_factor=0.5, growable=False, device=device)
table.insert(hits, values)
pick = torch.randperm(n, device=device)
hit_q, miss_q = take(hits, pick), take(misses, pick)
for queries in (hit_q, miss_q):  # warm-up: gh_lookup launches 1-4
    table.find(queries)
    table.find(queries)
torch.cuda.synchronize()
for op in ("find", "contains", "find_index"):
    for name, queries in (("hits", hit_q), ("misses", miss_q)):
        timing = time_gpu(lambda o=op, q=queries: getattr(table, o)(q), runs=5)
        print(f"{op:10s} {name:6s} {timing.rate(n):6.2f} G/s")
