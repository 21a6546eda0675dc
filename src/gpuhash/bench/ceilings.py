"""The memory ceilings every table figure is divided by, measured in the same run.

C_hbm: random 8-byte gathers from a 1 GiB table (far larger than L2), one index read and one
word written per access, as a find does. C_l2: the same from a 16 MB table, which stays in L2.
"""

from __future__ import annotations

import torch

from gpuhash._common.cuda.launch import launch
from gpuhash.bench.harness import Timing, bench_kernel, time_gpu


def _gather_rate(table_bytes: int, accesses: int, device: torch.device) -> Timing:
    words = table_bytes // 8
    table = torch.randint(0, 2**62, (words,), dtype=torch.int64, device=device)
    index = torch.randint(0, words, (accesses,), dtype=torch.int64, device=device)
    index = index.to(torch.int32)
    out = torch.empty(accesses, dtype=torch.int64, device=device)
    kernel = bench_kernel("gh_gather", device)

    def region():
        launch(kernel, accesses, table.data_ptr(), index.data_ptr(), out.data_ptr(), accesses,
               device=device)

    region()
    sample = torch.randint(0, accesses, (1000,), device=device)
    assert torch.equal(out[sample], table[index[sample].long()]), "gather returned wrong words"
    return time_gpu(region, runs=10)


def measure(device: torch.device, *, quick: bool = False) -> dict:
    """Both ceilings in G accesses/s, with their timings."""
    accesses = 16 * 2**20 if quick else 64 * 2**20
    hbm = _gather_rate(2**30, accesses, device)
    l2 = _gather_rate(16 * 2**20, accesses, device)
    return {
        "C_hbm": hbm.rate(accesses), "C_l2": l2.rate(accesses),
        "hbm_timing": hbm.as_dict(), "l2_timing": l2.as_dict(), "accesses": accesses,
        "hbm_table_bytes": 2**30, "l2_table_bytes": 16 * 2**20,
    }
