"""Host memory for large outputs and temporaries, kept for reuse after it is freed.

A merge writes hundreds of megabytes of new columns. Memory fresh from the kernel costs a page
fault per 4 KiB page on first write, which at these sizes took longer than the gathers that
fill it; and the allocators behind NumPy and Arrow hand large freed blocks back to the kernel
(mimalloc, Arrow's default, after 10 ms), so every call paid it again. Blocks from ``take``
are instead returned here when the last array or Arrow buffer over them is freed, and the
next request of their size class reuses them with their pages already mapped. At most
``RETAIN_BYTES`` of free blocks are kept; requests under ``SMALLEST`` go to NumPy.

Example:
    >>> out = take(3 << 20, "float64")
    >>> out.shape, out.dtype.name
    ((3145728,), 'float64')
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading

import numpy as np

SMALLEST = 1 << 20  # below this, page faults cost less than keeping blocks


def _retain_bytes() -> int:
    """Free blocks kept: a quarter of the host's memory (a merge of 1e8 rows writes about 10
    GB of columns)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 16 << 30
    return total // 4


RETAIN_BYTES = _retain_bytes()
_free: dict[int, list[np.ndarray]] = {}
_free_bytes = 0
_lock = threading.Lock()
# blocks whose last array was freed, not yet sorted into _free: a lease's __del__ may run
# inside a garbage collection that interrupts code holding _lock (a deadlock if it took the
# lock), so it only appends here (deque.append needs no lock) and take() sorts them
_returned: collections.deque = collections.deque()


def _in_forked_child() -> None:
    """Another thread may have held the lock at the fork: the child's copy would stay held."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_in_forked_child)


class _Lease:
    """The base of the arrays handed out over one block: gives the block back when freed."""

    def __init__(self, block: np.ndarray):
        self.block = block
        self.__array_interface__ = block.__array_interface__

    def __del__(self):
        # at interpreter exit the module may be gone: nothing to keep then
        with contextlib.suppress(Exception):
            _returned.append(self.block)


def _settle() -> None:
    """Sort the returned blocks into the kept ones, up to RETAIN_BYTES (under _lock)."""
    global _free_bytes
    while _returned:
        block = _returned.popleft()
        if _free_bytes + block.nbytes <= RETAIN_BYTES:
            _free.setdefault(block.nbytes, []).append(block)
            _free_bytes += block.nbytes


def _size_class(nbytes: int) -> int:
    """Blocks come in powers of two, so a block serves any later request of up to its size
    (pages past what a request writes are not touched)."""
    return 1 << max(0, nbytes - 1).bit_length()


def take(count: int, dtype) -> np.ndarray:
    """An uninitialised 1-D array of ``count`` values of ``dtype``, reusing a freed block of
    its size class where one is kept."""
    global _free_bytes
    dtype = np.dtype(dtype)
    nbytes = count * dtype.itemsize
    if nbytes < SMALLEST:
        return np.empty(count, dtype)
    size = _size_class(nbytes)
    with _lock:
        _settle()
        blocks = _free.get(size)
        block = blocks.pop() if blocks else None
        if block is not None:
            _free_bytes -= size
    if block is None:
        block = np.empty(size, np.uint8)
    return np.asarray(_Lease(block))[:nbytes].view(dtype)


def release() -> int:
    """Hand every kept free block back (to the allocator, which returns large ones to the
    kernel); returns the bytes released. Blocks in use are kept until freed.

    Example:
        >>> _ = release()
        >>> release()
        0
    """
    global _free_bytes
    with _lock:
        _settle()
        released = _free_bytes
        _free.clear()
        _free_bytes = 0
    return released
