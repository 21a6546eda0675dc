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
    and each peer's time with its ratio to gpuhash's fastest form, or to the host form for
    'polars from Arrow' (> 1: gpuhash faster)."""
    from gpuhash.bench.report import show_table

    forms = report.get("forms", ["host"])
    for size in report["sizes"]:
        questions = size["questions"]
        peers = sorted({p for q in questions for p in q["peers"]})
        ceiling = any("ceiling_ms" in q for q in questions)
        show_table(f"gh.groupby on {report['device']}, N={size['n']:.0e}, ms (a peer's ratio "
                   f"> 1: gpuhash faster; 'polars from Arrow' against the host form)",
                   ["question", "by", *(f"gpuhash ({f})" for f in forms),
                    *(["ceiling (gpu)"] if ceiling else []), *peers],
                   [[q["question"], ",".join(q["by"]),
                     *(f"{q['gpuhash'][f]:.2f}" if f in q["gpuhash"] else "-" for f in forms),
                     *([f"{q['ceiling_ms']:.3f}" if "ceiling_ms" in q else "-"]
                       if ceiling else []),
                     *(_versus(q["peers"][p]) if p in q["peers"] else "-" for p in peers)]
                    for q in questions])
    if report.get("factorize"):
        show_table(f"gh.factorize of int64 keys on {report['device']}, ms (> 1: gpuhash "
                   f"faster)", ["keys", "groups", "gpuhash", "torch.unique"],
                   [[f"{f['n']:.0e}", f"{f['groups']:,}", f"{f['gpuhash_ms']:.2f}",
                     f"{f['torch_unique_ms']:.2f} ({f['ratio']:.2f}x)"]
                    for f in report["factorize"]])
    if report["ceilings"]:
        show_table("ceilings", ["", "GB/s"],
                   [["device read bandwidth", f"{report['ceilings']['read_gbps']:.0f}"]])


def plot_report(report: dict, path: str | Path) -> None:
    """Each question's time (gpuhash's forms and the peers), ms on a log scale, a panel per N."""
    from gpuhash.bench.report import plot_questions

    plot_questions(report, path, title="gh.groupby",
                   times=lambda q: {**{f"gpuhash ({f})": ms for f, ms in q["gpuhash"].items()},
                                   **{p: v["ms"] for p, v in sorted(q["peers"].items())}})
