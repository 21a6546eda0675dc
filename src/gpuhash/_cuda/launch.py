"""Kernel launches from Python on torch's current stream, with as little host work as possible.

Every kernel parameter is 8 bytes wide, so pointers and counts go to cuda.core as plain Python
ints. cuda.core Stream wrappers and launch configurations are cached, since a find on a small
batch is dominated by host overhead.
"""

from __future__ import annotations

import functools

import torch

THREADS = 256


@functools.cache
def _stream(handle: int):
    from cuda.core import Stream

    return Stream.from_handle(handle)


@functools.lru_cache(maxsize=512)
def _config(blocks: int):
    from cuda.core import LaunchConfig

    return LaunchConfig(grid=blocks, block=THREADS)


def launch(kernel, rows: int, *args: int, device: torch.device) -> None:
    """Launch ``kernel`` with one thread per row on torch's current stream of ``device``."""
    if rows <= 0:
        return
    from cuda.core import launch as cuda_launch

    stream = _stream(torch.cuda.current_stream(device).cuda_stream)
    cuda_launch(stream, _config((rows + THREADS - 1) // THREADS), kernel, *args)
