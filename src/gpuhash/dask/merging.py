"""``gh.dask.merge``: a join of two dask DataFrames, each output partition joined by
``gh.merge``.

Two ways to bring matching rows together:

* broadcast: one side, made a single partition, goes whole to every partition of the other
  side, which is not moved. Only a side whose unmatched rows the join drops can go
  (inner: either; left, semi, anti: the right; right: the left; outer: neither), since each
  partition would otherwise emit its own copy of that side's unmatched rows. With
  ``broadcast=None`` a side goes when it has one partition, or (as Dask decides its own
  joins, by partition counts) when it has fewer than half of log2 of the other side's.
* shuffle: both sides hash-partitioned on their key columns by Dask's shuffle into the same
  number of partitions, so that rows of equal keys meet in partitions of the same number;
  Dask hashes numbers as float64, so int and float keys of equal value meet too.

Null keys never match (unless ``nulls_equal=True``), as in ``gh.merge``, SQL and polars,
not pandas.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import pandas as pd

from gpuhash.dask.frames import (
    check_columns,
    conform,
    dask_frame,
    threads_by_host,
    with_task_cores,
)
from gpuhash.join.key_names import resolve_keys

How = Literal["inner", "left", "right", "outer", "semi", "anti"]
HOWS = ("inner", "left", "right", "outer", "semi", "anti")
# the sides a join may broadcast: those whose unmatched rows it drops
BROADCASTABLE = {"inner": ("left", "right"), "left": ("right",), "semi": ("right",),
                 "anti": ("right",), "right": ("left",), "outer": ()}
BROADCAST_BIAS = 0.5  # Dask's: a side of n partitions goes if n < log2(other's) * this


def merge(left: Any, right: Any, *, on: str | list[str] | None = None,
          left_on: str | list[str] | None = None, right_on: str | list[str] | None = None,
          how: How = "inner", suffixes: tuple[str | None, str | None] = ("_x", "_y"),
          nulls_equal: bool = False, indicator: bool | str = False,
          broadcast: bool | None = None, npartitions: int | None = None,
          shuffle_method: str | None = None, device: Any = None) -> Any:
    """Join two dask DataFrames on key columns; a lazy dask DataFrame, each partition
    joined by :func:`gpuhash.merge`.

    Args:
        left, right: dask DataFrames (of pandas partitions).
        on: key column name(s) of both sides; or ``left_on`` and ``right_on``; by default
            the names the sides share.
        how: ``"inner"``, ``"left"``, ``"right"``, ``"outer"``, ``"semi"`` or ``"anti"``
            (the left rows with / without a match).
        suffixes, nulls_equal, indicator: as in :func:`gpuhash.merge`.
        broadcast: True: send the side a join may broadcast (the one with fewer partitions
            for inner) whole to every partition of the other; False: shuffle both sides;
            None: broadcast a side of one partition, or of few partitions against many
            (Dask's rule), else shuffle. See the module docstring.
        npartitions: the shuffle's number of partitions (default: the larger side's).
        shuffle_method: Dask's shuffle method (``"tasks"``, ``"p2p"``, ``"disk"``;
            default: Dask's choice).
        device: where each partition's keys are matched (default: the worker's GPU where
            it has one, else the CPU).

    Returns:
        A dask DataFrame: the left side's columns, then the right side's, named as
        :func:`gpuhash.merge` names them for pandas. Rows come in no particular order, and
        each partition's index starts at 0.

    Example:
        >>> import pandas as pd, dask.dataframe as dd, gpuhash as gh
        >>> orders = dd.from_pandas(pd.DataFrame({"id": [1, 2, 3, 1], "qty": [5, 6, 7, 8]}),
        ...                         npartitions=2)
        >>> names = dd.from_pandas(pd.DataFrame({"id": [1, 3], "name": ["ada", "cy"]}),
        ...                        npartitions=1)
        >>> out = gh.dask.merge(orders, names, on="id", how="left", device="cpu")
        >>> out.compute().sort_values("qty")["name"].fillna("-").tolist()
        ['ada', '-', 'cy', 'ada']
    """
    left, right = dask_frame(left, "left"), dask_frame(right, "right")
    if how not in HOWS:
        raise ValueError(f"how must be one of {', '.join(map(repr, HOWS))}, got {how!r}")
    if broadcast not in (None, True, False):
        raise ValueError(f"broadcast must be True, False or None (decide), got {broadcast!r}")
    if npartitions is not None and (not isinstance(npartitions, int) or npartitions < 1):
        raise ValueError(f"npartitions must be a positive int or None, got {npartitions!r}")
    left_keys, right_keys = _key_names(left, right, on, left_on, right_on)
    options = dict(left_on=left_keys, right_on=right_keys, how=how, suffixes=suffixes,
                   nulls_equal=nulls_equal, indicator=indicator, device=device)
    meta = _meta(left._meta, right._meta, options)
    import dask.dataframe as dd

    side = _broadcast_side(how, left.npartitions, right.npartitions, broadcast)
    if left.npartitions == right.npartitions == 1:
        pass  # the two partitions meet as they are
    elif side == "right":
        right = right.repartition(npartitions=1) if right.npartitions > 1 else right
    elif side == "left":
        left = left.repartition(npartitions=1) if left.npartitions > 1 else left
    else:
        parts = npartitions or max(left.npartitions, right.npartitions)
        left = left.shuffle(on=left_keys, npartitions=parts, shuffle_method=shuffle_method)
        right = right.shuffle(on=right_keys, npartitions=parts, shuffle_method=shuffle_method)
    # align_dataframes=False: partitions pair up by number (a one-partition side goes to
    # every partition), not by index divisions, which a shuffle does not keep
    task = with_task_cores(_merge_partition, threads_by_host())
    return dd.map_partitions(task, left, right, meta=meta, options=options,
                             out_meta=meta, align_dataframes=False, enforce_metadata=True,
                             transform_divisions=False, clear_divisions=True)


def _key_names(left, right, on, left_on, right_on) -> tuple[list[str], list[str]]:
    left_keys, right_keys = resolve_keys(list(left.columns), list(right.columns), on, left_on,
                                         right_on)
    check_columns(left_keys, left, "on" if on is not None else "left_on", "left")
    check_columns(right_keys, right, "on" if on is not None else "right_on", "right")
    return left_keys, right_keys


def _broadcast_side(how: str, left_parts: int, right_parts: int,
                    broadcast: bool | None) -> str | None:
    """The side to send whole to every partition of the other, or None to shuffle both."""
    sides = sorted(BROADCASTABLE[how], key=lambda s: left_parts if s == "left" else right_parts)
    if broadcast is False:
        return None
    if not sides:
        if broadcast:
            raise ValueError(f"how={how!r} cannot broadcast a side: each partition would "
                             f"repeat that side's unmatched rows; leave broadcast=None")
        return None
    side = sides[0]
    if broadcast:
        return side
    small, large = (left_parts, right_parts) if side == "left" else (right_parts, left_parts)
    return side if small == 1 or small < math.log2(large) * BROADCAST_BIAS else None


def _meta(left_meta: pd.DataFrame, right_meta: pd.DataFrame, options: dict) -> pd.DataFrame:
    """The output's empty frame, with the dtypes of a join whose rows both match and (where
    ``how`` keeps them) lack a side: what pandas gives the concatenated data in general."""
    from dask.dataframe.utils import meta_nonempty

    from gpuhash.join.merge import merge as gh_merge

    left, right = meta_nonempty(left_meta), meta_nonempty(right_meta)
    how = options["how"]
    pairs = [(left, right)]
    if how in ("left", "outer"):
        pairs.append((left, right.iloc[:0]))  # left rows lacking the right side
    if how in ("right", "outer"):
        pairs.append((left.iloc[:0], right))
    options = {**options, "device": "cpu"}  # a handful of rows: no device for them
    answers = [gh_merge(a, b, **options) for a, b in pairs]
    return pd.concat(answers, ignore_index=True).iloc[:0]


def _merge_partition(left: pd.DataFrame, right: pd.DataFrame, *, options: dict,
                     out_meta: pd.DataFrame) -> pd.DataFrame:
    from gpuhash.join.merge import merge as gh_merge

    return conform(gh_merge(left, right, **options), out_meta)
