"""The card's rate of random writes, beside the random reads of random_access_ceiling.py: 1M
and 4M random 8-byte word stores (part of a 32-byte sector, as a score or digest write), 32-byte
sector stores (a whole sector, two lanes: a dim-8 f32 value row), 8-byte atomic CASes that
succeed (a claim of a key word) and a found key's write (a random 64-byte read, then an
8-byte and a 32-byte store elsewhere), to a 4 GiB region, back to back between two CUDA
events. A CacheMap write is made of these: this says what its accesses cost alone.
Needs CuPy. On the GPU machine, with PYTHONPATH=bench/experiments:
    python bench/experiments/random_write_ceiling.py"""

import cupy
import torch
from _timing import back_to_back

SOURCE = r"""
extern "C" __global__ void word_stores(unsigned long long* region, const long long* at,
                                       long long n) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) region[at[i]] = i;
}
extern "C" __global__ void sector_stores(uint4* region, const long long* at, long long n) {
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (t / 2 < n) region[at[t / 2] * 2 + (t % 2)] = make_uint4(t, t, t, t);
}
extern "C" __global__ void word_cas(unsigned long long* region, const long long* at,
                                    long long n, unsigned int* sink) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long* p = region + at[i];
  const unsigned long long old = *p;  // read first, as a claim reads its bucket
  if (atomicCAS(p, old, old ^ 1) != old) sink[0] = 1;
}
extern "C" __global__ void found_write(uint4* region, const long long* at, long long n,
                                       unsigned int* sink) {
  // a 64-byte read at at[i], then an 8-byte and a 32-byte store at places it names
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint4* p = region + at[i] * 4;
  const uint4 a = __ldcg(p), b = __ldcg(p + 1), c = __ldcg(p + 2), d = __ldcg(p + 3);
  const unsigned long long x = a.x ^ b.y ^ c.z ^ d.w;
  if (x == 0x9e3779b9u) sink[0] = 1;
  const unsigned long long slots = (4ull << 30) / 64;  // the stores' places: from the bytes read
  const unsigned long long s = (((unsigned long long)a.y << 32) | b.x) % slots;
  reinterpret_cast<unsigned long long*>(region)[s * 8 + 1] = x;
  region[(s ^ 12345) * 4 + 2] = a;
  region[(s ^ 12345) * 4 + 3] = b;
}
"""
MODULE = cupy.RawModule(code=SOURCE)
DEV = torch.device("cuda")
REGION_BYTES = 4 << 30


KINDS = (  # name, kernel, bytes an access, lanes an access, takes the sink
    ("word stores", "word_stores", 8, 1, False), ("sector stores", "sector_stores", 32, 2, False),
    ("word CAS", "word_cas", 8, 1, True), ("found row's write", "found_write", 64, 1, True))


def us_for_1m(kernel_name: str, n: int, unit: int, lanes: int, sink, r) -> float:
    """us a launch of n random accesses takes, scaled to 1M."""
    at = cupy.from_dlpack(torch.randint(0, REGION_BYTES // unit, (n,), device=DEV))
    kernel = MODULE.get_function(kernel_name)
    args = (r, at, cupy.int64(n), *((sink,) if sink is not None else ()))
    ms = back_to_back(lambda: kernel(((lanes * n + 255) // 256,), (256,), args))
    return ms * 1e3 * (1 << 20) / n


def main() -> None:
    region = torch.randint(0, 2**62, (REGION_BYTES // 8,), dtype=torch.int64, device=DEV)
    r = cupy.from_dlpack(region)
    sink = cupy.from_dlpack(torch.zeros(1, dtype=torch.int32, device=DEV))
    print("random writes to a 4 GiB region: us for 1M (G a second)", flush=True)
    for n in (1 << 20, 1 << 22):
        cells = []
        for name, kernel_name, unit, lanes, sunk in KINDS:
            us = us_for_1m(kernel_name, n, unit, lanes, sink if sunk else None, r)
            cells.append(f"{name} {us:6.1f} us ({(1 << 20) / us / 1e3:5.1f} G/s)")
        print(f"  {n >> 20}M: " + ", ".join(cells), flush=True)


if __name__ == "__main__":
    main()
