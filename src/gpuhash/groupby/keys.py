"""Group keys made dense group ids: one int64 id a row in ``[0, groups)``, and each group's keys.

Every key column is first made a *code* column: int64 values in ``[0, span)``, equal where the
keys are equal, one extra code (``span - 1``) for a null key when nulls form a group. Integer
columns whose values span at most ``DENSE_SPAN`` times the rows (ids, small categories) are
coded by offset (``key - low``); any other column by the core's hash table (HashMap), a code a
distinct key (on the CPU engine a sort numbers them: faster there than its hash table).
Columns are then combined as digits of one mixed-radix code (first column most
significant) while the product of spans stays at most ``DENSE_LIMIT``; past it, the combined
code so far is compacted to its distinct values first. The last combined code is compacted to
dense ids: by a presence array over the span when the span is small, by the hash table
otherwise.

Order: an offset code keeps the keys' order, so does the presence compaction; a hashed column,
or a compaction by hash, does not. ``order="sorted"`` sorts what the hash gave (its distinct
values only, never the rows), so ids follow the keys' order, nulls last; ``order="first"``
numbers groups by their first row (pandas' ``factorize``); ``order="any"`` keeps whatever the
compaction gave.

Example:
    >>> import torch
    >>> groups = factorize_columns([torch.tensor([7, 3, 7, 9])], [None], dropna=False,
    ...                            order="first")
    >>> groups.ids.tolist(), groups.count, groups.keys[0].tolist()
    ([0, 1, 0, 2], 3, [7, 3, 9])
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from gpuhash._common.arrays import gather, zeroed
from gpuhash.groupby.engine import engine_for

Order = Literal["any", "first", "sorted"]

DENSE_SPAN = 4  # a column (or a combined code) spanning at most this many times the rows ...
DENSE_FLOOR = 1 << 16  # ... or at most this many values is coded by offset / a presence array
DENSE_LIMIT = 1 << 62  # combined codes stay below this: int64 arithmetic never wraps
BOUNDS_SAMPLE_FROM = 1 << 24  # columns this long are first read at BOUNDS_SAMPLE rows for
BOUNDS_SAMPLE = 1 << 16  # their bounds (a second synchronisation costs less than the pass)
SAMPLED_SPAN = 1 << 10  # a sample spanning fewer values holds each many times (64, were they
# even): its bounds are rarely short of the column's, and may stand for them (``sampled``)


@dataclass(frozen=True)
class Groups:
    """Dense group ids and each group's keys.

    ``ids``: int64 a row, ``-1`` for a row whose null key was dropped. ``keys[c]``: column
    ``c``'s key of each group (the input's dtype; a null key's group holds zero there) and
    ``key_valid[c]``: False for a null key's group, or None when the column has no null group.
    ``strategy``: how the codes were compacted, for ``explain``.
    """

    ids: torch.Tensor
    count: int
    keys: list[torch.Tensor] | None
    key_valid: list[torch.Tensor | None] | None
    strategy: str
    # sparse: ``ids`` are codes of which some hold no row (``keys`` None); ``decode`` gives
    # the keys of chosen codes. Only when asked for (a group-by, which learns the codes in use
    # from its first aggregation's row counts, sparing a pass over the rows).
    decode: Callable[[torch.Tensor], tuple[list, list]] | None = None
    # ids minus offset are the codes: a sparse group-by on one integer column without nulls
    # takes the column itself as its ids (its engine subtracts the offset as it reads them)
    offset: int = 0
    # the offset and count come from a sample of the column (factorize_columns' ``sampled``):
    # rows outside them hold no code, and the caller counts the rows its reductions saw
    sampled: bool = False

    def codes(self) -> torch.Tensor:
        """The ids as int64 codes (the offset taken off)."""
        if self.offset == 0 and self.ids.dtype == torch.int64:
            return self.ids
        return self.ids.to(torch.int64) - self.offset

    def narrow_codes(self) -> torch.Tensor:
        """The codes as int32 where the ids are int32 (the engine's passes then read half the
        bytes, and no int64 copy is made); else :meth:`codes`."""
        if self.ids.dtype == torch.int32 and self.count < 2**31:
            return self.ids if self.offset == 0 else self.ids - self.offset
        return self.codes()

    def compacted(self, used: torch.Tensor) -> Groups:
        """A sparse Groups narrowed to the codes ``used`` lists (ascending)."""
        keys, key_valid = self.decode(used)
        return Groups(self.ids, used.shape[0], keys, key_valid, self.strategy,
                      offset=self.offset, sampled=self.sampled)


@dataclass(frozen=True)
class _Codes:
    """One column as codes in [0, span) (-1: a dropped null); ``ordered``: codes follow the
    keys' order."""

    codes: torch.Tensor | None  # None: not needed (the caller reads the column itself)
    span: int
    ordered: bool
    how: str  # "offset" or "hash"
    low: int = 0  # offset codes: the key of code 0
    uniques: torch.Tensor | None = None  # hashed codes: the int64 key of each code
    nulls: bool = False  # the last code is the null key's
    first: torch.Tensor | None = None  # codes numbered by first appearance: each one's row


def _as_int64(column: torch.Tensor) -> torch.Tensor:
    """int64 values equal exactly where the keys are equal (floats by bits, -0.0 as 0.0)."""
    dtype = column.dtype
    if dtype == torch.bool:
        return column.to(torch.int64)
    if dtype.is_floating_point:
        column = column.to(torch.float64) + 0.0  # -0.0 + 0.0 is 0.0: one code for zero
        return column.view(torch.int64)
    if dtype == torch.uint64:
        return column.view(torch.int64)
    if dtype in (torch.uint32, torch.uint16):
        signed = torch.int32 if dtype == torch.uint32 else torch.int16
        return column.view(signed).to(torch.int64) & ((1 << (8 * dtype.itemsize)) - 1)
    return column.to(torch.int64)


def _from_int64(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return values != 0
    if dtype.is_floating_point:
        return values.view(torch.float64).to(dtype)
    if dtype == torch.uint64:
        return values.view(torch.uint64)
    if dtype in (torch.uint32, torch.uint16):
        signed = torch.int32 if dtype == torch.uint32 else torch.int16
        return values.to(signed).view(dtype)
    return values.to(dtype)


def _hashed(values: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(code a row, the distinct values by code, each code's first row where the codes follow
    first appearance, else None): the engine's group_compact."""
    return engine_for(values.device).group_compact(values)


def _order_key(uniques: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Values whose int64 (or float) order is the keys' order."""
    if dtype.is_floating_point:
        return uniques.view(torch.float64)
    if dtype == torch.uint64:  # the top bit flipped: unsigned order as signed
        return uniques ^ torch.iinfo(torch.int64).min
    return uniques


def _sorted_codes(codes: torch.Tensor, uniques: torch.Tensor, dtype: torch.dtype,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes renumbered so that they follow the distinct keys' order."""
    order = torch.argsort(_order_key(uniques, dtype))
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.shape[0], device=order.device)
    return gather(rank, codes), uniques[order]


def _fits_dense(span: int, rows: int) -> bool:
    return span <= max(DENSE_SPAN * rows, DENSE_FLOOR)


_RANGED = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def _sample_bounds(column: torch.Tensor, valid: torch.Tensor | None
                   ) -> tuple[int, int] | None:
    """(least, greatest) of BOUNDS_SAMPLE evenly spaced rows of a long integer column without
    nulls; None for any other column."""
    rows = column.shape[0]
    if valid is not None or column.dtype not in _RANGED or rows < BOUNDS_SAMPLE_FROM:
        return None
    return _least_and_most(column[::rows // BOUNDS_SAMPLE])


def _bounds(column: torch.Tensor, valid: torch.Tensor | None,
            sample: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """(least, greatest) of an integer column without nulls, read from the column as it is
    (no int64 copy first); None for any other column. A long column is first read at
    BOUNDS_SAMPLE evenly spaced rows (``sample``: those bounds, when read already): where
    those alone span past the dense range, so does the column, and theirs are returned
    (every use of the bounds then only learns that the column is not dense), sparing a
    pass over it."""
    if valid is not None or column.dtype not in _RANGED or not column.shape[0]:
        return None
    sample = _sample_bounds(column, valid) if sample is None else sample
    if sample is not None and not _fits_dense(sample[1] - sample[0] + 1, column.shape[0]):
        return sample
    return _least_and_most(column)


def _least_and_most(column: torch.Tensor) -> tuple[int, int]:
    """The column's least and greatest value, learnt in one synchronisation."""
    low, high = torch.stack(torch.aminmax(column)).tolist()
    return int(low), int(high)


def _as_offsets(column: torch.Tensor, valid: torch.Tensor | None,
                bounds: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """(low, span) of an integer column without nulls whose values fit the dense range: its
    codes are then ``key - low``. ``bounds``: the column's _bounds, when read already."""
    bounds = _bounds(column, valid) if bounds is None else bounds
    if bounds is None:
        return None
    low, high = bounds
    return (low, high - low + 1) if _fits_dense(high - low + 1, column.shape[0]) else None


def column_codes(column: torch.Tensor, valid: torch.Tensor | None, *, keep_null: bool,
                 order: Order) -> _Codes:
    """The codes of one key column (see the module docstring)."""
    dtype, rows = column.dtype, column.shape[0]
    bounds = _bounds(column, valid)
    ranged = _as_offsets(column, valid, bounds)
    if ranged is not None:
        low, span = ranged
        return _Codes(column.to(torch.int64) - low, span, True, "offset", low)
    values = _as_int64(column)
    nulls = None if valid is None else ~valid
    first = None
    if dtype.is_floating_point:  # NaN is a null key, as in pandas and polars
        nan = torch.isnan(column)
        nulls = nan if nulls is None else nulls | nan
    ranged = not dtype.is_floating_point and dtype != torch.uint64
    present = rows > 0
    if nulls is not None and rows:
        # the first present row's key stands in for the nulls (no group of its own), so the
        # filled column's bounds are the present keys' (no copy of the present rows)
        at = torch.argmax((~nulls).view(torch.uint8))
        values = torch.where(nulls, values[at], values)
        some = (~nulls[at]).to(torch.int64)
        if ranged:
            low, high, present = torch.stack([*torch.aminmax(values), some]).tolist()
            bounds = low, high
        else:
            present = bool(some)
    if not present:  # no key at all (or only nulls)
        codes, span, ordered, how = torch.zeros_like(values), 0, True, "offset"
        low, uniques = 0, None
    else:
        if bounds is None:  # (a column with bounds has no nulls: then they are its keys')
            bounds = _least_and_most(values) if ranged else (0, -1)
        low, high = bounds
        if ranged and _fits_dense(high - low + 1, rows):
            codes, span, ordered, how = values - low, high - low + 1, True, "offset"
            uniques = None
        else:
            codes, uniques, first = _hashed(values)
            if order == "sorted":
                codes, uniques = _sorted_codes(codes, uniques, dtype)
            span, ordered, how = uniques.shape[0], order == "sorted", "hash"
            # a null's stand-in row may come before its key's first row
            first = None if order == "sorted" or nulls is not None else first
    if nulls is not None:  # the null code comes last: nulls sort last, as in pandas
        codes = torch.where(nulls, span if keep_null else -1, codes)
        span += 1
    return _Codes(codes, max(span, 1), ordered, how, low, uniques, nulls is not None,
                  first if how == "hash" else None)


def _decoder(parts: list[_Codes], dtypes: list[torch.dtype]):
    """Keys of combined codes made of every part's digit (no compaction between them)."""
    def decode(codes: torch.Tensor) -> tuple[list, list]:
        keys, key_valid = [], []
        rest = codes
        for part, dtype in zip(reversed(parts), reversed(dtypes)):
            if len(parts) == 1:  # the code is the digit
                digit = rest
            else:
                digit = rest % part.span
                rest = rest // part.span
            ok = None
            if part.nulls:
                ok = digit != part.span - 1
                digit = torch.where(ok, digit, 0)
            value = digit + part.low if part.uniques is None else (
                part.uniques[digit] if part.uniques.shape[0] else digit)
            key = _from_int64(value, dtype)
            if ok is not None:
                key = zeroed(key, ~ok)
                ok = None if ok.device.type == "cpu" and bool(ok.all()) else ok
            keys.append(key)
            key_valid.append(ok)
        return keys[::-1], key_valid[::-1]
    return decode


def _compact(code: torch.Tensor, span: int, order: Order, *, dropped: bool = True
             ) -> tuple[torch.Tensor, int, str]:
    """Dense ids in [0, groups) of a code column (-1 stays -1). ``dropped`` False: the
    caller knows no code is -1 (a pass over the rows and two selects fewer)."""
    rows = code.shape[0]
    if not dropped and not _fits_dense(span, rows):
        ids, uniques, _ = _hashed(code.to(torch.int64))
        if order == "sorted":  # codes are non-negative: int64 order is theirs
            ids, uniques = _sorted_codes(ids, uniques, torch.int64)
        return ids, uniques.shape[0], "hash"
    kept = code >= 0
    if _fits_dense(span, rows):
        present = torch.zeros(span + 1, dtype=torch.bool, device=code.device)
        slot = torch.where(kept, code, span)
        present[slot] = True
        present[span] = False
        renumber = torch.cumsum(present, 0) - 1
        return torch.where(kept, gather(renumber, slot), -1), int(present.sum()), "dense"
    at = torch.argmax(kept.view(torch.uint8))  # a kept row (no copy of the kept ones)
    if not bool(kept[at]):  # every row dropped: no group at all
        return torch.full_like(code, -1, dtype=torch.int64), 0, "hash"
    values = torch.where(kept, code, code[at])
    ids, uniques, _ = _hashed(values.to(torch.int64))
    if order == "sorted":  # codes are non-negative: int64 order is theirs
        ids, uniques = _sorted_codes(ids, uniques, torch.int64)
    return torch.where(kept, ids, -1), uniques.shape[0], "hash"


def _first_row_order(ids: torch.Tensor, count: int, *, dropped: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids renumbered by each group's first row, and that first row of each group.
    ``dropped`` False: the caller knows no id is -1 (three selects a row fewer)."""
    rows = ids.shape[0]
    if not count:  # no group: every row dropped (or none at all)
        return ids, ids.new_zeros(0)
    kept = ids >= 0 if dropped else None
    first = torch.full((count + 1,), rows, dtype=torch.int64, device=ids.device)
    where = torch.where(kept, ids, count) if dropped else ids
    first.scatter_reduce_(0, where, torch.arange(rows, device=ids.device), "amin")
    first = first[:count]
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(count, device=ids.device)
    if not dropped:
        return gather(rank, ids), first[order]
    return torch.where(kept, gather(rank, torch.where(kept, ids, 0)), -1), first[order]


_SIGNED = (torch.int8, torch.int16, torch.int32, torch.int64)  # the engines' group_codes keys


def _offset_digits(column: torch.Tensor, valid: torch.Tensor | None, rows: int):
    """(the column group_codes reads, low, span, nulls) of one integer key column coded by
    offset, or None where it is not dense. A column with nulls gets one more digit, its
    null's: its null rows read as ``high + 1`` (so the column must hold that value)."""
    if valid is None:
        ranged = _as_offsets(column, None)
        return None if ranged is None else (column, *ranged, None)
    if not rows:
        return None
    nulls = ~valid
    at = torch.argmax(valid.view(torch.uint8))  # a present row: its key fills the nulls
    filled = torch.where(nulls, column[at], column)
    least, most = torch.aminmax(filled)
    low, high, present = torch.stack([least.to(torch.int64), most.to(torch.int64),
                                      valid[at].to(torch.int64)]).tolist()
    if not present or not _fits_dense(high - low + 2, rows) or high >= torch.iinfo(
            column.dtype).max:
        return None
    return torch.where(nulls, high + 1, column), low, high - low + 2, nulls


def _combined_offsets(columns, valids, *, sparse: bool, dropna: bool, order: Order
                      ) -> Groups | None:
    """Integer key columns (several, or one with nulls), every one coded by offset (a null its
    own digit) and their product of spans within DENSE_LIMIT: one pass of the engine's
    group_codes, then either those codes (``sparse``) or their compaction. None where the
    columns do not qualify."""
    if any(c.dtype not in _SIGNED for c in columns):
        return None
    rows = columns[0].shape[0]
    digits = []
    for column, valid in zip(columns, valids):
        digit = _offset_digits(column, valid, rows)
        if digit is None:
            return None
        digits.append(digit)
    total = 1
    for _, _, span, _ in digits:
        total *= span
    if total > DENSE_LIMIT:
        return None
    dtype = torch.int32 if total < 2**31 else torch.int64
    lows, spans = [low for _, low, _, _ in digits], [span for _, _, span, _ in digits]
    code = engine_for(columns[0].device).group_codes([d[0] for d in digits], lows, spans,
                                                     dtype)
    nulls = [n for *_, n in digits if n is not None]
    dropped = dropna and bool(nulls)
    if dropped:  # a row with any null key is in no group
        code = torch.where(functools.reduce(torch.logical_or, nulls), -1, code)
    strategy = f"{'+'.join('offset' for _ in columns)} keys"
    parts = [_Codes(None, span, True, "offset", low, nulls=n is not None)
             for _, low, span, n in digits]
    if sparse and _fits_dense(total, rows) and order != "first":
        return Groups(code, total, None, None, f"{strategy}, codes as ids",
                      _decoder(parts, [c.dtype for c in columns]))
    ids, count, how = _compact(code, total, order, dropped=dropped)
    if order == "first":
        ids, first = _first_row_order(ids, count, dropped=dropped)
    else:  # any row of a group stands for it: its keys are read there (no digit arithmetic)
        first = _any_row(ids, count, dropped=dropped)
    return _with_keys(ids, count, columns, valids, first, f"{strategy}, {how} ids")


def _any_row(ids: torch.Tensor, count: int, *, dropped: bool) -> torch.Tensor:
    """A row of each group (ids -1: a dropped row, where ``dropped``)."""
    rows = ids.shape[0]
    first = torch.empty(count + dropped, dtype=torch.int64, device=ids.device)
    first[torch.where(ids >= 0, ids, count) if dropped else ids] = torch.arange(
        rows, device=ids.device)
    return first[:count]


def factorize_columns(columns: list[torch.Tensor], valids: list[torch.Tensor | None], *,
                      dropna: bool, order: Order, sparse: bool = False,
                      sampled: bool = False) -> Groups:
    """Dense group ids of the rows of one or more key columns (see the module docstring).
    ``sparse``: where the combined code is small enough to compact by a presence array, give
    the codes themselves instead (Groups.decode, Groups.compacted). ``sampled`` (with
    ``sparse``): a long integer key column whose sample spans under SAMPLED_SPAN values may
    take the sample's bounds as its own (Groups.sampled), sparing the pass that reads its
    bounds; for callers whose every pass leaves out, and counts, the rows outside them."""
    rows = columns[0].shape[0]
    if sparse and len(columns) == 1 and order != "first":
        sample = _sample_bounds(columns[0], valids[0])
        guessed = sampled and sample is not None and sample[1] - sample[0] < SAMPLED_SPAN
        bounds = sample if guessed else _bounds(columns[0], valids[0], sample)
        ranged = _as_offsets(columns[0], valids[0], bounds)
        if ranged is not None:  # the column is its own ids: no pass over it to make codes
            low, span = ranged
            decode = _decoder([_Codes(None, span, True, "offset", low)], [columns[0].dtype])
            return Groups(columns[0], span, None, None,
                          "offset keys, the keys as ids" + (", bounds sampled" * guessed),
                          decode, offset=low, sampled=guessed)
    if len(columns) > 1 or valids[0] is not None:
        made = _combined_offsets(columns, valids, sparse=sparse, dropna=dropna, order=order)
        if made is not None:
            return made
    strategy, parts = [], []
    code, span, decodable = None, 1, True
    for column, valid in zip(columns, valids):
        part = column_codes(column, valid, keep_null=not dropna, order=order)
        strategy.append(part.how)
        parts.append(part)
        if code is None:
            code, span = part.codes, part.span
            continue
        if span * part.span > DENSE_LIMIT:  # compact the digits so far first
            code, span, _ = _compact(code, span, order)
            decodable = False
        dropped = (code < 0) | (part.codes < 0)
        code = torch.where(dropped, -1, code * part.span + part.codes)
        span *= part.span
    if sparse and decodable and _fits_dense(span, rows) and order != "first":
        decode = _decoder(parts, [c.dtype for c in columns])
        return Groups(code, span, None, None, f"{'+'.join(strategy)} keys, codes as ids",
                      decode)
    known_first = None
    if len(parts) == 1 and parts[0].how == "hash" and not parts[0].nulls:
        ids, count, how = code, span, "hash"  # hashed codes are dense already: every one used
        known_first = parts[0].first
    else:
        ids, count, how = _compact(code, span, order)
    if known_first is not None:  # numbered by first appearance already
        first = known_first
    elif order == "first":  # rows are dropped only for null keys under dropna
        dropped = dropna and any(part.nulls for part in parts)
        ids, first = _first_row_order(ids, count, dropped=dropped)
    else:  # any row of each group stands for it
        first = _any_row(ids, count, dropped=True)
    return _with_keys(ids, count, columns, valids, first,
                      f"{'+'.join(strategy)} keys, {how} ids")


def _with_keys(ids, count, columns, valids, first, strategy) -> Groups:
    """Groups whose keys are read at a row of each group (``first``)."""
    keys, key_valid = [], []
    for column, valid in zip(columns, valids):
        key = gather(column, first)
        null = None if valid is None else ~gather(valid, first)
        if column.dtype.is_floating_point:
            nan = torch.isnan(key)
            null = nan if null is None else null | nan
        if null is not None and not bool(null.any()):
            null = None
        if null is not None:
            key = zeroed(key, null)
        keys.append(key)
        key_valid.append(None if null is None else ~null)
    return Groups(ids, count, keys, key_valid, strategy)
