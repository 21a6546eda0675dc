"""Kernel launches from Python on torch's current stream, with as little host work as possible.

Every kernel parameter is 8 bytes wide, so pointers and counts go to cuda.core as plain Python
ints. cuda.core Stream wrappers and launch configurations are cached, and the stream handle is
read straight from torch, since a find on a small batch is dominated by host overhead.
"""

from __future__ import annotations

import functools

import torch

THREADS = 256
BLOCKS_PER_SM = 8  # 8 x 256 threads: a full H100/A100 multiprocessor (2048 threads)


@functools.lru_cache(maxsize=64)
def _stream(handle: int):
    from cuda.core import Stream

    return Stream.from_handle(handle)


@functools.lru_cache(maxsize=512)
def _config(blocks: int):
    from cuda.core import LaunchConfig

    return LaunchConfig(grid=blocks, block=THREADS)


@functools.cache
def _full_grid(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count * BLOCKS_PER_SM


@functools.cache
def _launcher():
    from cuda.core import launch

    return launch


def launch(kernel, rows: int, *args: int, device: torch.device, persistent: bool = False) -> None:
    """Launch ``kernel`` over ``rows`` on torch's current stream of ``device``: one thread per
    row, or (``persistent``) a grid that fills the GPU once and loops over the rows. The table
    kernels use one thread per row: faster for inserts on the H100 (scripts/insert_variants.py),
    and every kernel loops over rows, so either grid is correct."""
    if rows <= 0:
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    blocks = (rows + THREADS - 1) // THREADS
    if persistent:
        blocks = min(blocks, _full_grid(index))
    stream = _stream(torch._C._cuda_getCurrentRawStream(index))
    _launcher()(stream, _config(blocks), kernel, *args)
