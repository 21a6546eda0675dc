import torch, gpuhash as gh
from gpuhash.bench.cache_suite import _random_keys
cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,), capacity=16 << 20, device="cuda")
present = _random_keys(8 << 20, torch.device("cuda"))
for part in present.split(1 << 20):
    cache.insert_or_assign(part.view(torch.uint64), torch.zeros(part.numel(), 8, device="cuda"))
keys = torch.cat([present[:600000], _random_keys(448576, torch.device("cuda"))])
keys = keys[torch.randperm(keys.numel(), device="cuda")].view(torch.uint64)
torch.cuda.synchronize()
cache.insert_or_assign(keys, torch.rand(keys.numel(), 8, device="cuda"))
cache.find(keys)
torch.cuda.synchronize()
