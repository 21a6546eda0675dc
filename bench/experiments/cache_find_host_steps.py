"""Where a 1M-key find_index call's wall time goes beyond its kernel, on HKV's workload at load
0.5 (dim 8, 128M slots or CAPACITY): medians of timed calls (host wall clock to a sync, HKV's
method) of
- the whole call, `cache.find_index(keys)`;
- the engine's lookup alone (`gpuhash.cache.cuda.engine.lookup` on the cache's state and raw
  keys);
- the kernel's launch alone with outputs made beforehand;
- a sync of an idle GPU;
- the kernel by CUDA events (back to back);
and the host time of each call queued without a sync (what Python adds before the launch).
It reaches into the CUDA engine (the state, the kernels, the launch) on purpose: those are the
layers it times. Result: bench/results/cache_find_host_steps_h100_054474b.txt.
On the GPU machine, with PYTHONPATH=src:bench/experiments:
    python bench/experiments/cache_find_host_steps.py"""

import os
import statistics
import time

import torch
from _timing import back_to_back

import gpuhash as gh
from gpuhash._common.cuda.launch import launch
from gpuhash.bench.cache_suite import _random_keys
from gpuhash.cache.cuda import engine as cache_cuda

DEV = torch.device("cuda")
BATCH, CALLS = 1 << 20, 200


def wall(call) -> float:
    """Median us of call() + sync, each started on an idle GPU."""
    times = []
    for _ in range(CALLS):
        torch.cuda.synchronize()
        began = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e6


def queued(call) -> float:
    """Median us the host spends in call() with no sync after it (the GPU kept idle)."""
    times = []
    for _ in range(CALLS):
        torch.cuda.synchronize()
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def main() -> None:
    capacity = int(os.environ.get("CAPACITY", 1 << 27))
    cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,),
                        capacity=capacity, device=DEV)
    present = _random_keys(capacity // 2, DEV)
    for part in present.split(BATCH):
        cache.insert_or_assign(part.view(torch.uint64), torch.zeros(part.numel(), 8, device=DEV))
    hits = present[torch.randint(0, present.numel(), (int(BATCH * 0.6),), device=DEV)]
    keys = torch.cat([hits, _random_keys(BATCH - hits.numel(), DEV)])
    keys = keys[torch.randperm(BATCH, device=DEV)].view(torch.uint64)
    bits = keys.view(torch.int64)
    state = cache._state
    kernels, table, device = cache_cuda._launch_info(state)
    index = torch.empty(BATCH, dtype=torch.int64, device=DEV)
    found = torch.empty(BATCH, dtype=torch.bool, device=DEV)

    def bare_launch():
        launch(kernels["lookup_slots"], BATCH, *table, bits.data_ptr(), BATCH, 0, 0, 0, 0, 0,
               0, 0, 0, index.data_ptr(), found.data_ptr(), 0, device=device)

    steps = {
        "find_index": lambda: cache.find_index(keys),
        "engine lookup": lambda: cache_cuda.lookup(state, bits),
        "bare launch": bare_launch,
        "sync alone": lambda: None,
    }
    kernel_us = back_to_back(bare_launch, calls=CALLS) * 1e3
    print(f"kernel by events, back to back: {kernel_us:.1f} us", flush=True)
    for name, call in steps.items():
        print(f"{name:14s} wall {wall(call):6.1f} us, host before the sync {queued(call):5.1f}"
              f" us", flush=True)


if __name__ == "__main__":
    main()
