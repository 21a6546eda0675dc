"""Batch-level key bookkeeping in plain torch, run on whichever device the batch is on."""

from __future__ import annotations

import torch


def _boundaries(keys: torch.Tensor, *, last: bool) -> torch.Tensor:
    sorted_keys, order = torch.sort(keys, stable=True)
    edge = torch.ones(keys.shape[0], dtype=torch.bool, device=keys.device)
    if last:
        edge[:-1] = sorted_keys[1:] != sorted_keys[:-1]
    else:
        edge[1:] = sorted_keys[1:] != sorted_keys[:-1]
    mask = torch.empty_like(edge)
    mask[order] = edge
    return mask


def first_occurrence(keys: torch.Tensor) -> torch.Tensor:
    """Bool per row: True on the first row of each distinct key (batch order).

    Example:
        >>> import torch
        >>> first_occurrence(torch.tensor([5, 7, 5])).tolist()
        [True, True, False]
    """
    return _boundaries(keys, last=False)


def last_occurrence(keys: torch.Tensor) -> torch.Tensor:
    """Bool per row: True on the last row of each distinct key (batch order).

    Example:
        >>> import torch
        >>> last_occurrence(torch.tensor([5, 7, 5])).tolist()
        [False, True, True]
    """
    return _boundaries(keys, last=True)
