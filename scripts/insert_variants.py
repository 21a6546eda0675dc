"""Insert-kernel variants on the H100, timed side by side (a record of the experiment behind the
default): the optimistic first-lane claim on or off, and a persistent grid that loops over rows
against one thread per row. 32M keys, `duplicates="any"` path (one kernel, no sort)."""

import torch

import gpuhash as gh
from gpuhash._cuda.compile import load_module
from gpuhash._cuda.launch import launch
from gpuhash.bench.harness import time_gpu
from gpuhash.bench.map_suite import random_values, unique_keys
from gpuhash.engines.cuda import _table_args, defines

device = torch.device("cuda")
n = 32 * 2**20
for kind, key_dtype, value_dtype in (("u32->u32", torch.uint32, torch.uint32),
                                     ("u64->u64", torch.uint64, torch.uint64)):
    keys = unique_keys(n, key_dtype, device)
    values = random_values(n, value_dtype, (), device)
    inserted = torch.empty(n, dtype=torch.bool, device=device)
    for load in (0.5, 0.9, 0.99):
        table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, capacity=n,
                           max_load_factor=load, growable=False, device=device,
                           duplicates="any")
        state = table._state
        row = []
        for optimistic in (0, 1):
            module = load_module("map.cu", defines(state.spec) + (("GH_OPTIMISTIC_CLAIM",
                                                                   optimistic),), 0)
            kernel = module.get_kernel("gh_insert")
            args = (*_table_args(state), keys.data_ptr(), values.data_ptr(), 0,
                    inserted.data_ptr(), n, 0)
            for persistent in (True, False):
                def run(kernel=kernel, persistent=persistent, args=args):
                    launch(kernel, n, *args, device=device, persistent=persistent)
                timing = time_gpu(run, setup=table.clear, runs=5)
                assert len(table) == n and bool(inserted.all())
                row.append(f"opt={optimistic} {'persistent' if persistent else 'per-row  '}"
                           f" {timing.rate(n):5.2f}")
        print(f"{kind} load {load}: " + " | ".join(row))
        del table
        torch.cuda.empty_cache()
