"""Insert-kernel variants on the H100, timed side by side: a record of the experiments behind
the defaults. 32M distinct keys into an empty table:
  plain     one gh_insert launch, linear fallback (the duplicates="any" path)
  no-count  the same without the entry counters (what counting costs; not a usable table)
  deferred  gh_insert with defer + gh_insert_deferred: displacement for keys whose two buckets
            are full (the path of batches with distinct keys), without the batch sort
Earlier runs of this script also compared the optimistic first-lane claim and a persistent
grid; both lost (see GH_OPTIMISTIC_CLAIM and launch.py)."""

import torch

import gpuhash as gh
from gpuhash._cuda.compile import load_module
from gpuhash._cuda.launch import launch
from gpuhash.bench.harness import time_gpu
from gpuhash.bench.map_suite import random_values, unique_keys
from gpuhash.engines import cpu as cpu_engine
from gpuhash.engines.cuda import _locks, _table_args, defines

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
        base = defines(state.spec)
        plain = load_module("map.cu", base, 0)
        uncounted = load_module("map.cu", base + (("GH_COUNT", 0),), 0)
        lazy = load_module("map.cu", base + (("GH_LAZY_BUCKET", 1),), 0)
        short_chains = {kicks: load_module("map.cu", base + (("GH_MAX_KICKS", kicks),), 0)
                        for kicks in (8, 32)}
        args = (*_table_args(state), keys.data_ptr(), values.data_ptr(), 0,
                inserted.data_ptr(), n)
        locks = _locks(state)

        def run_plain(module=plain, args=args):
            launch(module.get_kernel("gh_insert"), n, *args, 0, device=device)

        def run_uncounted(module=uncounted, args=args):
            launch(module.get_kernel("gh_insert"), n, *args, 0, device=device)

        second = (*args[:6], keys.data_ptr(), values.data_ptr(), inserted.data_ptr(), n, locks)

        def run_lazy(module=lazy, args=args):
            launch(module.get_kernel("gh_insert"), n, *args, 0, device=device)

        def run_lazy_deferred(module=lazy, args=args, second=second):
            launch(module.get_kernel("gh_insert"), n, *args, 1, device=device)
            launch(module.get_kernel("gh_insert_deferred"), n, *second, device=device)

        def run_deferred(module=plain, args=args, second=second):
            launch(module.get_kernel("gh_insert"), n, *args, 1, device=device)
            launch(module.get_kernel("gh_insert_deferred"), n, *second, device=device)

        variants = [("plain", run_plain), ("lazy", run_lazy), ("no-count", run_uncounted),
                    ("deferred", run_deferred), ("lazy deferred", run_lazy_deferred)]
        variants += [(f"deferred/{kicks} kicks",
                      lambda module=module, args=args, second=second: run_deferred(
                          module, args, second))
                     for kicks, module in short_chains.items()]
        row = []
        for name, run in variants:
            timing = time_gpu(run, setup=table.clear, runs=5)
            if name == "no-count":
                row.append(f"{name} {timing.rate(n):5.2f}")
                continue
            assert len(table) == n and bool(inserted.all()), name
            # keys left past their second bucket (the linear fallback), from a sample
            # a random sample: the batch's first rows went in first, into an emptier table
            pick = torch.randperm(n, device=device)[: 1 << 20]
            sample = keys.view(torch.int32 if keys.element_size() == 4 else torch.int64)[pick]
            sample = sample.view(keys.dtype)
            index, _ = table.find_index(sample)
            bits = sample.view(torch.int32 if sample.element_size() == 4 else torch.int64)
            first, second_b, _, _ = cpu_engine.bucket_choices(state, bits)
            bucket = index // state.spec.bucket_slots
            past = ((bucket != first) & (bucket != second_b)).float().mean().item()
            row.append(f"{name} {timing.rate(n):5.2f} (past b2 {past:.4f})")
        print(f"{kind} load {load} (bucket {state.spec.bucket_slots}):\n  " + "\n  ".join(row))
        del table, state
        torch.cuda.empty_cache()
