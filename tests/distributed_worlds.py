"""Worlds of ranks for the distributed tests: ``run_world`` runs a scenario function on 2 or
4 spawned processes (gloo on CPUs, NCCL on a GPU each) with a time limit, so a rank that fails
reports its traceback and a rank that hangs fails the test instead of the run; and the batches
every rank draws from one seed, so each rank can build the whole model itself.
"""

from __future__ import annotations

import faulthandler
import importlib
import multiprocessing
import os
import traceback
from datetime import timedelta

import torch

SPAWN = multiprocessing.get_context("spawn")
LIMIT_S = 120  # a world's time, numba's first load in each child included


def _child(scenario: str, rank: int, world: int, folder: str, queue, backend: str) -> None:
    import torch.distributed as dist

    # a rank still running near the limit prints where every thread of it is (to the test's
    # stderr), so a hang names its place rather than only its rank
    faulthandler.dump_traceback_later(LIMIT_S - 15)
    try:
        torch.set_num_threads(1)
        options = {}
        if backend == "nccl":  # a GPU a rank, as torchrun sets it up
            torch.cuda.set_device(rank)
            options["device_id"] = torch.device("cuda", rank)
        dist.init_process_group(backend, init_method="file://" + os.path.join(folder, "init"),
                                rank=rank, world_size=world, timeout=timedelta(seconds=60),
                                **options)
        try:
            module, _, name = scenario.partition(":")  # "test_module:function"
            run = getattr(importlib.import_module(module), name)
            run(rank, world, folder)
        finally:
            dist.destroy_process_group()
        queue.put((rank, None))
    except BaseException:
        queue.put((rank, traceback.format_exc()))


def run_world(scenario: str, world: int, folder, backend: str = "gloo") -> None:
    """Run ``scenario(rank, world, folder)`` (named "module:function") on ``world`` ranks of
    ``backend`` (gloo: CPU processes; nccl: a GPU each); fail on any rank's error or on a
    hang."""
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    init = os.path.join(folder, "init")
    if os.path.exists(init):
        os.remove(init)
    queue = SPAWN.Queue()
    ranks = [SPAWN.Process(target=_child, args=(scenario, rank, world, folder, queue, backend))
             for rank in range(world)]
    for process in ranks:
        process.start()
    reports = {}
    try:
        for _ in ranks:
            rank, error = queue.get(timeout=LIMIT_S)
            reports[rank] = error
    except Exception:  # queue.Empty: some rank never reported
        pass
    finally:
        for process in ranks:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
    missing = sorted(set(range(world)) - set(reports))
    assert not missing, f"{scenario}: ranks {missing} hung or died without a report"
    failed = {rank: error for rank, error in reports.items() if error}
    assert not failed, "\n".join(f"rank {rank}:\n{error}" for rank, error in failed.items())


# --- batches every rank can draw ------------------------------------------------------------
def batch(step: int, rank: int, *, high: int = 200, dtype=torch.int64) -> torch.Tensor:
    """Rank ``rank``'s keys of ``step``: repeats within and across ranks, rank 1's batch of
    step 1 empty."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    rows = 0 if (rank == 1 and step == 1) else int(torch.randint(0, 300, (), generator=generator))
    return torch.randint(-high, high, (rows,), generator=generator).to(dtype)


def every_rank(step: int, world: int, **options) -> list[torch.Tensor]:
    return [batch(step, rank, **options) for rank in range(world)]


def mine(parts: list[torch.Tensor], rank: int) -> slice:
    start = sum(p.shape[0] for p in parts[:rank])
    return slice(start, start + parts[rank].shape[0])


def values_for(keys: torch.Tensor, step: int) -> torch.Tensor:
    return torch.stack([keys.double() * 10 + step, -keys.double()], 1).float()


def gathered(obj) -> list:
    import torch.distributed as dist

    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
