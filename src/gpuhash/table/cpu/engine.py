"""The CPU engine: the table operations over the shared table format, their probe loops
compiled by numba (_common/cpu/probe.py, table/cpu/claims.py).

It serves machines without a GPU and is the reference the CUDA engine is tested against. The
probe order, hash and bucket choice are exactly the CUDA engine's
(_common/kernels/open_addressing.cuh), so a table built by either engine answers identically on
the other. Reads run the scalar probe loop in parallel over rows; claims run in parallel passes
by part of the table's buckets and the rest in row order (table/cpu/claims.py: claim), writing
values as they settle: no two rows
race for a slot, which the CUDA engine's compare-and-swap achieves without an order, and a
key's rows settle in row order, so the last row wins without the sort the CUDA engine replaces
by gh_last_rows. What is not a probe (value combination, the deduplication of a room check)
stays as torch ops.

Keys reach the engine as raw bits: int32 views for 32-bit keys, int64 for 64-bit keys.
"""

from __future__ import annotations

import numpy as np
import torch

from gpuhash._common.batch import first_occurrence, last_occurrence
from gpuhash._common.constants import RANDOM_STEPS
from gpuhash._common.cpu.runtime import run
from gpuhash._common.hashing import mix64 as mix64
from gpuhash._common.hashing import shift_right as _shift_right
from gpuhash.table.format import (
    PACKED,
    ROWS,
    TableState,
    as_value_bytes,
    gather_values,
    live_slots,
    value_bytes_view,
)
from gpuhash.table.format import (
    empty_state as empty_state,
)  # the engine's: the format's torch fills

_M32 = 0xFFFFFFFF


def _signed(value: int, nbytes: int) -> int:
    return value - (1 << (8 * nbytes)) if value >= 1 << (8 * nbytes - 1) else value


def _sentinels(state: TableState) -> tuple[int, int]:
    spec = state.spec
    return _signed(spec.empty_key, spec.key_bytes), _signed(spec.tombstone_key, spec.key_bytes)


def _hash(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    bits = keys.to(torch.int64)
    if state.spec.key_bytes == 4:
        bits = bits & _M32
    return mix64(bits ^ state.spec.seed)


def bucket_choices(state: TableState, keys: torch.Tensor, *, hashes: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """First and second bucket of each key and its two overflow-filter bits (gh_home)."""
    spec = state.spec
    h = _hash(state, keys) if hashes is None else hashes
    b1 = ((h & _M32) * spec.num_buckets) >> 32
    b2 = (_shift_right(h, 32) * spec.num_buckets) >> 32
    return b1, b2, b1 * 16 + (h & 7), b2 * 16 + 8 + (h & 7)


def bucket_reads(state: TableState, keys: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
    """How many buckets a search for each key reads to reach ``buckets`` (where the key sits),
    following its sequence (_common/cpu/probe.py: next_bucket). Device-neutral: the benchmark
    uses it on GPU tables."""
    hashes = _hash(state, keys)
    first, second, _, _ = bucket_choices(state, keys, hashes=hashes)
    reads = torch.where(buckets == first, 1, torch.where(buckets == second, 2, 0))
    drawn = second
    for step in range(2, 2 + RANDOM_STEPS):
        if not bool((reads == 0).any()):
            return reads
        drawn = ((mix64(hashes + step) & _M32) * state.spec.num_buckets) >> 32
        reads = torch.where((reads == 0) & (buckets == drawn), step + 1, reads)
    linear = 2 + RANDOM_STEPS + torch.remainder(buckets - drawn, state.spec.num_buckets)
    return torch.where(reads == 0, linear, reads)


def overflow_flag(state: TableState, filter_bits: torch.Tensor) -> torch.Tensor:
    """Whether each filter bit is set (device-neutral: the benchmark uses it on GPU tables)."""
    words = state.overflow[filter_bits >> 5].to(torch.int64)
    return ((words >> (filter_bits & 31)) & 1).bool()


def _wide(keys: torch.Tensor):
    """Keys as the compiled loops take them: int64, a 32-bit key sign-extended."""
    return keys.to(torch.int64).numpy()


def _walk_args(state: TableState) -> tuple:
    """The table arguments every compiled loop takes after its slots and filter bits."""
    spec = state.spec
    empty, tomb = _sentinels(state)
    return (spec.key_bytes, np.uint64(spec.seed), spec.num_buckets, spec.bucket_slots, empty,
            tomb)


def _value_region(state: TableState) -> tuple[np.ndarray, int, int]:
    """(bytes of every slot row, offset of the value in a row, width of the value area): the
    value and, for packed and pair slots, the zero bytes above it (both engines write them
    zero). One array type for every layout: numba compiles each loop once (a copy by 8-byte
    words ran only a little faster than by bytes, not worth a second compile of every
    loop)."""
    spec = state.spec
    if spec.layout == ROWS:
        return value_bytes_view(state).numpy(), 0, spec.value_bytes
    raw = state.slots.view(torch.uint8).numpy()
    if spec.layout == PACKED:
        return (raw, 4, 4) if spec.key_bytes == 4 else (raw, 8, 0)
    return raw, 8, 8


_NO_BYTES = torch.empty(0, dtype=torch.uint8)


def _lookup(state: TableState, keys: torch.Tensor, default: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Slot of each key (-1 where absent) and, given a default row, each key's value bytes
    (the default's where absent): the probe loop every read operation shares."""
    slot = torch.empty(keys.shape[0], dtype=torch.int64)
    row = _NO_BYTES if default is None else as_value_bytes(default.reshape(1, *default.shape))[0]
    raw, offset, _ = _value_region(state)
    out = torch.empty((keys.shape[0], row.shape[0]), dtype=torch.uint8)
    run("lookup", state.slots.numpy(), state.overflow.numpy(), _wide(keys), *_walk_args(state),
        raw, offset, row.numpy(), out.numpy(), slot.numpy())
    return slot, (None if default is None else out)


def _locate(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """Slot of each key, -1 where absent."""
    return _lookup(state, keys)[0]


def _place(state: TableState, keys: torch.Tensor, values: torch.Tensor | None, *,
           multi: bool = False, want_slots: bool = False, store: bool = True
           ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Find or claim a slot for each row's key (with ``multi``: a new copy per row; the two
    sentinel keys out of band) and, unless not to ``store``, write the row's value there
    (zeros for ``values`` None; a key's rows settle in row order, so its last row's value
    stays). Returns the slot of each row if asked for, and whether each row was marked as
    adding its key (the last row of a repeated new key). Counts the new entries and the bucket
    slots they use.

    The compiled loop (table/cpu/claims.py: claim) fills first buckets before any key walks on,
    as the CUDA engine's first pass does; it does not displace keys, which the CUDA engine may
    do: both keep the invariant the probe relies on. If some key finds no slot at all (only a
    table whose counters lie about its use), every slot this call took is given back and
    RuntimeError raised."""
    rows = keys.shape[0]
    slot = torch.full((rows if want_slots else 0,), -1, dtype=torch.int64)
    flags = torch.zeros(rows, dtype=torch.uint8)
    given = (torch.empty((rows, 0), dtype=torch.uint8) if values is None
             else as_value_bytes(values))
    raw, offset, area = _value_region(state)
    if not store:
        area = 0
    failed, live, used = run("claim", state.slots.numpy(), state.overflow.numpy(), _wide(keys),
                             *_walk_args(state), multi, raw, offset, area, given.numpy(),
                             slot.numpy(), flags.numpy())
    if failed >= 0:
        raise RuntimeError(f"a key (row {failed} of {rows}) found no free slot although the "
                           "room check passed: the table's counters do not match its slots; "
                           "every key this call added was taken out again (values it assigned "
                           "to keys already present stay)")
    state.counts[0] += live
    state.counts[1] += used
    return (slot if want_slots else None), (flags & 1).bool()


def last_rows(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """True on the last row of each distinct key (batch order): a sort here (the insert needs
    none: its rows settle in row order)."""
    return last_occurrence(keys)


def insert(state: TableState, keys: torch.Tensor, values: torch.Tensor | None, *,
           duplicates: str = "last", last: torch.Tensor | None = None) -> torch.Tensor:
    """Insert or assign each row; True where the row added a new key. A key's rows settle in
    row order whatever ``duplicates`` says, so the last row's value stays and the last row of
    a new key is marked (dict semantics, one of the outcomes "any" allows); ``last`` is not
    needed for that and goes unread."""
    return _place(state, keys, values)[1]


_REDUCE = {"add": "sum", "min": "amin", "max": "amax"}


def insert_or_apply(state: TableState, keys: torch.Tensor, values: torch.Tensor,
                    op: str, slots: torch.Tensor | None = None) -> torch.Tensor:
    """Insert new keys with their value; combine the values of existing keys (and of several
    rows of a new key) with ``op``. True on one row per new key (the first, here). ``slots``
    (int64, a row each), when given, receives each row's place in the value storage, as
    find_index gives."""
    if keys.shape[0] == 0:
        return torch.zeros(0, dtype=torch.bool)
    distinct, group = torch.unique(keys, return_inverse=True)
    rows = torch.full((distinct.shape[0],), keys.shape[0], dtype=torch.int64)
    rows.scatter_reduce_(0, group, torch.arange(keys.shape[0]), "amin")  # first row per key
    elements = values.reshape(keys.shape[0], -1)
    combined = torch.zeros((rows.shape[0], elements.shape[1]), dtype=values.dtype)
    combined.scatter_reduce_(0, group[:, None].expand_as(elements), elements, _REDUCE[op],
                             include_self=False)
    slot, new = _place(state, distinct, None, want_slots=True, store=False)
    stored = gather_values(state, slot).reshape(rows.shape[0], -1)
    if op == "add":
        merged = stored + combined
    else:
        merged = (torch.minimum if op == "min" else torch.maximum)(stored, combined)
    merged = as_value_bytes(torch.where(new[:, None], combined, merged))
    raw, offset, area = _value_region(state)
    run("write_rows", raw, offset, area, slot.numpy(), merged.numpy())
    inserted = torch.zeros(keys.shape[0], dtype=torch.bool)
    inserted[rows[new]] = True
    if slots is not None:
        slots.copy_(slot[group])
    return inserted


def find(state: TableState, keys: torch.Tensor,
         default: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Values of each key (``default`` where missing) and a found mask."""
    slot, out = _lookup(state, keys, default)
    spec = state.spec
    return out.view(spec.value_dtype).view(keys.shape[0], *spec.value_shape), slot >= 0


def find_index(state: TableState, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row of each key in the value storage (-1 where missing) and a found mask."""
    slot = _locate(state, keys)
    return slot, slot >= 0


def contains(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """True where the key is in the table."""
    return _locate(state, keys) >= 0


def erase(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """Remove each key; True on one row per removed key (the first, here)."""
    slot = _locate(state, keys)
    erased = (slot >= 0) & first_occurrence(keys)
    gone = slot[erased]
    empty, tomb = _sentinels(state)
    marker = torch.full_like(gone, tomb)
    out_of_band = gone >= state.spec.num_slots
    # an out-of-band slot is absent when it holds the other sentinel
    marker[out_of_band] = torch.where(gone[out_of_band] == state.spec.num_slots, tomb, empty)
    state.key_view()[gone] = marker.to(state.key_view().dtype)
    state.counts[0] -= gone.shape[0]
    return erased


def stashed(state: TableState, count: int) -> None:
    """Nothing: a CPU placement that fails gives back what it took and raises at once."""
    return None


def rehash(source: TableState, target: TableState) -> None:
    """Insert every live entry of ``source`` into the empty table ``target``."""
    live = live_slots(source).nonzero().squeeze(1)
    keys = source.key_view()[live]
    value_view = value_bytes_view(source)
    values = None if value_view is None else value_view[live]
    if target.spec.multi:
        multi_insert(target, keys, values)
    else:
        insert(target, keys, values, duplicates="distinct")


# --- multimap -----------------------------------------------------------------------------
def multi_insert(state: TableState, keys: torch.Tensor, values: torch.Tensor | None) -> None:
    """Add every row as its own entry (repeated keys kept)."""
    _place(state, keys, values, multi=True)


def _matches(state: TableState, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(query row, slot) of every entry holding each key, grouped by query row: counts and each
    row's first match in one walk, which is the answer when no row has two (a join of distinct
    build keys); else an exclusive scan, then each row's matches written at its offset (as
    the CUDA engine's MultiMap does)."""
    args = _walk_args(state)
    slots_words, overflow, wide = state.slots.numpy(), state.overflow.numpy(), _wide(keys)
    counts = torch.empty(keys.shape[0], dtype=torch.int64)
    first = torch.empty(keys.shape[0], dtype=torch.int64)  # each row's first match
    nothing = torch.empty(0, dtype=torch.int64).numpy()
    run("matches", slots_words, overflow, wide, *args, counts.numpy(), nothing, first.numpy())
    if keys.shape[0] == 0 or int(counts.max()) <= 1:  # at most one a row: no second walk
        rows = counts.nonzero().squeeze(1)
        return rows, first.index_select(0, rows)
    offsets = torch.cumsum(counts, 0) - counts
    total = int(counts.sum())
    rows = torch.empty(total, dtype=torch.int64)
    slots = torch.empty(total, dtype=torch.int64)
    if total:
        run("matches", slots_words, overflow, wide, *args, offsets.numpy(), rows.numpy(),
            slots.numpy())
    return rows, slots


def multi_count(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """Entries holding each key."""
    rows, _ = _matches(state, keys)
    return torch.bincount(rows, minlength=keys.shape[0])


def multi_find_all(state: TableState, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(query row, slot) of every match, grouped by query row."""
    return _matches(state, keys)


def multi_erase(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """Remove every copy of each key; copies removed by each row (a repeated key's copies
    all count on its first row, here)."""
    first = first_occurrence(keys)
    rows, slots = _matches(state, keys)
    mine = first[rows]
    rows, slots = rows[mine], slots[mine]
    _, tomb = _sentinels(state)
    state.key_view()[slots] = tomb
    state.counts[0] -= slots.shape[0]
    return torch.bincount(rows, minlength=keys.shape[0])
