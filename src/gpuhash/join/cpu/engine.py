"""The join's CPU engine: a join's build side stored in a MultiMap's table by key code, and
its probe, over the same bytes as the CUDA engine (join/cuda/engine.py), whose kernels these
operations mirror (join/kernels/join.cu)."""

from __future__ import annotations

import torch

from gpuhash._common.constants import RANK_CHUNK_WORDS
from gpuhash.table.cpu.engine import _M32, _matches, _place, _sentinels
from gpuhash.table.format import TableState


def join_codes(key_bytes: int, keys: torch.Tensor, valid: torch.Tensor | None, shape: int,
               low: int, high: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's key code as ``key_bytes`` of key bits, and whether the row can match at
    all: the rule of the CUDA kernels' gh_join_code (join/kernels/join_code.cuh). ``shape`` 0: the
    column holds codes already; 1: signed values, code = value - low within [low, high]; 2:
    the same for unsigned 32-bit values."""
    if shape == 0:
        codes, usable = keys, torch.ones(keys.shape[0], dtype=torch.bool)
    elif (shape == 1 and low == -2**31 and -2**31 <= high < 2**31
          and keys.dtype == torch.int32 and key_bytes == 4):
        # int32 values offset by 2**31 (Direct32): as 32-bit patterns, the value with its sign
        # bit flipped; two ops where the general rule takes eight over int64 copies
        usable = keys <= high
        codes = keys ^ -2**31
    else:
        values = keys.to(torch.int64)
        if shape == 2:
            values &= _M32
        usable = (values >= low) & (values <= high)
        codes = torch.where(usable, values - low, 0)
        if key_bytes == 4:  # codes below 2**32 - 2 as 32-bit patterns
            codes = torch.where(codes >= 2**31, codes - 2**32, codes).to(torch.int32)
    if valid is not None:
        usable &= valid
    return codes, usable


def _usable_rows(codes: torch.Tensor, usable: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The usable rows' codes and their row numbers (None: every row, in order, with no
    copy of the codes made)."""
    if bool(usable.all()):
        return codes, None
    rows = usable.nonzero().squeeze(1)
    return codes.index_select(0, rows), rows


def _direct_build(direct: torch.Tensor, codes: torch.Tensor, usable: torch.Tensor,
                  valid: torch.Tensor | None) -> bool:
    """Fill the direct array as join/kernels/join_build.cuh's gh_join_direct_rows does; whether it
    holds the build side. Where it does not, only its last word (failed = 1) is defined."""
    failed = bool((~usable).any()) if valid is None else bool((valid & ~usable).any())
    codes, rows = _usable_rows(codes, usable)
    if rows is None:
        rows = torch.arange(codes.shape[0])
    codes = codes.to(torch.int64) & _M32  # a 4-byte table's codes as the unsigned kernel's
    at = codes & (direct.shape[0] - 2)
    if rows.shape[0] and int(rows[-1]) >= _M32:
        failed = True  # row + 1 must fit the entry's 32 bits
    elif not failed and at.shape[0] and int(torch.bincount(at).max()) > 1:
        failed = True  # an entry claimed twice
    if failed:
        direct[-1] = 1
        return False
    direct[at] = ((rows + 1) << 32) | codes
    return True




def _ranked_build(words: torch.Tensor, ranked: torch.Tensor, codes: torch.Tensor,
                  usable: torch.Tensor, valid: torch.Tensor | None) -> bool:
    """Fill a ranked array (``words``: its bits and ranks, then the failed word; ``ranked``: the
    base's complement, the rows in code order, a word a chunk) as join/kernels/join_build.cuh
    does (gh_join_ranked_base, gh_join_ranked_bits, gh_join_ranks, gh_join_ranked_rows); whether
    it holds the build side. Where it does not, only the failed word is defined."""
    count = words.shape[0] - 1
    failed = bool((~usable).any()) if valid is None else bool((valid & ~usable).any())
    rows_words = (usable.shape[0] + 1) // 2
    codes, rows = _usable_rows(codes, usable)
    if rows is None:
        rows = torch.arange(codes.shape[0])
    codes = codes.to(torch.int64) & _M32  # a 4-byte table's codes as the unsigned kernel's
    base = int(codes.min()) if codes.shape[0] else _M32
    ranked[0] = ~base & _M32  # the smallest code's complement, in the word's low half
    at = codes - base
    if rows.shape[0] and int(rows[-1]) >= 0x7FFFFFFF:
        failed = True  # rows are 4-byte
    elif at.shape[0] and (int(at.max()) >> 5 >= count or int(torch.bincount(at).max()) > 1):
        failed = True  # a code past the bits, or a repeated one
    if failed:
        words[-1] = 1
        return False
    which = at >> 5
    bits = torch.zeros(count, dtype=torch.int64).index_add_(0, which, 1 << (at & 31))
    counts = torch.bincount(which, minlength=count)
    rank = torch.cumsum(counts, 0) - counts
    words[:count] = (rank << 32) | bits
    ranked[1 + rows_words:1 + rows_words + -(-count // RANK_CHUNK_WORDS)] = rank[::RANK_CHUNK_WORDS]
    order = torch.argsort(at)
    ranked[1:1 + rows_words].view(torch.int32)[:order.shape[0]] = rows.index_select(
        0, order).to(torch.int32)
    return True


def _popcount32(x: torch.Tensor) -> torch.Tensor:
    """Set bits of each int64's low 32 bits (torch has no popcount)."""
    x = x & _M32
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return ((x * 0x01010101) & _M32) >> 24


def build(state: TableState, keys: torch.Tensor, valid: torch.Tensor | None,
                     shape: int, low: int, high: int, *, groups: torch.Tensor,
                     direct: torch.Tensor | None = None,
                     ranked: torch.Tensor | None = None) -> None:
    """Store every usable build row by its code, once a code: its row number, or for a code
    of several rows ~start of their group in ``state.join_groups[0]`` (the row count at
    start, the rows after it, in row order); groups[0] gets the number of rows that repeat a
    code, groups[1] the group array's length. A non-null row outside the code range is
    counted as unplaced (counts[2]), as the kernel does. ``direct``: the direct array (with
    ``ranked``, a ranked array's bits), tried first; where it holds every row the table is
    left empty."""
    state.join_groups = (torch.empty(0, dtype=state.spec.value_dtype), groups)
    codes, usable = join_codes(state.spec.key_bytes, keys, valid, shape, low, high)
    if direct is not None and (_direct_build(direct, codes, usable, valid) if ranked is None
                               else _ranked_build(direct, ranked, codes, usable, valid)):
        return
    outside = int((~usable).sum()) if valid is None else int((valid & ~usable).sum())
    if outside:
        state.counts[2] += outside
    codes, rows = _usable_rows(codes, usable)
    if rows is None:
        rows = torch.arange(codes.shape[0])
    # codes value - low of a range narrower than the key width minus its two reserved codes
    # (a Direct32 or fitted encoder's) cannot be reserved: no pass over them is needed
    fits = shape != 0 and high - low < state.spec.key_mask - 1
    tomb = _sentinels(state)[1]
    reserved = None if fits else (codes == tomb) | (codes == _sentinels(state)[0])
    if reserved is not None and bool(reserved.any()):  # as the kernel does: unplaced
        state.counts[2] += int(reserved.sum())
        keep = ~reserved
        codes, rows = codes[keep], rows[keep]
    slots, held = _place(state, codes, rows.to(state.spec.value_dtype), want_slots=True)
    repeats = codes.shape[0] - int(held.sum())
    if repeats:
        groups[0] = repeats
        _group_rows(state, slots, rows, groups)


def _group_rows(state: TableState, slots: torch.Tensor, rows: torch.Tensor,
                groups: torch.Tensor) -> None:
    """The group array of a build whose codes repeat (join/kernels/join_build.cuh:
    gh_join_group_rows; here in row order, there in no set order): ``slots`` and ``rows`` say
    where each stored row's code is."""
    grouped = torch.bincount(slots, minlength=state.spec.num_slots).index_select(0, slots) > 1
    order = torch.argsort(slots[grouped], stable=True)
    group_slots, sizes = torch.unique_consecutive(slots[grouped][order], return_counts=True)
    starts = torch.cumsum(sizes + 1, 0) - (sizes + 1)
    ordered = torch.empty(int(starts[-1] + sizes[-1] + 1), dtype=state.spec.value_dtype)
    ordered[starts] = sizes.to(ordered.dtype)
    group = torch.repeat_interleave(torch.arange(sizes.shape[0]), sizes)
    rank = torch.arange(group.shape[0]) - (torch.cumsum(sizes, 0) - sizes).index_select(0, group)
    ordered[starts.index_select(0, group) + 1 + rank] = rows[grouped][order].to(ordered.dtype)
    state.value_view()[group_slots] = (~starts).to(ordered.dtype)
    groups[1] = ordered.shape[0]
    state.join_groups = (ordered, groups)


def _expand_groups(state: TableState, probe: torch.Tensor, build: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs (probe position, build row) from one value a match: a row number, or ~start of
    a group, whose rows each make a pair (join/kernels/join.cu: gh_join_probe)."""
    group = build < 0
    if not bool(group.any()):
        return probe, build
    ordered = state.join_groups[0].to(torch.int64)
    start = torch.where(group, ~build, 0)
    count = torch.where(group, ordered.index_select(0, start), 1)
    which = torch.repeat_interleave(torch.arange(count.shape[0]), count)
    rank = torch.arange(which.shape[0]) - (torch.cumsum(count, 0) - count).index_select(0, which)
    build = build.index_select(0, which)
    at = torch.where(build < 0, start.index_select(0, which) + 1 + rank, 0)
    return probe.index_select(0, which), torch.where(build < 0, ordered.index_select(0, at),
                                                     build)


def _direct_matches(direct: torch.Tensor, codes: torch.Tensor,
                    ranked: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(position in ``codes``, build row) of each code's entry in a direct array, or its bit
    in a ranked one (``ranked``: _ranked_build)."""
    codes = codes.to(torch.int64) & _M32
    if ranked is not None:
        count = direct.shape[0] - 1
        at = codes - (~int(ranked[0]) & _M32)
        inside = ((at >= 0) & (at >> 5 < count)).nonzero().squeeze(1)
        at = at.index_select(0, inside)
        word = direct.index_select(0, at >> 5)
        held = ((word >> (at & 31)) & 1).nonzero().squeeze(1)
        at, word = at.index_select(0, held), word.index_select(0, held)
        rank = (word >> 32) + _popcount32(word & ((1 << (at & 31)) - 1))
        rows = ranked[1:].view(torch.int32).index_select(0, rank).to(torch.int64)
        return inside.index_select(0, held), rows
    entries = direct.index_select(0, codes & (direct.shape[0] - 2))
    hit = ((entries & _M32) == codes) & (entries != 0)
    found = hit.nonzero().squeeze(1)
    return found, ((entries.index_select(0, found) >> 32) & _M32) - 1  # not sign-extended


def probe(state: TableState, keys: torch.Tensor, valid: torch.Tensor | None,
                     shape: int, low: int, high: int, *, keep_unmatched: bool = False,
                     build_hit: torch.Tensor | None = None,
                     probe_hit: torch.Tensor | None = None,
                     direct: torch.Tensor | None = None, ranked: torch.Tensor | None = None,
                     one_row: str | None = None, unmatched_build: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None]:
    """(probe row, build row) of every match, plus (row, -1) for rows without one when
    ``keep_unmatched``; with ``one_row`` "semi" / "anti" instead one (row, -1) for each row
    that has / lacks a match; ``build_hit`` marked at matched build rows; with ``probe_hit``
    only that mask is written. Then the build rows the table lacks (counts[2]), as the kernel
    reports them, and with ``unmatched_build`` the build rows ``build_hit`` leaves unmarked,
    ascending (else None). ``direct`` (and ``ranked``): read instead of the table where it
    holds the build side."""
    unplaced = int(state.counts[2])
    codes, usable = join_codes(state.spec.key_bytes, keys, valid, shape, low, high)
    codes, rows = _usable_rows(codes, usable)
    if direct is not None and int(direct[-1]) == 0:
        probe, build = _direct_matches(direct, codes, ranked)
    else:
        probe, slots = _matches(state, codes)
        build = state.value_view().index_select(0, slots).to(torch.int64)
        if (probe_hit is None and one_row is None) or build_hit is not None:
            probe, build = _expand_groups(state, probe, build)  # a hits-only probe needs none
    if rows is not None:
        probe = rows.index_select(0, probe)
    unmatched = None
    if build_hit is not None:
        build_hit[build] = 1
        if unmatched_build:
            unmatched = (build_hit == 0).nonzero().squeeze(1)
    if probe_hit is not None:
        probe_hit.zero_()
        probe_hit[probe] = True
        empty = torch.zeros(0, dtype=torch.int64)
        return empty, empty, unplaced, unmatched
    if one_row is not None:
        hit = torch.zeros(keys.shape[0], dtype=torch.bool)
        hit[probe] = True
        picked = (hit if one_row == "semi" else ~hit).nonzero().squeeze(1)
        return picked, torch.full_like(picked, -1), unplaced, unmatched
    if keep_unmatched:
        seen = torch.zeros(keys.shape[0], dtype=torch.bool)
        seen[probe] = True
        missing = (~seen).nonzero().squeeze(1)
        probe = torch.cat([probe, missing])
        build = torch.cat([build, torch.full_like(missing, -1)])
    return probe, build, unplaced, unmatched
