"""The out-of-core join: key arrays in host memory joined on a GPU, in pieces that fit its
memory budget (the planner's "out-of-core-streams" strategy, chosen by ``gh.join(...,
device="cuda")`` on host keys).

The build side is copied to the GPU and becomes the usual table; the probe side comes over in
chunks. A copier thread stages chunk i + 1 (into pinned memory unless it is pinned already) and
issues its copy on a side stream while the GPU joins chunk i, and every piece of the result
goes back to pinned host memory on another side stream, so the link carries data both ways
while kernels run; the pieces are joined at the end into one tensor in huge pages
(host_empty). A chunk's output size must reach Python before its pairs can be copied, so the
streamed join synchronises once per chunk. On the H100 host the link is not what bounds it:
writing a result of many GB into new host memory is (bench/RESULTS.md).

When the build side's table passes half the budget, both sides are first split on the host
by a hash of their key values (equal keys, whatever their integer width, in the same part;
null keys in part 0 so that ``nulls_equal=True`` still pairs them) and each part is joined
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
import queue
import threading

import torch

from . import _join_plan
from ._join_keys import canonical
from ._join_plan import JoinPlan
from .join import _MIX, _PART_SHIFT, JoinBuild, _Side, _take

_SIGNED_VIEW = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}
_AHEAD = 2  # chunks staged ahead of the one being joined (bounds the pinned memory in flight)
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
    pages than in 4 KB ones (bench/RESULTS.md). Small ones: torch.empty.

    Example:
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
    """Copies result pieces from the GPU to pinned host memory on a side stream after the
    kernels that made them, so the copies overlap the next chunk's work; ``wait()`` before
    reading what it returned. (A ring of pinned staging buffers emptied into unpinned memory
    by worker threads avoided pinning the result, but ran 1.4-1.7x slower: bench/RESULTS.md.)
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def __call__(self, piece: torch.Tensor) -> torch.Tensor:
        if piece.device.type != "cuda":
            return piece
        host = torch.empty(piece.shape, dtype=piece.dtype, pin_memory=True)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            host.copy_(piece, non_blocking=True)
        piece.record_stream(self.stream)  # its memory is not reused before the copy ends
        return host

    def wait(self) -> None:
        self.stream.synchronize()


def _chunks(probe: _Side, chunk_rows: int, device: torch.device):
    """(first row, part on ``device``) of the host side ``probe``, in row order; a copier
    thread stages and copies up to _AHEAD chunks ahead of the caller."""
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


def _run_streamed(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    """One join of host keys on the GPU ``plan.device`` (the strategy's entry)."""
    if plan.parts > 1:
        return _run_parts(left, right, plan, nulls_equal)
    device = torch.device(plan.device)
    host = left.device
    build, probe = (left, right) if plan.build_side == "left" else (right, left)
    table = JoinBuild._of(build.to(device))
    if device.type != "cuda":  # the same steps with nothing to copy (tests on a CPU)
        matches = table._match(probe, plan.how, nulls_equal, plan.chunk_rows,
                               probe_is_left=plan.build_side != "left")
        return matches.assemble(host)
    to_host = _ToHost(device)
    try:
        matches = table._match(probe, plan.how, nulls_equal, plan.chunk_rows,
                               probe_is_left=plan.build_side != "left",
                               chunks=_chunks(probe, plan.chunk_rows or max(probe.rows, 1),
                                              device), store=to_host)
    finally:
        to_host.wait()
    matches.allocate = host_empty
    return matches.assemble(host)


def _part_of(side: _Side, parts: int) -> torch.Tensor:
    """Each row's part: a hash of its key values as int64 (so int32 and int64 keys of equal
    value agree), nulls in part 0."""
    mixed = torch.zeros(side.rows, dtype=torch.int64)
    for column in side.columns:
        mixed = (mixed ^ canonical(column)) * _MIX
    part = (mixed >> _PART_SHIFT) & (parts - 1)
    if side.valid is not None:
        part[~side.valid] = 0
    return part


def _run_parts(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    """Both host sides split by key hash into ``plan.parts`` parts, each joined streamed."""
    part_l, part_r = _part_of(left, plan.parts), _part_of(right, plan.parts)
    pieces_l, pieces_r = [], []
    for part in range(plan.parts):
        rows_l = (part_l == part).nonzero().squeeze(1)
        rows_r = (part_r == part).nonzero().squeeze(1)
        sub = JoinPlan(plan.strategy, plan.how, plan.build_side, plan.device,
                       rows_l.shape[0], rows_r.shape[0], plan.memory_budget, plan.chunk_rows)
        found = _run_streamed(left._mapped(lambda t, r=rows_l: _select(t, r), rows_l.shape[0]),
                              right._mapped(lambda t, r=rows_r: _select(t, r), rows_r.shape[0]),
                              sub, nulls_equal)
        if isinstance(found, tuple):
            pieces_l.append(_back(rows_l, found[0]))
            pieces_r.append(_back(rows_r, found[1]))
        else:
            pieces_l.append(_take(rows_l, found))
    if not pieces_r:  # semi / anti: ascending left rows, as join promises
        return torch.cat(pieces_l).sort().values
    return torch.cat(pieces_l), torch.cat(pieces_r)


def _select(column: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``column[rows]``; wide unsigned columns through their signed view (torch has no
    index_select for them)."""
    signed = _SIGNED_VIEW.get(column.dtype)
    if signed is None:
        return _take(column, rows)
    return _take(column.view(signed), rows).view(column.dtype)


def _back(rows: torch.Tensor, found: torch.Tensor) -> torch.Tensor:
    """A part's row numbers as the side's (-1, a missing side, stays)."""
    padded = torch.cat([rows, rows.new_full((1,), -1)])  # the part may have no rows at all
    return _take(padded, torch.where(found >= 0, found, rows.shape[0]))


_join_plan.register("out-of-core-streams",
                    _join_plan.STRATEGIES["out-of-core-streams"].description, _run_streamed)
