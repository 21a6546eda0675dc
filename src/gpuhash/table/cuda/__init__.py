"""The table's CUDA engine (kernels in table/kernels, compiled by NVRTC)."""
