"""``gpuhash bench join``: five join shapes J1-J5 (FULL), gpuhash beside its peers and the copy
ceiling.

Shapes: int32 keys, distinct build keys (the even numbers below twice the build size, shuffled),
probe keys drawn below twice the build size, so about half the probe rows match; the output is
the gather maps (int64 row pairs), as cuDF's hash join returns. gpuhash's join is timed with CUDA
events on a GPU and by wall clock on the CPU (where the shapes are scaled down 100x); peers run
on the host (DuckDB, pyarrow's Table.join, polars) or on the join's device (torch sort +
searchsorted, and a join built from gpuhash's HashMap), each when importable, and every one's
match count is checked against gpuhash's before its time counts. The copy ceiling is a
device-to-device copy of the bytes the join must at least touch (both key arrays and the
output pairs), measured in the same run.

Example:
    >>> [(s.name, s.build, s.probe) for s in shapes(quick=True, on_gpu=False)]
    [('J1', 1000, 10000), ('J2', 10000, 10000)]
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

import numpy as np
import torch

from gpuhash.bench.harness import Timing, time_cpu, time_gpu, time_peer, warm_up_gpu
from gpuhash.bench.progress import Step, quiet

FULL = {"J1": (100_000, 1_000_000), "J2": (1_000_000, 1_000_000),
        "J3": (1_000_000, 10_000_000), "J4": (10_000_000, 100_000_000),
        "J5": (100_000_000, 100_000_000)}
CPU_SCALE = 100  # the CPU runs each shape at 1/100 of its rows


@dataclass
class Shape:
    """One join: its name and the rows of each side."""

    name: str
    build: int
    probe: int


def shapes(*, quick: bool, on_gpu: bool) -> list[Shape]:
    """The shapes a run measures: J1-J2 with --quick, J1-J5 on a GPU, J1-J3 on a CPU."""
    names = ["J1", "J2"] if quick else (list(FULL) if on_gpu else ["J1", "J2", "J3"])
    scale = 1 if on_gpu else CPU_SCALE
    return [Shape(n, FULL[n][0] // scale, FULL[n][1] // scale) for n in names]


def make_inputs(shape: Shape, device: torch.device, seed: int = 12):
    """Build keys (distinct, shuffled even numbers) and probe keys (about half matching)."""
    generator = torch.Generator().manual_seed(seed)
    build = (torch.randperm(shape.build, generator=generator) * 2).to(torch.int32)
    probe = torch.randint(0, 2 * shape.build, (shape.probe,), generator=generator,
                          dtype=torch.int32)
    return build.to(device), probe.to(device)


def _timer(device: torch.device, runs: int):
    if device.type == "cuda":
        return lambda region: time_gpu(region, runs=runs)
    return lambda region: time_cpu(region, runs=runs)


def _gpuhash(build, probe):
    import gpuhash as gh

    return gh.join(probe, build)


def _sort_search(build, probe):
    order = torch.sort(build)
    position = torch.searchsorted(order.values, probe).clamp_(max=build.shape[0] - 1)
    hit = (order.values.index_select(0, position) == probe).nonzero().squeeze(1)
    return hit, order.indices.index_select(0, position.index_select(0, hit))


def _hashmap(build, probe):
    """A join built from a HashMap, as a user would without gh.join: build keys to row
    numbers (distinct keys: no duplicate pass), then a find per probe row."""
    import gpuhash as gh

    table = gh.HashMap(key_dtype=build.dtype, value_dtype=torch.int64,
                       capacity=build.shape[0], device=build.device, duplicates="any")
    table.insert(build, torch.arange(build.shape[0], device=build.device))
    rows, found = table.find(probe, default=-1)
    hit = found.nonzero().squeeze(1)
    return hit, rows.index_select(0, hit)


def _duckdb(build_np, probe_np):
    import duckdb
    import pandas

    con = duckdb.connect()
    con.register("b", pandas.DataFrame({"k": build_np, "rid": np.arange(len(build_np))}))
    con.register("p", pandas.DataFrame({"k": probe_np, "rid": np.arange(len(probe_np))}))

    def run():
        out = con.sql("SELECT p.rid, b.rid FROM p JOIN b ON p.k = b.k").fetchnumpy()
        return list(out.values())
    return run


def _pyarrow(build_np, probe_np):
    import pyarrow as pa

    b = pa.table({"k": build_np, "rb": np.arange(len(build_np))})
    p = pa.table({"k": probe_np, "rp": np.arange(len(probe_np))})
    return lambda: p.join(b, "k", join_type="inner").select(["rp", "rb"])


def _polars(build_np, probe_np):
    import polars

    b = polars.DataFrame({"k": build_np, "rb": np.arange(len(build_np))})
    p = polars.DataFrame({"k": probe_np, "rp": np.arange(len(probe_np))})
    return lambda: p.join(b, on="k", how="inner").select(["rp", "rb"])


def rows_of(result) -> int:
    """Output rows of a peer's or gpuhash's result: gather maps, an Arrow table, a polars
    frame, or a dict of columns."""
    if isinstance(result, (tuple, list)):
        return len(result[0])
    if isinstance(result, dict):
        return len(next(iter(result.values())))
    return result.num_rows if hasattr(result, "num_rows") else result.height


def time_host_peers(makers, inputs: tuple, rows: int, *, runs: int) -> dict:
    """ms of each CPU peer that imports, ``maker(*inputs)`` giving its call; each call's
    output rows are checked against ``rows`` before its time counts."""
    times = {}
    for name, maker in makers:
        try:
            call = maker(*inputs)
        except ImportError:
            continue
        assert rows_of(call()) == rows, f"{name} disagrees with gpuhash"
        times[name] = time_peer(call, runs=runs).median_ms
    return times


def _copy_ceiling(nbytes: int, device: torch.device, timer) -> Timing:
    source = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    return timer(lambda: target.copy_(source))


def run_shape(shape: Shape, device: torch.device, *, runs: int) -> dict:
    """One shape: gpuhash, each peer that imports, the copy ceiling; times in ms."""
    timer = _timer(device, runs)
    build, probe = make_inputs(shape, device)
    left, _ = _gpuhash(build, probe)
    matches = left.shape[0]
    ours = timer(lambda: _gpuhash(build, probe))
    import gpuhash as gh

    result = {"name": shape.name, "build": shape.build, "probe": shape.probe,
              "matches": matches, "gpuhash_ms": ours.median_ms, "gpuhash": ours.as_dict(),
              "strategy": gh.explain_join(probe, build).strategy, "peers": {}}
    for name, peer_join in (("torch sort + searchsorted", _sort_search),
                            ("gpuhash HashMap", _hashmap)):
        hit, _ = peer_join(build, probe)
        assert hit.shape[0] == matches, f"{name} disagrees with gpuhash"
        peer = timer(lambda: peer_join(build, probe))  # noqa: B023 (timed before the next)
        result["peers"][name] = {"ms": peer.median_ms, "where": str(device)}
    build_np, probe_np = build.cpu().numpy(), probe.cpu().numpy()
    makers = (("duckdb", _duckdb), ("pyarrow", _pyarrow), ("polars", _polars))
    for name, ms in time_host_peers(makers, (build_np, probe_np), matches, runs=runs).items():
        result["peers"][name] = {"ms": ms, "where": "cpu"}
    for peer in result["peers"].values():
        peer["ratio"] = round(peer["ms"] / ours.median_ms, 3)  # > 1: gpuhash is faster
    nbytes = 4 * (shape.build + shape.probe) + 16 * matches
    copy = _copy_ceiling(nbytes, device, timer)
    result["bytes"] = nbytes
    result["copy_gbps"] = nbytes / copy.median_ms / 1e6
    result["gpuhash_gbps"] = nbytes / ours.median_ms / 1e6
    result["fraction_of_copy"] = round(result["gpuhash_gbps"] / result["copy_gbps"], 4)
    return result


METHOD_GPU = ("CUDA events around gh.join (gather maps), the GPU kept busy 15 s before the "
              "first timing, warm-up + N runs, IQR outliers dropped, median; host peers by "
              "wall clock; copy ceiling: a device-to-device copy of 4 bytes per key of both "
              "sides + 16 per output pair")
METHOD_CPU = ("wall clock around gh.join on the CPU engine and around each peer, shapes at "
              "1/100 of the GPU shapes' rows, 1 warm-up + N runs, median; copy ceiling: a host "
              "copy of 4 bytes per key of both sides + 16 per output pair")


def steps(*, quick: bool, on_gpu: bool) -> int:
    """The steps ``run`` announces: the warm-up on a GPU, each shape, then (without quick)
    each variant and merge, and on a GPU the streamed join."""
    count = on_gpu + len(shapes(quick=quick, on_gpu=on_gpu))
    if not quick:
        from gpuhash.bench.join_merge import NAMES
        from gpuhash.bench.join_variants import VARIANTS

        count += len(VARIANTS) + len(NAMES if on_gpu else NAMES[:3]) + on_gpu
    return count


def run(*, quick: bool, runs: int | None, on_gpu: bool, header, step: Step = quiet) -> dict:
    """Every shape of the run, under the CLI's JSON header (device, date, commit); ``step``
    is told of each part as it starts."""
    if on_gpu:
        device = torch.device("cuda", torch.cuda.current_device())
        name = torch.cuda.get_device_name(device)
    else:
        device = torch.device("cpu")
        name = f"CPU ({platform.processor() or platform.machine()})"
    runs = runs or (3 if quick else 5)
    report = header(name, quick, runs, METHOD_GPU if on_gpu else METHOD_CPU, suite="join")
    report["scale"] = 1 if on_gpu else 1 / CPU_SCALE
    report["results"] = []
    if on_gpu:
        step("keeping the GPU busy before the first timing")
    warm_up_gpu(device, seconds=2.0 if quick else 15.0)
    for shape in shapes(quick=quick, on_gpu=on_gpu):
        step(f"{shape.name}: {shape.build:,} x {shape.probe:,} rows, gpuhash and its peers")
        report["results"].append(run_shape(shape, device, runs=runs))
        if on_gpu:
            torch.cuda.empty_cache()
    if not quick:
        from gpuhash.bench.join_variants import VARIANTS, run_variant

        scale = 1 if on_gpu else CPU_SCALE
        report["variants"] = []
        for v in VARIANTS:
            step(f"J3 variant {v.name}, how={v.how!r}")
            report["variants"].append(run_variant(v, device, _timer(device, runs), scale=scale,
                                                  runs=runs))
        from gpuhash.bench.join_merge import NAMES, run_merge

        names = NAMES if on_gpu else NAMES[:3]
        report["merge"] = []
        for n in names:
            step(f"{n} merge, two payload columns a side")
            report["merge"].append(run_merge(n, device, _timer(device, runs), scale=scale,
                                             runs=runs))
        if on_gpu:  # host keys 1.5x a 4 GiB budget, streamed: beside the host link
            from gpuhash.bench.join_stream import run_streamed

            torch.cuda.empty_cache()
            step("host keys streamed through a 4 GiB budget")
            report["streamed"] = run_streamed(device, budget_bytes=4 << 30)
    return report
