"""Tables in and out of a join: key columns made join keys, and columns gathered by the maps.

``gh.merge`` works on one of two inner forms: a pyarrow Table (pyarrow, pandas and polars
frames are converted to one and back) or a dict of tensors. This module owns the conversions,
the encoding of key columns (integers as they are; strings, dictionaries and every other type
through one dictionary encoding of both sides together, so equal values get equal codes), and
the gathers: fixed-width numeric columns with torch on the join's device, the rest with
Arrow's ``take``; a -1 in a gather map gives a null (a zero plus a found mask for tensors).

Example:
    >>> import torch
    >>> gather_tensor(torch.tensor([5., 6.]), torch.tensor([1, -1]))
    (tensor([6., 0.]), tensor([ True, False]))
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

ARROW, PANDAS, POLARS, TENSORS = "pyarrow", "pandas", "polars", "dict"


def frame_kind(frame: Any, name: str) -> str:
    """Which kind of table ``frame`` is: pyarrow, pandas, polars or a dict of arrays.

    Example:
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


def to_arrow(frame: Any, kind: str):
    """The frame as a pyarrow Table (pandas: its index dropped, as merge does)."""
    import pyarrow as pa

    if kind == PANDAS:
        return pa.Table.from_pandas(frame, preserve_index=False)
    if kind == POLARS:
        return frame.to_arrow()
    return frame


def from_arrow(table: Any, kind: str) -> Any:
    """A pyarrow Table as the caller's kind of frame."""
    if kind == PANDAS:
        return table.to_pandas()
    if kind == POLARS:
        import polars

        return polars.from_arrow(table)
    return table


def _column(table: Any, name: str):
    column = table.column(name)
    return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)


def _integer_key(array) -> tuple[torch.Tensor, torch.Tensor | None]:
    import pyarrow.compute as pc

    valid = None
    if array.null_count:
        valid = torch.from_numpy(np.asarray(array.is_valid()))
        array = pc.fill_null(array, 0)
    with warnings.catch_warnings():  # Arrow's buffers are read-only; they are only read here
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array.to_numpy(zero_copy_only=False)), valid


def arrow_key_pair(left, right, left_name: str, right_name: str):
    """Join keys for one key column of each side: (left codes, left valid, right codes, right
    valid). Integer columns go as they are; anything else is dictionary-encoded over both
    sides at once. Null rows have valid False (None when a side has none)."""
    import pyarrow as pa
    import pyarrow.types as pt

    if pt.is_dictionary(left.type):
        left = left.dictionary_decode()
    if pt.is_dictionary(right.type):
        right = right.dictionary_decode()
    if pt.is_null(left.type):  # all nulls, no type of its own (pandas' empty object column)
        left = left.cast(right.type)
    elif pt.is_null(right.type):
        right = right.cast(left.type)
    if pt.is_integer(left.type) and pt.is_integer(right.type):
        if pt.is_signed_integer(left.type) != pt.is_signed_integer(right.type):
            raise TypeError(f"key column {left_name!r} of the left side is {left.type} but "
                            f"{right_name!r} of the right side is {right.type}: signed and "
                            f"unsigned keys are not joined; cast one side")
        return (*_integer_key(left), *_integer_key(right))
    if left.type != right.type:
        try:
            right = right.cast(left.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise TypeError(f"key column {left_name!r} of the left side is {left.type} but "
                            f"{right_name!r} of the right side is {right.type}; they cannot "
                            f"be compared") from None
    both = pa.concat_arrays([left, right]).dictionary_encode()
    codes, valid = _integer_key(both.indices)
    rows = len(left)
    lv, rv = (None, None) if valid is None else (valid[:rows], valid[rows:])
    return codes[:rows], lv, codes[rows:], rv


def _numeric(type_) -> bool:
    import pyarrow.types as pt

    return ((pt.is_integer(type_) or pt.is_floating(type_)) and not pt.is_float16(type_))


def take_arrow(array, rows: torch.Tensor, device: torch.device):
    """``array`` gathered at ``rows`` (int64, -1 for null): numeric columns by torch on
    ``device``, others by Arrow's take."""
    import pyarrow as pa

    missing = rows < 0
    any_missing = bool(missing.any())
    if len(array) == 0:  # every row is -1: a column of nulls
        return pa.nulls(rows.shape[0], type=array.type)
    if _numeric(array.type):
        values, valid = _integer_key(array)
        values = values.to(device)
        index = rows.to(device).clamp(min=0)
        taken = values.index_select(0, index).cpu().numpy()  # not [ ]: slow on the CPU
        null = missing.cpu().numpy() if any_missing else None
        if valid is not None:
            lost = ~valid.to(device).index_select(0, index).cpu().numpy()
            null = lost if null is None else null | lost
        return pa.array(taken, type=array.type, mask=null)
    index = rows.cpu().numpy()
    indices = pa.array(index, mask=index < 0) if any_missing else pa.array(index)
    return array.take(indices)


def gather_tensor(column: torch.Tensor, rows: torch.Tensor):
    """``column`` gathered at ``rows`` with zeros where a row is -1, and the found mask.

    Example:
        >>> gather_tensor(torch.tensor([1, 2]), torch.tensor([0, 0]))[0].tolist()
        [1, 1]
    """
    found = rows >= 0
    rows = rows.to(column.device)
    if column.shape[0] == 0:  # every row is -1
        return column.new_zeros((rows.shape[0], *column.shape[1:])), found.to(column.device)
    taken = column.index_select(0, rows.clamp(min=0))
    found = found.to(column.device)
    zero = torch.zeros((), dtype=column.dtype, device=column.device)
    shape = (-1,) + (1,) * (taken.dim() - 1)
    return torch.where(found.view(shape), taken, zero), found


def coalesce_arrow(left, right):
    """One key column from both sides' gathered keys: the left's value, else the right's."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as pt

    if left.type != right.type:
        if pt.is_integer(left.type) and pt.is_integer(right.type):
            wide = pa.int64() if pt.is_signed_integer(left.type) else pa.uint64()
            left, right = left.cast(wide), right.cast(wide)
        else:
            right = right.cast(left.type)
    return pc.coalesce(left, right)
