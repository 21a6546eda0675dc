"""What a write's duplicate check costs: gh_last_rows (engines/cuda.py: last_rows_with) over
1M 64-bit keys, as a CacheMap write of `gpuhash bench cache` runs it (60% of the keys drawn
from 64M present ones, so some repeat), timed back to back with CUDA events (20 calls between
two events), us a call, beside the scratch's fill alone (torch's fill_ of the same words).
Then one more call for ncu to profile. On the GPU machine:
PYTHONPATH=src python bench/experiments/last_rows_cost.py
ncu --kernel-name regex:gh_last_rows --launch-skip 23 --launch-count 1 --section SpeedOfLight
    --section MemoryWorkloadAnalysis --section WarpStateStats python ...last_rows_cost.py"""

import torch
from _timing import back_to_back

import gpuhash as gh
from gpuhash.bench.cache_suite import _random_keys
from gpuhash.cache.cuda import engine as cache_cuda

DEV = torch.device("cuda")
BATCH = 1 << 20


def main() -> None:
    cache = gh.CacheMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(8,),
                        capacity=1 << 20, device=DEV)
    present = _random_keys(64 << 20, DEV)
    hits = present[torch.randint(0, present.numel(), (int(BATCH * 0.6),), device=DEV)]
    keys = torch.cat([hits, _random_keys(BATCH - hits.numel(), DEV)])
    keys = keys[torch.randperm(BATCH, device=DEV)]
    state = cache._state
    words = 2 * BATCH + 2 + 2 * BATCH // 8 // 4 + 2 * BATCH + 2  # last_rows_with's scratch
    scratch = torch.empty(words, dtype=torch.int64, device=DEV)
    fill_us = back_to_back(lambda: scratch.fill_(-1)) * 1e3
    total_us = back_to_back(lambda: cache_cuda.last_rows(state, keys)) * 1e3
    kept = int(cache_cuda.last_rows(state, keys).sum())
    print(f"gh_last_rows of {BATCH:,} keys ({BATCH - kept:,} repeats): {total_us:.1f} us a "
          f"call, of which the scratch's fill ({words * 8 / 2**20:.1f} MB) {fill_us:.1f} us",
          flush=True)
    torch.cuda.synchronize()


main()
