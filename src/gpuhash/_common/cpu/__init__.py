"""The CPU engines' shared parts: the numba runtime (threading layer, compile cache) and the
open-addressing probe walk every CPU engine reuses."""
