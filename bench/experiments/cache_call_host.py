"""A CacheMap call's host time, the GPU's work made trivial: 1-key batches of every API on a
1M-slot dim-8 cache, back to back (no synchronisation between calls, so the host's time a
call is what is measured), then a cProfile of 3,000 find_index and insert_or_assign calls
(Python functions by own time). On the GPU machine:
PYTHONPATH=src python bench/experiments/cache_call_host.py"""

import cProfile
import pstats
import statistics
import time

import torch

import gpuhash as gh

DEV = torch.device("cuda")
cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,),
                    capacity=1 << 20, device=DEV, policy="lru")
keys = torch.randint(0, 2**62, (1,), device=DEV).view(torch.uint64)
values = torch.rand(1, 8, device=DEV)
calls = {
    "find_index": lambda: cache.find_index(keys), "find": lambda: cache.find(keys),
    "contains": lambda: cache.contains(keys),
    "insert_or_assign": lambda: cache.insert_or_assign(keys, values),
    "assign": lambda: cache.assign(keys, values),
    "find_or_insert": lambda: cache.find_or_insert(keys),
    "find_or_insert_index": lambda: cache.find_or_insert_index(keys),
    "insert_and_evict": lambda: cache.insert_and_evict(keys, values),
    "a torch add_": lambda: values.add_(0),
}
for name, call in calls.items():
    for _ in range(300):
        call()
    torch.cuda.synchronize()
    per = []
    for _ in range(7):
        began = time.perf_counter()
        for _ in range(300):
            call()
        per.append((time.perf_counter() - began) / 300 * 1e6)
        torch.cuda.synchronize()
    print(f"{name}: {statistics.median(per):.1f} us a call on the host", flush=True)
for name in ("find_index", "insert_or_assign"):
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(3000):
        calls[name]()
    profiler.disable()
    torch.cuda.synchronize()
    print(f"--- {name}, 3,000 calls")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
