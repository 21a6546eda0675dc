"""A MultiMap's copies of the two key values the slot format reserves.

Slots mark empty and erased entries with the key values all-ones and all-ones minus one of the
key width. A HashMap keeps its one entry of each in an out-of-band slot; a MultiMap may hold any
number of copies of them, so it keeps those copies outside the slots, in two tensors of the
table state: ``reserved_keys`` (raw key bits, in insertion order) and ``reserved_values`` (their
value rows). Both are None while the table holds no such copy, so every other table pays
nothing. The kernels never see these keys. Copy ``j`` is addressed as value row
``num_slots + 2 + j``, after the slot rows, by ``find_all`` and ``MultiMap.values``.

Plain torch over the state, so one code serves both engines.
"""

from __future__ import annotations

import torch

from gpuhash.table.format import TableState


def sentinels(state: TableState) -> tuple[int, int]:
    """The two reserved key values as the signed bits keys are handled as."""
    spec = state.spec
    empty = spec.empty_key - (1 << 8 * spec.key_bytes)
    return empty, empty - 1


def reserved_rows(state: TableState, bits: torch.Tensor) -> torch.Tensor:
    """True where a key is one of the two reserved values."""
    empty, tombstone = sentinels(state)
    return (bits == empty) | (bits == tombstone)


def held(state: TableState) -> int:
    """Copies of the reserved keys the table holds (no synchronisation: a shape)."""
    return 0 if state.reserved_keys is None else state.reserved_keys.shape[0]


def first_value_row(state: TableState) -> int:
    """The value row of the first reserved copy: right after the slot rows."""
    return state.spec.num_slots + 2


def add(state: TableState, bits: torch.Tensor, values: torch.Tensor | None) -> None:
    """Append copies (every row of ``bits`` is a reserved key) with their values."""
    if state.reserved_keys is None:
        state.reserved_keys = bits.clone()
        state.reserved_values = None if values is None else values.clone()
        return
    state.reserved_keys = torch.cat([state.reserved_keys, bits])
    if values is not None:
        state.reserved_values = torch.cat([state.reserved_values, values])


def count(state: TableState, bits: torch.Tensor) -> torch.Tensor:
    """Reserved copies matching each key (int64). No synchronisation."""
    out = torch.zeros(bits.shape[0], dtype=torch.int64, device=bits.device)
    for key in sentinels(state):
        copies = (state.reserved_keys == key).sum()
        out += torch.where(bits == key, copies, 0)
    return out


def matches(state: TableState, bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(query row, value row) of every reserved copy matching a key, grouped by query row;
    the copies of one key in insertion order. Synchronises."""
    start = first_value_row(state)
    rows, index = [], []
    for key in sentinels(state):
        asking = (bits == key).nonzero().squeeze(1)
        copies = (state.reserved_keys == key).nonzero().squeeze(1) + start
        rows.append(asking.repeat_interleave(copies.shape[0]))
        index.append(copies.repeat(asking.shape[0]))
    return torch.cat(rows), torch.cat(index)


def erase(state: TableState, bits: torch.Tensor) -> torch.Tensor:
    """Remove every copy of the reserved keys among ``bits``; copies removed by each row (a
    repeated key's copies all count on its first row). Synchronises."""
    out = torch.zeros(bits.shape[0], dtype=torch.int64, device=bits.device)
    keep = torch.ones_like(state.reserved_keys, dtype=torch.bool)
    for key in sentinels(state):
        asking = (bits == key).nonzero()
        if asking.shape[0]:
            copies = state.reserved_keys == key
            out[asking[0, 0]] = copies.sum()
            keep &= ~copies
    if not bool(keep.all()):
        kept = int(keep.sum())
        values = state.reserved_values
        state.reserved_keys = state.reserved_keys[keep] if kept else None
        state.reserved_values = None if values is None or not kept else values[keep]
    return out


def drop(state: TableState) -> None:
    """Forget every reserved copy (a clear)."""
    state.reserved_keys = state.reserved_values = None
