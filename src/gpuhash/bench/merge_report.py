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
        forms = sorted({f for q in questions for f in q.get("gpuhash_forms", {"pyarrow": 0})})
        show_table(f"gh.merge of host tables on {report['device']}, N={size['n']:.0e}, ms "
                   f"(a peer's ratio > 1: gpuhash faster in that peer's form: polars "
                   f"frames for polars, pyarrow tables for the others)",
                   ["question", "output rows", *(f"gpuhash ({f})" for f in forms), *peers],
                   [[f"{q['question']} {q['how']} {q['right']} on {q['on']}",
                     f"{q['rows']:,}",
                     *(f"{q.get('gpuhash_forms', {'pyarrow': q['gpuhash_ms']}).get(f, 0):.1f}"
                       for f in forms),
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
    from gpuhash.bench.report import plot_questions

    plot_questions(report, path, title="gh.merge",
                   times=lambda q: {"gpuhash": q["gpuhash_ms"],
                                   **{p: v["ms"] for p, v in sorted(q["peers"].items())}})
