"""Where a CacheMap call's time goes on HKV's dim-8 workload (1M keys a call, 128M slots):
for find_index, find and insert_or_assign at loads 0.5 and 1.0, CUDA-event time, host time a
call back to back, a cProfile of 100 calls (Python functions by own time) and a torch.profiler
trace of one call (every kernel). Public entry points only.
On the GPU machine: PYTHONPATH=src python bench/experiments/cache_host.py"""

import cProfile
import pstats
import time

import torch
from torch.profiler import ProfilerActivity, profile

import gpuhash as gh
from gpuhash.bench.harness import time_gpu

BATCH, DIM, CAP = 1 << 20, 8, 1 << 27
dev = torch.device("cuda")
def measure(load: float) -> None:
    cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(DIM,),
                        capacity=CAP, device=dev, policy="lru", bucket_slots=128)
    present = torch.randint(0, 2**62, (int(CAP * load),), device=dev)
    for part in present.split(BATCH):
        cache.insert_or_assign(part.view(torch.uint64), torch.zeros(part.numel(), DIM, device=dev))
    keys = torch.cat([present[:int(BATCH * 0.6)],
                      torch.randint(0, 2**62, (BATCH - int(BATCH * 0.6),), device=dev)])
    keys = keys.view(torch.uint64)
    values = torch.ones(BATCH, DIM, device=dev)
    calls = {"find_index": lambda: cache.find_index(keys), "find": lambda: cache.find(keys),
             "insert_or_assign": lambda: cache.insert_or_assign(keys, values)}
    for name, call in calls.items():
        for _ in range(10):
            call()
        torch.cuda.synchronize()
        ms = time_gpu(call, runs=21).median_ms
        began = time.perf_counter()
        for _ in range(100):
            call()
        torch.cuda.synchronize()
        per_call = (time.perf_counter() - began) / 100 * 1e3
        print(f"load {load} {name}: events {ms:.3f} ms, back-to-back {per_call:.3f} ms a call "
              f"({BATCH / per_call / 1e6 / 1.073741824:.2f} B-KV/s)", flush=True)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(100):
            call()
        torch.cuda.synchronize()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(14)
        with profile(activities=[ProfilerActivity.CUDA]) as trace:
            call()
            torch.cuda.synchronize()
        kernels = [(e.name[:50], e.time_range.elapsed_us()) for e in trace.events()
                   if e.device_type.name == "CUDA"]
        print("KERNELS " + "; ".join(f"{k} {us:.0f} us" for k, us in kernels), flush=True)


for load in (0.5, 1.0):
    measure(load)
    torch.cuda.empty_cache()
