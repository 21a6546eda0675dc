"""The command line: ``gpuhash bench map|cache|join`` and ``gpuhash join`` (on the GPU when
there is one, else the CPU engine).

torch, numba and pyarrow are imported inside the commands that use them, so ``gpuhash --help``
and ``--version`` answer at once.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from gpuhash.bench.provenance import source_commit
from gpuhash.bench.suites import DEFAULT_RUNS, PLOTS, QUICK, SUITES

GPU_METHOD = ("CUDA events around each call (device time of all kernels it launches), "
              "the GPU kept busy 15 s before the first device timing, "
              "warm-up runs (at least 2 and 0.2 s) + N timed runs, IQR outliers dropped, "
              "median reported; results "
              "checked before timing; inserts start from a cleared table whose clear was "
              "written back from L2 when the table is larger than L2; G = 1e9")
CPU_METHOD = ("host wall clock (time.perf_counter) around each call, 1 warm-up run + N timed "
              "runs, IQR outliers dropped, median reported; results checked before timing; "
              "inserts start from a cleared table")
CACHE_METHOD = ("HierarchicalKV's: a fresh batch per call (60% present keys), host wall clock "
                "from the call to the end of a device sync, and CUDA events around the call "
                "in calls of their own; below full load a write's new keys erased after its "
                "timing; the GPU kept busy 15 s before the first timing, then 1 warm-up call "
                "+ N timed of each kind, median; B-KV/s = 2^30 keys/s")


def _header(device_name: str, quick: bool, runs: int, method: str, suite: str = "map") -> dict:
    import datetime
    import platform

    import torch

    return {
        "suite": suite, "device": device_name,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": source_commit(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "quick": quick, "runs": runs, "method": method,
    }


def _cpu_name() -> str:
    import platform

    return platform.processor() or platform.machine()


def _bench_map_gpu(args) -> dict:
    import torch

    from gpuhash.bench import ceilings, core_suite, map_suite, peers
    from gpuhash.bench.harness import time_host_calls, warm_up_gpu
    from gpuhash.bench.progress import Steps

    device = torch.device("cuda", torch.cuda.current_device())
    runs = args.runs or (5 if args.quick else 9)
    report = _header(torch.cuda.get_device_name(device), args.quick, runs, GPU_METHOD)
    configs = map_suite.plan(quick=args.quick)
    big = 8 * 2**20 if args.quick else 32 * 2**20
    with Steps("map", len(configs) + 6 + 2 * bool(args.layouts)) as step:
        # host overhead first, while the allocator is fresh (as in a program's first calls)
        step("host time of a 1K-key call")
        report["host_overhead_us"] = _host_overhead(device, time_host_calls)
        report["host_overhead_us"]["bare_launch"] = core_suite.bare_launch_us(device,
                                                                              time_host_calls)
        step("keeping the GPU busy before the first timing")
        warm_up_gpu(device, seconds=2.0 if args.quick else 15.0)  # after: it uses the allocator
        step("memory ceilings (random 8-byte gathers)")
        report["ceilings"] = ceilings.measure(device, quick=args.quick)
        results = []
        for config in configs:
            step(f"HashMap {config.kind}, {config.keys >> 20}M keys, load {config.load}")
            results.append(map_suite.run_config(config, device, report["ceilings"], runs=runs))
            torch.cuda.empty_cache()
        report["results"] = results
        step(f"torch sort + searchsorted, {big >> 20}M keys")
        report["peers"] = {"sort_searchsorted": peers.sort_searchsorted(big, device, runs=runs)}
        if args.layouts:
            step("fixed layouts, 1M keys")
            layouts = peers.seed_layouts(2**20, device, report["ceilings"]["C_l2"], runs=runs)
            step(f"fixed layouts, {big >> 20}M keys")
            report["peers"]["seed_layouts"] = layouts + peers.seed_layouts(
                big, device, report["ceilings"]["C_hbm"], runs=runs)
        step("insert_or_apply, MultiMap, an embedding table")
        report["core"] = core_suite.run(device, report["ceilings"], quick=args.quick, runs=runs)
        torch.cuda.empty_cache()
        step("the CPU engine against a Python dict")
        report["cpu"] = {"versus_dict": peers.cpu_versus_dict(2**18 if args.quick else 2**20)}
    return report


def _host_overhead(device, time_host_calls) -> dict:
    import torch

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
    import torch

    from gpuhash.bench import cpu_peers, cpu_suite, peers
    from gpuhash.bench.progress import Steps

    where = "--cpu" if torch.cuda.is_available() else "no CUDA"
    runs = args.runs or 5
    report = _header(f"CPU ({_cpu_name()}, {where})", args.quick, runs, CPU_METHOD)
    dict_keys = 2**16 if args.quick else 2**18
    with Steps("map", cpu_suite.STEPS + 1 + cpu_peers.STEPS) as step:
        configs = cpu_suite.run(quick=args.quick, runs=runs, step=step)
        step(f"the CPU engine against a Python dict, {dict_keys >> 10}K keys")
        # the dict comparison keeps its own default of 3 runs unless --runs is given
        versus_dict = peers.cpu_versus_dict(dict_keys, runs=args.runs or 3)
        report["cpu"] = {
            "configs": configs, "versus_dict": versus_dict,
            "peers": cpu_peers.run(2**18 if args.quick else 5_000_000, runs=args.runs or 3,
                                   step=step),
        }
    return report


def _bench_cache(args, on_gpu: bool) -> dict:
    import torch

    from gpuhash.bench import cache_suite
    from gpuhash.bench.progress import Steps

    if on_gpu:
        device = torch.device("cuda", torch.cuda.current_device())
        name = torch.cuda.get_device_name(device)
    else:
        device, name = torch.device("cpu"), f"CPU ({_cpu_name()})"
    runs = args.runs or (3 if args.quick else 5)
    report = _header(name, args.quick, runs, CACHE_METHOD, suite="cache")
    with Steps("cache", cache_suite.steps(device, quick=args.quick)) as step:
        report["cache"] = cache_suite.run(device, quick=args.quick, runs=runs, step=step)
    return report


MERGE_METHOD = ("host wall clock around the whole call (gpuhash: pyarrow tables in, a pyarrow "
                "table out, and polars frames in, a frame out; each peer beside gpuhash in "
                "its form: polars on its frames, 'polars from Arrow' and the others on the "
                "pyarrow tables), 1 warm-up + N timed runs, IQR outliers dropped, median; "
                "every answer checked against DuckDB's first")


def _bench_merge(args, on_gpu: bool) -> dict:
    from gpuhash.bench import merge_suite

    return _bench_task(args, on_gpu, merge_suite, MERGE_METHOD, "merge")


def _bench_task(args, on_gpu: bool, suite, method: str, name: str, **options) -> dict:
    """A suite of db-benchmark's questions (merge, groupby), its header and cores."""
    import torch

    from gpuhash.bench.progress import Steps

    device = torch.cuda.get_device_name(0) if on_gpu else f"CPU ({_cpu_name()})"
    report = _header(device, args.quick, args.runs or 3, method, suite=name)
    with Steps(name, suite.steps(quick=args.quick, on_gpu=on_gpu, chosen=args.sizes)) as step:
        report.update(suite.run(quick=args.quick, runs=args.runs, on_gpu=on_gpu,
                                peers=args.peers.split(","), sizes_=args.sizes, step=step,
                                **options))
    report["cores"] = os.cpu_count()
    return report


GROUPBY_METHOD = ("host wall clock around the whole call to a synchronised answer (host: a "
                  "pyarrow table in and out; gpu: a dict of CUDA tensors in and out, string "
                  "keys as codes), 1 warm-up + N timed runs (at least 25 for a call under "
                  "20 ms, ours and peers alike), IQR outliers dropped, median; every answer "
                  "checked against DuckDB's first")


def _bench_groupby(args, on_gpu: bool) -> dict:
    from gpuhash.bench import groupby_suite

    return _bench_task(args, on_gpu, groupby_suite, GROUPBY_METHOD, "groupby",
                       forms=args.forms.split(","), nulls=args.nulls)


def _bench_join(args, on_gpu: bool) -> dict:
    from gpuhash.bench import join_suite
    from gpuhash.bench.progress import Steps

    with Steps("join", join_suite.steps(quick=args.quick, on_gpu=on_gpu)) as step:
        return join_suite.run(quick=args.quick, runs=args.runs, on_gpu=on_gpu, header=_header,
                              step=step)




def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(float(part)) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not numbers of rows: {text!r}") from None
    if not sizes or min(sizes) < 1000:
        raise argparse.ArgumentTypeError(f"sizes must be at least 1000 rows: {text!r}")
    return sizes


class _Paragraphs(argparse.HelpFormatter):
    """Fills each paragraph of a description to the terminal's width, keeping the blank lines
    between them (argparse's own formatter runs paragraphs together)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(super(_Paragraphs, self)._fill_text(part, width, indent)
                           for part in text.split("\n\n"))


def _parser() -> argparse.ArgumentParser:
    from gpuhash import __version__

    parser = argparse.ArgumentParser(prog="gpuhash", description="GPU hash tables for Python")
    parser.add_argument("--version", action="version", version=f"gpuhash {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = commands.add_parser(
        "bench", help="run a benchmark suite",
        description="Run a benchmark suite and print its figures; on a CPU-only machine (or "
                    "with --cpu) the CPU engine's. `gpuhash bench SUITE --help` says what a "
                    "suite measures and lists its options.")
    suites = bench.add_subparsers(dest="suite", metavar="SUITE", required=True)
    for name, (summary, description) in SUITES.items():
        suite = suites.add_parser(name, help=summary, description=description,
                                  formatter_class=_Paragraphs)
        suite.set_defaults(refuse=suite.error)
        suite.add_argument("--quick", action="store_true", help=QUICK[name])
        suite.add_argument("--runs", type=_positive, metavar="N",
                           help=f"runs per figure (default: {DEFAULT_RUNS[name]})")
        suite.add_argument("--json", metavar="PATH", help="write every figure as JSON")
        suite.add_argument("--plot", metavar="PATH",
                           help=f"a plot (matplotlib): {PLOTS[name]}")
        if name in ("merge", "groupby"):
            peers = "duckdb,polars,pyarrow" if name == "merge" else "duckdb,polars,torch"
            suite.add_argument("--peers", metavar="NAMES", default=peers,
                               help=f"peers to time, by comma (default: {peers}; answers "
                                    f"are checked against DuckDB's when it is named)")
            suite.add_argument("--sizes", metavar="N,N", type=_sizes,
                               help="N of the x table, by comma (default: 1e7,1e8 on a GPU "
                                    "machine, 1e6,1e7 on a CPU)")
        if name == "groupby":
            suite.add_argument("--forms", metavar="NAMES", default="host,gpu",
                               help="gpuhash's inputs, by comma: host (pyarrow tables), gpu "
                                    "(CUDA tensors; GPU only) (default: host,gpu)")
            suite.add_argument("--nulls", type=float, default=0.0, metavar="SHARE",
                               help="the share of every column made null (db-benchmark's NA "
                                    "variant: 0.05; host form only) (default: 0)")
        if name == "map":
            suite.add_argument("--layouts", action="store_true",
                               help="add three fixed-layout tables as peers (GPU only)")
        suite.add_argument("--cpu", action="store_true",
                           help="the CPU engine even with a GPU")
    join = commands.add_parser(
        "join", help="join two Parquet files into a third",
        description="Join LEFT and RIGHT (Parquet) on key columns into OUTPUT. RIGHT is read "
                    "whole and prepared as a hash table; LEFT is streamed one row group at a "
                    "time, with a progress bar. Runs on the GPU when there is one, else on "
                    "the CPU engine. Row order is unspecified.")
    join.set_defaults(refuse=join.error)
    join.add_argument("left", help="left Parquet file (streamed)")
    join.add_argument("right", help="right Parquet file (the build side, read whole)")
    join.add_argument("--on", required=True, action="append", metavar="COLUMN",
                      help="key column; repeat it or separate names by commas")
    join.add_argument("--how", default="inner",
                      choices=["inner", "left", "right", "full", "semi", "anti"],
                      help="which rows to keep (default: inner)")
    join.add_argument("-o", "--output", required=True, metavar="PATH",
                      help="Parquet file to write")
    join.add_argument("--explain", action="store_true", help="print the join's plan")
    join.add_argument("--cpu", action="store_true", help="the CPU engine even with a GPU")
    group = commands.add_parser(
        "groupby", help="group a Parquet file into another",
        description="Group the rows of INPUT (Parquet, read whole) by key columns, aggregate "
                    "value columns, and write one row a group to OUTPUT. Runs on the GPU when "
                    "there is one, else on the CPU engine.")
    group.set_defaults(refuse=group.error)
    group.add_argument("input", help="Parquet file to group")
    group.add_argument("--by", required=True, action="append", metavar="COLUMN",
                       help="key column; repeat it or separate names by commas")
    group.add_argument("--agg", required=True, action="append", metavar="COLUMN:AGG",
                       help="an aggregation, e.g. v1:sum, v3:mean, v3:quantile=0.9, "
                            "v1:corr=v2, v3:top_k=2; repeat it")
    group.add_argument("-o", "--output", required=True, metavar="PATH",
                       help="Parquet file to write")
    group.add_argument("--sort", action="store_true", help="groups in the keys' order")
    group.add_argument("--dropna", action="store_true", help="drop rows whose key is null")
    group.add_argument("--chunk-rows", type=_positive, metavar="N",
                       help="read and group N rows at a time, merging the partial results "
                            "(for files larger than memory; not for median, quantile, "
                            "nunique, corr)")
    group.add_argument("--explain", action="store_true", help="print the phases and times")
    group.add_argument("--cpu", action="store_true", help="the CPU engine even with a GPU")
    return parser


def _group_file(args, on_gpu: bool) -> int:
    from rich.console import Console
    from rich.markup import escape

    from gpuhash.groupby.cli import run_groupby

    by = [name.strip() for given in args.by for name in given.split(",") if name.strip()]
    try:
        written = run_groupby(args.input, by=by, aggs=args.agg, output=args.output,
                              device="cuda" if on_gpu else "cpu", sort=args.sort,
                              dropna=args.dropna, explain=args.explain,
                              chunk_rows=args.chunk_rows, progress=sys.stderr.isatty())
    except (ValueError, TypeError, KeyError, OSError) as error:  # the user's file or options
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"gpuhash groupby: error: {message}", file=sys.stderr)
        return 2
    Console(stderr=True).print(f"wrote {written} groups to {escape(args.output)}")
    return 0


def _join_files(args, on_gpu: bool) -> int:
    from rich.console import Console
    from rich.markup import escape

    from gpuhash.join.cli import run_join

    on = [name.strip() for given in args.on for name in given.split(",") if name.strip()]
    try:
        written = run_join(args.left, args.right, on=on, how=args.how, output=args.output,
                           device="cuda" if on_gpu else "cpu", explain=args.explain,
                           progress=sys.stderr.isatty())
    except (ValueError, TypeError, OSError) as error:  # the user's files or options
        print(f"gpuhash join: error: {error}", file=sys.stderr)
        return 2
    Console(stderr=True).print(f"wrote {written} rows to {escape(args.output)}")
    return 0


def _bench(args) -> int:
    import torch

    on_gpu = torch.cuda.is_available() and not args.cpu
    layouts = getattr(args, "layouts", False)
    if not on_gpu:
        why = "--cpu was given" if args.cpu else "no CUDA device was found"
        plot = args.plot and args.suite not in ("join", "merge", "groupby")  # any run's
        for option, given in (("--plot", plot), ("--layouts", layouts)):
            if given:
                args.refuse(f"{option} needs a GPU ({why}; the CPU benchmark has no "
                            f"{'plot' if option == '--plot' else 'fixed-layout kernels'})")
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # before a long run
        args.refuse("--plot needs matplotlib: pip install 'gpuhash[plot]'")
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if path and not Path(path).resolve().parent.is_dir():  # before a long run, too
            args.refuse(f"{option} {path}: its directory does not exist")

    from gpuhash.bench import report as show

    if args.suite == "groupby":
        from gpuhash.bench import groupby_report

        report = _bench_groupby(args, on_gpu)
        printed, plotted = groupby_report.print_report, groupby_report.plot_report
    elif args.suite == "merge":
        from gpuhash.bench import merge_report

        report = _bench_merge(args, on_gpu)
        printed, plotted = merge_report.print_report, merge_report.plot_report
    elif args.suite == "join":
        from gpuhash.bench import join_report

        report = _bench_join(args, on_gpu)
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


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the command's own parser, whose usage lists what it takes
        getattr(args, "refuse", parser.error)(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 0
    if args.command in ("join", "groupby"):
        import torch

        on_gpu = torch.cuda.is_available() and not args.cpu
        return (_join_files if args.command == "join" else _group_file)(args, on_gpu)
    return _bench(args)


if __name__ == "__main__":
    sys.exit(main())
