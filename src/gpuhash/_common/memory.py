"""Room checks before a structure allocates: a size that cannot fit fails with an error that
names the argument, the bytes it asks for and what the device has, before anything is made
or changed (rather than an allocator's error from deep inside).

Example:
    >>> import torch
    >>> from gpuhash._common.memory import require
    >>> require(1 << 10, torch.device("cpu"), what="capacity=100")  # fits: nothing happens
    >>> try:
    ...     require(1 << 70, torch.device("cpu"), what="capacity=10**20")
    ... except MemoryError as error:
    ...     print(str(error).split(";")[0])
    capacity=10**20 needs 1180591620717411303424 bytes of cpu memory
"""

from __future__ import annotations

import torch

# Requests below this are left to the allocator: asking the driver for its free memory costs
# more host time than a small table's whole construction, and a request this small fails
# only on a device that is already full (the allocator's own out-of-memory error then).
CHECKED_FROM = 64 << 20


def available_bytes(device: torch.device) -> int | None:
    """Free memory of ``device`` now: the GPU's free memory with what torch's allocator keeps
    cached, or the host's available memory (None where the platform does not say)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        # torch's caching allocator holds freed blocks the driver counts as used
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free) + max(0, int(cached))
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None  # (free pages alone would leave out the page cache: too small a bound)


def require(nbytes: int, device: torch.device, *, what: str,
            fix: str = "ask for less, or free memory first") -> None:
    """Raise MemoryError, naming ``what`` (the argument and its value), when ``nbytes`` is
    more than ``device`` has free (requests under ``CHECKED_FROM`` are not checked)."""
    if nbytes < CHECKED_FROM:
        return
    available = available_bytes(device)
    if available is not None and nbytes > available:
        raise MemoryError(f"{what} needs {nbytes} bytes of {device} memory; {available} are "
                          f"free: {fix}")
