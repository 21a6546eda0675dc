"""The cache's CPU engine (numba loops over the cache format)."""
