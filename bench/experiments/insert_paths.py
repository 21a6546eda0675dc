"""Where an insert's time goes on the GPU: wall time of 1M-key assigns into a u64 -> f32x8
table of 128M capacity at load 0.5 and 0.99 (the whole insert, and the engine's pieces:
last_rows, a distinct-key insert, a duplicates="any" insert, contains), then the host time of
a 1K-key insert and of each piece. Calls the CUDA engine's functions directly (read only; it
patches nothing). On the GPU machine: PYTHONPATH=src python bench/experiments/insert_paths.py
(The host figures of results/insert_host_probe_h100_2026-11-23_8051a61.txt were taken with a
timer that stopped before the final synchronisation; the harness's stops after it.)
"""


import torch

import gpuhash as gh
from gpuhash.bench.harness import time_host_calls as host_us
from gpuhash.bench.harness import time_wall_ms as wall_ms
from gpuhash.bench.map_suite import unique_keys
from gpuhash.table.cuda import engine

DEVICE = torch.device("cuda")




def assigns(load: float, capacity: int = 128 << 20, batch: int = 1 << 20) -> str:
    table = gh.HashMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,),
                       capacity=capacity, max_load_factor=0.99, growable=False, device=DEVICE)
    keys = unique_keys(int(capacity * load), torch.uint64, DEVICE)
    for part in keys.split(16 << 20):
        table.insert(part, torch.ones((part.numel(), 8), device=DEVICE))
    order = torch.randperm(keys.numel(), device=DEVICE)[:batch]
    pick = keys.view(torch.int64)[order].view(torch.uint64)
    rows = torch.randn((batch, 8), device=DEVICE)
    bits, state = table._keys(pick)[0], table._state
    figures = {
        "full insert": wall_ms(lambda: table.insert(pick, rows)),
        "last_rows": wall_ms(lambda: engine.last_rows(state, bits)),
        "distinct insert": wall_ms(lambda: engine.insert(state, bits, rows, duplicates="distinct")),
        "any insert": wall_ms(lambda: engine.insert(state, bits, rows, duplicates="any")),
        "contains": wall_ms(lambda: engine.contains(state, bits)),
    }
    return f"{load} ms: " + " ".join(f"{name} {ms:.3f}" for name, ms in figures.items())


def small_inserts() -> str:
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1 << 16,
                       device=DEVICE)
    keys = torch.arange(1024, device=DEVICE)
    values = torch.ones(1024, device=DEVICE)
    table.insert(keys, values)
    bits, state = table._keys(keys)[0], table._state
    figures = {
        "insert": host_us(lambda: table.insert(keys, values)),
        "last_rows": host_us(lambda: engine.last_rows(state, bits)),
        "engine insert last": host_us(lambda: engine.insert(state, bits, values)),
        "distinct": host_us(lambda: engine.insert(state, bits, values, duplicates="distinct")),
        "any": host_us(lambda: engine.insert(state, bits, values, duplicates="any")),
        "make_room": host_us(lambda: table._make_room(bits)),
        "find": host_us(lambda: table.find(keys)),
    }
    return "host us: " + " ".join(f"{name} {us:.1f}" for name, us in figures.items())


if __name__ == "__main__":
    for load in (0.5, 0.99):
        print(assigns(load), flush=True)
        torch.cuda.empty_cache()
    print(small_inserts())
