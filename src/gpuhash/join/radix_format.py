"""The layout of the radix-partitioned join's partitions, which both engines share
(join/cuda/radix.py, join/cpu/radix.py) and the kernels take from the same constants
(join/kernels/radix_join.cu: GhRadix).

A side is split by the top ``bits`` bits of each key code's partition hash into ``2**bits``
partitions, laid out one after another: codes, 4-byte row numbers, and ``2**bits + 1``
bounds. A partition's build rows go into a shared-memory table of SLOTS slots; one with more
than LIMIT of them is left to the global table. The number of partitions is chosen so that a
partition averages TARGET rows, 3/8 of its table.

Example:
    >>> partition_bits(100_000_000, 4), partition_bits(10, 8)
    (16, 2)
"""

from __future__ import annotations

import math

from gpuhash._common.constants import RADIX_PROBE_CHUNK, RADIX_SLOTS, RADIX_TILE

TILE = RADIX_TILE               # rows a partition block stages, by code bytes
STAGED_BYTES = {b: t * (b + 4) for b, t in TILE.items()}  # its dynamic shared memory
# the shared memory a GPU must let one block take: the larger tile, and a bound on the
# scatter's own arrays (4,160 bytes for sm_80 and sm_90)
BLOCK_SHARED_BYTES = max(STAGED_BYTES.values()) + 8192
SLOTS = RADIX_SLOTS             # a partition's shared-memory table
LIMIT = {b: s // 4 * 3 for b, s in SLOTS.items()}  # more build rows: left to the global table
TARGET = {b: s * 3 // 8 for b, s in SLOTS.items()}  # build rows a partition, on average
PROBE_CHUNK = RADIX_PROBE_CHUNK  # probe rows a join block takes at most
MIN_BITS, MAX_BITS = 2, 16      # two passes of at most 8 bits (256 bins a block)
MAX_ROWS = 2**31 - 1            # rows are 4-byte numbers


def partition_bits(build_rows: int, code_bytes: int) -> int:
    """The partition bits for a build side of ``build_rows`` rows of ``code_bytes`` codes:
    enough that a partition averages TARGET rows, within [MIN_BITS, MAX_BITS]."""
    want = math.ceil(math.log2(max(build_rows, 1) / TARGET[code_bytes])) if build_rows else 0
    return min(MAX_BITS, max(MIN_BITS, want))


def pass_bits(bits: int) -> tuple[int, int]:
    """Bits the first and the second pass sort by: the high half (rounded up), then the low."""
    return bits - bits // 2, bits // 2


def max_build_rows(code_bytes: int) -> int:
    """The most build rows the partitions are sized for: 2**MAX_BITS partitions, each half
    full on average (past that, the partitions' tables crowd towards LIMIT)."""
    return (1 << MAX_BITS) * (SLOTS[code_bytes] // 2)
