"""Kernel variants timed side by side on the GPU through the public API: the experiments
behind the bucket widths _format.py picks and the compile-time switches of the kernels.

32M distinct u32 -> u32 keys (or --keys) into an empty table at several loads, for each
variant: inserts by both duplicate policies, finds of hits and misses, and how many keys sit
in their first bucket. A variant is a comma-separated list: "slots=N" forces the bucket width,
"threads=N" sets the block size of every launch, anything else is a kernel definition, e.g.
"slots=8,GH_LAZY_PIECES=2".
Usage: PYTHONPATH=src python scripts/kernel_variants.py [--loads 0.5 0.9]
       [--variants slots=4 slots=8,GH_LAZY_PIECES=0]
Raw outputs of every run so far: bench/results/experiments_2026-11-21.txt (there, "bucket W
lazy P" is the variant "slots=W,GH_LAZY_PIECES=P").
"""

import argparse

import torch

import gpuhash as gh
from gpuhash._cuda import launch as launch_module
from gpuhash._format import empty_state
from gpuhash.bench.ceilings import measure as measure_ceilings
from gpuhash.bench.harness import time_gpu
from gpuhash.bench.map_suite import emptied, random_values, take, unique_keys
from gpuhash.engines import cpu as cpu_engine
from gpuhash.engines import cuda as cuda_engine

parser = argparse.ArgumentParser()
parser.add_argument("--loads", type=float, nargs="+", default=[0.5, 0.9])
parser.add_argument("--keys", type=int, default=32 * 2**20)
parser.add_argument("--queries", type=int, default=None, help="per find call (default: --keys)")
parser.add_argument("--l2-fetch", type=int, default=None,
                    help="set the context's maximum L2 fetch granularity (bytes, a hint) first")
parser.add_argument("--variants", nargs="+", default=["slots=8", "slots=8,GH_LAZY_PIECES=0"])
arguments = parser.parse_args()
device = torch.device("cuda")
torch.cuda.init()
if arguments.l2_fetch is not None:
    from cuda.bindings import driver

    torch.zeros(1, device=device)  # torch's context is current from here on
    limit = driver.CUlimit.CU_LIMIT_MAX_L2_FETCH_GRANULARITY
    print("L2 fetch granularity was", driver.cuCtxGetLimit(limit)[1], "bytes;",
          driver.cuCtxSetLimit(limit, arguments.l2_fetch)[0], "now",
          driver.cuCtxGetLimit(limit)[1])
n = arguments.keys
queries = arguments.queries or n
ceilings = measure_ceilings(device)
c_hbm = ceilings["C_hbm"]
print(f"C_hbm {c_hbm:.1f} G/s, C_l2 {ceilings['C_l2']:.1f} G/s")

extra: dict[str, tuple] = {"defines": ()}
plain_defines = cuda_engine.defines
cuda_engine.defines = lambda spec: plain_defines(spec) + extra["defines"]


def parse(variant: str) -> tuple[int | None, tuple]:
    width, defines = None, []
    launch_module.THREADS = 256
    for part in variant.split(","):
        name, value = part.split("=")
        if name == "slots":
            width = int(value)
        elif name == "threads":
            launch_module.THREADS = int(value)
        else:
            defines.append((name, int(value)))
    launch_module._config.cache_clear()
    return width, tuple(defines)


def table_with(width: int | None, load: float, duplicates: str) -> gh.HashMap:
    table = gh.HashMap(key_dtype=torch.uint32, value_dtype=torch.uint32, capacity=n,
                       max_load_factor=load, growable=False, device=device,
                       duplicates=duplicates)
    if width is not None:
        spec = table.spec.sized_for(n, bucket_slots=width)
        table._adopt(empty_state(spec, device), growable=False, duplicates=duplicates)
    return table


def in_first(table: gh.HashMap, keys: torch.Tensor) -> float:
    pick = torch.randperm(n, device=device)[: 1 << 20]
    bits = keys.view(torch.int32)[pick]
    index, found = table.find_index(bits.view(keys.dtype))
    assert bool(found.all())
    first, _, _, _ = cpu_engine.bucket_choices(table._state, bits)
    return float((index // table.spec.bucket_slots == first).float().mean())


keys = unique_keys(2 * n, torch.uint32, device)
hits, misses = keys[:n], keys[n:]
values = random_values(n, torch.uint32, (), device)
pick = (torch.randperm(n, device=device) if queries == n
        else torch.randint(0, n, (queries,), device=device))
hit_queries, miss_queries = take(hits, pick), take(misses, pick)
for load in arguments.loads:
    print(f"u32->u32, {n} keys, {queries} queries, load {load}:", flush=True)
    for variant in arguments.variants:
        width, extra["defines"] = parse(variant)
        cells = []
        for duplicates in ("any", "last"):
            table = table_with(width, load, duplicates)
            timing = time_gpu(lambda t=table: t.insert(hits, values), setup=emptied(table),
                              runs=5)
            got, found = table.find(hit_queries)
            assert len(table) == n and bool(found.all()), (variant, duplicates)
            assert torch.equal(got.view(torch.uint8), take(values, pick).view(torch.uint8))
            cells.append(f"{duplicates} {timing.rate(n):5.2f} (b1 {in_first(table, hits):.3f})")
            if duplicates == "last":
                hit = time_gpu(lambda t=table: t.find(hit_queries), runs=5)
                miss = time_gpu(lambda t=table: t.find(miss_queries), runs=5)
                assert not bool(table.find(miss_queries)[1].any())
                c = c_hbm if queries == n else ceilings["C_l2"]  # many queries: an L2 table
                hit_ratio, miss_ratio = hit.rate(queries) / c, miss.rate(queries) / c
                cells.append(f"hits {hit_ratio:.3f}C misses {miss_ratio:.3f}C")
            del table
            torch.cuda.empty_cache()
        print(f"  {variant} (bucket {width or 'default'}): " + " | ".join(cells), flush=True)
