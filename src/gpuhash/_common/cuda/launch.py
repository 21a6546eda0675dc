"""Kernel launches from Python on torch's current stream of the table's device, with as little
host work as possible.

Every kernel parameter is 8 bytes wide, so pointers and counts go to cuda.core as plain Python
ints. cuda.core Stream wrappers and launch configurations are cached, and the stream handle is
read straight from torch, since a find on a small batch is dominated by host overhead.

A kernel runs in the current CUDA context, so a launch makes the table's device current when
another one is, and gives the caller's back afterwards.
"""

from __future__ import annotations

import functools
import threading

import torch

from gpuhash._common.constants import RADIX_THREADS

THREADS = RADIX_THREADS  # threads a block, every launch (the radix kernels assume it)


@functools.lru_cache(maxsize=64)
def _stream(device: int, handle: int):
    """A cuda.core view of a stream; keyed by device too (the default stream's handle is 0 on
    every device)."""
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


def launch(kernel, rows: int, *args: int, device: int | torch.device) -> None:
    """Launch ``kernel`` with one thread per row on torch's current stream of GPU ``device``
    (an index, or a torch device), with that GPU current during the launch."""
    if rows <= 0:
        return
    if device.__class__ is not int:  # the tables pass indices; the benchmarks torch devices
        device = device.index if device.index is not None else torch.cuda.current_device()
    _launch_on(device, _config((rows + THREADS - 1) // THREADS), kernel, args)


def _launch_on(device: int, config, kernel, args: tuple[int, ...]) -> None:
    """Launch on torch's current stream of GPU ``device``, made current for the launch when
    another GPU is."""
    stream = _stream(device, torch._C._cuda_getCurrentRawStream(device))
    if torch._C._cuda_getDevice() == device:
        _launcher()(stream, config, kernel, *args)
        return
    with torch.cuda.device(device):
        _launcher()(stream, config, kernel, *args)


@functools.lru_cache(maxsize=512)
def _shared_config(blocks: int, shared_bytes: int):
    from cuda.core import LaunchConfig

    return LaunchConfig(grid=blocks, block=THREADS, shmem_size=shared_bytes)


# (id of the kernel, device) -> (the kernel, kept so that its id is never reused; the limit)
_SHARED_ALLOWED: dict[tuple[int, int], tuple[object, int]] = {}
_SHARED_LOCK = threading.Lock()  # the limit is compared and raised by one thread at a time


def _allow_shared(kernel, device: int, shared_bytes: int) -> None:
    """Let ``kernel`` take ``shared_bytes`` of dynamic shared memory a block on GPU ``device``:
    past 48 KB less the kernel's static shared memory a launch fails unless the kernel's limit
    was raised first. The limit only ever rises, so a launch with less after one with more
    still fits (each launch sets no attribute unless it needs more)."""
    key = (id(kernel), device)
    if _SHARED_ALLOWED.get(key, (None, 0))[1] >= shared_bytes:
        return
    with _SHARED_LOCK:
        if _SHARED_ALLOWED.get(key, (None, 0))[1] < shared_bytes:
            _raise_shared(kernel, device, shared_bytes)
            _SHARED_ALLOWED[key] = (kernel, shared_bytes)


def _raise_shared(kernel, device: int, shared_bytes: int) -> None:
    from cuda.bindings import driver

    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = kernel.handle
    if isinstance(handle, driver.CUkernel):  # cuda.core loads kernels from a library
        # (a cuda.core older than 1.x may hand back a context's CUfunction instead)
        (status,) = driver.cuKernelSetAttribute(attribute, shared_bytes, handle,
                                                driver.CUdevice(device))
    else:
        (status,) = driver.cuFuncSetAttribute(handle, attribute, shared_bytes)
    if status != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{shared_bytes} bytes of shared memory a block were refused on "
                           f"cuda:{device}: {status}")


def launch_with_shared(kernel, rows: int, shared_bytes: int, *args: int, device: int) -> None:
    """:func:`launch` with ``shared_bytes`` of dynamic shared memory a block."""
    if rows <= 0:
        return
    _allow_shared(kernel, device, shared_bytes)
    _launch_on(device, _shared_config((rows + THREADS - 1) // THREADS, shared_bytes), kernel,
               args)


@functools.lru_cache(maxsize=512)
def _grid_config(grid: tuple[int, int], shared_bytes: int):
    from cuda.core import LaunchConfig

    return LaunchConfig(grid=grid, block=THREADS, shmem_size=shared_bytes)


def launch_grid(kernel, grid: tuple[int, int], shared_bytes: int, *args: int,
                device: int) -> None:
    """Launch ``kernel`` on a two-dimensional grid of blocks of THREADS threads, with
    ``shared_bytes`` of dynamic shared memory a block (the kernel strides over its rows)."""
    if grid[0] <= 0 or grid[1] <= 0:
        return
    if shared_bytes:
        _allow_shared(kernel, device, shared_bytes)
    _launch_on(device, _grid_config(grid, shared_bytes), kernel, args)


@functools.lru_cache(maxsize=64)
def _resident_blocks(kernel, device: int) -> int:
    """Blocks of ``kernel`` that fit on GPU ``device`` at once (its occupancy, every SM)."""
    per_sm = kernel.occupancy.max_active_blocks_per_multiprocessor(THREADS, 0)
    return max(1, per_sm) * torch.cuda.get_device_properties(device).multi_processor_count


@functools.lru_cache(maxsize=512)
def _cooperative_config(blocks: int):
    from cuda.core import LaunchConfig

    return LaunchConfig(grid=blocks, block=THREADS, is_cooperative=True)


def launch_cooperative(kernel, rows: int, *args: int, device: int) -> None:
    """Launch ``kernel`` as :func:`launch` does, but cooperatively, with no more blocks than
    fit on the GPU at once (a thread per row up to there; the kernel strides past it): its
    blocks may then wait for each other (join/kernels/join_build.cuh: gh_grid_barrier), which
    the driver refuses to launch otherwise."""
    blocks = min(max(1, (rows + THREADS - 1) // THREADS), _resident_blocks(kernel, device))
    _launch_on(device, _cooperative_config(blocks), kernel, args)
