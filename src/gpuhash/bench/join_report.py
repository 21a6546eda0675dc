"""Showing a ``gpuhash bench join`` run: its tables (report.show_table), and a plot of each join's
time beside its peers' (log scale), with the targets of the full-size shapes where the run is
the GPU's.

Example:
    >>> report = {"device": "cpu", "scale": 0.01, "results": [{"name": "J1", "build": 1000,
    ...     "probe": 10000, "gpuhash_ms": 1.5, "fraction_of_copy": 0.01,
    ...     "peers": {"duckdb": {"ms": 3.0, "ratio": 2.0}}}]}
    >>> [name for name, _ in series(report["results"])]
    ['gpuhash', 'duckdb']
"""

from __future__ import annotations

from pathlib import Path

# the targets set for the gather-map joins on the H100, ms (full-size shapes only)
TARGETS_MS = {"J1": 0.15, "J2": 0.12, "J3": 0.30, "J4": 3.0, "J5": 20.0}


def series(rows: list[dict]) -> list[tuple[str, list[float | None]]]:
    """(name, ms per row) for gpuhash and each peer any row has, None where a row lacks it."""
    peers = sorted({p for r in rows for p in r["peers"]})
    return [("gpuhash", [r["gpuhash_ms"] for r in rows])] + [
        (p, [r["peers"][p]["ms"] if p in r["peers"] else None for r in rows]) for p in peers]


def _figure(value: float) -> str:
    """Three significant figures, but whole numbers from 100 up (no exponents)."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _rows(count: int) -> str:
    for size, unit in ((10**9, "G"), (10**6, "M"), (10**3, "K")):
        if count >= size:
            return f"{count / size:g}{unit}"
    return str(count)


def _versus(peer: dict) -> str:
    return f"{peer['ms']:.2f} ({_figure(peer['ratio'])}x)"


def print_report(report: dict) -> None:
    """The run's tables: per join shape (a column each), gpuhash's time, each peer's with its
    ratio, the rate against the copy ceiling; then the variants, the streamed joins and the
    merges a table each."""
    from gpuhash.bench.report import show_table

    results = report["results"]
    peers = sorted({p for r in results for p in r["peers"]})
    # the targets are for the full shapes on a GPU
    targets = report.get("scale", 1) == 1 and not str(report.get("device", "")).startswith("CPU")
    rows = [["build x probe rows", *(f"{_rows(r['build'])} x {_rows(r['probe'])}"
                                     for r in results)],
            ["gpuhash", *(f"{r['gpuhash_ms']:.3f}" for r in results)]]
    if targets:
        rows.append(["target", *(f"{TARGETS_MS[r['name']]:g}" if r["name"] in TARGETS_MS
                                 else "-" for r in results)])
    rows += [[p, *(_versus(r["peers"][p]) if p in r["peers"] else "-" for r in results)]
             for p in peers]
    rows.append(["gpuhash GB/s (copy GB/s)",
                 *(f"{_figure(r['gpuhash_gbps'])} ({_figure(r['copy_gbps'])})"
                   if "copy_gbps" in r else "-" for r in results)])
    rows.append(["of copy", *(f"{r['fraction_of_copy']:.3f}" for r in results)])
    show_table(f"gpuhash join on {report['device']}, ms (a peer's ratio > 1: gpuhash faster)",
               ["", *(r["name"] for r in results)], rows)
    if report.get("variants"):
        show_table("variants of J3, ms (ratio > 1: gpuhash faster)",
                   ["variant", "how", "output rows", "gpuhash", "duckdb"],
                   [[v["name"], v["how"], f"{v['output_rows']:,}", f"{v['gpuhash_ms']:.3f}",
                     _versus(v["peers"]["duckdb"]) if "duckdb" in v["peers"] else "-"]
                    for v in report["variants"]])
    if report.get("streamed"):
        streamed = report["streamed"]
        show_table(f"host keys streamed through a {streamed['budget_bytes'] >> 30} GiB budget "
                   f"({streamed['probe_rows']:,} x {streamed['build_rows']:,} rows)",
                   ["run", "seconds", "first call", "GB/s", "of link ceiling"],
                   [[name, f"{r['seconds']:.3f}", f"{r['first_call_seconds']:.3f}",
                     f"{r['gb_per_s']:.1f}", f"{r['of_link_ceiling']:.2f}"]
                    for name, r in streamed["runs"].items()])
    if report.get("merge"):
        peers = sorted({p for m in report["merge"] for p in m["peers"]})
        show_table("materialized merge, two payload columns a side, ms (ratio > 1: gpuhash "
                   "faster)", ["join", "output rows", "gpuhash", *peers],
                   [[m["name"], f"{m['output_rows']:,}", f"{m['gpuhash_ms']:.3f}",
                     *(_versus(m["peers"][p]) if p in m["peers"] else "-" for p in peers)]
                    for m in report["merge"]])


def _bars(ax, rows: list[dict], labels: list[str], title: str) -> list[float]:
    """Grouped bars of ms, one group a row, one bar a series, on a log axis; returns where
    gpuhash's bars stand."""
    groups = series(rows)
    width = 0.8 / len(groups)
    ours = [i - (len(groups) - 1) / 2 * width for i in range(len(rows))]
    for k, (name, values) in enumerate(groups):
        xs = [i + (k - (len(groups) - 1) / 2) * width for i in range(len(rows))]
        present = [(x, v) for x, v in zip(xs, values) if v is not None]
        ax.bar([x for x, _ in present], [v for _, v in present], width, label=name)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return ours


def plot_join(report: dict, path: str | Path) -> None:
    """Each gather-map join, the J3 variants and the merges: gpuhash beside its peers, ms on a
    log scale; on a full-size run the targets are drawn as black ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("results", "gather maps"), ("variants", "variants of J3"),
              ("merge", "merge, two payload columns a side")]
    panels = [(key, title) for key, title in panels if report.get(key)]
    figure, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 4.0), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        rows = report[key]
        labels = [r["name"] if key != "variants" else f"{r['name']}\n{r['how']}" for r in rows]
        ours = _bars(ax, rows, labels, title)
        if key == "results" and report.get("scale") == 1:
            targets = [(ours[i], TARGETS_MS[r["name"]]) for i, r in enumerate(rows)
                       if r["name"] in TARGETS_MS]
            ax.scatter([i for i, _ in targets], [t for _, t in targets], marker="_", s=150,
                       color="black", zorder=3, label="target")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("ms (lower is better)")
    figure.suptitle(f"gpuhash join on {report['device']} (commit {report.get('commit', '?')[:7]})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
