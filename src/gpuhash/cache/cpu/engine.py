"""The CPU engine of CacheMap: its operations over the bytes of cache/format.py, the rows run
in row order by the loops of cache/cpu/loops.py. The reference the CUDA engine
(cache/cuda/engine.py, same functions and signatures) is tested against.

Keys reach it as int64 bits. ``acting`` masks come from the caller (one row per key).
"""

from __future__ import annotations

import numpy as np
import torch

from gpuhash._common.arrays import SIGNED_VIEW
from gpuhash._common.batch import last_occurrence
from gpuhash._common.cpu.runtime import run
from gpuhash.cache.format import POLICIES, CacheState, relocation_limit
from gpuhash.table.format import as_value_bytes

_NONE_U8 = np.zeros(0, np.uint8)
_NO_ROWS = np.zeros((0, 0), np.uint8)


def _u64(tensor: torch.Tensor) -> np.ndarray:
    return tensor.numpy().view(np.uint64)


def _bytes(mask: torch.Tensor) -> np.ndarray:
    """A bool mask as uint8 (one loop signature whichever masks a call passes)."""
    return mask.view(torch.uint8).numpy()


def _rows_of(state: CacheState) -> np.ndarray:
    """The value rows as raw bytes, (slots, value_bytes)."""
    values = state.values
    return values.view(torch.uint8).reshape(values.shape[0], -1).numpy()


def _table(state: CacheState) -> tuple:
    spec = state.spec
    return (_u64(state.keys), state.digests.numpy(), _u64(state.scores), _rows_of(state),
            state.counts.numpy(), spec.bucket_slots, spec.num_buckets, np.uint64(spec.seed))


def refresh(state: CacheState) -> None:
    """Nothing to make: the CPU engine derives nothing from the key words (its searches walk
    the digests; the CUDA engine's ``refresh`` makes its index from key to slot)."""


def last_rows(state: CacheState, keys: torch.Tensor, *, first: bool = False) -> torch.Tensor:
    """True on the last row (``first``: the first) of each distinct key (batch order)."""
    return last_occurrence(keys.flip(0)).flip(0) if first else last_occurrence(keys)


def write(state: CacheState, mode: int, keys: torch.Tensor, acting: torch.Tensor, *,
          values: torch.Tensor | None, value_stride: int, scores: torch.Tensor | None,
          accumulate: torch.Tensor | None, step: int, epoch: int, evict_capacity: int,
          out: torch.Tensor | None = None
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple | None]:
    """One write per acting row (cache/kernels/cache.cu: gh_cache_write, then gh_cache_evict for
    the rows whose buckets were full; here the same two passes, each in row order): status
    (int8), slot (int64, -1 where none) and found per row, and with ``evict_capacity`` the
    evicted entries (keys, values, scores, count); with ``out``, each acting row's value as
    it found it, else its own."""
    rows = keys.shape[0]
    spec = state.spec
    status = torch.empty(rows, dtype=torch.int8)
    index = torch.empty(rows, dtype=torch.int64)
    found = torch.empty(rows, dtype=torch.bool)
    ev_keys = torch.empty(evict_capacity, dtype=torch.int64)
    ev_scores = torch.empty(evict_capacity, dtype=torch.int64)
    ev_values = torch.empty((evict_capacity, *spec.value_shape), dtype=spec.value_dtype)
    evicted = torch.zeros(1, dtype=torch.int64)
    in_rows = (np.zeros((1, spec.value_bytes), np.uint8) if values is None
               else as_value_bytes(values).numpy())
    run("cache_write", *_table(state), relocation_limit(spec.capacity),
        np.uint64(POLICIES.index(spec.policy)), np.uint64(step),
        np.uint64(epoch), mode, _u64(keys), _bytes(acting),
        _NONE_U8 if accumulate is None else _bytes(accumulate), scores is not None,
        np.zeros(rows, np.uint64) if scores is None else _u64(scores),
        in_rows, value_stride if values is not None else 0, values is not None,
        status.numpy(), index.numpy(), found.numpy(),
        _NO_ROWS if out is None else as_value_bytes(out).numpy(), out is not None,
        _u64(ev_keys), as_value_bytes(ev_values).numpy(), _u64(ev_scores), evicted.numpy(),
        state.pins.numpy())
    out = (ev_keys, ev_values, ev_scores, evicted) if evict_capacity else None
    return status, index, found, out


def lookup(state: CacheState, keys: torch.Tensor, *, only: torch.Tensor | None = None,
           update: torch.Tensor | None = None, step: int = 0, epoch: int = 0,
           default: torch.Tensor | None = None, default_stride: int = 0,
           index: torch.Tensor | None = None, found: torch.Tensor | None = None,
           out: torch.Tensor | None = None, verify: torch.Tensor | None = None
           ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Values (row r * default_stride of ``default`` where absent) if ``default`` is given,
    slot (-1 where absent) and found per row, written into ``out`` / ``index`` / ``found``
    when given; rows with ``only`` clear are left alone; rows with ``update`` set touch their
    key's score. ``verify`` (no ``default``; the acting rows of a write just made, ``index``
    holding their slots): rows with it set keep their slot while it still holds their key,
    else are looked up again with their found flag kept."""
    if verify is not None and (default is not None or out is not None or update is not None):
        raise ValueError("verify is for lookups of slots alone (no default, out or update)")
    if verify is not None:
        held = state.keys.index_select(0, index.clamp(min=0))
        stale = verify & (index >= 0) & (held != keys)
        lookup(state, keys, only=~verify if only is None else only & ~verify, index=index,
               found=found)
        lookup(state, keys, only=stale if only is None else only & stale, index=index,
               found=torch.empty_like(found))
        return None, index, found
    rows = keys.shape[0]
    spec = state.spec
    index = torch.empty(rows, dtype=torch.int64) if index is None else index
    found = torch.empty(rows, dtype=torch.bool) if found is None else found
    if default is not None and out is None:
        out = torch.empty((rows, *spec.value_shape), dtype=spec.value_dtype)
    chosen = slice(None) if only is None else only.numpy()
    part_keys = _u64(keys)[chosen] if only is not None else _u64(keys)
    part_index = np.empty(part_keys.shape[0], np.int64)
    part_found = np.empty(part_keys.shape[0], np.bool_)
    part_out = np.empty((part_keys.shape[0], spec.value_bytes if out is not None else 0),
                        np.uint8)
    default_bytes = (_NO_ROWS if default is None
                     else as_value_bytes(default.reshape(-1, *spec.value_shape)).numpy())
    if default is not None and default_stride and only is not None:
        default_bytes = default_bytes[chosen]
    part_update = _NONE_U8 if update is None else _bytes(update)[chosen]
    table = _table(state)
    run("cache_lookup", table[0], table[1], table[2], table[3], *table[5:],
        np.uint64(POLICIES.index(spec.policy)), np.uint64(step), np.uint64(epoch), part_keys,
        part_update, default_bytes, default_stride, part_out, out is not None, part_index,
        part_found)
    index.numpy()[chosen] = part_index
    found.numpy()[chosen] = part_found
    if out is not None:
        as_value_bytes(out).numpy()[chosen] = part_out
    return out, index, found


def erase(state: CacheState, keys: torch.Tensor) -> torch.Tensor:
    """Free each key's slot; True on the row that did."""
    erased = torch.empty(keys.shape[0], dtype=torch.bool)
    table = _table(state)
    run("cache_erase", table[0], table[1], table[2], table[4], *table[5:], _u64(keys),
        erased.numpy(), state.pins.numpy())
    return erased


def gather(state: CacheState, index: torch.Tensor) -> torch.Tensor:
    """The value rows of slots ``index`` (int64; -1: a row of zeros)."""
    out = state.values[index.clamp(min=0)]
    signed = SIGNED_VIEW.get(out.dtype)  # torch has no fill for unsigned or float8 values
    (out if signed is None else out.view(signed))[index < 0] = 0
    return out


def scatter(state: CacheState, index: torch.Tensor, rows: torch.Tensor) -> None:
    """Write row r of ``rows`` to the value of slot ``index[r]`` (distinct slots; -1:
    skipped)."""
    keep = index >= 0
    state.values[index[keep]] = rows[keep]
