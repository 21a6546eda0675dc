"""Arrow validity bitmaps to one bool a row and back: unpacked by NumPy on the host, or sent
to a GPU as the bits themselves (an eighth of the bytes) and unpacked there; and packed by
NumPy under an Arrow array of results.

Arrow's ``is_valid()`` followed by ``np.asarray`` makes the bools element by element on one
thread, and so does ``pa.array(values, mask=...)`` the bits, each a pass as slow as several
copies of the column; ``np.unpackbits`` and ``np.packbits`` take whole bytes. A chunk's bits
start at its offset, which need not fall on a byte.

Example:
    >>> import pyarrow as pa, torch
    >>> array = pa.array([1, None, 3, None, 5]).slice(1)
    >>> host_validity(array).tolist()
    [False, True, False, True]
    >>> validity_on(pa.chunked_array([array, array]), torch.device("cpu")).tolist()
    [False, True, False, True, False, True, False, True]
    >>> import numpy as np
    >>> arrow_array(np.array([1.5, 2.5]), np.array([True, False])).to_pylist()
    [1.5, None]
"""

from __future__ import annotations

import numpy as np
import torch

from gpuhash._common.transfers import to_device

# Chunks of at least this many rows on average send their bits to the GPU, a transfer and a
# few launches a chunk; smaller ones are unpacked on the host and travel as one array of bools
# (a chunk's fixed cost would outweigh unpacking its rows).
GPU_UNPACK_ROWS = 1 << 17


def _bits(array) -> tuple[np.ndarray, int]:
    """The bytes holding ``array``'s validity bits and the first bit's place in the first."""
    first = array.offset
    raw = np.frombuffer(array.buffers()[0], np.uint8)
    return raw[first // 8:(first + len(array) + 7) // 8], first % 8


def _own_bits(array) -> bool:
    """Whether the array's own bitmap says which rows are null: not for arrays without one
    (all-null arrays) nor for dictionary arrays, whose dictionary may hold a null."""
    import pyarrow as pa

    return array.buffers()[0] is not None and not pa.types.is_dictionary(array.type)


def host_validity(array) -> np.ndarray:
    """One bool a row of an Arrow array (True: a value), in host memory."""
    if not array.null_count:
        return np.ones(len(array), dtype=bool)
    if not _own_bits(array):
        return np.asarray(array.is_valid())
    raw, skip = _bits(array)
    return np.unpackbits(raw, bitorder="little")[skip:skip + len(array)].view(bool)


def validity_on(chunked, device: torch.device) -> torch.Tensor:
    """One bool a row of a ChunkedArray, on ``device``: on a GPU each chunk's bits travel and
    are unpacked there, unless its chunks are small (GPU_UNPACK_ROWS)."""
    few_rows = len(chunked) < GPU_UNPACK_ROWS * chunked.num_chunks  # small chunks on average
    if device.type != "cuda" or few_rows:
        parts = [host_validity(c) for c in chunked.chunks]
        joined = torch.from_numpy(np.concatenate(parts) if parts else np.ones(0, dtype=bool))
        return joined if device.type != "cuda" else to_device(joined.numpy(), device)
    out = torch.empty(len(chunked), dtype=torch.bool, device=device)
    shifts = torch.arange(8, dtype=torch.uint8, device=device)
    start = 0
    for chunk in chunked.chunks:
        rows = len(chunk)
        if not chunk.null_count:
            out[start:start + rows] = True
        elif not _own_bits(chunk):
            out[start:start + rows] = torch.from_numpy(host_validity(chunk)).to(device)
        elif rows:
            raw, skip = _bits(chunk)
            packed = to_device(raw, device)
            unpacked = ((packed[:, None] >> shifts) & 1).view(-1)
            out[start:start + rows] = unpacked[skip:skip + rows].bool()
        start += rows
    return out


def arrow_array(data: np.ndarray, valid: np.ndarray | None):
    """An Arrow array of the one-dimensional NumPy ``data`` (its values viewed, not copied,
    where Arrow's layout allows), null where ``valid`` (bools, or None: no nulls) is False."""
    import pyarrow as pa

    base = pa.array(data)
    if valid is None:
        return base
    bits = pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = len(valid) - int(np.count_nonzero(valid))
    return pa.Array.from_buffers(base.type, len(base), [bits, *base.buffers()[1:]],
                                 null_count=nulls)
