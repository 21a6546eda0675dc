"""Where a CacheMap call's time goes on the GPU: a torch.profiler trace of one call of each
API (dim 8, 16M slots or CAPACITY, at load 0.5 or LOAD, 1M keys, 60% present): every kernel
with its duration, and the call's wall time; then each API's host time for a 1K-key call
(HOST=0 leaves it out). APIS=insert_or_assign,find: a subset. Public entry points only.
On the GPU machine: PYTHONPATH=src python bench/experiments/cache_timeline.py
"""

import os
import time

import torch
from torch.profiler import ProfilerActivity, profile

import gpuhash as gh
from gpuhash.bench.cache_suite import APIS, _call, _random_keys

DEVICE = torch.device("cuda")


def main(capacity: int = 16 << 20, batch: int = 1 << 20, dim: int = 8) -> None:
    cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(dim,),
                        capacity=capacity, device=DEVICE)
    present = _random_keys(int(capacity * float(os.environ.get("LOAD", "0.5"))), DEVICE)
    for part in present.split(batch):
        cache.insert_or_assign(part.view(torch.uint64), torch.zeros(part.numel(), dim,
                                                                    device=DEVICE))
    for api in os.environ.get("APIS", ",".join(APIS)).split(","):
        for run in range(3):
            hits = present[torch.randint(0, present.numel(), (int(batch * 0.6),),
                                         device=DEVICE)]
            keys = torch.cat([hits, _random_keys(batch - hits.numel(), DEVICE)])
            keys = keys[torch.randperm(batch, device=DEVICE)].view(torch.uint64)
            values = torch.rand(batch, dim, device=DEVICE)
            torch.cuda.synchronize()
            if run < 2:
                began = time.perf_counter()
                _call(cache, api, keys, values)
                torch.cuda.synchronize()
                wall = (time.perf_counter() - began) * 1e3
                continue
            with profile(activities=[ProfilerActivity.CUDA]) as trace:
                _call(cache, api, keys, values)
                torch.cuda.synchronize()
            kernels = [(e.name[:70], e.time_range.elapsed_us()) for e in trace.events()
                       if e.device_type.name == "CUDA"]
            print(f"{api}: wall {wall:.3f} ms, kernels {sum(us for _, us in kernels):.0f} us: "
                  + "; ".join(f"{name} {us:.0f} us" for name, us in kernels), flush=True)




def host_overhead(calls: int = 300) -> None:
    """Host microseconds per 1K-key call of each API, and where a find's go (cProfile)."""
    import cProfile
    import pstats

    from gpuhash.bench.harness import time_host_calls

    cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,),
                        capacity=1 << 16, device=DEVICE)
    keys = _random_keys(1024, DEVICE).view(torch.uint64)
    values = torch.rand(1024, 8, device=DEVICE)
    cache.insert_or_assign(keys, values)
    print("host us per 1K call: " + "; ".join(
        f"{api} {time_host_calls(lambda api=api: _call(cache, api, keys, values), calls=calls):.1f}"
        for api in APIS), flush=True)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        cache.find(keys)
    torch.cuda.synchronize()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main(capacity=int(os.environ.get("CAPACITY", 16 << 20)))  # CAPACITY=134217728: the bench's
    if os.environ.get("HOST", "1") != "0":
        host_overhead()
