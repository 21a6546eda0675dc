"""Where the host time of a small find goes (run on the GPU machine)."""

import cProfile
import pstats
import time

import torch

import gpuhash as gh

table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1 << 16,
                   device="cuda")
keys = torch.arange(1024, device="cuda")
table.insert(keys, torch.ones(1024, device="cuda"))
for _ in range(200):
    table.find(keys)
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(2000):
    table.find(keys)
torch.cuda.synchronize()
print(f"find 1K: {(time.perf_counter() - start) / 2000 * 1e6:.1f} us per call")
start = time.perf_counter()
for _ in range(2000):
    torch.empty(1024, device="cuda")
print(f"torch.empty alone: {(time.perf_counter() - start) / 2000 * 1e6:.1f} us")
profile = cProfile.Profile()
profile.enable()
for _ in range(2000):
    table.find(keys)
profile.disable()
torch.cuda.synchronize()
pstats.Stats(profile).sort_stats("tottime").print_stats(14)
