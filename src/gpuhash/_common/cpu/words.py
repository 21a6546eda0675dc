"""Bytes read eight at a time by the CPU engine's string loops (merges' string keys, group-bys'
string hashes): a string's bytes from any offset as little-endian words, through aligned loads
of the same buffer seen as uint64.

The words view comes from join/arrow_gather.py's ``as_words`` (kept out of this module, which
compiles: numba's cache directory is chosen before any loop module is imported).

Example:
    >>> import numpy as np
    >>> data = np.frombuffer(b"abcdefghijklmnop", np.uint8)
    >>> hex(word_at(data, np.empty(0, np.uint64), np.uint64(1), np.uint64(3)))
    '0x646362'
"""

from __future__ import annotations

import numba
import numpy as np

_JIT = {"cache": True, "nogil": True}


@numba.njit(inline="always", **_JIT)
def word_at(data, words, at, count):
    """``count`` (1 to 8) bytes of ``data`` from byte ``at`` (both unsigned) as a
    little-endian word, the bytes past them zero: two aligned loads of ``words`` shifted
    together, or byte by byte at the buffer's end (or where ``words`` is empty)."""
    q = at >> np.uint64(3)
    if q + np.uint64(1) < words.shape[0]:
        r = (at & np.uint64(7)) * np.uint64(8)
        word = words[q] >> r
        if r:
            word |= words[q + np.uint64(1)] << (np.uint64(64) - r)
    else:
        word = np.uint64(0)
        for j in range(count):
            word |= np.uint64(data[at + np.uint64(j)]) << np.uint64(8 * j)
    if count < 8:
        word &= (np.uint64(1) << (np.uint64(8) * count)) - np.uint64(1)
    return word
