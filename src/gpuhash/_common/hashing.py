"""The core's hash as torch operations over int64 bits, for the CPU engines' vectorised steps
and the radix join's partitions: the same function as the kernels' ``gh_mix64`` and the numba
loops' ``mix64`` (_common/cpu/probe.py), all three built from the constants in constants.py.

Example:
    >>> import torch
    >>> from gpuhash._common.hashing import mix64
    >>> int(mix64(torch.tensor([0]))[0])  # the finalizer keeps 0 at 0
    0
"""

from __future__ import annotations

import torch

from gpuhash._common.constants import GOLDEN, MIX_1, MIX_2, MIX_SHIFT, as_int64

_MIX_1 = as_int64(MIX_1)
_MIX_2 = as_int64(MIX_2)
GOLDEN_INT64 = as_int64(GOLDEN)


def shift_right(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 64-bit finalizer of int64 bits (int64 products wrap, as the kernels'
    unsigned ones do)."""
    x = x ^ shift_right(x, MIX_SHIFT)
    x = x * _MIX_1
    x = x ^ shift_right(x, MIX_SHIFT)
    x = x * _MIX_2
    return x ^ shift_right(x, MIX_SHIFT)
