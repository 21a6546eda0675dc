"""One key held by K of N build rows: JoinBuild then probe of 1M rows, ten of them that key,
wall clock (synchronised) of the second of two rounds, pairs checked. Prints a JSON line per K.

    python join_skew.py [cuda|cpu]        (SKEW_N rows, default 400000; SKEW_K, a list)
Result: bench/results/join_skew_h100_10d1fc3.jsonl (docs/measurements.md, Joins)."""
import json
import os
import sys
import time

import torch

import gpuhash as gh

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
rows = int(os.environ.get("SKEW_N", 400_000))
probe_rows = 1_000_000


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


for copies in (int(k) for k in os.environ.get("SKEW_K", "0,12500,50000,200000").split(",")):
    g = torch.Generator().manual_seed(copies)
    distinct = torch.unique(torch.randint(0, 2**30, (2 * rows,), generator=g))[: rows - copies + 1]
    distinct = distinct[torch.randperm(len(distinct), generator=g)].to(torch.int32) * 2 + 1
    hot = distinct[0].item()
    build = torch.cat([distinct, torch.full((copies,), hot, dtype=torch.int32)])
    build = build[torch.randperm(rows + 1, generator=g)]
    probe = distinct[torch.randint(1, len(distinct), (probe_rows,), generator=g)]
    probe[torch.randperm(probe_rows, generator=g)[:10]] = hot
    build, probe = build.to(device), probe.to(device)
    for _ in range(2):
        sync()
        t0 = time.perf_counter()
        prepared = gh.JoinBuild(build)
        sync()
        t1 = time.perf_counter()
        left, right = prepared.probe(probe)
        sync()
        t2 = time.perf_counter()
    expected = (probe_rows - 10) + 10 * (copies + 1)
    ok = len(left) == expected and bool((build[right.long()] == probe[left.long()]).all())
    print(json.dumps({"K": copies, "N": rows, "build_ms": (t1 - t0) * 1e3,
                      "probe_ms": (t2 - t1) * 1e3, "pairs": len(left), "ok": ok}), flush=True)
