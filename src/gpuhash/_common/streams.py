"""Stream ordering and thread safety, the one way every structure orders its work.

``stream_context`` makes an operation's ``stream=`` argument torch's current stream for the
structure's device. ``StreamOrder`` orders a structure's operations across the streams they
run on: an operation waits for the last write made on another stream, and a write also for
the reads made on other streams since; a device-side wait, no host synchronisation. On one
stream nothing is recorded or waited for: stream order alone does it. Each operation also
holds the structure's lock (re-entrant: an operation may call another) for its host-side
work, so operations from several Python threads are atomic with respect to one another; the
GPU work they queue stays asynchronous.

What is kept between calls never outlives its stream: a torch stream (torch never destroys
its streams) is kept as its handle, and a foreign stream given as ``stream=`` (anything with
``__cuda_stream__``, or a ``torch.cuda.ExternalStream``), which its owner may destroy at any
time, as an event recorded on it at the end of the operation, so it is never touched again.
(A foreign stream made torch's current stream by the caller, rather than passed, counts as
torch's: keep it alive while the structure may wait for it.)

Example:
    >>> import torch
    >>> from gpuhash._common.streams import StreamOrder
    >>> order = StreamOrder(torch.device("cpu"))  # off CUDA: work simply runs
    >>> with order.ordered(None, writes=True):
    ...     done = True
    >>> done
    True
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import Any

import torch

_NOTHING = contextlib.nullcontext()  # reusable: no stream given, or not a CUDA device


def stream_context(stream: Any, device: torch.device):
    """A context making ``stream`` (a torch.cuda.Stream, or anything with
    ``__cuda_stream__``) torch's current stream for ``device``; none for ``stream=None`` or a
    CPU device."""
    if stream is None or device.type != "cuda":
        return _NOTHING
    if isinstance(stream, torch.cuda.Stream):
        if stream.device != device:
            raise ValueError(f"stream is on {stream.device} but the structure is on {device}; "
                             f"pass a stream of {device}")
        return torch.cuda.stream(stream)
    if hasattr(stream, "__cuda_stream__"):
        _, handle = stream.__cuda_stream__()
        return torch.cuda.stream(torch.cuda.ExternalStream(handle, device=device))
    raise TypeError(f"stream must be a torch.cuda.Stream or have __cuda_stream__, "
                    f"got {type(stream).__name__}")


def record_event(device: torch.device) -> torch.cuda.Event | None:
    """A CUDA event recorded after the work queued so far on ``device``'s current stream
    (None off CUDA): a stream that waits on it sees that work done."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


class _Mark:
    """Where an operation ran, as a later operation on another stream must wait for it: a
    torch stream's handle (torch never destroys its streams), or an event recorded on a
    foreign stream after the operation (its owner may destroy that stream)."""

    __slots__ = ("handle", "event")

    def __init__(self, handle: int, event: torch.cuda.Event | None = None):
        self.handle, self.event = handle, event

    def needed_by(self, handle: int) -> bool:
        """Whether an operation on the stream ``handle`` must wait for the marked work: on
        another stream, yes; on the same torch stream, stream order does it. An event is
        always waited on: a destroyed foreign stream's handle may name a new stream."""
        return self.event is not None or self.handle != handle

    def wait_on(self, device: torch.device) -> None:
        """Make ``device``'s current stream wait for the marked work."""
        current = torch.cuda.current_stream(device)
        if self.event is not None:
            current.wait_event(self.event)
        else:
            current.wait_stream(torch.cuda.ExternalStream(self.handle, device=device))


def _is_foreign(stream: Any) -> bool:
    """Whether an operation's ``stream=`` is one torch does not own."""
    return stream is not None and (isinstance(stream, torch.cuda.ExternalStream)
                                   or not isinstance(stream, torch.cuda.Stream))


class _Ordered:
    """The context of one operation under a StreamOrder (see StreamOrder.ordered)."""

    __slots__ = ("order", "stream", "writes", "inner", "handle")

    def __init__(self, order: StreamOrder, stream: Any, writes: bool):
        self.order, self.stream, self.writes = order, stream, writes

    def __enter__(self) -> _Ordered:
        order = self.order
        order.lock.acquire()
        try:
            self.inner = stream_context(self.stream, order.device)
            self.inner.__enter__()
            try:
                self._wait()
            except BaseException:
                self.inner.__exit__(None, None, None)
                raise
        except BaseException:
            order.lock.release()
            raise
        return self

    def _wait(self) -> None:
        """Make the current stream wait for the work this operation must follow."""
        order = self.order
        handle = self.handle = torch._C._cuda_getCurrentRawStream(order.index)
        writer = order._writer
        if writer is not None and writer.needed_by(handle):
            writer.wait_on(order.device)
        if self.writes:
            for reader in order._readers.values():
                if reader.needed_by(handle):
                    reader.wait_on(order.device)

    def __exit__(self, kind, value, traceback) -> None:
        try:
            order = self.order
            old = None if self.writes else order._readers.get(self.handle)
            if old is not None and old.event is not None:
                # the read this mark replaces may have run on a destroyed stream whose handle
                # this one reuses: wait for it here, so the new mark covers it too
                torch.cuda.current_stream(order.device).wait_event(old.event)
            if _is_foreign(self.stream):
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(order.device))
                mark = _Mark(self.handle, event)
            else:  # a torch stream: the mark of its last call there serves again
                last = order._writer if self.writes else order._readers.get(self.handle)
                same = last is not None and last.event is None and last.handle == self.handle
                mark = last if same else _Mark(self.handle)
            if self.writes:
                order._writer = mark
                if order._readers:
                    order._readers = {}
            else:
                order._readers[self.handle] = mark
        finally:
            try:
                self.inner.__exit__(kind, value, traceback)
            finally:
                self.order.lock.release()


class StreamOrder:
    """Orders one structure's operations across streams (see the module's docstring). Every
    operation runs inside ``ordered(stream, writes=...)``; ``writes`` is True for anything
    that changes the structure."""

    __slots__ = ("device", "index", "lock", "_writer", "_readers", "__weakref__")

    def __init__(self, device: torch.device):
        _track(self)
        self.device = device
        # held by every operation of the structure; a caller that makes one operation of
        # several (a read, then a write) holds it around them
        self.lock = threading.RLock()
        self.index = device.index if device.type == "cuda" else None
        self._writer: _Mark | None = None
        self._readers: dict[int, _Mark] = {}  # stream handle -> the last read there

    def ordered(self, stream: Any, *, writes: bool):
        """The context of one operation on ``stream`` (None: torch's current stream)."""
        if self.device.type != "cuda":
            return self.lock
        return _Ordered(self, stream, writes)

    def run(self, work, *, writes: bool, stream: Any):
        """``work()`` inside ``ordered(stream, writes=writes)``."""
        with self.ordered(stream, writes=writes):
            return work()


_ORDERS: weakref.WeakSet = weakref.WeakSet()  # every live StreamOrder, for a forked child
_FORK_HANDLER = []  # registered once, when the first StreamOrder is made


def _track(order: StreamOrder) -> None:
    if not _FORK_HANDLER:
        _FORK_HANDLER.append(True)
        os.register_at_fork(after_in_child=_after_fork_in_child)
    _ORDERS.add(order)


def _after_fork_in_child() -> None:
    """A child made by fork has one thread: a lock another thread of the parent held at the
    fork would stay held forever, so every structure gets a fresh one; the parent's CUDA
    streams mean nothing here, so their marks go too."""
    for order in list(_ORDERS):
        order.lock = threading.RLock()
        order._writer, order._readers = None, {}
