"""The owner of each key and the rows each rank is sent, in one launch over the keys
(distributed/kernels/shard.cu), the twin of distributed/cpu/loops.py: shard_owners.

``owners(keys, world)``: (owner of each row, as ``owner_dtype(world)``; rows per owner,
int64, one per rank). No host synchronisation.
"""

from __future__ import annotations

import functools
import os

import torch

from gpuhash._common.cuda.compile import load_module
from gpuhash._common.cuda.launch import THREADS, launch_grid
from gpuhash.distributed.routing import owner_dtype
from gpuhash.table.cuda.engine import ARCH_ENV

KEY_TYPES = {4: "unsigned int", 8: "unsigned long long"}  # read as unsigned: zero-extended
OWNER_TYPES = {torch.uint8: "unsigned char", torch.int32: "int"}
BLOCKS_PER_SM = 8  # a block flushes its counts once: cap the blocks
MAX_BLOCK_ROWS = 1 << 30  # a block's shared counts are 32-bit


def kernel_names() -> dict:
    """(key bytes, owner dtype) -> name expression of the routing kernel."""
    return {(width, owner): f"gh_shard_owners<{key}, {name}>"
            for width, key in KEY_TYPES.items() for owner, name in OWNER_TYPES.items()}


@functools.cache
def _kernels(device_index: int, arch: str | None) -> dict:
    names = kernel_names()
    module = load_module("distributed/kernels/shard.cu", tuple(names.values()), device_index,
                         arch)
    return {key: module.get_kernel(expression) for key, expression in names.items()}


@functools.cache
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def owners(keys: torch.Tensor, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    device = keys.device
    index = device.index if device.index is not None else torch.cuda.current_device()
    dtype = owner_dtype(world)
    kernel = _kernels(index, os.environ.get(ARCH_ENV))[(keys.element_size(), dtype)]
    n = keys.shape[0]
    out = torch.empty(n, dtype=dtype, device=device)
    counts = torch.zeros(world, dtype=torch.int64, device=device)
    blocks = max(1, min(-(-n // THREADS), BLOCKS_PER_SM * _multiprocessors(index)))
    blocks = max(blocks, -(-n // MAX_BLOCK_ROWS))
    if n:
        launch_grid(kernel, (blocks, 1), 0, keys.data_ptr(), n, world, out.data_ptr(),
                    counts.data_ptr(), device=index)
    return out, counts
