"""The memory floor of a CacheMap find on HKV's dim-8 workload, beside the find: for the same 1M
queries (60% drawn from the loaded keys, as `gpuhash bench cache`) of a 128M-slot cache in
128-slot buckets at load 0.5 / 0.75 / 1.0, a kernel that makes only the accesses the layout
requires of each query and nothing else: b1's 128 digest bytes; b2's where the key is not in
b1 (misses, and hits placed in b2); the found key's word; for find its 32-byte value row; and
the outputs (an index and a found byte; for find the value row). Its buckets come from the
CPU engine's own hash (engines/cpu.py: bucket_choices, run on the GPU tensors), its slots from
find_index. Each is timed back to back (20 calls between two CUDA events, so the host's launch
time hides behind the kernels), CUDA-event ms a call. Needs CuPy for the floor's kernel.
On the GPU machine: PYTHONPATH=src python bench/experiments/cache_find_floor.py (LOADS=0.5
picks loads)."""

import os

import cupy
import torch
from _timing import back_to_back
from _workload import filled_cache
from random_access_ceiling import rate

from gpuhash.table.cpu import engine as cpu

BATCH, DIM, CAP, SLOTS = 1 << 20, 8, 1 << 27, 128
DEV = torch.device("cuda")
SOURCE = r"""
extern "C" __global__ void floor_find(const uint4* digests, const unsigned long long* keys,
    const uint4* values, const long long* b1, const long long* b2, const long long* slot,
    const unsigned char* need_b2, long long n, int copy, long long* index, unsigned char* found,
    uint4* out, unsigned int* sink) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned int acc = 0;
  const uint4* p = digests + b1[i] * 8;  // 128 slots: 8 pieces of 16 digest bytes
#pragma unroll
  for (int k = 0; k < 8; ++k) { const uint4 q = __ldg(p + k); acc ^= q.x ^ q.y ^ q.z ^ q.w; }
  if (need_b2[i]) {
    p = digests + b2[i] * 8;
#pragma unroll
    for (int k = 0; k < 8; ++k) { const uint4 q = __ldg(p + k); acc ^= q.x ^ q.y ^ q.z ^ q.w; }
  }
  const long long s = slot[i];
  if (s >= 0) {
    acc ^= (unsigned int)__ldg(keys + s);
    if (copy) {
      const uint4 v0 = __ldg(values + 2 * s), v1 = __ldg(values + 2 * s + 1);
      out[2 * i] = v0;
      out[2 * i + 1] = v1;
    }
  } else if (copy) {
    out[2 * i] = make_uint4(0, 0, 0, 0);
    out[2 * i + 1] = make_uint4(0, 0, 0, 0);
  }
  index[i] = s;
  found[i] = s >= 0;
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads
}
"""
KERNEL = cupy.RawKernel(SOURCE, "floor_find")
def ceilings() -> None:
    """Random 128-byte lines and 8-byte words a second from a 1 GiB region
    (random_access_ceiling.py), and what the floor's accesses of one query batch at load 0.5
    (1.6 lines and 0.6 words a query, as measured above) would take at those rates with
    nothing else (no outputs, no host)."""
    n = 1 << 22
    line_rate = n / rate(n, 1 << 30, 8) / 1e6  # G a second
    word_rate = n / rate(n, 1 << 30, 0) / 1e6
    floor_us = (1.6 * BATCH / line_rate + 0.6 * BATCH / word_rate) / 1e3
    print(f"ceilings: random 128-byte lines {line_rate:.1f} G/s, random 8-byte words "
          f"{word_rate:.1f} G/s; 1.6 lines and 0.6 words a query for {BATCH} queries: "
          f"{floor_us:.1f} us", flush=True)


def measure(load: float) -> None:
    cache, _, keys = filled_cache(load, capacity=CAP, dim=DIM, batch=BATCH, bucket_slots=SLOTS,
                                  device=DEV)
    keys = keys.view(torch.int64)
    slot, _ = cache.find_index(keys.view(torch.uint64))
    state = cache._state
    b1, b2, _, _ = cpu.bucket_choices(state, keys)
    need_b2 = ((slot < 0) | (torch.div(slot, SLOTS, rounding_mode="floor") != b1)) & (b2 != b1)
    need_b2 = need_b2.to(torch.uint8)
    index = torch.empty(BATCH, dtype=torch.int64, device=DEV)
    found = torch.empty(BATCH, dtype=torch.uint8, device=DEV)
    out = torch.empty(BATCH, DIM, dtype=torch.float32, device=DEV)
    sink = torch.zeros(1, dtype=torch.int32, device=DEV)
    args = [cupy.from_dlpack(t) for t in (state.digests, state.keys, state.values, b1, b2, slot,
                                          need_b2)]

    def floor(copy: int):
        KERNEL(((BATCH + 255) // 256,), (256,),
               (*args, cupy.int64(BATCH), cupy.int32(copy), cupy.from_dlpack(index),
                cupy.from_dlpack(found), cupy.from_dlpack(out), cupy.from_dlpack(sink)))

    floor(0)
    torch.cuda.synchronize()
    assert torch.equal(index, slot), "the floor kernel's index differs from find_index's"
    ms = {
        "find_index": back_to_back(lambda: cache.find_index(keys.view(torch.uint64))),
        "floor (index)": back_to_back(lambda: floor(0)),
        "find": back_to_back(lambda: cache.find(keys.view(torch.uint64))),
        "floor (values)": back_to_back(lambda: floor(1)),
    }
    found_share = float((slot >= 0).float().mean())
    b2_share = float(need_b2.float().mean())
    print(f"load {load}: found {found_share:.3f}, b2 read by {b2_share:.3f} of the queries; "
          + ", ".join(f"{k} {v * 1e3:.1f} us" for k, v in ms.items())
          + f"; find_index / floor {ms['find_index'] / ms['floor (index)']:.2f}, "
          f"find / floor {ms['find'] / ms['floor (values)']:.2f}", flush=True)


ceilings()
for load in os.environ.get("LOADS", "0.5,0.75,1.0").split(","):  # LOADS=0.5 for ncu
    measure(float(load))
    torch.cuda.empty_cache()
