"""In-process A/B of CacheMap trees on HKV's dim-8 workload: each tree's package copied under
its own name (/tmp/ab/<name>), the trees' caches filled to the same load, then timed calls
alternate tree by tree (call granularity), so machine drift hits every tree alike.
Usage: python cache_inproc_ab.py name1 name2 ... > out.jsonl (AB_APIS=find,find_index: a subset)
Trees: bench/experiments/_inproc.py.
"""
import json
import os
import statistics
import time

import torch
from _inproc import trees

mods = trees()
names = list(mods)
dev = torch.device(os.environ.get("AB_DEVICE", "cuda"))
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
APIS = ("insert_or_assign", "insert_and_evict", "find_or_insert", "find_or_insert_index",
        "assign", "find", "find_index")
if os.environ.get("AB_APIS"):  # a subset, e.g. AB_APIS=find,find_index
    APIS = tuple(os.environ["AB_APIS"].split(","))
BATCH, DIM, CAP, ROUNDS = 1 << 20, 8, 1 << 27, 15
if dev.type == "cpu":
    BATCH, CAP, ROUNDS = 1 << 12, 1 << 15, 2

def call(c, api, keys, values):
    if api in ("insert_or_assign", "insert_and_evict", "assign"):
        return getattr(c, api)(keys, values)
    return getattr(c, api)(keys)

for load in (0.5, 0.75, 1.0):
    caches = {}
    present = torch.randint(0, 2**62, (int(CAP * load),), device=dev)
    for n, m in mods.items():
        c = m.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(DIM,),
                       capacity=CAP, device=dev, policy="lru", bucket_slots=128)
        for part in present.split(BATCH):
            c.insert_or_assign(part.view(torch.uint64), torch.zeros(part.numel(), DIM, device=dev))
        caches[n] = c
    sync()
    times = {(n, a): [] for n in names for a in APIS}
    for r in range(ROUNDS + 1):
        for api in APIS:
            hits = present[torch.randint(0, present.numel(), (int(BATCH * 0.6),), device=dev)]
            keys = torch.cat([hits, torch.randint(0, 2**62, (BATCH - hits.numel(),), device=dev)])
            keys = keys[torch.randperm(BATCH, device=dev)].view(torch.uint64)
            values = torch.rand(BATCH, DIM, device=dev)
            order = names if r % 2 == 0 else names[::-1]
            for n in order:
                sync()
                t0 = time.perf_counter()
                call(caches[n], api, keys, values)
                sync()
                if r:
                    times[(n, api)].append(time.perf_counter() - t0)
    for api in APIS:
        row = {"load": load, "api": api}
        for n in names:
            row[n] = round(BATCH / statistics.median(times[(n, api)]) / 2**30, 3)
        print(json.dumps(row), flush=True)
    del caches
    torch.cuda.empty_cache()
