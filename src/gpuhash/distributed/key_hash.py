"""One 64-bit hash of a table row's key values, the same on every rank for equal keys, from
which :func:`gpuhash.distributed.owner_of` names the rank that joins or groups the row.

Equal keys must hash alike even where the two sides of a join hold them in different types,
so each key column is first brought to the type its values are compared in, decided from the
schemas alone (every rank decides the same): integers as int64 values (a uint64 past int64's
range as its bits: it equals no signed value), any other pair as ``gh.merge`` compares it
(join/frames.py: numbers with a float among them as float64, -0.0 as 0.0, text as
large_string, timestamps at the finer unit, ...). Then:

* integers: their values moved as they are stored (a narrow column stays narrow on the way)
  and widened to int64 on the device; other fixed-width values: their bytes, read as 64-bit
  words;
* strings and binaries: the group-by's hash of each value's bytes (the engine's
  ``string_hashes``: a kernel on the GPU, its numba twin on the CPU, the same bits), over
  Arrow's offsets and data moved as they are;
* nulls: one fixed word, so every null of a column meets at one owner (a group-by's null
  group, a join with ``nulls_equal=True``); the null mask comes back too. A float's NaN is
  one word of its own for a join (NaN matches NaN there), a null for a group-by.

A key of several columns folds each column's word into the row's hash in column order. The
hash only places rows: two keys that collide share an owner and are still told apart there.

Example:
    >>> import pyarrow as pa
    >>> from gpuhash.distributed.key_hash import key_types, row_hashes
    >>> left = pa.table({"k": pa.array([1, 2, None], pa.int32())})
    >>> right = pa.table({"k": pa.array([2.0, 1.0, -0.0])})
    >>> types = key_types([left.schema.field("k").type], [right.schema.field("k").type])
    >>> a, nulls = row_hashes(left, ["k"], types)
    >>> b, _ = row_hashes(right, ["k"], types)
    >>> a[0] == b[1], a[1] == b[0], nulls.tolist()
    (tensor(True), tensor(True), [False, False, True])
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from gpuhash._common.constants import as_int64
from gpuhash._common.hashing import GOLDEN_INT64, mix64
from gpuhash._common.transfers import to_device

INTEGER = "int64 value"  # a key_types entry: integers hashed by value as int64
_NULL_WORD = as_int64(0x9E6C63D0676A9A99)  # a null key's word (any fixed value does)


def _plain_type(kind):
    """The type a column's values are compared in before pairing: extension types as their
    storage, dictionaries as their values, string views as large strings."""
    import pyarrow as pa
    import pyarrow.types as pt

    if isinstance(kind, pa.ExtensionType):
        kind = kind.storage_type
    from gpuhash.join.frames import unviewed

    if pt.is_dictionary(kind):
        kind = kind.value_type
    return unviewed(kind)


def key_types(left: list, right: list | None = None) -> list:
    """Per key column (pair), the type every rank brings its values to before hashing:
    :data:`INTEGER` or an Arrow type. ``left`` / ``right``: the sides' key column types, from
    the schemas every rank agreed on (``right`` None: one table, a group-by's keys). Raises
    a TypeError for a pair ``gh.merge`` cannot compare."""
    import pyarrow.types as pt

    from gpuhash.join.frames import compared_type

    right = left if right is None else right
    out = []
    for i, (a, b) in enumerate(zip(left, right)):
        a, b = _plain_type(a), _plain_type(b)
        if pt.is_null(a):  # a column of nulls only (pandas' empty object column)
            a = b
        if pt.is_null(b):
            b = a
        if pt.is_null(a):
            out.append(INTEGER)  # nothing but nulls: every row takes the null word
        elif (pt.is_integer(a) and pt.is_integer(b)) or (pt.is_boolean(a) and pt.is_boolean(b)):
            out.append(INTEGER)
        else:
            out.append(compared_type(a, b, f"key column {i} is {a} on the left but {b} on the "
                                           f"right"))
    return out


def _plain_values(column, target, nan_is_null: bool = False):
    """A key column (one Arrow array) as values of ``target``'s type, nulls kept (and NaN
    made null where ``nan_is_null``)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as pt

    from gpuhash.join.frames import comparable

    if isinstance(column.type, pa.ExtensionType):
        column = column.storage
    if pt.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pt.is_null(column.type):
        return None
    if target is INTEGER:  # widened on the device (_integer_words)
        return column.cast(pa.int8()) if pt.is_boolean(column.type) else column
    values = comparable(column, target)
    if pt.is_floating(values.type):  # every NaN one word: a join matches NaN with NaN; a
        # group-by's NaN is its null key, and meets the nulls at their owner
        nan = pa.scalar(None if nan_is_null else float("nan"), values.type)
        values = pc.if_else(pc.is_nan(values), nan, values)
    return values


def _fixed_words(values) -> torch.Tensor:
    """Each value's bytes as int64 words, ``(rows, words)``."""
    import pyarrow as pa
    import pyarrow.types as pt

    if pt.is_boolean(values.type):  # bit-packed: one byte a value
        values = values.cast(pa.int8())
    width = values.type.bit_width // 8
    data = np.frombuffer(values.buffers()[1], dtype=np.uint8)
    data = data[values.offset * width:(values.offset + len(values)) * width]
    data = data.reshape(len(values), width)
    words = -(-width // 8)
    if width != words * 8:
        padded = np.zeros((len(values), words * 8), dtype=np.uint8)
        padded[:, :width] = data
        data = padded
    with warnings.catch_warnings():  # Arrow's buffers are read-only; they are only read here
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.ascontiguousarray(data).view(np.int64))


def _integer_words(values, device: torch.device) -> torch.Tensor:
    """An integer column's values as int64 on ``device`` (a uint64 as its bits: past int64's
    range it equals no signed value), moved at their own width."""
    import pyarrow.types as pt

    width = values.type.bit_width // 8
    kind = "u" if pt.is_unsigned_integer(values.type) else "i"
    stored = np.frombuffer(values.buffers()[1], dtype=f"<{kind}{width}")
    moved = to_device(stored[values.offset:values.offset + len(values)], device)
    if moved.dtype == torch.uint64:
        return moved.view(torch.int64)
    return moved.to(torch.int64)


def _bytes_hashes(values, device: torch.device) -> torch.Tensor:
    """A 64-bit hash of each string's (or binary's) bytes (groupby/kernels/strings.cu)."""
    import pyarrow as pa

    from gpuhash.groupby.engine import engine_for
    from gpuhash.groupby.string_keys import upload_strings

    offsets, data = upload_strings(pa.chunked_array([values]), device)
    return engine_for(device).string_hashes(offsets, data)


def _column_words(column, target, device: torch.device, nan_is_null: bool = False):
    """One int64 word a row of a key column, and its null mask (None: no nulls)."""
    import pyarrow.types as pt

    values = _plain_values(column, target, nan_is_null)
    if values is None:  # the null type: every row null
        rows = len(column)
        return (torch.full((rows,), _NULL_WORD, dtype=torch.int64, device=device),
                torch.ones(rows, dtype=torch.bool, device=device))
    kind = values.type
    if target is INTEGER:
        words = _integer_words(values, device)
    elif pt.is_string(kind) or pt.is_large_string(kind) or pt.is_binary(kind) or (
            pt.is_large_binary(kind)):
        words = _bytes_hashes(values, device)
    else:
        fixed = to_device(_fixed_words(values).numpy(), device)
        words = fixed[:, 0]
        for j in range(1, fixed.shape[1]):  # a decimal's second word
            words = mix64(words + GOLDEN_INT64) ^ fixed[:, j]
    if not values.null_count:
        return words, None
    nulls = to_device(np.asarray(values.is_null()), device)
    return torch.where(nulls, _NULL_WORD, words), nulls


def row_hashes(table: Any, keys: list[str], types: list, *,
               device: torch.device | str = "cpu", nan_is_null: bool = False,
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows' key hashes (int64, on ``device``) and whether each row's key holds a null
    in any column. ``types``: :func:`key_types` for the key columns, in ``keys``' order.
    ``nan_is_null``: a float key's NaN is a null (a group-by's rule; a join's NaN is a value
    that matches NaN)."""
    device = torch.device(device)
    rows = table.num_rows
    hashes = torch.zeros(rows, dtype=torch.int64, device=device)
    nulls = torch.zeros(rows, dtype=torch.bool, device=device)
    for i, (name, target) in enumerate(zip(keys, types)):
        column = table.column(name)
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        words, null = _column_words(column, target, device, nan_is_null)
        # one column: its word as it is (owner_of mixes it); more: folded in order
        hashes = words if i == 0 else mix64(hashes + GOLDEN_INT64) ^ words
        if null is not None:
            nulls |= null
    return hashes, nulls
