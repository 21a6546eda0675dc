"""The command line: ``gpuhash bench map`` (on the GPU when there is one, else the CPU engine)."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys

import torch


def _commit() -> str:
    if os.environ.get("GPUHASH_COMMIT"):
        return os.environ["GPUHASH_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _header(device_name: str, quick: bool) -> dict:
    return {
        "suite": "map", "device": device_name,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "quick": quick,
        "method": "CUDA events around each call (device time of all kernels it launches), "
                  "warm-up runs (at least 2 and 0.2 s) + N timed runs, IQR outliers dropped, "
                  "median reported; results "
                  "checked before timing; inserts start from a cleared table whose clear was "
                  "written back from L2 when the table is larger than L2; G = 1e9",
    }


def _bench_map_gpu(args) -> dict:
    from rich.progress import track

    from .bench import ceilings, map_suite, peers
    from .bench.harness import time_host_calls

    device = torch.device("cuda", torch.cuda.current_device())
    report = _header(torch.cuda.get_device_name(device), args.quick)
    # host overhead first, while the allocator is fresh (as in a program's first calls)
    report["host_overhead_us"] = _host_overhead(device, time_host_calls)
    report["ceilings"] = ceilings.measure(device, quick=args.quick)
    runs = 5 if args.quick else args.runs
    results = []
    for config in track(map_suite.plan(quick=args.quick), description="map configs"):
        results.append(map_suite.run_config(config, device, report["ceilings"], runs=runs))
        torch.cuda.empty_cache()
    report["results"] = results
    big = 8 * 2**20 if args.quick else 32 * 2**20
    report["peers"] = {"sort_searchsorted": peers.sort_searchsorted(big, device, runs=runs)}
    if args.layouts:
        report["peers"]["seed_layouts"] = (
            peers.seed_layouts(2**20, device, report["ceilings"]["C_l2"], runs=runs)
            + peers.seed_layouts(big, device, report["ceilings"]["C_hbm"], runs=runs))
    report["cpu"] = {"versus_dict": peers.cpu_versus_dict(2**18 if args.quick else 2**20)}
    return report


def _host_overhead(device, time_host_calls) -> dict:
    from . import HashMap

    # capacity well above the 1K keys, so repeated inserts of them never near the load limit
    # (which would make every insert synchronise to learn the exact count)
    table = HashMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1 << 16,
                    device=device)
    keys = torch.arange(1024, device=device)
    values = torch.ones(1024, device=device)
    table.insert(keys, values)
    return {
        "find_1k": time_host_calls(lambda: table.find(keys)),
        "contains_1k": time_host_calls(lambda: table.contains(keys)),
        "insert_1k": time_host_calls(lambda: table.insert(keys, values)),
    }


def _bench_map_cpu(args) -> dict:
    from .bench import cpu_suite, peers

    report = _header(f"CPU ({platform.processor() or platform.machine()}, no CUDA)", args.quick)
    report["cpu"] = {
        "configs": cpu_suite.run(quick=args.quick),
        "versus_dict": peers.cpu_versus_dict(2**16 if args.quick else 2**18),
    }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuhash", description="GPU hash tables for Python")
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser("bench", help="run a benchmark suite")
    bench.add_argument("suite", choices=["map"], help="what to benchmark")
    bench.add_argument("--quick", action="store_true", help="fewer sizes, loads and runs")
    bench.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    bench.add_argument("--plot", metavar="PATH", help="throughput vs load factor (matplotlib)")
    bench.add_argument("--layouts", action="store_true",
                       help="add seed 000's V1/V2/V3 layouts as fixed kernels")
    bench.add_argument("--runs", type=int, default=9, help="timed runs per figure")
    bench.add_argument("--cpu", action="store_true", help="the CPU engine even with a GPU")
    args = parser.parse_args(argv)

    from .bench import report as show

    on_gpu = torch.cuda.is_available() and not args.cpu
    report = _bench_map_gpu(args) if on_gpu else _bench_map_cpu(args)
    if on_gpu:
        show.print_gpu(report)
    else:
        show.print_cpu(report["cpu"])
    if args.json:
        show.write_json(report, args.json)
    if args.plot and on_gpu:
        show.plot(report, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
