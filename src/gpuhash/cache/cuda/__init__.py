"""The cache's CUDA engine (kernels in cache/kernels, compiled by NVRTC)."""
