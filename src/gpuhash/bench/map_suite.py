"""`gpuhash bench map`: HashMap insert / find / find_index across sizes, loads and types.

Every configuration gets fresh random unique keys, a table sized to the exact load factor,
results checked (hits return the right values, misses are all missing) before any time
counts, and probe statistics read off the table itself. Figures are divided by the ceilings
measured in the same run (ceilings.py). Inserts start from a cleared table whose clear has
been written back from L2 (unless the table fits there).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpuhash import HashMap
from gpuhash.bench.harness import time_gpu, write_back_l2
from gpuhash.table.cpu import engine as cpu_engine

TYPES = {
    "u32->u32": (torch.uint32, torch.uint32, ()),
    "u64->u64": (torch.uint64, torch.uint64, ()),
    "u32->f32x8": (torch.uint32, torch.float32, (8,)),
    "u64->f32x8": (torch.uint64, torch.float32, (8,)),
}
LOADS = (0.5, 0.8, 0.9, 0.99)
L2_QUERIES = 64 * 2**20  # queries per call for L2-resident tables


@dataclass(frozen=True)
class Config:
    kind: str
    keys: int
    load: float


def plan(*, quick: bool) -> list[Config]:
    sizes = (2**20, 8 * 2**20) if quick else (2**20, 32 * 2**20)
    kinds = ("u32->u32", "u64->u64") if quick else tuple(TYPES)
    loads = (0.5, 0.9) if quick else LOADS
    return [Config(kind, n, load) for n in sizes for kind in kinds for load in loads]


def unique_keys(count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``count`` distinct random keys in random order (sentinels included in the domain)."""
    wide = dtype in (torch.int64, torch.uint64)
    low, high = (-(2**63), 2**63 - 1) if wide else (0, 2**32)
    draw = int(count * 1.05) + 1024
    keys = torch.unique(torch.randint(low, high, (draw,), dtype=torch.int64, device=device))
    while keys.numel() < count:  # vanishingly rare: collisions ate the 5% margin
        more = torch.randint(low, high, (draw,), dtype=torch.int64, device=device)
        keys = torch.unique(torch.cat([keys, more]))
    keys = keys[torch.randperm(keys.numel(), device=device)[:count]]
    if wide:
        return keys.view(dtype)
    return torch.where(keys >= 2**31, keys - 2**32, keys).to(torch.int32).view(dtype)


def random_values(count: int, dtype: torch.dtype, shape: tuple, device) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(count, *shape, device=device).to(dtype)
    wide = dtype.itemsize == 8
    raw = torch.randint(-(2**62) if wide else -(2**31), 2**62 if wide else 2**31 - 1,
                        (count, *shape), dtype=torch.int64 if wide else torch.int32,
                        device=device)
    return raw.view(dtype)


_RAW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def take(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """tensor[index] for any dtype (torch cannot index uint32/uint64 tensors on CUDA)."""
    return tensor.view(_RAW[tensor.element_size()])[index].view(tensor.dtype)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality for any dtype (torch lacks == for some unsigned types on CUDA)."""
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8),
                                              b.contiguous().view(torch.uint8))


def probe_stats(table: HashMap, hits: torch.Tensor, misses: torch.Tensor) -> dict:
    """Buckets a hit reads on average, and how many misses stop at their first bucket."""
    state = table._state
    spec = state.spec
    bits = torch.int32 if spec.key_bytes == 4 else torch.int64
    hit_bits, miss_bits = hits.view(bits), misses.view(bits)
    index, found = table.find_index(hits)
    assert bool(found.all())
    width = spec.bucket_slots
    steps = cpu_engine.bucket_reads(state, hit_bits, index // width)
    first_m, _, flag, _ = cpu_engine.bucket_choices(state, miss_bits)
    lanes = torch.arange(width, device=first_m.device)
    words = state.key_view()[(first_m * width)[:, None] + lanes]
    empty = spec.empty_key - (1 << 8 * spec.key_bytes)
    full = ~(words == empty).any(1)
    flagged = cpu_engine.overflow_flag(state, flag)
    return {
        "hit_buckets_mean": float(steps.float().mean()),
        "hit_buckets_max": int(steps.max()),
        "hits_in_first_bucket": float((steps == 1).float().mean()),
        "misses_stopping_at_first_bucket": float((~(full & flagged)).float().mean()),
    }


def table_bytes(table: HashMap) -> int:
    return sum(t.numel() * t.element_size() for t in table._state.tensors().values())


def emptied(table: HashMap):
    """An insert's setup: the table cleared, and (if larger than L2) the clear written back
    from L2 (harness.write_back_l2)."""
    def setup():
        table.clear()
        write_back_l2(table.device, table_bytes=table_bytes(table))
    return setup


def run_config(config: Config, device: torch.device, ceilings: dict, *, runs: int) -> dict:
    """Measure one configuration; raises if any result is wrong."""
    key_dtype, value_dtype, shape = TYPES[config.kind]
    n = config.keys
    keys = unique_keys(2 * n, key_dtype, device)
    hits, misses = keys[:n], keys[n:]
    values = random_values(n, value_dtype, shape, device)
    options = dict(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                   capacity=n, max_load_factor=config.load, growable=False, device=device)
    fast = HashMap(duplicates="any", **options)  # no sort, no displacement
    insert = time_gpu(lambda t=fast: t.insert(hits, values), setup=emptied(fast), runs=runs)
    assert len(fast) == n, f"{config}: {len(fast)} entries after inserting {n}"
    del fast
    # finds run on a table built the default way (dict semantics: sort, then displacement)
    table = HashMap(**options)
    insert_last = time_gpu(lambda t=table: t.insert(hits, values), setup=emptied(table),
                           runs=runs)
    assert len(table) == n, f"{config}: {len(table)} entries after inserting {n}"

    resident = table_bytes(table) <= 0.8 * torch.cuda.get_device_properties(device).L2_cache_size
    queries = L2_QUERIES if n <= 2**20 else n
    pick = (torch.randint(0, n, (queries,), device=device) if queries != n
            else torch.randperm(n, device=device))
    hit_queries, miss_queries = take(hits, pick), take(misses, pick)
    got, found = table.find(hit_queries)
    assert bool(found.all()) and same(got, take(values, pick)), f"{config}: wrong results"
    _, found = table.find(miss_queries)
    assert not bool(found.any()), f"{config}: a miss was found"
    index, found = table.find_index(hit_queries)
    assert bool(found.all()) and same(take(table.values, index), take(values, pick))

    find_hit = time_gpu(lambda t=table: t.find(hit_queries), runs=runs)
    find_miss = time_gpu(lambda t=table: t.find(miss_queries), runs=runs)
    find_index_hit = time_gpu(lambda t=table: t.find_index(hit_queries), runs=runs)
    sample = torch.randperm(n, device=device)[: 2**20]  # not the first rows: they went in first
    stats = probe_stats(table, take(hits, sample), take(misses, sample))
    size = table_bytes(table)
    slots = table.spec.num_slots
    bucket_slots = table.spec.bucket_slots
    del table

    ceiling = ceilings["C_l2"] if resident else ceilings["C_hbm"]

    def figure(timing, items):
        rate = timing.rate(items)
        return {"g_per_s": rate, "ratio": rate / ceiling, "timing": timing.as_dict()}

    return {
        "kind": config.kind, "keys": n, "load": n / slots, "nominal_load": config.load,
        "layout": HashMap(key_dtype=key_dtype, value_dtype=value_dtype,
                          value_shape=shape).spec.layout,
        "resident": "L2" if resident else "HBM", "queries": queries,
        "bucket_slots": bucket_slots,
        "insert": figure(insert, n), "insert_dict_semantics": figure(insert_last, n),
        "find_hit": figure(find_hit, queries), "find_miss": figure(find_miss, queries),
        "find_index_hit": figure(find_index_hit, queries),
        "table_bytes": size, "bytes_per_entry": size / n, "probes": stats,
    }
