"""The group-by's engine protocol, and the engine of a device.

Both engines (groupby/cpu/engine.py: numba loops; groupby/cuda/engine.py: kernels) offer:

* ``group_codes(columns, lows, spans, dtype)``: one code a row of several integer key columns
  without nulls, the mixed-radix number of their digits ``key - low``;
* ``group_reduce(codes, low, groups, values, valid, op)``: per group ``code - low`` the sum,
  min or max of the valid non-NaN values, how many there were, and the rows seen;
* ``group_sort(slot, groups, values, descending)``: the values by group, then by value within
  each group (the median, quantiles and the top k read them), with each group's count and
  first position;
* ``group_quantile(slot, groups, values, q)``: per group the ``q``-quantile of its values,
  interpolated linearly between the two nearest ranks, and its count (the median and
  quantiles; the CUDA engine selects the ranks instead of sorting);
* ``group_comoments(codes, groups, a, b, use, mean_a, mean_b)``: per group the sums of
  squared distances of a and b from their means and of their products (variance and
  correlation's second pass);
* ``string_hashes(offsets, data)`` and ``string_mismatches(offsets, data, codes, first)``:
  a 64-bit hash of each string's bytes, and how many rows' strings differ from their code's
  first row's (string keys coded by their hashes, checked for collisions).

Everything else of a group-by is torch on the data's device, the same code for both.
"""

from __future__ import annotations

import torch


def engine_for(device: torch.device):
    """The engine of ``device``'s type."""
    if device.type == "cuda":
        from gpuhash.groupby.cuda import engine
    else:
        from gpuhash.groupby.cpu import engine
    return engine
