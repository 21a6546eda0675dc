"""The join's CPU engine (the build and probe over a MultiMap's table, the radix join, the
loops of merges of host tables).

``BLOCK`` and ``INLINE`` live here, not in table_loops.py, so the merges' Python side can
use them without importing the loops: those compile only after _common/cpu/runtime.py has
chosen numba's cache directory."""

BLOCK = 1 << 16  # rows a block of the merge loops: amortises a thread's start, still balances
INLINE = 12  # bytes of a string an Arrow string view holds in itself
