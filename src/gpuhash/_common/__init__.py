"""What every structure shares, below them all: arrays at the edge, stream ordering, constants
and hashes (one source), the CPU runtime and probe walk, and CUDA compilation and launch."""
