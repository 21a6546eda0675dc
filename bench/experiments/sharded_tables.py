"""Sharded tables on several GPUs: insert and find of 64M int64 -> int64 keys a rank into a
gh.distributed.ShardedHashMap, the share of each call the all-to-all exchanges take, and the
NCCL all-to-all bandwidth measured in the same run, so the call's rate can be set against it.

Each rank draws its own random keys (distinct in practice: 64M of 2**63); every rank calls
each operation together. Wall time a call from a barrier to the last rank's end (CUDA
synchronised); the exchanges' share from CUDA events around each row all_to_all_single inside
the calls (a column's rows to their owners, an answer column's back: one each, or one for all
columns of a call under exchange.PACK_ROWS rows; the header exchange, a few words, is left in
the rest); the routing's (the owners and the stable sort by owner, routing.route) likewise. At
world size 1 a call goes straight to the rank's table: no routing, no exchange. NCCL
bandwidth: all_to_all_single of 1 GiB a rank in equal parts, as nccl-tests report it
(algorithm bandwidth: bytes a rank sent and received over the time; bus bandwidth: that times
(world - 1) / world).

On a GPU machine, from the repository root:
    torchrun --nproc_per_node=8 bench/experiments/sharded_tables.py [KEYS_PER_RANK] [OUT.json]
or from Python under torchrun: ``run(keys_per_rank=..., out=...)``. Rank 0 prints and writes
the JSON (device, world size, date, commit, figures); default OUT:
bench/results/sharded_tables_<device>_x<world>.json (docs/measurements.md, "Sharded tables",
cites the runs).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import gpuhash as gh
from gpuhash.bench.provenance import source_commit
from gpuhash.distributed import base as _base
from gpuhash.distributed import exchange as _exchange

GIB = 1 << 30


class _StepTimer:
    """CUDA events around every call of ``owner.name`` inside the sharded calls (on the
    current stream, which waits for NCCL's), summed per call: the row all-to-alls
    (Exchange._all_to_all), the routing (base.route)."""

    def __init__(self, owner, name: str):
        self.pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._owner, self._name = owner, name
        self._original = getattr(owner, name)

    def __enter__(self):
        timer, original = self, self._original

        def timed(*args, **kwargs):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            start.record()
            out = original(*args, **kwargs)
            end.record()
            timer.pairs.append((start, end))
            return out
        setattr(self._owner, self._name, timed)
        return self

    def __exit__(self, *exc):
        setattr(self._owner, self._name, self._original)

    def take_ms(self) -> float:
        torch.cuda.synchronize()
        total = sum(start.elapsed_time(end) for start, end in self.pairs)
        self.pairs.clear()
        return total


def _timed(call) -> tuple[float, object]:
    dist.barrier()
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = call()
    torch.cuda.synchronize()
    dist.barrier()
    return (time.perf_counter() - start) * 1e3, out


def nccl_all_to_all(bytes_per_rank: int = GIB, repeats: int = 5) -> dict:
    """all_to_all_single of ``bytes_per_rank`` bytes a rank in equal parts: ms and GB/s."""
    world = dist.get_world_size()
    part = bytes_per_rank // world
    send = torch.empty(part * world, dtype=torch.uint8, device="cuda")
    receive = torch.empty_like(send)
    dist.all_to_all_single(receive, send)  # warm-up: NCCL's connections
    times = [_timed(lambda: dist.all_to_all_single(receive, send))[0] for _ in range(repeats)]
    ms = min(times)
    algbw = part * world / (ms * 1e-3) / 1e9
    return {"bytes_per_rank": part * world, "ms": ms, "algbw_GBps": algbw,
            "busbw_GBps": algbw * (world - 1) / world}


def run(*, keys_per_rank: int = 64 << 20, repeats: int = 3, out: str | None = None) -> dict:
    """Measure on the current process group (NCCL, one GPU a rank); rank 0 writes ``out``."""
    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator(device="cuda").manual_seed(rank)
    keys = torch.randint(-2**62, 2**62, (keys_per_rank,), device="cuda", generator=generator)
    values = keys * 3
    table = gh.distributed.ShardedHashMap(key_dtype=torch.int64, value_dtype=torch.int64,
                                          capacity=keys_per_rank + keys_per_rank // 8)
    figures: dict = {"insert": [], "find": []}
    with _StepTimer(_exchange.Exchange, "_all_to_all") as timer, \
            _StepTimer(_base, "route") as routing:
        for _ in range(repeats):
            table.local.clear()  # every rank clears its shard: the same inserts again
            ms, _ = _timed(lambda: table.insert(keys, values))
            figures["insert"].append({"ms": ms, "exchange_ms": timer.take_ms(),
                                      "route_ms": routing.take_ms()})
        for _ in range(repeats):
            ms, (found_values, found) = _timed(lambda: table.find(keys))
            figures["find"].append({"ms": ms, "exchange_ms": timer.take_ms(),
                                    "route_ms": routing.take_ms()})
    assert bool(found.all()) and torch.equal(found_values, values), "find lost keys"
    if world > 1:
        figures["nccl_all_to_all"] = nccl_all_to_all()
    else:  # the single-GPU figure the sharded ones are set against: a plain HashMap
        plain = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64,
                           capacity=keys_per_rank + keys_per_rank // 8, device="cuda")
        figures["single_table"] = {}
        for name, call in (("insert", lambda: plain.insert(keys, values)),
                           ("find", lambda: plain.find(keys))):
            times = []
            for _ in range(repeats):
                if name == "insert":
                    plain.clear()
                times.append(_timed(call)[0])
            figures["single_table"][name] = {
                "ms": min(times), "G_keys_per_s": keys_per_rank / (min(times) * 1e-3) / 1e9}
    for name in ("insert", "find"):
        best = min(figures[name], key=lambda f: f["ms"])
        best["G_keys_per_s_per_rank"] = keys_per_rank / (best["ms"] * 1e-3) / 1e9
        best["exchange_share"] = best["exchange_ms"] / best["ms"]
        figures[name + "_best"] = best
    gathered: list = [None] * world
    dist.all_gather_object(gathered, {name: figures[name + "_best"] for name in
                                      ("insert", "find")})
    result = {
        "experiment": "sharded_tables", "device": torch.cuda.get_device_name(),
        "world_size": world, "keys_per_rank": keys_per_rank,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": source_commit(), "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "method": "wall ms from a barrier to every rank's end, best of repeats; exchange_ms: "
                  "CUDA events around the row all-to-alls inside the call; route_ms: around "
                  "the routing (owners, stable sort by owner)",
        "rank0": figures, "per_rank_best": gathered,
    }
    if rank == 0:
        print(json.dumps({k: result[k] for k in ("device", "world_size", "keys_per_rank")}))
        for name in ("insert", "find"):
            best = figures[name + "_best"]
            print(f"{name}: {best['ms']:.1f} ms, {best['G_keys_per_s_per_rank']:.2f} G keys/s a "
                  f"rank, exchanges {100 * best['exchange_share']:.0f}%, routing "
                  f"{best['route_ms']:.2f} ms")
        if world > 1:
            bw = figures["nccl_all_to_all"]
            print(f"NCCL all_to_all_single 1 GiB a rank: {bw['ms']:.1f} ms, algbw "
                  f"{bw['algbw_GBps']:.1f} GB/s, busbw {bw['busbw_GBps']:.1f} GB/s")
        else:
            for name, row in figures["single_table"].items():
                print(f"one HashMap {name}: {row['ms']:.1f} ms, {row['G_keys_per_s']:.2f} G keys/s")
        name = torch.cuda.get_device_name().split()[-1].lower().replace(" ", "_")
        path = out or os.path.join("bench", "results", f"sharded_tables_{name}_x{world}.json")
        with open(path, "w") as file:
            json.dump(result, file, indent=1)
    return result


def main(argv: list[str]) -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    try:
        run(keys_per_rank=int(argv[0]) if argv else 64 << 20,
            out=argv[1] if len(argv) > 1 else None)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
