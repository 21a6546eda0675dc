"""Peers run in the same process as the map suite: what a user would otherwise reach for.

* torch sort + searchsorted as a read-only "map" (the usual workaround in PyTorch code);
* three plain linear-probing layouts, V1 / V2 / V3, as fixed kernels (--layouts:
  bench/kernels/bench.cu says what each is);
* on the host: the CPU engine against a Python dict on the same keys.
"""

from __future__ import annotations

import torch

from gpuhash import HashMap
from gpuhash._common.cuda.compile import load_module
from gpuhash._common.cuda.launch import launch
from gpuhash.bench.harness import time_cpu, time_gpu, write_back_l2
from gpuhash.bench.map_suite import random_values, same, unique_keys


def sort_searchsorted(n: int, device: torch.device, *, runs: int) -> dict:
    """Build = sort keys and gather values into key order; lookup = searchsorted + gather."""
    keys = unique_keys(n, torch.uint32, device).view(torch.int32)
    values = random_values(n, torch.int32, (), device)
    perm = torch.randperm(n, device=device)
    queries = keys[perm]
    state = {}

    def build():
        order_keys, order = torch.sort(keys)
        state["keys"], state["values"] = order_keys, values[order]

    def lookup():
        pos = torch.searchsorted(state["keys"], queries).clamp_(max=n - 1)
        found = state["keys"][pos] == queries
        return torch.where(found, state["values"][pos], 0), found

    build_time = time_gpu(build, runs=runs)
    got, found = lookup()
    assert bool(found.all()) and same(got, values[perm]), "sort+searchsorted gave wrong values"
    lookup_time = time_gpu(lookup, runs=runs)
    return {"keys": n, "build_g_per_s": build_time.rate(n), "lookup_g_per_s":
            lookup_time.rate(n), "build_timing": build_time.as_dict(),
            "lookup_timing": lookup_time.as_dict()}


def seed_layouts(n: int, device: torch.device, ceiling: float, *, runs: int) -> list[dict]:
    """The three plain layouts at load 0.5 (capacity the power of two at or above 2n)."""
    module = load_module("bench/kernels/bench.cu", (), device.index or 0)
    capacity = 1 << (2 * n - 1).bit_length()
    keys = unique_keys(n, torch.uint32, device).view(torch.int32)
    keys = torch.where(keys == -1, 12345, keys)  # the seed reserves 0xFFFFFFFF
    keys = torch.unique(keys)[: n]
    n = keys.numel()
    keys = keys[torch.randperm(n, device=device)]
    values = random_values(n, torch.int32, (), device)
    out = torch.empty(n, dtype=torch.int32, device=device)
    dropped = torch.zeros(1, dtype=torch.int64, device=device)
    results = []
    for name in ("V1", "V2", "V3"):
        # V1/V2: keys[] then values[] (SoA); V3: one 64-bit word per slot (AoS)
        aos = name == "V3"
        store = torch.empty(capacity, dtype=torch.int64 if aos else torch.int32, device=device)
        side = torch.empty(0 if aos else capacity, dtype=torch.int32, device=device)
        insert_k = module.get_kernel(f"seed_{name.lower()}_insert")
        find_k = module.get_kernel(f"seed_{name.lower()}_find")

        def clear(store=store):  # as the library's inserts: cleared, then written back
            store.fill_(-1)
            dropped.zero_()
            write_back_l2(device, table_bytes=store.numel() * store.element_size())

        def insert(store=store, side=side, kernel=insert_k):
            launch(kernel, n, store.data_ptr(), side.data_ptr(), capacity - 1, keys.data_ptr(),
                   values.data_ptr(), n, dropped.data_ptr(), device=device)

        def find(store=store, side=side, kernel=find_k):
            launch(kernel, n, store.data_ptr(), side.data_ptr(), capacity - 1, keys.data_ptr(),
                   out.data_ptr(), n, device=device)

        insert_time = time_gpu(insert, setup=clear, runs=runs)
        lost = int(dropped.item())
        find()
        correct = float((out == values).float().mean())
        find_time = time_gpu(find, runs=runs)
        results.append({"version": name, "keys": n, "capacity": capacity,
                        "insert_g_per_s": insert_time.rate(n),
                        "find_g_per_s": find_time.rate(n),
                        "find_ratio": find_time.rate(n) / ceiling,
                        "silently_dropped": lost, "hits_correct": correct})
    return results


def cpu_versus_dict(n: int, *, runs: int = 3) -> dict:
    """The CPU engine and a Python dict inserting and finding the same n int64 keys."""
    keys = unique_keys(n, torch.int64, torch.device("cpu"))
    values = torch.randn(n)
    table = HashMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=n)
    insert = time_cpu(lambda: table.insert(keys, values), setup=table.clear, runs=runs)
    got, found = table.find(keys)
    assert bool(found.all()) and torch.equal(got, values)
    find = time_cpu(lambda: table.find(keys), runs=runs)
    key_list, value_list = keys.tolist(), values.tolist()
    holder = {}

    def build():
        holder["d"] = dict(zip(key_list, value_list))

    def lookup():
        get = holder["d"].get
        return [get(k) for k in key_list]

    dict_build = time_cpu(build, runs=runs)
    dict_find = time_cpu(lookup, runs=runs)
    return {
        "keys": n,
        "engine_insert_ms": insert.median_ms, "engine_find_ms": find.median_ms,
        "dict_build_ms": dict_build.median_ms, "dict_find_ms": dict_find.median_ms,
        "insert_speedup": dict_build.median_ms / insert.median_ms,
        "find_speedup": dict_find.median_ms / find.median_ms,
    }
