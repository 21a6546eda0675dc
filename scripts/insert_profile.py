"""One insert of 32M distinct u32 -> u32 keys at load 0.5 by each kernel worth comparing, for
ncu to count memory traffic: seed 000's V3 (plain linear probing, the same-run peer) and the
library's plain insert with 4-slot and 8-slot buckets (GH_LAZY_PIECES as the variant says).
Usage: ncu --kernel-name regex:"gh_insert$|seed_v3_insert" --metrics ... python
scripts/insert_profile.py
"""

import torch

import gpuhash as gh
from gpuhash._cuda.compile import load_module
from gpuhash._cuda.launch import launch
from gpuhash._format import empty_state
from gpuhash.bench.map_suite import random_values, unique_keys
from gpuhash.engines import cuda as cuda_engine

device = torch.device("cuda")
n = 32 * 2**20
keys = unique_keys(n, torch.uint32, device)
keys = torch.where(keys.view(torch.int32) == -1, 12345, keys.view(torch.int32))  # V3's EMPTY
keys = torch.unique(keys)
n = keys.numel()
keys = keys[torch.randperm(n, device=device)]
values = random_values(n, torch.int32, (), device)

capacity = 1 << (2 * n - 1).bit_length()
store = torch.full((capacity,), -1, dtype=torch.int64, device=device)
dropped = torch.zeros(1, dtype=torch.int64, device=device)
v3 = load_module("bench.cu", (), 0).get_kernel("seed_v3_insert")
launch(v3, n, store.data_ptr(), 0, capacity - 1, keys.data_ptr(), values.data_ptr(), n,
       dropped.data_ptr(), device=device)
torch.cuda.synchronize()
print(f"V3: capacity {capacity}, dropped {int(dropped)}")
del store

plain_defines = cuda_engine.defines
for width, pieces in ((4, 1), (8, 0), (8, 2)):
    cuda_engine.defines = lambda spec, p=pieces: plain_defines(spec) + (("GH_LAZY_PIECES", p),)
    table = gh.HashMap(key_dtype=torch.int32, value_dtype=torch.int32, capacity=n,
                       max_load_factor=0.5, growable=False, device=device, duplicates="any")
    spec = table.spec.sized_for(n, bucket_slots=width)
    table._adopt(empty_state(spec, device), growable=False, duplicates="any")
    table.insert(keys, values)
    torch.cuda.synchronize()
    print(f"bucket {width} lazy {pieces}: {len(table)} entries, {spec.num_slots} slots")
    del table
    torch.cuda.empty_cache()
