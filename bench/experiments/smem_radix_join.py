"""Seed 001's join, prototyped: both sides partitioned by hash so that each build partition fits
a shared-memory table, then one block a partition builds its table in shared memory and probes
it with its probe partition, writing pairs with one atomic a warp. Measured beside `gh.join` on
the same keys (`gpuhash bench join`'s shapes: unique int32 build keys, half the probe rows
matching), CUDA events, median of 5, ms. The partitioning here is torch's sort of 16-bit
partition numbers (CUB radix sort, two 8-bit passes) and a gather of keys and row numbers:
a stand-in for a partition kernel, timed apart so the shared-memory phase's own cost shows.
Unique build keys only (a prototype, not a join of every kind). Needs CuPy.
On the GPU machine: PYTHONPATH=src python bench/experiments/smem_radix_join.py [J4] [J5]
(ROUNDS=3: each shape's joins timed in three alternating rounds)."""

import math
import os
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
// A partition pass: block b takes its tile (tiles[b]: first row, rows, the 15-bit partition
// prefix its rows share for pass 2) and sorts its rows into 2^bin_bits bins of the partition
// number's bits [shift, shift + bin_bits): hist counts them, scatter writes each row at its
// bin's cursor (cursors from the offsets the host scanned), so a bin's rows of one tile land
// together (unordered) and the L2 merges their writes.
extern "C" __global__ void hist(const int* keys, const long long* tiles, int bits, int shift,
                                int bin_bits, int* block_hist, int blocks) {
  extern __shared__ int counts[];
  const int bins = 1 << bin_bits;
  for (int i = threadIdx.x; i < bins; i += blockDim.x) counts[i] = 0;
  __syncthreads();
  const long long first = tiles[3 * blockIdx.x], rows = tiles[3 * blockIdx.x + 1];
  for (long long i = threadIdx.x; i < rows; i += blockDim.x) {
    const unsigned part = fmix32((unsigned)keys[first + i]) >> (32 - bits);
    atomicAdd(&counts[(part >> shift) & (bins - 1)], 1);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < bins; i += blockDim.x) {
    block_hist[i * blocks + blockIdx.x] = counts[i];
  }
}
// scatter stages its tile in shared memory ordered by bin (a bin's rows of the tile side by
// side), then writes it out so that consecutive threads write consecutive addresses of a
// bin's run: an unstaged scatter, each store of a warp to 32 bins, ran 5x slower.
constexpr int TILE = 4096;
extern "C" __global__ void __launch_bounds__(256)
scatter(const int* keys, const int* rows_in, const long long* tiles, int bits, int shift,
        int bin_bits, const int* counts, const long long* offsets, int blocks, int* keys_out,
        int* rows_out) {
  __shared__ int staged_keys[TILE];
  __shared__ int staged_rows[TILE];
  __shared__ unsigned short staged_bin[TILE];
  __shared__ int start[256];   // the tile's rows before each bin
  __shared__ int cursor[256];
  __shared__ long long out_at[256];
  const int bins = 1 << bin_bits;
  const long long first = tiles[3 * blockIdx.x], rows = tiles[3 * blockIdx.x + 1];
  // the tile's counts, as the histogram kernel left them (bin-major)
  for (int i = threadIdx.x; i < bins; i += blockDim.x) cursor[i] = counts[i * blocks + blockIdx.x];
  __syncthreads();
  if (threadIdx.x < 32) {  // exclusive scan of the tile's counts: 8 bins a lane
    const int lane = threadIdx.x;
    int mine[8], sum = 0;
    for (int j = 0; j < 8; ++j) {
      const int bin = lane * 8 + j;
      mine[j] = bin < bins ? cursor[bin] : 0;
      sum += mine[j];
    }
    int before = sum;
    for (int d = 1; d < 32; d <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, before, d);
      if (lane >= d) before += up;
    }
    before -= sum;
    for (int j = 0; j < 8; ++j) {
      const int bin = lane * 8 + j;
      if (bin < bins) start[bin] = before;
      before += mine[j];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < bins; i += blockDim.x) {
    cursor[i] = start[i];
    out_at[i] = offsets[i * blocks + blockIdx.x];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    const int k = keys[first + i];
    const int bin = (fmix32((unsigned)k) >> (32 - bits) >> shift) & (bins - 1);
    const int at = atomicAdd(&cursor[bin], 1);
    staged_keys[at] = k;
    staged_rows[at] = rows_in == nullptr ? (int)(first + i) : rows_in[first + i];
    staged_bin[at] = (unsigned short)bin;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    const int bin = staged_bin[i];
    const long long at = out_at[bin] + (i - start[bin]);
    keys_out[at] = staged_keys[i];
    rows_out[at] = staged_rows[i];
  }
}
#define EMPTY (-1)
extern "C" __global__ void __launch_bounds__(512)
smem_join(const int* bkeys, const int* brows, const long long* boff,
          const int* pkeys, const int* prows, const long long* poff, int slots,
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
    table[h].y = brows[i];
  }
  __syncthreads();
  const long long p0 = poff[p], p1 = poff[p + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __shared__ unsigned warp_hits[16];
  __shared__ unsigned long long block_base;
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
    // one atomic a block and round: a warp's atomic each on one counter queued 3M of them
    const unsigned mask = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_hits[warp] = __popc(mask);
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned total = 0;
      for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {
        const unsigned c = warp_hits[w];
        warp_hits[w] = total;
        total += c;
      }
      block_base = total ? atomicAdd(counter, (unsigned long long)total) : 0;
    }
    __syncthreads();
    if (hit) {
      const unsigned long long pos =
          block_base + warp_hits[warp] + __popc(mask & ((1u << lane) - 1));
      out_probe[pos] = prows[i];
      out_build[pos] = brow;
    }
    __syncthreads();  // warp_hits and block_base are rewritten next round
  }
}
"""
MODULE = cupy.RawModule(code=SOURCE, options=("-std=c++17",))
PART_IDS, SMEM_JOIN = MODULE.get_function("part_ids"), MODULE.get_function("smem_join")
HIST, SCATTER = MODULE.get_function("hist"), MODULE.get_function("scatter")
TILE = 4096  # rows a partition block (the kernels' TILE)
SLOTS = 4096  # 32 KB of (key, row) a block: four blocks of 512 an SM
THREADS = 512
SMEM_JOIN.max_dynamic_shared_size_bytes = SLOTS * 8
DEV = torch.device("cuda")
SHAPES = {"J3": (1_000_000, 10_000_000), "J4": (10_000_000, 100_000_000),
          "J5": (100_000_000, 100_000_000), "30Mx100M": (30_000_000, 100_000_000),
          "50Mx100M": (50_000_000, 100_000_000)}


def sides(build_rows: int, probe_rows: int, seed: int = 1):
    g = torch.Generator(device=DEV).manual_seed(seed)
    build = torch.randperm(2 * build_rows, device=DEV, generator=g)[:build_rows].to(torch.int32)
    picks = torch.randint(0, build_rows, (probe_rows // 2,), device=DEV, generator=g)
    absent = torch.randint(2 * build_rows, 4 * build_rows, (probe_rows - probe_rows // 2,),
                           device=DEV, generator=g).to(torch.int32)
    probe = torch.cat([build[picks], absent])
    return build, probe[torch.randperm(probe_rows, device=DEV, generator=g)]


def partition_by_sort(keys: torch.Tensor, bits: int):
    """(keys, int32 row numbers) ordered by partition, and the partitions' offsets: torch's
    sort of 16-bit partition numbers and a gather."""
    n = keys.shape[0]
    part = torch.empty(n, dtype=torch.int16, device=DEV)
    PART_IDS(((n + 255) // 256,), (256,), (cupy.from_dlpack(keys), cupy.int64(n),
                                           cupy.int32(bits), cupy.from_dlpack(part)))
    _, rows = torch.sort(part)
    offsets = torch.zeros((1 << bits) + 1, dtype=torch.int64, device=DEV)
    offsets[1:] = torch.bincount(part.to(torch.int32), minlength=1 << bits).cumsum(0)
    return keys[rows], rows.to(torch.int32), offsets


def _exclusive(counts: torch.Tensor) -> torch.Tensor:
    return counts.cumsum(0) - counts


def _run_pass(keys, rows_in, tiles, bits, shift, bin_bits):
    """One partition pass over ``tiles``: returns (keys, rows, per-tile bin counts as a
    (tiles, bins) int64 tensor); the caller's ``offsets`` function places the bins."""
    blocks, bins = tiles.shape[0], 1 << bin_bits
    hist = torch.empty(bins * blocks, dtype=torch.int32, device=DEV)
    HIST((blocks,), (256,), (cupy.from_dlpack(keys), cupy.from_dlpack(tiles), cupy.int32(bits),
                             cupy.int32(shift), cupy.int32(bin_bits), cupy.from_dlpack(hist),
                             cupy.int32(blocks)), shared_mem=bins * 4)
    return hist.view(bins, blocks).t().to(torch.int64), hist


def _scatter(keys, rows_in, tiles, bits, shift, bin_bits, hist, offsets):
    blocks = tiles.shape[0]
    keys_out = torch.empty_like(keys)
    rows_out = torch.empty(keys.shape[0], dtype=torch.int32, device=DEV)
    flat = offsets.t().contiguous().view(-1)  # bin-major, as the kernel reads them
    SCATTER((blocks,), (256,), (cupy.from_dlpack(keys),
                                0 if rows_in is None else cupy.from_dlpack(rows_in),
                                cupy.from_dlpack(tiles), cupy.int32(bits), cupy.int32(shift),
                                cupy.int32(bin_bits), cupy.from_dlpack(hist),
                                cupy.from_dlpack(flat), cupy.int32(blocks),
                                cupy.from_dlpack(keys_out), cupy.from_dlpack(rows_out)))
    return keys_out, rows_out


def partition(keys: torch.Tensor, bits: int):
    """As partition_by_sort, by two passes of hist + scatter: the high bits of the partition
    number over tiles of TILE rows, then the low bits over tiles that each lie in one
    high-bits segment (their offsets worked out with torch from the tiles' counts)."""
    n = keys.shape[0]
    low = bits // 2
    high = bits - low
    starts = torch.arange(0, n, TILE, device=DEV)
    tiles = torch.stack([starts, (n - starts).clamp(max=TILE), torch.zeros_like(starts)], 1)
    counts, hist = _run_pass(keys, None, tiles, bits, low, high)  # (tiles, 2^high)
    offsets = _exclusive(counts.t().reshape(-1)).view(1 << high, -1).t()
    keys1, rows1 = _scatter(keys, None, tiles, bits, low, high, hist, offsets)
    seg_counts = counts.sum(0)
    seg_start = _exclusive(seg_counts)
    per_seg = (seg_counts + TILE - 1) // TILE
    first_tile = _exclusive(per_seg)
    # at most one partial tile more a segment: the tiles past the last get no rows, so the
    # host never waits for the count
    tile = torch.arange(tiles.shape[0] + (1 << high), device=DEV)
    segment = torch.searchsorted(first_tile + per_seg, tile, right=True).clamp(max=(1 << high) - 1)
    within = tile - first_tile[segment]
    first = seg_start[segment] + within * TILE
    rows = (seg_start[segment] + seg_counts[segment] - first).clamp(min=0, max=TILE)
    tiles2 = torch.stack([first, rows, segment], 1)
    counts2, hist2 = _run_pass(keys1, rows1, tiles2, bits, 0, low)  # (tiles2, 2^low)
    totals = torch.zeros((1 << high, 1 << low), dtype=torch.int64, device=DEV)
    totals.index_add_(0, segment, counts2)
    sub_start = seg_start[:, None] + (totals.cumsum(1) - totals)
    # earlier tiles' rows of each bin, all segments (scanned along the inner dimension: a
    # scan along dim 0 of this (tiles, bins) tensor took 9 ms in torch)
    before = counts2.t().contiguous().cumsum(1).t() - counts2
    offsets2 = sub_start[segment] + before - before[first_tile[segment]]
    keys2, rows2 = _scatter(keys1, rows1, tiles2, bits, 0, low, hist2, offsets2)
    bounds = torch.cat([sub_start.reshape(-1), torch.tensor([n], device=DEV)])
    return keys2, rows2, bounds


def radix_join(build: torch.Tensor, probe: torch.Tensor, bits: int, times: dict | None = None,
               *, by_sort: bool = False):
    split = partition_by_sort if by_sort else partition
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    events[0].record()
    bkeys, brows, boff = split(build, bits)
    events[1].record()
    pkeys, prows, poff = split(probe, bits)
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
    # about 1,500 build rows a partition (J5: 16 bits, about 1,530), well under the table's
    # 4,096 slots; the sort's 16-bit partition numbers hold 15 bits at most
    bits = min(16, max(1, math.ceil(math.log2(build_rows / 1500))))
    want = gh.join(probe, build)
    order_want = torch.argsort(want[0])
    variants = ((True, "sorted"), (False, "two passes")) if bits <= 15 else (
        (False, "two passes"),)
    for by_sort, _ in variants:
        got = radix_join(build, probe, bits, by_sort=by_sort)
        assert got[0].shape == want[0].shape, (got[0].shape, want[0].shape)
        order_got = torch.argsort(got[0])
        assert torch.equal(got[0][order_got], want[0][order_want])
        assert torch.equal(got[1][order_got], want[1][order_want])
        del got, order_got
    del want, order_want
    rounds = int(os.environ.get("ROUNDS", "1"))
    for round_ in range(rounds):  # ROUNDS=3: the two joins alternate, machine drift hits both
        table_ms = timed(lambda: gh.join(probe, build))
        print(f"{name} {build_rows:,} x {probe_rows:,} (round {round_}): gh.join "
              f"{table_ms:.2f} ms", flush=True)
        for by_sort, label in variants:
            parts: dict = {}
            radix_ms = timed(lambda parts=parts, by_sort=by_sort: radix_join(
                build, probe, bits, parts, by_sort=by_sort))
            detail = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in parts.items())
            print(f"  partitions {label}: {radix_ms:.2f} ms ({1 << bits} parts; {detail})",
                  flush=True)


def main() -> None:
    for name in sys.argv[1:] or ["J3", "J4", "J5"]:
        run_shape(name)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
