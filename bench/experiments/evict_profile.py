"""Full-load CacheMap writes, dim 8, 128M slots: with --trace, a torch.profiler trace of
insert_or_assign, insert_and_evict and find (kernel durations); then one more insert_and_evict,
the 135th evict launch of the process, for ncu:
  ncu --kernel-name regex:gh_cache_evict --launch-skip 134 --launch-count 1 --section
  SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis
  python bench/experiments/evict_profile.py
On the GPU machine: PYTHONPATH=src python bench/experiments/evict_profile.py --trace"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import gpuhash as gh

dev = torch.device("cuda")
cap, batch, dim = 1 << 27, 1 << 20, 8
c = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(dim,),
                capacity=cap, device=dev)
present = torch.randint(0, 2**62, (cap,), device=dev)
for part in present.split(batch):
    c.insert_or_assign(part.view(torch.uint64), torch.zeros(part.numel(), dim, device=dev))
def keys():
    hits = present[torch.randint(0, present.numel(), (int(batch * 0.6),), device=dev)]
    k = torch.cat([hits, torch.randint(0, 2**62, (batch - hits.numel(),), device=dev)])
    return k[torch.randperm(batch, device=dev)].view(torch.uint64)
vals = torch.rand(batch, dim, device=dev)
for _ in range(3):
    c.insert_and_evict(keys(), vals)
    c.insert_or_assign(keys(), vals)
torch.cuda.synchronize()
if "--trace" in sys.argv:
    for api in ("insert_or_assign", "insert_and_evict", "find"):
        k = keys()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as tr:
            getattr(c, api)(k, vals) if api != "find" else c.find(k)
            torch.cuda.synchronize()
        ks = [(e.name[:40], round(e.time_range.elapsed_us())) for e in tr.events()
              if e.device_type.name == "CUDA"]
        print(api, ks, flush=True)
c.insert_and_evict(keys(), vals)
torch.cuda.synchronize()
print("done", len(c))
