"""The routing kernel (distributed/kernels/shard.cu) against its numba twin
(distributed/cpu/loops.py) over the same keys, every key dtype, worlds whose counts a block
keeps in shared memory and worlds past that (global atomics); route on a GPU (a sort of the
one-byte owners) against the CPU's counting sort; and calls big enough that each column
crosses NCCL by its own all-to-all, against one table on one GPU."""

from __future__ import annotations

import pytest
import torch
from distributed_worlds import run_world
from test_distributed_routing import KEY_DTYPES, random_keys

from gpuhash.distributed.routing import owners, route

pytestmark = pytest.mark.gpu

WORLDS = (1, 2, 3, 4, 8, 256, 257, 1024, 1025, 5000)


@pytest.mark.parametrize("dtype", KEY_DTYPES)
@pytest.mark.parametrize("rows", [0, 1, 31, 1000, (1 << 20) + 3])
def test_the_routing_kernel_is_its_cpu_twin(dtype, rows):
    keys = random_keys(rows, dtype, seed=rows)
    on_gpu = keys.cuda()
    for world in WORLDS:
        found, counts = owners(on_gpu, world)
        want, want_counts = owners(keys, world)
        assert found.device == on_gpu.device and found.dtype == want.dtype
        assert torch.equal(found.cpu(), want), (dtype, world)
        assert torch.equal(counts.cpu(), want_counts), (dtype, world)


@pytest.mark.parametrize("dtype", KEY_DTYPES)
def test_route_on_a_gpu_is_the_cpu_route(dtype):
    keys = random_keys((1 << 20) + 5, dtype, seed=3)
    for world in (2, 3, 256, 257, 5000):
        order, counts = route(keys.cuda(), world)
        want_order, want_counts = route(keys, world)
        assert torch.equal(order.cpu(), want_order), (dtype, world)
        assert torch.equal(counts.cpu(), want_counts), (dtype, world)


def test_big_calls_on_nccl_answer_as_one_table(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    run_world("test_distributed_routing:big_calls", 2, tmp_path, backend="nccl")
