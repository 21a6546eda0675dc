"""Where the time of a table-ordered insert goes (engines/cuda.py: _insert_ordered), step by
step, for a few part counts: 32M distinct u32 keys into an empty table at load 0.5."""

import torch

import gpuhash as gh
from gpuhash._cuda.launch import launch, launch_blocks
from gpuhash.bench.harness import time_gpu
from gpuhash.bench.map_suite import random_values, unique_keys
from gpuhash.engines import cuda as cuda_engine

device = torch.device("cuda")
n = 32 * 2**20
keys = unique_keys(n, torch.uint32, device)
values = random_values(n, torch.uint32, (), device)
table = gh.HashMap(key_dtype=torch.uint32, value_dtype=torch.uint32, capacity=n,
                   max_load_factor=0.5, growable=False, device=device, duplicates="any")
state = table._state
kernels, args = cuda_engine._launch_info(state)
bits = keys.view(torch.int32)
inserted = torch.zeros(n, dtype=torch.bool, device=device)
identity = torch.arange(n, dtype=torch.int32, device=device)
for parts in (64, 256, 1024, 2048):
    per_block = max(4096, -(-n // cuda_engine._COUNT_BLOCKS))
    blocks = -(-n // per_block)
    counts = torch.empty(parts * blocks, dtype=torch.int32, device=device)
    ordered_keys = torch.empty_like(bits)
    ordered_values = torch.empty_like(values)
    order = torch.empty(n, dtype=torch.int32, device=device)

    def count(parts=parts, blocks=blocks, per_block=per_block, counts=counts):
        launch_blocks(kernels["gh_partition_count"], blocks, *args, bits.data_ptr(), 0, n,
                      parts, per_block, counts.data_ptr(), device=device)

    count()
    ends = counts.cumsum(0)

    def scatter(parts=parts, blocks=blocks, per_block=per_block, counts=counts, ends=ends,
                ordered_keys=ordered_keys, ordered_values=ordered_values, order=order):
        launch_blocks(kernels["gh_partition_scatter"], blocks, *args, bits.data_ptr(),
                      values.data_ptr(), 0, n, parts, per_block, counts.data_ptr(),
                      ends.data_ptr(), ordered_keys.data_ptr(), ordered_values.data_ptr(),
                      order.data_ptr(), device=device)

    scatter()
    total = ends.data_ptr() + (ends.numel() - 1) * 8

    def insert(ordered_keys=ordered_keys, ordered_values=ordered_values, order=order,
               total=total):
        launch(kernels["gh_insert_ordered"], n, *args, ordered_keys.data_ptr(),
               ordered_values.data_ptr(), order.data_ptr(), total, inserted.data_ptr(), n, 0,
               device=device)

    def direct():
        launch(kernels["gh_insert"], n, *args, bits.data_ptr(), values.data_ptr(), 0,
               inserted.data_ptr(), n, 0, device=device)

    def insert_identity(ordered_keys=ordered_keys, ordered_values=ordered_values, total=total):
        launch(kernels["gh_insert_ordered"], n, *args, ordered_keys.data_ptr(),
               ordered_values.data_ptr(), identity.data_ptr(), total, inserted.data_ptr(), n, 0,
               device=device)

    timings = {
        "count": time_gpu(count, runs=5),
        "cumsum": time_gpu(lambda counts=counts: counts.cumsum(0), runs=5),
        "scatter": time_gpu(scatter, runs=5),
        "insert in order": time_gpu(insert, setup=table.clear, runs=5),
        "insert in order, rows not permuted": time_gpu(insert_identity, setup=table.clear,
                                                       runs=5),
        "insert direct": time_gpu(direct, setup=table.clear, runs=5),
    }
    assert len(table) == n
    print(f"parts {parts}: " + ", ".join(f"{name} {t.median_ms:.3f} ms"
                                         for name, t in timings.items()), flush=True)
