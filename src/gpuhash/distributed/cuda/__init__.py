"""The sharded tables' CUDA engine: the routing kernel, compiled at run time, launched on
torch's stream."""
