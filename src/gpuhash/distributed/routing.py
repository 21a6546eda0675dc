"""Which rank owns a key, and a batch's rows grouped by owner.

A key's owner is a function of the key and the number of ranks alone (the high
``SHARD_BITS`` bits of the shard hash, _common/constants.py), so every rank, the save files and
a reload onto another number of ranks agree on it. :func:`owner_of` defines it in torch
operations (a pass over the keys an operation); :func:`owners` computes the same bits and the
rows per owner in one pass, a kernel on a GPU (distributed/kernels/shard.cu) and its numba twin
on the CPU (distributed/cpu/loops.py), and :func:`route` groups a batch by owner from them.

Example:
    >>> import torch
    >>> from gpuhash.distributed.routing import owner_of, route
    >>> owners = owner_of(torch.arange(8), 3)
    >>> bool(((owners >= 0) & (owners < 3)).all())
    True
    >>> r = route(torch.tensor([5, 6, 5]), 2)
    >>> r.counts.sum().item(), sorted(r.order.tolist())
    (3, [0, 1, 2])
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gpuhash._common.constants import SHARD_BITS, SHARD_SALT, as_int64
from gpuhash._common.hashing import mix64, shift_right

_SALT = as_int64(SHARD_SALT)
_LOW_32 = 0xFFFFFFFF
_KEY_DTYPES = (torch.int32, torch.uint32, torch.int64, torch.uint64)


def owner_of(keys: torch.Tensor, world_size: int) -> torch.Tensor:
    """The rank (int64, in ``[0, world_size)``) that owns each key.

    ``keys``: int32, uint32, int64 or uint64 (unsigned keys as stored, or as the signed view
    of their bits). A 32-bit key hashes as its 32 bits zero-extended, as the tables read it,
    so a uint32 key and its int32 view have one owner.

    Example:
        >>> import torch
        >>> from gpuhash.distributed.routing import owner_of
        >>> keys = torch.arange(10_000)
        >>> torch.bincount(owner_of(keys, 4), minlength=4).min().item() > 2_300
        True
        >>> bool((owner_of(keys, 1) == 0).all())
        True
    """
    _check_world(world_size)
    width = keys.element_size()
    words = keys.view(torch.int32 if width == 4 else torch.int64).to(torch.int64)
    if width == 4:
        words = words & _LOW_32
    high = shift_right(mix64(words ^ _SALT), 64 - SHARD_BITS)
    # a multiply-high maps the 32 bits onto the ranks: any number of ranks, no modulo
    return (high * world_size) >> SHARD_BITS


def _check_world(world_size: int) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not (
            1 <= world_size < 2**31):  # the product below stays under 2**63
        raise ValueError(f"world_size must be an int in [1, 2**31), got {world_size!r}")


def owner_dtype(world_size: int) -> torch.dtype:
    """The dtype :func:`owners` gives owners in: one byte up to 256 ranks (a one-byte sort
    key sorts in one radix pass), else int32."""
    return torch.uint8 if world_size <= 256 else torch.int32


def owners(keys: torch.Tensor, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`owner_of` of each key (as :func:`owner_dtype`) and the keys each rank owns
    (int64, one per rank), in one pass over the keys, on their device. No host
    synchronisation.

    Example:
        >>> import torch
        >>> from gpuhash.distributed.routing import owner_of, owners
        >>> keys = torch.arange(1000)
        >>> found, counts = owners(keys, 3)
        >>> torch.equal(found.long(), owner_of(keys, 3)), counts.sum().item()
        (True, 1000)
    """
    _check_world(world_size)
    bits = _bits(keys)
    if bits.device.type == "cuda":
        from gpuhash.distributed.cuda import engine
    else:
        from gpuhash.distributed.cpu import engine
    return engine.owners(bits, world_size)


def _bits(keys: torch.Tensor) -> torch.Tensor:
    """The keys as contiguous signed words of their width (the engines read raw bits)."""
    if keys.dtype not in _KEY_DTYPES:
        raise TypeError(f"keys must be int32, uint32, int64 or uint64, got {keys.dtype}")
    return keys.contiguous().view(torch.int32 if keys.element_size() == 4 else torch.int64)


class Route(NamedTuple):
    """A batch grouped by owner: ``order`` lists the rows owner by owner (rows of one owner
    in their batch order: a stable sort), ``counts`` (int64, one per rank) how many rows go
    to each."""

    order: torch.Tensor
    counts: torch.Tensor


def route(keys: torch.Tensor, world_size: int) -> Route:
    """Group a batch's rows by owner, keeping each owner's rows in batch order.

    Example:
        >>> import torch
        >>> from gpuhash.distributed.routing import owner_of, route
        >>> keys = torch.arange(100)
        >>> r = route(keys, 4)
        >>> owners = owner_of(keys[r.order], 4)
        >>> bool((owners[1:] >= owners[:-1]).all()), r.counts.tolist() == torch.bincount(
        ...     owners, minlength=4).tolist()
        (True, True)
    """
    _check_world(world_size)
    bits = _bits(keys)
    if world_size == 1:  # one owner: the batch as it is
        rows = bits.shape[0]
        return Route(torch.arange(rows, device=bits.device),
                     torch.full((1,), rows, dtype=torch.int64, device=bits.device))
    if bits.device.type != "cuda":  # a stable counting sort by the owners, in numba
        from gpuhash.distributed.cpu import engine

        return Route(*engine.route(bits, world_size))
    found, counts = owners(bits, world_size)
    # a stable sort of one-byte owners: one radix pass of CUB's (an int64 key would take 8)
    return Route(torch.sort(found, stable=True).indices, counts)
