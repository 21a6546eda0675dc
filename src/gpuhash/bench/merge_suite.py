"""``gpuhash bench merge``: db-benchmark's join task on pyarrow tables in host memory.

The data follow the facts of db-benchmark's join generator (``join-datagen.R``, K=NA, no
nulls, random order), made here with NumPy: table ``x`` of N rows (``id1``, ``id2``,
``id3``: int32 keys drawn from N/1e6, N/1e3 and N distinct values, each value present;
``id4``-``id6``: their strings ``"id<k>"``; ``v1``: double), and three right tables whose
keys are distinct in the joined column: ``small`` (N/1e6 rows: id1, id4, v2), ``medium``
(N/1e3: id1, id2, id4, id5, v2) and ``big`` (N: id1-id6, v2). 90% of each key column's
values are common to both sides, 10% only left and 10% only right.

The questions: q1 ``x`` inner ``small`` on id1; q2 inner ``medium`` on id2; q3 left
``medium`` on id2; q4 inner ``medium`` on id5 (a string key); q5 inner ``big`` on id3. Each
answer is a table of every column of both sides (a key once). gpuhash is timed in two forms:
pyarrow tables in and out, and polars frames in and out (the frames made from Arrow before
timing). Each peer is compared with gpuhash in its own form: DuckDB (SQL over the Arrow
tables, the answer fetched as an Arrow table), pyarrow (``Table.join``) and ``polars from
Arrow`` (the tables made frames, joined, the answer made Arrow, all timed) with the pyarrow
form; polars (the frames joined) with the polars form. Every answer is checked against
DuckDB's (rows, and the sums of v1, v2 and the right side's id1) before a time counts.

Example:
    >>> tables = make_tables(2000, seed=1)
    >>> tables["x"].num_rows, tables["medium"].num_rows, tables["x"].column_names
    (2000, 2, ['id1', 'id2', 'id3', 'id4', 'id5', 'id6', 'v1'])
"""

from __future__ import annotations

import contextlib
import io
import math
import os
from collections.abc import Callable

import numpy as np

from gpuhash.bench.harness import time_cpu
from gpuhash.bench.progress import Step, quiet

# name: (right table, key column, how)
QUESTIONS = {"q1": ("small", "id1", "inner"), "q2": ("medium", "id2", "inner"),
             "q3": ("medium", "id2", "left"), "q4": ("medium", "id5", "inner"),
             "q5": ("big", "id3", "inner")}
PEERS = ("duckdb", "polars", "pyarrow")
# each peer's form: the gpuhash call it is compared with (a peer absent here: pyarrow's)
POLARS_FORM = ("polars",)
ARROW_POLARS = "polars from Arrow"  # polars timed with the trips from and to Arrow
RIGHT_COLUMNS = {"small": ("id1",), "medium": ("id1", "id2"), "big": ("id1", "id2", "id3")}


def _split(n: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A key domain of n values: 90% common to both sides, 10% left-only, 10% right-only."""
    only = round(n * 0.1)
    keys = rng.permutation(n + only) + 1
    return keys[: n - only], keys[n - only: n], keys[n:]


def _sample_all(pool: np.ndarray, size: int, rng) -> np.ndarray:
    """``size`` values drawn from ``pool`` with every value of the pool present."""
    extra = rng.choice(pool, size=max(size - len(pool), 0), replace=True)
    return rng.permutation(np.concatenate([pool, extra]))[:size].astype(np.int32)


STRING_PIECE = 1 << 22  # ids made strings a piece a thread, then joined into one array


def id_strings(ids: np.ndarray):
    """``"id"`` and each id's digits, one Arrow string array (pieces made on every core:
    Arrow's cast and join run on one thread a call and release the GIL)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    import pyarrow.compute as pc

    def piece(start: int):
        part = pa.array(ids[start:start + STRING_PIECE])
        return pc.binary_join_element_wise("id", pc.cast(part, pa.string()), "")

    starts = range(0, len(ids), STRING_PIECE)
    if len(starts) <= 1:
        return piece(0)
    with ThreadPoolExecutor(min(len(starts), os.cpu_count() or 1)) as pool:
        return pa.concat_arrays(list(pool.map(piece, starts)))


def make_tables(n: int, *, seed: int = 108) -> dict:
    """x, small, medium and big (pyarrow Tables) for N = ``n`` (at least 1,000)."""
    import pyarrow as pa

    if n < 1000:
        raise ValueError(f"n must be at least 1000 (medium has n/1000 rows), got {n}")
    rng = np.random.default_rng(seed)
    domains = [_split(max(1, n // scale), rng) for scale in (10**6, 10**3, 1)]
    left = [_sample_all(np.concatenate([common, only]), n, rng)
            for common, only, _ in domains]
    x = {"id1": left[0], "id2": left[1], "id3": left[2]}
    x.update({f"id{i + 4}": id_strings(left[i]) for i in range(3)})
    x["v1"] = np.round(rng.uniform(0, 100, n), 6)
    tables = {"x": pa.table(x)}
    for name, scale in (("small", 10**6), ("medium", 10**3), ("big", 1)):
        rows = max(1, n // scale)
        ids = [_sample_all(np.concatenate([x_, r]), rows, rng) for x_, _, r in
               domains[: len(RIGHT_COLUMNS[name])]]
        columns = {f"id{i + 1}": ids[i] for i in range(len(ids))}
        columns.update({f"id{i + 4}": id_strings(ids[i]) for i in range(len(ids))})
        columns["v2"] = np.round(rng.uniform(0, 100, rows), 6)
        tables[name] = pa.table(columns)
    return tables


def _sql(question: str) -> str:
    right, key, how = QUESTIONS[question]
    other = [c for c in ("id1", "id2", "id3", "id4", "id5", "id6")
             if c in _right_names(right) and c != key]
    picked = ", ".join(f"{right}.{c} AS {c}_y" for c in other)
    join = "LEFT JOIN" if how == "left" else "JOIN"
    return f"SELECT x.*, {picked}, {right}.v2 FROM x {join} {right} USING ({key})"


def _right_names(right: str) -> list[str]:
    ids = RIGHT_COLUMNS[right]
    return [*ids, *(f"id{int(c[2:]) + 3}" for c in ids), "v2"]


def _summary(table) -> tuple[int, float, float, float]:
    """Rows, and the sums of v1, v2 and the right side's id1 (null as 0)."""
    import pyarrow.compute as pc

    # the right side's id1: suffixed where the key is another column, else the key
    right_id1 = "id1_y" if "id1_y" in table.column_names else "id1"
    sums = [pc.sum(table.column(c)).as_py() or 0 for c in ("v1", "v2", right_id1)]
    return (table.num_rows, *sums)


def _same(ours, theirs, who: str, question: str) -> None:
    rows, *sums = _summary(ours)
    want_rows, *want = _summary(theirs)
    assert rows == want_rows, f"{who} {question}: {rows} rows, DuckDB {want_rows}"
    for got, expected in zip(sums, want):
        assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-6), (
            f"{who} {question}: column sums {sums} differ from DuckDB's {want}")


def _peers(tables: dict, question: str, chosen=PEERS) -> dict[str, Callable[[], object]]:
    """The peers' calls for a question (those ``chosen`` that import), each answering an Arrow
    table (polars: a frame)."""
    right, key, how = QUESTIONS[question]
    calls = {}
    try:
        import duckdb

        con = duckdb.connect()
        con.execute(f"SET threads TO {os.cpu_count()}")
        for name in ("x", right):
            con.register(name, tables[name])
        sql = _sql(question)
        calls["duckdb"] = lambda: con.sql(sql).fetch_arrow_table()
    except ImportError:
        pass
    try:
        import polars as pl

        x, other = pl.from_arrow(tables["x"]), pl.from_arrow(tables[right])
        calls["polars"] = lambda: x.join(other, on=key, how=how, suffix="_y")
        calls[ARROW_POLARS] = lambda: pl.from_arrow(tables["x"]).join(
            pl.from_arrow(tables[right]), on=key, how=how, suffix="_y").to_arrow()
    except ImportError:
        pass
    x_table, other_table = tables["x"], tables[right]
    calls["pyarrow"] = lambda: x_table.join(other_table, key, join_type=f"{how} outer"
                                            if how == "left" else how, right_suffix="_y")
    wanted = {*chosen, *([ARROW_POLARS] if "polars" in chosen else [])}
    return {name: call for name, call in calls.items() if name in wanted}


def _arrow(answer):
    return answer.to_arrow() if hasattr(answer, "to_arrow") else answer


def run_question(tables: dict, question: str, *, runs: int, device: str,
                 peers=PEERS) -> dict:
    """One question: gpuhash's time and each peer's (ms), every answer checked against
    DuckDB's when DuckDB is among the ``peers``."""
    import gpuhash as gh

    right, key, how = QUESTIONS[question]
    x, other = tables["x"], tables[right]

    def ours():
        return gh.merge(x, other, on=key, how=how, device=device)

    peers = _peers(tables, question, peers)
    reference = peers["duckdb"]() if "duckdb" in peers else None
    answer = ours()
    result = {"question": question, "rows": answer.num_rows, "how": how, "on": key,
              "right": right, "right_rows": other.num_rows, "peers": {}}
    if reference is not None:
        _same(answer, reference, "gpuhash", question)
    result["gpuhash_ms"] = time_cpu(ours, runs=runs).median_ms
    forms = {"pyarrow": result["gpuhash_ms"]}
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):  # where the time went, from one more call
        gh.merge(x, other, on=key, how=how, device=device, explain=True)
    result["explain"] = shown.getvalue()
    if "polars" in peers:  # gpuhash on the polars frames, a polars frame out
        import polars as pl

        x_frame, other_frame = pl.from_arrow(x), pl.from_arrow(other)

        def ours_polars():
            return gh.merge(x_frame, other_frame, on=key, how=how, device=device,
                            suffixes=("", "_y"))  # the names polars' call is given

        if reference is not None:
            _same(ours_polars().to_arrow(), reference, "gpuhash (polars frames)", question)
        forms["polars"] = time_cpu(ours_polars, runs=runs).median_ms
    result["gpuhash_forms"] = forms
    for name, call in peers.items():
        if reference is not None and name != "duckdb":
            _same(_arrow(call()), reference, name, question)
        ms = time_cpu(call, runs=runs).median_ms
        form = "polars" if name in POLARS_FORM else "pyarrow"
        result["peers"][name] = {"ms": ms, "versus": form,
                                 "ratio": round(ms / forms[form], 3)}
    return result


def copy_ceiling(nbytes: int = 1 << 30) -> dict:
    """Host memory copy bandwidth (GB/s): one thread, and every core on its own slice."""
    from concurrent.futures import ThreadPoolExecutor

    source = np.ones(nbytes // 8, dtype=np.int64)
    target = np.empty_like(source)
    threads = os.cpu_count() or 1
    parts = np.array_split(np.arange(source.shape[0]), threads)
    bounds = [(p[0], p[-1] + 1) for p in parts if len(p)]

    def every_core():
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda b: np.copyto(target[b[0]:b[1]], source[b[0]:b[1]]), bounds))

    one = time_cpu(lambda: np.copyto(target, source), runs=3).median_ms
    many = time_cpu(every_core, runs=3).median_ms
    return {"bytes": nbytes, "one_thread_gbps": nbytes / one / 1e6,
            "every_core_gbps": nbytes / many / 1e6, "threads": threads}


def link_ceiling(nbytes: int = 1 << 28) -> dict:
    """The host link (GB/s): pinned host to device and back, by wall clock to a sync."""
    import torch

    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")

    def copy(target, source):
        target.copy_(source, non_blocking=True)
        torch.cuda.synchronize()

    up = time_cpu(lambda: copy(device, host), runs=5).median_ms
    down = time_cpu(lambda: copy(host, device), runs=5).median_ms
    return {"bytes": nbytes, "to_device_gbps": nbytes / up / 1e6,
            "to_host_gbps": nbytes / down / 1e6}


def sizes(*, quick: bool, on_gpu: bool) -> list[int]:
    """N per run: 1e7 and 1e8 on a GPU machine, 1e6 and 1e7 on a CPU (--quick: the first)."""
    chosen = [10**7, 10**8] if on_gpu else [10**6, 10**7]
    return chosen[:1] if quick else chosen


def steps(*, quick: bool, on_gpu: bool, chosen: list[int] | None = None) -> int:
    return 1 + len(chosen or sizes(quick=quick, on_gpu=on_gpu)) * (1 + len(QUESTIONS))


def run(*, quick: bool, runs: int | None, on_gpu: bool, peers=PEERS,
        sizes_: list[int] | None = None, step: Step = quiet) -> dict:
    """Every size (``sizes_``, default sizes()) and question, with the ceilings measured in the
    same run."""
    runs = runs or 3
    device = "cuda" if on_gpu else "cpu"
    step("ceilings: host memory copy" + (" and the host link" if on_gpu else ""))
    report = {"ceilings": {"host_copy": copy_ceiling()}, "sizes": []}
    if on_gpu:
        report["ceilings"]["link"] = link_ceiling()
    for n in sizes_ or sizes(quick=quick, on_gpu=on_gpu):
        step(f"N={n:.0e}: making the tables")
        tables = make_tables(n)
        questions = []
        for question in QUESTIONS:
            step(f"N={n:.0e} {question}: gpuhash and its peers")
            questions.append(run_question(tables, question, runs=runs, device=device,
                                          peers=peers))
        report["sizes"].append({"n": n, "questions": questions})
        del tables
    return report
