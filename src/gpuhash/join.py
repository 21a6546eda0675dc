"""Hash joins of key arrays: ``join``, ``JoinBuild`` and ``explain_join``.

A join returns gather maps, int64 row numbers into each side, rather than joined columns
(``gh.merge`` gathers columns from them). The build side becomes a gpuhash table on the keys'
device (a HashMap of row ids when its keys are unique, else a MultiMap) and the probe side is
looked up in it, so the same code runs on the CUDA and the CPU engines. The strategy (in
memory, probe streamed in chunks, both sides partitioned, tiny inputs on the CPU) comes from
the cost model in ``_join_plan``; this module owns the semantics every strategy shares: which
rows match, how nulls behave, and how each ``how`` is assembled from the matching pairs.

Example:
    >>> import torch, gpuhash as gh
    >>> left, right = gh.join(torch.tensor([1, 2, 2, 5]), torch.tensor([2, 1, 7]))
    >>> sorted(zip(left.tolist(), right.tolist()))
    [(0, 1), (1, 0), (2, 0)]
"""

from __future__ import annotations

from typing import Any

import torch

from . import _arrays, _join_plan
from ._join_keys import KeyEncoder, check_sides, check_valid, key_columns
from ._join_plan import HOWS, JoinPlan, plan_join
from ._table import stream_context
from .map import HashMap
from .multimap import MultiMap

_MIX = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: spreads codes over the top bits
_PART_SHIFT = 54             # the top 10 bits pick one of up to 1024 parts


def _take(tensor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``tensor[rows]`` by index_select: on the CPU, torch's indexing by a tensor costs about
    8 ms a call whatever its size (torch 2.13, 2 cores), index_select microseconds."""
    return tensor.index_select(0, rows)


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

    def slice(self, start: int, stop: int) -> _Side:
        part = object.__new__(_Side)
        part.columns = [c[start:stop] for c in self.columns]
        part.valid = None if self.valid is None else self.valid[start:stop]
        part.rows, part.device, part.kind = stop - start, self.device, self.kind
        return part

    def to(self, device: torch.device) -> _Side:
        moved = object.__new__(_Side)
        moved.columns = [c.to(device) for c in self.columns]
        moved.valid = None if self.valid is None else self.valid.to(device)
        moved.rows, moved.device, moved.kind = self.rows, device, self.kind
        return moved

    def null_rows(self) -> torch.Tensor:
        if self.valid is None:
            return torch.zeros(0, dtype=torch.int64, device=self.device)
        return (~self.valid).nonzero().squeeze(1)


class _RowTable:
    """A table from key codes to build row numbers: a HashMap while the codes are distinct
    (one probe, no count pass), a MultiMap otherwise."""

    def __init__(self, codes: torch.Tensor, rows: torch.Tensor):
        device, n = codes.device, codes.shape[0]
        narrow = rows.shape[0] == 0 or int(rows.max()) < 2**31
        value_dtype = torch.int32 if narrow else torch.int64
        values = rows.to(value_dtype)
        self.map, self.multi = None, None
        unique = HashMap(key_dtype=codes.dtype, value_dtype=value_dtype, capacity=max(n, 1),
                         device=device, duplicates="any")
        if bool(unique.insert(codes, values).all()):  # one new key per row: all distinct
            self.map = unique
            return
        self.multi = MultiMap(key_dtype=codes.dtype, value_dtype=value_dtype,
                              capacity=max(n, 1), device=device)
        self.multi.insert(codes, values)

    @property
    def unique(self) -> bool:
        return self.map is not None

    def pairs(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(probe position, build row) for every match; synchronises once."""
        if self.map is not None:
            found_rows, found = self.map.find(codes, default=-1)
            hits = found.nonzero().squeeze(1)
            return hits, _take(found_rows, hits).to(torch.int64)
        where, index = self.multi.find_all(codes)
        return where, _take(self.multi.values, index).to(torch.int64)

    def matched(self, codes: torch.Tensor) -> torch.Tensor:
        if self.map is not None:
            return self.map.contains(codes)
        return self.multi.count(codes) > 0


class _Matches:
    """What a strategy found: matching pairs (inner join), or a matched mask of the left rows
    (semi / anti, which never materialise pairs: one key in half the rows stays cheap)."""

    def __init__(self, device: torch.device, *, pairs: bool):
        self.device = device
        self.left: list[torch.Tensor] = []
        self.right: list[torch.Tensor] = []
        self.hit: list[tuple[torch.Tensor, torch.Tensor]] = []  # (left rows, matched)
        self.pairs = pairs

    def swapped(self) -> _Matches:
        other = _Matches(self.device, pairs=self.pairs)
        other.left, other.right = self.right, self.left
        return other

    def assemble(self, how: str, left_rows: int, right_rows: int):
        empty = torch.zeros(0, dtype=torch.int64, device=self.device)
        if how in ("semi", "anti"):
            matched = torch.zeros(left_rows, dtype=torch.bool, device=self.device)
            for rows, hit in self.hit:
                matched[rows] = hit
            return (matched if how == "semi" else ~matched).nonzero().squeeze(1)
        left = torch.cat(self.left) if self.left else empty
        right = torch.cat(self.right) if self.right else empty
        pieces_l, pieces_r = [left], [right]
        if how in ("left", "full"):
            missing = _unmatched(left, left_rows)
            pieces_l.append(missing)
            pieces_r.append(torch.full_like(missing, -1))
        if how in ("right", "full"):
            missing = _unmatched(right, right_rows)
            pieces_l.append(torch.full_like(missing, -1))
            pieces_r.append(missing)
        return torch.cat(pieces_l), torch.cat(pieces_r)


def _unmatched(rows: torch.Tensor, total: int) -> torch.Tensor:
    seen = torch.zeros(total, dtype=torch.bool, device=rows.device)
    seen[rows] = True
    return (~seen).nonzero().squeeze(1)


class JoinBuild:
    """A prepared build side (the right side of a join), probed by any number of left sides.

    Keys are a 1-D integer array or a tuple of them (multi-column keys), torch / NumPy /
    CuPy / DLPack; ``right_valid`` marks null rows (False). The table lives on the keys'
    device. Building synchronises with the device a few times (key ranges, a uniqueness
    test); a probe once or twice (Python must learn the output size).

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
        self._prepare(_Side(right_keys, "right_keys", right_valid, "right_valid"), stream)

    @classmethod
    def _of(cls, side: _Side, stream: Any = None) -> JoinBuild:
        build = object.__new__(cls)
        build._prepare(side, stream)
        return build

    def _prepare(self, side: _Side, stream: Any) -> None:
        self._side = side
        self._stream = stream
        with stream_context(stream, side.device):
            self._encoder = KeyEncoder(side.columns, side.valid)
            codes, ok = self._encoder.encode(side.columns)
            usable = ok if side.valid is None else ok & side.valid
            rows = usable.nonzero().squeeze(1)
            self._table = _RowTable(_take(codes, rows), rows)
            self._nulls = side.null_rows()

    @property
    def rows(self) -> int:
        """Rows of the build side, nulls included."""
        return self._side.rows

    @property
    def unique(self) -> bool:
        """True when the build side's (non-null) keys are all distinct."""
        return self._table.unique

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
        key_bytes = 4 if self._encoder.key_dtype == torch.int32 else 8
        plan = plan_join(probe.rows, self.rows, how=how, key_bytes=key_bytes,
                         device=self.device, memory_budget=memory_budget, build_fixed=True)
        if plan.strategy == "cpu-small":  # the table is built here already: keep it here
            plan.strategy, plan.device = "hash-table", str(self.device)
            plan.why += " The build is prepared on its device, so the probe runs there."
        if explain:
            print(plan)
        with stream_context(stream, self.device):
            if how == "cross":
                result = _cross(probe.rows, self.rows, self.device)
            else:
                matches = self._match(probe, how, nulls_equal, plan.chunk_rows)
                result = matches.assemble(how, probe.rows, self.rows)
        if isinstance(result, tuple):
            return tuple(_arrays.to_kind(r, probe.kind) for r in result)
        return _arrays.to_kind(result, probe.kind)

    def _match(self, probe: _Side, how: str, nulls_equal: bool,
               chunk_rows: int | None, matches: _Matches | None = None) -> _Matches:
        """Every match of ``probe`` (pairs, or the matched mask for semi / anti), the probe
        side taken ``chunk_rows`` at a time when given."""
        pairs = how not in ("semi", "anti")
        matches = matches or _Matches(self.device, pairs=pairs)
        step = chunk_rows or max(probe.rows, 1)
        for start in range(0, probe.rows, step):
            part = probe.slice(start, min(start + step, probe.rows)) if chunk_rows else probe
            codes, ok = self._encoder.encode(part.columns)
            usable = ok if part.valid is None else ok & part.valid
            rows = usable.nonzero().squeeze(1)
            if pairs:
                where, right = self._table.pairs(_take(codes, rows))
                matches.left.append(_take(rows, where) + start)
                matches.right.append(right)
            else:
                matches.hit.append((rows + start, self._table.matched(_take(codes, rows))))
        if nulls_equal and self._nulls.shape[0]:
            nulls = probe.null_rows()
            if pairs:
                left = nulls.repeat_interleave(self._nulls.shape[0])
                matches.left.append(left)
                matches.right.append(self._nulls.repeat(nulls.shape[0]))
            else:
                matches.hit.append((nulls, torch.ones_like(nulls, dtype=torch.bool)))
        return matches


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
                 left_valid: Any = None, right_valid: Any = None,
                 memory_budget: int | None = None) -> JoinPlan:
    """The plan :func:`join` would follow for these arguments, without joining.

    Example:
        >>> import torch, gpuhash as gh
        >>> plan = gh.explain_join(torch.arange(10), torch.arange(1000))
        >>> plan.strategy, plan.build_side
        ('hash-table', 'left')
    """
    how = _check_how(how)
    left, right = _sides(left_keys, right_keys, left_valid, right_valid)
    return plan_join(left.rows, right.rows, how=how, key_bytes=_key_bytes(left, right),
                     device=left.device, memory_budget=memory_budget)


def join(left_keys: Any, right_keys: Any, *, how: str = "inner", left_valid: Any = None,
         right_valid: Any = None, nulls_equal: bool = False, memory_budget: int | None = None,
         explain: bool = False, stream: Any = None) -> Any:
    """Join two sides on integer keys; returns gather maps (int64 row numbers).

    Keys: a 1-D integer array or a tuple of them (multi-column keys), torch / NumPy / CuPy /
    DLPack, both sides on one device; results come back as the left keys' kind. Key dtypes
    may differ in width but not in signedness (int32 joins int64 by value; int64 against
    uint64 raises TypeError naming both). ``left_valid`` / ``right_valid`` (bool per row,
    False = null): null keys never match, unless ``nulls_equal=True``, where a null matches
    every null.

    ``how``: ``"inner"``, ``"left"``, ``"right"``, ``"full"`` (outer) return
    ``(left_rows, right_rows)`` with -1 on the side a row lacks; ``"semi"`` / ``"anti"``
    return ``left_rows`` only (in ascending order); ``"cross"`` every pair. Many-to-many keys
    give every pair. The order of the pairs is unspecified (compare sorted pairs).

    ``memory_budget`` (bytes; default a share of the device's free memory) bounds the
    working set: past it the probe side is streamed in chunks, or both sides are partitioned
    by key hash and joined part by part, with identical results. ``explain=True`` prints the
    plan (:func:`explain_join` returns it). Synchronises with the device (output sizes).

    Example:
        >>> import torch, gpuhash as gh
        >>> keys = torch.tensor([1, 2, 3])
        >>> gh.join(keys, torch.tensor([3, 4]), how="full")
        (tensor([ 2,  0,  1, -1]), tensor([ 0, -1, -1,  1]))
        >>> gh.join(keys, torch.tensor([3, 4]), how="anti").tolist()
        [0, 1]
    """
    how = _check_how(how)
    left, right = _sides(left_keys, right_keys, left_valid, right_valid)
    plan = plan_join(left.rows, right.rows, how=how, key_bytes=_key_bytes(left, right),
                     device=left.device, memory_budget=memory_budget)
    if explain:
        print(plan)
    with stream_context(stream, left.device):
        run = _join_plan.STRATEGIES[plan.strategy].run
        result = run(left, right, plan, nulls_equal)
    if isinstance(result, tuple):
        return tuple(_arrays.to_kind(r, left.kind) for r in result)
    return _arrays.to_kind(result, left.kind)


def _run_hash_table(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    # with the left side as build side, the right rows probe it and the pairs swap back
    build, probe = (left, right) if plan.build_side == "left" else (right, left)
    matches = JoinBuild._of(build)._match(probe, plan.how, nulls_equal, plan.chunk_rows)
    if plan.build_side == "left":
        matches = matches.swapped()
    return matches.assemble(plan.how, left.rows, right.rows)


def _run_cpu_small(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    device = left.device
    cpu = torch.device("cpu")
    result = _run_hash_table(left.to(cpu), right.to(cpu), plan, nulls_equal)
    if isinstance(result, tuple):
        return tuple(r.to(device) for r in result)
    return result.to(device)


def _parts_of(codes: torch.Tensor, parts: int) -> torch.Tensor:
    mixed = codes.to(torch.int64) * _MIX
    return (mixed >> _PART_SHIFT) & (parts - 1)


def _run_partitioned(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    """Both sides split by the hash of their key codes (the encoder is fitted once, on the
    whole build side, so equal keys get equal codes in every part); each part's table is
    built, probed and dropped before the next. Nulls are matched once, outside the parts."""
    build, probe = (left, right) if plan.build_side == "left" else (right, left)
    encoder = KeyEncoder(build.columns, build.valid)
    sides = []
    for side in (build, probe):
        codes, ok = encoder.encode(side.columns)
        usable = ok if side.valid is None else ok & side.valid
        rows = usable.nonzero().squeeze(1)
        codes = _take(codes, rows)
        sides.append((codes, rows, _parts_of(codes, plan.parts)))
    (b_codes, b_rows, b_part), (p_codes, p_rows, p_part) = sides
    matches = _Matches(build.device, pairs=plan.how not in ("semi", "anti"))
    step = plan.chunk_rows
    for part in range(plan.parts):
        mine = (b_part == part).nonzero().squeeze(1)
        table = _RowTable(_take(b_codes, mine), _take(b_rows, mine))
        theirs = (p_part == part).nonzero().squeeze(1)
        rows, codes = _take(p_rows, theirs), _take(p_codes, theirs)
        for start in range(0, rows.shape[0], step or max(rows.shape[0], 1)):
            chunk = slice(start, start + step) if step else slice(None)
            if matches.pairs:
                where, found = table.pairs(codes[chunk])
                matches.left.append(_take(rows[chunk], where))
                matches.right.append(found)
            else:
                matches.hit.append((rows[chunk], table.matched(codes[chunk])))
    if nulls_equal:
        nulls_b, nulls_p = build.null_rows(), probe.null_rows()
        if nulls_b.shape[0] and matches.pairs:
            matches.left.append(nulls_p.repeat_interleave(nulls_b.shape[0]))
            matches.right.append(nulls_b.repeat(nulls_p.shape[0]))
        elif nulls_b.shape[0]:
            matches.hit.append((nulls_p, torch.ones_like(nulls_p, dtype=torch.bool)))
    if plan.build_side == "left":
        matches = matches.swapped()
    return matches.assemble(plan.how, left.rows, right.rows)


def _run_cross(left: _Side, right: _Side, plan: JoinPlan, nulls_equal: bool):
    return _cross(left.rows, right.rows, left.device)


_join_plan.register("hash-table", _join_plan.STRATEGIES["hash-table"].description,
                    _run_hash_table)
_join_plan.register("hash-table-chunked",
                    _join_plan.STRATEGIES["hash-table-chunked"].description, _run_hash_table)
_join_plan.register("hash-partitioned", _join_plan.STRATEGIES["hash-partitioned"].description,
                    _run_partitioned)
_join_plan.register("cpu-small", _join_plan.STRATEGIES["cpu-small"].description,
                    _run_cpu_small)
_join_plan.register("cross-product", _join_plan.STRATEGIES["cross-product"].description,
                    _run_cross)
