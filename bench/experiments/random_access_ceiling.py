"""The card's rate of random reads by the size of the region they fall in: 1M (and 4M) random
128-byte lines (eight lanes a line, 16 bytes each), 64-byte half lines (four lanes), 32-byte
sectors (two lanes) and 8-byte words (a lane) a launch, from regions of 0.5 to 16 GiB, back
to back between two CUDA events; and lines, half lines and sectors read by one thread each
in 16-byte loads, as the cache index's lookups read their buckets.
A cache of 128M slots spreads its accesses over several GiB (keys 1, scores 1, values 4 at
f32 x 8; an index of 2 entries a slot 4): this says whether the region's size changes the
rates (it did not, past 2%, from 0.5 to 16 GiB). Needs CuPy.
On the GPU machine, with PYTHONPATH=bench/experiments:
    python bench/experiments/random_access_ceiling.py [GiB ...]   (default 0.5 1 2 4 8 16)
Result: bench/results/random_access_4gib_h100.txt (argument 4)."""

import sys

import cupy
import torch
from _timing import back_to_back

SOURCE = r"""
extern "C" __global__ void random_reads(const uint4* region, const long long* at, long long n,
                                        int lanes, unsigned int* sink) {
  // `lanes` lanes read one access's 16 * lanes bytes; at[i] counts in units of that size
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (t / lanes >= n) return;
  const uint4 q = __ldg(region + at[t / lanes] * lanes + (t % lanes));
  if ((q.x ^ q.y ^ q.z ^ q.w) == 0x9e3779b9u) sink[0] = 1;
}
extern "C" __global__ void random_reads_alone(const uint4* region, const long long* at,
                                              long long n, int loads, unsigned int* sink) {
  // one thread reads one access's `loads` 16-byte loads, all issued before any is used
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint4* p = region + at[i] * loads;
  unsigned int x = 0;
  uint4 q[8];
  for (int k = 0; k < loads; ++k) q[k] = __ldg(p + k);
  for (int k = 0; k < loads; ++k) x ^= q[k].x ^ q[k].w;
  if (x == 0x9e3779b9u) sink[0] = 1;
}
extern "C" __global__ void random_words(const unsigned long long* region, const long long* at,
                                        long long n, unsigned int* sink) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  if ((unsigned int)__ldg(region + at[i]) == 0x9e3779b9u) sink[0] = 1;
}
"""
MODULE = cupy.RawModule(code=SOURCE)
READS, WORDS = MODULE.get_function("random_reads"), MODULE.get_function("random_words")
ALONE = MODULE.get_function("random_reads_alone")
DEV = torch.device("cuda")
GIB = 1 << 30

_REGION: list[torch.Tensor] = []


def _region() -> torch.Tensor:
    """16 GiB of random words, made on first use."""
    if not _REGION:
        _REGION.append(torch.randint(0, 2**62, (16 * GIB // 8,), dtype=torch.int64, device=DEV))
    return _REGION[0]


def rate(n: int, size: int, lanes: int, alone: bool = False) -> float:
    """ms a launch of n random reads of 16 * lanes bytes (lanes 0: 8-byte words) from the
    region's first size bytes; alone: one thread an access."""
    unit = 16 * lanes if lanes else 8
    at = cupy.from_dlpack(torch.randint(0, size // unit, (n,), device=DEV))
    r = cupy.from_dlpack(_region())
    sink = cupy.from_dlpack(torch.zeros(1, dtype=torch.int32, device=DEV))
    if alone:
        return back_to_back(lambda: ALONE(((n + 255) // 256,), (256,), (
            r, at, cupy.int64(n), cupy.int32(lanes), sink)))
    if lanes:
        return back_to_back(lambda: READS(((lanes * n + 255) // 256,), (256,), (
            r, at, cupy.int64(n), cupy.int32(lanes), sink)))
    return back_to_back(lambda: WORDS(((n + 255) // 256,), (256,), (r, at, cupy.int64(n), sink)))


def main() -> None:
    print("G random accesses a second (us for 1M), by region size", flush=True)
    for n in (1 << 20, 1 << 22):
        for gib in [float(a) for a in sys.argv[1:]] or (0.5, 1, 2, 4, 8, 16):
            cells = ", ".join(
                f"{name} {n / ms / 1e6:5.1f} G/s ({ms * 1e3 * (1 << 20) / n:6.1f} us)"
                for name, ms in ((name, rate(n, int(gib * GIB), lanes, alone))
                                 for name, lanes, alone in (
                                     ("lines", 8, False), ("halves", 4, False),
                                     ("sectors", 2, False), ("words", 0, False),
                                     ("lines alone", 8, True), ("halves alone", 4, True),
                                     ("sectors alone", 2, True))))
            print(f"  {n >> 20}M accesses, {gib:4} GiB: {cells}", flush=True)


if __name__ == "__main__":
    main()
