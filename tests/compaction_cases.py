"""Keys for the CUDA engine's group_compact with a first batch of 4096 rows, one per way it
numbers them, and the check of its answer (tests/test_gpu_groupby.py on the GPU;
tests/test_groupby_edges.py over the CPU engine's tables, which run the same logic)."""

from __future__ import annotations

import torch

FIRST_BATCH = 4096


def compaction_cases() -> dict[str, torch.Tensor]:
    """Repeated keys the first batch sees (one find over the rest), new keys past it (the
    missed rows numbered again, alone), sorted keys (batches), mostly distinct keys (one
    insert of every row)."""
    generator = torch.Generator().manual_seed(11)

    def drawn(distinct: int, rows: int) -> torch.Tensor:
        domain = torch.randint(-(2**50), 2**50, (distinct,), generator=generator)
        domain[:2] = torch.tensor([-1, -2])  # the slot format's marker keys, kept out of band
        return domain[torch.randint(0, distinct, (rows,), generator=generator)]

    early = drawn(300, 60_000)
    return {"repeated": early,
            "new keys later": torch.cat([early[:10_000], drawn(400, 50_000)]),
            "sorted": torch.arange(-500, 15_000).repeat_interleave(4),
            "mostly distinct": drawn(50_000, 60_000)}


def assert_numbered_by_first_row(keys: torch.Tensor, codes: torch.Tensor,
                                 uniques: torch.Tensor, first: torch.Tensor) -> None:
    """Every key once among ``uniques``, ``codes`` giving each row's key, code k's first row
    ``first[k]``, and codes counting up in the order of those rows (pandas' factorize)."""
    assert torch.equal(uniques[codes], keys)
    assert uniques.unique().shape == uniques.shape == keys.unique().shape
    want = torch.full((first.shape[0],), codes.shape[0], dtype=torch.int64)
    want.scatter_reduce_(0, codes, torch.arange(codes.shape[0]), "amin")
    assert torch.equal(first, want)
    assert bool((first[1:] > first[:-1]).all())
