import torch, gpuhash as gh
cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1 << 18, device="cuda", policy="custom")
total = 2 * cache.capacity
keys = torch.randint(0, 2**62, (total,), device="cuda")
scores = torch.randint(0, 2**62, (total,), device="cuda")
for part in range(0, total, 1 << 14):
    chunk = slice(part, part + (1 << 14))
    before = len(cache)
    status = cache.insert_or_assign(keys[chunk], torch.zeros(keys[chunk].numel(), device="cuda"), scores=scores[chunk])
    counts = torch.bincount(status.long(), minlength=6).tolist()
    print(f"before {before/cache.capacity:.4f} statuses {counts}", flush=True)
    if part > 20 * (1 << 14): break
