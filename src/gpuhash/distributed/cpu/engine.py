"""The sharded tables' CPU routing (distributed/cpu/loops.py), the twin of
distributed/cuda/engine.py over the same keys.

``owners(keys, world)``: (owner of each row, as ``owner_dtype(world)``; rows per owner, int64);
``route(keys, world)``: (rows grouped by owner, stably; rows per owner).
"""

from __future__ import annotations

import torch

from gpuhash._common.cpu.runtime import run
from gpuhash.distributed.routing import owner_dtype

CHUNK_ROWS = 1 << 16   # rows a chunk of a parallel pass, at least
MAX_CHUNKS = 256
MAX_CHUNK_CELLS = 1 << 20  # chunks x ranks: the per-chunk counts stay small beside the rows


def _chunks(n: int, world: int) -> int:
    return max(1, min(MAX_CHUNKS, -(-n // CHUNK_ROWS), MAX_CHUNK_CELLS // world))


def _serial(counts: torch.Tensor) -> str:
    """One chunk runs on the calling thread: waking numba's pool for a small batch costs more
    than its rows (and more still where ranks share the cores)."""
    return "_serial" if counts.shape[0] == 1 else ""


def _owners(keys: torch.Tensor, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(owners, per-chunk counts: one row a chunk)."""
    n = keys.shape[0]
    owners = torch.empty(n, dtype=owner_dtype(world))
    counts = torch.zeros((_chunks(n, world), world), dtype=torch.int64)
    if n:
        run("shard_owners" + _serial(counts), keys.numpy(), keys.element_size(), world,
            owners.numpy(), counts.numpy())
    return owners, counts


def owners(keys: torch.Tensor, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    found, counts = _owners(keys, world)
    return found, counts.sum(0)


def route(keys: torch.Tensor, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    found, counts = _owners(keys, world)
    order = torch.empty(keys.shape[0], dtype=torch.int64)
    if keys.shape[0]:
        run("shard_order" + _serial(counts), found.numpy(), counts.numpy(), order.numpy())
    return order, counts.sum(0)
