"""The CPU engine of the radix-partitioned join: ``partition`` and ``join_partitions``, the
twins of join/cuda/radix.py over the same bytes, in torch. A partition's rows come in row
order here and in any order from the GPU; the partitions, their bounds, the pairs and the
overflowed partitions are the same (a test compares them).

Example:
    >>> import torch
    >>> side = partition(torch.tensor([5, 7, 5], dtype=torch.int32), None, 1, 0, 9,
    ...                  code_bytes=4, bits=2)
    >>> probe_rows, build_rows, overflowed, used = join_partitions(side, side, bits=2)
    >>> sorted(zip(probe_rows.tolist(), build_rows.tolist())), used
    ([(0, 0), (0, 2), (1, 1), (2, 0), (2, 2)], (3, 3))
"""

from __future__ import annotations

import torch

from gpuhash._common.hashing import GOLDEN_INT64 as _SALT
from gpuhash._common.hashing import mix64 as mix64
from gpuhash._common.hashing import shift_right as _shift_right
from gpuhash.join import radix_format as fmt
from gpuhash.join.cpu.engine import join_codes


def partition_of(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Each code's partition: the top ``bits`` bits of its partition hash
    (_common/kernels/common.cuh: gh_partition_hash with seed 0; radix_join.cu: gh_radix_bin), as
    int64."""
    words = codes.to(torch.int64)
    if codes.dtype == torch.int32:
        words &= 0xFFFFFFFF  # the code's 32 bits, zero-extended as the kernels read them
    return _shift_right(mix64(words ^ _SALT), 64 - bits)


def partition(keys: torch.Tensor, valid: torch.Tensor | None, shape: int, low: int, high: int,
              *, code_bytes: int, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A side's usable rows split into ``2**bits`` partitions: (codes, int32 rows, bounds), as
    join/cuda/radix.py: partition."""
    codes, usable = join_codes(code_bytes, keys, valid, shape, low, high)
    rows = usable.nonzero().squeeze(1)
    codes = codes.index_select(0, rows)
    part = partition_of(codes, bits)
    order = torch.argsort(part, stable=True)
    bounds = torch.zeros((1 << bits) + 1, dtype=torch.int64)
    bounds[1:] = torch.bincount(part, minlength=1 << bits).cumsum(0)
    return (codes.index_select(0, order), rows.index_select(0, order).to(torch.int32), bounds)


def _kept(bounds: torch.Tensor, overflowed: torch.Tensor) -> torch.Tensor:
    """Whether each partitioned row lies in a partition that is not overflowed."""
    counts = bounds[1:] - bounds[:-1]
    spilled = torch.zeros(counts.shape[0], dtype=torch.bool)
    spilled[overflowed] = True
    return ~spilled.repeat_interleave(counts)


def join_partitions(build: tuple, probe: tuple, *, bits: int,
                    build_hit: torch.Tensor | None = None,
                    probe_hit: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, int]]:
    """Every (probe row, build row) pair of equal codes outside the overflowed partitions (those
    of more than LIMIT build rows), as join/cuda/radix.py: join_partitions: (probe rows,
    build rows, overflowed partitions ascending, (usable build rows, usable probe rows))."""
    build_codes, build_rows, build_bounds = build
    probe_codes, probe_rows, probe_bounds = probe
    used = (int(build_bounds[-1]), int(probe_bounds[-1]))
    limit = fmt.LIMIT[build_codes.element_size()]
    overflowed = ((build_bounds[1:] - build_bounds[:-1]) > limit).nonzero().squeeze(1)
    keep = _kept(build_bounds, overflowed)
    codes, rows = build_codes[:used[0]][keep], build_rows[:used[0]][keep]
    keep = _kept(probe_bounds, overflowed)
    probe_codes, probe_rows = probe_codes[:used[1]][keep], probe_rows[:used[1]][keep]
    order = torch.argsort(codes, stable=True)
    ordered = codes.index_select(0, order)
    first = torch.searchsorted(ordered, probe_codes)
    count = torch.searchsorted(ordered, probe_codes, right=True) - first
    if probe_hit is not None:
        probe_hit[probe_rows[count > 0].to(torch.int64)] = True
        empty = torch.zeros(0, dtype=torch.int64)
        return empty, empty, overflowed, used
    which = torch.repeat_interleave(torch.arange(probe_codes.shape[0]), count)
    within = torch.arange(which.shape[0]) - (count.cumsum(0) - count).repeat_interleave(count)
    found = rows.index_select(0, order.index_select(0, first.index_select(0, which) + within))
    found = found.to(torch.int64)
    if build_hit is not None:
        build_hit[found] = 1
    return probe_rows.index_select(0, which).to(torch.int64), found, overflowed, used
