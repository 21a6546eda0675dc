"""Showing the cache benchmark: a table per value width with HierarchicalKV's figures beside
ours, the bucket shapes' trade-off, and a plot of throughput against load."""

from __future__ import annotations

import math
from pathlib import Path

from rich.markup import escape

from gpuhash.bench.cache_suite import APIS, LOADS
from gpuhash.bench.report import say, show_table


def print_cache(report: dict) -> None:
    say(f"[bold]{escape(report['device'])}[/]  CacheMap on HierarchicalKV's workload "
        f"(B-KV/s = 2^30 keys/s; wall clock to sync, events in brackets)")
    hkv = report["cache"]["hkv_h100_dim8"]
    hybrid = report["cache"].get("hybrid")
    for work in report["cache"]["workloads"] + ([hybrid] if hybrid else []):
        where = ("" if work.get("max_hbm_bytes") is None
                 else f", values past {work['max_hbm_bytes'] / 2**30:.1f} GiB in host memory")
        columns = ["API"]
        for load in LOADS:
            columns += [f"load {load}", *(["HKV"] if work["dim"] == 8 else [])]
        rows = []
        for api in APIS:
            cells = [api]
            for i, load in enumerate(LOADS):
                f = work["loads"][str(load)][api]
                events = f["bkv_per_s_events"]  # NaN on a CPU, which has no CUDA events
                cells.append(f"{f['bkv_per_s']:.3g}" + ("" if math.isnan(events)
                                                          else f" ({events:.3g})"))
                if work["dim"] == 8:
                    cells.append(f"{hkv[api][i]:.2f}")
            rows.append(cells)
        show_table(f"dim {work['dim']}, capacity {work['capacity']:,}, {work['batch']:,} keys "
                   f"per call, {work['bucket_slots']}-slot buckets{where}; "
                   f"{work['bytes_per_slot']:.0f} B a slot, of which "
                   f"{work['metadata_bytes_per_slot']:.0f} B metadata (HKV 17)", columns, rows)
    if hybrid:
        rows = []
        for load in LOADS:
            g = hybrid["loads"][str(load)]["host_gather"]
            rows.append([str(load), f"{g['host_rows']:,}", f"{g['host_gather_gb_per_s']:.1f}",
                         f"{g['ceiling_gather_gb_per_s']:.1f}", f"{g['of_gather_ceiling']:.2f}",
                         f"{g['link_gb_per_s']:.1f}", f"{g['of_link']:.2f}"])
        show_table("values[index] of the host rows of present keys' slots, beside the row-gather "
                   "ceiling and a bulk copy of as many bytes (GB/s)",
                   ["load", "rows from host", "values[index]", "gather ceiling", "of ceiling",
                    "bulk copy", "of copy"], rows)
    rows = []
    for s in report["cache"]["bucket_shapes"]:
        first = s["first_eviction_load"]
        rows.append([str(s["bucket_slots"]), f"{s['kept_of_top']:.4f}",
                     "-" if first is None else f"{first:.4f}",
                     *(f"{s['find_bkv_per_s'][str(x)]:.3g}" for x in LOADS)])
    show_table("bucket shape: eviction quality (5x capacity, random scores) and find speed, "
               "B-KV/s (dim 8; events on a GPU)",
               ["slots", "kept of top", "1st eviction at", *(f"find {x}" for x in LOADS)], rows)


def plot_cache(report: dict, path: str | Path) -> None:
    """B-KV/s against load per API for dim 8, HierarchicalKV's figures dashed beside ours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    work = next(w for w in report["cache"]["workloads"] if w["dim"] == 8)
    hkv = report["cache"]["hkv_h100_dim8"]
    figure, axes = plt.subplots(1, len(APIS), figsize=(3.2 * len(APIS), 3.4), sharey=True)
    for ax, api in zip(axes, APIS):
        ax.plot(LOADS, [work["loads"][str(x)][api]["bkv_per_s"] for x in LOADS], "-o",
                label="gpuhash")
        ax.plot(LOADS, hkv[api], "--s", label="HKV (its figures)")
        ax.set_title(api, fontsize=9)
        ax.set_xlabel("load")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("B-KV/s (wall clock)")
    axes[0].legend(fontsize=7)
    figure.suptitle(f"CacheMap, dim 8, on {report['device']}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    say(f"wrote {escape(str(path))}")
