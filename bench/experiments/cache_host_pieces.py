"""Host microseconds of the pieces of a CacheMap find on the GPU machine: torch's allocations
of the outputs (and one buffer cut into views instead), a CUDA event's record (as a
benchmark's timer makes it), the package's launch of the lookup kernel, the engine's lookup
and the whole find / find_index of 1K keys (no sync: the host's part alone). Medians of 5
rounds of back-to-back calls.
On the GPU machine: PYTHONPATH=src python bench/experiments/cache_host_pieces.py"""

import statistics
import time

import torch

import gpuhash as gh
from gpuhash._common.cuda.launch import launch
from gpuhash.cache.cuda import engine as cache_cuda

DEV = torch.device("cuda")
N = 1 << 20


def timed(name: str, call, reps: int = 2000) -> None:
    for _ in range(100):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(reps):
            call()
        samples.append((time.perf_counter() - began) / reps * 1e6)
        torch.cuda.synchronize()
    print(f"{name:40s} {statistics.median(samples):6.2f} us", flush=True)


def main() -> None:
    keys = torch.randint(0, 2**62, (N,), device=DEV)
    timed("new_empty int64", lambda: keys.new_empty(N, dtype=torch.int64))
    timed("new_empty bool", lambda: keys.new_empty(N, dtype=torch.bool))
    timed("new_empty (N,8) f32", lambda: keys.new_empty((N, 8), dtype=torch.float32))

    def one_buffer():
        b = keys.new_empty(N * 9, dtype=torch.uint8)
        return b[: 8 * N].view(torch.int64), b[8 * N:].view(torch.bool)

    timed("one buffer + 2 views", one_buffer)
    event = torch.cuda.Event(enable_timing=True)
    timed("Event(enable_timing) + record", lambda: torch.cuda.Event(enable_timing=True).record())
    timed("event.record", lambda: event.record())
    cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,),
                        capacity=1 << 20, device=DEV)
    small = keys[:1024].view(torch.uint64)
    cache.insert_or_assign(small, torch.zeros(1024, 8, device=DEV))
    timed("find_index 1K (host, no sync)", lambda: cache.find_index(small), reps=500)
    timed("find 1K (host, no sync)", lambda: cache.find(small), reps=500)
    state = cache._state
    kernels, table, device = cache_cuda._launch_info(state)
    index = keys.new_empty(1024, dtype=torch.int64)
    found = keys.new_empty(1024, dtype=torch.bool)
    args = (*table, small.data_ptr(), 1024, 0, 0, 0, 0, 0, 0, 0, 0, index.data_ptr(),
            found.data_ptr(), 0)
    timed("launch() lookup_slots 1K",
          lambda: launch(kernels["lookup_slots"], 1024, *args, device=device), reps=500)
    timed("engine.lookup 1K", lambda: cache_cuda.lookup(state, small.view(torch.int64)),
          reps=500)


if __name__ == "__main__":
    main()
