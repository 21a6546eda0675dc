"""CUDA plumbing: run-time compilation with a disk cache, and kernel launches on torch streams."""
