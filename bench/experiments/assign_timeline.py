"""Why a 1M-key assign into a u64 -> f32x8 table at load 0.99 times so differently by CUDA events
around one call (the benchmark's way) and by wall clock over calls back to back: both timings of
the same call in one process, then a torch.profiler trace of three calls (kernels, their gaps,
and the host operations between them). Public entry points only.
On the GPU machine: PYTHONPATH=src python bench/experiments/assign_timeline.py
"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

import gpuhash as gh
from gpuhash.bench.harness import time_gpu
from gpuhash.bench.harness import time_wall_ms as wall_ms
from gpuhash.bench.map_suite import unique_keys

DEVICE = torch.device("cuda")




def table_at(load: float, capacity: int, batch: int):
    table = gh.HashMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,),
                       capacity=capacity, max_load_factor=0.99, growable=False, device=DEVICE)
    keys = unique_keys(int(capacity * load), torch.uint64, DEVICE)
    for part in keys.split(16 << 20):
        table.insert(part, torch.ones((part.numel(), 8), device=DEVICE))
    pick = keys.view(torch.int64)[torch.randperm(keys.numel(), device=DEVICE)[:batch]]
    return table, pick.view(torch.uint64), torch.randn((batch, 8), device=DEVICE)


def one_load(load: float, capacity: int, batch: int) -> None:
    table, pick, rows = table_at(load, capacity, batch)
    table.insert(pick, rows)
    events = time_gpu(lambda: table.insert(pick, rows), runs=9)
    wall = wall_ms(lambda: table.insert(pick, rows))
    print(f"load {load}: events median {events.median_ms:.3f} ms, wall {wall:.3f} ms",
          flush=True)
    if load < 0.99:
        return
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        for _ in range(3):
            table.insert(pick, rows)
        torch.cuda.synchronize()
    print(trace.key_averages().table(sort_by="cuda_time_total", row_limit=25))
    timeline = sorted((e for e in trace.events() if e.device_type.name == "CUDA"),
                      key=lambda e: e.time_range.start)
    first = timeline[0].time_range.start if timeline else 0
    for e in timeline:
        print(f"  {e.time_range.start - first:9.1f} us  {e.time_range.elapsed_us():8.1f}"
              f" us  {e.name[:90]}")


def main(capacity: int = 128 << 20, batch: int = 1 << 20) -> None:
    for load in (0.5, 0.99):
        one_load(load, capacity, batch)
        torch.cuda.empty_cache()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
