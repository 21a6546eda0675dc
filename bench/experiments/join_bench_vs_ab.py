"""Why J2 / J3 timed slower in `gpuhash bench join` than in the in-process A/B (seventeenth
session): trees one and new (packages under /tmp/ab, bench/experiments/_inproc.py) timed on
J2 and J3 by the bench's own timer, fresh, after a DuckDB query and 2 s, after the torch sort
peer, and back to back by wall clock. Prints JSON lines.
Results: bench/results/join_bench_vs_ab_h100_98c8bb0.jsonl."""
import importlib
import json
import sys
import time

import torch

sys.path.insert(0, "/tmp/ab")
mods = {n: importlib.import_module(n) for n in ("one", "new")}
suite = importlib.import_module("new.bench.join_suite")
harness = importlib.import_module("new.bench.harness")
device = torch.device("cuda")
harness.warm_up_gpu(device, seconds=5.0)
shapes = {n: suite.make_inputs(suite.Shape(n, *suite.FULL[n]), device) for n in ("J2", "J3")}


def time_all(when):
    for name, (build, probe) in shapes.items():
        for tree, module in mods.items():
            t = harness.time_gpu(lambda m=module, p=probe, b=build: m.join(p, b), runs=7)
            print(json.dumps({"when": when, "join": name, "tree": tree,
                              "median": round(t.median_ms, 4), "min": round(t.min_ms, 4)}),
                  flush=True)


time_all("fresh")
build, probe = shapes["J2"]
suite._duckdb(build.cpu().numpy(), probe.cpu().numpy())()
time.sleep(2)
time_all("after duckdb + 2 s")
harness.time_gpu(lambda: suite._sort_search(build, probe), runs=5)
time_all("after torch sort peer")
for name, (build, probe) in shapes.items():
    for tree, module in mods.items():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(30):
            module.join(probe, build)
        torch.cuda.synchronize()
        print(json.dumps({"when": "back-to-back wall", "join": name, "tree": tree,
                          "ms": round((time.perf_counter() - t0) / 30 * 1e3, 4)}), flush=True)
