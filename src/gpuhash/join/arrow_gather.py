"""Arrow columns gathered by a row map on the host with every core, straight into new Arrow
buffers: the output side of a merge of tables in host memory.

A row map is an int32 or int64 NumPy array of source rows, -1 where the output row has none (null
there). Fixed-width columns (integers, floats, temporal types, decimals, fixed-size binary),
booleans, strings and binaries (32- and 64-bit offsets) and dictionary columns are gathered by
the loops of join/cpu/table_loops.py over the column's own buffers; the output's buffers are
NumPy arrays from _common/host_buffers.py, which Arrow wraps without a copy: a merge's output
reuses the memory of an earlier output that was freed, its pages already mapped (faulting
fresh pages in cost more than the gathers). Strings come out in pieces (a chunked column)
where 32-bit offsets could not address all their bytes. String and binary views (polars'
strings) are gathered as 16-byte rows, the output sharing the column's byte buffers: no
string's bytes are copied. Nested types go through Arrow's ``take``.

Example:
    >>> import numpy as np, pyarrow as pa
    >>> take_column(pa.array(["a", None, "ccc"]), np.array([2, -1, 0, 1])).to_pylist()
    ['ccc', None, 'a', None]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuhash._common import host_buffers
from gpuhash._common.cpu.runtime import run
from gpuhash.join.cpu import BLOCK

# values copied as one word each; 16 bytes (views, decimal128) as complex128, whose copy is
# one 16-byte move and keeps every bit, three times faster than a row of two words
_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.complex128}
# string columns up to this size are gathered with a running position whatever the rows'
# order: their offsets and bytes stay in cache, so no row waits on memory
CACHED_BYTES = 8 << 20
# the bytes a piece of gathered strings may hold, by offset type (what its offsets address)
# a string view: length, then the string (up to 12 bytes) or its prefix, buffer and offset;
# a missing row's view is all zeros (an empty string), valid whatever the buffers
VIEW_BYTES = 16
PIECE_BYTES = {np.int32: np.iinfo(np.int32).max, np.int64: np.iinfo(np.int64).max}


def _blocks(rows: int) -> int:
    return (rows + BLOCK - 1) // BLOCK


def exclusive_sums(counts: np.ndarray) -> np.ndarray:
    """Where each block's output starts: the sums of the counts of the blocks before it."""
    starts = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=starts[1:])
    return starts


def single(column: Any):
    """A column as one Arrow array (a chunked column's chunks combined, a copy only when it
    has more than one)."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0)
        return column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    return column


def _width(kind) -> int | None:
    """Bytes a value of a fixed-width type takes, or None for other types."""
    import pyarrow.types as pt

    if pt.is_boolean(kind):
        return None
    if (pt.is_integer(kind) or pt.is_floating(kind) or pt.is_temporal(kind)
            or pt.is_decimal(kind) or pt.is_fixed_size_binary(kind)):
        bits = kind.bit_width
        return bits // 8 if bits % 8 == 0 else None
    return None


def _empty(count: int, dtype, shape: tuple = ()) -> tuple[np.ndarray, Any]:
    """An output array (reused host memory) and the Arrow buffer over it."""
    import pyarrow as pa

    array = host_buffers.take(count * int(np.prod(shape, dtype=np.int64)), dtype)
    return array.reshape((count, *shape)), pa.py_buffer(array)


def _view(buffer, dtype, start: int, count: int) -> np.ndarray:
    """``count`` values of ``dtype`` of an Arrow buffer from value ``start`` on."""
    size = np.dtype(dtype).itemsize
    return np.frombuffer(buffer, dtype=dtype, count=count, offset=start * size)


def _validity(array, rows: np.ndarray, may_miss: bool) -> tuple[Any, int]:
    """The gathered validity bitmap (None: no nulls) and its null count."""

    has_nulls = array.null_count > 0
    if not has_nulls and not may_miss:
        return None, 0
    bits = np.frombuffer(array.buffers()[0], np.uint8) if has_nulls else np.empty(0, np.uint8)
    out, buffer = _empty((rows.shape[0] + 7) // 8, np.uint8)
    nulls = int(run("merge_take_bits", bits, np.int64(array.offset), rows, out).sum())
    return (buffer if nulls else None), nulls


def _fixed(array, rows: np.ndarray, width: int):

    data = array.buffers()[1]
    if width in _WORDS:
        values = _view(data, _WORDS[width], array.offset, len(array))
    elif width % 8 == 0:  # decimals: rows of 8-byte words
        values = _view(data, np.uint64, array.offset * (width // 8),
                       len(array) * (width // 8)).reshape(-1, width // 8)
    else:  # fixed-size binary of an odd width: rows of bytes
        values = _view(data, np.uint8, array.offset * width, len(array) * width).reshape(
            -1, width)
    out, buffer = _empty(rows.shape[0], values.dtype, values.shape[1:])
    run("merge_take", values, rows, out)
    return buffer


def _booleans(array, rows: np.ndarray):

    out, buffer = _empty((rows.shape[0] + 7) // 8, np.uint8)
    run("merge_take_bits", np.frombuffer(array.buffers()[1], np.uint8),
        np.int64(array.offset), rows, out)
    return buffer


def string_buffers(array) -> tuple[np.ndarray, np.ndarray]:
    """A string or binary array's offsets from its first row (int32, or int64 for the large
    types) and its bytes, as NumPy views."""
    import pyarrow.types as pt

    large = pt.is_large_string(array.type) or pt.is_large_binary(array.type)
    offsets = _view(array.buffers()[1], np.int64 if large else np.int32, array.offset,
                    len(array) + 1)
    data = array.buffers()[2]
    return offsets, (np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8))


def as_words(data: np.ndarray) -> np.ndarray:
    """A string column's bytes as whole uint64 words, for the loops' word reads
    (_common/cpu/words.py); empty where the buffer is not 8-byte aligned (they then read
    bytes)."""
    if data.ctypes.data % 8:
        return np.empty(0, np.uint64)
    return data[: data.shape[0] // 8 * 8].view(np.uint64)


def _strings(array, rows: np.ndarray, validity, nulls: int, ascending: bool):
    """A string or binary column gathered, in pieces whose offsets fit their width (one
    piece unless 32-bit offsets cannot address every byte)."""
    import pyarrow as pa

    offsets, data = string_buffers(array)
    offset_type = offsets.dtype.type
    n = rows.shape[0]
    if ascending or offsets.nbytes + data.nbytes <= CACHED_BYTES:
        # rows in order, or a column the caches hold: a running position costs nothing
        done = _strings_in_order(array, offsets, data, rows, validity, nulls)
        if done is not None:
            return done
    ends = host_buffers.take(n + 1, np.int64)
    begins = host_buffers.take(n, np.int64)
    sums = np.empty(_blocks(n), np.int64)
    run("merge_string_lengths", offsets, rows, begins, ends, sums)
    starts = exclusive_sums(sums)
    run("merge_string_ends", ends, starts)
    limit = PIECE_BYTES[offset_type]
    pieces, first = [], 0
    while True:
        # as many rows as keep the piece's bytes addressable (at least one)
        stop = int(np.searchsorted(ends, ends[first] + limit, side="right")) - 1
        if stop < n:  # pieces start at a multiple of 8 rows: whole bytes of validity
            stop -= stop % 8
        stop = min(n, max(stop, first + 8)) if n else 0
        if ends[stop] - ends[first] > limit:  # eight rows' strings past what offsets address
            raise ValueError(f"gathered {array.type} rows {first}..{stop} hold "
                             f"{int(ends[stop] - ends[first])} bytes, more than its 32-bit "
                             f"offsets address; cast the column to large_string or "
                             f"large_binary first")
        out_offsets, offsets_buffer = _empty(stop - first + 1, offset_type)
        out_data, data_buffer = _empty(int(ends[stop] - ends[first]), np.uint8)
        run("merge_take_strings", offsets, data, rows, begins, ends, np.int64(first),
            out_offsets, out_data)
        piece_validity, piece_nulls = validity, nulls
        if validity is not None and (first, stop) != (0, n):
            piece_validity, piece_nulls = _piece_validity(validity, first, stop)
        pieces.append(pa.Array.from_buffers(
            array.type, stop - first, [piece_validity, offsets_buffer, data_buffer],
            null_count=piece_nulls))
        first = stop
        if first >= n:
            break
    return pieces[0] if len(pieces) == 1 else pa.chunked_array(pieces, array.type)


def _strings_in_order(array, offsets, data, rows, validity, nulls: int):
    """Strings gathered in one piece with a running position per block (the chain of each
    row's place on the one before is free where the rows' bytes come in order or from cache),
    or None where one piece's offsets could not address the bytes."""
    import pyarrow as pa

    n = rows.shape[0]
    sums = np.empty(_blocks(n), np.int64)
    run("merge_string_block_sizes", offsets, rows, sums)
    starts = exclusive_sums(sums)
    total = int(sums.sum())
    if total > PIECE_BYTES[offsets.dtype.type]:
        return None
    out_offsets, offsets_buffer = _empty(n + 1, offsets.dtype)
    out_data, data_buffer = _empty(total, np.uint8)
    run("merge_take_strings_in_order", offsets, data, rows, starts, out_offsets, out_data)
    out_offsets[n] = total
    return pa.Array.from_buffers(array.type, n, [validity, offsets_buffer, data_buffer],
                                 null_count=nulls)


def _piece_validity(validity, first: int, stop: int):
    """The validity bits of rows first..stop (first a multiple of 8) as their own bitmap, and
    -1 for its null count (Arrow counts it when asked)."""
    import pyarrow as pa

    return pa.py_buffer(np.frombuffer(validity, np.uint8)[first // 8:(stop + 7) // 8].copy()), -1


def take_column(column: Any, rows: np.ndarray, *, may_miss: bool = True,
                ascending: bool = False):
    """``column`` (an Arrow array or chunked array) gathered by ``rows`` (int64, -1: null).
    ``may_miss`` False promises that no row is -1 (a bitmap is then made only for the
    column's own nulls); ``ascending`` that the rows strictly ascend (strings are then
    copied in one pass less). Returns an Arrow array, or a chunked array of string pieces."""
    import pyarrow as pa
    import pyarrow.types as pt

    array = single(column)
    kind = array.type
    n = rows.shape[0]
    if len(array) == 0 or pt.is_null(kind):  # every row is -1, or nothing but nulls
        return pa.nulls(n, type=kind)
    if pt.is_dictionary(kind):
        indices = take_column(array.indices, rows, may_miss=may_miss, ascending=ascending)
        return pa.DictionaryArray.from_arrays(indices, array.dictionary,
                                              ordered=kind.ordered)
    if pt.is_string_view(kind) or pt.is_binary_view(kind):
        validity, nulls = _validity(array, rows, may_miss)
        return pa.Array.from_buffers(kind, n, [validity, _fixed(array, rows, VIEW_BYTES),
                                               *array.buffers()[2:]], null_count=nulls)
    width = _width(kind)
    strings = (pt.is_string(kind) or pt.is_large_string(kind) or pt.is_binary(kind)
               or pt.is_large_binary(kind))
    if width is None and not strings and not pt.is_boolean(kind):
        index = pa.array(rows, mask=rows < 0) if may_miss else pa.array(rows)
        return array.take(index)
    validity, nulls = _validity(array, rows, may_miss)
    if strings:
        return _strings(array, rows, validity, nulls, ascending)
    data = _booleans(array, rows) if width is None else _fixed(array, rows, width)
    return pa.Array.from_buffers(kind, n, [validity, data], null_count=nulls)
