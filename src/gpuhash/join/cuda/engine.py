"""The join's CUDA engine: a join's build side stored in a MultiMap's table by key code, and
its probe, as kernels (join/kernels/join.cu) over the table's bytes; the CPU engine
(join/cpu/engine.py) has the same operations. Outputs are made with torch on the current
stream of the table's device; the probe synchronises once, to learn its output's size.
"""

from __future__ import annotations

import functools
import os
import threading

import torch

from gpuhash._common.constants import JOIN_FLAGS, JOIN_ITEMS
from gpuhash._common.cuda.compile import load_module
from gpuhash._common.cuda.launch import launch, launch_cooperative
from gpuhash.table.cuda.engine import (
    _PROBE_COUNTERS,
    ARCH_ENV,
    _kernel_key,
    _ptr,
    table_args,
    table_type,
)
from gpuhash.table.format import TableSpec, TableState, fits_l2

KERNELS = ("gh_join_build", "gh_join_probe")
ROW_DTYPES = (torch.int32, torch.int64)  # a join build's values: its row numbers


def kernel_names(spec: TableSpec) -> dict[str, str]:
    """Kernel -> name expression of the join kernels for a build table of this spec, for key
    columns of 4 and 8 bytes."""
    table = table_type(spec)
    return {f"{kernel}_{width}": f"{kernel}<{table}, {width}>"
            for kernel in KERNELS for width in (4, 8)}


@functools.cache
def _kernels(spec_key: tuple, device_index: int, arch: str | None) -> dict:
    spec = TableSpec(**dict(spec_key))
    names = kernel_names(spec)
    module = load_module("join/kernels/join.cu", tuple(names.values()), device_index, arch)
    return {op: module.get_kernel(expression) for op, expression in names.items()}


def _join_launch_info(state: TableState) -> tuple[dict, tuple[int, ...], int]:
    """The join kernels for a build table, its table arguments and device index, worked out
    once a table (a small join's time is mostly the host's)."""
    info = state.caches.get("_join_launch_info")
    if info is None:
        device = state.slots.get_device()
        kernels = _kernels(_kernel_key(state.spec), device, os.environ.get(ARCH_ENV))
        info = state.caches["_join_launch_info"] = (kernels, table_args(state), device)
    return info


def build(state: TableState, keys: torch.Tensor, valid: torch.Tensor | None,
                     shape: int, low: int, high: int, *, groups: torch.Tensor,
                     direct: torch.Tensor | None = None,
                     ranked: torch.Tensor | None = None) -> None:
    """Store every usable row of a build key column: each key code once, its row number as
    value, or for a code of several rows ~start of their group in an array of row numbers
    (``state.join_groups``: that array, then ``groups``). ``shape``, ``low`` and ``high`` say
    how a row's code derives from its key (join/kernels/join_code.cuh: gh_join_code; the CPU
    engine's join_codes is the same rule). ``groups``: zeroed words (join/build.py:
    group_words): the number of rows that repeat a code, the group array's fill, a counter a
    slot. ``direct`` (int64, zeroed: a power of two entries and one word more) is tried first,
    and the table is left empty where it holds every row; with ``ranked`` (its rows and chunk
    words: join/build_arrays.py: ranked_extra_words), ``direct`` is the bits of a ranked array
    instead (join/kernels/join_build.cuh: gh_join_ranked_bits). One cooperative launch does it all,
    filling the table first where it was made unfilled (empty_state), since a small join's time
    is mostly launches (join/kernels/join_build.cuh: gh_join_build). Nothing is synchronised:
    the host never learns whether codes repeat, so the group array is sized for the worst case,
    half again the rows."""
    kernels, table, device = _join_launch_info(state)
    width, rows = keys.element_size(), keys.shape[0]
    unfilled = state.caches.pop("_unfilled", (0, 0, 0, 0))  # (0, ...): filled already
    # a table kept for another join (join/pool.py) keeps its last group array
    ordered = (state.join_groups or (None,))[0]
    if ordered is None or ordered.shape[0] < rows + rows // 2 + 1:
        ordered = keys.new_empty(rows + rows // 2 + 1, dtype=state.spec.value_dtype)
    state.join_groups = (ordered, groups)
    stream = torch._C._cuda_getCurrentRawStream(device)
    launch_cooperative(kernels[f"gh_join_build_{width}"], max(rows, unfilled[2]), *table,
                       *unfilled, keys.data_ptr(), _ptr(valid), rows, shape, low, high,
                       _ptr(direct), 0 if direct is None else direct.shape[0] - 2,
                       _ptr(ranked), groups.data_ptr(), ordered.data_ptr(),
                       _barrier_word(device, stream),
                       device=device)


def _barrier_word(device: int, stream: int) -> int:
    """The address of a zeroed word for the grid barriers of join builds on one stream of
    ``device`` (join/kernels/join_build.cuh: gh_grid_barrier): launches on one stream run one at
    a time, and each leaves the word's low 31 bits at zero, as it found them. Made once a
    stream handle (one fill launch on that stream) and kept for the process. (A stream
    destroyed with a build still queued, its handle reused at once, would share a word; a
    build cannot be captured in a CUDA graph: the join synchronises to plan and to learn
    its output size.)"""
    # the per-thread default stream's handle names another stream in each host thread
    key = (device, stream, threading.get_ident() if stream == _PER_THREAD_STREAM else 0)
    word = _BARRIER_WORDS.get(key)
    if word is None:
        with torch.cuda.device(device), torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            word = torch.zeros(1, dtype=torch.int64, device=f"cuda:{device}")
        _BARRIER_WORDS[key] = word
    return word.data_ptr()


_BARRIER_WORDS: dict[tuple[int, int, int], torch.Tensor] = {}  # (device, stream, thread)
_PER_THREAD_STREAM = 2  # cudaStreamPerThread


def probe(state: TableState, keys: torch.Tensor, valid: torch.Tensor | None,
                     shape: int, low: int, high: int, *, keep_unmatched: bool = False,
                     build_hit: torch.Tensor | None = None,
                     probe_hit: torch.Tensor | None = None,
                     direct: torch.Tensor | None = None, ranked: torch.Tensor | None = None,
                     one_row: str | None = None, unmatched_build: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None]:
    """(probe row, build row) of every match of a probe key column, plus (row, -1) for rows
    without one when ``keep_unmatched``; with ``one_row`` "semi" / "anti" instead one (row,
    -1) for each row that has / lacks a match; in no particular order; the number of build rows
    the table lacks (unplaced: out of the encoding's range, or no slot), which must be zero
    for the pairs to be complete. ``build_hit`` (a byte per build row) gets 1 at every matched
    build row. With ``probe_hit`` (a bool per probe row) only that mask is written and no
    pairs are made. ``direct`` (and ``ranked``): the build's direct or ranked array
    (build), read instead of the table where it holds the build side. Last, with
    ``unmatched_build`` (and ``build_hit``), the build rows ``build_hit`` leaves unmarked
    after this probe, ascending (else None). Synchronises once: the pair count, the unplaced
    count and the unmatched build rows' count in one read."""
    kernels, table, device = _join_launch_info(state)
    kernel = kernels[f"gh_join_probe_{keys.element_size()}"]
    rows = keys.shape[0]
    flags = ((JOIN_FLAGS["keep_unmatched"] if keep_unmatched else 0)
             | (0 if build_hit is None else JOIN_FLAGS["mark_build"])
             | (0 if probe_hit is None else JOIN_FLAGS["hits_only"])
             | (JOIN_FLAGS["warp_reads"] if _past_l2(state.spec) else 0)
             | (JOIN_FLAGS[one_row] if one_row else 0))
    launch_rows = max(1, -(-rows // JOIN_ITEMS))  # one block even for no rows: total[1]
    capacity = 0 if probe_hit is not None else rows
    # the new table's zeroed words serve the first probe (ordered after the table's fill, as
    # the probe must be after its build); later probes and a second run zero their own
    counters = state.caches.pop("_zeroed_counters", None)
    ordered = state.join_groups[0]
    while True:
        if counters is None:
            counters = keys.new_zeros(_PROBE_COUNTERS, dtype=torch.int64)
        out = keys.new_empty(2 * capacity, dtype=torch.int64)  # probe rows, then build rows
        first = out.data_ptr()
        launch(kernel, launch_rows, *table, keys.data_ptr(), _ptr(valid), rows, shape, low,
               high, flags, first, first + 8 * capacity, capacity, counters.data_ptr(),
               _ptr(build_hit), _ptr(probe_hit), _ptr(direct),
               0 if direct is None else direct.shape[0] - 2, _ptr(ranked), ordered.data_ptr(),
               device=device)
        unmatched = None
        if unmatched_build:  # compacted on the device, counted into the same read
            unmarked = build_hit == 0
            unmatched = torch.nonzero_static(unmarked, size=build_hit.shape[0]).squeeze(1)
            counters[2:3].copy_(unmarked.sum(dtype=torch.int64).view(1))
        total, unplaced, missing = read_counters(counters, device)
        if unplaced or total <= capacity:
            pairs = min(total, capacity)
            if unmatched is not None:
                unmatched = unmatched[:missing]
            return out[:pairs], out[capacity:capacity + pairs], unplaced, unmatched
        capacity = total  # repeated build keys made more pairs than probe rows: run again
        counters = None


def read_counters(counters: torch.Tensor, device: int) -> list[int]:
    """A join's int64 counters read by the host: copied behind the kernel into pinned memory,
    one buffer a host thread and length (read only once the copy is done), then the stream
    synchronised. ``tolist()`` copies into pageable memory instead, which the GPU starts only
    after the host has seen the stream drain."""
    buffers = _HOST_WORDS.__dict__.setdefault("buffers", {})
    host = buffers.get(counters.shape[0])
    if host is None:
        host = buffers[counters.shape[0]] = torch.empty(counters.shape[0], dtype=torch.int64,
                                                        pin_memory=True)
    host.copy_(counters, non_blocking=True)
    torch.cuda.current_stream(device).synchronize()
    return host.tolist()


_HOST_WORDS = threading.local()  # .buffers: a host thread's pinned words (read_counters)


def _past_l2(spec: TableSpec) -> bool:
    """Whether a table's slots outgrow L2, where the probe's warps read first buckets together
    (join/kernels/join.cu: GH_JOIN_WARP_READS): the format's own L2 bound."""
    return not fits_l2(spec.num_slots, spec)
