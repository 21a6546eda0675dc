"""Where a small join's time goes (J1, J2 of `gpuhash bench join`): CUDA-event time of
gh.join, its host time per call, a cProfile of 200 calls (Python functions by own time), and a
torch.profiler trace of one call (every CUDA kernel and runtime call). Public entry points
only. On the GPU machine: PYTHONPATH=src python bench/experiments/join_host.py"""

import cProfile
import pstats
import time

import torch
from torch.profiler import ProfilerActivity, profile

import gpuhash as gh
from gpuhash.bench.harness import time_gpu
from gpuhash.bench.join_suite import FULL, Shape, make_inputs


def main():
    device = torch.device("cuda")
    for name in ("J1", "J2"):
        build, probe = make_inputs(Shape(name, *FULL[name]), device)
        for _ in range(20):
            gh.join(probe, build)
        torch.cuda.synchronize()
        ms = time_gpu(lambda p=probe, b=build: gh.join(p, b), runs=21).median_ms
        began = time.perf_counter()
        for _ in range(200):
            gh.join(probe, build)
        torch.cuda.synchronize()
        per_call = (time.perf_counter() - began) / 200 * 1e3
        print(f"{name}: events {ms:.3f} ms, back-to-back {per_call:.3f} ms a call", flush=True)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(200):
            gh.join(probe, build)
        torch.cuda.synchronize()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(22)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
            gh.join(probe, build)
            torch.cuda.synchronize()
        print(trace.key_averages().table(sort_by="self_cpu_time_total", row_limit=25),
              flush=True)
        kernels = [(e.name[:60], e.time_range.elapsed_us()) for e in trace.events()
                   if e.device_type.name == "CUDA"]
        print("; ".join(f"{k} {us:.0f} us" for k, us in kernels), flush=True)


if __name__ == "__main__":
    main()
