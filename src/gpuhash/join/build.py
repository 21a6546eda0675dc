"""A join's build side: ``RowTable`` (the build rows in a MultiMap by key code, probed by the
join engine) and ``JoinBuild`` (a prepared build side, probed by any number of probe sides).
Every strategy that probes a table builds one of these."""

from __future__ import annotations

import functools
from typing import Any

import torch

from gpuhash._common import arrays as _arrays
from gpuhash._common.streams import record_event, stream_context
from gpuhash.join import build_arrays
from gpuhash.join import pool as _join_pool
from gpuhash.join.dense import DenseTable
from gpuhash.join.engine import engine_for as join_engine_for
from gpuhash.join.fanout import estimate_fanout
from gpuhash.join.keys import Direct32, KeyEncoder, build_encoder, check_sides
from gpuhash.join.matches import _Matches
from gpuhash.join.plan import JoinPlan, plan_join, wants_fanout
from gpuhash.join.sides import Side, check_how, cross, slices
from gpuhash.table.format import TableSpec
from gpuhash.table.multimap import MultiMap


class RowTable:
    """The build side as a MultiMap from key code to build row number, filled and probed by
    the join kernels straight from the key columns (the join engine's build and probe), at
    load at most LOAD so a probe reads one bucket; 32-bit codes try a direct array first
    (``direct_words``), which spares the table its entries and a probe
    its bucket walk where the keys are dense and distinct. A table whose
    encoder may not hold every build key (``refit``: :class:`Direct32`) learns so from the
    first probe's unplaced count, then refits a :class:`KeyEncoder` and builds again."""

    LOAD = 0.5

    def __init__(self, encoder, columns: list[torch.Tensor], valid: torch.Tensor | None,
                 rows: int, device: torch.device, *, ordered: bool = False,
                 pooled: bool = False):
        self.rows, self.device = rows, device
        self._build = (columns, valid)
        self._pooled = pooled  # from and back to join/pool.py: gh.join's in-memory tables only
        self._fill(encoder, ordered=ordered)
        self._unique: bool | None = None

    def _fill(self, encoder, *, ordered: bool) -> None:
        """Build the table on the current stream. ``ordered``: probes may come on other
        streams (a prepared JoinBuild, or any probe after a refit, which another thread's probe
        may have caused), so each waits for an event after the build; one join's own probes
        run on its stream and need none."""
        array, ranked = direct_words(encoder, self.rows, self.device)
        spec = build_spec(encoder.key_dtype, self.rows, self.LOAD)
        spare = array + ranked + group_words(spec)
        multi = _join_pool.take(spec, self.device, spare_words=spare, pooled=self._pooled)
        kept = multi._state.caches
        # cut once a table: a kept one (join/pool.py) has them
        split, views = kept.get("_join_views", (None, None))
        if split != (array, ranked):
            words = multi._state.spare  # zeroed with the table
            views = (words[:array] if array else None,
                     words[array:array + ranked] if ranked else None, words[array + ranked:])
            kept["_join_views"] = ((array, ranked), views)
        direct, ranked_rows, groups = views
        join_engine_for(multi.device).build(multi._state, *encoder.kernel_input(*self._build),
                                       groups=groups, direct=direct, ranked=ranked_rows)
        ready = record_event(self.device) if ordered else None
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
        """Give the table to the next join of its size (join/pool.py): call when this join's
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


def direct_words(encoder, rows: int, device: torch.device) -> tuple[int, int]:
    """The words of the array a build tries before its hash table, its failed word included,
    and of a ranked array's base, rows and chunk sums (join/build_arrays.py: array_words; (0, 0):
    none). On a GPU only: on the CPU the dense table (join/dense.py) takes dense 32-bit keys, sized
    from their range, which a GPU would need a second host sync to learn. (The CPU engine has
    the arrays' operations too, as the CUDA engine's twin.)"""
    if device.type != "cuda" or encoder.key_dtype != torch.int32:
        return 0, 0
    return build_arrays.array_words(rows, encoder.code_span)


def group_words(spec: TableSpec) -> int:
    """Zeroed int64 words a join build keeps for grouping the rows of repeated codes
    (the join engine's build): the number of rows that repeat a code, the group array's
    fill, then a counter of the values' width a slot."""
    return 2 + -(-spec.num_slots * spec.value_bytes // 8)


@functools.lru_cache(maxsize=256)
def build_spec(key_dtype: torch.dtype, rows: int, load: float) -> TableSpec:
    """The spec of a build table of ``rows`` rows: MultiMap(capacity=rows,
    max_load_factor=load, growable=False)'s, row numbers as values (worked out once a size:
    a small join's host time is most of it). 4-byte values while a group start (below
    1.5 times the rows: the join engine's build) fits 31 bits."""
    value_dtype = torch.int32 if rows < 2**30 else torch.int64
    return TableSpec(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=(), multi=True,
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
        self._prepare(Side(right_keys, "right_keys", right_valid, "right_valid"), stream,
                      snapshot=True)

    @classmethod
    def _of(cls, side: Side, stream: Any = None, *, pooled: bool = False) -> JoinBuild:
        """A build of ``side`` for one join; ``pooled``: its table may come from, and must go
        back to, join/pool.py (``_table.hand_back()`` after the join's last probe)."""
        build = object.__new__(cls)
        build._prepare(side, stream, pooled=pooled)
        return build

    def _prepare(self, side: Side, stream: Any, *, snapshot: bool = False,
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
                           or RowTable(encoder, side.columns, side.valid, side.rows,
                                        side.device, ordered=snapshot, pooled=pooled))
            # the null rows, needed by nulls_equal probes only: found now for a prepared
            # build (the caller's mask may change later; finding them synchronises), on
            # first need inside one join call
            self._nulls = side.null_rows() if snapshot else None
            # a probe on another stream that samples the build side's keys waits for this
            self._ready = record_event(side.device) if snapshot else None

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
        how = check_how(how)
        probe = Side(left_keys, "left_keys", left_valid, "left_valid")
        check_sides(probe.columns, self._side.columns)
        key_bytes = 4 if self._table.encoder.key_dtype == torch.int32 else 8
        plan_for = functools.partial(plan_join, probe.rows, self.rows, how=how,
                                     key_bytes=key_bytes, device=self.device,
                                     memory_budget=memory_budget, build_fixed=True)
        with stream_context(stream, self.device):  # a sample of the keys is read there
            plan = with_fanout(plan_for(), plan_for, self._side, probe, ready=self._ready)
            if explain:
                print(plan)
            if how == "cross":
                result = cross(probe.rows, self.rows, self.device)
            else:
                result = self._match(probe, how, nulls_equal, plan.chunk_rows).assemble()
        if isinstance(result, tuple):
            return tuple(_arrays.to_kind(r, probe.kind) for r in result)
        return _arrays.to_kind(result, probe.kind)

    def _match(self, probe: Side, how: str, nulls_equal: bool, chunk_rows: int | None,
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
            chunks = slices(probe, chunk_rows)
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
            # block: join/cuda/engine.py) held by found_build alone, half of it dead
            matches.add_pairs(found_probe.add_(start) if start else found_probe, found_build)
        if null_pairs and matches.pairs:  # every null probe row meets every null build row
            nulls, build_nulls = probe.null_rows().to(self.device), self._null_rows()
            matches.add_pairs(nulls.repeat_interleave(build_nulls.shape[0]),
                              build_nulls.repeat(nulls.shape[0]))
            if matches.build_hit is not None and nulls.shape[0]:
                matches.build_hit[build_nulls] = 1
        return matches


def with_fanout(plan: JoinPlan, plan_for, build: Side, probe: Side, *,
                 ready: torch.cuda.Event | None = None) -> JoinPlan:
    """``plan``, or ``plan_for(fanout=...)`` (a plan of its own, never a shared one) where the
    estimated matches a probe row may change it (join/plan.py: wants_fanout). ``ready``: an
    event the current stream waits for before the build side's keys are sampled."""
    if not wants_fanout(plan, keys_on_gpu=build.device.type == "cuda"):
        return plan
    if ready is not None:  # the keys as the build left them
        torch.cuda.current_stream(build.device).wait_event(ready)
    fanout = estimate_fanout(build.columns, build.valid, probe.columns, probe.valid)
    return plan_for(fanout=fanout) if fanout > 1 else plan
