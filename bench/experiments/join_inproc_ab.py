"""In-process A/B of gh.join host time across trees (packages under /tmp/ab/<name>): J1-J3 of
`gpuhash bench join`, rounds alternating trees; per round 30 back-to-back calls, wall per call.
Prints the median (and min) over rounds, ms.
Trees: bench/experiments/_inproc.py.
"""
import json
import statistics
import time

import torch
from _inproc import trees

from gpuhash.bench.join_suite import FULL, Shape, make_inputs

mods = trees()
names = list(mods)

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
