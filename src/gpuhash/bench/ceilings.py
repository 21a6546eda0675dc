"""The memory ceilings every table figure is divided by, measured in the same run.

C_hbm: random 8-byte gathers from a 1 GiB table (far larger than L2), one index read and one
word written per access, as a find does. C_l2: the same from a 16 MB table, which stays in L2.
C_claim_hbm / C_claim_l2: random claims (load a word, CAS it from EMPTY) of distinct words of a
512 MB / 16 MB table, half of its words, as an insert to load 0.5 does: no insert of a new key
can do less, so insert figures are divided by these.
"""

from __future__ import annotations

import torch

from .._cuda.compile import load_module
from .._cuda.launch import launch
from .harness import Timing, time_gpu, write_back_l2


def _kernel(device: torch.device, name: str):
    return load_module("bench.cu", (), device.index or 0).get_kernel(name)


def _gather_rate(table_bytes: int, accesses: int, device: torch.device) -> Timing:
    words = table_bytes // 8
    table = torch.randint(0, 2**62, (words,), dtype=torch.int64, device=device)
    index = torch.randint(0, words, (accesses,), dtype=torch.int64, device=device)
    index = index.to(torch.int32)
    out = torch.empty(accesses, dtype=torch.int64, device=device)
    kernel = _kernel(device, "gh_gather")

    def region():
        launch(kernel, accesses, table.data_ptr(), index.data_ptr(), out.data_ptr(), accesses,
               device=device)

    region()
    sample = torch.randint(0, accesses, (1000,), device=device)
    assert torch.equal(out[sample], table[index[sample].long()]), "gather returned wrong words"
    return time_gpu(region, runs=10)


def _claim_rate(table_bytes: int, device: torch.device, *, runs: int = 10) -> tuple[Timing, int]:
    words = table_bytes // 8
    claims = words // 2
    table = torch.empty(words, dtype=torch.int64, device=device)
    index = torch.randperm(words, device=device)[:claims].to(torch.int32)
    won = torch.empty(claims, dtype=torch.uint8, device=device)
    kernel = _kernel(device, "gh_claim")

    def empty_table():  # as an insert's setup: cleared, and the clear written back
        table.fill_(-1)
        write_back_l2(device, table_bytes=table_bytes)

    def region():
        launch(kernel, claims, table.data_ptr(), index.data_ptr(), won.data_ptr(), claims,
               device=device)

    empty_table()
    region()
    assert bool(won.bool().all()), "a claim of a distinct EMPTY word lost"
    return time_gpu(region, setup=empty_table, runs=runs), claims


def measure(device: torch.device, *, quick: bool = False) -> dict:
    """The ceilings in G accesses/s, with their timings."""
    accesses = 16 * 2**20 if quick else 64 * 2**20
    hbm = _gather_rate(2**30, accesses, device)
    l2 = _gather_rate(16 * 2**20, accesses, device)
    claim_hbm, claims_hbm = _claim_rate(512 * 2**20, device)
    claim_l2, claims_l2 = _claim_rate(16 * 2**20, device)
    return {
        "C_hbm": hbm.rate(accesses), "C_l2": l2.rate(accesses),
        "C_claim_hbm": claim_hbm.rate(claims_hbm), "C_claim_l2": claim_l2.rate(claims_l2),
        "hbm_timing": hbm.as_dict(), "l2_timing": l2.as_dict(),
        "claim_hbm_timing": claim_hbm.as_dict(), "claim_l2_timing": claim_l2.as_dict(),
        "accesses": accesses, "hbm_table_bytes": 2**30, "l2_table_bytes": 16 * 2**20,
        "claim_hbm_table_bytes": 512 * 2**20, "claim_l2_table_bytes": 16 * 2**20,
    }
