"""Insert paths on the GPU, timed side by side through the public API: a record of the
experiments behind the defaults. 32M distinct keys into an empty table, for each duplicate
policy ("any": one insert launch; "last": batch sort, first-bucket pass, displacing pass), and
where the keys sit afterwards. Earlier versions of this script compared kernel switches
(optimistic claim, persistent grid, counters, half-bucket loads, kick limits) and a
table-ordered insert: bench/results/experiments_2026-11-21.txt."""

import torch

import gpuhash as gh
from gpuhash.bench.ceilings import measure as measure_ceilings
from gpuhash.bench.harness import time_gpu
from gpuhash.bench.map_suite import random_values, unique_keys
from gpuhash.engines import cpu as cpu_engine

device = torch.device("cuda")
n = 32 * 2**20
ceilings = measure_ceilings(device)
print(f"C_hbm {ceilings['C_hbm']:.1f} G/s, C_l2 {ceilings['C_l2']:.1f} G/s")


def placement(table, keys) -> str:
    state = table._state
    pick = torch.randperm(n, device=device)[: 1 << 20]  # random: early rows met an emptier table
    bits = keys.view(torch.int32 if keys.element_size() == 4 else torch.int64)[pick]
    index, found = table.find_index(bits.view(keys.dtype))
    assert bool(found.all())
    first, second, _, _ = cpu_engine.bucket_choices(state, bits)
    bucket = index // state.spec.bucket_slots
    in_first = (bucket == first).float().mean().item()
    past = ((bucket != first) & (bucket != second)).float().mean().item()
    return f"in b1 {in_first:.3f}, past b2 {past:.4f}"


for kind, key_dtype, value_dtype in (("u32->u32", torch.uint32, torch.uint32),
                                     ("u64->u64", torch.uint64, torch.uint64)):
    keys = unique_keys(n, key_dtype, device)
    values = random_values(n, value_dtype, (), device)
    for load in (0.5, 0.9, 0.99):
        row = []
        for duplicates in ("any", "last"):
            table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, capacity=n,
                               max_load_factor=load, growable=False, device=device,
                               duplicates=duplicates)
            timing = time_gpu(lambda t=table, k=keys, v=values: t.insert(k, v),
                              setup=table.clear, runs=5)
            got, found = table.find(keys)
            assert len(table) == n and bool(found.all()), duplicates
            assert torch.equal(got.view(torch.uint8), values.view(torch.uint8))
            row.append(f"{duplicates} {timing.rate(n):5.2f} ({placement(table, keys)})")
            del table
            torch.cuda.empty_cache()
        print(f"{kind} load {load}:\n  " + "\n  ".join(row), flush=True)
