"""The join benchmark's variants of J3 (1M x 10M rows; 1/100 of that on a CPU): repeated build
keys, a skewed probe side, 64-bit keys, two key columns and the other join kinds, each timed
for gpuhash and DuckDB, with the output rows checked against DuckDB's before a time counts.

Inputs keep J3's rule where it applies: build keys are distinct even numbers (shuffled) and
probe keys drawn below twice the largest, so about half the probe rows match.
- ``m:n x10``: 100K distinct build keys, each on 10 rows (1M rows); about 50M output pairs.
- ``zipf 1.0``: probe keys drawn with probability proportional to 1 / rank over the build keys
  (a continuous approximation: rank = floor(exp(u * ln(n + 1)))), so every probe row matches
  and a few keys take most of the rows.
- ``int64``: random 64-bit build keys (full range), half the probe rows drawn from them.
- ``2 columns``: J3's keys split into (key // 1000, key % 1000), two int32 columns.
- ``left``, ``full``, ``semi``, ``anti``: J3's inputs with that ``how``.
- ``sparse``: distinct random 31-bit build keys, half the probe rows drawn from them: J3
  through the hash table (J3's own keys are dense, so a GPU build holds them in its direct
  array: join/build.py, direct_words).

Example:
    >>> [v.name for v in VARIANTS][:3]
    ['m:n x10', 'zipf 1.0', 'int64']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from gpuhash.bench.harness import time_peer
from gpuhash.bench.join_suite import FULL

SQL = {"inner": "JOIN", "left": "LEFT JOIN", "full": "FULL JOIN", "semi": "SEMI JOIN",
       "anti": "ANTI JOIN"}


@dataclass
class Variant:
    """One variant: its name, the join kind, and how its (build, probe) key columns are made
    (lists of int tensors on the CPU) from the build and probe row counts and a generator."""

    name: str
    how: str
    make: Callable[[int, int, torch.Generator], tuple[list[torch.Tensor], list[torch.Tensor]]]


def _j3(build: int, probe: int, g: torch.Generator):
    keys = (torch.randperm(build, generator=g) * 2).to(torch.int32)
    return [keys], [torch.randint(0, 2 * build, (probe,), generator=g, dtype=torch.int32)]


def _many(build: int, probe: int, g: torch.Generator):
    distinct = max(build // 10, 1)
    keys = (torch.randperm(distinct, generator=g) * 2).repeat(10)[:build].to(torch.int32)
    return [keys], [torch.randint(0, 2 * distinct, (probe,), generator=g, dtype=torch.int32)]


def _zipf(build: int, probe: int, g: torch.Generator):
    keys = (torch.randperm(build, generator=g) * 2).to(torch.int32)
    u = torch.rand(probe, generator=g, dtype=torch.float64)
    rank = torch.exp(u * np.log(build + 1)).floor().long().clamp_(1, build) - 1
    return [keys], [keys.index_select(0, rank)]


def _wide(build: int, probe: int, g: torch.Generator):
    keys = torch.randint(-(2**63), 2**63 - 1, (build,), generator=g, dtype=torch.int64)
    drawn = keys.index_select(0, torch.randint(0, build, (probe,), generator=g))
    other = torch.randint(-(2**63), 2**63 - 1, (probe,), generator=g, dtype=torch.int64)
    return [keys], [torch.where(torch.rand(probe, generator=g) < 0.5, drawn, other)]


def _two_columns(build: int, probe: int, g: torch.Generator):
    (b,), (p,) = _j3(build, probe, g)
    return [b // 1000, b % 1000], [p // 1000, p % 1000]


def _sparse(build: int, probe: int, g: torch.Generator):
    top = 2**31 - 2  # below Direct32's two reserved values
    drawn = torch.randint(0, top, (build + build // 8,), generator=g, dtype=torch.int64).unique()
    keys = drawn.index_select(0, torch.randperm(drawn.shape[0], generator=g)[:build])
    hits = keys.index_select(0, torch.randint(0, build, (probe,), generator=g))
    others = torch.randint(0, top, (probe,), generator=g, dtype=torch.int64)
    chosen = torch.where(torch.rand(probe, generator=g) < 0.5, hits, others)
    return [keys.to(torch.int32)], [chosen.to(torch.int32)]


VARIANTS = [Variant("m:n x10", "inner", _many), Variant("zipf 1.0", "inner", _zipf),
            Variant("int64", "inner", _wide), Variant("2 columns", "inner", _two_columns),
            *(Variant(how, how, _j3) for how in ("left", "full", "semi", "anti")),
            Variant("sparse", "inner", _sparse)]


def _duckdb(build_cols: list[np.ndarray], probe_cols: list[np.ndarray], how: str):
    import duckdb
    import pandas

    def frame(cols):
        data = {f"k{i}": c for i, c in enumerate(cols)}
        data["rid"] = np.arange(len(cols[0]))
        return pandas.DataFrame(data)

    con = duckdb.connect()
    con.register("b", frame(build_cols))
    con.register("p", frame(probe_cols))
    on = " AND ".join(f"p.k{i} = b.k{i}" for i in range(len(build_cols)))
    columns = "p.rid" if how in ("semi", "anti") else "p.rid, b.rid"
    query = f"SELECT {columns} FROM p {SQL[how]} b ON {on}"
    return lambda: con.sql(query).fetchnumpy()


def run_variant(variant: Variant, device: torch.device, timer, *, scale: int,
                runs: int) -> dict:
    """gpuhash and DuckDB on one variant; times in ms, ratio > 1: gpuhash faster."""
    import gpuhash as gh

    rows_build, rows_probe = (n // scale for n in FULL["J3"])
    build_cols, probe_cols = variant.make(rows_build, rows_probe,
                                          torch.Generator().manual_seed(31))
    build = tuple(c.to(device) for c in build_cols)
    probe = tuple(c.to(device) for c in probe_cols)
    build_keys = build[0] if len(build) == 1 else build
    probe_keys = probe[0] if len(probe) == 1 else probe

    def ours():
        return gh.join(probe_keys, build_keys, how=variant.how)

    result = ours()
    rows = (result if variant.how in ("semi", "anti") else result[0]).shape[0]
    timing = timer(ours)
    report = {"name": variant.name, "how": variant.how, "build": rows_build,
              "probe": rows_probe, "output_rows": rows, "gpuhash_ms": timing.median_ms,
              "gpuhash": timing.as_dict(), "peers": {}}
    try:
        call = _duckdb([c.numpy() for c in build_cols], [c.numpy() for c in probe_cols],
                       variant.how)
    except ImportError:
        return report
    got = len(next(iter(call().values())))
    assert got == rows, f"DuckDB gives {got} rows for {variant.name}, gpuhash {rows}"
    peer = time_peer(call, runs=runs)
    report["peers"]["duckdb"] = {"ms": peer.median_ms, "where": "cpu",
                                 "ratio": round(peer.median_ms / timing.median_ms, 3)}
    return report
