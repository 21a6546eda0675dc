"""``gpuhash bench cache``: CacheMap on HierarchicalKV's benchmark workload, and the bucket shape's
trade-off between find speed and eviction quality.

The workload (HKV's benchmark, as PERFORMANCE.md records it): u64 keys, f32 x dim values,
capacity 128M (64M for dim 64), 1,048,576 keys per call of which 60% are present, LRU, the
cache filled to load 0.5, 0.75 and 1.0 (full: inserts evict). Each call gets a fresh batch
(made before its timing starts). Two timings, each in calls of its own: host wall clock from
the call to the end of a device synchronisation (HKV's method) and CUDA events around the
call; B-KV/s counts 2^30 keys. Below full load the keys a timed write added are erased after
its timing, so every call meets the cache at the load it is labelled with. HKV's own
figures (H100, dim 8) are printed beside ours; they were measured by HKV, not in this run.
"""

from __future__ import annotations

import statistics
import time

import torch

from gpuhash._common.cuda.launch import launch
from gpuhash.bench.harness import bench_kernel, time_gpu, warm_up_gpu
from gpuhash.bench.progress import Step, quiet
from gpuhash.cache.api import CacheMap

BATCH = 1 << 20
HIT_RATE = 0.6
LOADS = (0.5, 0.75, 1.0)
APIS = ("insert_or_assign", "find", "find_or_insert", "assign", "find_index",
        "find_or_insert_index", "insert_and_evict")
WRITES = ("insert_or_assign", "find_or_insert", "find_or_insert_index", "insert_and_evict")
# the writes timed again with unique=True (the caller vouches the batch repeats no key, as
# HKV's benchmark batches do not), under "<api>:unique"
UNIQUE = ("insert_or_assign", "find_or_insert", "assign", "find_or_insert_index",
          "insert_and_evict")
# HierarchicalKV's benchmark at its commit ae24eec on an H100 80GB HBM3, dim 8, B-KV/s at load
# 0.5 / 0.75 / 1.0 (PERFORMANCE.md; "find_index" is HKV's find*, "find_or_insert_index" its
# find_or_insert*)
HKV_H100_DIM8 = {
    "insert_or_assign": (1.783, 1.745, 1.251), "find": (3.369, 3.633, 3.851),
    "find_or_insert": (1.831, 1.796, 1.084), "assign": (2.902, 2.775, 2.727),
    "find_index": (5.721, 5.297, 4.571), "find_or_insert_index": (1.958, 1.844, 1.183),
    "insert_and_evict": (1.654, 1.672, 0.761),
}


def _random_keys(count: int, device: torch.device) -> torch.Tensor:
    # 62 random bits: clear of the two reserved keys, and repeats are negligible
    return torch.randint(0, 2**62, (count,), device=device)


def _call(cache: CacheMap, api: str, keys: torch.Tensor, values: torch.Tensor):
    api, _, unique = api.partition(":")
    write = {"unique": True} if unique else {}
    if api == "insert_or_assign":
        return cache.insert_or_assign(keys, values, **write)
    if api == "insert_and_evict":
        return cache.insert_and_evict(keys, values, **write)
    if api == "assign":
        return cache.assign(keys, values, **write)
    if api == "find":
        return cache.find(keys)
    if api == "find_index":
        return cache.find_index(keys)
    if api == "find_or_insert":
        return cache.find_or_insert(keys, **write)
    return cache.find_or_insert_index(keys, **write)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_api(cache: CacheMap, api: str, present: torch.Tensor, batch: int, dim: int,
              runs: int, *, restore: bool) -> dict:
    """Host wall clock around call and sync (HKV's method) and CUDA events around the call,
    each a median over ``runs`` calls of fresh batches. The two are taken in separate calls
    (alternating): torch's event record costs host time that HKV's timer does not pay.
    ``restore``:
    erase the new keys of each batch after its call (untimed), so the load stays put."""
    device = cache.device
    wall, events = [], []
    timers = (False, True) if device.type == "cuda" else (False,)
    for i in range(runs + 1):  # the first run of each kind warms up
        for by_events in timers:
            hits = present[torch.randint(0, present.numel(), (int(batch * HIT_RATE),),
                                         device=device)]
            fresh = _random_keys(batch - hits.numel(), device)
            keys = torch.cat([hits, fresh])
            keys = keys[torch.randperm(batch, device=device)].view(torch.uint64)
            values = torch.rand(batch, dim, device=device)
            _sync(device)
            if by_events:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                start.record()
                _call(cache, api, keys, values)
                end.record()
                end.synchronize()
                if i:
                    events.append(start.elapsed_time(end))
            else:
                began = time.perf_counter()
                _call(cache, api, keys, values)
                _sync(device)
                if i:
                    wall.append((time.perf_counter() - began) * 1e3)
            if restore and api.partition(":")[0] in WRITES:
                cache.erase(fresh.view(torch.uint64))
    wall_ms = statistics.median(wall)
    event_ms = statistics.median(events) if events else float("nan")
    return {"wall_ms": wall_ms, "event_ms": event_ms,
            "bkv_per_s": batch / (wall_ms * 1e-3) / 2**30,
            "bkv_per_s_events": batch / (event_ms * 1e-3) / 2**30}


def _count(n: int) -> str:
    return f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K"


def workload(dim: int, capacity: int, device: torch.device, *, batch: int, runs: int,
             bucket_slots: int, max_hbm_bytes: int | None = None, step: Step = quiet) -> dict:
    """Every API at every load of HKV's workload, for one value width (with max_hbm_bytes:
    the value rows past it in host memory); ``step`` is told of each load as it starts."""
    out: dict = {"dim": dim, "capacity": capacity, "batch": batch,
                 "bucket_slots": bucket_slots, "max_hbm_bytes": max_hbm_bytes, "loads": {}}
    for load in LOADS:
        step(f"dim {dim}, {_count(capacity)} slots, {bucket_slots}-slot buckets"
             f"{'' if max_hbm_bytes is None else ', half in host memory'}, load {load}")
        cache = CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(dim,),
                         capacity=capacity, device=device, policy="lru",
                         bucket_slots=bucket_slots, max_hbm_bytes=max_hbm_bytes)
        present = _random_keys(int(cache.capacity * load), device)
        for part in present.split(batch):
            cache.insert_or_assign(part.view(torch.uint64),
                                   torch.zeros(part.numel(), dim, device=device))
        out.update(_footprint(cache))
        row: dict = {"entries_before": len(cache)}
        # the share of the loaded keys still present (LRU evicts the oldest once full): the
        # hit rate of the timed calls is HIT_RATE times this
        sample = present[torch.randint(0, present.numel(), (batch,), device=device)]
        _, found = cache.find(sample.view(torch.uint64))
        row["present_found"] = float(found.float().mean())
        for api in (*APIS, *(f"{name}:unique" for name in UNIQUE)):
            row[api] = _time_api(cache, api, present, batch, dim, runs, restore=load < 1.0)
        row["entries_after"] = len(cache)
        row["bytes_per_entry"] = out["bytes_per_slot"] * cache.capacity / row["entries_after"]
        if max_hbm_bytes is not None:
            row["host_gather"] = _host_gather(cache, present, batch, runs)
        out["loads"][str(load)] = row
        del cache
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def _footprint(cache: CacheMap) -> dict:
    """Bytes a slot takes: the metadata (key, score, digest: HierarchicalKV keeps the same 17
    B a slot; on CUDA also the index from key to slot), and with the value row, counted from
    the cache's own tensors."""
    state = cache._state
    meta = sum(t.element_size() * t.numel() for t in (state.keys, state.scores, state.digests))
    index = state.caches.get("_cuda_index")
    index_bytes = 0 if index is None else index.element_size() * index.numel()
    rows = state.values if state.host_values is None else state.host_values
    row_bytes = rows.element_size() * rows[0].numel()
    return {"metadata_bytes_per_slot": (meta + index_bytes) / cache.capacity,
            "index_bytes_per_slot": index_bytes / cache.capacity,
            "bytes_per_slot": (meta + index_bytes) / cache.capacity + row_bytes}


def _host_gather(cache: CacheMap, present: torch.Tensor, batch: int, runs: int) -> dict:
    """``values[index]`` of a batch of present keys' slots (about half of them in host
    memory), and of its host rows alone beside two ceilings measured now on the same rows: the
    row-gather ceiling (a thread per 16-byte word, bench.cu's gh_gather_rows) and a bulk copy
    of as many bytes from pinned host memory (the link)."""
    device = cache.device
    keys = present[torch.randint(0, present.numel(), (batch,), device=device)]
    index, found = cache.find_index(keys.view(torch.uint64))
    index = index[found]
    values = cache.values
    host_slots = index[index >= values.hbm_slots]
    host_rows = host_slots.numel()
    row_bytes = values.hbm.element_size() * values.hbm[0].numel()
    link_bytes = host_rows * row_bytes
    mixed = time_gpu(lambda: values[index], runs=runs)
    ours = time_gpu(lambda: values[host_slots], runs=runs)
    words = row_bytes // 16
    table_index = (host_slots - values.hbm_slots).contiguous()
    out = torch.empty(host_rows * words * 16, dtype=torch.uint8, device=device)
    kernel = bench_kernel("gh_gather_rows", device)
    ceiling = time_gpu(lambda: launch(kernel, host_rows * words, values.host.data_ptr(),
                                      table_index.data_ptr(), out.data_ptr(), host_rows, words,
                                      device=device), runs=runs)
    assert torch.equal(out.view(values.hbm.dtype).view(host_rows, -1)[:64],
                       values[host_slots[:64]].view(64, -1)), "gh_gather_rows is wrong"
    source = torch.empty(link_bytes, dtype=torch.uint8, pin_memory=True)
    target = torch.empty(link_bytes, dtype=torch.uint8, device=device)
    copy = time_gpu(lambda: target.copy_(source, non_blocking=True), runs=runs)

    def rate(timing) -> float:
        return link_bytes / (timing.median_ms * 1e-3) / 1e9
    return {"rows": int(index.numel()), "host_rows": host_rows, "row_bytes": row_bytes,
            "mixed_gather_ms": mixed.median_ms, "host_gather_ms": ours.median_ms,
            "host_gather_gb_per_s": rate(ours), "ceiling_gather_gb_per_s": rate(ceiling),
            "link_gb_per_s": rate(copy), "of_gather_ceiling": ceiling.median_ms / ours.median_ms,
            "of_link": copy.median_ms / ours.median_ms}


def eviction_quality(capacity: int, bucket_slots: int, device: torch.device, *,
                     batch: int) -> dict:
    """Fed five times its capacity of keys with random custom scores: the share of the
    ideal top-capacity scores kept, and the load at the first eviction."""
    cache = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=capacity,
                     device=device, policy="custom", bucket_slots=bucket_slots)
    total = 5 * cache.capacity
    keys = _random_keys(total, device)
    scores = torch.randint(0, 2**62, (total,), device=device)
    first = None
    for part in range(0, total, batch):
        chunk = slice(part, part + batch)
        before = len(cache) if first is None else 0
        status = cache.insert_or_assign(keys[chunk], torch.zeros(keys[chunk].numel(),
                                                                  device=device),
                                        scores=scores[chunk])
        if first is None and bool((status != 0).any()):
            # the rows this batch inserted into free slots, then the first that could not
            first = (before + int((status == 0).sum())) / cache.capacity
    best = torch.topk(scores, cache.capacity).values
    kept = cache.export()[2].view(torch.int64)
    return {"bucket_slots": bucket_slots, "capacity": cache.capacity,
            "kept_of_top": float(torch.isin(kept, best).sum()) / cache.capacity,
            "first_eviction_load": first}


def _dims(device: torch.device, quick: bool) -> tuple:
    dims = ((8, 128 << 20), (32, 128 << 20), (64, 64 << 20))
    return dims[:1] if quick or device.type != "cuda" else dims


SHAPES = (16, 32, 64, 128)  # slots a bucket


def steps(device: torch.device, *, quick: bool) -> int:
    """The steps ``run`` announces: the warm-up on a GPU, each load of each workload (and of
    the hybrid one on a GPU), each bucket shape's eviction run and loads."""
    gpu = device.type == "cuda"
    return gpu + len(LOADS) * (len(_dims(device, quick)) + gpu) + len(SHAPES) * (1 + len(LOADS))


def run(device: torch.device, *, quick: bool, runs: int, step: Step = quiet) -> dict:
    """The whole suite: HKV's workload (dim 8, 32, 64; --quick: dim 8 at 1/8 capacity) and
    the bucket shapes' trade-off. On a CPU: dim 8 at 1/256 capacity, batches of 2^14.
    ``step`` is told of each part as it starts."""
    scale = 1 if device.type == "cuda" and not quick else (8 if device.type == "cuda" else 256)
    batch = BATCH if device.type == "cuda" else BATCH >> 6
    report = {"hkv_h100_dim8": HKV_H100_DIM8, "workloads": [], "bucket_shapes": []}
    if device.type == "cuda":
        step("keeping the GPU busy before the first timing")
    warm_up_gpu(device, seconds=2.0 if quick else 15.0)
    for dim, capacity in _dims(device, quick):
        report["workloads"].append(workload(dim, capacity // scale, device, batch=batch,
                                            runs=runs, bucket_slots=128, step=step))
    if device.type == "cuda":  # dim 64, 128M slots, the value rows of half of them in host memory
        capacity = (128 << 20) // scale
        report["hybrid"] = workload(64, capacity, device, batch=batch, runs=runs,
                                    bucket_slots=128, max_hbm_bytes=capacity * 64 * 4 // 2,
                                    step=step)
    shape_capacity = (1 << 22) // (1 if device.type == "cuda" else 16)
    for width in SHAPES:
        step(f"{width}-slot buckets: eviction quality")
        quality = eviction_quality(shape_capacity, width, device, batch=batch >> 4)
        speed = workload(8, shape_capacity, device, batch=batch >> 2, runs=runs,
                         bucket_slots=width, step=step)
        timing = "bkv_per_s_events" if device.type == "cuda" else "bkv_per_s"
        quality["find_bkv_per_s"] = {load: row["find"][timing]
                                     for load, row in speed["loads"].items()}
        report["bucket_shapes"].append(quality)
    return report
