"""Hash joins of key arrays: ``join``, ``JoinBuild`` and ``explain_join``.

A join returns gather maps, int64 row numbers into each side, rather than joined columns
(``gh.merge`` gathers columns from them). The build side becomes a MultiMap from key code to
row number on the keys' device, filled and probed by the engines' join operations straight
from the key columns, so the same code runs on the CUDA and the CPU engines. The strategy (one
table, the probe side in chunks, both sides partitioned, partitions in shared memory, host keys
streamed through a GPU) comes from the cost model in join/plan.py; this module owns the
semantics every strategy shares: which rows match and how nulls behave (join/matches.py
assembles each ``how`` from the matches).

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
from gpuhash._common.arrays import resolve_device as _resolve_device
from gpuhash._common.streams import stream_context
from gpuhash.join.build import JoinBuild, with_fanout
from gpuhash.join.plan import JoinPlan, plan_join, shared_plan
from gpuhash.join.sides import Side, check_how, key_bytes, sides
from gpuhash.join.strategies import STRATEGIES
from gpuhash.join.strategies.small import small_join

__all__ = ["JoinBuild", "explain_join", "join"]


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
    how = check_how(how)
    left, right = sides(left_keys, right_keys, left_valid, right_valid)
    target = _target(device, left)
    with stream_context(stream, target):  # where join reads its sample of the keys
        return _plan(left, right, how, memory_budget, target)


def _target(device: Any, left: Side) -> torch.device:
    """The device a join runs on: ``device``, or the keys' device."""
    return left.device if device is None else _resolve_device(device)


def _row_bytes(side: Side) -> int:
    """Bytes of one row of a side's key columns and null mask."""
    return sum(c.element_size() for c in side.columns) + (side.valid is not None)


def _plan(left: Side, right: Side, how: str, memory_budget: int | None,
          target: torch.device, *, shared: bool = False) -> JoinPlan:
    """The join's plan, made again with the estimated matches a probe row where those may
    change it (join/plan.py: wants_fanout); ``shared``: one the caller only reads, which may
    be the plan object of an earlier call (join/plan.py: shared_plan). Run on the operation's
    stream: the estimate reads a sample of the keys."""
    if shared and memory_budget is None and target == left.device:
        plan_for = functools.partial(plan_join, left.rows, right.rows, how=how,
                                     key_bytes=key_bytes(left, right), device=target)
        plan = shared_plan(left.rows, right.rows, how=how, key_bytes=key_bytes(left, right),
                           device=target)
    else:
        plan_for = functools.partial(
            plan_join, left.rows, right.rows, how=how, key_bytes=key_bytes(left, right),
            device=target, memory_budget=memory_budget,
            data_device=None if target == left.device else left.device,
            input_bytes=max(_row_bytes(left), _row_bytes(right)))
        plan = plan_for()
    build, probe = (left, right) if plan.build_side == "left" else (right, left)
    return with_fanout(plan, plan_for, build, probe)


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

    ``how``: ``"inner"``, ``"left"``, ``"right"``, ``"full"`` (``"outer"`` too) return
    ``(left_rows, right_rows)`` with -1 on the side a row lacks; ``"semi"`` / ``"anti"``
    return ``left_rows`` only; ``"cross"`` every pair. Many-to-many keys give every pair. The
    order of the rows and pairs is unspecified for every ``how`` (compare them sorted; the
    GPU's probe writes them as its threads find them).

    ``memory_budget`` (bytes; default a share of the device's free memory) bounds the
    working set: past it the probe side is streamed in chunks, or both sides are partitioned
    by key hash and joined part by part, with identical results. On a GPU, sides of at least
    16M rows each are split into many small partitions joined in shared memory
    (``gpu-radix``), where one table would be far past L2. ``device``:
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
    how = check_how(how)
    if (left_valid is None and right_valid is None and memory_budget is None and device is None
            and stream is None and not explain):
        result = small_join(left_keys, right_keys, how)
        if result is not None:
            return result
    left, right = sides(left_keys, right_keys, left_valid, right_valid)
    target = _target(device, left)
    home = left.device
    with stream_context(stream, target):  # the copies too, when the keys move
        plan = _plan(left, right, how, memory_budget, target, shared=True)  # may sample keys
        if explain:
            print(plan)
        if plan.strategy != "out-of-core-streams" and target != home:
            left, right = left.to(target), right.to(target)  # results come back below
        run = STRATEGIES[plan.strategy].run
        result = run(left, right, plan, nulls_equal)
        result = tuple(r.to(home) for r in result) if isinstance(result, tuple) else (
            result.to(home))
    if isinstance(result, tuple):
        return tuple(_arrays.to_kind(r, left.kind) for r in result)
    return _arrays.to_kind(result, left.kind)
