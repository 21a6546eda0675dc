"""The group-by's CPU engine: numba loops over the same codes and values as the CUDA engine."""
