"""Seed 001's join, prototyped: both sides partitioned by hash so that each build partition fits
a shared-memory table, then one block a partition builds its table in shared memory and probes
it with its probe partition, writing pairs with one atomic a warp. Measured beside `gh.join` on
the same keys (`gpuhash bench join`'s shapes: unique int32 build keys, half the probe rows
matching), CUDA events, median of 5, ms. The partitioning here is torch's sort of 16-bit
partition numbers (CUB radix sort, two 8-bit passes) and a gather of keys and row numbers:
a stand-in for a partition kernel, timed apart so the shared-memory phase's own cost shows.
Unique build keys only (a prototype, not a join of every kind). Needs CuPy.
On the GPU machine: PYTHONPATH=src python bench/experiments/smem_radix_join.py [J4] [J5]"""

import math
import statistics
import sys

import cupy
import torch

import gpuhash as gh

SOURCE = r"""
__device__ __forceinline__ unsigned fmix32(unsigned h) {
  h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
  return h;
}
extern "C" __global__ void part_ids(const int* keys, long long n, int bits, short* part) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) part[i] = (short)(fmix32((unsigned)keys[i]) >> (32 - bits));
}
#define EMPTY (-1)
extern "C" __global__ void __launch_bounds__(512)
smem_join(const int* bkeys, const long long* brows, const long long* boff,
          const int* pkeys, const long long* prows, const long long* poff, int slots,
          long long* out_probe, long long* out_build, unsigned long long* counter) {
  extern __shared__ int2 table[];
  const int p = blockIdx.x;
  for (int i = threadIdx.x; i < slots; i += blockDim.x) table[i] = make_int2(EMPTY, -1);
  __syncthreads();
  const long long b0 = boff[p], b1 = boff[p + 1];
  for (long long i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const int k = bkeys[i];
    unsigned h = fmix32((unsigned)k) & (slots - 1);
    while (atomicCAS(&table[h].x, EMPTY, k) != EMPTY) h = (h + 1) & (slots - 1);
    table[h].y = (int)(brows[i]);
  }
  __syncthreads();
  const long long p0 = poff[p], p1 = poff[p + 1];
  const int lane = threadIdx.x & 31;
  for (long long base = p0; base < p1; base += blockDim.x) {
    const long long i = base + threadIdx.x;
    bool hit = false;
    int brow = -1;
    if (i < p1) {
      const int k = pkeys[i];
      unsigned h = fmix32((unsigned)k) & (slots - 1);
      for (;;) {
        const int2 e = table[h];
        if (e.x == k) { hit = true; brow = e.y; break; }
        if (e.x == EMPTY) break;
        h = (h + 1) & (slots - 1);
      }
    }
    const unsigned mask = __ballot_sync(0xffffffffu, hit);
    if (mask == 0) continue;
    const int leader = __ffs(mask) - 1;
    unsigned long long at = 0;
    if (lane == leader) at = atomicAdd(counter, (unsigned long long)__popc(mask));
    at = __shfl_sync(0xffffffffu, at, leader);
    if (hit) {
      const unsigned long long pos = at + __popc(mask & ((1u << lane) - 1));
      out_probe[pos] = prows[i];
      out_build[pos] = brow;
    }
  }
}
"""
MODULE = cupy.RawModule(code=SOURCE, options=("-std=c++17",))
PART_IDS, SMEM_JOIN = MODULE.get_function("part_ids"), MODULE.get_function("smem_join")
SLOTS = 8192  # 64 KB of (key, row) a block: three blocks of 512 an SM
THREADS = 512
SMEM_JOIN.max_dynamic_shared_size_bytes = SLOTS * 8
DEV = torch.device("cuda")
SHAPES = {"J3": (1_000_000, 10_000_000), "J4": (10_000_000, 100_000_000),
          "J5": (100_000_000, 100_000_000)}


def sides(build_rows: int, probe_rows: int, seed: int = 1):
    g = torch.Generator(device=DEV).manual_seed(seed)
    build = torch.randperm(2 * build_rows, device=DEV, generator=g)[:build_rows].to(torch.int32)
    picks = torch.randint(0, build_rows, (probe_rows // 2,), device=DEV, generator=g)
    absent = torch.randint(2 * build_rows, 4 * build_rows, (probe_rows - probe_rows // 2,),
                           device=DEV, generator=g).to(torch.int32)
    probe = torch.cat([build[picks], absent])
    return build, probe[torch.randperm(probe_rows, device=DEV, generator=g)]


def partition(keys: torch.Tensor, bits: int):
    """(keys, row numbers) ordered by partition, and the partitions' offsets."""
    n = keys.shape[0]
    part = torch.empty(n, dtype=torch.int16, device=DEV)
    PART_IDS(((n + 255) // 256,), (256,), (cupy.from_dlpack(keys), cupy.int64(n),
                                           cupy.int32(bits), cupy.from_dlpack(part)))
    sorted_parts, rows = torch.sort(part)
    offsets = torch.zeros((1 << bits) + 1, dtype=torch.int64, device=DEV)
    offsets[1:] = torch.bincount(part.to(torch.int32), minlength=1 << bits).cumsum(0)
    del sorted_parts
    return keys[rows], rows, offsets


def radix_join(build: torch.Tensor, probe: torch.Tensor, bits: int, times: dict | None = None):
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    events[0].record()
    bkeys, brows, boff = partition(build, bits)
    events[1].record()
    pkeys, prows, poff = partition(probe, bits)
    events[2].record()
    out_probe = torch.empty(probe.shape[0], dtype=torch.int64, device=DEV)
    out_build = torch.empty(probe.shape[0], dtype=torch.int64, device=DEV)
    counter = torch.zeros(1, dtype=torch.int64, device=DEV)
    args = [cupy.from_dlpack(t) for t in (bkeys, brows, boff, pkeys, prows, poff)]
    SMEM_JOIN((1 << bits,), (THREADS,), (*args, cupy.int32(SLOTS),
                                         cupy.from_dlpack(out_probe),
                                         cupy.from_dlpack(out_build),
                                         cupy.from_dlpack(counter)), shared_mem=SLOTS * 8)
    events[3].record()
    n = int(counter)
    if times is not None:
        events[3].synchronize()
        times.setdefault("partition build", []).append(events[0].elapsed_time(events[1]))
        times.setdefault("partition probe", []).append(events[1].elapsed_time(events[2]))
        times.setdefault("shared-memory join", []).append(events[2].elapsed_time(events[3]))
    return out_probe[:n], out_build[:n]


def timed(call, runs: int = 5) -> float:
    call()
    ms = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        call()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end))
    return statistics.median(ms)


def run_shape(name: str) -> None:
    build_rows, probe_rows = SHAPES[name]
    build, probe = sides(build_rows, probe_rows)
    # about 2,500 build rows a partition (J5: about 3,100, 15 bits being the most 16-bit
    # partition numbers hold), well under the table's 8,192 slots
    bits = min(15, max(1, math.ceil(math.log2(build_rows / 2500))))
    got = radix_join(build, probe, bits)
    want = gh.join(probe, build)
    assert got[0].shape == want[0].shape, (got[0].shape, want[0].shape)
    order_got, order_want = torch.argsort(got[0]), torch.argsort(want[0])
    assert torch.equal(got[0][order_got], want[0][order_want])
    assert torch.equal(got[1][order_got], want[1][order_want])
    del got, want, order_got, order_want
    parts: dict = {}
    radix_ms = timed(lambda: radix_join(build, probe, bits, parts))
    table_ms = timed(lambda: gh.join(probe, build))
    detail = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in parts.items())
    print(f"{name} {build_rows:,} x {probe_rows:,}: gh.join {table_ms:.2f} ms, "
          f"partitioned in shared memory {radix_ms:.2f} ms ({1 << bits} parts; {detail})",
          flush=True)


def main() -> None:
    for name in sys.argv[1:] or ["J3", "J4", "J5"]:
        run_shape(name)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
