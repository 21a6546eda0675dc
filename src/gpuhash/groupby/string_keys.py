"""String columns of a host table made dictionary codes on the group-by's GPU.

Arrow's dictionary encoding runs on one thread a call, and the unification of pieces encoded
in threads runs on one thread too: on a 16-core host it took most of a group-by by a string
key. Here the column's offsets and bytes travel to the GPU (_common/transfers.py), each string
is hashed to 64 bits there, the core's table numbers the distinct hashes (the engine's
``group_compact``: codes by first appearance, with each code's first row), and every row's
string is compared with its code's first row's. Two different strings with one hash would
share a code: the comparison counts such rows, and the caller then takes Arrow's encoding
instead, so a collision costs time, never a wrong group. The dictionary is the first rows'
strings, taken on the host; ``ordered`` sorts it and renumbers the codes to follow it.

Null rows take no part in the numbering: their code is 0 and their validity False, as in
columns.py's Arrow path.

Example:
    >>> import pyarrow as pa, torch
    >>> codes, valid, dictionary = string_codes(pa.chunked_array([["b", "a", None, "b"]]),
    ...                                         torch.device("cpu"), ordered=True)
    >>> codes.tolist(), valid.tolist(), dictionary.to_pylist()
    ([1, 0, 0, 1], [True, True, False, True], ['a', 'b'])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gpuhash._common.transfers import SMALLEST, to_device, upload_into
from gpuhash._common.validity import validity_on
from gpuhash.groupby.engine import engine_for
from gpuhash.join.frames import unviewed

MERGED_BYTES = SMALLEST  # chunks smaller than this on average are combined before they travel


def plain_strings(chunked):
    """The column with string or binary chunks of 32- or 64-bit offsets (views cast)."""
    plain = unviewed(chunked.type)
    return chunked if plain == chunked.type else chunked.cast(plain)


def sort_order(dictionary) -> np.ndarray:
    """The positions of ``dictionary``'s strings in sorted order (views sorted as the plain
    strings they hold: Arrow sorts no views)."""
    import pyarrow.compute as pc

    plain = unviewed(dictionary.type)
    return np.asarray(pc.array_sort_indices(
        dictionary if plain == dictionary.type else dictionary.cast(plain)))


def _pieces(chunked) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each chunk's (offsets of its rows, as Arrow stores them; its bytes)."""
    import pyarrow.types as pt

    large = pt.is_large_string(chunked.type) or pt.is_large_binary(chunked.type)
    width = np.int64 if large else np.int32
    pieces = []
    for chunk in chunked.chunks:
        if not len(chunk):
            continue
        buffers = chunk.buffers()
        offsets = np.frombuffer(buffers[1], dtype=width)[chunk.offset:chunk.offset +
                                                         len(chunk) + 1]
        data = (np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else
                np.zeros(0, np.uint8))
        pieces.append((offsets, data[int(offsets[0]):int(offsets[-1])]))
    return pieces


def upload_strings(chunked, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(int64 offsets of every row, rows + 1; the bytes, uint8) of a string column on
    ``device``, its chunks laid end to end."""
    chunked = plain_strings(chunked)
    if chunked.num_chunks > 1 and chunked.nbytes < MERGED_BYTES * chunked.num_chunks and (
            chunked.nbytes < 1 << 30):  # many small chunks: one copy here, not a trip each
        import pyarrow as pa

        chunked = pa.chunked_array([chunked.combine_chunks()], chunked.type)
    pieces = _pieces(chunked)
    rows = sum(p[0].shape[0] - 1 for p in pieces)
    total = sum(p[1].shape[0] for p in pieces)
    offsets = torch.zeros(rows + 1, dtype=torch.int64, device=device)
    data = torch.empty(total, dtype=torch.uint8, device=device)
    row, base = 0, 0
    for chunk_offsets, chunk_data in pieces:
        size = chunk_data.shape[0]
        if size:
            upload_into(data[base:base + size], chunk_data)
        moved = to_device(chunk_offsets, device).to(torch.int64)
        offsets[row:row + moved.shape[0]] = moved - int(chunk_offsets[0]) + base
        row += moved.shape[0] - 1
        base += size
    return offsets, data


def _validity(chunked, device: torch.device) -> torch.Tensor | None:
    return validity_on(chunked, device) if chunked.null_count else None


def _first_rows(codes: torch.Tensor, count: int) -> torch.Tensor:
    """Each code's least row (the CPU engine's compaction numbers by value, not first rows)."""
    rows = torch.arange(codes.shape[0], device=codes.device)
    first = torch.full((count,), codes.shape[0], dtype=torch.int64, device=codes.device)
    return first.scatter_reduce_(0, codes, rows, reduce="amin")


def _rows_of(chunked, rows: np.ndarray):
    """The strings of ``rows`` (distinct) as one Arrow array, taken chunk by chunk: a take
    from the whole column would first combine its chunks, a copy of every byte."""
    import pyarrow as pa

    from gpuhash.join.arrow_gather import take_column

    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    ends = np.cumsum([len(c) for c in chunked.chunks])
    cuts = np.searchsorted(ordered, ends)
    parts, start, base = [], 0, 0
    for chunk, stop, end in zip(chunked.chunks, cuts, ends):
        if stop > start:
            part = take_column(chunk, ordered[start:stop] - base, may_miss=False,
                               ascending=True)
            parts.extend(part.chunks if isinstance(part, pa.ChunkedArray) else [part])
        start, base = stop, end
    taken = pa.concat_arrays(parts) if parts else pa.array([], type=chunked.type)
    if not np.array_equal(order, np.arange(rows.shape[0])):  # back to the rows' order
        back = np.empty_like(order)
        back[order] = np.arange(order.shape[0])
        taken = taken.take(pa.array(back))
    return taken


def string_codes(chunked, device: torch.device, *, ordered: bool
                 ) -> tuple[torch.Tensor, torch.Tensor | None, Any] | None:
    """(int32 codes on ``device``, 0 at nulls; validity or None; the dictionary, an Arrow
    array the codes index) of a string or binary column, or None when two of its strings
    share a hash (the caller encodes it another way). ``ordered``: codes follow the strings'
    order."""
    import pyarrow as pa

    if not len(chunked):
        return (torch.zeros(0, dtype=torch.int32, device=device), None,
                pa.array([], type=plain_strings(chunked).type))
    engine = engine_for(device)
    offsets, data = upload_strings(chunked, device)
    valid = _validity(chunked, device)
    hashes = engine.string_hashes(offsets, data)
    rows = offsets.shape[0] - 1
    if valid is None:
        codes, distinct, first = engine.group_compact(hashes)
    else:
        kept = valid.nonzero().squeeze(1)
        kept_codes, distinct, first = engine.group_compact(hashes[kept])
        first = None if first is None else kept[first]
        codes = torch.full((rows,), -1, dtype=torch.int64, device=device)
        codes[kept] = kept_codes
    count = distinct.shape[0]
    if first is None:  # the CPU engine numbers by value: each code's least row
        first = (_first_rows(codes, count) if valid is None else
                 kept[_first_rows(kept_codes, count)])
    if engine.string_mismatches(offsets, data, codes, first):
        return None
    dictionary = _rows_of(chunked, first.cpu().numpy())
    if ordered and count:
        order = sort_order(dictionary)
        rank = np.empty(count, dtype=np.int64)
        rank[order] = np.arange(count, dtype=np.int64)
        dictionary = dictionary.take(order)
        codes = torch.from_numpy(rank).to(device)[codes.clamp(min=0)]
    if valid is not None:
        codes = codes.clamp(min=0).masked_fill_(~valid, 0)
    return codes.to(torch.int32), valid, dictionary
