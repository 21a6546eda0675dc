"""In-process A/B of gh.join host time across trees (packages under /tmp/ab/<name>): J1-J3 of
`gpuhash bench join`, rounds alternating trees; per round 30 back-to-back calls, wall per call.
Prints the median (and min) over rounds, ms.
Setup (on the GPU machine), one package copy per tree under its own name:
    mkdir -p /tmp/ab; cp -r <tree>/src/gpuhash /tmp/ab/<name>   (the package's imports
    are relative, so each copy is a separate package sharing nothing but torch)
Machine drift between calls (20-40% for host-bound calls on the H100 machines) then hits
every tree alike; separate processes per tree did not resolve a 20% difference.
"""
import importlib
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.environ.get("AB_DIR", "/tmp/ab"))
names = sys.argv[1:]
mods = {n: importlib.import_module(n) for n in names}
from gpuhash.bench.join_suite import FULL, Shape, make_inputs  # noqa: E402 (after the path)

for shape in ("J1", "J2", "J3"):
    build, probe = make_inputs(Shape(shape, *FULL[shape]), torch.device("cuda"))
    for m in mods.values():
        for _ in range(20):
            m.join(probe, build)
    torch.cuda.synchronize()
    per = {n: [] for n in names}
    for r in range(25):
        for n in (names if r % 2 == 0 else names[::-1]):
            join = mods[n].join
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(30):
                join(probe, build)
            torch.cuda.synchronize()
            per[n].append((time.perf_counter() - t0) / 30 * 1e3)
    print(json.dumps({"join": shape, **{n: [round(statistics.median(v), 4), round(min(v), 4)]
                                        for n, v in per.items()}}), flush=True)
