"""Arrow validity bitmaps as one bool a row: unpacked by NumPy on the host, or sent to a GPU
as the bits themselves (an eighth of the bytes) and unpacked there.

Arrow's ``is_valid()`` followed by ``np.asarray`` makes the bools element by element on one
thread, a pass as slow as several copies of the column; ``np.unpackbits`` expands whole
bytes. A chunk's bits start at its offset, which need not fall on a byte.

Example:
    >>> import pyarrow as pa, torch
    >>> array = pa.array([1, None, 3, None, 5]).slice(1)
    >>> host_validity(array).tolist()
    [False, True, False, True]
    >>> validity_on(pa.chunked_array([array, array]), torch.device("cpu")).tolist()
    [False, True, False, True, False, True, False, True]
"""

from __future__ import annotations

import numpy as np
import torch

from gpuhash._common.transfers import to_device


def _bits(array) -> tuple[np.ndarray, int]:
    """The bytes holding ``array``'s validity bits and the first bit's place in the first."""
    first = array.offset
    raw = np.frombuffer(array.buffers()[0], np.uint8)
    return raw[first // 8:(first + len(array) + 7) // 8], first % 8


def host_validity(array) -> np.ndarray:
    """One bool a row of an Arrow array (True: a value), in host memory."""
    if not array.null_count:
        return np.ones(len(array), dtype=bool)
    raw, skip = _bits(array)
    return np.unpackbits(raw, bitorder="little")[skip:skip + len(array)].view(bool)


def validity_on(chunked, device: torch.device) -> torch.Tensor:
    """One bool a row of a ChunkedArray, on ``device``: on a GPU each chunk's bits travel and
    are unpacked there."""
    if device.type != "cuda":
        parts = [host_validity(c) for c in chunked.chunks]
        joined = np.concatenate(parts) if parts else np.ones(0, dtype=bool)
        return torch.from_numpy(joined)
    out = torch.empty(len(chunked), dtype=torch.bool, device=device)
    shifts = torch.arange(8, dtype=torch.uint8, device=device)
    start = 0
    for chunk in chunked.chunks:
        rows = len(chunk)
        if not chunk.null_count:
            out[start:start + rows] = True
        elif rows:
            raw, skip = _bits(chunk)
            packed = to_device(raw, device)
            unpacked = ((packed[:, None] >> shifts) & 1).view(-1)
            out[start:start + rows] = unpacked[skip:skip + rows].bool()
        start += rows
    return out
