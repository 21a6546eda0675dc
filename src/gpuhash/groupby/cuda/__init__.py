"""The group-by's CUDA engine: kernels compiled at run time, launched on torch's stream."""
