"""The CPU engine: the table operations as vectorised torch ops over the shared table format.

It serves machines without a GPU and is the reference the CUDA engine is tested against. The
probe order, hash and bucket choice are exactly the CUDA engine's (kernels/open_addressing.cuh),
so a table built by either engine answers identically on the other. Each probe round handles
every still-unresolved key at once; rows that want the same bucket are ranked so each takes a
different empty slot, which is what the CUDA engine's compare-and-swap achieves.

Keys reach the engine as raw bits: int32 views for 32-bit keys, int64 for 64-bit keys.
"""

from __future__ import annotations

import torch

from .._batch import first_occurrence, last_occurrence
from .._format import (
    PACKED,
    ROWS,
    TableState,
    as_value_bytes,
    gather_values,
    live_slots,
    value_bytes_view,
)

_M32 = 0xFFFFFFFF
_MIX1 = 0xFF51AFD7ED558CCD - (1 << 64)  # fmix64 constants as signed int64
_MIX2 = 0xC4CEB9FE1A85EC53 - (1 << 64)


def _shift_right(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix64(x: torch.Tensor) -> torch.Tensor:
    x = x ^ _shift_right(x, 33)
    x = x * _MIX1  # int64 multiply wraps, as unsigned multiply does in CUDA
    x = x ^ _shift_right(x, 33)
    x = x * _MIX2
    return x ^ _shift_right(x, 33)


def _signed(value: int, nbytes: int) -> int:
    return value - (1 << (8 * nbytes)) if value >= 1 << (8 * nbytes - 1) else value


def _sentinels(state: TableState) -> tuple[int, int]:
    spec = state.spec
    return _signed(spec.empty_key, spec.key_bytes), _signed(spec.tombstone_key, spec.key_bytes)


def _hash(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    bits = keys.to(torch.int64)
    if state.spec.key_bytes == 4:
        bits = bits & _M32
    return _mix64(bits ^ state.spec.seed)


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
    following its sequence (_advance). Device-neutral: the benchmark uses it on GPU tables."""
    hashes = _hash(state, keys)
    first, second, _, _ = bucket_choices(state, keys, hashes=hashes)
    reads = torch.where(buckets == first, 1, torch.where(buckets == second, 2, 0))
    drawn = second
    for step in range(2, 2 + RANDOM_STEPS):
        if not bool((reads == 0).any()):
            return reads
        drawn = ((_mix64(hashes + step) & _M32) * state.spec.num_buckets) >> 32
        reads = torch.where((reads == 0) & (buckets == drawn), step + 1, reads)
    linear = 2 + RANDOM_STEPS + torch.remainder(buckets - drawn, state.spec.num_buckets)
    return torch.where(reads == 0, linear, reads)


def overflow_flag(state: TableState, filter_bits: torch.Tensor) -> torch.Tensor:
    """Whether each filter bit is set (device-neutral: the benchmark uses it on GPU tables)."""
    words = state.overflow[filter_bits >> 5].to(torch.int64)
    return ((words >> (filter_bits & 31)) & 1).bool()


def _set_overflow_bits(state: TableState, filter_bits: torch.Tensor) -> None:
    if filter_bits.numel() == 0:
        return
    unique = torch.unique(filter_bits)
    acc = torch.zeros(state.overflow.shape[0], dtype=torch.int64)
    acc.index_add_(0, unique >> 5, torch.ones_like(unique) << (unique & 31))
    acc = torch.where(acc >= 1 << 31, acc - (1 << 32), acc)
    state.overflow |= acc.to(torch.int32)


def _out_of_band_slot(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    _, tomb = _sentinels(state)
    return state.spec.num_slots + (keys == tomb).to(torch.int64)


def _bucket_rows(state: TableState) -> torch.Tensor:
    """The key words of the bucket region as (num_buckets, bucket_slots): a bucket is a row."""
    spec = state.spec
    return state.key_view()[: spec.num_slots].view(spec.num_buckets, spec.bucket_slots)


# Per-key probe state travels as one int64 tensor with these columns, so each probe round
# filters it with one index operation.
_ROW, _BUCKET, _SECOND, _LEFT_FIRST, _LEFT_SECOND, _HASH = range(6)
RANDOM_STEPS = 64  # buckets drawn from the hash after b2 before the walk turns linear


def _probe_state(state: TableState, keys: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    hashes = _hash(state, keys)
    first, second, left_first, left_second = bucket_choices(state, keys, hashes=hashes)
    return torch.stack([rows, first, second, left_first, left_second, hashes], dim=1)


def _advance(state: TableState, step: int, probe: torch.Tensor) -> None:
    """Move each key from the bucket of ``step`` to its next one (gh_next_bucket): b1, b2,
    RANDOM_STEPS buckets drawn from the hash, then linear (wrapping)."""
    following = step + 1
    if following == 1:
        probe[:, _BUCKET] = probe[:, _SECOND]
    elif following < 2 + RANDOM_STEPS:
        drawn = _mix64(probe[:, _HASH] + following) & _M32
        probe[:, _BUCKET] = (drawn * state.spec.num_buckets) >> 32
    else:
        probe[:, _BUCKET] = (probe[:, _BUCKET] + 1) % state.spec.num_buckets


def _locate(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """Slot of each key, -1 where absent: the probe loop every read operation shares."""
    spec = state.spec
    key_view = state.key_view()
    buckets = _bucket_rows(state)
    empty, tomb = _sentinels(state)
    slot = torch.full((keys.shape[0],), -1, dtype=torch.int64)
    special = (keys == empty) | (keys == tomb)
    if bool(special.any()):
        rows = special.nonzero().squeeze(1)
        where = _out_of_band_slot(state, keys[rows])
        present = key_view[where] == keys[rows]
        slot[rows[present]] = where[present]
    rows = (~special).nonzero().squeeze(1)
    wanted = keys[rows]
    probe = _probe_state(state, wanted, rows)
    for step in range(spec.num_buckets + RANDOM_STEPS + 2):
        if probe.shape[0] == 0:
            break
        words = buckets[probe[:, _BUCKET]]
        match = words == wanted[:, None]
        hit = match.any(1)
        slot[probe[hit, _ROW]] = (probe[hit, _BUCKET] * spec.bucket_slots
                                  + match[hit].int().argmax(1))
        done = hit | (words == empty).any(1)
        if step < 2:  # a full bucket ends the search unless the key's filter bit is set
            done |= ~overflow_flag(state, probe[:, _LEFT_FIRST if step == 0 else _LEFT_SECOND])
        keep = ~done
        probe, wanted = probe[keep], wanted[keep]
        _advance(state, step, probe)
    return slot


def _rank_within(groups: torch.Tensor) -> torch.Tensor:
    """0, 1, 2, ... among the rows that share a group value."""
    order = torch.argsort(groups, stable=True)
    ordered = groups[order]
    index = torch.arange(groups.shape[0])
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    start_of = torch.cummax(torch.where(starts, index, 0), 0).values
    rank = torch.empty_like(index)
    rank[order] = index - start_of
    return rank


def _find_or_claim(state: TableState, keys: torch.Tensor, *, multi: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Slot of each of the distinct (in-bucket) keys, placing the absent ones; returns the
    slots, whether each key was placed here, and whether it took an erased slot. With
    ``multi`` every row takes a new slot (a multimap's copies), whatever copies exist.

    One walk along each key's bucket sequence: a match means the key is present; a bucket with
    room and no match means it is absent (by the invariant no key lives past a bucket with
    room). An absent key takes the first erased slot its walk passed, if another key of the
    batch does not take it first (the keys are distinct, so no copy of it can appear
    meanwhile); else an EMPTY slot of the bucket with room (rows that want the same bucket are
    ranked so each takes a different one), as the CUDA engine's claims do
    (kernels/open_addressing.cuh: gh_probe). The CUDA engine may also displace keys between
    their two buckets; both keep the invariant the probe relies on. If some key finds no slot
    at all (only a table whose counters lie about its use), every slot this call took is given
    back and RuntimeError raised: the table is unchanged.
    """
    spec = state.spec
    width = spec.bucket_slots
    key_view = state.key_view()
    buckets = _bucket_rows(state)
    empty, tomb = _sentinels(state)
    slot = torch.full((keys.shape[0],), -1, dtype=torch.int64)
    claimed = torch.zeros(keys.shape[0], dtype=torch.bool)
    reused = torch.zeros(keys.shape[0], dtype=torch.bool)
    probe = _probe_state(state, keys, torch.arange(keys.shape[0]))
    pending = keys
    erased = torch.full((keys.shape[0],), -1, dtype=torch.int64)  # first erased slot passed
    erased_step = torch.zeros(keys.shape[0], dtype=torch.int64)
    spilled, taken, taken_erased = [], [], []

    def settle(rows, where, at_step):
        slot[probe[rows, _ROW]] = where
        claimed[probe[rows, _ROW]] = True
        spilled.append(probe[rows & (at_step >= 1), _LEFT_FIRST])
        spilled.append(probe[rows & (at_step >= 2), _LEFT_SECOND])

    for step in range(spec.num_buckets + RANDOM_STEPS + 2):
        if probe.shape[0] == 0:
            break
        words = buckets[probe[:, _BUCKET]]
        match = words == pending[:, None]
        hit = match.any(1) & (not multi)
        lanes = match[hit].int().argmax(1)
        slot[probe[hit, _ROW]] = probe[hit, _BUCKET] * width + lanes
        used = (words != empty).sum(1)
        room = ~hit & (used < width)
        if not multi:
            # an erased slot another key took in an earlier round is gone (the GPU's CAS fails)
            erased = torch.where((erased >= 0) & (key_view[erased.clamp(min=0)] != tomb), -1,
                                 erased)
            holes = words == tomb
            first_seen = holes.any(1) & (erased < 0) & ~hit
            erased = torch.where(first_seen, probe[:, _BUCKET] * width
                                 + holes.int().argmax(1), erased)
            erased_step = torch.where(first_seen, step, erased_step)
            wanting = room & (erased >= 0)
            wins = wanting & (_rank_within(torch.where(wanting, erased, -1)) == 0)
            key_view[erased[wins]] = pending[wins]
            taken_erased.append(erased[wins])
            reused[probe[wins, _ROW]] = True
            settle(wins, erased[wins], erased_step)
            room &= ~wins
        else:
            wins = torch.zeros_like(room)
        # Lanes fill in order and never become EMPTY again (both engines), so a bucket's EMPTY
        # lanes are a suffix: the k-th absent row wanting a bucket takes lane used + k.
        lane = used + _rank_within(torch.where(room, probe[:, _BUCKET], -1))
        fits = room & (lane < width)
        placed = probe[fits, _BUCKET] * width + lane[fits]
        key_view[placed] = pending[fits]
        taken.append(placed)
        settle(fits, placed, torch.full_like(lane, step))
        keep = ~(hit | fits | wins)
        probe, pending = probe[keep], pending[keep]
        erased, erased_step = erased[keep], erased_step[keep]
        _advance(state, step, probe)
    if probe.shape[0]:
        key_view[torch.cat(taken)] = empty  # give back what this call took
        if taken_erased:
            key_view[torch.cat(taken_erased)] = tomb
        raise RuntimeError(f"{probe.shape[0]} keys found no free slot although the room check "
                           "passed: the table's counters do not match its slots; the table "
                           "is unchanged")
    if spilled:
        _set_overflow_bits(state, torch.cat(spilled))
    return slot, claimed, reused


def _place(state: TableState, keys: torch.Tensor, *, multi: bool = False
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Slot of each distinct key (every row, with ``multi``), placing absent ones, the two
    sentinel keys out of band; and whether each was placed here. Counts the new entries (a
    reused erased slot was counted as used already)."""
    empty, tomb = _sentinels(state)
    special = (keys == empty) | (keys == tomb)
    slot = torch.empty(keys.shape[0], dtype=torch.int64)
    new = torch.zeros(keys.shape[0], dtype=torch.bool)
    normal = ~special
    slot[normal], new[normal], reused = _find_or_claim(state, keys[normal], multi=multi)
    if bool(special.any()):  # the two sentinel keys live out of band
        where = _out_of_band_slot(state, keys[special])
        new[special] = state.key_view()[where] != keys[special]
        state.key_view()[where] = keys[special]
        slot[special] = where
    state.counts[0] += int(new.sum())
    state.counts[1] += int((new[normal] & ~reused).sum())
    return slot, new


def _value_area(state: TableState) -> torch.Tensor | None:
    """The bytes of each slot row beyond its key that hold the value: the value and, for
    packed and pair slots, the zero bytes above it (both engines write them zero)."""
    spec = state.spec
    if spec.layout == ROWS:
        return value_bytes_view(state)
    raw = state.slots.view(torch.uint8)
    if spec.layout == PACKED:
        return raw[:, 4:8] if spec.key_bytes == 4 else None
    return raw[:, 8:16]


def _write_values(state: TableState, slot: torch.Tensor, values: torch.Tensor | None) -> None:
    """Store each row's value (raw bytes, zero-padded to the value area) at its slot."""
    area = _value_area(state)
    if area is None:
        return
    padded = torch.zeros((slot.shape[0], area.shape[1]), dtype=torch.uint8)
    if values is not None:
        padded[:, : state.spec.value_bytes] = as_value_bytes(values)
    area[slot] = padded


def insert(state: TableState, keys: torch.Tensor, values: torch.Tensor | None, *,
           active: torch.Tensor | None = None) -> torch.Tensor:
    """Insert or assign each active row; True where the row added a new key."""
    inserted = torch.zeros(keys.shape[0], dtype=torch.bool)
    if active is None:
        active = last_occurrence(keys)
    rows = active.nonzero().squeeze(1)
    slot, new = _place(state, keys[rows])
    _write_values(state, slot, None if values is None else values[rows])
    inserted[rows[new]] = True
    return inserted


_REDUCE = {"add": "sum", "min": "amin", "max": "amax"}


def insert_or_apply(state: TableState, keys: torch.Tensor, values: torch.Tensor,
                    op: str) -> torch.Tensor:
    """Insert new keys with their value; combine the values of existing keys (and of several
    rows of a new key) with ``op``. True on one row per new key (the first, here)."""
    spec = state.spec
    distinct, group = torch.unique(keys, return_inverse=True)
    rows = torch.full((distinct.shape[0],), keys.shape[0], dtype=torch.int64)
    rows.scatter_reduce_(0, group, torch.arange(keys.shape[0]), "amin")  # first row per key
    elements = values.reshape(keys.shape[0], -1)
    combined = torch.zeros((rows.shape[0], elements.shape[1]), dtype=values.dtype)
    combined.scatter_reduce_(0, group[:, None].expand_as(elements), elements, _REDUCE[op],
                             include_self=False)
    slot, new = _place(state, distinct)
    stored = gather_values(state, slot).reshape(rows.shape[0], -1)
    if op == "add":
        merged = stored + combined
    else:
        merged = (torch.minimum if op == "min" else torch.maximum)(stored, combined)
    merged = torch.where(new[:, None], combined, merged)
    _write_values(state, slot, merged.reshape(rows.shape[0], *spec.value_shape))
    inserted = torch.zeros(keys.shape[0], dtype=torch.bool)
    inserted[rows[new]] = True
    return inserted


def find(state: TableState, keys: torch.Tensor,
         default: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Values of each key (``default`` where missing) and a found mask."""
    slot = _locate(state, keys)
    found = slot >= 0
    row = as_value_bytes(default.reshape(1, *default.shape))
    out = row.expand(keys.shape[0], row.shape[1]).clone()
    out[found] = value_bytes_view(state)[slot[found]]
    spec = state.spec
    return out.view(spec.value_dtype).view(keys.shape[0], *spec.value_shape), found


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
    if target.multi:
        multi_insert(target, keys, values)
    else:
        insert(target, keys, values, active=torch.ones_like(keys, dtype=torch.bool))


# --- multimap -----------------------------------------------------------------------------
def multi_insert(state: TableState, keys: torch.Tensor, values: torch.Tensor | None) -> None:
    """Add every row as its own entry (repeated keys kept)."""
    slot, _ = _place(state, keys, multi=True)
    _write_values(state, slot, values)


def _matches(state: TableState, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(query row, slot) of every entry holding each key, walking as a search does."""
    spec = state.spec
    buckets = _bucket_rows(state)
    empty, tomb = _sentinels(state)
    # the sentinel keys are never stored in buckets: they match nothing (gh_for_each_match)
    ordinary = ((keys != empty) & (keys != tomb)).nonzero().squeeze(1)
    probe = _probe_state(state, keys[ordinary], ordinary)
    wanted = keys[ordinary]
    rows, slots = [], []
    visited = torch.zeros((wanted.shape[0], 0), dtype=torch.int64)  # buckets seen, per key
    for step in range(spec.num_buckets + RANDOM_STEPS + 2):
        if probe.shape[0] == 0:
            break
        words = buckets[probe[:, _BUCKET]]
        # small tables revisit buckets: a copy counts once (gh_visited_before)
        again = (visited == probe[:, _BUCKET, None]).any(1)
        visited = torch.cat([visited, probe[:, _BUCKET, None]], 1)
        match = (words == wanted[:, None]) & ~again[:, None]
        which, lane = match.nonzero(as_tuple=True)
        rows.append(probe[which, _ROW])
        slots.append(probe[which, _BUCKET] * spec.bucket_slots + lane)
        done = (words == empty).any(1)
        if step < 2:  # a full bucket ends the search unless the key's filter bit is set
            done |= ~overflow_flag(state, probe[:, _LEFT_FIRST if step == 0 else _LEFT_SECOND])
        keep = ~done
        probe, wanted, visited = probe[keep], wanted[keep], visited[keep]
        _advance(state, step, probe)
    if not rows:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    rows, slots = torch.cat(rows), torch.cat(slots)
    order = torch.argsort(rows, stable=True)  # grouped by query row, as the CUDA engine's
    return rows[order], slots[order]


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
