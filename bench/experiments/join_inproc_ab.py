"""In-process A/B of gh.join host time across trees (packages under /tmp/ab/<name>): J1-J3 of
`gpuhash bench join`, rounds alternating trees; per round 30 back-to-back calls, wall per call.
Prints the median (and min) over rounds, ms. AB_SHAPES picks the shapes (default J1,J2,J3;
J4's 100M probe rows take 5 calls a round instead of 30; a name ending in "hit", e.g. J4hit,
draws every probe key from the build keys; one ending in "sparse", "many", "zipf" or "wide" takes
that variant's keys: join_variants._sparse, _many, _zipf, _wide). AB_EVENTS=1 times each call
alone with CUDA events from an idle GPU, as `gpuhash bench join` does, instead of back to
back.
Trees: bench/experiments/_inproc.py.
"""
import importlib
import json
import os
import statistics
import time

import torch
from _inproc import trees

mods = trees()
names = list(mods)
# the inputs from the first tree's suite: no `gpuhash` need be importable beside the trees
suite = importlib.import_module(f"{names[0]}.bench.join_suite")
FULL, Shape, make_inputs = suite.FULL, suite.Shape, suite.make_inputs

for shape in os.environ.get("AB_SHAPES", "J1,J2,J3").split(","):
    calls = 5 if shape[:2] in ("J4", "J5") else 30
    variant = next((v for v in ("sparse", "many", "zipf", "wide") if shape.endswith(v)), None)
    base = shape.removesuffix("hit").removesuffix(variant or "")
    build, probe = make_inputs(Shape(base, *FULL[base]), torch.device("cuda"))
    if shape.endswith("hit"):  # "J4hit": J4 with every probe row matching
        probe = build[torch.randint(0, build.shape[0], probe.shape, device=build.device)]
    elif variant:
        keys = getattr(importlib.import_module(f"{names[0]}.bench.join_variants"), "_" + variant)
        (build,), (probe,) = keys(*FULL[base], torch.Generator().manual_seed(31))
        build, probe = build.cuda(), probe.cuda()
    for m in mods.values():
        for _ in range(20 if calls == 30 else 3):
            m.join(probe, build)
    torch.cuda.synchronize()
    per = {n: [] for n in names}
    if os.environ.get("AB_EVENTS") == "1":
        timer = importlib.import_module(f"{names[0]}.bench.harness").time_gpu
        for r in range(9):
            for n in (names if r % 2 == 0 else names[::-1]):
                per[n].append(timer(lambda join=mods[n].join, p=probe, b=build: join(p, b),
                                    runs=calls).median_ms)
        print(json.dumps({"join": shape, "timer": "events", **{
            n: [round(statistics.median(v), 4), round(min(v), 4)] for n, v in per.items()}}),
            flush=True)
        continue
    for r in range(25):
        for n in (names if r % 2 == 0 else names[::-1]):
            join = mods[n].join
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                join(probe, build)
            torch.cuda.synchronize()
            per[n].append((time.perf_counter() - t0) / calls * 1e3)
    print(json.dumps({"join": shape, **{n: [round(statistics.median(v), 4), round(min(v), 4)]
                                        for n, v in per.items()}}), flush=True)
