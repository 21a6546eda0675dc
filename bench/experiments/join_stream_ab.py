"""In-process A/B of the streamed join (`gpuhash bench join`'s streamed part: host keys 1.5x a
4 GiB budget, bench/join_stream.run_streamed) across trees (packages under /tmp/ab/<name>,
bench/experiments/_inproc.py), trees alternating over ROUNDS rounds (default 2); prints each
run's seconds and fraction of the link ceiling by variant as JSON lines.
On the GPU machine: python bench/experiments/join_stream_ab.py base other"""
import importlib
import json
import os

import torch
from _inproc import trees

mods = trees()
names = list(mods)
for r in range(int(os.environ.get("ROUNDS", "2"))):
    for name in (names if r % 2 == 0 else names[::-1]):
        stream = importlib.import_module(f"{name}.bench.join_stream")
        report = stream.run_streamed(torch.device("cuda"), budget_bytes=4 << 30)
        print(json.dumps({"tree": name, "round": r, **{
            variant: [round(run["seconds"], 3), round(run["of_link_ceiling"], 3),
                      round(run["first_call_seconds"], 3)]
            for variant, run in report["runs"].items()}}), flush=True)
        torch.cuda.empty_cache()
