"""The table's CPU engine (numba loops over the table format)."""
