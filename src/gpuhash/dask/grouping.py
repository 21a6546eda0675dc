"""``gh.dask.groupby``: a group-by of a dask DataFrame, each piece grouped by ``gh.groupby``.

Two plans, chosen by the aggregations (``method="auto"``):

* tree: each partition grouped into partial aggregates that merge exactly (count, size and
  sum add up; min, max, any, all take their kind again; first and last the first / last
  non-null partial in partition order; mean is a sum and a count; var and std a count, a
  mean and a var merged by Chan's formula: groupby/stream.py, which ``chunk_rows`` uses
  too). The partials of ``split_every`` partitions are merged into one table of partials,
  level by level, and the last merge gives the answer: one partition, which fits when the
  groups are fewer than the rows, as a group-by's summary usually is. Only the partials
  (pyarrow Tables, one row a group) travel between tasks.
* shuffle: the rows hash-partitioned on ``by`` by Dask's shuffle, so that each group's rows
  are in one partition, and each partition grouped whole. The median, quantiles, nunique,
  corr and top / bottom k need a group's rows together and take this plan; so can the
  others, for many groups (``method="shuffle"``): the answer keeps the partition count.
  First and last are refused here: the shuffle does not keep the rows' order.

The answer has gh.groupby's columns and dtypes for a pandas frame (the keys as columns,
then one column an aggregation) and the rows of gh.groupby on the whole frame, in no
particular order unless ``sort=True`` (then in one partition, by the keys, nulls last).
Each partition's index starts at 0.
"""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd

from gpuhash.dask.frames import (
    check_columns,
    column_names,
    conform,
    dask_frame,
    threads_by_host,
    with_task_cores,
)
from gpuhash.groupby.specs import AggSpec, parse_aggs

Method = Literal["auto", "tree", "shuffle"]
METHODS = ("auto", "tree", "shuffle")
# aggregations whose partials merge exactly (groupby/stream.py); the others need the shuffle
TREE_OK = ("count", "size", "sum", "min", "max", "any", "all", "first", "last", "mean", "var",
           "std")
ROW_ORDER = ("first", "last")  # hang on the rows' order: the tree keeps it, a shuffle does not


def groupby(ddf: Any, by: str | list[str], aggs: dict[str, Any], *, sort: bool = False,
            dropna: bool = False, method: Method = "auto", split_every: int = 8,
            npartitions: int | None = None, shuffle_method: str | None = None,
            device: Any = None) -> Any:
    """Group the rows of a dask DataFrame by key columns and aggregate value columns; a lazy
    dask DataFrame, each piece grouped by :func:`gpuhash.groupby`.

    Args:
        ddf: a dask DataFrame (of pandas partitions).
        by: the key column name(s).
        aggs: value column -> aggregation(s), as :func:`gpuhash.groupby` takes them
            (``"sum"``, ``["mean", "std"]``, ``("quantile", 0.9)``, ...).
        sort: the groups ordered by the keys (nulls last), in one partition; else in no
            particular order.
        dropna: drop rows whose key is null; else a null key is a group of its own.
        method: ``"tree"`` (partials reduced as a tree, one output partition),
            ``"shuffle"`` (rows shuffled on ``by``, each partition grouped whole) or
            ``"auto"``: the tree when every aggregation's partials merge (count, size, sum,
            min, max, any, all, first, last, mean, var, std), else the shuffle.
        split_every: how many partitions' partials a tree level merges at once (>= 2).
        npartitions: the shuffle's number of partitions (default: the input's).
        shuffle_method: Dask's shuffle method (default: Dask's choice).
        device: where each piece is grouped (default: the worker's GPU where it has one,
            else the CPU).

    Returns:
        A dask DataFrame with the key columns, then one column per aggregation, named and
        typed as :func:`gpuhash.groupby` gives them for the concatenated pandas frame.

    Example:
        >>> import pandas as pd, dask.dataframe as dd, gpuhash as gh
        >>> frame = pd.DataFrame({"k": ["a", "b", "a", "b", "a"], "v": [1., 2., 3., 4., 8.]})
        >>> ddf = dd.from_pandas(frame, npartitions=2)
        >>> gh.dask.groupby(ddf, "k", {"v": ["sum", "mean"]}, sort=True,
        ...                 device="cpu").compute()
           k  v_sum  v_mean
        0  a   12.0     4.0
        1  b    6.0     3.0
        >>> gh.dask.groupby(ddf, "k", {"v": "median"}, sort=True, device="cpu").compute()
           k    v
        0  a  3.0
        1  b  3.0
    """
    ddf = dask_frame(ddf, "ddf")
    keys = column_names(by, "by")
    check_columns(keys, ddf, "by")
    specs = parse_aggs(aggs, tuple(keys))
    wanted = list(dict.fromkeys(keys + [s.column for s in specs] + [
        s.parameter for s in specs if s.name == "corr"]))
    check_columns(wanted, ddf, "aggs")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}, got "
                         f"{method!r}")
    whole = sorted({s.name for s in specs if s.name not in TREE_OK})
    if method == "tree" and whole:
        raise ValueError(f"method='tree' cannot compute {', '.join(whole)}: they need every "
                         f"row of a group at once; use method='shuffle' (or 'auto')")
    if not isinstance(split_every, int) or isinstance(split_every, bool) or split_every < 2:
        raise ValueError(f"split_every must be an int >= 2, got {split_every!r}")
    if npartitions is not None and (not isinstance(npartitions, int) or npartitions < 1):
        raise ValueError(f"npartitions must be a positive int or None, got {npartitions!r}")
    shuffle = method == "shuffle" or (method == "auto" and bool(whole))
    in_order = sorted({s.name for s in specs if s.name in ROW_ORDER})
    if shuffle and in_order:
        raise ValueError(f"{', '.join(in_order)} follow the rows' order, which Dask's shuffle "
                         f"does not keep: ask for them with method='tree' (or 'auto'), in a "
                         f"call of their own if other aggregations need the shuffle")
    ddf = ddf[wanted]
    meta = _meta(ddf._meta, keys, aggs, sort=sort, dropna=dropna)
    if shuffle:
        return _shuffled(ddf, keys, aggs, meta, sort=sort, dropna=dropna, device=device,
                         npartitions=npartitions, shuffle_method=shuffle_method)
    return _tree(ddf, keys, specs, meta, sort=sort, dropna=dropna, device=device,
                 split_every=split_every)


def _meta(frame: pd.DataFrame, keys: list[str], aggs: Any, *, sort: bool,
          dropna: bool) -> pd.DataFrame:
    """The answer's empty frame: gh.groupby of a few made-up rows of the input's dtypes."""
    from dask.dataframe.utils import meta_nonempty

    from gpuhash.groupby.api import groupby as gh_groupby

    answer = gh_groupby(meta_nonempty(frame), keys, aggs, sort=sort, dropna=dropna,
                        device="cpu")
    return answer.iloc[:0]


def _shuffled(ddf, keys, aggs, meta, *, sort, dropna, device, npartitions, shuffle_method):
    parts = npartitions or ddf.npartitions
    shuffled = ddf.shuffle(on=keys, npartitions=parts, shuffle_method=shuffle_method)
    task = with_task_cores(_group_partition, threads_by_host())
    out = shuffled.map_partitions(task, keys=keys, aggs=aggs, dropna=dropna,
                                  device=device, out_meta=meta, meta=meta,
                                  transform_divisions=False, clear_divisions=True)
    if not sort:
        return out
    # the groups' order is global: the (few) answer rows meet in one partition
    return out.repartition(npartitions=1).map_partitions(
        _sorted, keys=keys, meta=meta, transform_divisions=False)


def _group_partition(frame: pd.DataFrame, *, keys, aggs, dropna, device,
                     out_meta) -> pd.DataFrame:
    from gpuhash.groupby.api import groupby as gh_groupby

    return conform(gh_groupby(frame, keys, aggs, dropna=dropna, device=device), out_meta)


def _sorted(frame: pd.DataFrame, *, keys: list[str]) -> pd.DataFrame:
    return frame.sort_values(keys, na_position="last", kind="stable", ignore_index=True)


def _tree(ddf, keys: list[str], specs: list[AggSpec], meta, *, sort, dropna, device,
          split_every):
    import dask
    import dask.dataframe as dd

    from gpuhash.groupby.stream import partial_plan

    plan, asked = partial_plan(specs)
    threads = threads_by_host()
    chunk = dask.delayed(with_task_cores(_chunk, threads), pure=True)
    combine = dask.delayed(with_task_cores(_combine, threads), pure=True)
    level = [chunk(part, keys, plan, asked, dropna=dropna, device=device)
             for part in ddf.to_delayed()]
    while len(level) > split_every:
        level = [combine(level[i:i + split_every], keys, specs, plan, dropna=dropna,
                         device=device) for i in range(0, len(level), split_every)]
    finish = dask.delayed(with_task_cores(_finish, threads), pure=True)
    answer = finish(level, keys, specs, plan, meta, sort=sort, dropna=dropna, device=device)
    return dd.from_delayed([answer], meta=meta, verify_meta=False)


def _chunk(frame: pd.DataFrame, keys, plan, asked, *, dropna, device):
    """A partition's partial aggregates, a pyarrow Table."""
    from gpuhash.groupby.stream import chunk_partials
    from gpuhash.join.frames import PANDAS, to_arrow

    return chunk_partials(to_arrow(frame, PANDAS), keys, plan, asked, dropna=dropna,
                          device=device)


def _concat(partials: list):
    import pyarrow as pa

    return pa.concat_tables(partials, promote_options="permissive")


def _combine(partials: list, keys, specs, plan, *, dropna, device):
    from gpuhash.groupby.stream import combine_partials

    return combine_partials(_concat(partials), keys, specs, plan, dropna=dropna, device=device)


def _finish(partials: list, keys, specs, plan, meta, *, sort, dropna, device) -> pd.DataFrame:
    """The answer from the last level's partials, as gh.groupby gives it for pandas."""
    from gpuhash.groupby.stream import merge_partials
    from gpuhash.groupby.tables import _pandas_answer

    answer = merge_partials(_concat(partials), keys, specs, plan, sort=sort, dropna=dropna,
                            device=device)
    return conform(_pandas_answer(answer, meta, keys, specs), meta)
