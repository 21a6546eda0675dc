"""The join benchmark's materialized merge: J1-J4's keys with two payload columns a side, joined
into a table of every column (``gh.merge`` on dicts of tensors, gathered on the join's device),
beside DuckDB (``SELECT *`` of the join, fetched as NumPy arrays) and pyarrow's ``Table.join``
of the same columns, each on the host. Output rows are checked against gpuhash's before a time
counts. Payloads: left ``a`` int32 and ``b`` float32, right ``c`` int64 and ``d`` float32.

Example:
    >>> import torch
    >>> left, right = tables(1000, 10_000, torch.device("cpu"))
    >>> sorted(left), sorted(right), len(right["k"])
    (['a', 'b', 'k'], ['c', 'd', 'k'], 1000)
"""

from __future__ import annotations

import torch

from gpuhash.bench.join_suite import FULL, Shape, make_inputs, rows_of, time_host_peers

NAMES = ("J1", "J2", "J3", "J4")


def tables(build_rows: int, probe_rows: int, device: torch.device) -> tuple[dict, dict]:
    """The probe side (left) and build side (right) of a shape as dicts of tensors."""
    build, probe = make_inputs(Shape("merge", build_rows, probe_rows), device)
    left = {"k": probe, "a": torch.arange(probe_rows, dtype=torch.int32, device=device),
            "b": torch.rand(probe_rows, device=device)}
    right = {"k": build, "c": torch.arange(build_rows, dtype=torch.int64, device=device),
             "d": torch.rand(build_rows, device=device)}
    return left, right


def _duckdb(left_np: dict, right_np: dict):
    import duckdb
    import pandas

    con = duckdb.connect()
    con.register("l", pandas.DataFrame(left_np))
    con.register("r", pandas.DataFrame(right_np))
    return lambda: con.sql("SELECT * FROM l JOIN r USING (k)").fetchnumpy()


def _pyarrow(left_np: dict, right_np: dict):
    import pyarrow as pa

    left, right = pa.table(left_np), pa.table(right_np)
    return lambda: left.join(right, "k", join_type="inner")


def run_merge(name: str, device: torch.device, timer, *, scale: int, runs: int) -> dict:
    """One shape's materialized merge: gpuhash's time and each peer's that imports (ms)."""
    import gpuhash as gh

    build_rows, probe_rows = (n // scale for n in FULL[name])
    left, right = tables(build_rows, probe_rows, device)
    rows = rows_of(gh.merge(left, right, on="k"))
    ours = timer(lambda: gh.merge(left, right, on="k"))
    result = {"name": name, "build": build_rows, "probe": probe_rows, "output_rows": rows,
              "gpuhash_ms": ours.median_ms, "peers": {}}
    left_np = {k: v.cpu().numpy() for k, v in left.items()}
    right_np = {k: v.cpu().numpy() for k, v in right.items()}
    makers = (("duckdb", _duckdb), ("pyarrow", _pyarrow))
    for peer, ms in time_host_peers(makers, (left_np, right_np), rows, runs=runs).items():
        result["peers"][peer] = {"ms": ms, "ratio": round(ms / ours.median_ms, 3)}
    return result
