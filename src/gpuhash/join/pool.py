"""Build tables of small GPU joins, kept for the next join of the same size on the same stream.

A small join's time is mostly host work, and making its build table (one allocation cut into the
format's views, then the kernels' arguments worked out) is a noticeable share of it. So
``gh.join``'s in-memory strategy hands its table back here when it is done, and the next such
join whose table has the same spec, on the same stream, takes it instead of making one. Reuse is
safe because:

- a CUDA join build zeroes every word a probe or ``unique()`` reads before it reads them (the
  table's counters and filter bits, the probe counters, the direct array and the group
  words); the slots and the counters a slot are filled too unless the direct array holds
  every row, and then nothing reads them (join/kernels/join_build.cuh: gh_join_build); the kept
  group array is read only where this build's slots point;
- a table is handed back only after the join's last probe read its counters, which waits for
  every kernel queued before it on the join's stream, so no work on it is pending;
- tables are kept a stream (with the host thread for the per-thread default stream, whose
  handle names another stream in each thread), as torch's caching allocator keeps their
  memory: a join that fails halfway drops its table with work still queued on its own stream
  only, where the allocator's stream order protects it;
- taking is a ``dict.pop``, atomic under the GIL, so two threads never share a table.

Only CUDA tables of at most ``POOL_TABLE_BYTES`` (their group array included) are kept, the
``POOL_TABLES`` most recently handed back; their memory stays held until :func:`clear`
(``gh.clear_join_cache()``). Prepared builds (``JoinBuild``), ``merge``'s checks and the
chunked, partitioned and streamed strategies make their own tables.

Example:
    >>> import torch
    >>> from gpuhash.table.format import TableSpec
    >>> spec = TableSpec(key_dtype=torch.int32, value_dtype=torch.int32, value_shape=(),
    ...                  num_buckets=1, multi=True).sized_for(100)
    >>> table = take(spec, torch.device("cpu"), spare_words=4)
    >>> hand_back(table)  # kept on CUDA only: a CPU table is simply dropped
    >>> len(_KEPT)
    0
"""

from __future__ import annotations

import threading

import torch

from gpuhash.table.format import TableSpec
from gpuhash.table.multimap import MultiMap

POOL_TABLE_BYTES = 64 << 20  # a 1M-row build takes about 46 MB with its arrays
POOL_TABLES = 4
_PER_THREAD_STREAM = 2  # cudaStreamPerThread

# (device, stream, thread, spec, spare words) -> (table, the entries its engine set for a new
# table's first build and probe, which they consume: table/cuda/engine.py: empty_state); oldest
# handed back first
_KEPT: dict[tuple, tuple[MultiMap, dict]] = {}
_FIRST_USE = ("_unfilled", "_zeroed_counters")


def take(spec: TableSpec, device: torch.device, *, spare_words: int,
         pooled: bool = True) -> MultiMap:
    """An empty, unfilled build table of ``spec`` on ``device`` with ``spare_words`` words for
    the caller (MultiMap._empty's), kept from an earlier join on this stream where one fits.
    Not ``pooled``: a new table, never kept (prepared builds, the other strategies)."""
    key = None
    if pooled and device.type == "cuda":
        stream = torch._C._cuda_getCurrentRawStream(device.index)
        thread = threading.get_ident() if stream == _PER_THREAD_STREAM else 0
        key = (device, stream, thread, spec, spare_words)
        kept = _KEPT.pop(key, None)
        if kept is not None:
            multi, first_use = kept
            multi._state.caches.update(first_use)
            return multi
    multi = MultiMap._empty(spec, device, growable=False, duplicates="any",
                            spare_words=spare_words, filled=False)
    state = multi._state
    if key is not None and state.slots.untyped_storage().nbytes() <= POOL_TABLE_BYTES:
        state.caches["_pool"] = (key, {name: state.caches[name] for name in _FIRST_USE})
    return multi


def hand_back(multi: MultiMap) -> None:
    """Keep ``multi`` (from :func:`take`) for a later join, in place of the table handed back
    longest ago when POOL_TABLES are kept. Call only when no work on it is pending (after the
    join's last probe) and nothing will use it again."""
    state = multi._state
    pooled = state.caches.get("_pool")
    if pooled is None:
        return
    groups = state.join_groups  # the last build's group array stays
    held = state.slots.untyped_storage().nbytes() + (
        0 if groups is None else groups[0].untyped_storage().nbytes())
    if held > POOL_TABLE_BYTES:
        return
    key, first_use = pooled
    _KEPT.pop(key, None)
    while len(_KEPT) >= POOL_TABLES:
        try:
            _KEPT.pop(next(iter(_KEPT)), None)
        except (RuntimeError, StopIteration):  # another thread changed it meanwhile
            break
    _KEPT[key] = (multi, first_use)


def clear() -> None:
    """Drop every kept join table, so that torch.cuda.empty_cache() can return their memory.

    Example:
        >>> import gpuhash as gh
        >>> gh.clear_join_cache()
    """
    _KEPT.clear()
