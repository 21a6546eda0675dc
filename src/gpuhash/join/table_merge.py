"""The fast path of ``gh.merge`` for tables in host memory: one key column whose right side
holds each key at most once (a fact table joined to a dimension table, as in db-benchmark's
join task), joined ``inner``, ``left``, ``semi`` or ``anti``.

Then every left row has at most one partner, and the join is a lookup: the right side is
indexed by key, each left key is looked up, and the output keeps the left rows in their
order (pandas' order). Where every left row is kept, the left columns are the input's
columns themselves, not copies; otherwise both sides' columns are gathered on the host with
every core (join/arrow_gather.py). Only what must move moves: with integer keys spanning at
most DENSE_SPAN times the right side's rows, the index is an array by key on the host, one
read per lookup; other integer keys go to the join's device as a hash table and the looked-up
rows come back. String keys are looked up in an open-addressing table of the right side's
strings on the host (a hash, then the bytes compared), every core probing; string views
(polars' strings) whose right side holds only strings of up to 12 bytes are looked up by
their 16-byte views alone, no bytes read or copied (else they are cast to large_string).

``try_lookup_merge`` returns None where its conditions do not hold, and the general path
(join/merge.py) runs instead.

Example:
    >>> import pyarrow as pa
    >>> left = pa.table({"k": [3, 1, 2, 3], "a": [1.0, 2.0, 3.0, 4.0]})
    >>> right = pa.table({"k": [3, 2], "b": ["x", "y"]})
    >>> out = try_lookup_merge(left, right, "k", "k", how="inner", names=(
    ...     {"k": "k", "a": "a"}, {"b": "b"}), device="cpu")
    >>> out.to_pydict()
    {'k': [3, 2, 3], 'a': [1.0, 3.0, 4.0], 'b': ['x', 'y', 'x']}
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from gpuhash._common import host_buffers
from gpuhash._common.cpu.runtime import run
from gpuhash._common.phases import Phases
from gpuhash._common.validity import host_validity
from gpuhash.join.arrow_gather import (
    as_words,
    exclusive_sums,
    single,
    string_buffers,
    take_column,
)
from gpuhash.join.cpu import BLOCK, INLINE
from gpuhash.join.frames import arrow_key_pair, plain_text, unviewed
from gpuhash.join.merge_options import indicator_column

HOWS = ("inner", "left", "semi", "anti", "left_anti")


def row_type(rows: int):
    """The integer type of row numbers into a side of ``rows`` rows: int32 where it holds them.
    Every column's gather reads its map, so the map's width is traffic paid per column."""
    return np.int32 if rows < (1 << 31) else np.int64
DENSE_SPAN = 4  # an index by key at most this many times the right rows (8 bytes an entry)
DENSE_SLACK = 1 << 16  # and always for spans this small


def _integers(array) -> tuple[np.ndarray, np.ndarray | None]:
    """An integer column's values as NumPy (no copy where it has no nulls) and its validity
    as uint8 (None: no nulls)."""
    import pyarrow.compute as pc

    if array.null_count:
        valid = host_validity(array).view(np.uint8)
        return pc.fill_null(array, 0).to_numpy(), valid
    return array.to_numpy(zero_copy_only=False), None


def _fits_int64(array) -> bool:
    """Whether an integer column's values are all int64 values (a uint64 may not be)."""
    import pyarrow.compute as pc
    import pyarrow.types as pt

    if not pt.is_uint64(array.type) or len(array) == array.null_count:
        return True
    return pc.max(array).as_py() < (1 << 63)


def _text(kind) -> bool | None:
    """True for string types, False for binary types, None for others."""
    import pyarrow.types as pt

    if pt.is_string(kind) or pt.is_large_string(kind):
        return True
    if pt.is_binary(kind) or pt.is_large_binary(kind):
        return False
    return None


def _validity(array) -> np.ndarray:
    """A column's validity as uint8 (empty where it has no nulls)."""
    if not array.null_count:
        return np.empty(0, np.uint8)
    return host_validity(array).view(np.uint8)


def string_rows(left, right):
    """The right row holding each left string (-1 where none) and per-block found counts, by
    an open-addressing table of the right side's strings; None when the right side repeats
    a string (or has 2^32 rows or bytes or more, which its entries cannot name)."""
    offsets, data = string_buffers(right)
    if len(right) >= (1 << 32) - 1 or data.nbytes >= (1 << 32):
        return None
    entries = 1 << max(4, (2 * len(right)).bit_length())  # at most half full
    table = np.zeros((entries, 3), np.uint64)
    if not run("merge_index_strings", offsets, data, as_words(data), _validity(right), table):
        return None
    left_offsets, left_data = string_buffers(left)
    rows = host_buffers.take(len(left), row_type(len(right)))
    counts = np.empty((len(left) + BLOCK - 1) // BLOCK, np.int64)
    run("merge_look_up_strings", left_offsets, left_data, as_words(left_data), _validity(left),
        offsets, data, table, rows, counts)
    return rows, counts


SMALL_TABLE = 1 << 16  # right sides of view keys whose table stays in the per-core caches


def _views(array) -> np.ndarray:
    """A string or binary view array's views as rows of two words."""
    return np.frombuffer(array.buffers()[1], np.uint64, count=2 * len(array),
                         offset=16 * array.offset).reshape(-1, 2)


def view_rows(left, right):
    """string_rows for string or binary views whose right side holds strings of up to
    INLINE bytes (their views hold them whole): "long" where the right side holds a longer
    one (the caller compares plain strings), None where it repeats a string."""
    views = _views(right)
    if len(right) and int((views[:, 0] & np.uint64(0xFFFFFFFF)).max()) > INLINE:
        return "long"
    # a table the caches hold is kept an eighth full (fewer probes), a larger one half
    spread = 8 if len(right) <= SMALL_TABLE else 2
    table = np.zeros((1 << max(4, (spread * len(right)).bit_length()), 3), np.uint64)
    if not run("merge_index_views", views, _validity(right), table):
        return None
    rows = host_buffers.take(len(left), row_type(len(right)))
    counts = np.empty((len(left) + BLOCK - 1) // BLOCK, np.int64)
    run("merge_look_up_views", _views(left), _validity(left), table, rows, counts)
    return rows, counts


def integer_codes(left, right):
    """One integer key column of each side as (left values, left validity, right values, right
    validity; validity uint8 or None), or None where they are not integers that int64 holds."""
    import pyarrow.types as pt

    if not (pt.is_integer(left.type) and pt.is_integer(right.type)):
        return None
    if not (_fits_int64(left) and _fits_int64(right)):
        if pt.is_signed_integer(left.type) or pt.is_signed_integer(right.type):
            return None  # against signed keys: by value, past int64 matching nothing
        return (*_flipped(left), *_flipped(right))
    return (*_integers(left), *_integers(right))


def _flipped(array) -> tuple[np.ndarray, np.ndarray | None]:
    """Unsigned keys past int64 as int64 values in the same order (the top bit flipped), so
    that equal keys stay equal and a narrow range of them stays a narrow range."""
    import pyarrow as pa

    values, valid = _integers(array.cast(pa.uint64()))
    return (values ^ np.uint64(1 << 63)).view(np.int64), valid


def _dense_rows(left_codes, left_valid, right_codes, right_valid):
    """The looked-up right row of every left row through an index by key on the host, and
    per-block found counts; None when the right side repeats a key."""
    keys = right_codes if right_valid is None else right_codes[right_valid.view(bool)]
    if keys.shape[0] == 0:
        rows = np.full(left_codes.shape[0], -1, np.int32)
        return rows, np.zeros((rows.shape[0] + BLOCK - 1) // BLOCK, np.int64)
    low, high = int(keys.min()), int(keys.max())
    kind = row_type(right_codes.shape[0])
    ids = np.arange(right_codes.shape[0], dtype=kind)
    ids = ids if right_valid is None else ids[right_valid.view(bool)]
    index = host_buffers.take(high - low + 1, kind)
    if not run("merge_index_by_key", keys, np.int64(low), index):
        return None
    if right_valid is not None:  # the index holds positions among the valid rows
        index = np.where(index >= 0, ids[np.maximum(index, 0)], -1)
    rows = host_buffers.take(left_codes.shape[0], kind)
    counts = np.empty((rows.shape[0] + BLOCK - 1) // BLOCK, np.int64)
    valid = np.empty(0, np.uint8) if left_valid is None else left_valid
    run("merge_look_up", left_codes, valid, np.int64(low), index, rows, counts)
    return rows, counts


def _encoded(left, right, left_name: str, right_name: str):
    """Both sides' keys as codes of one dictionary of their values (join/frames.py's
    arrow_key_pair: floats, timestamps, dictionaries, ...), as integer_codes gives them, or
    None where the types do not compare (the general path then raises the error)."""
    try:
        left_codes, left_valid, right_codes, right_valid = arrow_key_pair(
            left, right, left_name, right_name)
    except TypeError:
        return None

    def host(valid):
        return None if valid is None else valid.numpy().view(np.uint8)

    return left_codes.numpy(), host(left_valid), right_codes.numpy(), host(right_valid)


def _is_dense(right_codes, right_valid) -> bool:
    keys = right_codes if right_valid is None else right_codes[right_valid.view(bool)]
    if keys.shape[0] == 0:
        return True
    span = int(keys.max()) - int(keys.min()) + 1
    return span <= max(DENSE_SPAN * keys.shape[0], DENSE_SLACK)


def _tensor(values: np.ndarray):
    """Integer keys as an int64 tensor (Arrow's buffers are read-only; they are only read)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(values.astype(np.int64, copy=False))


def _hashed_rows(left_codes, left_valid, right_codes, right_valid, device):
    """The looked-up right row of every left row through a HashMap on ``device``; None when the
    right side repeats a key."""
    import torch

    from gpuhash.table.hash_map import HashMap

    device = torch.device(device)
    ids = torch.arange(right_codes.shape[0], dtype=torch.int64)
    keys = _tensor(right_codes)
    if right_valid is not None:
        chosen = torch.from_numpy(right_valid.view(bool))
        keys, ids = keys[chosen], ids[chosen]
    table = HashMap(key_dtype=torch.int64, value_dtype=torch.int64,
                    capacity=max(1, keys.shape[0]), device=device)
    table.insert(keys.to(device), ids.to(device))
    if len(table) != keys.shape[0]:
        return None
    found_rows, found = table.find(_tensor(left_codes).to(device), default=-1)
    # narrowed where they run: half the bytes back over the link
    rows = found_rows.to(torch.int32 if row_type(right_codes.shape[0]) == np.int32
                         else torch.int64).cpu().numpy()
    if left_valid is not None:
        rows = np.where(left_valid.view(bool), rows, -1)
    counts = np.empty((rows.shape[0] + BLOCK - 1) // BLOCK, np.int64)
    run("merge_count_found", rows, counts)
    return rows, counts


def _row_maps(rows, counts, how):
    """(left rows or None for every row in order, right rows or None for none): the gather maps
    of the output from the looked-up rows (``left_anti``: the anti join's left rows, beside
    right rows that are all missing)."""
    n = rows.shape[0]
    found = int(counts.sum())
    if how == "left":
        return None, rows
    if how == "left_anti":
        probe, _ = _row_maps(rows, counts, "anti")
        size = n if probe is None else probe.shape[0]
        return probe, np.full(size, -1, np.int32)
    if how in ("inner", "semi") and found == n:
        return None, (rows if how == "inner" else None)
    keep = how != "anti"
    size = found if keep else n - found
    starts = exclusive_sums(counts) if keep else exclusive_sums(
        np.minimum(BLOCK, n - np.arange(counts.shape[0]) * BLOCK) - counts)
    probe = host_buffers.take(size, row_type(n))
    build = host_buffers.take(size if how == "inner" else 0, rows.dtype)
    run("merge_compact", rows, starts, keep, probe, build)
    return probe, (build if how == "inner" else None)


def _look_up(left, right, left_key: str, right_key: str, device) -> tuple[Any, str]:
    """(the right row of each left key and per-block found counts, or None where the right
    side repeats a key or the types do not compare; how they were found)."""
    if unviewed(left.type) != left.type and left.type == right.type:
        looked_up = view_rows(left, right)
        if looked_up != "long":
            return looked_up, "a table of the string views on the host"
    left, right = plain_text(left), plain_text(right)
    codes = integer_codes(left, right)
    if codes is not None:
        if _is_dense(codes[2], codes[3]):
            return _dense_rows(*codes), "an index by key on the host"
        return _hashed_rows(*codes, device), f"a HashMap on {device}"
    if _text(left.type) is not None and _text(left.type) == _text(right.type):
        return string_rows(left, right), "a table of the strings on the host"
    # other types: codes of one dictionary of both sides' values, then an index
    codes = _encoded(left, right, left_key, right_key)
    if codes is None:
        return None, "types that do not compare"
    return _dense_rows(*codes), "codes of both sides' values, indexed"


def try_lookup_merge(left_table: Any, right_table: Any, left_key: str, right_key: str, *,
                     how: str, names: tuple[dict, dict], device: Any,
                     explain: bool = False, indicator: str | None = None) -> Any:
    """The merge's output pyarrow Table by lookup, or None where this path does not apply.
    ``names``: each side's column -> its output name, in output order (join/merge.py's
    _output_names, with the keys it keeps); ``indicator``: the name of pandas' ``_merge``
    column to add."""
    import pyarrow as pa

    if how not in HOWS:
        return None
    phases = Phases()
    left = single(left_table.column(left_key))
    right = single(right_table.column(right_key))
    looked_up, where = _look_up(left, right, left_key, right_key, device)
    if looked_up is None:
        return None
    phases.done("look up", where)
    left_rows, right_rows = _row_maps(*looked_up, how)
    phases.done("row maps", "every left row kept" if left_rows is None else
                f"{left_rows.shape[0]} left rows kept")
    left_out, right_out = names
    columns = {}
    for name, out in left_out.items():
        column = left_table.column(name)
        columns[out] = column if left_rows is None else take_column(
            column, left_rows, may_miss=False, ascending=True)
    for name, out in right_out.items():
        columns[out] = take_column(right_table.column(name), right_rows,
                                   may_miss=how in ("left", "left_anti"))
    if indicator is not None:
        kept = left_table.num_rows if left_rows is None else left_rows.shape[0]
        columns[indicator] = indicator_column(np.zeros(kept, np.int64), right_rows, how)
    table = pa.table(columns)
    phases.done("gather", f"{len(columns)} columns on the host")
    if explain:
        print(f"merge by lookup ({how}): the right side's keys are distinct\n{phases}")
    return table
