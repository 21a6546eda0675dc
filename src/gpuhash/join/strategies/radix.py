"""The radix-partitioned join strategy ("gpu-radix"): both sides split by the hash of their key
codes into partitions whose build rows fit a table in shared memory, each partition then joined
by one block (join/kernels/radix_join.cu; the CPU engine's twin runs the same steps, so the
strategy is tested without a GPU). It pays where one global table would be far past L2, so
that each probe row's random read goes to HBM: the planner chooses it from
RADIX_MIN_BUILD_ROWS rows a side (join/plan.py).

Partitions of more than LIMIT build rows (one key in many rows, or a build side larger than
the partitions are sized for) are joined by the global table instead, over their rows only;
null rows and rows whose key the build side cannot hold never enter a partition. One 32-bit
key column is coded by its offset from the build's smallest key (:class:`Range32`), other keys
by a KeyEncoder; either is fitted on the build side (one synchronisation). The join
synchronises once more (the pairs' count), again where repeated build keys make more pairs
than the probe side has rows, and where partitions overflowed.

Example:
    >>> import torch
    >>> from gpuhash.join.plan import plan_join
    >>> from gpuhash.join.sides import sides
    >>> from gpuhash.join.strategies.radix import run_radix
    >>> left, right = sides(torch.tensor([1, 2, 2, 5]), torch.tensor([2, 1, 7]), None, None)
    >>> plan = plan_join(4, 3, how="inner", key_bytes=8, device=torch.device("cpu"))
    >>> left_rows, right_rows = run_radix(left, right, plan, False)
    >>> sorted(zip(left_rows.tolist(), right_rows.tolist()))
    [(0, 1), (1, 0), (2, 0)]
"""

from __future__ import annotations

import torch

from gpuhash.join import radix_format as fmt
from gpuhash.join.build import RowTable
from gpuhash.join.cpu import radix as radix_cpu
from gpuhash.join.cuda import radix as radix_cuda
from gpuhash.join.keys import Direct32, KeyEncoder, canonical
from gpuhash.join.matches import _Matches, _take
from gpuhash.join.plan import JoinPlan
from gpuhash.join.sides import Side
from gpuhash.join.strategies.parts import _Coded, add_null_matches


def _engine(device: torch.device):
    return radix_cuda if device.type == "cuda" else radix_cpu


def run_radix(left: Side, right: Side, plan: JoinPlan, nulls_equal: bool):
    """The join of ``left`` and ``right`` by partitions, as ``plan`` says (its build side;
    the partition count follows the build side's rows and code width); partitions that
    overflow are joined by one RowTable."""
    build, probe = (left, right) if plan.build_side == "left" else (right, left)
    engine = _engine(build.device)
    encoder = (Range32(build.columns[0], build.valid) if Direct32.suits(build.columns)
               else KeyEncoder(build.columns, build.valid))
    code_bytes = 4 if encoder.key_dtype == torch.int32 else 8
    bits = fmt.partition_bits(build.rows, code_bytes)
    sides = [engine.partition(*encoder.kernel_input(side.columns, side.valid),
                              code_bytes=code_bytes, bits=bits) for side in (build, probe)]
    matches = _Matches(plan.how, plan.build_side != "left", probe.rows, build.rows,
                       build.device)
    matches.keep_probe_here = True  # the partitions lack the probe side's unusable rows
    hit = None if matches.pairs else torch.zeros(probe.rows, dtype=torch.bool,
                                                 device=build.device)
    found_probe, found_build, overflowed, used = engine.join_partitions(
        *sides, bits=bits, build_hit=matches.build_hit, probe_hit=hit)
    if matches.pairs:
        matches.add_pairs(found_probe, found_build)
    if overflowed.shape[0]:
        _join_overflowed(matches, sides, overflowed, used, hit)
    if hit is not None:
        matches.add_hits(None, hit)
    add_null_matches(matches, build, probe, nulls_equal)
    return matches.assemble()


class Range32(Direct32):
    """One 32-bit key column's codes for the radix join: the key less the build side's
    smallest valid key, over the build's range, which may be the whole 32 bits (the radix
    join's tables reserve no code: an empty slot is marked by its row). Probe keys outside
    the range never enter a partition. Fitted by one min / max pass over the build side and
    one read (a KeyEncoder also looks for the reserved values, a pass more). Example:

    >>> import torch
    >>> Range32(torch.tensor([7, -3, 9], dtype=torch.int32), None).kernel_input(
    ...     [torch.tensor([1], dtype=torch.int32)], None)[2:]
    (1, -3, 9)
    """

    refit = False

    def __init__(self, column: torch.Tensor, valid: torch.Tensor | None):
        super().__init__(column.dtype)
        values = column if column.dtype == torch.int32 else canonical(column)
        if column.shape[0] == 0:
            self.low, self.high = 0, -1  # nothing matches
            return
        if valid is None:
            low, high = torch.aminmax(values)
        else:
            info = torch.iinfo(values.dtype)
            low = torch.where(valid, values, info.max).min()
            high = torch.where(valid, values, info.min).max()
        self.low, self.high = torch.stack([low.to(torch.int64), high.to(torch.int64)]).tolist()


def _rows_of(side: tuple, partitions: torch.Tensor, used: int
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, rows) of a partitioned side's rows that lie in ``partitions``, the codes as
    int64 (4-byte codes zero-extended: the global table's 8-byte keys reserve only two
    patterns above 2**32, which no code takes)."""
    codes, rows, bounds = side
    counts = bounds[1:] - bounds[:-1]
    chosen = torch.zeros(counts.shape[0], dtype=torch.bool, device=codes.device)
    chosen[partitions] = True
    mine = chosen.repeat_interleave(counts, output_size=used).nonzero().squeeze(1)
    codes = _take(codes, mine).to(torch.int64)
    if side[0].dtype == torch.int32:
        codes &= 0xFFFFFFFF
    return codes, _take(rows, mine).to(torch.int64)


def _join_overflowed(matches: _Matches, sides: list, overflowed: torch.Tensor,
                     used: tuple[int, int], hit: torch.Tensor | None) -> None:
    """The overflowed partitions' rows joined by one global table over their build rows."""
    build_codes, build_rows = _rows_of(sides[0], overflowed, used[0])
    probe_codes, probe_rows = _rows_of(sides[1], overflowed, used[1])
    joined = RowTable(_Coded(torch.int64, None), [build_codes], None, build_codes.shape[0],
                   build_codes.device)
    if hit is not None:
        hit[probe_rows] = joined.matched([probe_codes], None)
        return
    where, found = joined.pairs([probe_codes], None)
    found = _take(build_rows, found)
    matches.add_pairs(_take(probe_rows, where), found)
    if matches.build_hit is not None:
        matches.build_hit[found] = 1
