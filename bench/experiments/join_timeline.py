"""The timeline of one small join (J1, J2): a torch.profiler trace of 30 gh.join calls after a
warm-up, each inside a record_function, reduced to when each of its host calls (launches, the
copy, the synchronisation) and GPU kernels began and ended relative to the join's start: where
its time goes between host and GPU. Prints the median offsets (us) over the calls and writes
the trace to $OUT or /tmp. On the GPU machine:
PYTHONPATH=src python bench/experiments/join_timeline.py"""

import collections
import json
import os
import statistics

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import gpuhash as gh
from gpuhash.bench.join_suite import FULL, Shape, make_inputs

DEVICE = torch.device("cuda", 0)
KEEP = ("cuLaunchKernelEx", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize",
        "cudaLaunchKernel", "gh_", "Memcpy", "aten::empty", "aten::zeros")


def timeline(name: str) -> None:
    build, probe = make_inputs(Shape(name, *FULL[name]), DEVICE)
    for _ in range(300):
        gh.join(probe, build)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(30):
            with record_function("JOIN"):
                gh.join(probe, build)
        torch.cuda.synchronize()
    path = os.path.join(os.environ.get("OUT", "/tmp"), f"join_timeline_{name}.json")
    prof.export_chrome_trace(path)
    with open(path) as trace:
        events = json.load(trace)["traceEvents"]
    joins = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("name") == "JOIN" and e.get("ph") == "X"
                   and e.get("cat") != "gpu_user_annotation")
    offsets = collections.defaultdict(list)
    for e in events:
        if e.get("ph") != "X" or not any(k in e.get("name", "") for k in KEEP):
            continue
        for number, (start, end) in enumerate(joins):
            if start <= e["ts"] <= end + 200:  # GPU work may end after the host's span
                seen = offsets[number]
                seen.append((e["name"][:48], e["ts"] - start, e["ts"] + e["dur"] - start))
                break
    per_name = collections.defaultdict(list)
    for seen in offsets.values():
        counts = collections.Counter()
        for label, begin, end in seen:
            counts[label] += 1
            per_name[(label, counts[label])].append((begin, end))
    print(f"{name}: host span of a join {statistics.median(e - s for s, e in joins):.1f} us "
          f"(median of {len(joins)}); offsets from its start, us (median begin - end):")
    for (label, nth), spans in sorted(per_name.items(),
                                       key=lambda kv: statistics.median(b for b, _ in kv[1])):
        print(f"  {statistics.median(b for b, _ in spans):7.1f} - "
              f"{statistics.median(e for _, e in spans):7.1f}  {label} #{nth} ({len(spans)})")


if __name__ == "__main__":
    for shape in ("J1", "J2"):
        timeline(shape)
