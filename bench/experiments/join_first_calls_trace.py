"""How a process's first joins slow down J1 (the benchmark's first shape read 0.24 ms against
0.14-0.15 later in a process): CUDA-event time of each of the first 3,000 gh.join calls of J1
in a fresh process, as medians of windows of 200 calls, beside a tiny torch op timed the same
way in between (a process-wide effect would show in both), then after a 2 s pause.
On the GPU machine: PYTHONPATH=src python bench/experiments/join_first_calls_trace.py"""

import statistics
import time

import torch

import gpuhash as gh
from gpuhash.bench.join_suite import FULL, Shape, make_inputs

DEVICE = torch.device("cuda", 0)
WINDOW = 200


def events(call) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3  # us


def trace(label: str, calls: int, build, probe, small) -> None:
    joins, ops, walls = [], [], []
    for _ in range(calls):
        began = time.perf_counter()
        joins.append(events(lambda: gh.join(probe, build)))
        walls.append((time.perf_counter() - began) * 1e6)
        ops.append(events(lambda: small.add_(1)))
    for at in range(0, calls, WINDOW):
        window = slice(at, at + WINDOW)
        join, wall = statistics.median(joins[window]), statistics.median(walls[window])
        print(f"{label} calls {at:5d}-{at + WINDOW - 1:5d}: join events {join:6.1f} us, wall "
              f"{wall:6.1f} us; torch add_ {statistics.median(ops[window]):5.1f} us", flush=True)


def main():
    build, probe = make_inputs(Shape("J1", *FULL["J1"]), DEVICE)
    small = torch.zeros(16, device=DEVICE)
    trace("fresh", 3000, build, probe, small)
    time.sleep(2)
    trace("after 2 s idle", 600, build, probe, small)


if __name__ == "__main__":
    main()
