"""The group-by's CPU engine, the twin of groupby/cuda/engine.py over the same codes, values
and strings (see there for each operation), in numba loops on every core."""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from gpuhash._common.cpu import runtime
from gpuhash.join.arrow_gather import as_words

CHUNKS = 16  # fixed, so results do not depend on the thread count
CHUNKED_CELLS = 1 << 24  # chunks x groups past this: one chunk (memory, and the combine pass)
# one set of accumulators for this many groups or more is filled by ranges of groups, a core
# each (group_reduce_ranges), every core reading every row
RANGED_GROUPS = 1 << 16
ROWS_A_CELL = 4  # rows a chunk's accumulator cell at least: zeroing and combining the chunks'
# accumulators must stay small beside the rows (1e6 rows into 1e6 groups in 16 chunks zeroed
# and summed 384 MB a pass)
OPS = {"sum": 0, "min": 1, "max": 2}


def _chunks(rows: int, groups: int) -> int:
    """Chunks of a pass's rows, each with accumulators of its own (combined in chunk order):
    a function of the rows and groups only, so results do not depend on the thread count."""
    if CHUNKS * max(groups, 1) > CHUNKED_CELLS:
        return 1
    return max(1, min(CHUNKS, rows // (ROWS_A_CELL * max(groups, 1))))


def _cores() -> int:
    """The cores the ranges of groups are spread over (numba's thread count is not asked:
    asking starts its pool, which a forked child must not)."""
    import numba

    return min(runtime.host_cores(), numba.config.NUMBA_NUM_THREADS)


def group_reduce(codes: torch.Tensor, low: int, groups: int, values: torch.Tensor,
                 valid: torch.Tensor | None, op: str, *, rows: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(accumulator, valid values, rows) a group; see groupby/cuda/engine.py."""
    known = rows
    chunks = _chunks(codes.shape[0], groups)
    floats = values.dtype.is_floating_point
    acc = torch.float64 if floats else torch.int64
    out = torch.zeros((chunks, groups), dtype=acc)
    counts = torch.zeros((chunks, groups), dtype=torch.int64)
    rows = torch.zeros((chunks, groups), dtype=torch.int64)
    data = values.view(torch.uint8) if values.dtype == torch.bool else values
    mask = (torch.zeros(1, dtype=torch.bool) if valid is None else valid).numpy()
    if chunks == 1 and groups >= RANGED_GROUPS:  # many groups: every core, a range each
        parts = min(_cores(), max(1, groups // RANGED_GROUPS))
        runtime.run("group_reduce_ranges", codes.numpy(), low, data.numpy(), mask,
                    valid is not None, OPS[op], out[0].numpy(), counts[0].numpy(),
                    rows[0].numpy(), parts)
    else:
        runtime.run("group_reduce", codes.numpy(), low, data.numpy(), mask,
                    valid is not None, OPS[op], out.numpy(), counts.numpy(), rows.numpy())
    if valid is None and not floats:  # every row's value counted: the loop left counts alone
        counts = rows
    if chunks == 1:  # nothing to combine (a group without a value holds zero already)
        return out[0], counts[0], rows[0] if known is None else known
    total_counts = counts.sum(0)
    if op == "sum":
        combined = out.sum(0)
    else:  # chunks that saw no value hold zeros: they must not win
        empty = counts == 0
        # chunk by chunk: torch's int64 amin across rows is about 70 times its amax (0.7 ms
        # for 16 x 10,000 on two cores)
        if op == "min":
            filler = torch.inf if floats else torch.iinfo(torch.int64).max
            combined = functools.reduce(torch.minimum, out.masked_fill(empty, filler).unbind(0))
        else:
            filler = -torch.inf if floats else torch.iinfo(torch.int64).min
            combined = functools.reduce(torch.maximum, out.masked_fill(empty, filler).unbind(0))
        combined = torch.where(total_counts > 0, combined, torch.zeros((), dtype=acc))
    # (the loop counts the rows either way: a pass on the CPU is bound by reading, not adding)
    counted = rows.sum(0)
    return combined, total_counts, counted if known is None else known




def group_sort(slot: torch.Tensor, groups: int, values: torch.Tensor, *, descending: bool
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(values by group then by value, each group's count, its first position); rows whose
    slot is ``groups`` are left out. See groupby/cuda/engine.py: group_sort."""
    count = torch.zeros(groups + 1, dtype=torch.int64)
    data = values.view(torch.uint8) if values.dtype == torch.bool else values
    out = torch.empty(values.shape[0], dtype=data.dtype)
    kept = runtime.run("group_sort", slot.numpy(), groups, data.numpy(), descending,
                       count.numpy(), out.numpy())
    count = count[:groups]
    out = out[:kept]
    out = out.view(torch.bool) if values.dtype == torch.bool else out
    return out, count, torch.cumsum(count, 0) - count


def group_quantile(slot: torch.Tensor, groups: int, values: torch.Tensor, q: float
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(each group's ``q``-quantile, float64; each group's count) of the values whose slot is
    below ``groups``: the rows placed by group, then each group's ranks selected (see
    groupby/cuda/engine.py: group_quantile; the same bits from the same values)."""
    count = torch.zeros(groups + 1, dtype=torch.int64)
    data = values.view(torch.uint8) if values.dtype == torch.bool else values
    placed = torch.empty(values.shape[0], dtype=data.dtype)
    out = torch.empty(groups, dtype=torch.float64)
    runtime.run("group_quantile", slot.numpy(), groups, data.numpy(), float(q), count.numpy(),
                placed.numpy(), out.numpy())
    return out, count[:groups]


COMPACT_CHUNKS = 16  # fixed, so the codes do not depend on the thread count
SAMPLE_ROWS = 1 << 16  # rows sampled to choose between numbering and sorting


REPEATS = 4  # numbered by tables where a value repeats this often on average ...
TABLE_VALUES = 1 << 17  # ... and the tables stay this small (in the caches), else sorted


def _distinct_estimate(seen: int, sampled: int) -> int:
    """The distinct values of a column whose uniform sample of ``sampled`` rows held ``seen``:
    the ``d`` with ``d * (1 - exp(-sampled / d)) == seen``, by bisection."""
    if seen >= sampled:
        return 1 << 62  # every sampled value distinct: no bound
    low, high = float(seen), float(seen)
    while high * -math.expm1(-sampled / high) < seen:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        if middle * -math.expm1(-sampled / middle) < seen:
            low = middle
        else:
            high = middle
    return int(high)


def _sorted_compact(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
    uniques, codes = torch.unique(values, sorted=True, return_inverse=True)
    return codes, uniques, None


def _power_of_two(at_least: int) -> int:
    return 1 << max(6, (at_least - 1).bit_length())


def group_compact(values: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(a code a row, the distinct int64 values by code, each code's first row or None).

    Values that repeat (REPEATS times on average, at most TABLE_VALUES distinct, estimated
    from a sample of the rows) are numbered by first appearance, the CUDA engine's codes,
    through hash tables in numba: each of
    COMPACT_CHUNKS chunks of rows numbered alone on every core, the chunks' numberings merged
    in chunk order on one, then each row's code looked up. Other values are numbered by a
    sort instead (``torch.unique``: in value order, first rows None), which on
    the CPU outruns tables that no longer fit the caches; each caller orders the codes as it
    needs."""
    rows = values.shape[0]
    if rows > SAMPLE_ROWS:  # rows at random (a fixed seed: the same choice every call)
        places = torch.randint(0, rows, (SAMPLE_ROWS,),
                               generator=torch.Generator().manual_seed(rows))
        seen = int(torch.unique(values[places]).shape[0])
        distinct = _distinct_estimate(seen, SAMPLE_ROWS)
    else:
        distinct = int(torch.unique(values).shape[0]) if rows else 0
    if REPEATS * distinct > rows or distinct > TABLE_VALUES:  # a sort does better
        return _sorted_compact(values)
    data = values.contiguous().numpy()
    chunks = max(1, min(COMPACT_CHUNKS, rows // 4096))
    per = -(-rows // chunks) if rows else 0
    size = _power_of_two(2 * min(max(per, 1), 2 * max(distinct, 1)))
    size = min(size, 4 * TABLE_VALUES)
    local = torch.empty(rows, dtype=torch.int64)
    while True:  # a chunk whose table passed half full: again with larger tables
        keys = torch.empty((chunks, size // 2), dtype=torch.int64)
        first = torch.empty((chunks, size // 2), dtype=torch.int64)
        counts = torch.zeros(chunks, dtype=torch.int64)
        runtime.run("group_number_chunks", data, chunks, keys.numpy(), first.numpy(),
                    local.numpy(), counts.numpy())
        if bool((counts >= 0).all()):
            break
        size *= 4
        if size > 4 * TABLE_VALUES:  # the sample misled: more values than tables should hold
            return _sorted_compact(values)
    total = int(counts.sum())
    mapping = torch.empty((chunks, max(1, int(counts.max()))), dtype=torch.int64)
    out_first = torch.empty(total, dtype=torch.int64)
    count = runtime.run("group_number_merge", keys.numpy(), first.numpy(), counts.numpy(),
                        _power_of_two(2 * total + 1), mapping.numpy(), out_first.numpy())
    # in place: a fresh array of codes would cost its pages' first writes (a third of the
    # call at 1e6 rows on a 2-core machine)
    runtime.run("group_number_rows", local.numpy(), chunks, mapping.numpy(), local.numpy())
    out_first = out_first[:count]
    return local, values[out_first], out_first


def group_codes(columns: list[torch.Tensor], lows: list[int], spans: list[int],
                dtype: torch.dtype) -> torch.Tensor:
    """One code a row of several key columns (see groupby/cuda/engine.py: group_codes): a
    parallel pass a column over the codes (numba), no int64 copy of any column. The codes
    are written as ``dtype`` from the first pass: the caller checked that they fit, and an
    int64 copy first tripled the bytes written (a pass over memory each)."""
    out = torch.empty(columns[0].shape[0], dtype=dtype)
    for k, (column, low, span) in enumerate(zip(columns, lows, spans)):
        runtime.run("group_codes_digit", out.numpy(), column.numpy(), low, span, k == 0)
    return out


def group_comoments(codes: torch.Tensor, groups: int, first: torch.Tensor,
                    second: torch.Tensor, use: torch.Tensor | None, mean_first: torch.Tensor,
                    mean_second: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per group, over the rows that count (``use``; codes below zero never): the sums of
    squared distances of ``first`` and of ``second`` from their group's mean, and of the
    products of the two distances (float64). One parallel pass in fixed chunks."""
    chunks = _chunks(codes.shape[0], groups)
    out = torch.zeros((chunks, 3, groups), dtype=torch.float64)
    mask = (torch.zeros(1, dtype=torch.bool) if use is None else use).numpy()
    first, second = first.to(torch.float64), second.to(torch.float64)  # the loop's types
    runtime.run("group_comoments", codes.numpy(), _plain(first), _plain(second), mask,
                use is not None, mean_first.numpy(), mean_second.numpy(), out.numpy())
    total = out.sum(0)
    return total[0], total[1], total[2]


def string_hashes(offsets: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
    """The 64-bit hash of each string (int64 bits): see groupby/cuda/engine.py."""
    out = torch.empty(offsets.shape[0] - 1, dtype=torch.int64)
    if out.shape[0]:
        runtime.run("group_string_hashes", offsets.numpy(), data.numpy(),
                    as_words(data.numpy()), out.numpy().view("uint64"))
    return out


def string_mismatches(offsets: torch.Tensor, data: torch.Tensor, codes: torch.Tensor,
                      first: torch.Tensor) -> int:
    """Rows whose string differs from their code's first row's: see groupby/cuda/engine.py."""
    if not codes.shape[0]:
        return 0
    return int(runtime.run("group_string_mismatches", offsets.numpy(), data.numpy(),
                           as_words(data.numpy()), codes.numpy(), first.numpy()))


def _plain(values: torch.Tensor):
    return (values.view(torch.uint8) if values.dtype == torch.bool else values).numpy()


SHORT_STRING_TABLE_BITS = (12, 16, 20)  # a part's table of strings, tried in turn (caches first)
SHORT_STRING_PART_ROWS = 1 << 16  # rows a part numbers at least


def short_string_codes(chunk, valid: np.ndarray | None
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """(int32 codes by first appearance, 0 at nulls; each code's first row) of one Arrow string
    or binary array (``valid``: its validity, None without nulls) whose non-null strings are
    short: at most 15 bytes with offsets, at most 12 as views (held in the view itself). None
    for a longer string or more distinct strings than the largest tables hold (the caller
    encodes it another way). Each string is compared as two words, so no hash decides a
    group."""
    import sys

    import pyarrow.types as pt

    rows = len(chunk)
    if sys.byteorder != "little":  # the words are read as little-endian bytes
        return None
    if not rows:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    buffers = chunk.buffers()
    none8, none64 = np.zeros(0, np.uint8), np.zeros(0, np.uint64)
    is_views = any(getattr(pt, f"is_{kind}_view", lambda t: False)(chunk.type)
                   for kind in ("string", "binary"))  # (pyarrow 16 on)
    if is_views:
        views = np.frombuffer(buffers[1], np.uint64, count=2 * (chunk.offset + rows))[
            2 * chunk.offset:]  # (a buffer may run past its rows)
        offsets, data = np.zeros(1, np.int64), none8
    else:
        large = pt.is_large_string(chunk.type) or pt.is_large_binary(chunk.type)
        offsets = np.frombuffer(buffers[1], np.int64 if large else np.int32,
                                count=chunk.offset + rows + 1)[chunk.offset:]
        data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else none8
        views = none64
    mask = np.zeros(1, np.bool_) if valid is None else valid
    parts = max(1, min(runtime.host_cores(), rows // SHORT_STRING_PART_ROWS))
    for bits in SHORT_STRING_TABLE_BITS:
        codes, first, status = runtime.run(
            "group_number_strings", rows, offsets, data, as_words(data), views, is_views, mask,
            valid is not None, parts, bits)
        if status != 2:
            return (codes, first) if status == 0 else None
    return None
