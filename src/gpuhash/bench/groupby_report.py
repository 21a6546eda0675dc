"""The tables and plot of ``gpuhash bench groupby`` (bench/groupby_suite.py's report).

Example:
    >>> print_report({"device": "CPU", "ceilings": {}, "sizes": [], "forms": ["host"]})
"""

from __future__ import annotations

from pathlib import Path


def _versus(peer: dict) -> str:
    ratio = "-" if peer.get("ratio") is None else f"{peer['ratio']:.2f}x"
    return f"{peer['ms']:.1f} ({ratio})"


def print_report(report: dict) -> None:
    """Per N: each question's keys, gpuhash's time in each form, the ceiling of the gpu form,
    and each peer's time with its ratio to gpuhash's fastest form (> 1: gpuhash faster)."""
    from gpuhash.bench.report import show_table

    forms = report.get("forms", ["host"])
    for size in report["sizes"]:
        questions = size["questions"]
        peers = sorted({p for q in questions for p in q["peers"]})
        ceiling = any("ceiling_ms" in q for q in questions)
        show_table(f"gh.groupby on {report['device']}, N={size['n']:.0e}, ms (a peer's ratio "
                   f"> 1: gpuhash faster)",
                   ["question", "by", *(f"gpuhash ({f})" for f in forms),
                    *(["ceiling (gpu)"] if ceiling else []), *peers],
                   [[q["question"], ",".join(q["by"]),
                     *(f"{q['gpuhash'][f]:.2f}" if f in q["gpuhash"] else "-" for f in forms),
                     *([f"{q['ceiling_ms']:.3f}" if "ceiling_ms" in q else "-"]
                       if ceiling else []),
                     *(_versus(q["peers"][p]) if p in q["peers"] else "-" for p in peers)]
                    for q in questions])
    if report["ceilings"]:
        show_table("ceilings", ["", "GB/s"],
                   [["device read bandwidth", f"{report['ceilings']['read_gbps']:.0f}"]])


def plot_report(report: dict, path: str | Path) -> None:
    """Each question's time (gpuhash's forms and the peers), ms on a log scale, a panel per N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = report["sizes"]
    figure, axes = plt.subplots(1, len(sizes), figsize=(6.0 * len(sizes), 4.0), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        questions = size["questions"]
        forms = sorted({f for q in questions for f in q["gpuhash"]})
        peers = sorted({p for q in questions for p in q["peers"]})
        names = [f"gpuhash ({f})" for f in forms] + peers
        width = 0.8 / len(names)
        for k, name in enumerate(names):
            values = [q["gpuhash"].get(name[9:-1]) if name.startswith("gpuhash") else
                      q["peers"].get(name, {}).get("ms") for q in questions]
            xs = [i + (k - (len(names) - 1) / 2) * width for i in range(len(questions))]
            present = [(x, v) for x, v in zip(xs, values) if v is not None]
            ax.bar([x for x, _ in present], [v for _, v in present], width, label=name)
        ax.set_xticks(range(len(questions)), [q["question"] for q in questions])
        ax.set_yscale("log")
        ax.set_title(f"N={size['n']:.0e}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("ms (lower is better)")
    figure.suptitle(f"gh.groupby on {report['device']} (commit {report.get('commit', '?')[:7]})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
