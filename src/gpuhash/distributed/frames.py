"""What ``gh.distributed.merge`` and ``gh.distributed.groupby`` share: the collective check of
every rank's input, the exchange of whole table rows between ranks, and each rank's part of
the answer brought back to the caller's kind of table.

Every rank passes its own partition: a pyarrow Table, a pandas or a polars DataFrame, of one
kind and one schema on every rank. The calls go in three agreed steps, so a failure on any
rank raises on every rank and no rank is left waiting in a collective:

1. :func:`agree` checks this rank's input and gathers every rank's description of it (its
   kind, columns and types, the options); a rank that failed, or descriptions that differ,
   make every rank raise before any row moves. The Arrow schemas gathered there are unified
   (an empty pandas partition's object column has no type of its own) and every rank casts
   its rows to the unified schema, so the parts concatenate at their owners.
2. :func:`exchange_tables` sends each row to its owner: the rows grouped by owner, each
   destination's slice written as an Arrow IPC stream, the byte counts exchanged in the
   exchange's header (with each rank's failure flag), then every rank's bytes in one
   ``all_to_all_single`` of uint8 on the group's device (the GPU under NCCL). A rank keeps
   its own slice without serialising it. The received slices are concatenated in sender rank
   order, each in its sender's row order.
3. :func:`finish` agrees on the local work's outcome and, for pandas, on the output's
   dtypes: a pandas column's dtype hangs on the data (an int column with a missing value is
   float64), so each rank casts its part to the common dtype of every rank's, the dtype the
   whole table's answer has.

Example:
    >>> import pyarrow as pa
    >>> import gpuhash as gh
    >>> from gpuhash.distributed.frames import as_kind, exchange_tables, open_exchange
    >>> with gh.distributed.single_process_group():
    ...     exchange = open_exchange(None)
    ...     arrived = exchange_tables(exchange, [pa.table({"k": [1, 2]})], [None], what="a demo")
    >>> got = arrived.tables()
    >>> got[0].num_rows, as_kind(got[0], "pandas", {"k": "int32"}).dtypes["k"]
    (2, dtype('int32'))
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gpuhash._common import host_buffers
from gpuhash._common.phases import Phases
from gpuhash._common.transfers import to_device, to_host
from gpuhash.distributed.base import default_device
from gpuhash.distributed.exchange import Exchange, PeerError
from gpuhash.join.frames import ARROW, PANDAS, POLARS, frame_kind, to_arrow

KINDS = (ARROW, PANDAS, POLARS)
EVERY_RANK = "every rank"  # exchange_tables' target: the whole table to every rank


def on_rank_cores(call: Callable) -> Callable:
    """``call`` run with the CPU engine's loops and torch's host operations on this rank's
    share of the host's cores: ``torchrun`` starts LOCAL_WORLD_SIZE processes a host (and sets
    torch to one thread each), and every rank's loops on every core would crowd each other
    out while torch's staging copies crawl on one. Outside such a launch nothing changes."""

    @functools.wraps(call)
    def shared(*args, **kwargs):
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        if local <= 1:
            return call(*args, **kwargs)
        from gpuhash._common.cpu.runtime import core_share, host_cores

        with core_share(host_cores() // local, torch_threads=True):
            return call(*args, **kwargs)

    return shared


def require_group() -> None:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("gh.distributed.merge and groupby need torch.distributed "
                           "initialised first: torch.distributed.init_process_group(...) on "
                           "every rank (or gh.distributed.single_process_group() to try them "
                           "alone)")


def table_kind(frame: Any, argument: str) -> str:
    """The kind of a rank's partition; a TypeError naming the argument for anything else."""
    try:
        kind = frame_kind(frame, argument)
    except TypeError:
        kind = None
    if kind not in KINDS:
        raise TypeError(f"{argument} must be this rank's partition as a pyarrow Table or a "
                        f"pandas or polars DataFrame, not {type(frame).__name__}")
    return kind


def describe(frame: Any, kind: str) -> tuple:
    """What must match on every rank: the kind, the column names and (pyarrow, polars) their
    types. pandas dtypes may differ by partition (an int column with a missing value is
    float64, an empty object column has no Arrow type): their Arrow types are unified
    instead (:func:`unified_schema`), and the frames rebuilt at the owners take the common
    dtype of every rank's (:func:`common_dtypes`)."""
    if kind == PANDAS:
        return kind, tuple(str(n) for n in frame.columns)
    if kind == POLARS:
        return kind, tuple((n, str(t)) for n, t in frame.schema.items())
    return kind, tuple((f.name, str(f.type)) for f in frame.schema)


def shape_of(frame: Any, kind: str, table) -> tuple:
    """What a rank tells the others of its partition beside :func:`describe`: its Arrow
    schema, and a pandas frame's dtypes (None for other kinds)."""
    dtypes = [(str(n), t) for n, t in frame.dtypes.items()] if kind == PANDAS else None
    return table.schema, dtypes


def model_of(frame: Any, kind: str, shapes: list) -> Any:
    """What a rebuilt partition takes its types from: a pandas frame's common dtypes over
    every rank (from :func:`shape_of`'s), a polars frame's schema (the same everywhere)."""
    if kind == PANDAS:
        return common_dtypes([dtypes for _, dtypes in shapes])
    return frame


def as_arrow(frame: Any, kind: str, side: str = "left"):
    """A partition as a pyarrow Table (one chunk a column is not needed: the exchange
    slices)."""
    return to_arrow(frame, kind, side)


def agree(group: Any, what: str, check: Callable[[], tuple[Any, Any, Any]]) -> tuple[Any, list]:
    """Run ``check()`` on this rank (it returns ``(value, description, payload)``), then make
    every rank raise if any rank's check raised (that rank its own error, the others a
    PeerError quoting it) or if the descriptions differ (a ValueError on every rank). Returns
    ``value`` and every rank's ``payload`` (Arrow schemas, say), in rank order. One
    ``all_gather_object``."""
    error, value, description, payload = None, None, None, None
    try:
        value, description, payload = check()
    except Exception as caught:  # told to every rank below, then raised here
        error = caught
    world = dist.get_world_size(group)
    seen: list[Any] = [None] * world
    text = repr(description) if error is None else f"{type(error).__name__}: {error}"
    dist.all_gather_object(seen, (error is None, text, payload), group=group)
    if error is not None:
        raise error
    failed = [f"rank {rank}: {text}" for rank, (ok, text, _) in enumerate(seen) if not ok]
    if failed:
        raise PeerError(f"{what} failed on another rank, so it raises here too "
                        f"({'; '.join(failed)})")
    if len({text for _, text, _ in seen}) > 1:
        ranks = "; ".join(f"rank {rank}: {text}" for rank, (_, text, _) in enumerate(seen))
        raise ValueError(f"every rank must pass {what} tables of one kind and schema and the "
                         f"same options (got {ranks})")
    return value, [payload for _, _, payload in seen]


def unified_schema(schemas: list, side: str):
    """One Arrow schema from every rank's (a column of no type on some rank, as an empty
    pandas partition's object column, takes the others' type); the same on every rank."""
    import pyarrow as pa

    try:
        unified = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise TypeError(f"the {side} partitions' columns hold different types on different "
                        f"ranks ({error}); cast them to one type on every rank") from None
    return unified.with_metadata(schemas[0].metadata)


def conform_table(table, schema):
    """``table`` cast to the agreed ``schema`` where its types differ."""
    if table.schema.equals(schema, check_metadata=False):
        return table.replace_schema_metadata(schema.metadata)
    return table.cast(schema)


def open_exchange(group: Any) -> Exchange:
    """The all-to-all steps of ``group``, on its device (this rank's GPU under NCCL)."""
    return Exchange(group, default_device(group))


def owners_of(hashes: torch.Tensor, world: int) -> np.ndarray:
    """Each row's owner rank, as a NumPy array of the narrowest integer type (one byte up to
    256 ranks: the rows are ordered by a radix sort of it on the host)."""
    from gpuhash.distributed.routing import owners

    return to_host(owners(hashes, world)[0])  # one pass (a kernel, or its numba twin)


def _stream_size(table) -> int:
    """The bytes of ``table`` as an Arrow IPC stream, counted without writing them."""
    import pyarrow as pa

    sink = pa.MockOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.size()


def _write_stream(table, out: np.ndarray) -> None:
    """``table`` as an Arrow IPC stream, written straight into ``out`` (its exact size)."""
    import pyarrow as pa

    sink = pa.FixedSizeBufferWriter(pa.py_buffer(out))
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def _serialised(parts: list[list], count: int) -> tuple[np.ndarray, list[int]]:
    """Every destination's bytes end to end in one host array, and each destination's byte
    count. A destination's bytes: its ``count`` tables' stream sizes (0: no rows), then the
    streams; nothing where it gets no rows. The streams are sized first, then written in
    threads (Arrow's writer releases the GIL) straight into their places: one copy of the
    rows, not one into each stream and another into the whole."""
    sizes = [[0 if table is None else _stream_size(table) for table in tables]
             for tables in parts]
    blobs = [8 * count + sum(s) if any(s) else 0 for s in sizes]
    out = host_buffers.take(sum(blobs), np.uint8)
    jobs, start = [], 0
    for tables, stream_sizes, blob in zip(parts, sizes, blobs):
        if blob:
            head = struct.pack(f"<{count}q", *stream_sizes)
            out[start:start + 8 * count] = np.frombuffer(head, dtype=np.uint8)
            at = start + 8 * count
            for table, size in zip(tables, stream_sizes):
                if size:
                    jobs.append((table, out[at:at + size]))
                    at += size
        start += blob
    if len(jobs) > 1:
        with ThreadPoolExecutor(min(len(jobs), os.cpu_count() or 1)) as pool:
            list(pool.map(lambda job: _write_stream(*job), jobs))
    elif jobs:
        _write_stream(*jobs[0])
    return out, blobs


def _read_ipc(data: np.ndarray):
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _slices(table, target, rank: int, world: int) -> list:
    """``table``'s rows for each rank: by owner (an array of ranks), or the whole table to
    every rank (:data:`EVERY_RANK`), or all kept here (None)."""
    if target is None:
        return [table if r == rank else table.slice(0, 0) for r in range(world)]
    if isinstance(target, str):
        return [table] * world
    counts = np.bincount(target, minlength=world)
    if world > 1:
        table = _by_owner(table, target, counts)
    starts = np.concatenate([[0], np.cumsum(counts)])
    return [table.slice(int(starts[r]), int(counts[r])) for r in range(world)]


PARALLEL_ROWS = 1 << 16  # tables from this many rows are ordered by owner on every core


def _by_owner(table, target: np.ndarray, counts: np.ndarray):
    """``table``'s rows ordered by owner, each owner's in row order: a stable sort of the
    owners (NumPy's radix sort for one-byte ones), then every column gathered on every core
    by the merges' gathers, an owner's rows at a time (they ascend: strings are copied in one
    pass), each owner's rows a chunk of their own. (Arrow's ``take`` runs on one thread.)"""
    import pyarrow as pa

    from gpuhash.join.arrow_gather import single, take_column

    narrow = target.astype(np.uint8, copy=False) if target.max(initial=0) < 256 else target
    order = np.argsort(narrow, kind="stable").astype(np.int64, copy=False)
    if table.num_rows < PARALLEL_ROWS:  # Arrow's one call beats starting every core's loops
        return table.take(order)
    edges = np.concatenate([[0], np.cumsum(counts)])
    columns = []
    for column in table.columns:
        column = single(column)  # chunks combined once, not once an owner
        chunks = []
        for start, stop in zip(edges[:-1], edges[1:]):
            if stop > start:
                part = take_column(column, order[start:stop], may_miss=False, ascending=True)
                chunks.extend(part.chunks if isinstance(part, pa.ChunkedArray) else [part])
        columns.append(pa.chunked_array(chunks, column.type))
    return pa.table(columns, schema=table.schema)


def exchange_tables(exchange: Exchange, tables: list, targets: list, *, what: str,
                    error: BaseException | None = None, phases: Phases | None = None
                    ) -> Arrived:
    """Every rank's rows of each of ``tables`` to the ranks ``targets`` names (per table: an
    int64 array of owner ranks, :data:`EVERY_RANK`, or None: kept here). Returns what
    arrived (:class:`Arrived`; its ``tables()``: per table, this rank's rows). ``error``: this
    rank's failure so far, raised on every rank at the header exchange (``tables`` unused
    then). A failure while slicing and serialising is raised so too. ``phases``: each step's
    time is noted there (``explain``). Collective."""
    rank, world = exchange.rank, exchange.world
    note = phases.done if phases is not None else (lambda *_: None)
    parts: list[list] = [[] for _ in range(world)]  # per destination, each table's rows
    kept: list = []
    host, blobs = np.zeros(0, np.uint8), []
    if error is None:
        try:
            for table, target in zip(tables, targets):
                pieces = _slices(table, target, rank, world)
                kept.append(pieces[rank])
                for r in range(world):
                    if r != rank:
                        parts[r].append(pieces[r] if pieces[r].num_rows else None)
            note("rows by owner")
            host, blobs = _serialised(parts, len(tables))
            note("serialise", f"{host.nbytes} bytes to send")
        except Exception as caught:  # raised on every rank by the header exchange
            error = caught
    sizes = None if error is not None else torch.tensor(blobs, dtype=torch.int64,
                                                        device=exchange.device)
    plan = exchange.open(sizes, error, what=what)
    note("sizes exchanged")
    payload = torch.zeros(0, dtype=torch.uint8, device=exchange.device)
    try:  # through pinned pieces to the group's GPU (on the CPU: the array itself)
        payload = to_device(host, exchange.device)
    except Exception as caught:  # out of memory: raised on every rank by the forward
        error = caught
    note("to the group's device")
    got = exchange.forward(plan, payload.reshape(-1, 1), error=error, what=what)
    if phases is not None and got.is_cuda:  # the all-to-all's own time, not the next step's
        torch.cuda.synchronize(got.device)
    note("all-to-all", f"{got.numel()} bytes received")
    return Arrived(got.reshape(-1), plan.receive, kept, rank)


class Arrived:
    """The bytes an exchange brought and the slices this rank kept; :meth:`tables` reads
    them, inside the caller's agreed step (a failure there must not leave the other ranks
    waiting)."""

    def __init__(self, data: torch.Tensor, sizes: list[int], kept: list, rank: int):
        self._data, self._sizes, self._kept, self._rank = data, sizes, kept, rank

    def tables(self) -> list:
        """Per exchanged table, this rank's rows as one Table, every sender's in rank
        order."""
        import pyarrow as pa

        received: list[list] = [[] for _ in self._kept]
        data = to_host(self._data)  # here, where a failure is agreed by the caller
        start = 0
        for sender, size in enumerate(self._sizes):
            if sender == self._rank:
                for i, table in enumerate(self._kept):
                    received[i].append(table)
            elif size:
                for i, part in enumerate(_unframed(data[start:start + size],
                                                   len(self._kept))):
                    if part is not None:
                        received[i].append(part)
            start += size
        return [pa.concat_tables(parts) for parts in received]


def _unframed(data: np.ndarray, count: int) -> list:
    sizes = struct.unpack(f"<{count}q", data[:8 * count].tobytes())
    out, start = [], 8 * count
    for size in sizes:
        out.append(_read_ipc(data[start:start + size]) if size else None)
        start += size
    return out


def as_kind(table, kind: str, like: Any):
    """A received Arrow table as ``kind``; ``like``: :func:`model_of`'s, whose dtypes
    (pandas: a dict) or types (polars: a frame) the columns take back where the trip through
    Arrow changed them."""
    if kind == PANDAS:
        frame = table.to_pandas()
        return frame if like is None else conform_pandas(frame, like)
    if kind == POLARS:
        import polars

        frame = polars.from_arrow(table)
        changed = {n: t for n, t in like.schema.items()
                   if n in frame.columns and frame.schema[n] != t}
        return frame.cast(changed) if changed else frame
    return table


def conform_pandas(frame, dtypes: dict):
    """``frame`` with columns cast to ``dtypes`` where they differ (as far as they cast)."""
    for name, dtype in dtypes.items():
        if name in frame.columns and frame.dtypes[name] != dtype:
            # kept as the trip made it where the values do not fit the dtype
            with contextlib.suppress(TypeError, ValueError):
                frame[name] = frame[name].astype(dtype)
    return frame


def finish(exchange: Exchange, result: Any, error: BaseException | None, kind: str,
           what: str, phases: Phases | None = None) -> Any:
    """Agree that every rank's local work succeeded (else raise everywhere), and give a
    pandas result every rank's common dtype of each column. One ``all_gather_object``.
    ``phases``: every rank's go with it, and rank 0 prints them side by side (``explain``)."""
    dtypes = None
    if error is None and kind == PANDAS:
        dtypes = [(str(n), t) for n, t in result.dtypes.items()]
    seen: list[Any] = [None] * exchange.world
    mine = None if error is None else f"{type(error).__name__}: {error}"
    rows = None if phases is None else phases.rows
    dist.all_gather_object(seen, (mine, dtypes, rows), group=exchange.group)
    if phases is not None and exchange.rank == 0:
        # never in place of the call's own outcome: a table that cannot be made is left out
        with contextlib.suppress(Exception):
            print(_phase_table(what, [r or [] for _, _, r in seen]))
    if error is not None:
        raise error
    failed = [f"rank {rank}: {text}" for rank, (text, _, _) in enumerate(seen) if text]
    if failed:
        raise PeerError(f"{what} failed on another rank, so it raises here too "
                        f"({'; '.join(failed)})")
    if kind != PANDAS:
        return result
    return conform_pandas(result, common_dtypes([d for _, d, _ in seen]))


def _phase_table(what: str, every: list[list]) -> str:
    """Each phase's wall-clock ms on every rank, a column a rank (rank 0's details beside)."""
    ranks = f"{len(every)} rank{'s' if len(every) != 1 else ''}"
    lines = [f"{what} on {ranks}, ms a phase, a column a rank (rank 0's detail)"]
    width = max((len(p) for p, _, _ in every[0]), default=0)
    for i, (phase, _, detail) in enumerate(every[0]):
        times = "  ".join(f"{rows[i][1]:9.2f}" if i < len(rows) else " " * 9 for rows in every)
        lines.append(f"  {phase:<{width}}  {times}  {detail}")
    return "\n".join(lines)


def common_dtypes(every: list[list]) -> dict:
    """Column -> the dtype the concatenation of frames of these dtypes has (pandas' rule:
    int64 and float64 make float64; unlike kinds make object)."""
    from pandas.core.dtypes.cast import find_common_type

    out = {}
    for name, _ in every[0]:
        kinds = [dict(dtypes)[name] for dtypes in every]
        try:
            out[name] = find_common_type(kinds)
        except (TypeError, ValueError):
            out[name] = np.dtype(object)
    return out
