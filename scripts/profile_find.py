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
# the same launch through cuda.core's general launch, which launch.py used to call
from cuda.core import LaunchConfig, Stream  # noqa: E402
from cuda.core import launch as core_launch  # noqa: E402

stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
config = LaunchConfig(grid=4, block=256)
core = per_call(lambda: core_launch(stream, config, kernel, *args))
print(f"cuda.core launch      {core:6.1f} us")
print(f"torch.empty           {per_call(lambda: torch.empty(1024, device='cuda')):6.1f} us")
print(f"torch.cuda stream id  {per_call(lambda: torch._C._cuda_getCurrentRawStream(0)):6.1f} us")
profile = cProfile.Profile()
profile.enable()
for _ in range(3000):
    table.find(keys)
profile.disable()
torch.cuda.synchronize()
pstats.Stats(profile).sort_stats("tottime").print_stats(12)
