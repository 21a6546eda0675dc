"""``gpuhash bench join``'s out-of-core part: host keys larger than the join's GPU memory budget
joined with ``device="cuda"``, beside the host link's ceiling measured in the same run.

The probe side is ``ratio`` times the budget in bytes (int32 keys, about half matching distinct
build keys, as the J shapes), so the planner must stream it; the build side is J4's 10M keys.
The ceiling is the time the link needs at least: the keys in at the pinned host-to-device copy
rate and the gather maps out at the device-to-host rate, both measured here on 1 GiB pinned
copies, running both ways at once (max of the two, as the streamed join overlaps them). The
join is timed by wall clock (its result is in host memory when it returns), from pageable and
from pinned probe keys, inner (16 bytes out a match) and semi (8 bytes a matching left row);
the first call of each (pinned staging made, kernels loaded) is reported apart.

Example:
    >>> link_ceiling_s(2e9, 1e9, {"h2d_gb_per_s": 20.0, "d2h_gb_per_s": 10.0})
    0.1
"""

from __future__ import annotations

import time

import torch

from gpuhash.bench.harness import time_gpu
from gpuhash.join.api import join

BUILD_ROWS = 10_000_000


def link_rates(device: torch.device, *, nbytes: int = 1 << 30, runs: int = 5) -> dict:
    """GB/s of pinned host-to-device and device-to-host copies of ``nbytes``."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=device)
    h2d = time_gpu(lambda: gpu.copy_(host, non_blocking=True), runs=runs)
    d2h = time_gpu(lambda: host.copy_(gpu, non_blocking=True), runs=runs)
    return {"h2d_gb_per_s": nbytes / (h2d.median_ms * 1e-3) / 1e9,
            "d2h_gb_per_s": nbytes / (d2h.median_ms * 1e-3) / 1e9}


def link_ceiling_s(in_bytes: float, out_bytes: float, rates: dict) -> float:
    """Seconds the link needs at least to carry ``in_bytes`` in and ``out_bytes`` out."""
    return max(in_bytes / (rates["h2d_gb_per_s"] * 1e9),
               out_bytes / (rates["d2h_gb_per_s"] * 1e9))


def run_streamed(device: torch.device, *, budget_bytes: int, ratio: float = 1.5,
                 runs: int = 2) -> dict:
    """The streamed join of ``ratio`` x ``budget_bytes`` of probe keys, each variant timed
    ``runs`` times after one untimed call (the median), with the link ceiling."""
    probe_rows = int(ratio * budget_bytes) // 4
    generator = torch.Generator(device=device).manual_seed(5)
    build = (torch.randperm(BUILD_ROWS, device=device, generator=generator) * 2).to(
        torch.int32).cpu()
    probe = torch.randint(0, 2 * BUILD_ROWS, (probe_rows,), device=device, generator=generator,
                          dtype=torch.int32).cpu()
    rates = link_rates(device)
    out = {"budget_bytes": budget_bytes, "ratio": ratio, "build_rows": BUILD_ROWS,
           "probe_rows": probe_rows, "link": rates, "runs": {}}
    plan = None
    for pinned in (False, True):
        keys = probe.pin_memory() if pinned else probe
        for how in ("inner", "semi"):
            def call(how=how, keys=keys):
                return join(keys, build, how=how, device=device, memory_budget=budget_bytes)
            start = time.perf_counter()
            result = call()
            first = time.perf_counter() - start
            matched = int((result[0] if isinstance(result, tuple) else result).shape[0])
            del result
            seconds = []
            for _ in range(runs):
                start = time.perf_counter()
                result = call()
                seconds.append(time.perf_counter() - start)
                del result
            elapsed = sorted(seconds)[len(seconds) // 2]
            in_bytes = (probe_rows + BUILD_ROWS) * 4
            out_bytes = matched * (16 if how == "inner" else 8)
            ceiling = link_ceiling_s(in_bytes, out_bytes, rates)
            out["runs"][f"{how}_{'pinned' if pinned else 'pageable'}"] = {
                "seconds": elapsed, "all_seconds": seconds, "first_call_seconds": first,
                "output_rows": matched,
                "in_bytes": in_bytes, "out_bytes": out_bytes,
                "gb_per_s": (in_bytes + out_bytes) / elapsed / 1e9,
                "link_ceiling_s": ceiling, "of_link_ceiling": ceiling / elapsed}
        if plan is None:
            from gpuhash.join.api import explain_join
            plan = str(explain_join(keys, build, device=device, memory_budget=budget_bytes))
        del keys
    out["plan"] = plan
    return out
