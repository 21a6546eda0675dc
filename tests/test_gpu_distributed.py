"""Sharded tables on NCCL, a GPU a rank (2 and 4 where the machine has them), against one
table on one GPU fed every rank's batch in rank order: the same rules the gloo tests check
on CPU processes (tests/test_distributed.py), on the GPU path (CUDA tensors through NCCL's
all-to-all, the CUDA engines at the owners)."""

from __future__ import annotations

import pytest
import torch
from distributed_worlds import every_rank, gathered, mine, run_world, values_for

import gpuhash as gh

pytestmark = pytest.mark.gpu


def _worlds() -> list[int]:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [w for w in (2, 4) if w <= count] or [2]


def check(ok: bool, what: str) -> None:
    """An assertion every rank makes together: a failure on one rank raises on all of them,
    naming the rank, rather than leaving the others waiting in their next collective."""
    failed = [text for text in gathered(None if ok else what) if text is not None]
    assert not failed, f"failed on {len(failed)} rank(s): {failed}"


def gpu_map_and_cache(rank: int, world: int, folder: str) -> None:
    from gpuhash.distributed import ShardedCacheMap, ShardedHashMap, owner_of

    device = torch.device("cuda", rank)
    table = ShardedHashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
                           capacity=16)
    model = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
                       device=device)
    for step in range(3):
        parts = [p.to(device) for p in every_rank(step, world, high=5000)]
        keys = torch.cat(parts)
        inserted = table.insert(parts[rank], values_for(parts[rank], step))
        expected = model.insert(keys, values_for(keys, step))
        check(torch.equal(inserted, expected[mine(parts, rank)]), f'rank {rank} insert step {step}')
    n = len(table)
    check(n == len(model), f'rank {rank} len {n} vs {len(model)}')
    probe = every_rank(7, world, high=6000)[rank].to(device)
    values, found = table.find(probe, default=-5.0)
    want, want_found = model.find(probe, default=-5.0)
    check(torch.equal(found, want_found) and torch.equal(values, want), f'rank {rank} find')
    keys, values = table.items()
    check(keys.device == device and bool((owner_of(keys, world) == rank).all()),
          f'rank {rank} owners')
    everything = {k: v for part in gathered((keys.tolist(), values.tolist()))
                  for k, v in zip(*part)}
    model_keys, model_values = model.items()
    check(everything == dict(zip(model_keys.tolist(), model_values.tolist())),
          f'rank {rank} items')

    cache = ShardedCacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(8,),
                            capacity=1 << 14)
    single = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(8,),
                         capacity=1 << 16, device=device)
    parts = [p.to(device) for p in every_rank(3, world, high=3000)]
    rows, found = cache.find_or_insert(parts[rank], init=1.5)
    want_rows, want_found = single.find_or_insert(torch.cat(parts), init=1.5)
    check(torch.equal(found, want_found[mine(parts, rank)]), f'rank {rank} cache found')
    check(torch.equal(rows, want_rows[mine(parts, rank)]), f'rank {rank} cache rows')
    status = cache.insert_or_assign(parts[rank], torch.ones(parts[rank].shape[0], 8,
                                                            device=device))
    reserved = (parts[rank] == -1) | (parts[rank] == -2)  # the two keys a cache refuses
    check(bool(((status != gh.REFUSED) | reserved).all()), f'rank {rank} refused')
    n = len(cache)
    check(n == len(single), f'rank {rank} cache len {n} vs {len(single)}')


@pytest.mark.parametrize("world", _worlds())
def test_sharded_tables_on_nccl_answer_as_one_table(world, tmp_path):
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs")
    run_world("test_gpu_distributed:gpu_map_and_cache", world, tmp_path, backend="nccl")
