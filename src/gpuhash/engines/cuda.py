"""The CUDA engine: the table operations as kernels over the shared table format.

Same operation names and signatures as engines/cpu.py. Each operation allocates its outputs
with torch (on the current stream) and launches one kernel from kernels/map.cu, compiled for
the table's key width, value width and layout. Nothing here synchronises with the host.
"""

from __future__ import annotations

import functools

import torch

from .._cuda.compile import load_module
from .._cuda.launch import launch
from .._format import LAYOUT_CODES, PAIR, ROWS, TableSpec, TableState

_KERNELS = ("gh_insert", "gh_insert_deferred", "gh_lookup", "gh_erase", "gh_rehash",
            "gh_rehash_deferred")


def defines(spec: TableSpec) -> tuple[tuple[str, int], ...]:
    """The compile-time parameters of the kernels for tables of this spec."""
    return (
        ("GH_KEY_BYTES", spec.key_bytes),
        ("GH_VALUE_BYTES", spec.value_bytes),
        ("GH_LAYOUT", LAYOUT_CODES[spec.layout]),
        ("GH_BUCKET_SLOTS", spec.bucket_slots),
    )


@functools.cache
def _kernels(definitions: tuple[tuple[str, int], ...], device_index: int) -> dict:
    module = load_module("map.cu", definitions, device_index)
    return {name: module.get_kernel(name) for name in _KERNELS}


def _launch_info(state: TableState) -> tuple[dict, tuple[int, ...], int]:
    """Kernels, table arguments and device index of a state, worked out once: its tensors
    never move."""
    info = state.__dict__.get("_cuda_launch_info")
    if info is None:
        values = 0 if state.values is None else state.values.data_ptr()
        args = (state.slots.data_ptr(), values, state.overflow.data_ptr(),
                state.counts.data_ptr(), state.spec.num_buckets, state.spec.seed)
        index = state.slots.get_device()
        info = (_kernels(defines(state.spec), index), args, index)
        state.__dict__["_cuda_launch_info"] = info
    return info


def _kernel(state: TableState, name: str):
    return _launch_info(state)[0][name]


def _table_args(state: TableState) -> tuple[int, ...]:
    return _launch_info(state)[1]


def _ptr(tensor: torch.Tensor | None) -> int:
    return 0 if tensor is None else tensor.data_ptr()


def _locks(state: TableState) -> int:
    """Per-bucket locks for displacement in pair layouts (all zero between launches); sm_90 and
    later swap pair slots with a 128-bit CAS and need none."""
    if state.spec.layout != PAIR or torch.cuda.get_device_capability(state.device)[0] >= 9:
        return 0
    locks = state.__dict__.get("_cuda_locks")
    if locks is None:
        locks = torch.zeros(state.spec.num_buckets, dtype=torch.int32, device=state.device)
        state.__dict__["_cuda_locks"] = locks
    return locks.data_ptr()


def insert(state: TableState, keys: torch.Tensor, values: torch.Tensor | None, *,
           active: torch.Tensor | None = None) -> torch.Tensor:
    """Insert or assign each active row; True where the row added a new key.

    Active rows hold distinct keys (the table layer's duplicate policy), so keys whose first
    bucket is full are placed by displacement in a second launch instead of further along
    their bucket sequence.
    """
    rows = keys.shape[0]
    inserted = torch.empty(rows, dtype=torch.bool, device=keys.device)
    defer = active is not None and state.spec.layout != ROWS
    launch(_kernel(state, "gh_insert"), rows, *_table_args(state), keys.data_ptr(),
           _ptr(values), _ptr(active), inserted.data_ptr(), rows, int(defer),
           device=state.device)
    if defer:
        launch(_kernel(state, "gh_insert_deferred"), rows, *_table_args(state),
               keys.data_ptr(), _ptr(values), inserted.data_ptr(), rows, _locks(state),
               device=state.device)
        # each new key is a live entry and (but for the out-of-band ones, which the kernel
        # took off already) a used bucket slot: counted here for deferred inserts (map.cu)
        state.counts.add_(inserted.sum())
    return inserted


# Outputs are allocated with keys.new_empty: it skips parsing a device argument, and a small
# find is dominated by host overhead (scripts/profile_find.py).
def _lookup(state: TableState, keys: torch.Tensor, values: torch.Tensor | None,
            default: torch.Tensor | None, index: torch.Tensor | None,
            found: torch.Tensor) -> None:
    rows = keys.shape[0]
    kernels, table, device_index = _launch_info(state)
    launch(kernels["gh_lookup"], rows, *table, keys.data_ptr(), rows, _ptr(values),
           _ptr(default), _ptr(index), found.data_ptr(), device=device_index)


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
    found = keys.new_empty(keys.shape[0], dtype=torch.bool)
    _lookup(state, keys, None, None, None, found)
    return found


def erase(state: TableState, keys: torch.Tensor) -> torch.Tensor:
    """Remove each key; True on one row per removed key (which row of a repeated key is
    unspecified)."""
    erased = torch.empty(keys.shape[0], dtype=torch.bool, device=keys.device)
    launch(_kernel(state, "gh_erase"), keys.shape[0], *_table_args(state), keys.data_ptr(),
           keys.shape[0], erased.data_ptr(), device=state.device)
    return erased


def rehash(source: TableState, target: TableState) -> None:
    """Insert every live entry of ``source`` into the empty table ``target``, on the GPU."""
    rows = source.slots.shape[0]
    pending = torch.empty(rows, dtype=torch.uint8, device=target.device)
    launch(_kernel(target, "gh_rehash"), rows, *_table_args(target), source.slots.data_ptr(),
           _ptr(source.values), source.spec.num_slots, pending.data_ptr(),
           device=target.device)
    launch(_kernel(target, "gh_rehash_deferred"), rows, *_table_args(target),
           source.slots.data_ptr(), _ptr(source.values), source.spec.num_slots,
           pending.data_ptr(), _locks(target), device=target.device)
