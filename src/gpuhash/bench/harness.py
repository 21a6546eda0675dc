"""Timing and statistics: warm-up, repeated runs, outliers dropped, the median kept.

GPU regions are timed with CUDA events (device time of everything the region launches), CPU
regions with a monotonic clock. Each measurement: warm-up runs, timed runs, outliers dropped by
the IQR rule, then median with min and max kept so noise stays visible.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch


@dataclass
class Timing:
    """One measured region, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    runs: int
    dropped: int

    def rate(self, items: int) -> float:
        """Items per second (at the median), in billions."""
        return items / (self.median_ms * 1e-3) / 1e9

    def as_dict(self) -> dict:
        return asdict(self)


def iqr_filter(samples: list[float]) -> list[float]:
    """Samples inside [Q1 - 1.5 IQR, Q3 + 1.5 IQR] (all of them when there are too few)."""
    if len(samples) < 4:
        return list(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4)
    low, high = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return [s for s in samples if low <= s <= high]


def _summarise(samples: list[float]) -> Timing:
    kept = iqr_filter(samples)
    return Timing(statistics.median(kept), min(kept), max(kept), len(samples),
                  len(samples) - len(kept))


def time_gpu(region: Callable[[], object], *, setup: Callable[[], object] | None = None,
             warmup: int = 2, warmup_s: float = 0.2, runs: int = 7) -> Timing:
    """Device time of ``region`` by CUDA events; ``setup`` runs untimed before each run.

    Warm-up runs go on until ``warmup`` of them and ``warmup_s`` seconds have passed, so a
    region of a few milliseconds is not timed on a GPU still leaving an idle state (a GPU
    idle for many seconds runs slower for a while; the benchmark never idles that long)."""
    def once() -> float:
        if setup is not None:
            setup()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        region()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    began, done = time.perf_counter(), 0
    while done < warmup or time.perf_counter() - began < warmup_s:
        once()
        done += 1
    return _summarise([once() for _ in range(runs)])


# CPU peers' worker threads (DuckDB's, Arrow's) keep the host busy for a while after a query,
# and a GPU call timed right after them pays for it in host time (several times its own).
# So a peer's timing is followed by a pause.
PEER_SETTLE_S = 2.0


def time_peer(region: Callable[[], object], *, runs: int = 7) -> Timing:
    """:func:`time_cpu` of a CPU peer, then PEER_SETTLE_S seconds for its threads to idle."""
    timing = time_cpu(region, runs=runs)
    time.sleep(PEER_SETTLE_S)
    return timing


def _l2_bytes(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).L2_cache_size


@functools.cache
def _scrub_buffer(device_index: int) -> torch.Tensor:
    return torch.ones(_l2_bytes(device_index), dtype=torch.float32, device=device_index)  # 4x


def write_back_l2(device: torch.device, *, table_bytes: int) -> None:
    """After a setup step that wrote a table of ``table_bytes`` larger than L2 (a clear), read
    a buffer four times the size of L2, so that the lines the setup left dirty reach memory
    before the timed region starts instead of inside it. A table that fits in L2 is left there
    (warm, as in a program that keeps using it).

    Without it, a timed insert into a just-cleared table also pays for the clear's last
    writes."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if table_bytes > _l2_bytes(index):
        _scrub_buffer(index).sum()


def warm_up_gpu(device: torch.device, *, seconds: float = 15.0) -> None:
    """Keep the GPU busy with random gathers for ``seconds`` before a suite's first timing.
    After the machine sat idle, its first seconds of work run slower (the same workload
    timed first and fourth in one call differs)."""
    if device.type != "cuda":
        return
    table = torch.empty(1 << 27, dtype=torch.int64, device=device)  # 1 GiB
    index = torch.randint(0, table.numel(), (1 << 24,), device=device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            table.index_select(0, index)
        torch.cuda.synchronize(device)
    del table, index
    torch.cuda.empty_cache()  # the suite's own allocations start from the same pool as before


def time_cpu(region: Callable[[], object], *, setup: Callable[[], object] | None = None,
             warmup: int = 1, runs: int = 5) -> Timing:
    """Wall-clock time of ``region`` on the host."""
    samples = []
    for i in range(warmup + runs):
        if setup is not None:
            setup()
        start = time.perf_counter()
        region()
        elapsed = (time.perf_counter() - start) * 1e3
        if i >= warmup:
            samples.append(elapsed)
    return _summarise(samples)


def time_wall_ms(call: Callable[[], object], *, calls: int = 20) -> float:
    """Wall-clock milliseconds per call of ``call`` run back to back, after one untimed call,
    synchronising before and after (device and host time together)."""
    call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e3


def time_host_calls(call: Callable[[], object], *, calls: int = 2000) -> float:
    """Host wall clock per call in microseconds, calls queued back to back, one sync at the
    end: the overhead Python and the launch add to every call."""
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def bench_kernel(name: str, device: torch.device):
    """A kernel of the benchmarks' own file (bench/kernels/bench.cu): ceilings and floors."""
    from gpuhash._common.cuda.compile import load_module

    return load_module("bench/kernels/bench.cu", (), device.index or 0).get_kernel(name)
