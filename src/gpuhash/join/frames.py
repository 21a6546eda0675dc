"""Tables in and out of a join: key columns made join keys, and columns gathered by the maps.

``gh.merge`` works on one of two inner forms: a pyarrow Table (pyarrow, pandas and polars
frames are converted to one and back) or a dict of tensors. This module owns the conversions
(pandas' labels and dtypes: join/pandas_frames.py), the encoding of key columns (integers as
they are; strings, dictionaries and every other type through one dictionary encoding of both
sides together, so equal values get equal codes), and the gather maps: each side's map is
made ready once (``GatherMap``) for all the columns it gathers (on a GPU every small
operation per column is a launch). Dicts of tensors are gathered by torch on the join's
device, a -1 giving a zero and a found mask; Arrow columns on the host by
join/arrow_gather.py, a -1 giving a null.

Example:
    >>> import torch
    >>> side = GatherMap(torch.tensor([1, -1]), torch.device("cpu"))
    >>> side.take(torch.tensor([5., 6.])), side.found
    (tensor([6., 0.]), tensor([ True, False]))
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import torch

from gpuhash._common.arrays import SIGNED_VIEW
from gpuhash._common.validity import host_validity
from gpuhash.join.pandas_frames import restore_pandas

ARROW, PANDAS, POLARS, TENSORS = "pyarrow", "pandas", "polars", "dict"


def frame_kind(frame: Any, name: str) -> str:
    """Which kind of table ``frame`` is: pyarrow, pandas, polars or a dict of arrays.

    Example:
        >>> import torch
        >>> frame_kind({"k": torch.tensor([1])}, "left")
        'dict'
    """
    module = type(frame).__module__.split(".")[0]
    if isinstance(frame, dict):
        return TENSORS
    if module == "pyarrow" and type(frame).__name__ == "Table":
        return ARROW
    if module == "pandas" and type(frame).__name__ == "DataFrame":
        return PANDAS
    if module == "polars" and type(frame).__name__ == "DataFrame":
        return POLARS
    raise TypeError(f"{name} must be a pyarrow Table, a pandas or polars DataFrame or a dict "
                    f"of tensors, not {type(frame).__name__}")


def to_arrow(frame: Any, kind: str, side: str = "left", *, views: bool = False):
    """The frame as a pyarrow Table (pandas: its index dropped, as merge does; polars: its
    128-bit integer columns as decimal128(38, 0), which Arrow holds, cast back by
    restore_frame). ``views``: polars' strings come as Arrow string views, its own layout,
    without a copy (else as large_string, each string's bytes copied)."""
    import pyarrow as pa

    if kind == PANDAS:
        return pa.Table.from_pandas(frame, preserve_index=False)
    if kind == POLARS:
        import polars

        wide = [n for n, t in frame.schema.items() if t in (polars.Int128, polars.UInt128)]
        for name in wide:
            try:
                frame = frame.with_columns(polars.col(name).cast(polars.Decimal(38, 0)))
            except polars.exceptions.InvalidOperationError:
                raise TypeError(f"column {name!r} of the {side} frame is "
                                f"{frame.schema[name]} and holds values of 39 digits, past "
                                f"the decimal128(38, 0) that gh.merge carries such columns "
                                f"in; cast it to another type first") from None
        if not views:
            return frame.to_arrow()
        table = frame.to_arrow(compat_level=polars.CompatLevel.newest())
        for i, field in enumerate(table.schema):  # Arrow takes no nested views: large types
            if field.type != (plain := _nested_plain(field.type)):
                table = table.set_column(i, field.name, table.column(i).cast(plain))
        return table
    return frame


def unviewed(kind):
    """A string or binary view type as large_string / large_binary (the plain type of its
    values, 64-bit offsets); any other type as it is."""
    import pyarrow as pa
    import pyarrow.types as pt

    if pt.is_string_view(kind):
        return pa.large_string()
    return pa.large_binary() if pt.is_binary_view(kind) else kind


def _nested_plain(kind):
    """``kind`` with the string and binary views nested in lists, structs and maps made
    large_string / large_binary (Arrow's take has no kernel for them); top-level views and
    other types as they are."""
    import pyarrow as pa
    import pyarrow.types as pt

    def plain(inner):
        return _nested_plain(unviewed(inner))

    if pt.is_list(kind) or pt.is_large_list(kind):
        value = kind.value_field.with_type(plain(kind.value_type))
        return pa.list_(value) if pt.is_list(kind) else pa.large_list(value)
    if pt.is_fixed_size_list(kind):
        return pa.list_(kind.value_field.with_type(plain(kind.value_type)), kind.list_size)
    if pt.is_map(kind):
        return pa.map_(kind.key_field.with_type(plain(kind.key_type)),
                       kind.item_field.with_type(plain(kind.item_type)), kind.keys_sorted)
    if pt.is_struct(kind):
        return pa.struct([kind.field(i).with_type(plain(kind.field(i).type))
                          for i in range(kind.num_fields)])
    return kind


def _plain_type(kind):
    """The plain type of a string or binary view type (a dictionary's values too), or None."""
    import pyarrow as pa
    import pyarrow.types as pt

    if pt.is_dictionary(kind) and unviewed(kind.value_type) != kind.value_type:
        return pa.dictionary(kind.index_type, unviewed(kind.value_type), kind.ordered)
    return None if unviewed(kind) == kind else unviewed(kind)


def plain_text(column: Any) -> Any:
    """A string or binary view column (or a dictionary of them) cast to large_string /
    large_binary, the types the key paths compare; any other column as it is."""
    kind = _plain_type(column.type)
    return column if kind is None else column.cast(kind)


def key_views(table: Any, keys: list[str], names: dict) -> dict:
    """The output names (``names``: column -> output name) of the key columns of ``table``
    that are views, with their types: what restore_views gives back to the output."""
    return {names[key]: table.schema.field(key).type for key in keys
            if key in names and _plain_type(table.schema.field(key).type) is not None}


def restore_views(table: Any, types: dict) -> Any:
    """``table`` with each output key column of ``types`` (key_views) that came out plain
    cast back to its view type: an output's key types do not hang on the path taken."""
    for name, kind in types.items():
        at = table.schema.get_field_index(name)
        if at >= 0 and table.schema.field(at).type == _plain_type(kind):
            table = table.set_column(at, name, table.column(at).cast(kind))
    return table


def plain_strings(table: Any, names: list[str]) -> Any:
    """``table`` with its columns among ``names`` made plain_text."""
    for name in names:
        if _plain_type(table.schema.field(name).type) is not None:
            table = table.set_column(table.schema.get_field_index(name), name,
                                     plain_text(table.column(name)))
    return table


def restore_frame(table: Any, kind: str, left: Any, right: Any, left_out: dict,
                  right_out: dict, keys: tuple[list, list] = ([], []),
                  suffixes: Any = None, lacks_left: str | None = None) -> Any:
    """A merge's output Table as the caller's kind of frame (``left_out`` / ``right_out``:
    each side's column name -> its output name; ``keys``: both sides' key names): pandas
    frames as join/pandas_frames.py restores them, polars columns their Enum and 128-bit
    integer types, which a trip through Arrow changes."""
    if kind == PANDAS:
        return restore_pandas(table, left, right, left_out, right_out, keys, suffixes,
                              lacks_left)
    if kind == POLARS:
        import polars

        frame = polars.from_arrow(table)
        got = frame.schema  # each schema once: polars builds it anew on every access
        casts = {out: _polars_type(source[name], got[out])  # a shared key: the left's
                 for source, names in ((right.schema, right_out), (left.schema, left_out))
                 for name, out in names.items()}
        casts = [polars.col(out).cast(dtype) for out, dtype in casts.items()
                 if dtype is not None]
        return frame.with_columns(casts) if casts else frame
    return table


def _polars_type(source, got):
    """The polars type an output column is cast back to from the type the trip through Arrow
    gave it (None: as it is): an Enum (Arrow makes it Categorical), and a 128-bit integer
    (carried as a decimal; a key coalesced of uint64 and signed keys too: polars' Int128)."""
    import polars

    if isinstance(source, polars.Enum):
        return source
    if isinstance(got, polars.Decimal) and source.is_integer():
        return polars.UInt128 if source == polars.UInt128 else polars.Int128
    return None


def _column(table: Any, name: str):
    column = table.column(name)
    return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)


def _integer_key(array) -> tuple[torch.Tensor, torch.Tensor | None]:
    import pyarrow.compute as pc

    valid = None
    if array.null_count:
        valid = torch.from_numpy(host_validity(array))
        array = pc.fill_null(array, 0)
    with warnings.catch_warnings():  # Arrow's buffers are read-only; they are only read here
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array.to_numpy(zero_copy_only=False)), valid


def _int64_key(array, name: str, nulls_equal: bool):
    """An integer key column as int64 values, for a join of signed against unsigned keys (by
    value, as pandas and polars join them): a uint64 value past int64's range equals no
    signed value, so its row matches nothing (marked as not valid; with ``nulls_equal`` that
    would match nulls, so such a column is refused then)."""
    import pyarrow.compute as pc
    import pyarrow.types as pt

    values, valid = _integer_key(array)
    if pt.is_uint64(array.type):
        past = (values.view(torch.int64) < 0) if values.dtype == torch.uint64 else (
            torch.from_numpy(pc.fill_null(array, 0).to_numpy(zero_copy_only=False) >= 2**63))
        if bool(past.any()):
            if nulls_equal:
                raise TypeError(f"key column {name!r} holds uint64 values past int64's range, "
                                f"which the signed keys of the other side cannot equal; with "
                                f"nulls_equal=True they would meet its nulls: cast the columns "
                                f"or leave nulls_equal False")
            valid = ~past if valid is None else valid & ~past
        values = values.view(torch.int64) if values.dtype == torch.uint64 else values
    return values.to(torch.int64), valid


def _nested(kind) -> bool:
    import pyarrow.types as pt

    return (pt.is_list(kind) or pt.is_large_list(kind) or pt.is_fixed_size_list(kind)
            or pt.is_struct(kind) or pt.is_map(kind) or pt.is_union(kind)
            or getattr(pt, "is_list_view", lambda _: False)(kind))


def _storage_keys(left, right, left_name: str, right_name: str):
    """Key columns of extension types (pandas' Period, ...) as their storage where both sides
    have the same type (equal values have equal storage then); nested keys refused with a
    TypeError naming the column and its type."""
    import pyarrow as pa

    if isinstance(left.type, pa.ExtensionType) or isinstance(right.type, pa.ExtensionType):
        if left.type != right.type:
            raise TypeError(f"key column {left_name!r} of the left side is {left.type} but "
                            f"{right_name!r} of the right side is {right.type}; cast one side")
        left, right = left.storage, right.storage
    for column, name, side in ((left, left_name, "left"), (right, right_name, "right")):
        if _nested(column.type):
            raise TypeError(f"key column {name!r} of the {side} side is {column.type}: "
                            f"nested types (lists, structs, maps, pandas' Interval) are not "
                            f"join keys; join on their fields, or on a string made of them")
    return left, right


def arrow_key_pair(left, right, left_name: str, right_name: str, *, nulls_equal: bool = False):
    """Join keys for one key column of each side: (left codes, left valid, right codes, right
    valid). Integer columns go as they are (signed against unsigned as int64, by value);
    anything else is dictionary-encoded over both sides at once. Null rows have valid False
    (None when a side has none)."""
    import pyarrow as pa
    import pyarrow.types as pt

    left, right = _storage_keys(left, right, left_name, right_name)
    # a column of no values (an empty dictionary: pandas' all-null category) as Arrow's nulls
    left, right = (pa.nulls(len(c)) if _valueless(c) else
                   c.dictionary_decode() if pt.is_dictionary(c.type) else c
                   for c in (left, right))
    if pt.is_null(left.type):  # all nulls, no type of its own (pandas' empty object column)
        left = left.cast(right.type)
    elif pt.is_null(right.type):
        right = right.cast(left.type)
    key_type = compared_type(left.type, right.type,
                             f"key column {left_name!r} of the left side is {left.type} but "
                             f"{right_name!r} of the right side is {right.type}")
    if key_type is None:
        if pt.is_signed_integer(left.type) != pt.is_signed_integer(right.type):
            return (*_int64_key(left, left_name, nulls_equal),
                    *_int64_key(right, right_name, nulls_equal))
        return (*_integer_key(left), *_integer_key(right))
    left, right = comparable(left, key_type), comparable(right, key_type)
    both = pa.concat_arrays([left, right]).dictionary_encode()
    codes, valid = _integer_key(both.indices)
    rows = len(left)
    lv, rv = (None, None) if valid is None else (valid[:rows], valid[rows:])
    return codes[:rows], lv, codes[rows:], rv


def compared_type(left, right, which: str):
    """The type two key columns' values are compared in (``left`` / ``right``: their types,
    dictionaries decoded): None for two integer columns, joined by value as they are, else
    their common type; pairs that do not compare raise a TypeError that starts with
    ``which`` (the columns named)."""
    import pyarrow.types as pt

    if pt.is_integer(left) and pt.is_integer(right):
        return None
    common = _common_key_type(left, right)
    if common is None:
        raise TypeError(f"{which}; they cannot be compared (cast one side)")
    return common


def comparable(values, key_type):
    """Key values in the type they are compared in (compared_type), -0.0 made 0.0 (equal in
    pandas and DuckDB: one code)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as pt

    if pt.is_dictionary(values.type):
        values = values.dictionary_decode()
    values = values.cast(key_type)
    if pt.is_floating(key_type):
        values = pc.add(values, pa.scalar(0, key_type))
    return values


def coalesced_type(left, right):
    """The type of a key column that holds both sides' keys (right and full joins), None
    where there is none but the left's (a dictionary column and its value type)."""
    import pyarrow as pa
    import pyarrow.types as pt

    if pt.is_integer(left) and pt.is_integer(right):  # NumPy's promotion, as pandas'
        return pa.from_numpy_dtype(np.result_type(left.to_pandas_dtype(),
                                                  right.to_pandas_dtype()))
    return _common_key_type(left, right)


def _common_key_type(left, right):
    """The type both sides' key values are compared in, the same whichever side is which (None:
    none, the kinds differ): numbers with a float among them as float64 (by value, as pandas
    merges an integer and a float key), text as large_string, bytes as large_binary,
    timestamps of one time zone at the finer unit, dates as date64, integers against decimals
    of no fraction as decimal128(38, 0); any other type only with itself. (Integer pairs are
    joined by value before this.)"""
    import pyarrow as pa
    import pyarrow.types as pt

    if left == right:
        return left
    if all((pt.is_decimal(t) and t.scale == 0 and t.precision <= 38) or pt.is_integer(t)
           for t in (left, right)):  # whole numbers, one a decimal (polars' Int128): by value
        return pa.decimal128(38, 0)
    if _numeric(left) or pt.is_float16(left):
        numeric = _numeric(right) or pt.is_float16(right)
        return pa.float64() if numeric else None
    for kind, common in ((lambda t: pt.is_string(t) or pt.is_large_string(t), pa.large_string()),
                         (lambda t: pt.is_binary(t) or pt.is_large_binary(t), pa.large_binary()),
                         (pt.is_date, pa.date64())):
        if kind(left) and kind(right):
            return common
    if pt.is_timestamp(left) and pt.is_timestamp(right) and left.tz == right.tz:
        units = ("s", "ms", "us", "ns")
        return pa.timestamp(max(left.unit, right.unit, key=units.index), tz=left.tz)
    return None


def _numeric(type_) -> bool:
    import pyarrow.types as pt

    return ((pt.is_integer(type_) or pt.is_floating(type_)) and not pt.is_float16(type_))


class GatherMap:
    """One side's gather map (int64 rows, -1 where an output row lacks the side), ready for
    every column it gathers: the rows on ``device``, clamped to 0 where -1, and where they
    are -1. ``may_miss`` False says no row is -1 (the inner join's sides, the left side of a
    left join), and the mask and its fill are skipped.

    Example:
        >>> import torch
        >>> GatherMap(torch.tensor([1, 0]), torch.device("cpu"), may_miss=False).take(
        ...     torch.tensor([5, 6])).tolist()
        [6, 5]
    """

    def __init__(self, rows: torch.Tensor, device: torch.device, *, may_miss: bool = True):
        rows = rows.to(device)
        self.rows = rows
        self.missing = (rows < 0) if may_miss else None
        self.index = rows.clamp(min=0) if may_miss else rows

    @functools.cached_property
    def found(self) -> torch.Tensor:
        """Whether each output row has this side (bool, on the map's device)."""
        if self.missing is None:
            return torch.ones(self.rows.shape[0], dtype=torch.bool, device=self.rows.device)
        return ~self.missing

    @functools.cached_property
    def host_rows(self) -> np.ndarray:
        """The rows as a NumPy array (one copy from the device, for the host gathers)."""
        return self.rows.cpu().numpy()

    def take(self, column: torch.Tensor) -> torch.Tensor:
        """``column`` gathered by the map, zeros where a row is -1."""
        index = self.index if self.index.device == column.device else self.index.to(column.device)
        if column.shape[0] == 0:  # every row is -1
            return column.new_zeros((index.shape[0], *column.shape[1:]))
        alias = SIGNED_VIEW.get(column.dtype)  # gathered and filled as signed bits
        source = column if alias is None else column.view(alias)
        taken = source.index_select(0, index)
        if self.missing is not None:
            missing = self.missing.to(column.device)
            taken.masked_fill_(missing.view((-1,) + (1,) * (taken.dim() - 1)), 0)
        return taken if alias is None else taken.view(column.dtype)


def _valueless(array) -> bool:
    """Whether a column holds nothing but nulls by its make: Arrow's null type, or a
    dictionary with no values (of the null type, or pandas' all-null category column, whose
    empty dictionary is typed float64)."""
    import pyarrow.types as pt

    kind = array.type
    return pt.is_null(kind) or (pt.is_dictionary(kind) and (pt.is_null(kind.value_type)
                                                            or len(array.dictionary) == 0))


def coalesce_arrow(left, right, *, exact: bool = False):
    """One key column from both sides' gathered keys: the left's value, else the right's.
    uint64 and signed keys: float64, as pandas makes them, or with ``exact`` a
    decimal128(38, 0) that holds both (polars' Int128)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(left.type, pa.ExtensionType) and left.type == right.type:  # by storage
        return pa.ExtensionArray.from_storage(left.type, coalesce_arrow(left.storage,
                                                                        right.storage))
    if exact and {pa.types.is_uint64(left.type), pa.types.is_uint64(right.type)} == {
            True, False} and pa.types.is_signed_integer(
                right.type if pa.types.is_uint64(left.type) else left.type):
        wide = pa.decimal128(38, 0)
        return pc.coalesce(left.cast(wide), right.cast(wide))
    # a side of no values (all null, or pandas' empty object or category column): its rows
    # are nulls of the other side's type
    if _valueless(left):
        return pc.coalesce(pa.nulls(len(left), right.type), right)
    if _valueless(right):
        return pc.coalesce(left, pa.nulls(len(right), left.type))
    if left.type != right.type:
        common = coalesced_type(left.type, right.type)
        if common is None:  # a dictionary column and its value type: the left's
            try:
                right = right.cast(left.type)
            except pa.ArrowNotImplementedError:  # no cast into it (int64 to a dictionary
                # of int64): both as plain values, as pandas gives them
                left, right = (c.dictionary_decode() if pa.types.is_dictionary(c.type) else c
                               for c in (left, right))
                return coalesce_arrow(left, right)
        else:
            # integers past float64's exact range round, as in pandas' float64 column
            safe = not pa.types.is_floating(common)
            left, right = left.cast(common, safe=safe), right.cast(common, safe=safe)
    return pc.coalesce(left, right)
