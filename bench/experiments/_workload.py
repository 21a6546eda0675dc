"""HierarchicalKV's dim-8 workload as the cache experiments build it: a CacheMap of u64 keys
and f32 x dim values filled to a load through insert_or_assign, and a batch of queries of
which 60% are loaded keys (drawn with repeats), the rest random (almost surely absent)."""

import torch

import gpuhash as gh

HIT_RATE = 0.6


def filled_cache(load: float, *, capacity: int, dim: int, batch: int, bucket_slots: int,
                 device: torch.device) -> tuple[gh.CacheMap, torch.Tensor, torch.Tensor]:
    """The cache, its loaded keys (int64) and one batch of queries (uint64)."""
    cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(dim,),
                        capacity=capacity, device=device, policy="lru",
                        bucket_slots=bucket_slots)
    present = torch.randint(0, 2**62, (int(capacity * load),), device=device)
    for part in present.split(batch):
        cache.insert_or_assign(part.view(torch.uint64),
                               torch.rand(part.numel(), dim, device=device))
    hits = present[torch.randint(0, present.numel(), (int(batch * HIT_RATE),), device=device)]
    keys = torch.cat([hits, torch.randint(0, 2**62, (batch - hits.numel(),), device=device)])
    return cache, present, keys[torch.randperm(batch, device=device)].view(torch.uint64)
