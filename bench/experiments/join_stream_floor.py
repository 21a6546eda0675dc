"""The host's floor under the streamed join's result (whose target is 0.7 of the link
ceiling): how fast this machine can put a result of many GB into new host memory, beside the
link.

`gpuhash bench join`'s streamed part (gpuhash.bench.join_stream) returns an inner join of
1.61G probe rows as two int64 gather maps of 805M rows (12.9 GB) and a semi join as one (6.4
GB), in new pageable host memory. Timed here, with no join at all (wall clock, median of 3):
- the link: 1 GiB pinned copies each way (gpuhash.bench.join_stream.link_rates);
- new host memory written by T threads at once (T = 1, 4, 8, 16), each NumPy-copying a 32 MB
  source over its share of a fresh huge-page mapping (gpuhash.join.strategies.stream's
  host_empty): what page faults and the copy cost together, with nothing else running;
- the streamed join's own return path (that module's _ToHost) fed device pieces of the inner
  result's size: the D2H copies through the pinned ring and the workers' landing copies,
  as the join runs them, without the probe's chunks coming in; for several rings (RINGS:
  stages x workers).
If the return path alone takes longer than the link ceiling / 0.7, no join with this design
can meet the target on this host. On the GPU machine:
PYTHONPATH=src python bench/experiments/join_stream_floor.py
Results: bench/results/join_stream_floor_h100_68c5abb.txt, join_stream_floor_rings_h100.txt."""

import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from gpuhash.bench.join_stream import link_rates
from gpuhash.join.strategies.stream import _ToHost, host_empty

PAIRS = int(1.5 * (4 << 30)) // 4 // 2  # the suite's inner join: half of 1.61G probe rows
DEV = torch.device("cuda")
RINGS = [tuple(int(x) for x in ring.split("x"))  # stages x workers of the return path
         for ring in os.environ.get("RINGS", "8x8,16x16,24x16,16x12").split(",")]


def wall(call, runs: int = 3) -> float:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def fresh_writes(nbytes: int, threads: int) -> float:
    """Seconds to write nbytes of new huge-page host memory with `threads` NumPy copies."""
    source = np.ones(32 << 20, dtype=np.uint8)

    def once() -> None:
        target = host_empty(nbytes, torch.uint8).numpy()
        share = -(-nbytes // threads)

        def part(i: int) -> None:
            for first in range(i * share, min(nbytes, (i + 1) * share), source.size):
                piece = target[first:min(first + source.size, (i + 1) * share, nbytes)]
                np.copyto(piece, source[:piece.size])

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(part, range(threads)))

    return wall(once)


def return_path(rows: int, piece_rows: int = 100_000_000, **ring) -> float:
    """Seconds for _ToHost (``ring``: its stages and workers) to land two int64 lanes of
    `rows` rows from device pieces."""
    piece = torch.arange(piece_rows, dtype=torch.int64, device=DEV)

    def once() -> None:
        to_host = _ToHost(DEV, rows, **ring)
        landed = []
        for first in range(0, rows, piece_rows):
            count = min(piece_rows, rows - first)
            for lane in ("left", "right"):
                landed.append(to_host(piece[:count], lane))
        to_host.wait()
        assert int(landed[-1][-1]) == count - 1
        del landed

    return wall(once)


def main() -> None:
    torch.zeros(1, device=DEV)
    rates = link_rates(DEV)
    inner, semi = 16 * PAIRS, 8 * PAIRS
    ceiling = {name: nbytes / (rates["d2h_gb_per_s"] * 1e9)
               for name, nbytes in (("inner", inner), ("semi", semi))}
    print(f"link: H2D {rates['h2d_gb_per_s']:.1f} GB/s, D2H {rates['d2h_gb_per_s']:.1f} GB/s; "
          f"the results alone over D2H: inner {ceiling['inner']:.3f} s, semi "
          f"{ceiling['semi']:.3f} s; os.cpu_count() {os.cpu_count()}", flush=True)
    for threads in (1, 4, 8, 16):
        s = fresh_writes(inner, threads)
        print(f"new host memory, {inner / 1e9:.1f} GB by {threads:2d} threads: {s:.3f} s "
              f"({inner / s / 1e9:.1f} GB/s)", flush=True)
    for stages, workers in RINGS:
        s = return_path(PAIRS, stages=stages, workers=workers)
        print(f"_ToHost ({stages} stages, {workers} workers), two lanes of {PAIRS:,} int64 "
              f"rows ({inner / 1e9:.1f} GB): {s:.3f} s ({inner / s / 1e9:.1f} GB/s); link "
              f"ceiling / that: {ceiling['inner'] / s:.2f}", flush=True)


main()
