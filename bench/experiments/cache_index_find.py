"""Would an exact key -> slot index beside the cache's slots make finds twice HKV's speed?
(Issue 11; the twentieth session's reading in bench/RESULTS.md says a find through such an
index reads one 128-byte line a query instead of 1.6 digest lines and the false matches'
key words.) The prototype measured before the package's index (kernels/cache_index.cuh,
the same layout) was built; nothing here is the package's code.

For HKV's dim-8 workload (u64 keys, f32 x 8, 128M slots, 1M queries a call, 60% drawn from
the loaded keys) at load 0.5 / 0.75 / 1.0, the cache is filled through CacheMap, then an index
is built from its key words: 2 entries a slot, 16 bytes an entry (key, slot as u32, and in a
bucket's first entry the count of keys that overflowed the bucket), 8 entries (one line) a
bucket, a key's bucket from its hash, the next bucket where one is full. A lookup reads its
bucket's line and stops there unless the bucket's overflow count says to go on. Timed, HKV's
way (host wall clock around a call and a sync, median of RUNS) and by CUDA events:
  - CacheMap.find_index and CacheMap.find, as they are;
  - the index's find_index (a thread a key; and eight lanes a key, one 16-byte entry each);
  - the index's find (a thread a key, the 32-byte row copied by that thread);
  - the index's upkeep a write would add: 1M new keys inserted, then erased.
and back to back (20 calls between two events: the GPU's time a call, host hidden).
Each index kernel's outputs are checked against CacheMap's. Needs CuPy.
On the GPU machine: PYTHONPATH=src python bench/experiments/cache_index_find.py"""

import os
import statistics
import time

import cupy
import torch
from _timing import back_to_back
from _workload import filled_cache

BATCH, DIM, CAP, SLOTS = 1 << 20, 8, 1 << 27, 128
RUNS = int(os.environ.get("RUNS", "9"))
DEV = torch.device("cuda")
SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;
#define EMPTY (~0ULL)
__device__ __forceinline__ u64 mix(u64 k) {  // murmur3's finaliser
  k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL;
  return k ^ (k >> 33);
}
// entry e of bucket b: index[2 * (8 b + e)] = key, index[2 * (8 b + e) + 1] = slot | count << 32
__device__ __forceinline__ bool idx_insert(u64* index, u64 mask, u64 key, u32 slot) {
  u64 b = mix(key) & mask;
  for (u64 step = 0; step <= mask; ++step) {
    u64* p = index + 16 * b;
    for (int e = 0; e < 8; ++e) {
      if (p[2 * e] != EMPTY) continue;
      if (atomicCAS(p + 2 * e, EMPTY, key) == EMPTY) {
        reinterpret_cast<u32*>(p + 2 * e + 1)[0] = slot;
        return true;
      }
    }
    atomicAdd(reinterpret_cast<u32*>(p + 1) + 1, 1u);  // one more key passed this bucket
    b = (b + 1) & mask;
  }
  return false;
}
extern "C" __global__ void build(const u64* keys, long long slots, u64* index, u64 mask) {
  const long long s = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (s >= slots) return;
  const u64 k = keys[s];
  if (k >= EMPTY - 1) return;
  idx_insert(index, mask, k, (u32)s);
}
extern "C" __global__ void insert_batch(const u64* keys, long long n, u64* index, u64 mask,
                                        u32 first_slot) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) idx_insert(index, mask, keys[i], first_slot + (u32)i);
}
extern "C" __global__ void erase_batch(const u64* keys, long long n, u64* index, u64 mask) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const u64 key = keys[i];
  u64 home = mix(key) & mask, b = home;
  for (;;) {
    u64* p = index + 16 * b;
    for (int e = 0; e < 8; ++e) {
      if (p[2 * e] == key) {
        p[2 * e] = EMPTY;
        for (u64 c = home; c != b; c = (c + 1) & mask)
          atomicSub(reinterpret_cast<u32*>(index + 16 * c + 1) + 1, 1u);
        return;
      }
    }
    if ((p[1] >> 32) == 0) return;
    b = (b + 1) & mask;
  }
}
__device__ __forceinline__ long long idx_lookup(const u64* index, u64 mask, u64 key) {
  u64 b = mix(key) & mask;
  for (;;) {
    const ulonglong2* p = reinterpret_cast<const ulonglong2*>(index + 16 * b);
    ulonglong2 q[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) q[e] = __ldg(p + e);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (q[e].x == key) return (long long)(u32)q[e].y;
    if ((q[0].y >> 32) == 0) return -1;
    b = (b + 1) & mask;
  }
}
extern "C" __global__ void find_index_thread(const u64* index, u64 mask, const u64* keys,
                                             long long n, long long* out, unsigned char* found) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const long long s = idx_lookup(index, mask, keys[i]);
  out[i] = s;
  found[i] = s >= 0;
}
// eight lanes a key: lane j of a group reads entry j (a group's load is one whole line)
extern "C" __global__ void find_index_group(const u64* index, u64 mask, const u64* keys,
                                            long long n, long long* out, unsigned char* found) {
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long i = t / 8;
  const int j = threadIdx.x & 7, lane = threadIdx.x & 31;
  const u32 group = 0xffu << (lane & ~7);
  if (i >= n) return;  // a group's lanes share i, and its shuffles name only them
  const u64 key = keys[i];
  u64 b = mix(key) & mask;
  long long s = -1;
  for (;;) {
    const ulonglong2 q = __ldg(reinterpret_cast<const ulonglong2*>(index + 16 * b) + j);
    const u32 hit = __ballot_sync(group, q.x == key) & group;
    if (hit) {
      const int at = __ffs(hit) - 1;
      s = (long long)(u32)__shfl_sync(group, q.y, at);
      break;
    }
    const u64 count = __shfl_sync(group, q.y, lane & ~7) >> 32;
    if (count == 0) break;
    b = (b + 1) & mask;
  }
  if (j == 0) {
    out[i] = s;
    found[i] = s >= 0;
  }
}
extern "C" __global__ void find_thread(const u64* index, u64 mask, const u64* keys,
                                       long long n, const uint4* values, uint4* out,
                                       unsigned char* found) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const long long s = idx_lookup(index, mask, keys[i]);
  uint4 a = make_uint4(0, 0, 0, 0), c = a;
  if (s >= 0) { a = __ldg(values + 2 * s); c = __ldg(values + 2 * s + 1); }
  out[2 * i] = a;
  out[2 * i + 1] = c;
  found[i] = s >= 0;
}
"""
MODULE = cupy.RawModule(code=SOURCE)
K = {name: MODULE.get_function(name) for name in (
    "build", "insert_batch", "erase_batch", "find_index_thread", "find_index_group",
    "find_thread")}


def c(t: torch.Tensor):
    return cupy.from_dlpack(t)


def timed(call) -> tuple[float, float]:
    """HKV's way (wall clock around call + sync) and CUDA events, median ms of RUNS calls."""
    wall, events = [], []
    for i in range(RUNS + 2):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        if i >= 2:
            wall.append((time.perf_counter() - began) * 1e3)
            events.append(start.elapsed_time(end))
    return statistics.median(wall), statistics.median(events)


def measure(load: float) -> None:
    cache, _, keys = filled_cache(load, capacity=CAP, dim=DIM, batch=BATCH, bucket_slots=SLOTS,
                                  device=DEV)
    state = cache._state
    slots = state.keys.numel()
    buckets = 1 << (2 * slots // 8 - 1).bit_length()  # 2 entries a slot, a power of two
    mask = cupy.uint64(buckets - 1)
    index = torch.full((buckets * 16,), -1, dtype=torch.int64, device=DEV)
    index.view(-1, 2)[:, 1] = 0  # key EMPTY, slot 0, count 0
    index_words = index.view(torch.uint64)
    grid = lambda n, per=1: (((n * per) + 255) // 256,)  # noqa: E731
    K["build"](grid(slots), (256,), (c(state.keys), cupy.int64(slots), c(index_words), mask))
    torch.cuda.synchronize()
    counts = (index.view(-1, 16)[:, 1] >> 32)
    want_slot, want_found = cache.find_index(keys)
    want_values, _ = cache.find(keys)

    def thread_index():
        out = torch.empty(BATCH, dtype=torch.int64, device=DEV)
        found = torch.empty(BATCH, dtype=torch.bool, device=DEV)
        K["find_index_thread"](grid(BATCH), (256,), (c(index_words), mask, c(keys),
                                                     cupy.int64(BATCH), c(out), c(found)))
        return out, found

    def group_index():
        out = torch.empty(BATCH, dtype=torch.int64, device=DEV)
        found = torch.empty(BATCH, dtype=torch.bool, device=DEV)
        K["find_index_group"](grid(BATCH, 8), (256,), (c(index_words), mask, c(keys),
                                                       cupy.int64(BATCH), c(out), c(found)))
        return out, found

    def thread_find():
        out = torch.empty(BATCH, DIM, dtype=torch.float32, device=DEV)
        found = torch.empty(BATCH, dtype=torch.bool, device=DEV)
        K["find_thread"](grid(BATCH), (256,), (c(index_words), mask, c(keys), cupy.int64(BATCH),
                                               c(state.values), c(out), c(found)))
        return out, found

    for name, call in (("thread", thread_index), ("group", group_index)):
        got, found = call()
        torch.cuda.synchronize()
        assert torch.equal(got, want_slot) and torch.equal(found, want_found), name
    got, found = thread_find()
    assert torch.equal(got, want_values) and torch.equal(found, want_found), "find"
    fresh = torch.randint(0, 2**62, (BATCH,), device=DEV).view(torch.uint64)

    def upkeep_insert():
        K["insert_batch"](grid(BATCH), (256,), (c(fresh), cupy.int64(BATCH), c(index_words), mask,
                                                cupy.uint32(0)))

    def upkeep_erase():
        K["erase_batch"](grid(BATCH), (256,), (c(fresh), cupy.int64(BATCH), c(index_words), mask))

    calls = {
        "CacheMap.find_index": lambda: cache.find_index(keys),
        "index find_index, a thread a key": thread_index,
        "index find_index, 8 lanes a key": group_index,
        "CacheMap.find": lambda: cache.find(keys),
        "index find, a thread a key": thread_find,
    }
    rows = {name: (*timed(call), back_to_back(call)) for name, call in calls.items()}
    insert_ms, erase_ms = [], []
    for _ in range(RUNS):
        insert_ms.append(timed(upkeep_insert)[1])
        erase_ms.append(timed(upkeep_erase)[1])
    print(f"load {load}: {len(cache)} entries, index {index.numel() * 8 / 2**30:.1f} GiB, "
          f"buckets overflowed {float((counts > 0).float().mean()):.4f}; "
          f"upkeep of 1M keys (events, ms): insert {statistics.median(insert_ms):.4f}, erase "
          f"{statistics.median(erase_ms):.4f}", flush=True)
    for name, (wall, events, kernel) in rows.items():
        print(f"  {name:34s} wall {wall * 1e3:7.1f} us ({BATCH / wall / 1e-3 / 2**30:5.2f} B-KV/s)"
              f"  events {events * 1e3:7.1f} us  back to back {kernel * 1e3:7.1f} us", flush=True)


for load in os.environ.get("LOADS", "0.5,0.75,1.0").split(","):
    measure(float(load))
    torch.cuda.empty_cache()
