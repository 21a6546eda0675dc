"""Where the streamed join's time goes on the host: a cProfile (main thread, by own time) of
steady-state calls of the out-of-core inner join, beside the host-side floors of its output
(joining pinned pieces into one new tensor; filling fresh host memory; a device-to-host copy
into pageable memory). Run: PYTHONPATH=src python bench/experiments/join_stream_host.py
[--budget-gib 4] [--ratio 1.5]."""

import argparse
import cProfile
import pstats
import time

import torch

import gpuhash as gh
from gpuhash.bench.join_stream import BUILD_ROWS


def seconds(call, runs=2):
    call()
    best = []
    for _ in range(runs):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        best.append(time.perf_counter() - start)
    return min(best)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-gib", type=float, default=4.0)
    parser.add_argument("--ratio", type=float, default=1.5)
    args = parser.parse_args()
    device = torch.device("cuda")
    budget = int(args.budget_gib * 2**30)
    rows = int(args.ratio * budget) // 4
    build = (torch.randperm(BUILD_ROWS, device=device) * 2).to(torch.int32).cpu()
    probe = torch.randint(0, 2 * BUILD_ROWS, (rows,), device=device,
                          dtype=torch.int32).cpu().pin_memory()
    out = gh.join(probe, build, device=device, memory_budget=budget)
    pairs = out[0].shape[0]
    del out
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(2):
        out = gh.join(probe, build, device=device, memory_budget=budget)
        del out
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(14)
    nbytes = pairs * 8
    pieces = [torch.empty(nbytes // 14 // 8, dtype=torch.int64, pin_memory=True)
              for _ in range(14)]
    print(f"one map: {pairs:,} rows, {nbytes / 1e9:.2f} GB", flush=True)
    print(f"cat of 14 pinned pieces into a new tensor: {seconds(lambda: torch.cat(pieces)):.3f} s")
    print(f"empty + fill of a new tensor: "
          f"{seconds(lambda: torch.empty(nbytes // 8, dtype=torch.int64).fill_(1)):.3f} s")
    gpu = torch.empty(nbytes // 8, dtype=torch.int64, device=device)
    print(f"device to new pageable memory: {seconds(lambda: gpu.cpu()):.3f} s")
    pinned = torch.empty(nbytes // 8, dtype=torch.int64, pin_memory=True)
    print(f"device to pinned memory: "
          f"{seconds(lambda: pinned.copy_(gpu, non_blocking=True)):.3f} s")
    print(f"torch threads {torch.get_num_threads()}", flush=True)


if __name__ == "__main__":
    main()
