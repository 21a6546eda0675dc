"""Table columns in and out of a group-by: Arrow columns as tensors, results as Arrow columns.

A column becomes a tensor of numbers plus a validity mask, and remembers how to turn numbers
of its own kind back into an Arrow array of its type (``Column.to_arrow``). Strings (and
binary and dictionary columns) become dictionary codes: on a GPU by their hashes
(string_keys.py), else by Arrow's encoding of pieces on every core; where
order matters (min, max, the top k, sorted groups) the dictionary is sorted first, so codes
compare as the strings do; a result's codes take their strings from the dictionary. Dates,
times, timestamps and durations become their integer storage. Numbers and bools are viewed
without a copy where Arrow's layout allows.

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

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gpuhash._common.arrays import SIGNED_VIEW
from gpuhash._common.transfers import SMALLEST, to_device, to_host, upload_into
from gpuhash._common.validity import arrow_array, host_validity, validity_on
from gpuhash.groupby.string_keys import plain_strings, sort_order, string_codes
from gpuhash.join.frames import unviewed


@dataclass
class Column:
    """One column's numbers on the group-by's device, their validity (None: no nulls) and its
    Arrow type (None: a tensor column, which stays a tensor)."""

    name: str
    values: torch.Tensor
    valid: torch.Tensor | None
    arrow_type: Any = None
    dictionary: Any = None  # the sorted strings a code indexes
    how: str = ""  # how its strings became codes (for explain)

    @property
    def is_string(self) -> bool:
        return self.dictionary is not None

    def to_arrow(self, values: torch.Tensor, valid: torch.Tensor | None, *,
                 as_numbers: bool = False):
        """Results as an Arrow array: the column's own type (codes as strings, storage as
        dates and times), or plain numbers when ``as_numbers`` (counts, means)."""
        import pyarrow as pa

        data = to_host(values)  # through pinned pieces into reused host memory
        ok = None if valid is None else to_host(valid)
        if as_numbers or self.arrow_type is None:
            return arrow_array(data, ok)
        if pa.types.is_null(self.arrow_type):
            return pa.nulls(len(data))
        if pa.types.is_dictionary(self.arrow_type):  # categories stay categories
            indices = arrow_array(data.astype(np.int32), ok)
            return pa.DictionaryArray.from_arrays(indices, self.dictionary,
                                                  ordered=self.arrow_type.ordered)
        if self.is_string:  # the merges' parallel gather of Arrow strings
            from gpuhash.join.arrow_gather import take_column

            rows = data if ok is None else np.where(ok, data, -1)
            out = take_column(self.dictionary, rows, may_miss=ok is not None)
            return out if out.type == self.arrow_type else out.cast(self.arrow_type)
        return arrow_array(data, ok).cast(self.arrow_type)


def _kind_of(type_) -> str:
    import pyarrow as pa

    if pa.types.is_null(type_):
        return "null"
    if pa.types.is_dictionary(type_):
        return "category" if _kind_of(type_.value_type) == "string" else "decoded"
    if pa.types.is_string(type_) or pa.types.is_binary(
            type_) or pa.types.is_large_string(type_) or pa.types.is_large_binary(type_) or (
            getattr(pa.types, "is_string_view", lambda t: False)(type_)) or (
            getattr(pa.types, "is_binary_view", lambda t: False)(type_)):
        return "string"
    if pa.types.is_temporal(type_):  # not intervals: several fields a value
        return "temporal" if getattr(type_, "bit_width", 0) in (32, 64) else "other"
    if pa.types.is_boolean(type_) or pa.types.is_integer(type_) or pa.types.is_floating(type_):
        return "number"
    return "other"


def is_string_type(type_) -> bool:
    """Whether an Arrow column of this type holds strings (or bytes) to encode."""
    return _kind_of(type_) == "string"


def _plain_categories(chunked) -> bool:
    """Whether a dictionary column's dictionaries are one list of distinct non-null values
    (pandas' categoricals, polars' enums): then its codes group and order as its values."""
    import pyarrow.compute as pc

    chunks = chunked.chunks
    if not chunks:
        return True
    first = chunks[0].dictionary
    if any(not c.dictionary.equals(first) for c in chunks[1:]):
        return False
    return not first.null_count and len(pc.unique(first)) == len(first)


PIECE_ROWS = 1 << 20  # strings encoded a piece a thread; the pieces' dictionaries unified


def host_string_codes(chunked) -> tuple[np.ndarray | None, np.ndarray, Any, str]:
    """(validity or None, int32 codes with 0 at nulls, dictionary, how, for explain) of a
    string column in host memory. A column of one piece whose strings are short (at most 15
    bytes by offsets; at most 12 as views, polars' layout, which then hold them) is numbered
    by the CPU engine on every core, each string compared as two words. Any other goes to
    Arrow (GIL released: callers may encode columns on threads), views as they are: Arrow
    hashes them as fast as plain strings, where casting them to plain strings copies every
    byte. The dictionary is plain strings either way (Arrow sorts and takes no views)."""
    import pyarrow as pa

    if chunked.num_chunks == 1 and _short_string_layout(chunked.type):
        from gpuhash.groupby.cpu.engine import short_string_codes

        chunk = chunked.chunk(0)
        valid = host_validity(chunk) if chunk.null_count else None
        numbered = short_string_codes(chunk, valid)
        if numbered is not None:
            codes, first = numbered
            viewed = unviewed(chunk.type) != chunk.type
            dictionary = (_inline_strings(chunk, first) if viewed else
                          chunk.take(pa.array(first)))
            return valid, codes, dictionary, "strings numbered on the CPU"
    codes, dictionary = _dictionary_codes(chunked)
    valid, numbers = _codes_and_validity(codes)
    return valid, numbers, plain_strings(dictionary), "strings encoded by Arrow"


def _short_string_layout(type_) -> bool:
    """Strings or bytes by offsets, or as views: the layouts the CPU engine numbers."""
    import pyarrow.types as pt

    return (pt.is_string(type_) or pt.is_large_string(type_) or pt.is_binary(type_)
            or pt.is_large_binary(type_) or unviewed(type_) != type_)


def _inline_strings(views, rows: np.ndarray):
    """The strings of ``rows`` of an Arrow view array whose views hold their bytes (at most
    12), as plain strings or bytes: Arrow takes no views."""
    import pyarrow as pa

    structs = np.frombuffer(views.buffers()[1], np.uint8, count=16 * (views.offset + len(views))
                            ).reshape(-1, 16)[views.offset:]
    picked = structs[rows]
    sizes = picked[:, :4].copy().view(np.int32).ravel()
    data = picked[:, 4:][np.arange(12) < sizes[:, None]]  # row by row: the strings' bytes
    offsets = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(unviewed(views.type), rows.shape[0],
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _dictionary_codes(chunked):
    """(int32 codes with nulls, dictionary) of a string column: Arrow's dictionary encoding of
    pieces of the column on every core (it runs on one thread a call, and releases the GIL),
    then one dictionary for all of them. (Pieces also keep each string array under 2 GiB.)"""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(chunked.type):
        encoded = chunked  # its own dictionary (categories): checked by arrow_column
    else:
        rows = len(chunked)
        pieces = [chunked.slice(start, PIECE_ROWS) for start in range(0, rows, PIECE_ROWS)]
        threads = min(len(pieces), os.cpu_count() or 1)
        if threads > 1:
            with ThreadPoolExecutor(threads) as pool:
                done = list(pool.map(pc.dictionary_encode, pieces))
        else:
            done = [pc.dictionary_encode(piece) for piece in pieces]
        chunks = [c for piece in done for c in piece.chunks]
        encoded = pa.chunked_array(chunks, type=pa.dictionary(pa.int32(), chunked.type))
    encoded = encoded.unify_dictionaries()
    parts = encoded.chunks or [pa.array([], pa.string()).dictionary_encode()]
    indices = [c.indices if c.indices.type == pa.int32() else c.indices.cast(pa.int32())
               for c in parts]
    codes = indices[0] if len(indices) == 1 else pa.concat_arrays(indices)
    return codes, parts[0].dictionary


def _unviewed_dictionaries(chunked):
    """A dictionary column of string or binary views (polars' categoricals) with its
    dictionaries made plain strings or bytes: Arrow casts and takes no dictionary of views.
    Any other column as it is."""
    import pyarrow as pa

    type_ = chunked.type
    if not pa.types.is_dictionary(type_) or unviewed(type_.value_type) == type_.value_type:
        return chunked
    plain = unviewed(type_.value_type)
    chunks = [pa.DictionaryArray.from_arrays(c.indices, c.dictionary.cast(plain),
                                             ordered=type_.ordered) for c in chunked.chunks]
    return pa.chunked_array(chunks, pa.dictionary(type_.index_type, plain, type_.ordered))


def _codes_and_validity(codes) -> tuple[np.ndarray | None, np.ndarray]:
    """(validity or None, codes with 0 at nulls) of Arrow dictionary codes; without nulls the
    codes as they are (no fill, no copy)."""
    import pyarrow.compute as pc

    if not codes.null_count:
        return None, codes.to_numpy()
    return host_validity(codes), pc.fill_null(codes, 0).to_numpy()


def arrow_column(chunked, name: str, device: torch.device, *, ordered: bool = True,
                 encoded: tuple | None = None) -> Column:
    """One Arrow column (a ChunkedArray) as a Column (see the module docstring).
    ``ordered``: string codes follow the strings' order (sorts the dictionary; needed for
    min, max, the top k and sorted groups). ``encoded``: a string column's
    host_string_codes, when the caller encoded it already."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunked = _unviewed_dictionaries(chunked)
    type_ = chunked.type
    kind = _kind_of(type_)
    if kind == "decoded" or (kind == "category" and not _plain_categories(chunked)):
        # a dictionary of numbers, or one whose values repeat or hold a null: by value
        chunked = chunked.cast(type_.value_type)
        type_ = chunked.type
        kind = _kind_of(type_)
    if kind == "null":  # every value null: one null key, or values that never count
        values = torch.zeros(len(chunked), dtype=torch.int8, device=device)
        return Column(name, values, torch.zeros(len(chunked), dtype=torch.bool, device=device),
                      type_)
    if kind == "other":
        raise TypeError(f"column {name!r} has type {type_}, which a group-by does not take: "
                        f"numbers, bools, strings, dates and times are grouped and aggregated "
                        f"(cast it first, e.g. decimals to float64)")
    dictionary, how = None, {"category": "categories' codes"}.get(kind, "")
    if kind == "category":  # categories: their codes as they are, in the categories' order
        codes, dictionary = _dictionary_codes(chunked)
        valid, numbers = _codes_and_validity(codes)
    elif kind == "string" and device.type == "cuda" and (  # views read as plain strings
            coded := string_codes(plain_strings(chunked), device, ordered=ordered)) is not None:
        values, mask, dictionary = coded  # hashed and checked on the GPU (string_keys.py)
        return Column(name, values, mask, type_, dictionary, "strings hashed on the GPU")
    elif kind == "string":
        valid, numbers, dictionary, how = encoded or host_string_codes(chunked)
        if ordered and len(dictionary):
            order = sort_order(dictionary)
            rank = np.empty(len(dictionary), dtype=np.int32)
            rank[order] = np.arange(len(dictionary), dtype=np.int32)
            numbers = rank[numbers]
            dictionary = dictionary.take(order)
    elif device.type == "cuda" and not pa.types.is_boolean(type_):
        values, mask = _numbers_on_gpu(chunked, kind, device)
        return Column(name, values, mask, type_, None, "")
    else:
        array = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
        valid = None if not array.null_count else host_validity(array)
        if kind == "temporal":
            width = pa.int32() if type_.bit_width == 32 else pa.int64()
            array = array.view(width) if hasattr(array, "view") else array.cast(width)
        if array.null_count:
            array = pc.fill_null(array, False if pa.types.is_boolean(array.type) else 0)
        numbers = array.to_numpy(zero_copy_only=False)
    values = to_device(numbers, device)  # pinned pieces to a GPU (transfers.py)
    mask = None if valid is None else to_device(valid, device)
    return Column(name, values, mask, type_, dictionary, how)


def _numbers_on_gpu(chunked, kind: str, device: torch.device
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A fixed-width column's values and validity on a GPU, chunk by chunk from Arrow's own
    buffers: the values travel as they are, the validity as bits unpacked there, and the
    nulls' values are zeroed there. (On the host, combining the chunks, filling the nulls and
    making the bools were each a pass over the column on one thread.)"""
    import pyarrow as pa

    type_ = chunked.type
    if chunked.num_chunks > 1 and chunked.nbytes < SMALLEST * chunked.num_chunks:
        # small chunks (many row groups, frames stacked) travel as one: a copy each would
        # be a synchronous transfer and a few launches for its bits
        chunked = pa.chunked_array([chunked.combine_chunks()], type=type_)
    if kind == "temporal":
        dtype = np.dtype(np.int32 if type_.bit_width == 32 else np.int64)
    else:
        dtype = np.dtype(type_.to_pandas_dtype())
    values = torch.empty(len(chunked), dtype=torch.from_numpy(np.empty(0, dtype)).dtype,
                         device=device)
    start = 0
    for chunk in chunked.chunks:
        rows = len(chunk)
        if rows:
            data = np.frombuffer(chunk.buffers()[1], dtype=dtype, count=rows,
                                 offset=chunk.offset * dtype.itemsize)
            upload_into(values[start:start + rows], data)
        start += rows
    if not chunked.null_count:
        return values, None
    valid = validity_on(chunked, device)
    values.view(SIGNED_VIEW.get(values.dtype, values.dtype)).masked_fill_(~valid, 0)
    return values, valid


def tensor_column(array: Any, name: str, device: torch.device | None) -> Column:
    """A column of a dict of arrays: numbers only, NaN its only null."""
    from gpuhash._common.arrays import as_tensor

    tensor, _ = as_tensor(array, f"column {name!r}")
    if tensor.dim() != 1:
        raise ValueError(f"column {name!r} has shape {tuple(tensor.shape)}; columns are 1-D")
    tensor = tensor if device is None else tensor.to(device)
    return Column(name, tensor.contiguous(), None)  # the kernels read rows one after another
