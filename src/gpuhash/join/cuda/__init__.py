"""The join's CUDA engine (kernels in join/kernels, compiled by NVRTC)."""
