"""The hash-partitioned join strategy: both sides split by the hash of their key codes, each
part's build table made, probed and dropped before the next, so a join whose table would
pass the memory budget runs within it. The streamed join of host keys splits its keys by
the same mixing constant and bits (``_MIX``, ``_PART_SHIFT``).

Example:
    >>> import torch
    >>> sorted(set(parts_of(torch.arange(1000), 4).tolist()))  # every part gets codes
    [0, 1, 2, 3]
"""

from __future__ import annotations

import torch

from gpuhash._common.hashing import GOLDEN_INT64
from gpuhash.join.build import RowTable
from gpuhash.join.keys import KeyEncoder
from gpuhash.join.matches import _Matches, _take
from gpuhash.join.plan import JoinPlan
from gpuhash.join.sides import Side

_MIX = GOLDEN_INT64  # spreads codes over the top bits
_PART_SHIFT = 54             # the top 10 bits pick one of up to 1024 parts


def parts_of(codes: torch.Tensor, parts: int) -> torch.Tensor:
    """The part (0 .. ``parts`` - 1, a power of two) of each key code: the top bits of the
    code times an odd constant, so neighbouring codes spread over the parts."""
    mixed = codes.to(torch.int64) * _MIX
    return (mixed >> _PART_SHIFT) & (parts - 1)


class _Coded:
    """Stands in for a KeyEncoder when the rows are key codes already (one column)."""

    refit = False

    def __init__(self, key_dtype: torch.dtype, code_span: int | None):
        self.key_dtype, self.code_span = key_dtype, code_span

    def kernel_input(self, columns: list[torch.Tensor], valid: torch.Tensor | None):
        return columns[0].contiguous(), valid, 0, 0, 0


def run_partitioned(left: Side, right: Side, plan: JoinPlan, nulls_equal: bool):
    """Both sides split by the hash of their key codes (the encoder is fitted once, on the
    whole build side, so equal keys get equal codes in every part); each part's table is
    built, probed and dropped before the next. Nulls are matched once, outside the parts,
    and the probe side's unmatched rows found at the end (a part sees only its rows).
    Each part's table is a RowTable built from the part's codes."""
    build, probe = (left, right) if plan.build_side == "left" else (right, left)
    device = build.device
    encoder = KeyEncoder(build.columns, build.valid)
    coded = _Coded(encoder.key_dtype, encoder.code_span)
    sides = []
    for side in (build, probe):
        codes, ok = encoder.encode(side.columns)
        usable = ok if side.valid is None else ok & side.valid
        rows = usable.nonzero().squeeze(1)
        codes = _take(codes, rows)
        sides.append((codes, rows, parts_of(codes, plan.parts)))
    (b_codes, b_rows, b_part), (p_codes, p_rows, p_part) = sides
    matches = _Matches(plan.how, plan.build_side != "left", probe.rows, build.rows, device)
    matches.keep_probe_here = True
    step = plan.chunk_rows
    for part in range(plan.parts):
        mine = (b_part == part).nonzero().squeeze(1)
        part_rows = _take(b_rows, mine)
        part_table = RowTable(coded, [_take(b_codes, mine)], None, mine.shape[0], device)
        theirs = (p_part == part).nonzero().squeeze(1)
        rows, codes = _take(p_rows, theirs), _take(p_codes, theirs)
        for start in range(0, rows.shape[0], step or max(rows.shape[0], 1)):
            chunk = slice(start, start + step) if step else slice(None)
            if not matches.pairs:
                matches.add_hits(rows[chunk], part_table.matched([codes[chunk]], None))
                continue
            where, found = part_table.pairs([codes[chunk]], None)
            found = _take(part_rows, found)
            matches.add_pairs(_take(rows[chunk], where), found)
            if matches.build_hit is not None:
                matches.build_hit[found] = 1
    add_null_matches(matches, build, probe, nulls_equal)
    return matches.assemble()


def add_null_matches(matches: _Matches, build, probe, nulls_equal: bool) -> None:
    """With ``nulls_equal``, every null probe row meets every null build row: for strategies
    whose kernels leave the nulls out (the parts here, the radix join's partitions)."""
    if not nulls_equal:
        return
    nulls_b, nulls_p = build.null_rows(), probe.null_rows()
    if nulls_b.shape[0] and nulls_p.shape[0]:
        if matches.pairs:
            matches.add_pairs(nulls_p.repeat_interleave(nulls_b.shape[0]),
                              nulls_b.repeat(nulls_p.shape[0]))
            if matches.build_hit is not None:
                matches.build_hit[nulls_b] = 1
        else:
            matches.add_hits(nulls_p, torch.ones_like(nulls_p, dtype=torch.bool))
