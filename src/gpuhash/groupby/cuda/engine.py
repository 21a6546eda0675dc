"""The group-by's CUDA engine (groupby/kernels/groupby.cu and group_select.cuh; the string
keys' hashes and check in strings.cu), the twin of groupby/cpu/engine.py.

``group_reduce(codes, low, groups, values, valid, op, *, rows)``: for each row, group
``code - low`` (outside ``[0, groups)``: the row is dropped); returns per group the
accumulator (``op`` "sum": int64 for integers and bools, float64 for floats; "min" / "max":
int64 or float64, zero for a group with no value), the valid non-NaN values seen (the rows
seen, for integers without a mask) and the rows seen: counted, unless given as ``rows`` (an
earlier pass over the same codes counted them). No host synchronisation.

Up to ``MAX_WINDOWS`` windows of groups, each small enough for a block's shared memory, the
kernels accumulate in shared memory (a window a grid row, the rows read once a window); past
that, with global atomics.
"""

from __future__ import annotations

import functools
import os

import torch

from gpuhash._common.cuda.compile import load_module
from gpuhash._common.cuda.launch import THREADS, launch_grid
from gpuhash.table.cuda.engine import ARCH_ENV

CODE_TYPES = {torch.int32: "int", torch.int64: "long long"}
VALUE_TYPES = {torch.int8: "signed char", torch.uint8: "unsigned char", torch.bool:
               "unsigned char", torch.int16: "short", torch.int32: "int",
               torch.int64: "long long", torch.float32: "float", torch.float64: "double"}
OPS = {"sum": 0, "min": 1, "max": 2}
COMOMENT_TYPES = (torch.int32, torch.int64, torch.float32, torch.float64)  # read as they are
BLOCKS_PER_SM = 8  # a block's shared accumulators are flushed once: cap the blocks
SHARED_BYTES = 96 * 1024  # a window's shared memory (under every arch's per-block limit;
# two such blocks share an sm_90 SM, one an sm_80 one)
MAX_WINDOWS = 4  # past this many windows of groups, global atomics beat reading the rows again
REDUCE_BYTES = 16  # a group's shared accumulator, 32-bit count and 32-bit rows
COPIES_BYTES = 32 * 1024  # a reduce's window small enough that every warp's copy fits this
COPIES_BLOCKS_PER_SM = 16  # is flushed cheaply: up to twice the blocks then, while each
COPIES_ROWS_A_THREAD = 64  # thread still reads this many rows (else the flushes dominate)
COMOMENT_BYTES = 24  # a group's three shared sums
_ORDER_FLIP = 0x7FFFFFFFFFFFFFFF


MAX_KEYS = 8  # GH_GROUP_MAX_KEYS
KEY_WIDTHS = {torch.int8: 1, torch.int16: 2, torch.int32: 4, torch.int64: 8}  # signed


def kernel_names() -> dict:
    """(code, value, op) -> name expression of every reduction; ("codes", dtype) -> of the
    key combination."""
    names = {("codes", torch.int32): "gh_group_codes<int>",
             ("codes", torch.int64): "gh_group_codes<long long>"}
    for code, code_type in CODE_TYPES.items():
        for value in COMOMENT_TYPES:
            names[("comoments", code, value)] = (f"gh_group_comoments<{code_type}, "
                                                 f"{VALUE_TYPES[value]}>")
    for value, value_type in VALUE_TYPES.items():
        if value != torch.bool:  # read as unsigned char
            names[("quantile", value)] = f"gh_group_quantile<{value_type}>"
    for code, code_type in CODE_TYPES.items():
        for value, value_type in VALUE_TYPES.items():
            if value == torch.bool:
                continue  # read as unsigned char
            for op, number in OPS.items():
                acc = "double" if value.is_floating_point and op == "sum" else "long long"
                names[(code, value, op)] = (f"gh_group_reduce<{code_type}, {value_type}, "
                                            f"{acc}, {number}>")
    return names


STRING_KERNELS = {"hashes": "gh_string_hashes", "mismatches": "gh_string_mismatches"}


@functools.cache
def _string_kernels(device_index: int, arch: str | None) -> dict:
    module = load_module("groupby/kernels/strings.cu", tuple(STRING_KERNELS.values()),
                         device_index, arch)
    return {key: module.get_kernel(name) for key, name in STRING_KERNELS.items()}


@functools.cache
def _kernels(device_index: int, arch: str | None) -> dict:
    names = kernel_names()
    module = load_module("groupby/kernels/groupby.cu", tuple(names.values()), device_index,
                         arch)
    return {key: module.get_kernel(expression) for key, expression in names.items()}


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


@functools.cache
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.cache
def _sm_shared_bytes(index: int) -> int:
    """Shared memory of one SM (164 KB on sm_80, 228 KB on sm_90): how many windows' blocks
    are resident at once."""
    properties = torch.cuda.get_device_properties(index)
    return int(getattr(properties, "shared_memory_per_multiprocessor", 164 * 1024))


def _windows(n: int, groups: int, group_bytes: int, index: int, *, copies: bool = False,
             ) -> tuple[int, int, int, int]:
    """(window, windows, blocks a window, copies) of a windowed kernel over ``n`` rows:
    groups a block holds in shared memory (0: global atomics), windows of them, the blocks
    of each, capped so that the blocks' flushes stay few beside the rows, and the copies of
    its window a block keeps (``copies``: a warp's own where they fit COPIES_BYTES; else
    one)."""
    sms = _multiprocessors(index)
    rows_blocks = max(1, -(-n // THREADS))
    window = min(groups, SHARED_BYTES // group_bytes)
    windows = -(-groups // window) if window else 1
    if not window or windows > MAX_WINDOWS:
        return 0, 1, min(rows_blocks, BLOCKS_PER_SM * sms), 1
    warps = THREADS // 32
    kept = warps if copies and window * warps * group_bytes <= COPIES_BYTES else 1
    if kept > 1:
        enough = n // (THREADS * COPIES_ROWS_A_THREAD)
        blocks = max(1, min(rows_blocks, COPIES_BLOCKS_PER_SM * sms,
                            max(enough, BLOCKS_PER_SM * sms)))
    else:
        resident = max(1, min(BLOCKS_PER_SM,
                              _sm_shared_bytes(index) // (window * group_bytes + 1024)))
        blocks = max(1, min(rows_blocks, resident * sms // windows))
    if -(-n // blocks) >= 2**31:  # a block's 32-bit shared counts would overflow
        return 0, 1, min(rows_blocks, BLOCKS_PER_SM * sms), 1
    return window, windows, blocks, kept


def accumulators(groups: int) -> str:
    """How group_reduce accumulates ``groups`` groups (for ``explain``)."""
    windows = -(-groups // (SHARED_BYTES // REDUCE_BYTES))
    if windows > MAX_WINDOWS:
        return "global atomics"
    if groups * (THREADS // 32) * REDUCE_BYTES <= COPIES_BYTES:
        return "per-warp shared accumulators"
    return "per-block shared accumulators" + (f" in {windows} windows" if windows > 1 else "")


def group_reduce(codes: torch.Tensor, low: int, groups: int, values: torch.Tensor,
                 valid: torch.Tensor | None, op: str, *, rows: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    device = codes.device
    index = _device_index(device)
    floats = values.dtype.is_floating_point
    data = values.view(torch.uint8) if values.dtype == torch.bool else values
    kernel = _kernels(index, os.environ.get(ARCH_ENV))[(codes.dtype, data.dtype, op)]
    every_value = valid is None and not floats  # then values seen are the rows seen
    known = rows
    # the zeroed outputs in one allocation (each a launch on the host's critical path)
    zeroed = (op == "sum") + (known is None) + (not every_value)
    buffer = torch.zeros((zeroed, groups), dtype=torch.int64, device=device)
    if op == "sum":
        out = buffer[-1].view(torch.float64) if floats else buffer[-1]
    else:
        identity = torch.iinfo(torch.int64).max if op == "min" else torch.iinfo(torch.int64).min
        out = torch.full((groups,), identity, dtype=torch.int64, device=device)
    if known is None:
        rows = buffer[0]
    counts = rows if every_value else buffer[1 if known is None else 0]
    mask = None if valid is None else valid.view(torch.uint8)
    n = codes.shape[0]
    window, windows, blocks, copies = _windows(n, groups, REDUCE_BYTES, index, copies=True)
    if n and groups:
        launch_grid(kernel, (blocks, windows), copies * window * REDUCE_BYTES,
                    codes.data_ptr(), low, n, data.data_ptr(),
                    0 if mask is None else mask.data_ptr(), groups, window, copies,
                    out.data_ptr(), 0 if every_value else counts.data_ptr(),
                    0 if known is not None else rows.data_ptr(), device=index)
    if op != "sum":
        if floats:  # back from the order-preserving bits
            out = torch.where(out >= 0, out, out ^ _ORDER_FLIP).view(torch.float64)
        out = torch.where(counts > 0, out, torch.zeros((), dtype=out.dtype, device=device))
    return out, counts, rows


def group_codes(columns: list[torch.Tensor], lows: list[int], spans: list[int],
                dtype: torch.dtype) -> torch.Tensor:
    """One code a row: the mixed-radix number of the columns' digits ``key - low`` (the first
    column most significant), as ``dtype`` (int32 or int64: the caller checked the product of
    the spans fits). Signed keys of 1 to 8 bytes (KEY_WIDTHS). No synchronisation."""
    device = columns[0].device
    index = _device_index(device)
    kernel = _kernels(index, os.environ.get(ARCH_ENV))[("codes", dtype)]
    words = torch.zeros(4 * MAX_KEYS + 1, dtype=torch.int64)
    for k, (column, low, span) in enumerate(zip(columns, lows, spans)):
        words[k] = column.data_ptr()
        words[MAX_KEYS + k] = low
        words[2 * MAX_KEYS + k] = span
    widths = words[3 * MAX_KEYS:].view(torch.int32)  # int width[8] then int count
    widths[:len(columns)] = torch.tensor([KEY_WIDTHS[c.dtype] for c in columns])
    widths[MAX_KEYS] = len(columns)
    # the argument block rides along the launch's stream: kept until the kernel has read it
    block = words.to(device, non_blocking=False)
    n = columns[0].shape[0]
    out = torch.empty(n, dtype=dtype, device=device)
    _, _, blocks, _ = _windows(n, 0, REDUCE_BYTES, index)
    launch_grid(kernel, (blocks, 1), 0, block.data_ptr(), n, out.data_ptr(), device=index)
    block.record_stream(torch.cuda.current_stream(device))
    return out


def group_sort(slot: torch.Tensor, groups: int, values: torch.Tensor, *, descending: bool
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(values by group then by value, each group's count, its first position): the values
    of the rows whose slot is below ``groups`` (the others left out), each group's run
    ascending (``descending``: from the largest). Two stable sorts, by value then by group.
    Synchronises once (the rows kept size the output)."""
    if groups < 2**31 - 1:  # a narrower sort key sorts faster
        slot = slot.to(torch.int32)
    keyed = values.view(torch.uint8) if values.dtype == torch.bool else values
    by_value = torch.sort(keyed, stable=True, descending=descending).indices
    order = by_value[torch.sort(slot[by_value], stable=True).indices]
    count = torch.bincount(slot.to(torch.int64), minlength=groups + 1)[:groups]
    kept = int(count.sum())
    return values[order[:kept]], count, torch.cumsum(count, 0) - count


COMPACT_BATCH = 1 << 23  # rows a batch of group_compact's inserts (and its first batch)
# past one batch of rows, the first batch takes this share of them (COMPACT_FLOOR at least, a
# batch at most): an insert costs a row more than the find that the rest get (measured at 1e7
# and 1e8 rows; up to a batch, every row goes in at once as before)
COMPACT_SHARE = 8
COMPACT_FLOOR = 1 << 20
FOUND_SAMPLE = 1 << 16  # rows of the rest looked up: whether the first batch saw most keys
FIND_ROOM = 4  # the found keys' table holds this many times them: a find of a fuller table
# walks more buckets (at the default load factor, 1x costs twice 4x)


def group_compact(values: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(a code a row, the distinct int64 values by code, each code's first row) through the
    core's hash table, codes numbered by first appearance. Synchronises (the distinct values
    size the output).

    The first batch of rows goes in with their row numbers (the table keeps each key's
    least: insert_or_apply "min"), in a table for that many keys. Then, by what those rows
    show:
    - mostly distinct keys: a table for every row, all rows inserted at once;
    - keys the first batch has mostly seen (a sample of the rest looked up): its keys are
      numbered there and then, put with their codes in a table of their own (a quarter
      full), and one find over every row reads the codes, the cheapest pass a row can get.
      Keys it missed first appear after the first batch, so they number after its keys: the
      missed rows go into that table with their row numbers, as the first batch did;
    - otherwise the rest goes in batch by batch, each batch's new keys counted before it
      goes in so the table grows only as far as they need (a growth moves the slots: the
      earlier batches' are then found again)."""
    rows = values.shape[0]
    device = values.device
    head = rows if rows <= COMPACT_BATCH else min(COMPACT_BATCH,
                                                  max(COMPACT_FLOOR, rows // COMPACT_SHARE))
    slot = torch.empty(rows, dtype=torch.int64, device=device)
    claimed = torch.empty(rows, dtype=torch.bool, device=device)

    def put(table, start: int, stop: int) -> None:
        storage = table.values.data_ptr()
        claimed[start:stop], slot[start:stop] = table.insert_or_apply(
            values[start:stop], torch.arange(start, stop, device=device), op="min",
            return_index=True)
        if start and table.values.data_ptr() != storage:  # grown: earlier slots moved
            slot[:start] = table.find_index(values[:start])[0]

    table = _table_for(device, max(head, 1))
    put(table, 0, head)
    sample = values[head::max(1, (rows - head) // FOUND_SAMPLE)].contiguous()
    # one synchronisation learns both: the first batch's new keys and the sample's known ones
    new, known = torch.stack([claimed[:head].sum(),
                              table.contains(sample).sum()]).tolist()
    if rows > head and 2 * new > head:  # mostly distinct keys
        table = _table_for(device, rows)
        put(table, 0, rows)
        new = None
    elif rows > head and 2 * known >= sample.shape[0]:  # the first batch saw most keys
        return _found_codes(table, values, slot[:head], claimed[:head], new)
    elif rows > head:
        for start in range(head, rows, COMPACT_BATCH):
            put(table, start, min(rows, start + COMPACT_BATCH))
        new = None
    used, first = _first_rows(table, slot, claimed, new, rows)
    rank = torch.empty(table.values.shape[0], dtype=torch.int64, device=device)
    rank[used] = torch.arange(used.shape[0], device=device)
    return rank[slot], values[first], first


def _first_rows(table, slot: torch.Tensor, claimed: torch.Tensor, count: int | None,
                rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the slot of every key, each one's least row), by that row: the keys' codes in order.
    ``count``: the claimed rows (a row a key), when known; else learnt (synchronises).
    ``rows``: the column's rows, above every first row."""
    at = (claimed.nonzero() if count is None
          else torch.nonzero_static(claimed, size=count)).squeeze(1)
    used = slot[at]
    first = table.values[used]
    narrow = first.to(torch.int32) if rows < 2**31 else first  # sorts in half the passes
    order = torch.argsort(narrow)
    return used[order], first[order]


def _table_for(device: torch.device, capacity: int):
    """An empty growable int64 -> int64 table for ``capacity`` keys; which row of a repeated
    key wins an insert does not matter to its callers. Made as the join makes its tables,
    without the constructor's free-memory check (a driver query that costs more host time
    than filling the table), the allocator's own error standing for it."""
    from gpuhash.table.format import TableSpec
    from gpuhash.table.hash_map import HashMap

    spec = TableSpec(key_dtype=torch.int64, value_dtype=torch.int64, value_shape=(),
                     num_buckets=1).sized_for(capacity)
    return HashMap._empty(spec, device, growable=True, duplicates="any")


def _found_codes(table, values: torch.Tensor, slot: torch.Tensor, claimed: torch.Tensor,
                 count: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """group_compact's codes when the table holds the first batch's keys (``slot``,
    ``claimed``: its rows') and those are most of the keys (see group_compact)."""
    device = values.device
    first = _first_rows(table, slot, claimed, count, values.shape[0])[1]
    known = first.shape[0]
    numbered = _table_for(device, FIND_ROOM * known)
    numbered.insert(values[first], torch.arange(known, device=device))
    codes, found = numbered.find(values, default=-1)
    # asked first: the common answer (none missed) then costs a reduction, not a selection
    missed = None if bool(found.all()) else (~found).nonzero().squeeze(1)
    if missed is not None:  # only past the first batch
        claimed, slot = numbered.insert_or_apply(values[missed], missed, op="min",
                                                 return_index=True)
        used, later = _first_rows(numbered, slot, claimed, None, values.shape[0])
        numbered.values[used] = torch.arange(known, known + later.shape[0], device=device)
        codes[missed] = numbered.values[slot]
        first = torch.cat([first, later])
    return codes, values[first], first


def group_quantile(slot: torch.Tensor, groups: int, values: torch.Tensor, q: float
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(each group's ``q``-quantile, float64, linear interpolation; each group's count) of the
    values whose slot is below ``groups`` (the others left out); 0.0 for an empty group. The
    values are grouped by one sort of the slots, then a block a group selects the ranks it
    interpolates between (group_select.cuh). No host synchronisation."""
    index = _device_index(values.device)
    data = values.view(torch.uint8) if values.dtype == torch.bool else values
    kernel = _kernels(index, os.environ.get(ARCH_ENV))[("quantile", data.dtype)]
    if groups < 2**31 - 1:  # a narrower sort key sorts faster
        slot = slot.to(torch.int32)
    ordered, order = torch.sort(slot)
    ranked = data[order]
    edges = torch.searchsorted(ordered, torch.arange(groups + 1, device=slot.device,
                                                     dtype=ordered.dtype))
    start = edges[:-1].contiguous()
    count = edges[1:] - edges[:-1]
    out = torch.zeros(groups, dtype=torch.float64, device=values.device)
    if groups and values.shape[0]:
        blocks = min(groups, 64 * _multiprocessors(index))
        launch_grid(kernel, (blocks, 1), 0, ranked.data_ptr(), start.data_ptr(),
                    count.data_ptr(), groups, float(q), out.data_ptr(), device=index)
    return out, count


def group_comoments(codes: torch.Tensor, groups: int, first: torch.Tensor,
                    second: torch.Tensor, use: torch.Tensor | None, mean_first: torch.Tensor,
                    mean_second: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per group, over the rows that count (``use``; codes outside ``[0, groups)`` never): the
    sums of squared distances of ``first`` and ``second`` from their group's mean and of
    their products (float64), in one windowed pass (groupby.cu: gh_group_comoments)."""
    index = _device_index(codes.device)
    if first.dtype != second.dtype or first.dtype not in COMOMENT_TYPES:
        first, second = first.to(torch.float64), second.to(torch.float64)
    kernel = _kernels(index, os.environ.get(ARCH_ENV))[("comoments", codes.dtype, first.dtype)]
    a, b = first.contiguous(), second.contiguous()
    mask = None if use is None else use.to(torch.bool).view(torch.uint8)
    out = torch.zeros((3, groups), dtype=torch.float64, device=codes.device)
    n = codes.shape[0]
    window, windows, blocks, _ = _windows(n, groups, COMOMENT_BYTES, index)
    # held in names until the launch: a temporary's memory could go to the next temporary
    means = (mean_first.to(torch.float64).contiguous(),
             mean_second.to(torch.float64).contiguous())
    if n and groups:
        launch_grid(kernel, (blocks, windows), window * COMOMENT_BYTES, codes.data_ptr(), n,
                    a.data_ptr(), b.data_ptr(), 0 if mask is None else mask.data_ptr(),
                    groups, window, means[0].data_ptr(), means[1].data_ptr(), out.data_ptr(),
                    device=index)
    return out[0], out[1], out[2]


def string_hashes(offsets: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
    """The 64-bit hash of each string ``data[offsets[i]:offsets[i + 1]]`` (int64 offsets,
    uint8 bytes), as int64 bits (groupby/kernels/strings.cu). No host synchronisation."""
    index = _device_index(offsets.device)
    n = offsets.shape[0] - 1
    out = torch.empty(n, dtype=torch.int64, device=offsets.device)
    kernel = _string_kernels(index, os.environ.get(ARCH_ENV))["hashes"]
    blocks = min(-(-n // THREADS), BLOCKS_PER_SM * _multiprocessors(index))
    if n:
        launch_grid(kernel, (blocks, 1), 0, offsets.data_ptr(), data.data_ptr(), n,
                    out.data_ptr(), device=index)
    return out


def string_mismatches(offsets: torch.Tensor, data: torch.Tensor, codes: torch.Tensor,
                      first: torch.Tensor) -> int:
    """How many rows' strings differ from the string of their code's first row ``first[code]``
    (int64 codes; below zero: skipped). Synchronises (returns the count)."""
    index = _device_index(offsets.device)
    n = codes.shape[0]
    if not n:
        return 0
    found = torch.zeros(1, dtype=torch.int64, device=offsets.device)
    kernel = _string_kernels(index, os.environ.get(ARCH_ENV))["mismatches"]
    blocks = min(-(-n // THREADS), BLOCKS_PER_SM * _multiprocessors(index))
    launch_grid(kernel, (blocks, 1), 0, offsets.data_ptr(), data.data_ptr(),
                codes.data_ptr(), first.data_ptr(), n, found.data_ptr(), device=index)
    return int(found)
