"""The tables and plot of ``gpuhash bench merge`` (bench/merge_suite.py's report).

Example:
    >>> print_report({"device": "CPU", "ceilings": {}, "sizes": []})
"""

from __future__ import annotations

from pathlib import Path


def _versus(peer: dict) -> str:
    return f"{peer['ms']:.1f} ({peer['ratio']:.2f}x)"


def print_report(report: dict) -> None:
    """Per N: each question's rows, gpuhash's time and each peer's with its ratio (> 1:
    gpuhash faster); then the ceilings."""
    from gpuhash.bench.report import show_table

    for size in report["sizes"]:
        questions = size["questions"]
        peers = sorted({p for q in questions for p in q["peers"]})
        show_table(f"gh.merge of host tables on {report['device']}, N={size['n']:.0e}, ms "
                   f"(a peer's ratio > 1: gpuhash faster)",
                   ["question", "output rows", "gpuhash", *peers],
                   [[f"{q['question']} {q['how']} {q['right']} on {q['on']}",
                     f"{q['rows']:,}", f"{q['gpuhash_ms']:.1f}",
                     *(_versus(q["peers"][p]) if p in q["peers"] else "-" for p in peers)]
                    for q in questions])
    ceilings = report["ceilings"]
    if ceilings:
        rows = []
        if "host_copy" in ceilings:
            copy = ceilings["host_copy"]
            rows.append(["host memory copy, one thread", f"{copy['one_thread_gbps']:.1f}"])
            rows.append([f"host memory copy, {copy['threads']} threads",
                         f"{copy['every_core_gbps']:.1f}"])
        if "link" in ceilings:
            rows.append(["host to device (pinned)", f"{ceilings['link']['to_device_gbps']:.1f}"])
            rows.append(["device to host (pinned)", f"{ceilings['link']['to_host_gbps']:.1f}"])
        show_table("ceilings, GB/s", ["", "GB/s"], rows)


def plot_report(report: dict, path: str | Path) -> None:
    """Each question's time beside its peers', ms on a log scale, a panel per N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = report["sizes"]
    figure, axes = plt.subplots(1, len(sizes), figsize=(5.0 * len(sizes), 4.0), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        questions = size["questions"]
        names = ["gpuhash", *sorted({p for q in questions for p in q["peers"]})]
        width = 0.8 / len(names)
        for k, name in enumerate(names):
            values = [q["gpuhash_ms"] if name == "gpuhash" else
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
    figure.suptitle(f"gh.merge on {report['device']} (commit {report.get('commit', '?')[:7]})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
