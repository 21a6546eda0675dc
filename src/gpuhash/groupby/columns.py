"""Table columns in and out of a group-by: Arrow columns as tensors, results as Arrow columns.

A column becomes a tensor of numbers plus a validity mask, and remembers how to turn numbers
of its own kind back into an Arrow array of its type (``Column.to_arrow``). Strings (and
binary and dictionary columns) become dictionary codes, the dictionary sorted first, so codes
compare as the strings do: min, max, sort and equality work on codes, and a result's codes
take their strings from the dictionary. Dates, times, timestamps and durations become their
integer storage. Numbers and bools are viewed without a copy where Arrow's layout allows.

Example:
    >>> import pyarrow as pa, torch
    >>> column = arrow_column(pa.chunked_array([["b", "a", None, "b"]]), "k",
    ...                       torch.device("cpu"))
    >>> column.values[column.valid].tolist(), column.valid.tolist()
    ([1, 0, 1], [True, True, False, True])
    >>> column.to_arrow(torch.tensor([0, 1]), None).to_pylist()
    ['a', 'b']
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class Column:
    """One column's numbers on the group-by's device, their validity (None: no nulls) and its
    Arrow type (None: a tensor column, which stays a tensor)."""

    name: str
    values: torch.Tensor
    valid: torch.Tensor | None
    arrow_type: Any = None
    dictionary: Any = None  # the sorted strings a code indexes

    @property
    def is_string(self) -> bool:
        return self.dictionary is not None

    def to_arrow(self, values: torch.Tensor, valid: torch.Tensor | None, *,
                 as_numbers: bool = False):
        """Results as an Arrow array: the column's own type (codes as strings, storage as
        dates and times), or plain numbers when ``as_numbers`` (counts, means)."""
        import pyarrow as pa

        data = values.cpu().numpy()
        mask = None if valid is None else ~valid.cpu().numpy()
        if as_numbers or self.arrow_type is None:
            return pa.array(data, mask=mask)
        if self.is_string:
            return self.dictionary.take(pa.array(data.astype(np.int64), mask=mask))
        return pa.array(data, mask=mask).cast(self.arrow_type)


def _kind_of(type_) -> str:
    import pyarrow as pa

    if pa.types.is_dictionary(type_) or pa.types.is_string(type_) or pa.types.is_binary(
            type_) or pa.types.is_large_string(type_) or pa.types.is_large_binary(type_) or (
            getattr(pa.types, "is_string_view", lambda t: False)(type_)):
        return "string"
    if pa.types.is_temporal(type_):
        return "temporal"
    if pa.types.is_boolean(type_) or pa.types.is_integer(type_) or pa.types.is_floating(type_):
        return "number"
    return "other"


def arrow_column(chunked, name: str, device: torch.device) -> Column:
    """One Arrow column (a ChunkedArray) as a Column (see the module docstring)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    type_ = chunked.type
    kind = _kind_of(type_)
    if kind == "other":
        raise TypeError(f"column {name!r} has type {type_}, which a group-by does not take: "
                        f"numbers, bools, strings, dates and times are grouped and aggregated "
                        f"(cast it first, e.g. decimals to float64)")
    dictionary = None
    if kind == "string":  # chunk by chunk: one string array holds at most 2 GiB of text
        encoded = chunked if pa.types.is_dictionary(type_) else pc.dictionary_encode(chunked)
        encoded = encoded.unify_dictionaries()
        parts = encoded.chunks or [pa.array([], pa.string()).dictionary_encode()]
        encoded = pa.DictionaryArray.from_arrays(
            pa.concat_arrays([c.indices for c in parts]), parts[0].dictionary)
        dictionary = encoded.dictionary
        order = pc.array_sort_indices(dictionary)
        rank = np.empty(len(dictionary), dtype=np.int32)
        rank[np.asarray(order)] = np.arange(len(dictionary), dtype=np.int32)
        dictionary = dictionary.take(order)
        codes = encoded.indices
        valid = None if not codes.null_count else np.asarray(codes.is_valid())
        numbers = rank[pc.fill_null(codes, 0).to_numpy().astype(np.int64)] if len(rank) else (
            np.zeros(len(codes), dtype=np.int32))
    else:
        array = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
        valid = None if not array.null_count else np.asarray(array.is_valid())
        if kind == "temporal":
            width = pa.int32() if type_.bit_width == 32 else pa.int64()
            array = array.view(width) if hasattr(array, "view") else array.cast(width)
        if array.null_count:
            array = pc.fill_null(array, False if pa.types.is_boolean(array.type) else 0)
        numbers = array.to_numpy(zero_copy_only=False)
    with warnings.catch_warnings():  # Arrow's buffers are read-only; nothing writes to them
        warnings.simplefilter("ignore", UserWarning)
        values = torch.from_numpy(np.ascontiguousarray(numbers)).to(device)
    mask = None if valid is None else torch.from_numpy(valid).to(device)
    return Column(name, values, mask, type_, dictionary)


def tensor_column(array: Any, name: str, device: torch.device | None) -> Column:
    """A column of a dict of arrays: numbers only, NaN its only null."""
    from gpuhash._common.arrays import as_tensor

    tensor, _ = as_tensor(array, f"column {name!r}")
    if tensor.dim() != 1:
        raise ValueError(f"column {name!r} has shape {tuple(tensor.shape)}; columns are 1-D")
    return Column(name, tensor if device is None else tensor.to(device), None)
