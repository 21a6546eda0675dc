"""The collective steps of a sharded call: every rank's rows to their owners and the owners'
answers back, each by one ``torch.distributed.all_to_all_single``, and the agreement that
makes a call fail on every rank or on none.

A call opens with a header exchange: a small all-to-all in which every rank tells every other
how many rows it sends, whether its own batch passed the checks, a code of the options that
must be the same everywhere (``op=``, ``update_scores=``), and a few bytes every owner needs
from every caller (a scalar ``init`` row). Only then do the rows travel, so a bad batch on one
rank makes every rank raise before any table is touched, and no rank waits on a collective
another rank left. The header's counts are the one host synchronisation of a call's routing
(the row all-to-alls take their sizes from the host); the agreement after the owners applied
the rows reads one flag a rank. A large call also agrees, before its rows travel, that every
rank made room for them, so a rank out of memory raises everywhere instead of leaving the
others in the all-to-all (``AGREED_ROWS``).

Each column (keys, values, scores, answers) travels by its own all-to-all as a byte matrix (a
view: any dtype, unsigned ones included, which gloo refuses), so the owner receives each column
contiguous, ready for its table, with no copy into or out of a matrix of every column; a
column costs one collective, and its bytes cross the link once. A small call (under
``PACK_ROWS`` rows over every rank, which the header tells every rank) sends its columns
packed side by side in one matrix instead (:func:`pack`, :func:`unpack`): one collective, and
copies of few rows.

Example:
    >>> import torch
    >>> from gpuhash.distributed.exchange import pack, unpack
    >>> keys, values = torch.tensor([1, 2]), torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> rows = pack([keys, values], 2)
    >>> tuple(rows.shape), [t.tolist() for t in unpack(rows, [keys, values])]
    ((2, 16), [[1, 2], [[1.0, 2.0], [3.0, 4.0]]])
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

# rows sent, this rank's batch failed its checks, the options' code, this rank's batch rows
_HEADER_WORDS = 4
# Below this many rows in a call over every rank, its columns travel packed in one matrix:
# then a collective's latency costs more than copying the rows in and out of the matrix
PACK_ROWS = 1 << 16
# From this many rows in a call over every rank, the ranks agree (an all-reduce of a flag)
# that each made room for the rows before any travel: a rank out of memory then raises on
# every rank, where it would leave the others waiting in the all-to-all. A smaller call's
# buffers are small beside the tables'; it skips that collective's latency.
AGREED_ROWS = PACK_ROWS


class PeerError(RuntimeError):
    """Another rank's part of a collective call failed; this rank raises too, its table
    unchanged by the call (or, for a failure while the owners applied the rows, as the message
    says), so that every rank leaves the call together."""


def _row_bytes(tensor: torch.Tensor) -> int:
    return tensor.element_size() * math.prod(tensor.shape[1:])


def pack(columns: list[torch.Tensor], rows: int) -> torch.Tensor:
    """Columns of ``rows`` rows each, side by side as one ``(rows, bytes)`` uint8 matrix."""
    parts = [c.contiguous().view(torch.uint8).reshape(rows, _row_bytes(c)) for c in columns]
    return parts[0] if len(parts) == 1 else torch.cat(parts, 1)


def unpack(matrix: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """The columns of a :func:`pack`ed matrix, each of its ``like``'s dtype and row shape."""
    rows, start, out = matrix.shape[0], 0, []
    for template in like:
        width = _row_bytes(template)
        part = matrix[:, start:start + width].contiguous().reshape(-1)
        if part.storage_offset() % template.element_size():  # a slice of a one-row matrix
            part = part.clone()
        out.append(part.view(template.dtype).reshape(rows, *template.shape[1:]))
        start += width
    return out


def as_bytes(column: torch.Tensor) -> torch.Tensor:
    """A contiguous column as a ``(rows, bytes)`` uint8 matrix: a view, no copy."""
    return column.contiguous().view(torch.uint8).reshape(column.shape[0], _row_bytes(column))


def from_bytes(matrix: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A fresh ``(rows, bytes)`` matrix as a column of ``like``'s dtype and row shape: a view
    (its own allocation is aligned for any dtype)."""
    return matrix.view(like.dtype).reshape(matrix.shape[0], *like.shape[1:])


class Plan(NamedTuple):
    """A call's row counts: ``send[r]`` rows go to rank r, ``receive[r]`` come from it,
    ``extras[r]`` (uint8) are the bytes rank r put in its header for this rank, and ``rows``
    the rows of the call over every rank (every rank's plan says the same)."""

    send: list[int]
    receive: list[int]
    extras: torch.Tensor
    rows: int = 0


class Exchange:
    """The all-to-all steps of one process group, on the tables' device."""

    def __init__(self, group: Any, device: torch.device):
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.device = device

    def open(self, counts: torch.Tensor | None, error: BaseException | None, *,
             options: int = 0, extra: torch.Tensor | None = None, extra_bytes: int = 0,
             what: str = "the call") -> Plan:
        """The header exchange: each rank's row counts (``counts``, one per rank; None with an
        ``error``), its failure flag and ``options`` code, and ``extra`` (uint8, the same for
        every rank it goes to, at most ``extra_bytes``). ``extra_bytes`` is the call's, the
        same on every rank whatever its input (a rank that failed, or sends no extra, sends
        zeros there), so every rank's header has one size. Raises on every rank if any rank
        brought an error or options unlike the others'. Synchronises with the device (the
        all-to-all of the rows takes its sizes from the host)."""
        extra_words = -(-extra_bytes // 8)
        if extra is not None and extra.numel() > extra_bytes:
            raise ValueError(f"extra of {extra.numel()} bytes past extra_bytes={extra_bytes}")
        # what this rank sends and what it receives, side by side: read back with one sync
        both = torch.zeros(2, self.world, _HEADER_WORDS + extra_words, dtype=torch.int64,
                           device=self.device)
        header, received = both[0], both[1]
        if error is None:
            header[:, 0] = counts
            header[:, 3] = counts.sum()
            if extra is not None and extra.numel():
                padded = torch.zeros(extra_words * 8, dtype=torch.uint8, device=self.device)
                padded[:extra.numel()] = extra.reshape(-1)
                header[:, _HEADER_WORDS:] = padded.view(torch.int64)
        else:
            header[:, 1] = 1
        header[:, 2] = options
        dist.all_to_all_single(received, header, group=self.group)
        mine, theirs = both[:, :, :_HEADER_WORDS].tolist()
        failed = [rank for rank, row in enumerate(theirs) if row[1]]
        if failed:
            self._fail(error, failed, what)
        if any(row[2] != options for row in theirs):
            codes = sorted({row[2] for row in theirs})
            raise ValueError(f"the ranks passed different options to {what} (codes {codes}): "
                             f"every rank must pass the same ones")
        extras = received[:, _HEADER_WORDS:].contiguous().view(torch.uint8)
        return Plan([row[0] for row in mine], [row[0] for row in theirs], extras,
                    sum(row[3] for row in theirs))

    def agree(self, error: BaseException | None, what: str) -> None:
        """Raise on every rank if ``error`` is set on any (an all-reduce of a flag)."""
        flags = torch.zeros(self.world, dtype=torch.int32, device=self.device)
        if error is not None:
            flags[self.rank] = 1
        dist.all_reduce(flags, group=self.group)
        failed = [rank for rank, flag in enumerate(flags.tolist()) if flag]  # one sync
        if failed:
            self._fail(error, failed, what)

    def _fail(self, error: BaseException | None, failed: list[int], what: str):
        # the failure path only: every rank learns every failing rank's message
        messages: list[Any] = [None] * self.world
        mine = None if error is None else f"{type(error).__name__}: {error}"
        dist.all_gather_object(messages, mine, group=self.group)
        if error is not None:
            raise error
        told = "; ".join(f"rank {rank}: {messages[rank]}" for rank in failed)
        raise PeerError(f"{what} failed on another rank, so it raises here too ({told})")

    def forward(self, plan: Plan, rows: torch.Tensor, *, error: BaseException | None = None,
                what: str = "the call") -> torch.Tensor:
        """Rows grouped by owner (``plan.send`` of them for each rank, in rank order) to their
        owners; returns the rows this rank owns, grouped by the rank that sent them.
        ``error``: this rank's failure to make its rows, raised on every rank before any row
        travels (always agreed: the tables' exchanges this serves are few and large)."""
        return self._columns(plan, [rows], plan.receive, plan.send, error, what, True)[0]

    def send(self, plan: Plan, columns: list[torch.Tensor], *,
             error: BaseException | None = None, what: str = "the call") -> list[torch.Tensor]:
        """Columns of rows grouped by owner (``plan.send`` rows for each rank, in rank order)
        to their owners; returns, for each column, the rows this rank owns grouped by the rank
        that sent them (fresh, contiguous tensors). ``error``: this rank failed to make the
        columns (out of memory): raised on every rank before any row travels, in a call of
        ``AGREED_ROWS`` rows or more."""
        return self._columns(plan, columns, plan.receive, plan.send, error, what,
                             plan.rows >= AGREED_ROWS)

    def answer(self, plan: Plan, columns: list[torch.Tensor], *,
               what: str = "the call") -> list[torch.Tensor]:
        """The owners' answer columns, in the order :meth:`send` delivered the rows, back to
        the ranks that sent them; returns them in the order this rank sent its rows."""
        return self._columns(plan, columns, plan.send, plan.receive, None, what,
                             plan.rows >= AGREED_ROWS)

    def _columns(self, plan: Plan, columns: list[torch.Tensor], out_splits: list[int],
                 in_splits: list[int], error: BaseException | None, what: str,
                 agreed: bool) -> list[torch.Tensor]:
        if self.world == 1:  # nothing travels
            if error is not None:
                raise error
            return columns
        # plan.rows is every rank's: every rank takes the same branch, the same collectives
        packed = len(columns) > 1 and plan.rows < PACK_ROWS
        sources: list[torch.Tensor] = []
        targets: list[torch.Tensor] = []
        if error is None:
            try:  # every buffer the collectives fill, before any of them starts
                sources = ([pack(columns, columns[0].shape[0])] if packed else
                           [as_bytes(column) for column in columns])
                targets = [s.new_empty((sum(out_splits), s.shape[1])) for s in sources]
            except Exception as caught:  # out of memory, most likely
                error = caught
        if agreed:  # every rank decides alike (from the plan every rank holds)
            self.agree(error, f"{what} (making room for the rows on their way)")
        elif error is not None:
            raise error
        for source, target in zip(sources, targets):
            dist.all_to_all_single(target, source, out_splits, in_splits, group=self.group)
        if packed:
            return unpack(targets[0], columns)
        return [from_bytes(target, column) for target, column in zip(targets, columns)]
