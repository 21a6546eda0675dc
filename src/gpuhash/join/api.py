"""Hash joins of key arrays: ``join``, ``JoinBuild`` and ``explain_join``.

A join returns gather maps, int64 row numbers into each side, rather than joined columns
(``gh.merge`` gathers columns from them). The build side becomes a MultiMap from key code to
row number on the keys' device, filled and probed by the engines' join operations straight
from the key columns, so the same code runs on the CUDA and the CPU engines. The strategy (in
memory, probe streamed in chunks, both sides partitioned, tiny inputs on the CPU) comes from
the cost model in ``_join_plan``; this module owns the semantics every strategy shares: which
rows match and how nulls behave (``_join_matches`` assembles each ``how`` from the matches).

Example:
    >>> import torch, gpuhash as gh
    >>> left, right = gh.join(torch.tensor([1, 2, 2, 5]), torch.tensor([2, 1, 7]))
    >>> sorted(zip(left.tolist(), right.tolist()))
    [(0, 1), (1, 0), (2, 0)]
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from gpuhash._common import arrays as _arrays
from gpuhash.join import plan as _join_plan
from gpuhash.join import pool as _join_pool
from gpuhash.join.dense import DenseTable
from gpuhash.join.engine import engine_for as join_engine_for
from gpuhash.join.fanout import estimate_fanout
from gpuhash.join.keys import (
    Direct32,
    KeyEncoder,
    build_encoder,
    check_sides,
    check_valid,
    key_columns,
)
from gpuhash.join.matches import _Matches
from gpuhash.join.plan import HOWS, JoinPlan, plan_join, shared_plan, wants_fanout
from gpuhash.join.strategies.parts import run_partitioned
from gpuhash.join.strategies.radix import run_radix
from gpuhash.join.strategies.small import small_join
from gpuhash.table.base import _resolve_device, stream_context
from gpuhash.table.format import TableSpec
from gpuhash.table.multimap import MultiMap


def _check_how(how: Any) -> str:
    if how not in HOWS:
        raise ValueError(f"how must be one of {', '.join(map(repr, HOWS))}; got {how!r}")
    return how


class _Side:
    """One side's key columns, validity mask and array kind, checked."""

    def __init__(self, keys: Any, name: str, valid: Any, valid_name: str):
        self.columns, self.kind = key_columns(keys, name)
        self.rows = self.columns[0].shape[0]
        self.device = self.columns[0].device
        self.valid = check_valid(valid, self.rows, valid_name, self.device)

    def _mapped(self, change, rows: int | None = None) -> _Side:
        """A side whose columns and mask are ``change(tensor)`` of this one's."""
        other = object.__new__(_Side)
        other.columns = [change(c) for c in self.columns]
        other.valid = None if self.valid is None else change(self.valid)
        other.rows = self.rows if rows is None else rows
        other.device = other.columns[0].device
        other.kind = self.kind
        return other

    def slice(self, start: int, stop: int) -> _Side:
        return self._mapped(lambda t: t[start:stop], stop - start)

    def clone(self) -> _Side:
        return self._mapped(torch.clone)

    def to(self, device: torch.device) -> _Side:
        return self._mapped(lambda t: t.to(device))

    def null_rows(self) -> torch.Tensor:
        if self.valid is None:
            return torch.zeros(0, dtype=torch.int64, device=self.device)
        return (~self.valid).nonzero().squeeze(1)


class _RowTable:
    """The build side as a MultiMap from key code to build row number, filled and probed by
    the join kernels straight from the key columns (engines: multi_join_build and
    multi_join_probe), at load at most LOAD so a probe reads one bucket; 32-bit codes try
    a direct array first (``_direct_words``), which spares the table its entries and a probe
    its bucket walk where the keys are dense and distinct. A table whose
    encoder may not hold every build key (``refit``: :class:`Direct32`) learns so from the
    first probe's unplaced count, then refits a :class:`KeyEncoder` and builds again."""

    LOAD = 0.5

    def __init__(self, encoder, columns: list[torch.Tensor], valid: torch.Tensor | None,
                 rows: int, device: torch.device, *, ordered: bool = False,
                 pooled: bool = False):
        self.rows, self.device = rows, device
        self._build = (columns, valid)
        self._pooled = pooled  # from and back to _join_pool: gh.join's in-memory tables only
        self._fill(encoder, ordered=ordered)
        self._unique: bool | None = None

    def _fill(self, encoder, *, ordered: bool) -> None:
        """Build the table on the current stream. ``ordered``: probes may come on other
        streams (a prepared JoinBuild, or any probe after a refit, which another thread's probe
        may have caused), so each waits for an event after the build; one join's own probes
        run on its stream and need none."""
        array, ranked = _direct_words(encoder, self.rows, self.device)
        spec = _build_spec(encoder.key_dtype, self.rows, self.LOAD)
        spare = array + ranked + _group_words(spec)
        multi = _join_pool.take(spec, self.device, spare_words=spare, pooled=self._pooled)
        kept = multi._state.__dict__
        # cut once a table: a kept one (_join_pool) has them
        split, views = kept.get("_join_views", (None, None))
        if split != (array, ranked):
            words = kept["_spare"]  # zeroed with the table
            views = (words[:array] if array else None,
                     words[array:array + ranked] if ranked else None, words[array + ranked:])
            kept["_join_views"] = ((array, ranked), views)
        direct, ranked_rows, groups = views
        join_engine_for(multi.device).build(multi._state, *encoder.kernel_input(*self._build),
                                       groups=groups, direct=direct, ranked=ranked_rows)
        ready = _event_after_queued_work(self.device) if ordered else None
        # one assignment: a probe never sees half a refit
        self._built = (encoder, multi, ready, direct, ranked_rows)

    @property
    def encoder(self):
        """The key encoding the table was built with."""
        return self._built[0]

    @property
    def multi(self) -> MultiMap:
        """The table: key code -> build row number."""
        return self._built[1]

    def _probe(self, columns: list[torch.Tensor], valid: torch.Tensor | None, **options
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        build_hit = options.get("build_hit")
        encoder, multi, ready, direct, ranked = self._built
        if ready is not None:
            torch.cuda.current_stream(self.device).wait_event(ready)
        probe, build, unplaced, unmatched = join_engine_for(multi.device).probe(
            multi._state, *encoder.kernel_input(columns, valid), direct=direct, ranked=ranked,
            **options)
        if not unplaced:
            return probe, build, unmatched
        if not encoder.refit:
            raise RuntimeError(f"{unplaced} build rows were not placed in the join table")
        self._fill(KeyEncoder(*self._build), ordered=True)
        if build_hit is not None:
            build_hit.zero_()  # marks of the partial table's matches are redone
        return self._probe(columns, valid, **options)

    def hand_back(self) -> None:
        """Give the table to the next join of its size (_join_pool): call when this join's
        last probe is done; the table is not used again."""
        _join_pool.hand_back(self._built[1])
        del self._built

    def pairs(self, columns: list[torch.Tensor], valid: torch.Tensor | None, *,
              keep_unmatched: bool = False, build_hit: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """(probe row, build row) of every match, plus (row, -1) for each probe row without
        one when ``keep_unmatched``; marks ``build_hit``. Synchronises once."""
        return self._probe(columns, valid, keep_unmatched=keep_unmatched,
                           build_hit=build_hit)[:2]

    def pairs_and_unmatched(self, columns: list[torch.Tensor], valid: torch.Tensor | None, *,
                            keep_unmatched: bool, build_hit: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``pairs`` of a join's last probe, and the build rows no probe marked in
        ``build_hit`` (right and full joins keep them), learnt in the same synchronisation."""
        return self._probe(columns, valid, keep_unmatched=keep_unmatched, build_hit=build_hit,
                           unmatched_build=True)

    def matched(self, columns: list[torch.Tensor], valid: torch.Tensor | None) -> torch.Tensor:
        """Whether each probe row has a match (bool)."""
        hit = torch.empty(columns[0].shape[0], dtype=torch.bool, device=columns[0].device)
        self._probe(columns, valid, probe_hit=hit)
        return hit

    def picked(self, columns: list[torch.Tensor], valid: torch.Tensor | None, how: str
               ) -> torch.Tensor:
        """The probe rows with a match (``how`` "semi") or without one ("anti"), in no
        particular order, made by the probe itself: synchronises once, as ``pairs`` does."""
        rows = self._probe(columns, valid, one_row=how)[0]
        # a view of the probe's output block (two int64 words a probe row): a copy of its
        # own lets the block go
        return rows.clone() if rows.untyped_storage().nbytes() > 2 * rows.nbytes else rows

    def unique(self) -> bool:
        """True when no key code repeats (the build counts the rows that do)."""
        if self._unique is None:
            _, _, ready, direct, _ = self._built
            if ready is not None:  # built on another stream (a refit by another probe)
                torch.cuda.current_stream(self.device).wait_event(ready)
            if direct is not None and int(direct[-1]) == 0:  # it holds each key once
                self._unique = True
            else:
                # a probe of no rows refits a table that lacks build rows (it learns so there)
                columns, valid = self._build
                self.pairs([c[:0] for c in columns], None if valid is None else valid[:0])
                repeats = self.multi._state.join_groups[1][0]  # rows that repeat a code
                self._unique = int(repeats) == 0
        return self._unique


def _direct_words(encoder, rows: int, device: torch.device) -> tuple[int, int]:
    """The words of the array a build tries before its hash table, its failed word included,
    and of a ranked array's base, rows and chunk sums (_join_plan.array_words; (0, 0): none).
    On a GPU only: on the CPU the dense table (_join_dense) takes dense 32-bit keys, sized
    from their range, which a GPU would need a second host sync to learn. (The CPU engine has
    the arrays' operations too, as the CUDA engine's twin.)"""
    if device.type != "cuda" or encoder.key_dtype != torch.int32:
        return 0, 0
    return _join_plan.array_words(rows, encoder.code_span)


def _event_after_queued_work(device: torch.device) -> torch.cuda.Event | None:
    """A CUDA event recorded after the work queued so far on ``device``'s current stream (None
    off CUDA): a stream that waits on it sees that work done."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


def _group_words(spec: TableSpec) -> int:
    """Zeroed int64 words a join build keeps for grouping the rows of repeated codes
    (engines: multi_join_build): the number of rows that repeat a code, the group array's
    fill, then a counter of the values' width a slot."""
    return 2 + -(-spec.num_slots * spec.value_bytes // 8)


@functools.lru_cache(maxsize=256)
def _build_spec(key_dtype: torch.dtype, rows: int, load: float) -> TableSpec:
    """The spec of a build table of ``rows`` rows: MultiMap(capacity=rows,
    max_load_factor=load, growable=False)'s, row numbers as values (worked out once a size:
    a small join's host time is most of it). 4-byte values while a group start (below
    1.5 times the rows: engines' multi_join_build) fits 31 bits."""
    value_dtype = torch.int32 if rows < 2**30 else torch.int64
    return TableSpec(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=(),
                     num_buckets=1, max_load_factor=load).sized_for(max(rows, 1))


class JoinBuild:
    """A prepared build side (the right side of a join), probed by any number of left sides.

    Keys are a 1-D integer array or a tuple of them (multi-column keys), torch / NumPy /
    CuPy / DLPack; ``right_valid`` marks null rows (False). The table lives on the keys'
    device, built on ``stream``; a probe on any stream waits for the build (an event), so
    probes may run on other streams. Building synchronises with the device a few times (key
    ranges, a uniqueness test); a probe once or twice (Python must learn the output size).

    Example:
        >>> import torch, gpuhash as gh
        >>> build = gh.JoinBuild(torch.tensor([10, 20, 20]))
        >>> left, right = build.probe(torch.tensor([20, 30]), how="left")
        >>> sorted(zip(left.tolist(), right.tolist()))
        [(0, 1), (0, 2), (1, -1)]
        >>> build.probe(torch.tensor([30, 10]), how="semi").tolist()
        [1]
    """

    def __init__(self, right_keys: Any, *, right_valid: Any = None, stream: Any = None):
        self._prepare(_Side(right_keys, "right_keys", right_valid, "right_valid"), stream,
                      snapshot=True)

    @classmethod
    def _of(cls, side: _Side, stream: Any = None, *, pooled: bool = False) -> JoinBuild:
        """A build of ``side`` for one join; ``pooled``: its table may come from, and must go
        back to, _join_pool (``_table.hand_back()`` after the join's last probe)."""
        build = object.__new__(cls)
        build._prepare(side, stream, pooled=pooled)
        return build

    def _prepare(self, side: _Side, stream: Any, *, snapshot: bool = False,
                 pooled: bool = False) -> None:
        """Build the table on ``stream``. ``snapshot``: copy keys the table may be refitted
        from at its first probe (Direct32), since the caller's arrays may change by then."""
        with stream_context(stream, side.device):
            if snapshot and Direct32.suits(side.columns):
                side = side.clone()  # on the build's stream, like everything it reads
            self._side = side
            self._stream = stream
            encoder = build_encoder(side.columns, side.valid)
            self._table = (DenseTable.build(encoder, side.columns, side.valid, side.rows,
                                            side.device)
                           or _RowTable(encoder, side.columns, side.valid, side.rows,
                                        side.device, ordered=snapshot, pooled=pooled))
            # the null rows, needed by nulls_equal probes only: found now for a prepared
            # build (the caller's mask may change later; finding them synchronises), on
            # first need inside one join call
            self._nulls = side.null_rows() if snapshot else None
            # a probe on another stream that samples the build side's keys waits for this
            self._ready = _event_after_queued_work(side.device) if snapshot else None

    def _null_rows(self) -> torch.Tensor:
        """The build side's null rows (int64)."""
        if self._nulls is None:
            self._nulls = self._side.null_rows()
        return self._nulls

    @property
    def rows(self) -> int:
        """Rows of the build side, nulls included."""
        return self._side.rows

    @property
    def unique(self) -> bool:
        """True when the build side's (non-null) keys are all distinct (worked out on first
        use: the build counts the rows that repeat a key; reading the count synchronises)."""
        with stream_context(self._stream, self.device):
            return self._table.unique()

    @property
    def device(self) -> torch.device:
        """The device the build table lives on."""
        return self._side.device

    def probe(self, left_keys: Any, *, how: str = "inner", left_valid: Any = None,
              nulls_equal: bool = False, memory_budget: int | None = None,
              explain: bool = False, stream: Any = None) -> Any:
        """Join ``left_keys`` against the build side; the same results as :func:`join`.

        ``memory_budget`` (bytes) streams the probe side through the table in chunks when it
        would pass it. Returns ``(left_rows, right_rows)``, or ``left_rows`` for semi / anti.

        Example:
            >>> import torch, gpuhash as gh
            >>> build = gh.JoinBuild((torch.tensor([1, 1]), torch.tensor([5, 6])))
            >>> build.probe((torch.tensor([1, 2]), torch.tensor([6, 6])))[1].tolist()
            [1]
        """
        how = _check_how(how)
        probe = _Side(left_keys, "left_keys", left_valid, "left_valid")
        check_sides(probe.columns, self._side.columns)
        key_bytes = 4 if self._table.encoder.key_dtype == torch.int32 else 8
        plan_for = functools.partial(plan_join, probe.rows, self.rows, how=how,
                                     key_bytes=key_bytes, device=self.device,
                                     memory_budget=memory_budget, build_fixed=True)
        with stream_context(stream, self.device):  # a sample of the keys is read there
            plan = _with_fanout(plan_for(), plan_for, self._side, probe, ready=self._ready)
            if plan.strategy == "cpu-small":  # the table is built here already: keep it here
                plan.strategy, plan.device = "hash-table", str(self.device)
                plan.why += " The build is prepared on its device, so the probe runs there."
            if explain:
                print(plan)
            if how == "cross":
                result = _cross(probe.rows, self.rows, self.device)
            else:
                result = self._match(probe, how, nulls_equal, plan.chunk_rows).assemble()
        if isinstance(result, tuple):
            return tuple(_arrays.to_kind(r, probe.kind) for r in result)
        return _arrays.to_kind(result, probe.kind)

    def _match(self, probe: _Side, how: str, nulls_equal: bool, chunk_rows: int | None,
               probe_is_left: bool = True, *, chunks=None, store=None) -> _Matches:
        """Every match of ``probe`` as a :class:`_Matches`, the probe side taken
        ``chunk_rows`` at a time when given. ``chunks`` yields (first row, part on the
        table's device) in row order (default: slices of ``probe``); ``store`` takes every
        piece found (see _Matches)."""
        matches = _Matches(how, probe_is_left, probe.rows, self.rows, self.device, store=store)
        null_pairs = (nulls_equal and probe.valid is not None
                      and self._null_rows().shape[0] > 0)
        matches.keep_probe_here = null_pairs
        whole = chunks is None and not chunk_rows  # one probe of every row
        if chunks is None:
            chunks = _slices(probe, chunk_rows)
        for start, part in chunks:
            if not matches.pairs and not null_pairs:  # the probe picks the rows: one sync
                picked = self._table.picked(part.columns, part.valid, how)
                matches.add_picked(picked.add_(start) if start else picked)
                continue
            if not matches.pairs:
                hit = self._table.matched(part.columns, part.valid)
                if null_pairs:  # a null probe row meets the build's null rows
                    hit = hit | ~part.valid
                rows = None if part.rows == probe.rows else torch.arange(
                    start, start + part.rows, device=self.device)
                matches.add_hits(rows, hit)
                continue
            keep = matches.keep_probe and not null_pairs
            if matches.build_hit is not None and whole and not null_pairs:
                # the only probe: the unmatched build rows come with its one read
                found_probe, found_build, unmatched = self._table.pairs_and_unmatched(
                    part.columns, part.valid, build_hit=matches.build_hit,
                    keep_unmatched=keep)
                matches.build_missing = unmatched
            else:
                found_probe, found_build = self._table.pairs(
                    part.columns, part.valid, build_hit=matches.build_hit,
                    keep_unmatched=keep)
            # in place: a new tensor would leave the pairs' allocation (both outputs, one
            # block: engines/cuda.py) held by found_build alone, half of it dead
            matches.add_pairs(found_probe.add_(start) if start else found_probe, found_build)
        if null_pairs and matches.pairs:  # every null probe row meets every null build row
            nulls, build_nulls = probe.null_rows().to(self.device), self._null_rows()
            matches.add_pairs(nulls.repeat_interleave(build_nulls.shape[0]),
                              build_nulls.repeat(nulls.shape[0]))
            if matches.build_hit is not None and nulls.shape[0]:
                matches.build_hit[build_nulls] = 1
        return matches


def _slices(probe: _Side, chunk_rows: int | None):
    """(first row, part) of ``probe`` ``chunk_rows`` at a time (all at once when None)."""
    if not chunk_rows:
        yield 0, probe
        return
    for start in range(0, probe.rows, chunk_rows):
        yield start, probe.slice(start, min(start + chunk_rows, probe.rows))


def _cross(left_rows: int, right_rows: int, device: torch.device):
    left = torch.arange(left_rows, device=device).repeat_interleave(right_rows)
    right = torch.arange(right_rows, device=device).repeat(left_rows)
    return left, right


def _sides(left_keys, right_keys, left_valid, right_valid) -> tuple[_Side, _Side]:
    left = _Side(left_keys, "left_keys", left_valid, "left_valid")
    right = _Side(right_keys, "right_keys", right_valid, "right_valid")
    check_sides(left.columns, right.columns)
    return left, right


def _key_bytes(left: _Side, right: _Side) -> int:
    """The table key's likely width: 4 for one column of at most 32 bits (codes usually fit
    32 bits whenever the build side's range does; the planner only needs an estimate)."""
    narrow = all(c.element_size() <= 4 for c in left.columns + right.columns)
    return 4 if narrow and len(left.columns) == 1 else 8


def explain_join(left_keys: Any, right_keys: Any, *, how: str = "inner",
                 left_valid: Any = None, right_valid: Any = None, nulls_equal: bool = False,
                 memory_budget: int | None = None, device: Any = None,
                 stream: Any = None) -> JoinPlan:
    """The plan :func:`join` would follow for these arguments (``device`` as there),
    without joining; it takes every argument join does but ``explain`` (``nulls_equal``
    does not change the plan; a sample of the keys may be read on ``stream``).

    Example:
        >>> import torch, gpuhash as gh
        >>> plan = gh.explain_join(torch.arange(10), torch.arange(1000))
        >>> plan.strategy, plan.build_side
        ('hash-table', 'left')
    """
    how = _check_how(how)
    left, right = _sides(left_keys, right_keys, left_valid, right_valid)
    target = _target(device, left)
    with stream_context(stream, target):  # where join reads its sample of the keys
        return _plan(left, right, how, memory_budget, target)  # the caller's to change


def _target(device: Any, left: _Side) -> torch.device:
    """The device a join runs on: ``device``, or the keys' device."""
    return left.device if device is None else _resolve_device(device)


def _row_bytes(side: _Side) -> int:
    """Bytes of one row of a side's key columns and null mask."""
    return sum(c.element_size() for c in side.columns) + (side.valid is not None)


def _plan(left: _Side, right: _Side, how: str, memory_budget: int | None,
          target: torch.device, *, shared: bool = False) -> JoinPlan:
    """The join's plan, made again with the estimated matches a probe row where those may
    change it (_join_plan.wants_fanout); ``shared``: one the caller only reads, which may be
    the plan object of an earlier call (_join_plan.shared_plan). Run on the operation's
    stream: the estimate reads a sample of the keys."""
    if shared and memory_budget is None and target == left.device:
        plan_for = functools.partial(plan_join, left.rows, right.rows, how=how,
                                     key_bytes=_key_bytes(left, right), device=target)
        plan = shared_plan(left.rows, right.rows, how=how, key_bytes=_key_bytes(left, right),
                           device=target)
    else:
        plan_for = functools.partial(
            plan_join, left.rows, right.rows, how=how, key_bytes=_key_bytes(left, right),
            device=target, memory_budget=memory_budget,
            data_device=None if target == left.device else left.device,
            input_bytes=max(_row_bytes(left), _row_bytes(right)))
        plan = plan_for()
    build, probe = (left, right) if plan.build_side == "left" else (right, left)
    return _with_fanout(plan, plan_for, build, probe)


def _with_fanout(plan: JoinPlan, plan_for, build: _Side, probe: _Side, *,
                 ready: torch.cuda.Event | None = None) -> JoinPlan:
    """``plan``, or ``plan_for(fanout=...)`` (a plan of its own, never a shared one) where the
    estimated matches a probe row may change it (_join_plan.wants_fanout). ``ready``: an
    event the current stream waits for before the build side's keys are sampled."""
    if not wants_fanout(plan, keys_on_gpu=build.device.type == "cuda"):
        return plan
    if ready is not None:  # the keys as the build left them
        torch.cuda.current_stream(build.device).wait_event(ready)
    fanout = estimate_fanout(build.columns, build.valid, probe.columns, probe.valid)
    return plan_for(fanout=fanout) if fanout > 1 else plan


def join(left_keys: Any, right_keys: Any, *, how: str = "inner", left_valid: Any = None,
         right_valid: Any = None, nulls_equal: bool = False, memory_budget: int | None = None,
         device: Any = None, explain: bool = False, stream: Any = None) -> Any:
    """Join two sides on integer keys; returns gather maps (int64 row numbers).

    Keys: a 1-D integer array or a tuple of them (multi-column keys), torch / NumPy / CuPy /
    DLPack, both sides on one device; results come back as the left keys' kind. Key dtypes
    may differ in width but not in signedness (int32 joins int64 by value; int64 against
    uint64 raises TypeError naming both). ``left_valid`` / ``right_valid`` (bool per row,
    False = null): null keys never match, unless ``nulls_equal=True``, where a null matches
    every null.

    ``how``: ``"inner"``, ``"left"``, ``"right"``, ``"full"`` (outer) return
    ``(left_rows, right_rows)`` with -1 on the side a row lacks; ``"semi"`` / ``"anti"``
    return ``left_rows`` only; ``"cross"`` every pair. Many-to-many keys give every pair. The
    order of the rows and pairs is unspecified for every ``how`` (compare them sorted; the
    GPU's probe writes them as its threads find them).

    ``memory_budget`` (bytes; default a share of the device's free memory) bounds the
    working set: past it the probe side is streamed in chunks, or both sides are partitioned
    by key hash and joined part by part, with identical results. On a GPU, sides of at least
    16M rows each are split into many small partitions joined in shared memory
    (``gpu-radix``, seed 001's join), where one table would be far past L2. ``device``:
    where the join runs (default: the keys' device). Keys in host memory joined on a GPU
    (``device="cuda"``) may be larger than its memory: they come over in chunks while the
    previous chunk is joined (the chunks waiting on the GPU count against the budget), and
    the results come back to host memory (pinned keys skip a staging copy). ``explain=True``
    prints the plan (:func:`explain_join` returns it).
    Synchronises with the device (output sizes; at least once per chunk when streamed).

    Example:
        >>> import torch, gpuhash as gh
        >>> keys = torch.tensor([1, 2, 3])
        >>> gh.join(keys, torch.tensor([3, 4]), how="full")
        (tensor([ 2,  0,  1, -1]), tensor([ 0, -1, -1,  1]))
        >>> gh.join(keys, torch.tensor([3, 4]), how="anti").tolist()
        [0, 1]
    """
    if (left_valid is None and right_valid is None and memory_budget is None and device is None
            and stream is None and not explain):
        result = small_join(left_keys, right_keys, how, table=_RowTable)
        if result is not None:
            return result
    how = _check_how(how)
    left, right = _sides(left_keys, right_keys, left_valid, right_valid)
    target = _target(device, left)
    home = left.device
    with stream_context(stream, target):  # the copies too, when the keys move
        plan = _plan(left, right, how, memory_budget, target, shared=True)  # may sample keys
        if explain:
            print(plan)
        if plan.strategy != "out-of-core-streams" and target != home:
            left, right = left.to(target), right.to(target)  # results come back below
        run = _join_plan.STRATEGIES[plan.strategy].run
        result = run(left, right, plan, nulls_equal)
        result = tuple(r.to(home) for r in result) if isinstance(result, tuple) else (
            result.to(home))
    if isinstance(result, tuple):
        return tuple(_arrays.to_kind(r, left.kind) for r in result)
    return _arrays.to_kind(result, left.kind)


def _run_hash_table(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    build, probe = (left, right) if plan.build_side == "left" else (right, left)
    joined = JoinBuild._of(build, pooled=True)
    matches = joined._match(probe, plan.how, nulls_equal, plan.chunk_rows,
                            probe_is_left=plan.build_side != "left")
    joined._table.hand_back()  # its last probe has read its counters: nothing is pending
    return matches.assemble()


def _run_cpu_small(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    device = left.device
    cpu = torch.device("cpu")
    result = _run_hash_table(left.to(cpu), right.to(cpu), plan, nulls_equal)
    if isinstance(result, tuple):
        return tuple(r.to(device) for r in result)
    return result.to(device)


def _run_partitioned(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    return run_partitioned(left, right, plan, nulls_equal, table=_RowTable)


def _run_radix(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    return run_radix(left, right, plan, nulls_equal, table=_RowTable)


def _run_cross(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    return _cross(left.rows, right.rows, left.device)


_join_plan.register("hash-table", _join_plan.STRATEGIES["hash-table"].description,
                    _run_hash_table)
_join_plan.register("hash-table-chunked",
                    _join_plan.STRATEGIES["hash-table-chunked"].description, _run_hash_table)
_join_plan.register("hash-partitioned", _join_plan.STRATEGIES["hash-partitioned"].description,
                    _run_partitioned)
_join_plan.register("gpu-radix", _join_plan.STRATEGIES["gpu-radix"].description,
                    _run_radix)
_join_plan.register("cpu-small", _join_plan.STRATEGIES["cpu-small"].description,
                    _run_cpu_small)
_join_plan.register("cross-product", _join_plan.STRATEGIES["cross-product"].description,
                    _run_cross)
