"""`gpuhash bench map` (GPU): the core's newer operations, each beside a ceiling kernel timed in
the same run.

* insert_or_apply (add): rows drawn from a fixed set of keys, applied to a table that holds
  them, against atomicAdd to random words of a buffer as large as the table (bench.cu:
  gh_atomic_add). Results checked against torch.bincount first.
* MultiMap: keys with several copies each; count and find_all of queries that all hit, against
  the random-gather ceiling C_hbm of the same run (a copy found is a gathered entry).
* An embedding table (u64 -> f32x8, values in rows) of 128M capacity filled to load 0.5 and
  0.99: finds and assigns (default insert of present keys) of 1M keys per call, the figure at
  0.99 against the one at 0.5.
"""

from __future__ import annotations

import torch

from gpuhash import HashMap, MultiMap
from gpuhash._common.cuda.launch import launch
from gpuhash.bench.harness import bench_kernel, time_gpu
from gpuhash.bench.map_suite import unique_keys


def apply_versus_atomics(rows: int, keys: int, device: torch.device, *, runs: int) -> dict:
    distinct = unique_keys(keys, torch.uint32, device)
    pick = torch.randint(0, keys, (rows,), device=device)
    batch = distinct.view(torch.int32)[pick].view(torch.uint32)
    ones = torch.ones(rows, dtype=torch.int32, device=device)
    table = HashMap(key_dtype=torch.uint32, value_dtype=torch.int32, capacity=keys,
                    max_load_factor=0.5, device=device)
    inserted = table.insert_or_apply(batch, ones, op="add")
    got, found = table.find(distinct)
    want = torch.bincount(pick, minlength=keys).to(torch.int32)
    # a key no row drew (likely in --quick's shorter batch) must be absent
    assert torch.equal(found, want > 0) and torch.equal(got, want), "insert_or_apply summed wrongly"
    assert int(inserted.sum()) == int((want > 0).sum())
    apply = time_gpu(lambda: table.insert_or_apply(batch, ones, op="add"), runs=runs)

    words = table.spec.num_slots * table.spec.words_per_slot * 2  # the table's bytes / 4
    buffer = torch.zeros(words, dtype=torch.int32, device=device)
    index = torch.randint(0, words, (rows,), device=device).to(torch.int32)
    kernel = bench_kernel("gh_atomic_add", device)
    atomics = time_gpu(lambda: launch(kernel, rows, buffer.data_ptr(), index.data_ptr(), rows,
                                      device=device), runs=runs)
    ceiling = atomics.rate(rows)
    rate = apply.rate(rows)
    return {"rows": rows, "keys": keys, "table_bytes": words * 4,
            "apply_g_per_s": rate, "atomic_add_g_per_s": ceiling, "ratio": rate / ceiling,
            "apply_timing": apply.as_dict(), "atomic_add_timing": atomics.as_dict()}


def multimap_versus_gather(keys: int, copies: int, probes: int, device: torch.device,
                           ceilings: dict, *, runs: int) -> dict:
    distinct = unique_keys(keys, torch.int64, device)
    distinct = distinct[(distinct != -1) & (distinct != -2)]  # slot markers: out of band
    keys = distinct.numel()
    entries = distinct.repeat(copies)
    values = torch.arange(entries.numel(), device=device)
    table = MultiMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=entries.numel(),
                     max_load_factor=0.9, device=device)
    table.insert(entries, values)
    queries = distinct[torch.randint(0, keys, (probes,), device=device)]
    counts = table.count(queries)
    assert bool((counts == copies).all()), "multimap count is wrong"
    rows, index = table.find_all(queries)
    assert rows.numel() == probes * copies
    sample = torch.randperm(rows.numel(), device=device)[:100_000]
    # each value is the entry's row in `entries`, so it names the key it was stored with
    assert torch.equal(entries[table.values[index[sample]]], queries[rows[sample]]), \
        "find_all paired a query with another key's entry"
    count = time_gpu(lambda: table.count(queries), runs=runs)
    find_all = time_gpu(lambda: table.find_all(queries), runs=runs)
    matches = probes * copies
    return {"keys": keys, "copies": copies, "probes": probes,
            "count_g_probes_per_s": count.rate(probes),
            "count_ratio": count.rate(probes) / ceilings["C_hbm"],
            "find_all_g_matches_per_s": find_all.rate(matches),
            "find_all_ratio": find_all.rate(matches) / ceilings["C_hbm"],
            "count_timing": count.as_dict(), "find_all_timing": find_all.as_dict()}


def _embedding_at(load: float, capacity: int, batch: int, device: torch.device, *,
                  runs: int) -> dict:
    table = HashMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,),
                    capacity=capacity, max_load_factor=0.99, growable=False, device=device)
    keys = unique_keys(int(capacity * load), torch.uint64, device)
    for part in keys.split(16 * 2**20):
        table.insert(part, torch.ones((part.numel(), 8), device=device))
    # torch indexes no uint64 tensor on CUDA: pick through a same-width signed view
    pick = keys.view(torch.int64)[torch.randperm(keys.numel(), device=device)[:batch]]
    pick = pick.view(torch.uint64)
    rows = torch.randn((batch, 8), device=device)
    table.insert(pick, rows)
    got, found = table.find(pick)
    assert bool(found.all()) and torch.equal(got, rows), "embedding find is wrong"
    find = time_gpu(lambda: table.find(pick), runs=runs)
    assign = time_gpu(lambda: table.insert(pick, rows), runs=runs)
    return {"entries": len(table), "find_g_per_s": find.rate(batch),
            "assign_g_per_s": assign.rate(batch), "find_timing": find.as_dict(),
            "assign_timing": assign.as_dict()}


def embedding_table(capacity: int, batch: int, device: torch.device, *, runs: int) -> dict:
    """Finds and assigns of ``batch`` present keys in a u64 -> f32x8 table of ``capacity``
    filled to load 0.5 and to 0.99 (one table at a time: the 0.99 one takes 5 GB)."""
    out = {"capacity": capacity, "batch": batch}
    for load in (0.5, 0.99):
        out[str(load)] = _embedding_at(load, capacity, batch, device, runs=runs)
        torch.cuda.empty_cache()
    for op in ("find", "assign"):
        out[f"{op}_0.99_over_0.5"] = out["0.99"][f"{op}_g_per_s"] / out["0.5"][f"{op}_g_per_s"]
    return out


def bare_launch_us(device: torch.device, time_host_calls) -> float:
    """Host time of one launch of an empty kernel through the same launch path."""
    kernel = bench_kernel("gh_noop", device)
    return time_host_calls(lambda: launch(kernel, 1, device=device))


def run(device: torch.device, ceilings: dict, *, quick: bool, runs: int) -> dict:
    scale = 8 if quick else 1
    return {
        "insert_or_apply_add": apply_versus_atomics(100_000_000 // scale, 1_000_000, device,
                                                    runs=runs),
        "multimap": multimap_versus_gather(10_000_000 // scale, 10, 10_000_000 // scale,
                                           device, ceilings, runs=runs),
        "embedding_table": embedding_table(128 * 2**20 // scale, 2**20 // scale, device,
                                           runs=runs),
    }
