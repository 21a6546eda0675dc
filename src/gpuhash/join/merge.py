"""``gh.merge``: joins of tables (pyarrow, pandas, polars, or dicts of tensors) on columns.

The rows are matched by :func:`gpuhash.join` on the key columns; this module owns what a
table join adds: finding the key columns, checking ``validate``, naming the output's columns
and gathering them. The output is the inputs' kind of table, with the left side's columns
first and then the right side's, keys as the inputs' library keeps them: pandas, pyarrow
and dicts keep a key named alike on both sides once (taken from whichever side has the row);
polars frames come out as polars' join makes them by default (inner, left, semi, anti: the
left keys; right: the right keys, the left side's other columns first; full: both sides'
keys).

Naming of columns present on both sides: pandas, pyarrow and dicts add ``suffixes``
(default ``("_x", "_y")``, pandas' convention; None leaves a side's names); polars keeps the
left name and adds ``"_right"`` to the right one (polars' convention) unless ``suffixes`` is
given. ``how="outer"`` and validate's long names (``"one_to_one"``, ...) are pandas' names
for ``"full"`` and ``"1:1"``, ....
Unlike pandas, null keys never match unless ``nulls_equal=True`` (SQL's and polars' rule).

Example:
    >>> import torch, gpuhash as gh
    >>> left = {"k": torch.tensor([1, 2, 3]), "a": torch.tensor([10., 20., 30.])}
    >>> right = {"k": torch.tensor([3, 1]), "b": torch.tensor([7, 8])}
    >>> out = gh.merge(left, right, on="k")
    >>> sorted(zip(out["k"].tolist(), out["a"].tolist(), out["b"].tolist()))
    [(1, 10.0, 8), (3, 30.0, 7)]
"""

from __future__ import annotations

from typing import Any

import torch

from gpuhash._common import arrays as _arrays
from gpuhash._common.phases import Phases
from gpuhash.join.api import JoinBuild, join
from gpuhash.join.arrow_gather import take_column
from gpuhash.join.frames import (
    PANDAS,
    POLARS,
    TENSORS,
    GatherMap,
    arrow_key_pair,
    coalesce_arrow,
    frame_kind,
    key_views,
    plain_strings,
    restore_frame,
    restore_views,
    to_arrow,
)
from gpuhash.join.key_names import key_names as _key_names
from gpuhash.join.keys import BITS
from gpuhash.join.merge_options import (
    ANTI_HOWS,
    ORDERS,
    MaintainOrder,
    indicator_column,
    indicator_name,
    only_unmatched,
    pandas_order,
    sorted_by,
)
from gpuhash.join.pandas_frames import (
    anti_from_outer,
    anti_index_wanted,
    by_value,
    index_levels,
    merge_on_indexes,
    pandas_key_names,
    pandas_labels,
    with_row_numbers,
)
from gpuhash.join.plan import HOWS
from gpuhash.join.table_merge import HOWS as LOOKUP_HOWS
from gpuhash.join.table_merge import try_lookup_merge

VALIDATE = (None, "1:1", "1:m", "m:1", "m:m")
VALIDATE_NAMES = {"one_to_one": "1:1", "one_to_many": "1:m", "many_to_one": "m:1",
                  "many_to_many": "m:m"}  # pandas' long names


def _key_layout(left_keys, right_keys, kind, how, coalesce=None):
    """Which key columns the output keeps: (left keys dropped, right keys dropped, left key ->
    the right key whose value fills its rows that lack a left side).

    pandas, pyarrow and dicts: a key named alike on both sides appears once, at the left's
    place, holding whichever side's key the row has. polars, as its join does by default
    (``coalesce`` None): inner, left, semi and anti keep the left keys only; right keeps the
    right keys only (the left side's other columns first); full keeps both sides' keys.
    ``coalesce`` True: one key column a pair, holding whichever side's key the row has (full:
    under the left's name); False: both sides' keys."""
    if kind == POLARS:
        if coalesce is False and how not in ("semi", "anti"):
            return set(), set(), {}
        if coalesce is True and how == "full":
            return set(), set(right_keys), dict(zip(left_keys, right_keys))
        if how == "right":
            return set(left_keys), set(), {}
        if how == "full":
            return set(), set(), {}
        return set(), set(right_keys), {}
    same = {a for a, b in zip(left_keys, right_keys) if a == b}
    return set(), same, {a: a for a in same}


def _output_names(left_cols, right_cols, layout, suffixes, kind, how):
    """(left name -> output name, right name -> output name) for the columns the output
    keeps (``layout``: _key_layout's), in output order, suffixed where both sides' names
    meet. A suffix of None (pandas) leaves that side's names as they are."""
    if suffixes is None:
        suffixes = ("", "_right") if kind == POLARS else ("_x", "_y")
    if (not isinstance(suffixes, (tuple, list)) or len(suffixes) != 2
            or not all(s is None or isinstance(s, str) for s in suffixes)):
        raise ValueError(f"suffixes must be two strings or None, got {suffixes!r}")
    suffixes = tuple("" if s is None else s for s in suffixes)
    left_dropped, right_dropped, _ = layout
    left_cols = [c for c in left_cols if c not in left_dropped]
    right_kept = [c for c in right_cols if c not in right_dropped]
    if how in ("semi", "anti"):
        right_kept = []
    overlap = set(left_cols) & set(right_kept)
    left_out = {c: c + suffixes[0] if c in overlap else c for c in left_cols}
    right_out = {c: c + suffixes[1] if c in overlap else c for c in right_kept}
    names = list(left_out.values()) + list(right_out.values())
    if len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"suffixes {suffixes!r} leave repeated column names {repeated}; "
                         f"choose other suffixes")
    return left_out, right_out


def _check_validate(validate, left_keys, left_valid, right_keys, right_valid, names):
    if validate not in VALIDATE:
        raise ValueError(f"validate must be one of {VALIDATE}, got {validate!r}")
    if validate in (None, "m:m"):
        return
    for side, keys, valid, must in (("left", left_keys, left_valid, validate in ("1:1", "1:m")),
                                    ("right", right_keys, right_valid,
                                     validate in ("1:1", "m:1"))):
        if must and not JoinBuild(keys, right_valid=valid).unique:
            raise ValueError(f"validate={validate!r} failed: the {side} side's key columns "
                             f"{names[side]} hold a key more than once")


def _with_null_codes(codes, valid):
    """A key column in which null is one more value (nulls_equal): its code is 0 with an
    indicator column of 1, so null meets only null."""
    if valid is None:
        return [codes]
    return [_arrays.zeroed(codes, ~valid), (~valid).to(torch.int8)]


def _keys_of(pairs, nulls_equal, device):
    """Both sides' join keys and row masks from per-column (codes, valid) pairs."""
    sides = []
    for side in (0, 1):
        columns, valid = [], None
        for pair in pairs:
            codes, mask = pair[2 * side], pair[2 * side + 1]
            codes = codes.to(device)
            mask = None if mask is None else mask.to(device)
            if nulls_equal:
                other = pair[2 * (1 - side) + 1]
                if mask is None and other is not None:  # both sides need the indicator
                    mask = torch.ones_like(codes, dtype=torch.bool)
                columns += _with_null_codes(codes, mask)
            else:
                columns.append(codes)
                if mask is not None:
                    valid = mask if valid is None else valid & mask
        if nulls_equal:
            columns = [c.to(torch.int64) if c.dtype == torch.int8 else c for c in columns]
        sides.append((columns[0] if len(columns) == 1 else tuple(columns), valid))
    return sides


def merge(left: Any, right: Any, *, on: Any = None, left_on: Any = None, right_on: Any = None,
          how: str = "inner", suffixes: tuple[str, str] | None = None, validate: str | None = None,
          nulls_equal: bool = False, indicator: bool | str = False, sort: bool = False,
          coalesce: bool | None = None, maintain_order: MaintainOrder | None = None,
          left_index: bool = False, right_index: bool = False, device: Any = None,
          memory_budget: int | None = None, explain: bool = False) -> Any:
    """Join two tables on key columns; returns a table of the inputs' kind.

    ``left`` and ``right``: pyarrow Tables, pandas or polars DataFrames (both need pyarrow),
    or dicts of 1-D tensors / NumPy arrays (integer keys). ``on`` (or ``left_on`` and
    ``right_on``): a column name or list of them; by default the names both sides share
    (polars frames: refused, as polars' join refuses).
    ``how``: as in :func:`gpuhash.join`; semi / anti return the left table's matching /
    non-matching rows; pandas' ``"left_anti"`` / ``"right_anti"`` return one side's rows
    without a match with the other side's columns empty (null), as pandas does.
    ``validate``: ``"1:1"``, ``"1:m"``, ``"m:1"`` check that the side marked 1 has distinct
    keys (ValueError otherwise). ``indicator`` (pandas): a categorical column ``"_merge"`` (or
    the name given) saying where each row came from: ``"left_only"``, ``"right_only"`` or
    ``"both"``. ``sort``: rows ordered by the keys. polars' ``coalesce`` (None: polars'
    default; True: one column a key pair; False: both sides' keys) and ``maintain_order``
    (``"left"``, ``"left_right"``: by left row, then right row; ``"right"``,
    ``"right_left"``: by right row, then left row; rows a side lacks after the others).
    pandas' ``left_index`` and ``right_index`` (both): join on the frames' indexes; the
    output's index holds the keys.
    ``device``: where keys are matched
    (default: the tensors' device for dicts, else CUDA when available); columns of tables in
    host memory are gathered on the host with every core.

    Row order: pandas frames come out in pandas' order (by left row and then right row; a
    right join by right row; an outer join by key); other kinds too where one key column's
    right side holds each key once (``inner``, ``left``, ``semi``, ``anti``, ``left_anti``:
    the left rows in their order), else in no particular order unless ``sort=True``.

    Dicts of tensors have no nulls: a column of a side that a row lacks (outer kinds) holds
    zeros there, and a bool column ``"_left_found"`` / ``"_right_found"`` says which rows
    have that side.

    Example:
        >>> import pyarrow as pa, gpuhash as gh
        >>> left = pa.table({"id": ["a", "b", "c"], "x": [1, 2, 3]})
        >>> right = pa.table({"id": ["c", "a", "a"], "x": [30, 10, 11]})
        >>> out = gh.merge(left, right, on="id", how="left").sort_by([("x_x", "ascending"),
        ...                                                          ("x_y", "ascending")])
        >>> out.column_names, out.column("x_y").to_pylist()
        (['id', 'x_x', 'x_y'], [10, 11, None, 30])
    """
    how = "full" if how == "outer" else how  # pandas' name
    if how not in HOWS + ANTI_HOWS:
        raise ValueError(f"how must be one of {', '.join(map(repr, HOWS + ANTI_HOWS))} (or "
                         f"'outer'); got {how!r}")
    indicator = indicator_name(indicator)
    if maintain_order not in ORDERS:
        raise ValueError(f"maintain_order must be one of {ORDERS}, got {maintain_order!r}")
    if coalesce not in (None, True, False):
        raise ValueError(f"coalesce must be None, True or False, got {coalesce!r}")
    validate = VALIDATE_NAMES.get(validate, validate) if isinstance(validate, str) else validate
    kind, other = frame_kind(left, "left"), frame_kind(right, "right")
    if kind != other:
        raise TypeError(f"left is a {kind} table but right is a {other} table; convert one")
    if kind == TENSORS:
        if how in ANTI_HOWS or indicator or sort or maintain_order not in (None, "none") or (
                coalesce is not None):
            raise ValueError("dicts of tensors take none of how='left_anti' / 'right_anti', "
                             "indicator, sort, coalesce or maintain_order; merge pyarrow, "
                             "pandas or polars tables for them")
        return _merge_tensors(left, right, on, left_on, right_on, how, suffixes, validate,
                              nulls_equal, device, memory_budget, explain)
    if left_index or right_index:
        if kind != PANDAS:
            raise ValueError("left_index and right_index are pandas' options; name key "
                             "columns with on, left_on and right_on for other tables")
        return merge_on_indexes(merge, left, right, left_index, right_index,
                                (on, left_on, right_on), how=how, suffixes=suffixes,
                                validate=validate, nulls_equal=nulls_equal,
                                indicator=indicator or False, sort=sort, device=device,
                                memory_budget=memory_budget, explain=explain)
    if kind == POLARS and how != "cross" and on is None and left_on is None and (
            right_on is None):  # polars joins on no columns by default: it refuses
        raise ValueError("polars frames join on the columns named by on (or left_on and "
                         "right_on), as polars' join takes them; give on=...")
    if kind == PANDAS:  # Arrow names columns by their labels as strings
        options = dict(suffixes=suffixes, validate=validate, nulls_equal=nulls_equal,
                       sort=sort, device=device, memory_budget=memory_budget, explain=explain)
        levels = index_levels(left, right, on, left_on, right_on)
        if levels is not None:  # keys that name index levels, made columns
            left, right, index_keys = levels
            out = merge(left, right, on=on, how=how, indicator=indicator or False, **options)
            return out.set_index(index_keys) if index_keys else out
        if how in ANTI_HOWS and anti_index_wanted():  # pandas' index: places in a merge
            return anti_from_outer(merge, left, right, how, on=on, left_on=left_on,
                                   right_on=right_on, indicator=indicator, **options)
        on, left_on, right_on = map(pandas_key_names, (on, left_on, right_on))
    # the anti kinds have the shape of the outer join on their side
    shape = {"left_anti": "left", "right_anti": "right"}.get(how, how)
    sources = left, right
    if kind == PANDAS:  # object columns travel as row numbers (with_row_numbers)
        keys = _key_names(list(pandas_labels(left, "left")), list(pandas_labels(right, "right")),
                          on, left_on, right_on, shape)
        sources = with_row_numbers(left, keys[0]), with_row_numbers(right, keys[1])
    # polars' strings stay views, gathered as views; keys are compared as plain strings
    left_table = to_arrow(sources[0], kind, views=True)
    right_table = to_arrow(sources[1], kind, "right", views=True)
    left_keys, right_keys = _key_names(left_table.column_names, right_table.column_names, on,
                                       left_on, right_on, shape)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    names = _output_names(left_table.column_names, right_table.column_names,
                          _key_layout(left_keys, right_keys, kind, shape, coalesce), suffixes,
                          kind, shape)
    if indicator is not None and indicator in {*names[0].values(), *names[1].values()}:
        raise ValueError(f"indicator={indicator!r} names a column the output already has; "
                         f"give indicator another name")
    table, lacks_left = None, None  # lacks_left: whether "some" or "all" rows lack the left
    right_major = maintain_order in ("right", "right_left")
    if (len(left_keys) == 1 and how in LOOKUP_HOWS and not nulls_equal and not right_major
            and validate in (None, "m:1", "m:m") and coalesce is None):
        table = try_lookup_merge(left_table, right_table, left_keys[0], right_keys[0],
                                 how=how, names=names, device=device, explain=explain,
                                 indicator=indicator)
    if table is None:
        phases = Phases()
        viewed = {**key_views(right_table, right_keys, names[1]),
                  **key_views(left_table, left_keys, names[0])}
        left_table, right_table = plain_strings(left_table, left_keys), plain_strings(
            right_table, right_keys)
        pairs = [arrow_key_pair(left_table.column(a).combine_chunks(),
                                right_table.column(b).combine_chunks(), a, b,
                                nulls_equal=nulls_equal)
                 for a, b in zip(left_keys, right_keys)]
        phases.done("key codes", ", ".join(str(left_table.schema.field(a).type)
                                           for a in left_keys))
        rows_l, rows_r = _match(pairs, shape, nulls_equal, device, memory_budget, explain,
                                left_table.num_rows, right_table.num_rows, validate,
                                {"left": left_keys, "right": right_keys})
        rows_l, rows_r = only_unmatched(rows_l, rows_r, how)
        phases.done("join", f"gh.join on {device}, {rows_l.shape[0]} output rows")
        if kind == PANDAS:  # pandas' order; its outer join orders the keys (a stable sort)
            rows_l, rows_r = pandas_order(rows_l, rows_r, shape)
            if shape in ("right", "full") and rows_l.shape[0]:  # pandas' key dtype hangs on it
                lacking = rows_l < 0
                lacks_left = "all" if bool(lacking.all()) else "some" if bool(
                    lacking.any()) else None
            sort = sort or shape == "full"
            phases.done("order", "pandas' order of the pairs")
        elif maintain_order not in (None, "none"):
            rows_l, rows_r = pandas_order(rows_l, rows_r, "right" if right_major else "left")
            phases.done("order", f"maintain_order={maintain_order!r}")
        table = gather_tables(left_table, right_table, rows_l, rows_r, left_keys, right_keys,
                              how=shape, suffixes=suffixes, kind=kind, device=device,
                              coalesce=coalesce)
        table = restore_views(table, viewed)
        if indicator is not None:
            table = table.append_column(indicator, indicator_column(rows_l, rows_r, how))
        phases.done("gather", f"{table.num_columns} columns on the host")
        if explain:
            print(f"merge by gh.join ({how})\n{phases}")
    if sort:  # pandas: categoricals it merges as values sort so, and NaT first
        table = sorted_by(table, [(names[0].get(a), names[1].get(b))
                                  for a, b in zip(left_keys, right_keys)],
                          by_value=by_value(left, right, left_keys, right_keys) if (
                              kind == PANDAS) else set(), nat_first=kind == PANDAS)
    return restore_frame(table, kind, left, right, *names, keys=(left_keys, right_keys),
                         suffixes=suffixes, lacks_left=lacks_left)


def gather_tables(left_table: Any, right_table: Any, rows_l: torch.Tensor,
                  rows_r: torch.Tensor | None, left_keys: list[str], right_keys: list[str], *,
                  how: str, suffixes: tuple[str, str] | None, kind: str,
                  device: torch.device, coalesce: bool | None = None) -> Any:
    """The output pyarrow Table of a merge from both sides' tables and the gather maps
    (``rows_r`` None for semi / anti); also used by ``gpuhash join`` chunk by chunk.

    Example:
        >>> import torch
        >>> import pyarrow as pa
        >>> t = gather_tables(pa.table({"k": [1, 2]}), pa.table({"k": [2]}),
        ...                   torch.tensor([1, 0]), torch.tensor([0, -1]), ["k"], ["k"],
        ...                   how="left", suffixes=None, kind="pyarrow",
        ...                   device=torch.device("cpu"))
        >>> t.column("k").to_pylist()
        [2, 1]
    """
    import pyarrow as pa

    layout = _key_layout(left_keys, right_keys, kind, how, coalesce)
    left_out, right_out = _output_names(left_table.column_names, right_table.column_names,
                                        layout, suffixes, kind, how)
    coalesced = layout[2]
    map_l, map_r = _gather_maps(rows_l, rows_r, how, device)
    columns = {}
    for name, out in left_out.items():
        column = _host_take(left_table.column(name), map_l)
        if name in coalesced and how in ("right", "full"):
            other = _single(_host_take(right_table.column(coalesced[name]), map_r))
            column = _single(column)
            # no row has the left side (pandas' right_anti): the right keys as they are
            column = other if column.null_count == len(column) and len(column) else (
                coalesce_arrow(column, other, exact=kind == POLARS))
        columns[out] = column
    for name, out in right_out.items():
        columns[out] = _host_take(right_table.column(name), map_r)
    return pa.table(columns)


def _host_take(column, rows: GatherMap):
    """A host column gathered on the host by a side's map (null where it is -1)."""
    return take_column(column, rows.host_rows, may_miss=rows.missing is not None)


def _single(column):
    import pyarrow as pa

    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _gather_maps(rows_l: torch.Tensor, rows_r: torch.Tensor | None, how: str,
                 device: torch.device) -> tuple[GatherMap, GatherMap | None]:
    """Both sides' gather maps, each made ready once; a side holds -1 only where ``how`` keeps
    rows the other side lacks (right, full: the left map; left, full: the right map)."""
    map_l = GatherMap(rows_l, device, may_miss=how in ("right", "full"))
    if rows_r is None:
        return map_l, None
    return map_l, GatherMap(rows_r, device, may_miss=how in ("left", "full"))


def _match(pairs, how, nulls_equal, device, memory_budget, explain, left_rows, right_rows,
           validate, names):
    """Gather maps on the host for the key column pairs (rows_r None for semi / anti)."""
    if how == "cross" or not pairs:
        pairs = [(torch.zeros(left_rows, dtype=torch.int64), None,
                  torch.zeros(right_rows, dtype=torch.int64), None)]
    (keys_l, valid_l), (keys_r, valid_r) = _keys_of(pairs, nulls_equal, device)
    # a cross join has no keys to be distinct (as in pandas and polars): only the value is
    # checked
    checked = None if how == "cross" and validate in VALIDATE else validate
    _check_validate(checked, keys_l, valid_l, keys_r, valid_r, names)
    result = join(keys_l, keys_r, how=how, left_valid=valid_l, right_valid=valid_r,
                  nulls_equal=nulls_equal, memory_budget=memory_budget, explain=explain)
    if how in ("semi", "anti"):
        return result, None
    return result


def _merge_tensors(left, right, on, left_on, right_on, how, suffixes, validate, nulls_equal,
                   device, memory_budget, explain):
    left_cols = {n: _arrays.as_tensor(v, f"left[{n!r}]") for n, v in left.items()}
    right_cols = {n: _arrays.as_tensor(v, f"right[{n!r}]") for n, v in right.items()}
    left_keys, right_keys = _key_names(list(left_cols), list(right_cols), on, left_on,
                                       right_on, how)
    for side, cols, names in (("left", left_cols, left_keys), ("right", right_cols, right_keys)):
        for name in names:
            if cols[name][0].dtype not in BITS:
                raise TypeError(f"key column {name!r} of the {side} dict is "
                                f"{cols[name][0].dtype}: dicts of tensors join on integer key "
                                f"columns; merge pandas, polars or pyarrow tables to join on "
                                f"other types")
    rows = []
    for cols, side in ((left_cols, "left"), (right_cols, "right")):
        lengths = {t.shape[0] for t, _ in cols.values()}
        if len(lengths) > 1:
            raise ValueError(f"the {side} dict's columns differ in length: "
                             f"{ {n: t.shape[0] for n, (t, _) in cols.items()} }")
        rows.append(lengths.pop() if lengths else 0)
    first = next(iter(left_cols.values()), (torch.zeros(0), _arrays.TORCH))
    device = first[0].device if device is None else torch.device(device)
    pairs = [(left_cols[a][0], None, right_cols[b][0], None)
             for a, b in zip(left_keys, right_keys)]
    rows_l, rows_r = _match(pairs, how, nulls_equal, device, memory_budget, explain, rows[0],
                            rows[1], validate, {"left": left_keys, "right": right_keys})
    layout = _key_layout(left_keys, right_keys, TENSORS, how)
    left_out, right_out = _output_names(list(left_cols), list(right_cols), layout, suffixes,
                                        TENSORS, how)
    coalesced = layout[2]
    map_l, map_r = _gather_maps(rows_l, rows_r, how, device)
    out = {}
    for name, new in left_out.items():
        tensor, kind = left_cols[name]
        column = map_l.take(tensor)
        if name in coalesced and how in ("right", "full"):
            other = map_r.take(right_cols[coalesced[name]][0])
            wide = torch.promote_types(column.dtype, other.dtype)
            found = map_l.found.to(column.device)
            column = _arrays.select(found, column.to(wide), other.to(wide))
        out[new] = _arrays.to_kind(column, kind)
    for name, new in right_out.items():
        tensor, kind = right_cols[name]
        out[new] = _arrays.to_kind(map_r.take(tensor), kind)
    for flag, side, cols, sides in (("_left_found", map_l, left_cols, ("right", "full")),
                                    ("_right_found", map_r, right_cols, ("left", "full"))):
        if how in sides:
            if flag in out:
                raise ValueError(f"the output already has a column {flag!r}, which marks "
                                 f"the rows a side lacks; rename it")
            # beside the side's own columns, in their kind (the join may have run on
            # another device)
            tensor, kind = next(iter(cols.values()), (side.found, _arrays.TORCH))
            out[flag] = _arrays.to_kind(side.found.to(tensor.device), kind)
    return out
