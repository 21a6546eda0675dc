"""The arrays a GPU build of 32-bit codes tries before its hash table, and their sizes: a
direct array (an entry a code) where it fits in L2, else a ranked array (a bit a code, with
ranks) where most of it stays there. The planner budgets for the larger one
(``planned_array_words``); the build asks for the one its codes' span allows
(``array_words``).

Example:
    >>> direct_entries(5000), ranked_words(10_000_000)
    (16384, 1048576)
"""

from __future__ import annotations

from gpuhash._common.constants import RANK_CHUNK_WORDS
from gpuhash.table.format import L2_TABLE_BYTES

# A build side of 32-bit codes on a GPU first tries a direct array
# (join/kernels/join_build.cuh: gh_join_direct_rows), an 8-byte entry per code modulo a power
# of two at least DIRECT_SPAN times its rows, where its array fits in L2 (there a probe row
# costs one sector read; past L2 it saved too little time over the table to be worth the
# memory) and it has enough rows for the extra launch to pay (smaller tables sit in L1 and L2
# anyway).
DIRECT_SPAN = 2
DIRECT_MIN_ROWS = 4096
DIRECT_MAX_BYTES = L2_TABLE_BYTES


def direct_entries(rows: int, code_span: int | None = None) -> int:
    """Entries of the direct array a build side of ``rows`` rows tries (0: none). With the
    codes' span known (``code_span``: a fitted encoder's), the array covers it exactly, and
    none is tried where it is wider than the rows allow; unknown, it is DIRECT_SPAN times
    the rows (rounded up to a power of two), and codes that collide there give it up.

    Example:
        >>> direct_entries(5000), direct_entries(5000, code_span=5000), direct_entries(10)
        (16384, 8192, 0)
    """
    if rows < DIRECT_MIN_ROWS:
        return 0
    entries = 1 << (DIRECT_SPAN * rows - 1).bit_length()
    if code_span is not None:
        if code_span > entries:
            return 0
        entries = 1 << max(code_span - 1, 1).bit_length()
    return entries if entries * 8 <= DIRECT_MAX_BYTES else 0


# Where no direct array is tried for want of L2, a build side of 32-bit codes tries a ranked
# array (join/kernels/join_build.cuh: gh_join_ranked_bits): a bit a code below a power of two at
# least DIRECT_SPAN times its rows (or 32 bits a word over the codes' known span, up to
# RANKED_SPAN times the rows), each word's rank beside its bits, and the build rows in code
# order, 4 bytes each: 10M rows (codes spanning twice that) take 48 MB there against 256 MB of
# direct entries. A probe row reads a word and a row, so the array pays only while most of it
# stays in L2: a build whose array is about L2's size probed much faster through it than through
# the table, one whose array is many times L2 slower, hence RANKED_MAX_BYTES.
RANKED_SPAN = 32
RANKED_MAX_ROWS = 2**31 - 1  # its rows are 4-byte
RANKED_MAX_BYTES = 2 * L2_TABLE_BYTES


def ranked_words(rows: int, code_span: int | None = None) -> int:
    """Words (32 codes each) of the ranked array a build side of ``rows`` rows tries in place
    of a direct array (0: none, or a direct array is tried).

    Example:
        >>> ranked_words(10_000_000), ranked_words(5000), ranked_words(10**8)
        (1048576, 0, 0)
    """
    if (rows < DIRECT_MIN_ROWS or rows > RANKED_MAX_ROWS or direct_entries(rows)
            or direct_entries(rows, code_span)):
        return 0  # (a build whose direct array fits L2 at any span keeps to it or the table)
    if code_span is None:
        words = 1 << ((DIRECT_SPAN * rows - 1).bit_length() - 5)
    elif code_span <= RANKED_SPAN * rows:
        words = -(-code_span // 32)
    else:
        return 0
    return words if 8 * words + 4 * rows <= RANKED_MAX_BYTES else 0


def ranked_extra_words(rows: int, words: int) -> int:
    """Words a ranked array needs beside its bits: one for its base, the rows in code order
    (4 bytes each), then one a chunk of RANK_CHUNK_WORDS for the ranks."""
    return 1 + (rows + 1) // 2 + -(-words // RANK_CHUNK_WORDS)


def array_words(rows: int, code_span: int | None = None) -> tuple[int, int]:
    """The words a GPU build of ``rows`` rows of 32-bit codes gives the array it tries: the
    direct array's entries or the ranked array's bits, with the failed word; and a ranked
    array's other words (0 for a direct array). (0, 0): none.

    Example:
        >>> array_words(5000), array_words(10)
        ((16385, 0), (0, 0))
    """
    entries = direct_entries(rows, code_span)
    if entries:
        return entries + 1, 0
    words = ranked_words(rows, code_span)
    return (words + 1, ranked_extra_words(rows, words)) if words else (0, 0)


def planned_array_words(rows: int) -> int:
    """The most words the direct or ranked array of a GPU build of ``rows`` rows of 32-bit
    codes may take, whatever its codes' span (a fitted encoder's span sizes a ranked array up
    to a word a row), its failed word and a ranked array's other words included (0: none).

    Example:
        >>> planned_array_words(5000) == direct_entries(5000) + 1, planned_array_words(10**8)
        (True, 0)
    """
    entries = direct_entries(rows)
    if entries:
        return entries + 1  # a known span only narrows it
    if rows < DIRECT_MIN_ROWS or rows > RANKED_MAX_ROWS:
        return 0
    words = min(rows, (RANKED_MAX_BYTES - 4 * rows) // 8)
    return words + 1 + ranked_extra_words(rows, words) if words > 0 else 0
