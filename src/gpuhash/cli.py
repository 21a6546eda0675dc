"""The command line: ``gpuhash bench map|cache|join`` and ``gpuhash join`` (on the GPU when
there is one, else the CPU engine)."""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch


def _commit() -> str:
    if os.environ.get("GPUHASH_COMMIT"):
        return os.environ["GPUHASH_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + "+uncommitted" if changed else head  # a figure names the code it measured


GPU_METHOD = ("CUDA events around each call (device time of all kernels it launches), "
              "the GPU kept busy 15 s before the first device timing, "
              "warm-up runs (at least 2 and 0.2 s) + N timed runs, IQR outliers dropped, "
              "median reported; results "
              "checked before timing; inserts start from a cleared table whose clear was "
              "written back from L2 when the table is larger than L2; G = 1e9")
CPU_METHOD = ("host wall clock (time.perf_counter) around each call, 1 warm-up run + N timed "
              "runs, IQR outliers dropped, median reported; results checked before timing; "
              "inserts start from a cleared table")


def _header(device_name: str, quick: bool, runs: int, method: str, suite: str = "map") -> dict:
    return {
        "suite": suite, "device": device_name,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "quick": quick, "runs": runs, "method": method,
    }


def _bench_map_gpu(args) -> dict:
    from rich.progress import track

    from gpuhash.bench import ceilings, core_suite, map_suite, peers
    from gpuhash.bench.harness import time_host_calls, warm_up_gpu

    device = torch.device("cuda", torch.cuda.current_device())
    runs = args.runs or (5 if args.quick else 9)
    report = _header(torch.cuda.get_device_name(device), args.quick, runs, GPU_METHOD)
    # host overhead first, while the allocator is fresh (as in a program's first calls)
    report["host_overhead_us"] = _host_overhead(device, time_host_calls)
    report["host_overhead_us"]["bare_launch"] = core_suite.bare_launch_us(device,
                                                                          time_host_calls)
    warm_up_gpu(device, seconds=2.0 if args.quick else 15.0)  # after: it uses the allocator
    report["ceilings"] = ceilings.measure(device, quick=args.quick)
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
    report["core"] = core_suite.run(device, report["ceilings"], quick=args.quick, runs=runs)
    torch.cuda.empty_cache()
    report["cpu"] = {"versus_dict": peers.cpu_versus_dict(2**18 if args.quick else 2**20)}
    return report


def _host_overhead(device, time_host_calls) -> dict:
    from gpuhash import HashMap

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
    from gpuhash.bench import cpu_peers, cpu_suite, peers

    name = platform.processor() or platform.machine()
    where = "--cpu" if torch.cuda.is_available() else "no CUDA"
    runs = args.runs or 5
    report = _header(f"CPU ({name}, {where})", args.quick, runs, CPU_METHOD)
    report["cpu"] = {
        "configs": cpu_suite.run(quick=args.quick, runs=runs),
        # the dict comparison keeps its own default of 3 runs unless --runs is given
        "versus_dict": peers.cpu_versus_dict(2**16 if args.quick else 2**18,
                                             runs=args.runs or 3),
        "peers": cpu_peers.run(2**18 if args.quick else 5_000_000, runs=args.runs or 3),
    }
    return report


def _bench_cache(args, on_gpu: bool) -> dict:
    from gpuhash.bench import cache_suite

    if on_gpu:
        device = torch.device("cuda", torch.cuda.current_device())
        name = torch.cuda.get_device_name(device)
    else:
        device, name = torch.device("cpu"), f"CPU ({platform.processor() or platform.machine()})"
    runs = args.runs or (3 if args.quick else 5)
    report = _header(name, args.quick, runs, CACHE_METHOD, suite="cache")
    report["cache"] = cache_suite.run(device, quick=args.quick, runs=runs)
    return report


CACHE_METHOD = ("HierarchicalKV's: a fresh batch per call (60% present keys), host wall clock "
                "from the call to the end of a device sync, and CUDA events around the call "
                "in calls of their own; below full load a write's new keys erased after its "
                "timing; the GPU kept busy 15 s before the first timing, then 1 warm-up call "
                "+ N timed of each kind, median; B-KV/s = 2^30 keys/s")

BENCH_CACHE = """\
cache: CacheMap on HierarchicalKV's benchmark workload (u64 keys, f32 x dim values, dim 8, 32
and 64, capacity 128M (64M for dim 64), 1M keys per call, 60% present, LRU, loads 0.5 / 0.75 /
1.0; --quick: dim 8 at 16M), every API by wall clock and by CUDA events (median of 5 timed
calls, 3 with --quick), beside HKV's own H100 figures. On a GPU, then the hybrid workload: dim
64 at 128M slots (--quick: 16M) with max_hbm_bytes set to half the value rows, so the other
half live in pinned host memory; every API as above, and at each load values[index] of present
keys' slots that lie in host memory (GB/s) beside two ceilings measured on the same rows in the
same run: a row-gather kernel (a thread per 16 bytes) and a bulk copy of as many bytes from
pinned memory. Last, per bucket shape (16 to 128 slots) the share of the top scores kept when
fed five times the capacity, the load at the first eviction and the find speed. On a CPU: dim 8
at 512K, no hybrid run.
"""

BENCH_MAP = """\
Measures HashMap: insert, find and find_index, with every result checked before any time
counts.

On a GPU: tables of 1M and 32M keys (--quick: 1M and 8M) of the types u32->u32, u64->u64,
u32->f32x8 and u64->f32x8 (--quick: the first two) at load factors 0.5, 0.8, 0.9 and 0.99
(--quick: 0.5 and 0.9). Per table: insert (duplicates="any"), insert with dict semantics
(the default), find of hits and of misses, find_index of hits, in G keys/s by CUDA events
and as a ratio to a memory ceiling measured in the same run (random 8-byte gathers from a
1 GiB buffer, C_hbm, or from a 16 MB one, C_l2, for tables that fit in L2); also bytes per
entry and the buckets a lookup reads. Then: host time of a 1K-key call, torch sort +
searchsorted as a read-only map, seed 000's fixed layouts (--layouts), insert_or_apply
against atomicAdd, MultiMap count and find_all, an embedding table (u64->f32x8, 128M
capacity) at load 0.99 against 0.5, and the CPU engine against a Python dict.

On a CPU (no CUDA device, or --cpu): the CPU engine inserting and finding (hits and
misses) 256K keys (--quick: 32K) of u32->u32 and u64->f32x8 at loads 0.5 and 0.9, in
M keys/s by wall clock; the CPU engine against a Python dict building and looking up
the same 256K int64 keys (--quick: 64K); and 5M int64 -> float32 keys (--quick: 256K) built
and found by the CPU engine, pandas, polars (a left join), a dict and torch sort +
searchsorted (pandas and polars when installed), beside a numpy random-gather ceiling.
The map and cache plots (--plot) and --layouts need a GPU.
"""

BENCH_JOIN = """\
join: issue 12's J1-J5 (int32 keys, distinct build keys, half the probe rows matching, gather
maps out) beside DuckDB, pyarrow, polars (when installed) and torch sort + searchsorted, with
the copy ceiling of the same bytes; then variants of J3 (many-to-many, Zipf skew, int64 and
two-column keys, left / full / semi / anti), a merge with two payload columns a side, and host
keys streamed through a 4 GiB budget beside the host link. On a CPU: J1-J3 at 1/100 of their
rows. --plot draws every time beside its peers' on any machine.
"""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    from gpuhash import __version__

    parser = argparse.ArgumentParser(prog="gpuhash", description="GPU hash tables for Python")
    parser.add_argument("--version", action="version", version=f"gpuhash {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = commands.add_parser(
        "bench", help="run a benchmark suite",
        description="\n".join((BENCH_MAP, BENCH_CACHE, BENCH_JOIN)),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("suite", choices=["map", "cache", "join"], help="what to benchmark")
    bench.add_argument("--quick", action="store_true", help="fewer sizes, loads and runs")
    bench.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    bench.add_argument("--plot", metavar="PATH",
                       help="a plot (matplotlib): map and cache, throughput against load "
                            "(GPU only); join, each join's time beside its peers'")
    bench.add_argument("--layouts", action="store_true",
                       help="add seed 000's V1/V2/V3 layouts as fixed kernels (GPU only)")
    bench.add_argument("--runs", type=_positive, metavar="N",
                       help="timed runs per figure (default: 9 on a GPU, 5 with --quick; "
                            "5 on the CPU, 3 for the dict comparison)")
    bench.add_argument("--cpu", action="store_true", help="the CPU engine even with a GPU")
    join = commands.add_parser(
        "join", help="join two Parquet files into a third",
        description="Join LEFT and RIGHT (Parquet) on key columns into OUTPUT. RIGHT is read "
                    "whole and prepared as a hash table; LEFT is streamed one row group at a "
                    "time, with a progress bar. Runs on the GPU when there is one, else on "
                    "the CPU engine. Row order is unspecified.")
    join.add_argument("left", help="left Parquet file (streamed)")
    join.add_argument("right", help="right Parquet file (the build side, read whole)")
    join.add_argument("--on", required=True, action="append", metavar="COLUMN",
                      help="key column; repeat it or separate names by commas")
    join.add_argument("--how", default="inner",
                      choices=["inner", "left", "right", "full", "semi", "anti"])
    join.add_argument("-o", "--output", required=True, metavar="PATH",
                      help="Parquet file to write")
    join.add_argument("--explain", action="store_true", help="print the join's plan")
    join.add_argument("--cpu", action="store_true", help="the CPU engine even with a GPU")
    return parser, bench


def _join_files(args, on_gpu: bool) -> int:
    from rich.console import Console

    from gpuhash.join.cli import run_join

    on = [name.strip() for given in args.on for name in given.split(",") if name.strip()]
    try:
        written = run_join(args.left, args.right, on=on, how=args.how, output=args.output,
                           device="cuda" if on_gpu else "cpu", explain=args.explain,
                           progress=sys.stderr.isatty())
    except (ValueError, TypeError, OSError) as error:  # the user's files or options
        print(f"gpuhash join: error: {error}", file=sys.stderr)
        return 2
    Console(stderr=True).print(f"wrote {written} rows to {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser, bench = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0

    on_gpu = torch.cuda.is_available() and not args.cpu
    if args.command == "join":
        return _join_files(args, on_gpu)
    if args.layouts and args.suite != "map":
        bench.error("--layouts belongs to the map suite")
    if not on_gpu:
        why = "--cpu was given" if args.cpu else "no CUDA device was found"
        plot = args.plot and args.suite != "join"  # the join plot draws any run's figures
        for option, given in (("--plot", plot), ("--layouts", args.layouts)):
            if given:
                bench.error(f"{option} needs a GPU ({why}; the CPU benchmark has no "
                            f"{'plot' if option == '--plot' else 'fixed-layout kernels'})")
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # before a long run
        bench.error("--plot needs matplotlib: pip install 'gpuhash[plot]'")
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if path and not Path(path).resolve().parent.is_dir():  # before a long run, too
            bench.error(f"{option} {path}: its directory does not exist")

    from gpuhash.bench import report as show

    if args.suite == "join":
        from gpuhash.bench import join_report, join_suite

        report = join_suite.run(quick=args.quick, runs=args.runs, on_gpu=on_gpu,
                                header=_header)
        printed, plotted = join_report.print_report, join_report.plot_join
    elif args.suite == "cache":
        from gpuhash.bench import cache_report

        report = _bench_cache(args, on_gpu)
        printed, plotted = cache_report.print_cache, cache_report.plot_cache
    else:
        report = _bench_map_gpu(args) if on_gpu else _bench_map_cpu(args)
        printed = show.print_gpu if on_gpu else (lambda report: show.print_cpu(report["cpu"]))
        plotted = show.plot
    printed(report)
    if args.json:
        show.write_json(report, args.json)
    if args.plot:
        plotted(report, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
