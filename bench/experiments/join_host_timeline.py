"""A small join's host timeline without a profiler: the join's pieces (the plan, the build
side, the build launch, the probe, its launch, what follows) wrapped in timers for this
process only (nothing in the package changes), 300 calls of J1, J2 and J3 after a warm-up; prints
the median time each piece began and ended after gh.join was entered, us, beside the join's
CUDA-event time. On the GPU machine:
PYTHONPATH=src python bench/experiments/join_host_timeline.py"""

import collections
import functools
import importlib
import statistics
import time

import torch

import gpuhash as gh
from gpuhash.bench.join_suite import FULL, Shape, make_inputs
from gpuhash.table.cuda import engine as cuda

J = importlib.import_module("gpuhash.join")
DEVICE = torch.device("cuda", 0)
marks: list[tuple[str, int, int]] = []


def timed(owner, name: str, label: str) -> None:
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        began = time.perf_counter_ns()
        try:
            return inner(*args, **kwargs)
        finally:
            marks.append((label, began, time.perf_counter_ns()))
    setattr(owner, name, wrapper)


for owner, name, label in (
        (J, "_sides", "sides"), (J, "_plan", "plan"), (J.JoinBuild, "_of", "JoinBuild._of"),
        (J._join_pool, "take", "pool take"), (cuda, "multi_join_build", "multi_join_build"),
        (cuda, "launch_cooperative", "launch_cooperative"),
        (J.JoinBuild, "_match", "JoinBuild._match"),
        (J, "_direct_words", "direct words"),
        (cuda, "multi_join_probe", "multi_join_probe"), (cuda, "launch", "launch"),
        (cuda, "read_counters", "read counters"),
        (J._Matches, "assemble", "assemble"), (gh._arrays, "to_kind", "to_kind")):
    timed(owner, name, label)


def main():
    scratch = torch.zeros(1, device=DEVICE)
    for name in ("J1", "J2", "J3"):
        build, probe = make_inputs(Shape(name, *FULL[name]), DEVICE)
        for _ in range(300):
            gh.join(probe, build)
        torch.cuda.synchronize()
        offsets = collections.defaultdict(list)
        totals, gpu = [], []
        for _ in range(300):
            marks.clear()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            entered = time.perf_counter_ns()
            gh.join(probe, build)
            left = time.perf_counter_ns()
            end.record()
            end.synchronize()
            gpu.append(start.elapsed_time(end) * 1e3)
            totals.append((left - entered) / 1e3)
            seen = collections.Counter()
            for label, began, ended in marks:
                seen[label] += 1
                offsets[(label, seen[label])].append(((began - entered) / 1e3,
                                                      (ended - entered) / 1e3))
        adds = []
        for _ in range(100):  # the host's spell: a tiny torch op, timed the same way
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            scratch.add_(1)
            end.record()
            end.synchronize()
            adds.append(start.elapsed_time(end) * 1e3)
        print(f"{name}: gh.join {statistics.median(totals):.1f} us on the host, events "
              f"{statistics.median(gpu):.1f} us (a torch add_ {statistics.median(adds):.1f}); "
              f"pieces (median begin - end after entry, us):")
        rows = sorted(offsets.items(), key=lambda kv: statistics.median(b for b, _ in kv[1]))
        for (label, nth), spans in rows:
            print(f"  {statistics.median(b for b, _ in spans):7.1f} - "
                  f"{statistics.median(e for _, e in spans):7.1f}  {label}"
                  f"{'' if nth == 1 else f' #{nth}'}", flush=True)


if __name__ == "__main__":
    main()
