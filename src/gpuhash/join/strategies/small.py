"""The commonest ``gh.join`` call in fewer steps: two int32 torch tensors on one GPU, no option.

A small join's time is mostly the host's, and the general path's wrappers (the sides'
objects and checks, the plan's re-planning hooks, the prepared build's object and stream
context, the matches' pieces and assembly) are a good part of it. This path keeps every
decision the general one makes (the same shared plan, the same test for an estimate of
repeated keys, the same build table, kernels and refit: build.RowTable) and skips only the
wrappers, for the calls whose answer one probe writes whole. Anything else returns None and
takes the general path.

Example:
    >>> import torch
    >>> small_join(torch.tensor([1], dtype=torch.int32), torch.tensor([1], dtype=torch.int32),
    ...            "inner") is None  # on the CPU: the general path
    True
"""

from __future__ import annotations

from typing import Any

import torch

from gpuhash.join.build import RowTable
from gpuhash.join.keys import Direct32
from gpuhash.join.plan import shared_plan, wants_fanout

HOWS = ("inner", "left", "semi", "anti")  # a left, semi or anti join built on the left: not here
_DIRECT32 = Direct32(torch.int32)  # the encoder holds nothing of a join


def small_join(left_keys: Any, right_keys: Any, how: Any) -> Any:
    """``gh.join(left_keys, right_keys, how=how)``'s result, or None where the general path
    must run: int32 torch tensors, 1-D, on one GPU; how inner, left, semi or anti; a plan of
    one table probed at once and no estimate of repeated keys wanted. The caller has checked
    that no other option was given."""
    if (how not in HOWS or left_keys.__class__ is not torch.Tensor
            or right_keys.__class__ is not torch.Tensor or left_keys.dtype != torch.int32
            or right_keys.dtype != torch.int32 or left_keys.dim() != 1
            or right_keys.dim() != 1):
        return None
    device = left_keys.device
    if device.type != "cuda" or right_keys.device != device:
        return None
    plan = shared_plan(left_keys.shape[0], right_keys.shape[0], how=how, key_bytes=4,
                       device=device)
    build_left = plan.build_side == "left"
    if (plan.strategy != "hash-table" or plan.chunk_rows or (build_left and how != "inner")
            or wants_fanout(plan, keys_on_gpu=True)):
        return None
    build, probe = (left_keys, right_keys) if build_left else (right_keys, left_keys)
    built = RowTable(_DIRECT32, [build], None, build.shape[0], device, pooled=True)
    if how in ("semi", "anti"):
        result = built.picked([probe], None, how)
    else:
        found_probe, found_build = built.pairs([probe], None, keep_unmatched=how == "left")
        result = (found_build, found_probe) if build_left else (found_probe, found_build)
    built.hand_back()  # its one probe has read its counters: nothing on it is pending
    return result
