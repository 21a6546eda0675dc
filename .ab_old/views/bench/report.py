"""Showing benchmark results: a rich table on the terminal, JSON on disk, an optional plot."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console()


def _size(n: int) -> str:
    return f"{n // 2**20}M" if n >= 2**20 else f"{n // 2**10}K"


def print_gpu(report: dict) -> None:
    ceil = report["ceilings"]
    console.print(f"[bold]{report['device']}[/]  ceilings: C_hbm {ceil['C_hbm']:.1f} G/s, "
                  f"C_l2 {ceil['C_l2']:.1f} G/s (random 8-byte gathers, this run)")
    table = Table(title="HashMap (G keys/s; ratio to the ceiling of the table's residency)")
    for column in ("type", "keys", "load", "res", "insert", "insert(last)", "find hit",
                   "find miss", "find_index", "B/entry", "hit bkts", "miss@1st"):
        table.add_column(column, justify="right")
    for r in report["results"]:
        def cell(name, r=r):
            f = r[name]
            return f"{f['g_per_s']:.2f} ({f['ratio']:.2f})"
        table.add_row(r["kind"], _size(r["keys"]), f"{r['load']:.3f}", r["resident"],
                      f"{r['insert']['g_per_s']:.2f}",
                      f"{r['insert_dict_semantics']['g_per_s']:.2f}",
                      cell("find_hit"), cell("find_miss"), cell("find_index_hit"),
                      f"{r['bytes_per_entry']:.1f}", f"{r['probes']['hit_buckets_mean']:.3f}",
                      f"{r['probes']['misses_stopping_at_first_bucket']:.3f}")
    console.print(table)
    peers = report.get("peers", {})
    if "sort_searchsorted" in peers:
        p = peers["sort_searchsorted"]
        console.print(f"torch sort + searchsorted, {_size(p['keys'])} keys: build "
                      f"{p['build_g_per_s']:.2f} G/s, lookup {p['lookup_g_per_s']:.2f} G/s")
    for p in peers.get("seed_layouts", []):
        console.print(f"seed 000 {p['version']}, {_size(p['keys'])} keys, load 0.5: insert "
                      f"{p['insert_g_per_s']:.2f} G/s, find {p['find_g_per_s']:.2f} G/s "
                      f"({p['find_ratio']:.2f}), silently dropped {p['silently_dropped']}")
    if "host_overhead_us" in report:
        h = report["host_overhead_us"]
        console.print(f"host overhead per call, 1K keys: find {h['find_1k']:.1f} us, "
                      f"contains {h['contains_1k']:.1f} us, insert {h['insert_1k']:.1f} us")
        if "bare_launch" in h:
            console.print(f"bare cuda.core launch {h['bare_launch']:.1f} us: find / launch "
                          f"{h['find_1k'] / h['bare_launch']:.2f}x")
    core = report.get("core")
    if core:
        a, m = core["insert_or_apply_add"], core["multimap"]
        console.print(f"insert_or_apply add, {_size(a['rows'])} rows into {_size(a['keys'])} "
                      f"keys: {a['apply_g_per_s']:.2f} G rows/s against atomicAdd to random "
                      f"words of the same footprint {a['atomic_add_g_per_s']:.2f} "
                      f"({a['ratio']:.2f})")
        console.print(f"MultiMap, {_size(m['keys'])} keys x {m['copies']}, {_size(m['probes'])} "
                      f"probes: count {m['count_g_probes_per_s']:.2f} G/s "
                      f"({m['count_ratio']:.2f} C_hbm), find_all "
                      f"{m['find_all_g_matches_per_s']:.2f} G matches/s "
                      f"({m['find_all_ratio']:.2f} C_hbm)")
        e = core["embedding_table"]
        console.print(f"u64 -> f32x8, {_size(e['capacity'])} capacity, {_size(e['batch'])} keys "
                      f"a call, load 0.99 against 0.5: find {e['0.99']['find_g_per_s']:.2f} / "
                      f"{e['0.5']['find_g_per_s']:.2f} G/s ({e['find_0.99_over_0.5']:.2f}x), "
                      f"assign {e['0.99']['assign_g_per_s']:.2f} / "
                      f"{e['0.5']['assign_g_per_s']:.2f} ({e['assign_0.99_over_0.5']:.2f}x)")
    print_cpu(report["cpu"])


def print_cpu(cpu: dict) -> None:
    if "configs" in cpu:
        table = Table(title="CPU engine (host wall clock)")
        for column in ("type", "keys", "load", "insert M/s", "find hit M/s", "find miss M/s"):
            table.add_column(column, justify="right")
        for r in cpu["configs"]:
            table.add_row(r["kind"], _size(r["keys"]), f"{r['load']:.2f}",
                          f"{r['insert_m_per_s']:.1f}", f"{r['find_hit_m_per_s']:.1f}",
                          f"{r['find_miss_m_per_s']:.1f}")
        console.print(table)
    if "peers" in cpu:
        _print_peers(cpu["peers"])
    d = cpu["versus_dict"]
    console.print(f"CPU engine vs Python dict, {_size(d['keys'])} int64 keys: insert "
                  f"{d['engine_insert_ms']:.0f} ms vs dict build {d['dict_build_ms']:.0f} ms "
                  f"({d['insert_speedup']:.2f}x); find {d['engine_find_ms']:.0f} ms vs dict "
                  f"{d['dict_find_ms']:.0f} ms ({d['find_speedup']:.2f}x)")


def _print_peers(p: dict) -> None:
    table = Table(title=f"{p['keys']:,} int64 keys -> float32, {p['cores']} cores: the CPU "
                        f"engine against each peer (ms; engine speedup)")
    for column in ("peer", "build", "find"):
        table.add_column(column, justify="right")
    for name, f in p["peers"].items():
        build = "-" if f["build_ms"] is None else (f"{f['build_ms']:.0f} "
                                                   f"({f['engine_build_speedup']:.2f}x)")
        table.add_row(name, build, f"{f['find_ms']:.0f} ({f['engine_find_speedup']:.2f}x)")
    console.print(table)
    r = p["rows_u64_f32x8"]
    console.print(f"random-gather ceiling, {p['keys']:,} float32: {p['gather_ms']:.0f} ms; "
                  f"u64 -> f32x8 at load {r['load']:.2f}, {r['keys']:,} keys: find "
                  f"{r['find_ms']:.0f} ms against a gather of as many 32-byte rows "
                  f"{r['gather_ms']:.0f} ms ({r['ratio']:.2f})")


def write_json(report: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report, indent=1))
    console.print(f"wrote {path}")


def plot(report: dict, path: str | Path) -> None:
    """Throughput against load factor, one panel per table type (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        console.print("[yellow]--plot needs matplotlib: pip install 'gpuhash[plot]'[/]")
        return
    results = report["results"]
    kinds = sorted({r["kind"] for r in results})
    figure, axes = plt.subplots(1, len(kinds), figsize=(4.5 * len(kinds), 4), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        for size in sorted({r["keys"] for r in results}):
            rows = sorted((r for r in results if r["kind"] == kind and r["keys"] == size),
                          key=lambda r: r["load"])
            loads = [r["load"] for r in rows]
            for field, style in (("find_hit", "-o"), ("find_miss", "--s"), ("insert", ":^")):
                ax.plot(loads, [r[field]["g_per_s"] for r in rows], style,
                        label=f"{field} {_size(size)}")
        ax.set_title(kind)
        ax.set_xlabel("load factor")
        ax.set_ylabel("G keys/s")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    figure.suptitle(f"gpuhash HashMap on {report['device']}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    console.print(f"wrote {path}")
