"""The sharded tables' CPU engine: numba loops over the same keys as the CUDA engine."""
