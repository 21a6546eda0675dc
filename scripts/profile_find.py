"""Where the host time of a small find goes (run on the GPU machine): the whole call, its
parts timed alone, and a cProfile of the call."""

import cProfile
import pstats

import torch

import gpuhash as gh
from gpuhash._cuda.launch import launch
from gpuhash.bench.harness import time_host_calls
from gpuhash.engines import cuda as engine


def per_call(fn):
    return time_host_calls(fn, calls=3000)


table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1 << 16,
                   device="cuda")
keys = torch.arange(1024, device="cuda")
table.insert(keys, torch.ones(1024, device="cuda"))
state = table._state
default = table._default(0)
found = torch.empty(1024, dtype=torch.bool, device="cuda")
kernel = engine._kernel(state, "gh_lookup")
args = (*engine._table_args(state), keys.data_ptr(), 1024, 0, 0, 0, found.data_ptr())
print(f"table.find            {per_call(lambda: table.find(keys)):6.1f} us")
print(f"table.contains        {per_call(lambda: table.contains(keys)):6.1f} us")
print(f"engine.find           {per_call(lambda: engine.find(state, keys, default)):6.1f} us")
alone = per_call(lambda: launch(kernel, 1024, *args, device=keys.device))
print(f"launch alone          {alone:6.1f} us")
# the same launch through cuda.core alone, without launch.py's stream and config lookups
from cuda.core import LaunchConfig, Stream  # noqa: E402
from cuda.core import launch as core_launch  # noqa: E402

stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
config = LaunchConfig(grid=4, block=256)
core = per_call(lambda: core_launch(stream, config, kernel, *args))
print(f"cuda.core launch      {core:6.1f} us")
# does the number of kernel arguments matter? gh_gather takes 4 against gh_lookup's 12
from gpuhash._cuda.compile import load_module  # noqa: E402

gather = load_module("bench.cu", (), 0).get_kernel("gh_gather")
words = torch.zeros(1024, dtype=torch.int64, device="cuda")
spots = torch.zeros(1024, dtype=torch.int32, device="cuda")
few = (words.data_ptr(), spots.data_ptr(), words.data_ptr(), 1024)
four = per_call(lambda: core_launch(stream, config, gather, *few))
print(f"cuda.core, 4 args     {four:6.1f} us")
# the same launch through the driver's cuLaunchKernel called with ctypes, parameters in a
# reused buffer (a candidate for launch.py)
import ctypes  # noqa: E402

libcuda = ctypes.CDLL("libcuda.so.1")
cu_launch = libcuda.cuLaunchKernel
cu_launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
cu_launch.restype = ctypes.c_int
param_values = (ctypes.c_uint64 * 24)()
param_base = ctypes.addressof(param_values)
param_pointers = (ctypes.c_void_p * 24)(*(param_base + 8 * i for i in range(24)))
param_address = ctypes.addressof(param_pointers)
function = int(kernel.handle)


def ctypes_launch():
    param_values[: len(args)] = args
    handle = torch._C._cuda_getCurrentRawStream(0)
    if cu_launch(function, 4, 1, 1, 256, 1, 1, 0, handle, param_address, None) != 0:
        raise RuntimeError("launch failed")


ctypes_launch()
torch.cuda.synchronize()
print(f"ctypes cuLaunchKernel {per_call(ctypes_launch):6.1f} us")
found.fill_(False)
ctypes_launch()
assert bool(found.all()), "the ctypes launch did not run the kernel"
# ways to allocate an output
print(f"torch.empty(device=)  {per_call(lambda: torch.empty(1024, device=keys.device)):6.1f} us")
print(f"keys.new_empty        {per_call(lambda: keys.new_empty(1024, dtype=torch.bool)):6.1f} us")
print(f"torch.empty_like      {per_call(lambda: torch.empty_like(keys, dtype=torch.bool)):6.1f} us")
print(f"torch.empty           {per_call(lambda: torch.empty(1024, device='cuda')):6.1f} us")
print(f"torch.cuda stream id  {per_call(lambda: torch._C._cuda_getCurrentRawStream(0)):6.1f} us")
profile = cProfile.Profile()
profile.enable()
for _ in range(3000):
    table.find(keys)
profile.disable()
torch.cuda.synchronize()
pstats.Stats(profile).sort_stats("tottime").print_stats(12)
