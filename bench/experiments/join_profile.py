"""Where a large join's time goes (J3 and J4 of `gpuhash bench join`): with --trace, a
torch.profiler trace of one gh.join per shape (every kernel and its duration); then, for ncu,
one more J4 join, whose build and probe launches are the process's last two gh_multi_join ones:
  ncu --kernel-name regex:gh_multi_join --launch-skip <2 x joins before> --launch-count 2
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis
  --section Occupancy python bench/experiments/join_profile.py
(without --trace: 2 joins before the profiled one, so --launch-skip 4). A shape's name among
the arguments (J1-J5) profiles that shape instead of J4.
On the GPU machine: PYTHONPATH=src python bench/experiments/join_profile.py --trace"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

import gpuhash as gh
from gpuhash.bench.join_suite import FULL, Shape, make_inputs

DEVICE = torch.device("cuda")

if "--trace" in sys.argv:
    for name in ("J3", "J4"):
        build, probe = make_inputs(Shape(name, *FULL[name]), DEVICE)
        for _ in range(3):
            gh.join(probe, build)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as trace:
            gh.join(probe, build)
            torch.cuda.synchronize()
        kernels = [(e.name[:48], round(e.time_range.elapsed_us())) for e in trace.events()
                   if e.device_type.name == "CUDA"]
        print(name, kernels, flush=True)
else:
    name = next((a for a in sys.argv[1:] if a in FULL), "J4")
    build, probe = make_inputs(Shape(name, *FULL[name]), DEVICE)
    for _ in range(3):
        gh.join(probe, build)
    torch.cuda.synchronize()
    print("done", flush=True)
