"""What pandas' and polars' options add to a merge's output: pandas' anti joins, the
``indicator`` column, pandas' row order and polars' ``maintain_order`` (both as an order of
the gather maps), and ``sort`` (an order of the output by its keys).

Example:
    >>> import torch
    >>> only_unmatched(torch.tensor([0, 1]), torch.tensor([3, -1]), "left_anti")
    (tensor([1]), tensor([-1]))
"""

from __future__ import annotations

from typing import Literal

import torch

from gpuhash.join.arrow_gather import take_column
from gpuhash.join.frames import plain_text

ANTI_HOWS = ("left_anti", "right_anti")  # pandas' names: a side's rows without a match
MaintainOrder = Literal["none", "left", "right", "left_right", "right_left"]
ORDERS = (None, "none", "left", "right", "left_right", "right_left")  # polars' names


def sorted_by(table, pairs: list[tuple[str | None, str | None]], *,
              by_value: frozenset | set = frozenset(), nat_first: bool = False):
    """The table's rows ordered by its keys, stably: ``pairs`` names each key pair's output
    columns (None where the output drops that side's), and a pair sorts by the left's value,
    else the right's (pandas orders a join's keys, whichever side a row has). A categorical
    key sorts in its categories' order (by its values where its pair's index is in
    ``by_value``); extension types by their storage. Nulls come last, but with ``nat_first``
    a time's null first (pandas' NaT sorts as the smallest int64)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = {}
    for k, pair in enumerate(pairs):
        columns = [_sortable(table.column(name), k in by_value) for name in pair
                   if name is not None]
        if len(columns) == 2 and columns[0].type == columns[1].type:
            columns = [pc.coalesce(*columns)]
        elif len(columns) == 2:
            try:
                columns = [pc.coalesce(columns[0], columns[1].cast(columns[0].type))]
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                columns = columns[:1]
        kind = columns[0].type
        if nat_first and (pa.types.is_timestamp(kind) or pa.types.is_duration(kind)) and (
                columns[0].null_count):
            columns = [pc.fill_null(columns[0].cast(pa.int64()), -(2**63))]
        keys[f"key{k}"] = columns[0]
    if not keys:  # a cross join: nothing to order by
        return table
    order = pc.sort_indices(pa.table(keys), sort_keys=[(n, "ascending") for n in keys])
    rows = order.to_numpy()  # Arrow's take has no kernel for string views; ours gathers them
    return pa.Table.from_arrays([take_column(column, rows, may_miss=False)
                                 for column in table.columns], schema=table.schema)


def _sortable(column, values: bool = False):
    """A key column as Arrow's sort takes it: extension types as their storage, a dictionary
    (pandas' categorical) as its codes where its chunks share one dictionary (the categories'
    order) and ``values`` is False, else as its values; string views as plain strings."""
    import pyarrow as pa

    if isinstance(column.type, pa.ExtensionType):
        column = pa.chunked_array([c.storage for c in column.chunks], column.type.storage_type)
    if pa.types.is_dictionary(column.type):
        chunks = column.chunks
        if not values and chunks and all(c.dictionary.equals(chunks[0].dictionary)
                                         for c in chunks):
            return pa.chunked_array([c.indices for c in chunks], column.type.index_type)
        return plain_text(column.cast(column.type.value_type))
    return plain_text(column)


def indicator_name(indicator: bool | str) -> str | None:
    if indicator is True:
        return "_merge"
    if indicator is False or indicator is None:
        return None
    if isinstance(indicator, str):
        return indicator
    raise ValueError(f"indicator must be True, False or a column name, got {indicator!r}")


def pandas_order(rows_l, rows_r, how: str):
    """The gather maps in pandas' order: by left row, then right row (a right join: by right
    row, then left row). The lookup path gives this order as it goes; here the pairs are
    sorted (one sort of the output's pairs, on the maps' device).

    Example:
        >>> import torch
        >>> pandas_order(torch.tensor([1, 0, 1]), torch.tensor([0, 2, -1]), "left")
        (tensor([0, 1, 1]), tensor([ 2, -1,  0]))
    """
    if rows_r is None:
        return rows_l.sort().values, None
    first, second = (rows_r, rows_l) if how == "right" else (rows_l, rows_r)
    if first.shape[0] < 2:
        return rows_l, rows_r
    span = int(second.max()) + 2  # -1 (a side missing) first among equal first rows
    last = int(first.max()) + 1  # rows without the first side after the others
    first = torch.where(first < 0, last, first)
    order = torch.sort(first * span + (second + 1), stable=True).indices
    return rows_l[order], rows_r[order]


def only_unmatched(rows_l, rows_r, how):
    """The pairs of a left (right) join whose right (left) side is missing: pandas'
    ``left_anti`` (``right_anti``); other kinds as they are."""
    if how == "left_anti":
        kept = rows_r < 0
    elif how == "right_anti":
        kept = rows_l < 0
    else:
        return rows_l, rows_r
    return rows_l[kept], rows_r[kept]


def indicator_column(rows_l, rows_r, how: str = "inner"):
    """pandas' ``_merge`` column from both gather maps (-1 where a side is missing): a
    dictionary column of "left_only", "right_only" and "both".

    Example:
        >>> import torch
        >>> indicator_column(torch.tensor([0, -1, 2]), torch.tensor([-1, 1, 0])).to_pylist()
        ['left_only', 'right_only', 'both']
    """
    import numpy as np
    import pyarrow as pa

    rows_l = rows_l.cpu().numpy() if isinstance(rows_l, torch.Tensor) else np.asarray(rows_l)
    # an anti join's rows have no right side (its maps leave the right rows out)
    codes = np.full(rows_l.shape[0], 0 if how == "anti" else 2, np.int8)
    if rows_r is not None:
        rows_r = rows_r.cpu().numpy() if isinstance(rows_r, torch.Tensor) else np.asarray(rows_r)
        codes[rows_r < 0] = 0
    codes[rows_l < 0] = 1
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()),
                                          pa.array(["left_only", "right_only", "both"]))


