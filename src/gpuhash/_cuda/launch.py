"""Kernel launches from Python on torch's current stream, with as little host work as possible.

Every kernel parameter is 8 bytes wide, so pointers and counts travel as plain Python ints.
Kernels are compiled and loaded by cuda.core (compile.py); a launch goes straight to the
driver's cuLaunchKernel through cuda.bindings, with the parameters written into a reused
per-thread buffer, because a find on a small batch is dominated by host overhead and
cuda.core's general launch (stream and config objects, argument conversion) cost about 5.5 us
of a 15.7 us call on the H100's host (bench/results/experiments_2026-11-21.txt).
"""

from __future__ import annotations

import ctypes
import functools
import threading

import torch

THREADS = 256
_MAX_ARGS = 24  # the most parameters any kernel in kernels/ takes, with room to spare


class _Parameters(threading.local):
    """A per-thread buffer of 8-byte parameter values and the array of pointers to them that
    cuLaunchKernel reads (it copies the values before it returns, so reuse is safe)."""

    def __init__(self) -> None:
        self.values = (ctypes.c_uint64 * _MAX_ARGS)()
        base = ctypes.addressof(self.values)
        self.pointers = (ctypes.c_void_p * _MAX_ARGS)(*(base + 8 * i for i in range(_MAX_ARGS)))
        self.address = ctypes.addressof(self.pointers)


_parameters = _Parameters()


@functools.cache
def _driver():
    from cuda.bindings import driver

    return driver.cuLaunchKernel, driver.CUresult.CUDA_SUCCESS


@functools.lru_cache(maxsize=1024)
def _function(kernel):
    """The driver handle of a cuda.core kernel (kept alive by the kernel cache in engines)."""
    from cuda.bindings import driver

    return driver.CUfunction(int(kernel.handle))


def launch(kernel, rows: int, *args: int, device: torch.device) -> None:
    """Launch ``kernel`` with one thread per row on torch's current stream of ``device``. (A
    persistent grid looping over the rows was slower for inserts on the H100, up to 1.7x:
    bench/results/experiments_2026-11-21.txt.)"""
    if rows <= 0:
        return
    launch_blocks(kernel, (rows + THREADS - 1) // THREADS, *args, device=device)


def launch_blocks(kernel, blocks: int, *args: int, device: torch.device) -> None:
    """Launch ``kernel`` on ``blocks`` blocks of THREADS threads, on torch's current stream."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = torch._C._cuda_getCurrentRawStream(index)
    if len(args) > _MAX_ARGS:
        raise ValueError(f"{len(args)} kernel arguments; at most {_MAX_ARGS} are supported")
    parameters = _parameters
    parameters.values[: len(args)] = args
    cu_launch, success = _driver()
    (error,) = cu_launch(_function(kernel), blocks, 1, 1, THREADS, 1, 1, 0, stream,
                         parameters.address, 0)
    if error != success:
        raise RuntimeError(f"cuLaunchKernel failed: {error!r}")
