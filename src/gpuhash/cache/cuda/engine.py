"""The CUDA engine of CacheMap: the functions of cache/cpu/engine.py as kernels of
cache/kernels/cache.cu over the same bytes, outputs made with torch on the current stream of the
cache's device. Nothing here synchronises with the host.

Beside the bytes both engines share, a CUDA cache keeps an index from key to slot
(cache/kernels/cache_index.cuh: 32 bytes a slot), through which finds read one 64-byte bucket a
key; the writes keep it exact. ``refresh`` makes it from the key words, on the current stream: the
cache calls it where it adopts a state and after changing key words with torch, inside
operations ordered as writes, so no read meets an index being made.
"""

from __future__ import annotations

import functools
import os

import torch

from gpuhash._common.constants import INDEX_ENTRIES, WRITE_MODES
from gpuhash._common.cuda.compile import load_module
from gpuhash._common.cuda.launch import launch
from gpuhash.cache.format import PINNED, POLICIES, CacheSpec, CacheState, relocation_limit
from gpuhash.table.cuda.engine import ARCH_ENV, last_rows_scratch_type, last_rows_with

ASSIGN = WRITE_MODES["assign"]  # the mode that inserts nothing, so never evicts
INDEX_PER_SLOT = 2    # index entries a slot: the index is at most half full


def cache_type(spec: CacheSpec) -> str:
    """The C++ cache type of a spec: ``GhCache<value bytes, bucket slots>``."""
    return f"GhCache<{spec.value_bytes}, {spec.bucket_slots}>"


def kernel_names(spec: CacheSpec) -> dict[str, str]:
    """Operation -> name expression of every kernel a cache of this spec uses."""
    cache = cache_type(spec)
    names = {f"write_{mode}": f"gh_cache_write<{cache}, {mode}>"
             for mode in WRITE_MODES.values()}
    names["evict"] = f"gh_cache_evict<{cache}>"
    names["lookup"] = f"gh_cache_lookup<{cache}, true>"
    names["lookup_slots"] = f"gh_cache_lookup<{cache}, false>"  # no value copied
    names["erase"] = f"gh_cache_erase<{cache}>"
    names["index_build"] = f"gh_cache_index_build<{cache}>"
    names["index_settle"] = f"gh_cache_index_settle<{cache}>"
    names["gather"] = f"gh_cache_gather<{cache}>"
    names["scatter"] = f"gh_cache_scatter<{cache}>"
    names["last_rows"] = f"gh_last_rows<{last_rows_scratch_type(8)}>"
    names["last_rows_wide"] = f"gh_last_rows<{last_rows_scratch_type(8, wide=True)}>"
    return names


@functools.cache
def _kernels(value_bytes: int, bucket_slots: int, device_index: int, arch: str | None) -> dict:
    spec = CacheSpec(key_dtype=torch.int64, value_dtype=torch.uint8, value_shape=(value_bytes,),
                     num_buckets=1, bucket_slots=bucket_slots)
    names = kernel_names(spec)
    module = load_module("cache/kernels/cache.cu", tuple(names.values()), device_index, arch)
    return {op: module.get_kernel(expression) for op, expression in names.items()}


def index_buckets(slots: int) -> int:
    """Buckets of the key-to-slot index of a cache of ``slots`` slots (at most 2**32, the
    kernels' 32-bit hash range: cache/format.py's MAX_SLOTS keeps it there)."""
    buckets = -(-INDEX_PER_SLOT * slots // INDEX_ENTRIES)
    assert buckets <= 2**32, buckets
    return buckets


def _launch_info(state: CacheState) -> tuple[dict, tuple[int, ...], int]:
    """Kernels, cache arguments and device index of a state, worked out once; the index made
    where the engine meets a state first (a state the cache adopts is refreshed first; the
    state a growth fills meets the engine in that write)."""
    info = state.caches.get("_cuda_launch_info")
    if info is None:
        spec = state.spec
        device = state.keys.get_device()
        buckets = index_buckets(spec.capacity)
        index = torch.empty((buckets * INDEX_ENTRIES, 2), dtype=torch.int64,
                            device=state.keys.device)
        args = (state.keys.data_ptr(), state.digests.data_ptr(), state.scores.data_ptr(),
                state.values.data_ptr(), state.counts.data_ptr(), spec.num_buckets,
                spec.signed_seed, _ptr(state.host_values), state.hbm_slots, index.data_ptr(),
                buckets, 0)
        kernels = _kernels(spec.value_bytes, spec.bucket_slots, device, os.environ.get(ARCH_ENV))
        info = (kernels, args, device)
        state.caches["_cuda_launch_info"] = info
        state.caches["_cuda_pinned_args"] = args[:-1] + (state.pins.data_ptr(),)
        state.caches["_cuda_index"] = index
        _build_index(state, *info)
    if state.caches.get(PINNED):  # the kernels read the pins (format.py: PINNED)
        return info[0], state.caches["_cuda_pinned_args"], info[2]
    return info


def _build_index(state: CacheState, kernels: dict, args: tuple, device: int) -> None:
    """The index of the state's key words, made anew (gh_cache_index_build)."""
    index = state.caches["_cuda_index"]
    index[:, 0] = -1  # key words EMPTY
    index[:, 1] = 0   # no slot, no count
    launch(kernels["index_build"], state.spec.capacity, *args, device=device)


def refresh(state: CacheState) -> None:
    """Make the index from the state's key words, on the current stream (after key words
    changed other than through this engine's operations, or for a state the cache adopts)."""
    if "_cuda_launch_info" not in state.caches:
        _launch_info(state)  # makes it
        return
    _build_index(state, *state.caches["_cuda_launch_info"])


def _ptr(tensor: torch.Tensor | None) -> int:
    return 0 if tensor is None else tensor.data_ptr()


def last_rows(state: CacheState, keys: torch.Tensor, *, first: bool = False) -> torch.Tensor:
    """True on the last row (``first``: the first) of each distinct key (batch order):
    gh_last_rows, no sort."""
    kernels, table, device = _launch_info(state)
    return last_rows_with(kernels["last_rows"], keys, key_bytes=8, seed=state.spec.seed,
                          first=first, counts=table[4], device=device,
                          wide_kernel=kernels["last_rows_wide"])


def write(state: CacheState, mode: int, keys: torch.Tensor, acting: torch.Tensor, *,
          values: torch.Tensor | None, value_stride: int, scores: torch.Tensor | None,
          accumulate: torch.Tensor | None, step: int, epoch: int, evict_capacity: int,
          out: torch.Tensor | None = None
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple | None]:
    """One write per acting row: gh_cache_write places the rows that find their key or a free
    slot, then (every mode but ASSIGN) gh_cache_evict moves an entry or evicts for the rest,
    and gh_cache_index_settle makes the evictions' index changes.
    Status, slot and found per row, the evicted entries (keys, values, scores, count) with
    ``evict_capacity``, and with ``out`` each acting row's value as the call leaves it."""
    kernels, table, device = _launch_info(state)
    spec = state.spec
    rows = keys.shape[0]
    status = keys.new_empty(rows, dtype=torch.int8)
    index = keys.new_empty(rows, dtype=torch.int64)
    found = keys.new_empty(rows, dtype=torch.bool)
    evicted = None
    ev = (0, 0, 0, 0)
    if evict_capacity:
        evicted = (keys.new_empty(evict_capacity, dtype=torch.int64),
                   keys.new_empty((evict_capacity, *spec.value_shape), dtype=spec.value_dtype),
                   keys.new_empty(evict_capacity, dtype=torch.int64),
                   keys.new_zeros(1, dtype=torch.int64))
        ev = tuple(t.data_ptr() for t in evicted)
    has_values = int(values is not None)
    policy = POLICIES.index(spec.policy)
    launch(kernels[f"write_{mode}"], rows, *table, keys.data_ptr(), acting.data_ptr(),
           _ptr(accumulate), _ptr(scores), _ptr(values), value_stride, has_values, rows,
           policy, step, epoch, status.data_ptr(), index.data_ptr(), found.data_ptr(),
           _ptr(out), device=device)
    if mode != ASSIGN:
        replaced = keys.new_empty(rows, dtype=torch.int64)  # the key each eviction replaced
        launch(kernels["evict"], rows, *table, keys.data_ptr(), _ptr(scores), _ptr(values),
               value_stride, has_values, rows, policy, step, epoch,
               relocation_limit(spec.capacity), status.data_ptr(), index.data_ptr(), *ev,
               evict_capacity, replaced.data_ptr(), device=device)
        launch(kernels["index_settle"], rows, *table, keys.data_ptr(), rows, status.data_ptr(),
               index.data_ptr(), replaced.data_ptr(), device=device)
    return status, index, found, evicted


def lookup(state: CacheState, keys: torch.Tensor, *, only: torch.Tensor | None = None,
           update: torch.Tensor | None = None, step: int = 0, epoch: int = 0,
           default: torch.Tensor | None = None, default_stride: int = 0,
           index: torch.Tensor | None = None, found: torch.Tensor | None = None,
           out: torch.Tensor | None = None, verify: torch.Tensor | None = None
           ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """As cache/cpu/engine.py's lookup (gh_cache_lookup)."""
    if verify is not None and (default is not None or out is not None or update is not None):
        raise ValueError("verify is for lookups of slots alone (no default, out or update)")
    kernels, table, device = _launch_info(state)
    spec = state.spec
    rows = keys.shape[0]
    index = keys.new_empty(rows, dtype=torch.int64) if index is None else index
    found = keys.new_empty(rows, dtype=torch.bool) if found is None else found
    if default is not None and out is None:
        out = keys.new_empty((rows, *spec.value_shape), dtype=spec.value_dtype)
    kernel = kernels["lookup" if out is not None else "lookup_slots"]
    launch(kernel, rows, *table, keys.data_ptr(), rows, _ptr(only), _ptr(update),
           POLICIES.index(spec.policy), step, epoch, _ptr(default), default_stride, _ptr(out),
           index.data_ptr(), found.data_ptr(), _ptr(verify), device=device)
    return out, index, found


def erase(state: CacheState, keys: torch.Tensor) -> torch.Tensor:
    """Free each key's slot; True on the row that did (gh_cache_erase)."""
    kernels, table, device = _launch_info(state)
    erased = keys.new_empty(keys.shape[0], dtype=torch.bool)
    launch(kernels["erase"], keys.shape[0], *table, keys.data_ptr(), keys.shape[0],
           erased.data_ptr(), device=device)
    return erased


def gather(state: CacheState, index: torch.Tensor) -> torch.Tensor:
    """The value rows of slots ``index`` (int64; -1: a row of zeros), wherever they live
    (gh_cache_gather)."""
    kernels, table, device = _launch_info(state)
    spec = state.spec
    out = index.new_zeros((index.shape[0], *spec.value_shape), dtype=spec.value_dtype)
    launch(kernels["gather"], index.shape[0], *table, index.data_ptr(), index.shape[0],
           out.data_ptr(), device=device)
    return out


def scatter(state: CacheState, index: torch.Tensor, rows: torch.Tensor) -> None:
    """Write row r of ``rows`` to the value of slot ``index[r]`` (distinct slots; -1:
    skipped), wherever it lives (gh_cache_scatter)."""
    kernels, table, device = _launch_info(state)
    launch(kernels["scatter"], index.shape[0], *table, index.data_ptr(), index.shape[0],
           rows.data_ptr(), device=device)
