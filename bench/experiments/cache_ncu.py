"""Kernels of CacheMap for ncu: one insert_or_assign and one find of 1M keys (60% present) on a
u64 -> f32x8 cache of 128M slots at load 0.5. On the GPU machine:
ncu --kernel-name regex:gh_cache --section SpeedOfLight --section Occupancy
    --section WarpStateStats python bench/experiments/cache_ncu.py
"""

import torch

import gpuhash as gh
from gpuhash.bench.cache_suite import _random_keys

DEVICE = torch.device("cuda")
cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,),
                    capacity=128 << 20, device=DEVICE)
present = _random_keys(64 << 20, DEVICE)
for part in present.split(8 << 20):
    cache.insert_or_assign(part.view(torch.uint64), torch.zeros(part.numel(), 8, device=DEVICE))
keys = torch.cat([present[:629146], _random_keys((1 << 20) - 629146, DEVICE)])
keys = keys[torch.randperm(keys.numel(), device=DEVICE)].view(torch.uint64)
torch.cuda.synchronize()
cache.insert_or_assign(keys, torch.rand(keys.numel(), 8, device=DEVICE))
cache.find(keys)
cache.find_index(keys)
torch.cuda.synchronize()
