"""Build tables of small GPU joins, kept for the next join of the same size on the same GPU.

A small join's time is mostly host work (bench/RESULTS.md), and making its build table (one
allocation cut into the format's views, then the kernels' arguments worked out) is about a
tenth of it. So ``gh.join`` hands its table back here when it is done, and the next join
whose table has the same spec takes it instead of making one. Reuse is safe because:

- a CUDA join build fills every word of the allocation before anything reads it (slots,
  counters, filter bits, the probe counters and the caller's spare words:
  kernels/fill.cuh, engines/cuda.py: multi_join_build), so nothing of the last join remains
  that a probe could read (the group array it keeps is read only where this build's slots
  point);
- a table is handed back only after the join's last probe read its counters, which waits for
  every kernel queued before it on the join's stream: no work on the table is pending, on any
  stream, when another join takes it;
- taking is a ``dict.pop``, atomic under the GIL, so two threads never share a table.

Only CUDA tables of at most ``POOL_TABLE_BYTES`` are kept, ``POOL_TABLES`` at most (their
memory stays held, as torch's caching allocator would hold it after a join); a join past that
size is bound by its kernels, not by making its table. Prepared builds (``JoinBuild``) keep
their own table and never come here.

Example:
    >>> import torch
    >>> from gpuhash._format import TableSpec
    >>> spec = TableSpec(key_dtype=torch.int32, value_dtype=torch.int32, value_shape=(),
    ...                  num_buckets=1).sized_for(100)
    >>> table = take(spec, torch.device("cpu"), spare_words=4)
    >>> hand_back(table)  # kept on CUDA only: a CPU table is simply dropped
    >>> len(_KEPT)
    0
"""

from __future__ import annotations

import torch

from ._format import TableSpec
from .multimap import MultiMap

POOL_TABLE_BYTES = 64 << 20  # a 1M-row build (J2, J3) takes about 40 MB with its arrays
POOL_TABLES = 4

# (device, spec, spare words) -> (table, the entries its engine set for a new table's first
# build and probe, which they consume: engines/cuda.py: empty_state)
_KEPT: dict[tuple, tuple[MultiMap, dict]] = {}
_FIRST_USE = ("_unfilled", "_zeroed_counters")


def take(spec: TableSpec, device: torch.device, *, spare_words: int) -> MultiMap:
    """An empty, unfilled build table of ``spec`` on ``device`` with ``spare_words`` words for
    the caller (MultiMap._empty's), kept from an earlier join where one fits."""
    key = (device, spec, spare_words)
    kept = _KEPT.pop(key, None)
    if kept is not None:
        multi, first_use = kept
        multi._state.__dict__.update(first_use)
        return multi
    multi = MultiMap._empty(spec, device, growable=False, duplicates="any",
                            spare_words=spare_words, filled=False)
    state = multi._state
    if device.type == "cuda" and state.slots.untyped_storage().nbytes() <= POOL_TABLE_BYTES:
        state.__dict__["_pool"] = (key, {name: state.__dict__[name] for name in _FIRST_USE})
    return multi


def hand_back(multi: MultiMap) -> None:
    """Keep ``multi`` (from :func:`take`) for a later join. Call only when no work on it is
    pending (after the join's last probe) and nothing will use it again."""
    state = multi._state
    pooled = state.__dict__.get("_pool")
    if pooled is None:
        return
    key, first_use = pooled  # the last build's group array stays, for the next build
    if len(_KEPT) < POOL_TABLES:
        _KEPT[key] = (multi, first_use)
