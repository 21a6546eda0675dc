"""Kernel launches from Python on torch's current stream, with as little host work as possible.

Every kernel parameter is 8 bytes wide, so pointers and counts go to cuda.core as plain Python
ints. cuda.core Stream wrappers and launch configurations are cached, and the stream handle is
read straight from torch, since a find on a small batch is dominated by host overhead. (A
launch straight through cuda.bindings' cuLaunchKernel with a reused parameter buffer measured
slower on the H100's host: 6.0 against 4.4 us; bench/results/experiments_2026-11-21.txt.)
"""

from __future__ import annotations

import functools

import torch

THREADS = 256


@functools.lru_cache(maxsize=64)
def _stream(handle: int):
    from cuda.core import Stream

    return Stream.from_handle(handle)


@functools.lru_cache(maxsize=512)
def _config(blocks: int):
    from cuda.core import LaunchConfig

    return LaunchConfig(grid=blocks, block=THREADS)


@functools.cache
def _launcher():
    from cuda.core import launch

    return launch


def launch(kernel, rows: int, *args: int, device: torch.device | int) -> None:
    """Launch ``kernel`` with one thread per row on torch's current stream of ``device`` (a
    device or its index). (A persistent grid looping over the rows was slower for inserts on
    the H100, up to 1.7x: bench/results/experiments_2026-11-21.txt.)"""
    if rows <= 0:
        return
    if device.__class__ is int:
        index = device
    else:
        index = device.index if device.index is not None else torch.cuda.current_device()
    stream = _stream(torch._C._cuda_getCurrentRawStream(index))
    _launcher()(stream, _config((rows + THREADS - 1) // THREADS), kernel, *args)
