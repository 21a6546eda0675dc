"""Join test cases shared by the join tests: every how, keys of any width from Python ints,
Hypothesis-drawn sides (widths, nulls, skew, extremes and reserved patterns), an answer as
sorted pairs (left rows for semi and anti joins), and DuckDB's answer to compare with."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from gpuhash.join.keys import BITS, SIGNED, UNSIGNED

HOWS = ["inner", "left", "right", "full", "semi", "anti", "cross"]
SQL = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL JOIN",
       "semi": "SEMI JOIN", "anti": "ANTI JOIN"}


def make_keys(values: list[int], dtype: torch.dtype) -> torch.Tensor:
    """A tensor of ``dtype`` holding ``values`` (Python ints in the dtype's own range)."""
    bits = BITS[dtype]
    if dtype in UNSIGNED and bits > 8:
        signed = {16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]
        patterns = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in values]
        return torch.tensor(patterns, dtype=signed).view(dtype)
    return torch.tensor(values, dtype=dtype)


def as_pairs(result, how):
    if how in ("semi", "anti"):
        return sorted(np.asarray(result).tolist())
    left, right = result
    assert left.dtype == right.dtype and str(left.dtype).endswith("int64")
    return sorted(zip(np.asarray(left).tolist(), np.asarray(right).tolist()))


def duckdb_join(left_cols, right_cols, left_valid, right_valid, how, nulls_equal, signed):
    """DuckDB's answer as a sorted list of pairs (or of left rows for semi / anti)."""
    import duckdb
    import pandas as pd

    kind = "Int64" if signed else "UInt64"

    def frame(cols, valid):
        data = {"rid": np.arange(len(cols[0]), dtype=np.int64)}
        for i, col in enumerate(cols):
            data[f"k{i}"] = pd.array([v if valid is None or valid[j] else None
                                      for j, v in enumerate(col)], dtype=kind)
        return pd.DataFrame(data)

    con = duckdb.connect()
    con.register("l", frame(left_cols, left_valid))
    con.register("r", frame(right_cols, right_valid))
    same = " IS NOT DISTINCT FROM " if nulls_equal else " = "
    on = " AND ".join(f"l.k{i}{same}r.k{i}" for i in range(len(left_cols)))
    if how == "cross":
        rows = con.sql("SELECT l.rid, r.rid FROM l CROSS JOIN r").fetchall()
    elif how in ("semi", "anti"):
        return sorted(r[0] for r in con.sql(f"SELECT l.rid FROM l {SQL[how]} r ON {on}")
                      .fetchall())
    else:
        rows = con.sql(f"SELECT l.rid, r.rid FROM l {SQL[how]} r ON {on}").fetchall()
    return sorted((-1 if a is None else a, -1 if b is None else b) for a, b in rows)


def dtype_range(dtype):
    bits = BITS[dtype]
    return (0, (1 << bits) - 1) if dtype in UNSIGNED else (-(1 << bits - 1), (1 << bits - 1) - 1)


@st.composite
def join_inputs(draw):
    signed = draw(st.booleans())
    family = SIGNED if signed else UNSIGNED
    ncols = draw(st.sampled_from([1, 1, 2]))
    sides = []
    pools = []
    dtypes = [[draw(st.sampled_from(family)) for _ in range(ncols)] for _ in range(2)]
    for c in range(ncols):
        lo = max(dtype_range(dtypes[0][c])[0], dtype_range(dtypes[1][c])[0])
        hi = min(dtype_range(dtypes[0][c])[1], dtype_range(dtypes[1][c])[1])
        special = [lo, hi, 0, 1, -1, -2, hi - 1]  # extremes and the reserved patterns
        pool = draw(st.lists(st.integers(lo, hi), min_size=1, max_size=6))
        pools.append(pool + [v for v in special if lo <= v <= hi])
    for side in range(2):
        rows = draw(st.integers(0, 24))
        skew = draw(st.booleans())
        cols = []
        for c in range(ncols):
            full_lo, full_hi = dtype_range(dtypes[side][c])
            values = st.one_of(st.sampled_from(pools[c]), st.integers(full_lo, full_hi))
            col = draw(st.lists(values, min_size=rows, max_size=rows))
            if skew and rows:  # one key in half the rows
                col = [pools[c][0] if i % 2 else v for i, v in enumerate(col)]
            cols.append(col)
        valid = None
        if draw(st.booleans()):
            valid = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
        sides.append((cols, valid))
    return signed, dtypes, sides


def tensors(cols, dtypes, valid):
    keys = tuple(make_keys(c, d) for c, d in zip(cols, dtypes))
    mask = None if valid is None else torch.tensor(valid, dtype=torch.bool)
    return (keys[0] if len(keys) == 1 else keys), mask
