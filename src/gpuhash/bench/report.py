"""Showing benchmark results: tables on stdout, JSON on disk, an optional plot.

On a terminal the tables are rich tables whose cells wrap to its width; written to a file or
a pipe they are markdown pipe tables, each cell whole, so a log keeps every figure.

Example:
    >>> show_table("two rows", ["name", "ms"], [["a", "1.5"], ["b|c", "2.25"]])
    <BLANKLINE>
    two rows
    <BLANKLINE>
    | name | ms   |
    | :--- | ---: |
    | a    |  1.5 |
    | b\\|c | 2.25 |
    <BLANKLINE>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.text import Text

console = Console()


def on_terminal() -> bool:
    """Whether stdout is a terminal (else a file or a pipe: plain text, nothing cut)."""
    return sys.stdout.isatty()


def say(markup: str) -> None:
    """A line of rich markup: styled on a terminal, plain text (one line) elsewhere."""
    if on_terminal():
        console.print(markup)
    else:
        print(Text.from_markup(markup).plain)


def show_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A table whose first column names the row and whose other columns are right-aligned:
    rich on a terminal (cells wrap or fold to its width, none is cut short), else markdown."""
    if on_terminal():
        from rich import box
        from rich.table import Table

        table = Table(title=Text(title), box=box.SIMPLE_HEAD, pad_edge=False)
        widths = _widths(columns, rows, console.width - 3 * len(columns))
        for i, column in enumerate(columns):
            table.add_column(Text(column), justify="left" if i == 0 else "right",
                             overflow="fold", no_wrap=False,
                             width=None if widths is None else widths[i])
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)
        return
    cells = [[cell.replace("|", "\\|") for cell in row] for row in [columns, *rows]]
    widths = [max(3, *(len(row[i]) for row in cells)) for i in range(len(columns))]

    def line(row):
        return "| " + " | ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                                 for i, (cell, width) in enumerate(zip(row, widths))) + " |"
    rule = ["-" * (w - 1) + ":" if i else ":" + "-" * (w - 1) for i, w in enumerate(widths)]
    header = "| " + " | ".join(cell.ljust(width) for cell, width in zip(cells[0], widths)) + " |"
    print("\n" + title + "\n")
    # a blank line ends the table: a line of text right below would read as one more row
    print("\n".join([header, "| " + " | ".join(rule) + " |", *map(line, cells[1:])]) + "\n")


def _widths(columns: list[str], rows: list[list[str]], room: int) -> list[int] | None:
    """Widths of the columns' text when the table is wider than ``room`` (the screen less 3
    columns a column for padding and rules): each column gets its longest word, so that a
    cell breaks between words (a figure and its ratio) and no word folds, and the room left
    goes to the columns in proportion to how much more they would take. None where rich's own
    layout serves: the table fits, or not even its longest words do (then cells fold)."""
    texts = [[column, *(row[i] for row in rows)] for i, column in enumerate(columns)]
    natural = [max(len(text) for text in column) for column in texts]
    least = [max((len(word) for text in column for word in text.split()), default=1)
             for column in texts]
    if sum(natural) <= room or sum(least) > room:
        return None
    spare, wants = room - sum(least), [n - m for n, m in zip(natural, least)]
    return [m + spare * want // sum(wants) for m, want in zip(least, wants)]


def _size(n: int) -> str:
    return f"{n // 2**20}M" if n >= 2**20 else f"{n // 2**10}K"


def print_gpu(report: dict) -> None:
    ceil = report["ceilings"]
    say(f"[bold]{escape(report['device'])}[/]  ceilings: C_hbm {ceil['C_hbm']:.1f} G/s, "
        f"C_l2 {ceil['C_l2']:.1f} G/s (random 8-byte gathers, this run)")
    results = report["results"]

    def label(r):
        return [r["kind"], _size(r["keys"]), f"{r['load']:.3f}"]

    def cell(r, name):
        return f"{r[name]['g_per_s']:.2f} ({r[name]['ratio']:.2f})"

    show_table("HashMap inserts, G keys/s: duplicates='any' and the default 'last'; bytes a "
               "key takes", ["type", "keys", "load", "insert any", "insert last", "B/entry"],
               [[*label(r), f"{r['insert']['g_per_s']:.2f}",
                 f"{r['insert_dict_semantics']['g_per_s']:.2f}", f"{r['bytes_per_entry']:.1f}"]
                for r in results])
    show_table("HashMap finds, G keys/s (ratio to the ceiling of where the table resides); "
               "buckets a hit reads, share of misses that stop at the first bucket",
               ["type", "keys", "load", "res", "find hit", "find miss", "find index",
                "hit bkts", "miss @1st"],
               [[*label(r), r["resident"], cell(r, "find_hit"), cell(r, "find_miss"),
                 cell(r, "find_index_hit"), f"{r['probes']['hit_buckets_mean']:.3f}",
                 f"{r['probes']['misses_stopping_at_first_bucket']:.3f}"] for r in results])
    peers = report.get("peers", {})
    if "sort_searchsorted" in peers:
        p = peers["sort_searchsorted"]
        say(f"torch sort + searchsorted, {_size(p['keys'])} keys: build "
            f"{p['build_g_per_s']:.2f} G/s, lookup {p['lookup_g_per_s']:.2f} G/s")
    for p in peers.get("seed_layouts", []):
        say(f"fixed layout {p['version']}, {_size(p['keys'])} keys, load 0.5: insert "
            f"{p['insert_g_per_s']:.2f} G/s, find {p['find_g_per_s']:.2f} G/s "
            f"({p['find_ratio']:.2f}), silently dropped {p['silently_dropped']}")
    if "host_overhead_us" in report:
        h = report["host_overhead_us"]
        say(f"host overhead per call, 1K keys: find {h['find_1k']:.1f} us, "
            f"contains {h['contains_1k']:.1f} us, insert {h['insert_1k']:.1f} us")
        if "bare_launch" in h:
            say(f"bare cuda.core launch {h['bare_launch']:.1f} us: find / launch "
                f"{h['find_1k'] / h['bare_launch']:.2f}x")
    core = report.get("core")
    if core:
        a, m = core["insert_or_apply_add"], core["multimap"]
        say(f"insert_or_apply add, {_size(a['rows'])} rows into {_size(a['keys'])} "
            f"keys: {a['apply_g_per_s']:.2f} G rows/s against atomicAdd to random "
            f"words of the same footprint {a['atomic_add_g_per_s']:.2f} ({a['ratio']:.2f})")
        say(f"MultiMap, {_size(m['keys'])} keys x {m['copies']}, {_size(m['probes'])} "
            f"probes: count {m['count_g_probes_per_s']:.2f} G/s "
            f"({m['count_ratio']:.2f} C_hbm), find_all "
            f"{m['find_all_g_matches_per_s']:.2f} G matches/s ({m['find_all_ratio']:.2f} C_hbm)")
        e = core["embedding_table"]
        say(f"u64 -> f32x8, {_size(e['capacity'])} capacity, {_size(e['batch'])} keys "
            f"a call, load 0.99 against 0.5: find {e['0.99']['find_g_per_s']:.2f} / "
            f"{e['0.5']['find_g_per_s']:.2f} G/s ({e['find_0.99_over_0.5']:.2f}x), "
            f"assign {e['0.99']['assign_g_per_s']:.2f} / "
            f"{e['0.5']['assign_g_per_s']:.2f} ({e['assign_0.99_over_0.5']:.2f}x)")
    print_cpu(report["cpu"])


def print_cpu(cpu: dict) -> None:
    if "configs" in cpu:
        show_table("CPU engine, M keys/s (host wall clock)",
                   ["type", "keys", "load", "insert", "find hit", "find miss"],
                   [[r["kind"], _size(r["keys"]), f"{r['load']:.2f}",
                     f"{r['insert_m_per_s']:.1f}", f"{r['find_hit_m_per_s']:.1f}",
                     f"{r['find_miss_m_per_s']:.1f}"] for r in cpu["configs"]])
    if "peers" in cpu:
        _print_peers(cpu["peers"])
    d = cpu["versus_dict"]
    say(f"CPU engine vs Python dict, {_size(d['keys'])} int64 keys: insert "
        f"{d['engine_insert_ms']:.0f} ms vs dict build {d['dict_build_ms']:.0f} ms "
        f"({d['insert_speedup']:.2f}x); find {d['engine_find_ms']:.0f} ms vs dict "
        f"{d['dict_find_ms']:.0f} ms ({d['find_speedup']:.2f}x)")


def _print_peers(p: dict) -> None:
    rows = []
    for name, f in p["peers"].items():
        build = "-" if f["build_ms"] is None else (f"{f['build_ms']:.0f} "
                                                   f"({f['engine_build_speedup']:.2f}x)")
        rows.append([name, build, f"{f['find_ms']:.0f} ({f['engine_find_speedup']:.2f}x)"])
    show_table(f"{p['keys']:,} int64 keys -> float32, {p['cores']} cores: the CPU engine "
               f"against each peer, ms (engine speedup)", ["peer", "build", "find"], rows)
    r = p["rows_u64_f32x8"]
    say(f"random-gather ceiling, {p['keys']:,} float32: {p['gather_ms']:.0f} ms; "
        f"u64 -> f32x8 at load {r['load']:.2f}, {r['keys']:,} keys: find "
        f"{r['find_ms']:.0f} ms against a gather of as many 32-byte rows "
        f"{r['gather_ms']:.0f} ms ({r['ratio']:.2f})")


def write_json(report: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report, indent=1))
    say(f"wrote {escape(str(path))}")


def plot(report: dict, path: str | Path) -> None:
    """Throughput against load factor, one panel per table type (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("[yellow]--plot needs matplotlib: pip install 'gpuhash\\[plot]'[/]")
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
    say(f"wrote {escape(str(path))}")


def plot_questions(report: dict, path, *, title: str, times) -> None:
    """Bars of each question's times, ms on a log scale, a panel per N: ``times(question)``
    gives {series name: ms} (merge and group-by reports)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = report["sizes"]
    figure, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4.0), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        questions = size["questions"]
        names = list(dict.fromkeys(name for q in questions for name in times(q)))
        width = 0.8 / max(len(names), 1)
        for k, name in enumerate(names):
            values = [times(q).get(name) for q in questions]
            xs = [i + (k - (len(names) - 1) / 2) * width for i in range(len(questions))]
            present = [(x, v) for x, v in zip(xs, values) if v is not None]
            ax.bar([x for x, _ in present], [v for _, v in present], width, label=name)
        ax.set_xticks(range(len(questions)), [q["question"] for q in questions])
        ax.set_yscale("log")
        ax.set_title(f"N={size['n']:.0e}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("ms (lower is better)")
    figure.suptitle(f"{title} on {report['device']} (commit {report.get('commit', '?')[:7]})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
