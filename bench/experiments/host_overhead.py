"""Where the host time of a 1K-key find and default insert goes, piece by piece (device
experiment; reads internals, patches nothing).
Run: PYTHONPATH=src python bench/experiments/host_overhead.py.
Output of 2026-11-23: bench/results/host_overhead_h100_2026-11-23_dd65a83.txt."""

import numpy as np
import torch

import gpuhash as gh
from gpuhash._common.batch import last_occurrence
from gpuhash._common.cuda import launch as L
from gpuhash._common.cuda.compile import load_module
from gpuhash.bench.harness import time_host_calls
from gpuhash.table.cuda import engine as E

dev = torch.device("cuda")
keys = torch.randint(0, 1 << 30, (1000,), device=dev)
m = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=1 << 20, device=dev)
m.insert(keys, keys)
st = m._state
kern, table, di = E._launch_info(st)
k = kern["gh_lookup"]
noop = load_module("bench.cu", (), 0).get_kernel("gh_noop")
vals = keys.new_empty(1000)
found = keys.new_empty(1000, dtype=torch.bool)
default = m._default(0)
r = {}
r["find"] = time_host_calls(lambda: m.find(keys))
r["contains"] = time_host_calls(lambda: m.contains(keys))
r["engine.find"] = time_host_calls(lambda: E.find(st, keys, default))
r["launch gh_lookup (12 args)"] = time_host_calls(
    lambda: L.launch(
        k,
        1000,
        *table,
        keys.data_ptr(),
        1000,
        vals.data_ptr(),
        default.data_ptr(),
        0,
        found.data_ptr(),
        device=0,
    )
)
r["launch noop"] = time_host_calls(lambda: L.launch(noop, 1, device=0))
args12 = (*table, keys.data_ptr(), 1000, vals.data_ptr(), default.data_ptr(), 0, found.data_ptr())
from cuda.core import launch as cl  # noqa: E402  (needs the CUDA setup above)

stream = L._stream(0, torch._C._cuda_getCurrentRawStream(0))
cfg = L._config(4)
r["cuda.core launch 12 args raw"] = time_host_calls(lambda: cl(stream, cfg, k, *args12))
r["cuda.core launch noop raw"] = time_host_calls(lambda: cl(stream, cfg, noop))
try:
    from cuda.bindings import driver

    fn = k._handle if hasattr(k, "_handle") else k.handle
    h = int(fn) if not hasattr(fn, "getPtr") else fn.getPtr()
    buf = np.array(args12, dtype=np.int64)
    ptrs = np.array([buf.ctypes.data + 8 * i for i in range(12)], dtype=np.uint64)
    sh = torch._C._cuda_getCurrentRawStream(0)

    def raw():
        driver.cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, sh, ptrs.ctypes.data, 0)

    raw()
    torch.cuda.synchronize()
    r["driver.cuLaunchKernel prepacked"] = time_host_calls(raw)

    def raw2():
        b = np.array(args12, dtype=np.int64)
        p = np.arange(12, dtype=np.uint64) * 8 + b.ctypes.data
        driver.cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, sh, p.ctypes.data, 0)

    r["driver.cuLaunchKernel pack per call"] = time_host_calls(raw2)
except Exception as e:
    r["driver error"] = repr(e)
r["new_empty x2"] = time_host_calls(
    lambda: (keys.new_empty(1000), keys.new_empty(1000, dtype=torch.bool))
)
r["_keys"] = time_host_calls(lambda: m._keys(keys))
r["_default"] = time_host_calls(lambda: m._default(0))
r["getCurrentRawStream"] = time_host_calls(lambda: torch._C._cuda_getCurrentRawStream(0))
r["last_occurrence 1K"] = time_host_calls(lambda: last_occurrence(keys))
vals64 = keys.clone()
r["insert default 1K"] = time_host_calls(lambda: m.insert(keys, vals64))
r["engine.insert active 1K"] = time_host_calls(
    lambda: E.insert(st, keys, vals64, active=torch.ones(1000, dtype=torch.bool, device=dev))
)
r["engine.insert any 1K"] = time_host_calls(lambda: E.insert(st, keys, vals64))
ma = gh.HashMap(
    key_dtype=torch.int64, value_dtype=torch.int64, capacity=1 << 20, device=dev, duplicates="any"
)
r["insert any 1K"] = time_host_calls(lambda: ma.insert(keys, vals64))
for a, b in r.items():
    print(f"{a:40s} {b if isinstance(b, str) else f'{b:7.2f} us'}")
