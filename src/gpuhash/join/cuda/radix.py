"""The CUDA engine of the radix-partitioned join: ``partition`` and ``join_partitions`` as
kernels of join/kernels/radix_join.cu, the glue between them in torch on the current stream of
the keys' device. join/cpu/radix.py has the same two operations over the same bytes.

A side is partitioned by two passes, each a histogram launch and a scatter launch over tiles
(join/radix_format.py: TILE rows each). The first pass sorts the rows by the partition number's
high bits into runs; the second pass's tiles are laid out on the device so that none spans
two runs, and sort each run by the low bits. Neither pass, nor the layout between them, reads
anything back to the host: a join synchronises once, in ``join_partitions``.
"""

from __future__ import annotations

import functools
import os

import torch

from gpuhash._common.constants import RADIX_FLAGS
from gpuhash._common.cuda.compile import load_module
from gpuhash._common.cuda.launch import THREADS, launch, launch_with_shared
from gpuhash.join import radix_format as fmt
from gpuhash.join.cuda.engine import read_counters
from gpuhash.table.cuda.engine import ARCH_ENV, _ptr

JOIN_FLAGS = RADIX_FLAGS
WIDTHS = ((4, 4), (8, 4), (8, 8))  # (input column bytes, code bytes) a join can ask for


def kernel_names() -> dict[str, str]:
    """Operation -> name expression of every radix kernel."""
    names = {}
    for in_bytes, code_bytes in WIDTHS:
        names[f"hist_{in_bytes}_{code_bytes}"] = f"gh_radix_hist<{in_bytes}, {code_bytes}>"
        names[f"scatter_{in_bytes}_{code_bytes}"] = f"gh_radix_scatter<{in_bytes}, {code_bytes}>"
    for code_bytes in (4, 8):
        names[f"join_{code_bytes}"] = f"gh_radix_join<{code_bytes}>"
    return names


@functools.cache
def _kernels(device_index: int, arch: str | None) -> dict:
    names = kernel_names()
    module = load_module("join/kernels/radix_join.cu", tuple(names.values()), device_index, arch)
    return {op: module.get_kernel(expression) for op, expression in names.items()}


def _kernel(op: str, device: int):
    return _kernels(device, os.environ.get(ARCH_ENV))[op]


def _exclusive(counts: torch.Tensor) -> torch.Tensor:
    return counts.cumsum(0) - counts


def _histogram(keys: torch.Tensor, valid: torch.Tensor | None, shape: int, low: int,
               high: int, tiles: torch.Tensor | None, *, code_bytes: int, bits: int,
               shift: int, bin_bits: int, blocks: int) -> torch.Tensor:
    """The histogram launch: each tile's usable rows a bin, int32, bin-major (bin * blocks +
    tile). (This and ``_scatter`` are the pass's only launches: a CPU test emulates them to
    run the glue between them.)"""
    device = keys.device.index
    raw = torch.empty((1 << bin_bits) * blocks, dtype=torch.int32, device=keys.device)
    launch(_kernel(f"hist_{keys.element_size()}_{code_bytes}", device), blocks * THREADS,
           keys.data_ptr(), _ptr(valid), shape, low, high, _ptr(tiles), keys.shape[0], bits,
           shift, bin_bits, raw.data_ptr(), blocks, device=device)
    return raw


def _scatter(keys: torch.Tensor, valid: torch.Tensor | None, shape: int, low: int, high: int,
             rows_in: torch.Tensor | None, tiles: torch.Tensor | None, raw: torch.Tensor,
             offsets: torch.Tensor, *, code_bytes: int, bits: int, shift: int, bin_bits: int,
             blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The scatter launch: every usable row's (code, row) at its tile's run of its bin
    (``offsets``, bin-major as ``raw``, int64); ``raw``: the histogram's counts."""
    device = keys.device.index
    n = keys.shape[0]
    codes = torch.empty(n, dtype=torch.int32 if code_bytes == 4 else torch.int64,
                        device=keys.device)
    rows = torch.empty(n, dtype=torch.int32, device=keys.device)
    launch_with_shared(_kernel(f"scatter_{keys.element_size()}_{code_bytes}", device),
                       blocks * THREADS, fmt.STAGED_BYTES[code_bytes], keys.data_ptr(),
                       _ptr(valid), shape, low, high, _ptr(rows_in), _ptr(tiles), n, bits,
                       shift, bin_bits, raw.data_ptr(), offsets.data_ptr(), blocks,
                       codes.data_ptr(), rows.data_ptr(), device=device)
    return codes, rows


def _pass(keys: torch.Tensor, valid: torch.Tensor | None, shape: int, low: int, high: int,
          rows_in: torch.Tensor | None, tiles: torch.Tensor | None, *, code_bytes: int,
          bits: int, shift: int, bin_bits: int, offsets_of) -> tuple:
    """One partition pass: the histogram, then ``offsets_of(counts)`` (counts as a (bins,
    tiles) int64 tensor -> where each tile's run of each bin starts, the same shape), then the
    scatter. Returns (codes, rows, counts)."""
    blocks = -(-keys.shape[0] // fmt.TILE[code_bytes]) if tiles is None else tiles.shape[0]
    options = dict(code_bytes=code_bytes, bits=bits, shift=shift, bin_bits=bin_bits,
                   blocks=blocks)
    raw = _histogram(keys, valid, shape, low, high, tiles, **options)
    counts = raw.view(1 << bin_bits, blocks).to(torch.int64)
    offsets = offsets_of(counts).contiguous()
    codes, rows = _scatter(keys, valid, shape, low, high, rows_in, tiles, raw, offsets,
                           **options)
    return codes, rows, counts


def partition(keys: torch.Tensor, valid: torch.Tensor | None, shape: int, low: int, high: int,
              *, code_bytes: int, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A side's usable rows split into ``2**bits`` partitions: (codes, rows, bounds), the
    codes (int32 or int64 by ``code_bytes``) and int32 row numbers of partition p at
    ``bounds[p]:bounds[p + 1]``, in no order within it; rows past ``bounds[-1]`` are unused.
    A row is usable where its key has a code (join/kernels/join_code.cuh: gh_join_code's rule of
    ``shape``, ``low``, ``high``, ``valid``). Nothing is read back to the host."""
    high_bits, low_bits = fmt.pass_bits(bits)
    n = keys.shape[0]
    tile = fmt.TILE[code_bytes]
    first_tiles = -(-n // tile)
    codes1, rows1, counts1 = _pass(
        keys, valid, shape, low, high, None, None, code_bytes=code_bytes, bits=bits,
        shift=low_bits, bin_bits=high_bits,
        offsets_of=lambda c: _exclusive(c.reshape(-1)).view(c.shape))  # bin-major order
    # the second pass's tiles: each run of the first pass cut into tiles, at most one partial
    # tile a run, so at most first_tiles + 2**high_bits of them; those past the last hold no
    # rows, and the host never learns how many there are
    run_rows = counts1.sum(1)
    run_start = _exclusive(run_rows)
    run_tiles = (run_rows + tile - 1) // tile
    first_tile = _exclusive(run_tiles)
    tile_ids = torch.arange(first_tiles + (1 << high_bits), device=keys.device)
    run = torch.searchsorted(first_tile + run_tiles, tile_ids, right=True).clamp_(
        max=(1 << high_bits) - 1)
    first = run_start[run] + (tile_ids - first_tile[run]) * tile
    rows = (run_start[run] + run_rows[run] - first).clamp_(min=0, max=tile)
    tiles = torch.stack([first, rows], 1).contiguous()
    sub_start = None

    def second_offsets(counts: torch.Tensor) -> torch.Tensor:
        nonlocal sub_start
        totals = torch.zeros((1 << high_bits, 1 << low_bits), dtype=torch.int64,
                             device=keys.device)
        totals.index_add_(0, run, counts.t())  # each run's rows a bin
        sub_start = run_start[:, None] + totals.cumsum(1) - totals  # partition starts
        before = counts.cumsum(1) - counts  # a bin's rows in earlier tiles, every run
        run_first = first_tile[run].clamp(max=counts.shape[1] - 1)
        return sub_start[run].t() + before - before[:, run_first]

    codes, rows, _ = _pass(codes1, None, 0, 0, 0, rows1, tiles, code_bytes=code_bytes,
                           bits=bits, shift=0, bin_bits=low_bits, offsets_of=second_offsets)
    used = (run_start[-1] + run_rows[-1]).view(1)
    return codes, rows, torch.cat([sub_start.reshape(-1), used])


def join_partitions(build: tuple, probe: tuple, *, bits: int,
                    build_hit: torch.Tensor | None = None,
                    probe_hit: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, int]]:
    """Every (probe row, build row) pair of equal codes, partition by partition, in no order;
    ``build`` and ``probe``: :func:`partition`'s results with the same ``bits``. Marks
    ``build_hit`` (a byte a build row) at matched build rows; with ``probe_hit`` (a bool a
    probe row, zeroed) only marks the probe rows that match and makes no pairs. Partitions of
    more than LIMIT build rows join nothing: their numbers come back (ascending) for the
    caller to join otherwise. Returns (probe rows, build rows, overflowed partitions, (usable
    build rows, usable probe rows)). Synchronises once, or twice where the pairs pass the
    probe side's rows (repeated build keys): then it runs again with room for all."""
    build_codes, build_rows, build_bounds = build
    probe_codes, probe_rows, probe_bounds = probe
    device = build_codes.device.index
    code_bytes = build_codes.element_size()
    partitions = 1 << bits
    probe_count = probe_bounds[1:] - probe_bounds[:-1]
    items = ((probe_count + fmt.PROBE_CHUNK - 1) // fmt.PROBE_CHUNK).clamp_(min=1)
    item_first = torch.cat([items.new_zeros(1), items.cumsum(0)])
    most_items = partitions + probe_codes.shape[0] // fmt.PROBE_CHUNK + 1
    flags = ((JOIN_FLAGS["hits_only"] if probe_hit is not None else 0)
             | (JOIN_FLAGS["mark_build"] if build_hit is not None else 0))
    capacity = 0 if probe_hit is not None else probe_codes.shape[0]
    overflow = torch.empty(partitions, dtype=torch.int64, device=build_codes.device)
    while True:
        counters = torch.zeros(4, dtype=torch.int64, device=build_codes.device)
        out = torch.empty(2 * capacity, dtype=torch.int64, device=build_codes.device)
        launch(_kernel(f"join_{code_bytes}", device), most_items * THREADS,
               build_codes.data_ptr(), build_rows.data_ptr(), build_bounds.data_ptr(),
               probe_codes.data_ptr(), probe_rows.data_ptr(), probe_bounds.data_ptr(),
               item_first.data_ptr(), partitions, flags, out.data_ptr(),
               out.data_ptr() + 8 * capacity, capacity, counters.data_ptr(), _ptr(build_hit),
               _ptr(probe_hit), overflow.data_ptr(), device=device)
        counters[2:3].copy_(build_bounds[-1:])
        counters[3:4].copy_(probe_bounds[-1:])
        total, spilled, build_used, probe_used = read_counters(counters, device)
        if total <= capacity:
            break
        capacity = total
    overflowed = overflow[:spilled].sort().values
    return out[:total], out[capacity:capacity + total], overflowed, (build_used, probe_used)
