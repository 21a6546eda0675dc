"""The out-of-core join: key arrays in host memory joined on a GPU, in pieces that fit its
memory budget (the planner's "out-of-core-streams" strategy, chosen by ``gh.join(...,
device="cuda")`` on host keys).

The build side is copied to the GPU and becomes the usual table; the probe side comes over in
chunks. A copier thread stages chunk i + 1 (into pinned memory unless it is pinned already) and
issues its copy on a side stream while the GPU joins chunk i, and every piece of the result
goes back through a ring of pinned buffers on another side stream into its place in the result
(new host memory, in huge pages: host_empty), so the link carries data both ways while
kernels run and the host writes the result as it comes. A chunk's output size must reach
Python before its pairs can be copied, so the streamed join synchronises with the GPU at least
once per chunk (semi / anti twice; a chunk with more pairs than rows probes again). On a fast
host the link is not what bounds it: writing a result of many GB into new host memory is.

When the build side's table passes half the budget, both sides are first split on the host
by a hash of their key values (equal keys, whatever their integer width, in the same part;
with ``nulls_equal=True`` the null keys in part 0, where they meet) and each part is joined
this way; a row's part is its only possible match, so the parts' results, mapped back to the
inputs' row numbers, are the join's.

Example:
    >>> import torch, gpuhash as gh
    >>> left, right = torch.tensor([1, 2, 2, 9]), torch.tensor([2, 1])
    >>> plan = gh.explain_join(left, right, device="cpu")
    >>> plan.strategy
    'hash-table'
"""

from __future__ import annotations

import contextlib
import mmap
import os
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from gpuhash._common.arrays import SIGNED_VIEW
from gpuhash.join import plan as _join_plan
from gpuhash.join.build import JoinBuild
from gpuhash.join.keys import canonical
from gpuhash.join.matches import _take
from gpuhash.join.plan import JoinPlan
from gpuhash.join.sides import Side
from gpuhash.join.strategies.parts import _MIX, _PART_SHIFT

# chunks queued ahead of the one being joined (the planner counts them and the copies in
# flight against the budget: join/plan.py: STAGED_CHUNKS)
_AHEAD = _join_plan.STAGED_AHEAD
# The result's staging ring and the threads that land it. Landing is bound by the host's page
# faults in new memory, which scale with threads: one worker a core up to 16, and half again as
# many stages, so that a worker rarely waits for a copy to arrive (fewer stages or workers
# landed slower; more stages gained nothing). At 24 stages the ring is 768 MB of pinned memory,
# which torch's pinned-memory cache keeps for the next join.
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
_WORKERS = min(16, _CORES or 1)
_STAGES, _STAGE_BYTES = max(2, _WORKERS + _WORKERS // 2), 32 << 20  # 2: a copy beside a landing
_HUGE_FROM = 64 << 20  # results from this size go to huge pages


def _pinned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in pinned host memory (copied unless it is pinned already), so a copy to the
    GPU can run asynchronously."""
    if tensor.is_pinned():
        return tensor
    staged = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    staged.copy_(tensor)
    return staged


def host_empty(rows: int, dtype: torch.dtype) -> torch.Tensor:
    """A new 1-D host tensor, in transparent huge pages where the OS offers them: a result of
    many GB is first written at the rate the host can fault its pages in, faster in 2 MB
    pages than in 4 KB ones. Small ones: torch.empty.

    Example:
        >>> import torch
        >>> host_empty(3, torch.int64).shape
        torch.Size([3])
    """
    nbytes = rows * torch.tensor([], dtype=dtype).element_size()
    if nbytes < _HUGE_FROM or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(rows, dtype=dtype)
    pages = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(OSError):  # a kernel without THP: ordinary pages
        pages.madvise(mmap.MADV_HUGEPAGE)
    return torch.frombuffer(pages, dtype=dtype, count=rows)  # the tensor keeps `pages` alive


class _ToHost:
    """Moves result pieces from the GPU into host memory without pinning the result (pinning
    new memory costs more than the copies). Each lane's pieces go one
    after another into an arena of new host memory (host_empty; room for ``rows`` rows, the
    probe side's, which bounds a lane unless build keys repeat; a piece past it starts a new
    arena), so the result needs no concatenation (_Matches._joined makes a view). A piece
    travels _STAGE_BYTES at a time through a ring of pinned staging buffers: a copy on a side
    stream after the kernels that made it, then a worker thread copies it into place while
    the GPU goes on (NumPy's copy: one core each, no nested thread pools). ``wait()`` before
    reading what it returned."""

    def __init__(self, device: torch.device, rows: int, *, stages: int = _STAGES,
                 workers: int = _WORKERS):
        self.device, self.rows = device, rows
        self.stream = torch.cuda.Stream(device)
        self.staging = [torch.empty(_STAGE_BYTES, dtype=torch.uint8, pin_memory=True)
                        for _ in range(stages)]
        self.landing: list[Future | None] = [None] * stages
        self.turn = 0
        self.arenas: dict[str, list] = {}  # lane -> [host tensor, rows used]
        self.workers = ThreadPoolExecutor(max_workers=workers,
                                          thread_name_prefix="gpuhash-to-host")

    def _place(self, lane: str, rows: int, dtype: torch.dtype) -> torch.Tensor:
        arena = self.arenas.get(lane)
        if arena is None or arena[0].dtype != dtype or arena[1] + rows > arena[0].shape[0]:
            arena = self.arenas[lane] = [host_empty(max(rows, self.rows), dtype), 0]
        start = arena[1]
        arena[1] += rows
        return arena[0][start:start + rows]

    def __call__(self, piece: torch.Tensor, lane: str) -> torch.Tensor:
        if piece.device.type != "cuda":
            return piece
        host = self._place(lane, piece.numel(), piece.dtype)
        flat = piece.reshape(-1)
        step = max(1, _STAGE_BYTES // piece.element_size())
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        for first in range(0, flat.numel(), step):
            part = flat[first:first + step]
            slot = self.turn % len(self.staging)
            self.turn += 1
            if self.landing[slot] is not None:
                self.landing[slot].result()  # the slot's last part is in place
            staged = self.staging[slot][:part.numel() * part.element_size()].view(part.dtype)
            with torch.cuda.stream(self.stream):
                staged.copy_(part, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.stream)
            self.landing[slot] = self.workers.submit(
                _land, copied, staged, host[first:first + part.numel()])
        piece.record_stream(self.stream)  # its memory is not reused before the copies end
        return host.view(piece.shape)

    def wait(self) -> None:
        """Every piece in place (a worker's error raised here)."""
        try:
            for landing in self.landing:
                if landing is not None:
                    landing.result()
        finally:
            self.workers.shutdown()

    def close(self) -> None:
        """Stop, after the copies under way, without raising (the join failed already)."""
        with contextlib.suppress(Exception):
            self.wait()


def _land(copied: torch.cuda.Event, staged: torch.Tensor, target: torch.Tensor) -> None:
    copied.synchronize()
    np.copyto(target.numpy(), staged.numpy())


def _chunks(probe: Side, chunk_rows: int, device: torch.device):
    """(first row, part on ``device``) of the host side ``probe``, in row order; a copier
    thread stages and copies chunks ahead of the caller (up to _AHEAD queued, one more on
    its way, and briefly one beyond, as the planner's chunk size allows for). Close it when
    done."""
    ready: queue.Queue = queue.Queue(maxsize=_AHEAD)
    stream = torch.cuda.Stream(device)
    stop = threading.Event()

    def copier() -> None:
        try:
            with torch.cuda.device(device), torch.cuda.stream(stream):
                for start in range(0, probe.rows, chunk_rows):
                    if stop.is_set():
                        return
                    part = probe.slice(start, min(start + chunk_rows, probe.rows))
                    moved = part._mapped(lambda t: _pinned(t).to(device, non_blocking=True))
                    copied = torch.cuda.Event()
                    copied.record(stream)
                    ready.put((start, moved, copied))
        except BaseException as error:  # handed to the consumer, raised there
            ready.put(error)

    thread = threading.Thread(target=copier, name="gpuhash-join-copier", daemon=True)
    thread.start()
    current = torch.cuda.current_stream(device)
    try:
        for _ in range(0, probe.rows, chunk_rows):
            item = ready.get()
            if isinstance(item, BaseException):
                raise item
            start, part, copied = item
            current.wait_event(copied)
            for tensor in part.columns + ([] if part.valid is None else [part.valid]):
                tensor.record_stream(current)
            yield start, part
    finally:
        stop.set()
        while thread.is_alive():  # let a copier blocked on a full queue finish
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.01)
        thread.join()


def run_streamed(left: Side, right: Side, plan: JoinPlan, nulls_equal: bool):
    """One join of host keys on the GPU ``plan.device`` (the strategy's entry)."""
    if plan.parts > 1:
        return _run_parts(left, right, plan, nulls_equal)
    device = torch.device(plan.device)
    host = left.device
    build, probe = (left, right) if plan.build_side == "left" else (right, left)
    table = JoinBuild._of(build.to(device))
    if device.type != "cuda":  # the same steps with nothing to copy (tests on a CPU)
        matches = table._match(probe, plan.how, nulls_equal, plan.chunk_rows,
                               probe_is_left=plan.build_side != "left",
                               store=lambda piece, lane: piece)
        return matches.assemble(host)
    to_host = _ToHost(device, max(probe.rows, 1))
    chunks = _chunks(probe, plan.chunk_rows or max(probe.rows, 1), device)
    try:
        with contextlib.closing(chunks):  # its copier thread stops, whatever happens here
            matches = table._match(probe, plan.how, nulls_equal, plan.chunk_rows,
                                   probe_is_left=plan.build_side != "left", chunks=chunks,
                                   store=to_host)
    except BaseException:
        to_host.close()
        raise
    to_host.wait()
    matches.allocate = host_empty
    return matches.assemble(host)


def _part_of(side: Side, parts: int, nulls_together: bool) -> torch.Tensor:
    """Each row's part: a hash of its key values as int64 (so int32 and int64 keys of equal
    value agree); with ``nulls_together`` (nulls_equal) the null rows in part 0, where they
    meet, else spread like the others (they match nothing)."""
    mixed = torch.zeros(side.rows, dtype=torch.int64)
    for column in side.columns:
        mixed = (mixed ^ canonical(column)) * _MIX
    part = (mixed >> _PART_SHIFT) & (parts - 1)
    if nulls_together and side.valid is not None:
        part[~side.valid] = 0
    return part


def _run_parts(left: Side, right: Side, plan: JoinPlan, nulls_equal: bool):
    """Both host sides split by key hash into ``plan.parts`` parts, each joined streamed."""
    part_l = _part_of(left, plan.parts, nulls_equal)
    part_r = _part_of(right, plan.parts, nulls_equal)
    pieces_l, pieces_r = [], []
    for part in range(plan.parts):
        rows_l = (part_l == part).nonzero().squeeze(1)
        rows_r = (part_r == part).nonzero().squeeze(1)
        sub = JoinPlan(plan.strategy, plan.how, plan.build_side, plan.device,
                       rows_l.shape[0], rows_r.shape[0], plan.memory_budget, plan.chunk_rows)
        found = run_streamed(left._mapped(lambda t, r=rows_l: _select(t, r), rows_l.shape[0]),
                              right._mapped(lambda t, r=rows_r: _select(t, r), rows_r.shape[0]),
                              sub, nulls_equal)
        if isinstance(found, tuple):
            pieces_l.append(_back(rows_l, found[0]))
            pieces_r.append(_back(rows_r, found[1]))
        else:
            pieces_l.append(_take(rows_l, found))
    if not pieces_r:  # semi / anti: the left rows, in no particular order (as join's)
        return torch.cat(pieces_l)
    return torch.cat(pieces_l), torch.cat(pieces_r)


def _select(column: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``column[rows]``; wide unsigned columns through their signed view (torch has no
    index_select for them)."""
    signed = SIGNED_VIEW.get(column.dtype)
    if signed is None:
        return _take(column, rows)
    return _take(column.view(signed), rows).view(column.dtype)


def _back(rows: torch.Tensor, found: torch.Tensor) -> torch.Tensor:
    """A part's row numbers as the side's (-1, a missing side, stays)."""
    padded = torch.cat([rows, rows.new_full((1,), -1)])  # the part may have no rows at all
    return _take(padded, torch.where(found >= 0, found, rows.shape[0]))
