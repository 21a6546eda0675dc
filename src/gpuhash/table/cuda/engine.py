"""The CUDA engine: the table operations as kernels over the shared table format.

Same operation names and signatures as table/cpu/engine.py (the Engine protocol of
table/engine.py). Each operation allocates its outputs with torch on the current stream of
the table's device (a join's first probe counts in two zero words of its table's allocation,
ordered with the table) and launches kernels from table/kernels/map.cu or multimap.cu, the
template instances for the table's type. Nothing here synchronises with the host except
``multi_find_all``, which must learn how many matches to allocate.
"""

from __future__ import annotations

import functools
import os

import torch

from gpuhash._common.constants import DEFAULT_SEED, LAYOUT_CODES, STASH_CAPACITY
from gpuhash._common.cuda.compile import has_cas128, load_module
from gpuhash._common.cuda.launch import launch
from gpuhash.table.format import (
    COUNTS_LEN,
    PAIR,
    ROWS,
    TableSpec,
    TableState,
    check_buckets,
    filter_words,
)

MAP_KERNELS = ("gh_insert", "gh_insert_deferred", "gh_lookup", "gh_erase", "gh_rehash",
               "gh_rehash_deferred")
MULTI_KERNELS = ("gh_multi_insert", "gh_multi_count", "gh_multi_retrieve", "gh_multi_erase",
                 "gh_multi_rehash")
ELEMENT_TYPES = {torch.int32: "int", torch.int64: "long long", torch.float32: "float",
                 torch.float64: "double"}
APPLY_OPS = {"add": 0, "min": 1, "max": 2}
# Set (tests only) to compile for another architecture, e.g. compute_80 on an sm_90 GPU: the
# sm_80 code paths then run as PTX compiled forward by the driver.
ARCH_ENV = "GPUHASH_CUDA_ARCH"


def table_type(spec: TableSpec) -> str:
    """The C++ table type of a spec: ``GhTable<key bytes, value bytes, layout, bucket slots>``."""
    return (f"GhTable<{spec.key_bytes}, {spec.value_bytes}, {LAYOUT_CODES[spec.layout]}, "
            f"{spec.bucket_slots}>")


def last_rows_scratch_type(key_bytes: int, *, wide: bool = False) -> str:
    """The scratch table of gh_last_rows (map.cu): key -> largest row (smallest with
    ``first``) as int32, 8-slot buckets, packed for 32-bit keys, rows (values beside the slot
    words) for 64-bit ones. (4-byte rows there, not 8: a quarter less scratch, and a faster
    pass.) ``wide``: 8-byte rows, for a
    batch of 64-bit keys past LAST_ROWS_LIMIT rows (a cache's write takes any batch whole)."""
    if key_bytes == 4:
        return "GhTable<4, 4, 0, 8>"
    return "GhTable<8, 8, 2, 8>" if wide else "GhTable<8, 4, 2, 8>"


def kernel_names(spec: TableSpec) -> dict[str, str]:
    """Operation -> name expression of every kernel a table of this spec uses."""
    table = table_type(spec)
    if spec.multi:
        return {name: f"{name}<{table}>" for name in MULTI_KERNELS}
    names = {name: f"{name}<{table}>" for name in MAP_KERNELS}
    names["gh_last_rows"] = f"gh_last_rows<{last_rows_scratch_type(spec.key_bytes)}>"
    if spec.key_bytes == 8:
        names["gh_last_rows_wide"] = f"gh_last_rows<{last_rows_scratch_type(8, wide=True)}>"
    element = ELEMENT_TYPES.get(spec.value_dtype)
    if element is not None:
        for op, code in APPLY_OPS.items():
            names[f"apply_{op}"] = f"gh_apply<{table}, {element}, {code}>"
    return names


@functools.lru_cache(maxsize=1024)
def _kernel_key(spec: TableSpec) -> tuple:
    """What a table's kernels depend on (not its size or seed), as _kernels' cache key;
    cached a spec, since every join makes a new table."""
    key = tuple(sorted((field, getattr(spec, field)) for field in
                       ("key_dtype", "value_dtype", "value_shape", "bucket_slots", "multi")))
    return key + (("num_buckets", 1),)


@functools.cache
def _kernels(spec_key: tuple, device_index: int, arch: str | None) -> dict:
    spec = TableSpec(**dict(spec_key))
    names = kernel_names(spec)
    source = "table/kernels/multimap.cu" if spec.multi else "table/kernels/map.cu"
    module = load_module(source, tuple(names.values()), device_index, arch)
    return {op: module.get_kernel(expression) for op, expression in names.items()}


@functools.cache
def _fill_kernel(device_index: int, arch: str | None):
    module = load_module("_common/kernels/fill.cu", (), device_index, arch)
    return module.get_kernel("gh_fill_table")


def empty_state(spec: TableSpec, device: torch.device, *, spare_words: int = 0,
                filled: bool = True) -> TableState:
    """A table with no entries, byte for byte table/format.py's empty_state's, in one allocation
    set by one launch (_common/kernels/fill.cu): slot words, then the counters, then the
    overflow bits, each tensor a view of its part. (A value row table's rows are a second
    allocation.) Two more zero words close the allocation, outside every view: the counters of
    the table's first join probe (join/cuda/engine.py: probe), which would otherwise cost a
    launch; then ``spare_words`` zero words for the caller (``state.spare``: a join build's
    direct array and groups), which would too. Not ``filled``: the memory is left as it is for a
    join build, which fills it in its own launch (join/cuda/engine.py: build)."""
    check_buckets(spec)
    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    rows = spec.num_slots + 2
    slot_words = rows * spec.words_per_slot
    bits = filter_words(spec)
    end = slot_words + COUNTS_LEN + (bits + 1) // 2
    total = end + _PROBE_COUNTERS + spare_words
    words = torch.empty(total, dtype=torch.int64, device=device)
    tombstone_word = spec.num_slots * spec.words_per_slot
    if filled:
        launch(_fill_kernel(index, os.environ.get(ARCH_ENV)), total, words.data_ptr(),
               slot_words, total, tombstone_word, device=index)
    values = None
    if spec.layout == ROWS:
        values = torch.zeros((rows, *spec.value_shape), dtype=spec.value_dtype, device=device)
    state = TableState(spec, words[:slot_words].view(rows, spec.words_per_slot), values,
                       words[slot_words + COUNTS_LEN:end].view(torch.int32)[:bits],
                       words[slot_words:slot_words + COUNTS_LEN])
    state.caches["_zeroed_counters"] = words[end:end + _PROBE_COUNTERS]  # the first probe's
    if spare_words:
        state.spare = words[end + _PROBE_COUNTERS:total]
    if not filled:
        state.caches["_unfilled"] = (words.data_ptr(), slot_words, total, tombstone_word)
    return state


_PROBE_COUNTERS = 3  # a join probe's counters: pairs, unplaced build rows, unmatched build rows


def table_args(state: TableState) -> tuple[int, ...]:
    """The arguments every kernel over a table takes first (GH_TABLE_PARAMS)."""
    spec = state.spec
    values = 0 if state.values is None else state.values.data_ptr()
    return (state.slots.data_ptr(), values, state.overflow.data_ptr(), state.counts.data_ptr(),
            spec.num_buckets, spec.signed_seed)


def _launch_info(state: TableState) -> tuple[dict, tuple[int, ...], int]:
    """Kernels, table arguments and device index of a state, worked out once: its tensors
    never move."""
    info = state.caches.get("_cuda_launch_info")
    if info is None:
        spec = state.spec
        args = table_args(state)
        index = state.slots.get_device()
        kernels = _kernels(_kernel_key(spec), index, os.environ.get(ARCH_ENV))
        info = (kernels, args, index)
        state.caches["_cuda_launch_info"] = info
    return info


def _cas128(state: TableState) -> bool:
    """Whether this table's kernels were compiled with the 128-bit CAS (decided by the
    architecture they were compiled for, as the kernels decide it)."""
    return has_cas128(state.slots.get_device(), os.environ.get(ARCH_ENV))


def _ptr(tensor: torch.Tensor | None) -> int:
    return 0 if tensor is None else tensor.data_ptr()


def _scratch(state: TableState, name: str, make) -> torch.Tensor:
    """A buffer kept with the table, made on first use (zeroed locks, the stash)."""
    buffer = state.caches.get(name)
    if buffer is None:
        buffer = make()
        state.caches[name] = buffer
    return buffer


def _bucket_locks(state: TableState) -> int:
    """Per-bucket locks where a slot changes in several stores: displacement of pair slots
    without a 128-bit CAS (before sm_90, or PTX for compute_80), and of rows; row writes of
    launches whose keys may repeat. One more than the buckets: the out-of-band slots' lock.
    All zero between launches."""
    spec = state.spec
    if not (spec.layout == ROWS or (spec.layout == PAIR and not _cas128(state))):
        return 0
    return _scratch(state, "_cuda_locks", lambda: torch.zeros(
        spec.num_buckets + 1, dtype=torch.int32, device=state.device)).data_ptr()


def _stash(state: TableState) -> tuple[int, int, int]:
    """Where a displaced key that found no slot is kept (key and value words, rows)."""
    words = _scratch(state, "_cuda_stash", lambda: torch.zeros(
        (STASH_CAPACITY, 2), dtype=torch.int64, device=state.device))
    rows = 0
    if state.spec.layout == ROWS:
        rows = _scratch(state, "_cuda_stash_rows", lambda: torch.zeros(
            (STASH_CAPACITY, state.spec.value_bytes), dtype=torch.uint8,
            device=state.device)).data_ptr()
    return words.data_ptr(), rows, STASH_CAPACITY


def stashed(state: TableState, count: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The first ``count`` stashed entries as (key words, value bytes), if any were kept."""
    words = state.caches.get("_cuda_stash")
    if words is None or count == 0:
        return None
    words = words[:count]
    spec = state.spec
    if spec.layout == ROWS:
        value_bytes = state.caches["_cuda_stash_rows"][:count].clone()
    else:
        value_bytes = words[:, 1:].clone().view(torch.uint8)[:, : spec.value_bytes].contiguous()
    # copies: putting the entries back launches kernels that may write the stash again
    return words[:, 0].clone(), value_bytes


# gh_last_rows keeps rows as int32 in its scratch slots: a HashMap's larger batches go in parts;
# a larger batch of 64-bit keys otherwise takes the instance with 8-byte rows (last_rows_with)
LAST_ROWS_LIMIT = 2**31 - 1
_SCRATCH_SALT = DEFAULT_SEED  # the scratch's hash seed: the table's, salted


def last_rows(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """True on the last row of each distinct key (batch order), found by gh_last_rows in one
    pass over a scratch table of twice the batch's slots, made and filled on this stream."""
    kernels, table, device = _launch_info(state)
    return last_rows_with(kernels["gh_last_rows"], keys, key_bytes=state.spec.key_bytes,
                          seed=state.spec.seed, counts=table[3], device=device,
                          wide_kernel=kernels.get("gh_last_rows_wide"))


def last_rows_with(kernel, keys: torch.Tensor, *, key_bytes: int, seed: int, counts: int,
                   device: int, first: bool = False, wide_kernel=None) -> torch.Tensor:
    """last_rows through given instances of gh_last_rows (``kernel``'s scratch type is
    last_rows_scratch_type(key_bytes); ``wide_kernel``'s, for 64-bit keys, the wide one,
    taken past LAST_ROWS_LIMIT rows): every structure's dict semantics share it. ``counts``:
    the address of the structure's counters, whose third one counts rows the kernel could not
    place (never: the scratch has room for every row). ``first``: True on the first row of
    each key instead."""
    rows = keys.shape[0]
    wide = key_bytes == 8 and rows > LAST_ROWS_LIMIT and wide_kernel is not None
    buckets = max(1, -(-2 * rows // 8))
    words = buckets * 8 + 2  # slot words (one per slot) and the two out-of-band slots
    filter_words = -(-buckets // 4)  # 16 filter bits a bucket, as int64 words
    # the rows beside the slots: 4 bytes each, 8 in the wide instance (none when packed)
    value_words = (words if wide else -(-words // 2)) if key_bytes == 8 else 0
    # all ones: EMPTY slots, -1 rows, and every filter bit set (claims never read them)
    scratch = keys.new_empty(words + filter_words + value_words, dtype=torch.int64).fill_(-1)
    active = keys.new_ones(rows, dtype=torch.bool)
    base = scratch.data_ptr()
    salted = (seed ^ _SCRATCH_SALT) & (2**64 - 1)
    salted -= (salted >> 63) << 64  # as a signed 64-bit argument
    values = base + 8 * (words + filter_words) if value_words else 0
    launch(wide_kernel if wide else kernel, rows, base, values, base + 8 * words, counts,
           buckets, salted, keys.data_ptr(), rows, active.data_ptr(), int(first), device=device)
    return active


def insert(state: TableState, keys: torch.Tensor, values: torch.Tensor | None, *,
           duplicates: str = "last", last: torch.Tensor | None = None) -> torch.Tensor:
    """Insert or assign each row; True where the row added a new key.

    "last": dict semantics, the last row of a key wins and is the one marked (last_rows picks
    those rows, then they go in as distinct keys). "distinct": the caller guarantees distinct
    keys, so keys whose first bucket is full are placed by displacement in a second launch
    instead of further along their bucket sequence. "any": rows of a key race, one wins.
    ``last``: last_rows(state, keys), if the caller launched it already.
    """
    rows = keys.shape[0]
    if duplicates == "last" and rows > LAST_ROWS_LIMIT:
        # in order, so a later part's rows win over an earlier part's (a key new in an
        # earlier part is marked there)
        return torch.cat([
            insert(state, keys[i: i + LAST_ROWS_LIMIT],
                   None if values is None else values[i: i + LAST_ROWS_LIMIT])
            for i in range(0, rows, LAST_ROWS_LIMIT)])
    active = None
    if duplicates == "last":
        active = last_rows(state, keys) if last is None else last
    kernels, table, device = _launch_info(state)
    inserted = keys.new_empty(rows, dtype=torch.bool)
    defer = duplicates != "any"
    row_locks = _bucket_locks(state) if state.spec.layout == ROWS and not defer else 0
    launch(kernels["gh_insert"], rows, *table, keys.data_ptr(), _ptr(values), _ptr(active),
           inserted.data_ptr(), rows, int(defer), row_locks, device=device)
    if defer:
        launch(kernels["gh_insert_deferred"], rows, *table, keys.data_ptr(), _ptr(values),
               inserted.data_ptr(), rows, _bucket_locks(state), *_stash(state), device=device)
        # each new key is a live entry and (but for the out-of-band ones, which the kernel
        # took off already) a used bucket slot: counted here for deferred inserts (map.cu)
        _scratch(state, "_cuda_counts_head", lambda: state.counts[:2]).add_(inserted.sum())
    return inserted


def insert_or_apply(state: TableState, keys: torch.Tensor, values: torch.Tensor,
                    op: str, slots: torch.Tensor | None = None) -> torch.Tensor:
    """Insert new keys with their value; combine the values of existing keys (and of several
    rows of a new key) with ``op``. True on one row per new key. ``slots`` (int64, a row
    each), when given, receives each row's place in the value storage, as find_index gives."""
    kernels, table, device = _launch_info(state)
    rows = keys.shape[0]
    inserted = keys.new_empty(rows, dtype=torch.bool)
    kernel = kernels[f"apply_{op}"]
    spec = state.spec
    if spec.layout != ROWS and (spec.layout != PAIR or _cas128(state)):  # one CAS: both
        launch(kernel, rows, *table, keys.data_ptr(), values.data_ptr(), inserted.data_ptr(),
               rows, _ptr(slots), 0, device=device)
        return inserted
    if slots is None:
        slots = keys.new_empty(rows, dtype=torch.int64)
    for phase in (1, 2):
        launch(kernel, rows, *table, keys.data_ptr(), values.data_ptr(), inserted.data_ptr(),
               rows, slots.data_ptr(), phase, device=device)
    return inserted


# Outputs are allocated with keys.new_empty: it skips parsing a device argument, and a small
# find is dominated by host overhead.
def _lookup(state: TableState, keys: torch.Tensor, values: torch.Tensor | None,
            default: torch.Tensor | None, index: torch.Tensor | None,
            found: torch.Tensor) -> None:
    rows = keys.shape[0]
    kernels, table, device = _launch_info(state)
    launch(kernels["gh_lookup"], rows, *table, keys.data_ptr(), rows, _ptr(values),
           _ptr(default), _ptr(index), found.data_ptr(), device=device)


def find(state: TableState, keys: torch.Tensor,
         default: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Values of each key (``default`` where missing) and a found mask."""
    spec = state.spec
    rows = keys.shape[0]
    values = keys.new_empty((rows, *spec.value_shape), dtype=spec.value_dtype)
    found = keys.new_empty(rows, dtype=torch.bool)
    _lookup(state, keys, values, default, None, found)
    return values, found


def find_index(state: TableState, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row of each key in the value storage (-1 where missing) and a found mask."""
    index = keys.new_empty(keys.shape[0], dtype=torch.int64)
    found = keys.new_empty(keys.shape[0], dtype=torch.bool)
    _lookup(state, keys, None, None, index, found)
    return index, found


def contains(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """True where the key is in the table."""
    if state.spec.multi:  # a MultiMap's kernels count copies; they have no lookup
        return _per_row(state, keys, "gh_multi_count", torch.int64) > 0
    found = keys.new_empty(keys.shape[0], dtype=torch.bool)
    _lookup(state, keys, None, None, None, found)
    return found


def _per_row(state: TableState, keys: torch.Tensor, kernel: str,
             dtype: torch.dtype) -> torch.Tensor:
    """Launch a kernel taking (keys, n, out) that writes one ``dtype`` result per row."""
    kernels, table, device = _launch_info(state)
    out = keys.new_empty(keys.shape[0], dtype=dtype)
    launch(kernels[kernel], keys.shape[0], *table, keys.data_ptr(), keys.shape[0],
           out.data_ptr(), device=device)
    return out


def erase(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """Remove each key; True on one row per removed key (which row of a repeated key is
    unspecified)."""
    return _per_row(state, keys, "gh_erase", torch.bool)


def rehash(source: TableState, target: TableState) -> None:
    """Insert every live entry of ``source`` into the empty table ``target``, on the GPU."""
    kernels, table, device = _launch_info(target)
    rows = source.slots.shape[0]
    if target.spec.multi:
        launch(kernels["gh_multi_rehash"], rows, *table, source.slots.data_ptr(),
               _ptr(source.values), source.spec.num_slots, device=device)
        return
    pending = source.slots.new_empty(rows, dtype=torch.uint8)
    launch(kernels["gh_rehash"], rows, *table, source.slots.data_ptr(), _ptr(source.values),
           source.spec.num_slots, pending.data_ptr(), device=device)
    launch(kernels["gh_rehash_deferred"], rows, *table, source.slots.data_ptr(),
           _ptr(source.values), source.spec.num_slots, pending.data_ptr(),
           _bucket_locks(target), *_stash(target), device=device)


# --- multimap -----------------------------------------------------------------------------
def multi_insert(state: TableState, keys: torch.Tensor, values: torch.Tensor | None) -> None:
    """Add every row as its own entry (repeated keys kept)."""
    kernels, table, device = _launch_info(state)
    launch(kernels["gh_multi_insert"], keys.shape[0], *table, keys.data_ptr(), _ptr(values),
           keys.shape[0], device=device)


def multi_count(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """Entries holding each key."""
    return _per_row(state, keys, "gh_multi_count", torch.int64)


def multi_find_all(state: TableState, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(query row, slot) of every match, grouped by query row. Synchronises once (the total)."""
    kernels, table, device = _launch_info(state)
    counts = multi_count(state, keys)
    offsets = torch.cumsum(counts, 0) - counts
    total = int(counts.sum()) if keys.shape[0] else 0
    rows = keys.new_empty(total, dtype=torch.int64)
    index = keys.new_empty(total, dtype=torch.int64)
    launch(kernels["gh_multi_retrieve"], keys.shape[0], *table, keys.data_ptr(), keys.shape[0],
           offsets.data_ptr(), rows.data_ptr(), index.data_ptr(), device=device)
    return rows, index


def multi_erase(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """Remove every copy of each key; copies removed by each row."""
    return _per_row(state, keys, "gh_multi_erase", torch.int64)
