"""J1 (100K x 1M) in `gpuhash bench join` read 0.244 ms against 0.13-0.15 in-process: gh.join
of J1 timed as the benchmark times it (CUDA events, time_gpu) first in a fresh process, after
the suite's 15 s GPU warm-up, after 2 s idle, right after and 2 s after a DuckDB query, and by
the benchmark's own run_shape. On the GPU machine (DuckDB installed):
PYTHONPATH=src python bench/experiments/join_first_calls.py"""
import time

import torch

import gpuhash as gh
from gpuhash.bench.harness import time_gpu, warm_up_gpu
from gpuhash.bench.join_suite import FULL, Shape, _duckdb, make_inputs, run_shape

dev = torch.device("cuda", 0)
b1, p1 = make_inputs(Shape("J1", *FULL["J1"]), dev)


def t():
    return time_gpu(lambda: gh.join(p1, b1), runs=7)


print("fresh", t().as_dict(), flush=True)
warm_up_gpu(dev, seconds=15.0)
print("after warm-up", t().as_dict(), flush=True)
time.sleep(2)
print("after 2 s", t().as_dict(), flush=True)
q = _duckdb(b1.cpu().numpy(), p1.cpu().numpy())
q()
print("right after duckdb", t().as_dict(), flush=True)
time.sleep(2)
print("2 s after duckdb", t().as_dict(), flush=True)
r = run_shape(Shape("J1", *FULL["J1"]), dev, runs=5)
print("run_shape", r["gpuhash"], flush=True)
print("again", t().as_dict(), flush=True)
