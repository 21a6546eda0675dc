"""The memory floor of a CacheMap write on HKV's dim-8 workload (1M rows, 60% of keys present,
a 128M-slot cache at load 0.5): kernels that make only a write's random accesses and nothing
else, each timed over 20 calls back to back between two CUDA events; beside them the cache's
own kernels in insert_or_assign and assign calls of fresh batches (the torch profiler's
kernel times, median of 5 calls).

- layout: the accesses gh_cache_write makes. A present key: its index bucket (64 bytes), then
  its score (8 bytes) and value row (32) stored. An absent one: the index bucket, both
  buckets' digests (two 128-byte lines), a CAS on a key word, the value row, score and digest
  stored, then a CAS and an OR on an index entry of the bucket it read.
- minimal: what any layout that keeps a slot's key and score apart from its value, and an
  index for finds, must do at the least. A present key: the index bucket, the score and the
  value row stored. An absent one: the index bucket, one 16-byte word of free-slot state for
  each of its two buckets, an OR claiming a slot there, the key and score stored together (16
  bytes), the value row, and one index entry stored in the bucket it read.
Slots and buckets are random (a hash of the key), rows i with i % 10 < 6 present; the
minimal floor's key-and-score records fall in a 1 GiB region (64M of them). The floors lean
low: the regions hold random words, so the layout floor's key CAS never succeeds (no
write-back), the minimal floor stores its index entry plainly, and the 20 timed calls reuse
the same addresses. Needs CuPy.
On the GPU machine, with PYTHONPATH=src:bench/experiments:
    python bench/experiments/cache_write_floor.py
Result: bench/results/cache_write_floor_h100_160e419.txt."""

import time

import cupy
import torch
from _timing import back_to_back

import gpuhash as gh

BATCH, DIM, CAP, BUCKET = 1 << 20, 8, 1 << 27, 128
DEV = torch.device("cuda")
SOURCE = r"""
__device__ unsigned long long mix(unsigned long long x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}
// regions: index 4 GiB (64-byte buckets), digests 128 MB, keys 1 GiB, scores 1 GiB,
// values 4 GiB (32-byte rows), free-slot state 16 MB (16 bytes a bucket)
extern "C" __global__ void floor_write(uint4* index, uint4* digests, unsigned long long* keys,
    unsigned long long* scores, uint4* values, uint4* state, const unsigned long long* in_keys,
    const uint4* in_values, long long n, int minimal, signed char* status, long long* slot_out,
    unsigned char* found, unsigned int* sink) {
  // minimal: 0 the layout's accesses, 1 the minimal ones, 2 the layout's assign
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned long long slots = 1ULL << 27, buckets = slots / 128;
  const unsigned long long key = in_keys[i];
  const uint4 v0 = in_values[2 * i], v1 = in_values[2 * i + 1];
  const unsigned long long h = mix(key ^ 0x1234567ULL);
  const unsigned long long ib = h % (slots * 2 / 4);   // index bucket: 4 entries of 16 bytes
  uint4* e = index + ib * 4;
  const uint4 q0 = __ldcg(e), q1 = __ldcg(e + 1), q2 = __ldcg(e + 2), q3 = __ldcg(e + 3);
  unsigned long long seen = (unsigned long long)(q0.x ^ q1.y ^ q2.z ^ q3.w);
  const bool present = (i % 10) < 6;
  long long slot;
  if (minimal == 2 && !present) {
    status[i] = 4;
    slot_out[i] = -1;
    found[i] = 0;
    if (seen == 0x9e3779b9ULL) sink[0] = 3;
    return;
  }
  if (present) {
    slot = (long long)((mix(h ^ seen) >> 7) % slots);  // depends on the bucket read
  } else {
    const unsigned long long b1 = mix(h + 1) % buckets, b2 = mix(h + 2) % buckets;
    unsigned int pick;
    if (minimal) {
      const uint4 s1 = __ldcg(state + b1), s2 = __ldcg(state + b2);
      pick = (s1.x ^ s2.y ^ (unsigned int)seen) & 127;
      atomicOr(reinterpret_cast<unsigned int*>(state + b1), 1u << (pick & 31));
    } else {
      unsigned int acc = (unsigned int)seen;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const uint4 d1 = __ldcg(digests + b1 * 8 + k), d2 = __ldcg(digests + b2 * 8 + k);
        acc ^= d1.x ^ d1.w ^ d2.y ^ d2.z;
      }
      pick = acc & 127;
    }
    slot = (long long)(b1 * 128 + pick);
    if (!minimal) {
      if (atomicCAS(keys + slot, ~0ULL, key) == 0x9e3779b9ULL) sink[0] = 1;
    }
  }
  if (minimal && !present) {
    // key and score as one 16-byte record: the keys and scores regions read as records
    reinterpret_cast<uint4*>(keys)[slot % (slots / 2)] =
        make_uint4((unsigned int)key, (unsigned int)(key >> 32), 7u, 0u);
  } else {
    scores[slot] = 7;
  }
  values[2 * slot] = v0;
  values[2 * slot + 1] = v1;
  if (!present) {
    if (minimal) {
      e[(seen & 3)] = make_uint4((unsigned int)key, (unsigned int)(key >> 32),
                                 (unsigned int)slot, 0u);
    } else {
      reinterpret_cast<unsigned char*>(digests)[slot] = (unsigned char)(key | 1);
      unsigned long long* word = reinterpret_cast<unsigned long long*>(e + (seen & 3));
      if (atomicCAS(word, ~0ULL, key) == 0x9e3779b9ULL) sink[0] = 2;
      atomicOr(word + 1, (unsigned long long)slot);
    }
  }
  status[i] = present ? 1 : 0;
  slot_out[i] = slot;
  found[i] = present;
}
"""
KERNEL = cupy.RawKernel(SOURCE, "floor_write")


def floors() -> dict[str, float]:
    """CUDA-event us a call of each floor kernel."""
    gib = 1 << 30
    regions = [torch.randint(0, 2**62, (size // 8,), dtype=torch.int64, device=DEV)
               for size in (4 * gib, 128 << 20, gib, gib, 4 * gib, 16 << 20)]
    keys = torch.randint(0, 2**62, (BATCH,), device=DEV)
    values = torch.rand(BATCH, DIM, device=DEV)
    status = torch.empty(BATCH, dtype=torch.int8, device=DEV)
    slots = torch.empty(BATCH, dtype=torch.int64, device=DEV)
    found = torch.empty(BATCH, dtype=torch.uint8, device=DEV)
    sink = torch.zeros(1, dtype=torch.int32, device=DEV)
    args = [cupy.from_dlpack(t) for t in (*regions, keys, values)]
    outs = [cupy.from_dlpack(t) for t in (status, slots, found, sink)]
    result = {}
    for name, minimal in (("layout", 0), ("minimal", 1), ("assign", 2)):
        ms = back_to_back(lambda m=minimal: KERNEL(((BATCH + 255) // 256,), (256,), (
            *args, cupy.int64(BATCH), cupy.int32(m), *outs)))
        result[name] = ms * 1e3
    del regions
    torch.cuda.empty_cache()
    return result


def cache_write_kernels(api: str) -> dict[str, float]:
    """Calls of ``api`` (insert_or_assign or assign) with 1M fresh rows (60% present) on a
    128M-slot cache at load 0.5: the GPU time of their kernels by the torch profiler, median
    of 5 calls."""
    cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(DIM,),
                        capacity=CAP, device=DEV, policy="lru", bucket_slots=BUCKET)
    present = torch.randint(0, 2**62, (CAP // 2,), device=DEV)
    for part in present.split(8 << 20):
        cache.insert_or_assign(part.view(torch.uint64), torch.zeros(part.numel(), DIM, device=DEV))
    torch.cuda.synchronize()
    per_kernel: dict[str, list[float]] = {}
    walls = []
    for _ in range(5):
        hits = present[torch.randint(0, present.numel(), (int(BATCH * 0.6),), device=DEV)]
        keys = torch.cat([hits, torch.randint(0, 2**62, (BATCH - hits.numel(),), device=DEV)])
        keys = keys[torch.randperm(BATCH, device=DEV)].view(torch.uint64)
        values = torch.rand(BATCH, DIM, device=DEV)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            getattr(cache, api)(keys, values)
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e6)
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                name = event.name.split("<")[0].replace("void ", "")
                per_kernel.setdefault(name, []).append(event.time_range.elapsed_us())
    # kernels of one name in a call (two fills) share a list: medians per launch
    out = {name: sorted(times)[len(times) // 2] for name, times in per_kernel.items()}
    out["wall (profiled)"] = sorted(walls)[2]
    return out


def main() -> None:
    print(f"device: {torch.cuda.get_device_name()}", flush=True)
    for name, us in floors().items():
        print(f"floor {name:8s}: {us:7.1f} us a call of 1M rows", flush=True)
    for api in ("insert_or_assign", "assign"):
        for name, us in cache_write_kernels(api).items():
            print(f"{api} {name}: {us:7.1f} us", flush=True)


if __name__ == "__main__":
    main()
