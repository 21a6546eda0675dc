"""Showing a ``gpuhash bench join`` run: rich tables on the terminal, and a plot of each join's
time beside its peers' (log scale), with the issue's targets where the run is the GPU's.

Example:
    >>> report = {"device": "cpu", "scale": 0.01, "results": [{"name": "J1", "build": 1000,
    ...     "probe": 10000, "gpuhash_ms": 1.5, "fraction_of_copy": 0.01,
    ...     "peers": {"duckdb": {"ms": 3.0, "ratio": 2.0}}}]}
    >>> [name for name, _ in series(report["results"])]
    ['gpuhash', 'duckdb']
"""

from __future__ import annotations

from pathlib import Path

# issue 12's targets for the gather-map joins on the H100, ms (full-size shapes only)
TARGETS_MS = {"J1": 0.15, "J2": 0.12, "J3": 0.30, "J4": 3.0, "J5": 20.0}


def series(rows: list[dict]) -> list[tuple[str, list[float | None]]]:
    """(name, ms per row) for gpuhash and each peer any row has, None where a row lacks it."""
    peers = sorted({p for r in rows for p in r["peers"]})
    return [("gpuhash", [r["gpuhash_ms"] for r in rows])] + [
        (p, [r["peers"][p]["ms"] if p in r["peers"] else None for r in rows]) for p in peers]


def print_report(report: dict) -> None:
    """A table of the run: gpuhash's time, each peer's and its ratio, the copy fraction."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"gpuhash join on {report['device']} (ratio > 1: gpuhash faster)")
    peers = sorted({p for r in report["results"] for p in r["peers"]})
    # the targets are for the full shapes on a GPU
    targets = report.get("scale", 1) == 1 and not str(report.get("device", "")).startswith("CPU")
    for column in ["join", "build x probe", "gpuhash ms", *(["target ms"] if targets else []),
                   *peers, "GB/s (copy GB/s)", "of copy"]:
        table.add_column(column, justify="right")
    for r in report["results"]:
        cells = [f"{r['peers'][p]['ms']:.2f} ({r['peers'][p]['ratio']:.2f}x)"
                 if p in r["peers"] else "-" for p in peers]
        target = [f"{TARGETS_MS.get(r['name'], float('nan')):g}"] if targets else []
        speed = (f"{r['gpuhash_gbps']:.3g} ({r['copy_gbps']:.3g})" if "copy_gbps" in r
                 else "-")
        table.add_row(r["name"], f"{r['build']:,} x {r['probe']:,}", f"{r['gpuhash_ms']:.3f}",
                      *target, *cells, speed, f"{r['fraction_of_copy']:.3f}")
    Console().print(table)
    if report.get("variants"):
        table = Table(title="variants of J3 (ratio > 1: gpuhash faster)")
        for column in ["variant", "how", "output rows", "gpuhash ms", "duckdb"]:
            table.add_column(column, justify="right")
        for v in report["variants"]:
            duck = v["peers"].get("duckdb")
            table.add_row(v["name"], v["how"], f"{v['output_rows']:,}",
                          f"{v['gpuhash_ms']:.3f}",
                          f"{duck['ms']:.2f} ({duck['ratio']:.2f}x)" if duck else "-")
        Console().print(table)
    if report.get("streamed"):
        streamed = report["streamed"]
        table = Table(title=f"host keys streamed through a {streamed['budget_bytes'] >> 30} "
                            f"GiB budget ({streamed['probe_rows']:,} x "
                            f"{streamed['build_rows']:,} rows)")
        for column in ["run", "seconds", "first call", "GB/s", "of link ceiling"]:
            table.add_column(column, justify="right")
        for name, r in streamed["runs"].items():
            table.add_row(name, f"{r['seconds']:.3f}", f"{r['first_call_seconds']:.3f}",
                          f"{r['gb_per_s']:.1f}", f"{r['of_link_ceiling']:.2f}")
        Console().print(table)
    if report.get("merge"):
        table = Table(title="materialized merge, two payload columns a side (ratio > 1: "
                            "gpuhash faster)")
        peers = sorted({p for m in report["merge"] for p in m["peers"]})
        for column in ["join", "output rows", "gpuhash ms", *peers]:
            table.add_column(column, justify="right")
        for m in report["merge"]:
            cells = [f"{m['peers'][p]['ms']:.2f} ({m['peers'][p]['ratio']:.2f}x)"
                     if p in m["peers"] else "-" for p in peers]
            table.add_row(m["name"], f"{m['output_rows']:,}", f"{m['gpuhash_ms']:.3f}", *cells)
        Console().print(table)


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
    log scale; on a full-size run the issue's targets are drawn as black ticks."""
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
