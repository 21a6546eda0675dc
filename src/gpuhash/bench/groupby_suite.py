"""``gpuhash bench groupby``: db-benchmark's group-by task, on host tables and on the GPU.

The data follow the facts of db-benchmark's group-by generator (``groupby-datagen.R``, K=100,
no nulls, random order), made here with NumPy: N rows of ``id1``, ``id2`` (strings
``"id001"``..``"id100"``), ``id3`` (strings of N/K levels, ``"id0000000001"``..), ``id4``,
``id5`` (int32 in 1..K), ``id6`` (int32 in 1..N/K), ``v1`` (int32 in 1..5), ``v2`` (int32 in
1..15) and ``v3`` (a double in [0, 100), six decimals); with ``--nulls 0.05``, db-benchmark's
NA variant, 5% of every column null.

The questions: q1 sum v1 by id1; q2 sum v1 by id1, id2; q3 sum v1, mean v3 by id3; q4 mean
v1, v2, v3 by id4; q5 sum v1, v2, v3 by id6; q6 median and sd of v3 by id4, id5; q7 max v1 -
min v2 by id3; q8 the largest two v3 by id6; q9 the squared correlation of v1 and v2 by id2,
id4; q10 sum v3 and count (rows) by id1..id6.

Two forms of gpuhash: ``host``, the pyarrow table in host memory in (strings as strings) and
a pyarrow table out; ``gpu``, a dict of CUDA tensors in (string keys as dictionary codes, made
once before timing) and a dict of CUDA tensors out. Peers, each when importable: DuckDB (SQL
over the Arrow table), polars (eager, the frame made before timing), and on a GPU
``torch.unique`` + ``index_add_`` where a question is sums and means. Every answer is checked
against DuckDB's (groups, and each result column's sum) before a time counts. The ceiling of
the ``gpu`` form: the bytes of the columns a question reads, at the device's read bandwidth
measured in the same run. Then, per N, ``gh.factorize`` of N int64 keys of N/100 distinct
random values beside ``torch.unique(return_inverse=True)``.

Example:
    >>> table = make_table(2000, seed=1)
    >>> table.num_rows, table.column_names
    (2000, ['id1', 'id2', 'id3', 'id4', 'id5', 'id6', 'v1', 'v2', 'v3'])
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

from gpuhash.bench.harness import time_cpu
from gpuhash.bench.progress import Step, quiet

K = 100
# name: (keys, gpuhash aggs, DuckDB's select list, polars' aggregations as text)
QUESTIONS = {
    "q1": (["id1"], {"v1": "sum"}, "sum(v1) AS v1"),
    "q2": (["id1", "id2"], {"v1": "sum"}, "sum(v1) AS v1"),
    "q3": (["id3"], {"v1": "sum", "v3": "mean"}, "sum(v1) AS v1, avg(v3) AS v3"),
    "q4": (["id4"], {"v1": "mean", "v2": "mean", "v3": "mean"},
           "avg(v1) AS v1, avg(v2) AS v2, avg(v3) AS v3"),
    "q5": (["id6"], {"v1": "sum", "v2": "sum", "v3": "sum"},
           "sum(v1) AS v1, sum(v2) AS v2, sum(v3) AS v3"),
    "q6": (["id4", "id5"], {"v3": ["median", "std"]},
           "median(v3) AS v3_median, stddev(v3) AS v3_std"),
    "q7": (["id3"], {"v1": "max", "v2": "min"}, "max(v1) - min(v2) AS range_v1_v2"),
    "q8": (["id6"], {"v3": ("top_k", 2)}, None),
    "q9": (["id2", "id4"], {"v1": ("corr", "v2")}, "pow(corr(v1, v2), 2) AS r2"),
    "q10": (["id1", "id2", "id3", "id4", "id5", "id6"], {"v3": "sum", "v1": "size"},
            "sum(v3) AS v3, count(*) AS count"),
}
RESULTS = {"q1": 1, "q2": 1, "q3": 2, "q4": 3, "q5": 3, "q6": 2, "q7": 1, "q8": 1, "q9": 1,
           "q10": 2}  # result columns of each answer: its last ones
PEERS = ("duckdb", "polars", "torch")
# polars given the pyarrow table: the columns a question reads made a frame, grouped, the
# answer made Arrow, all timed; beside the host form (the same data in, the same form out)
ARROW_POLARS = "polars from Arrow"
FORMS = ("host", "gpu")
TORCH_ANSWERS = ("q1", "q2", "q4", "q5")  # sums and means: what unique + index_add_ does


def _strings(ids: np.ndarray, width: int):
    """``"id"`` and the zero-padded number, in chunks (one Arrow string array holds 2 GiB)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = []
    for start in range(0, max(len(ids), 1), 1 << 24):
        digits = pc.utf8_lpad(pc.cast(pa.array(ids[start:start + (1 << 24)]), pa.string()),
                              width, "0")
        chunks.append(pc.binary_join_element_wise("id", digits, ""))
    return pa.chunked_array(chunks, type=pa.string())


def make_table(n: int, *, seed: int = 108, nulls: float = 0.0):
    """The G1 table of N = ``n`` rows (K = 100) as a pyarrow Table; ``nulls``: the share of
    each column's values made null (db-benchmark's NA variant takes 0.05)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpuhash._common.validity import arrow_array

    rng = np.random.default_rng(seed)
    levels = max(1, n // K)

    def ints(high: int) -> np.ndarray:
        return rng.integers(1, high + 1, n, dtype=np.int32)

    columns = {
        "id1": _strings(ints(K), 3), "id2": _strings(ints(K), 3),
        "id3": _strings(ints(levels), 10),
        "id4": ints(K), "id5": ints(K), "id6": ints(levels),
        "v1": ints(5), "v2": ints(15), "v3": np.round(rng.uniform(0, 100, n), 6),
    }
    if nulls:
        for name, values in columns.items():
            missing = rng.random(n) < nulls
            if isinstance(values, np.ndarray):
                columns[name] = arrow_array(values, ~missing)
                continue
            chunks, start = [], 0
            for chunk in values.chunks:
                gone = pa.array(missing[start:start + len(chunk)])
                chunks.append(pc.if_else(gone, pa.scalar(None, chunk.type), chunk))
                start += len(chunk)
            columns[name] = pa.chunked_array(chunks, type=values.type)
    return pa.table(columns)


def gpu_columns(table) -> dict:
    """The table as CUDA tensors, string keys as int32 dictionary codes."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import torch

    columns = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_string(column.type):
            encoded = pc.dictionary_encode(column).unify_dictionaries()
            numbers = np.concatenate([c.indices.to_numpy() for c in encoded.chunks])
        else:
            numbers = column.to_numpy()
        columns[name] = torch.from_numpy(np.ascontiguousarray(numbers)).cuda()
    return columns


def _sql(question: str) -> str:
    keys, _, select = QUESTIONS[question]
    by = ", ".join(keys)
    if question == "q8":
        return ("SELECT id6, largest2_v3 FROM (SELECT id6, v3 AS largest2_v3, row_number() "
                "OVER (PARTITION BY id6 ORDER BY v3 DESC) AS order_v3 FROM x WHERE v3 IS NOT "
                "NULL) WHERE order_v3 <= 2")
    return f"SELECT {by}, {select} FROM x GROUP BY {by}"


def _polars(frame, question: str):
    import polars as pl

    keys = QUESTIONS[question][0]
    c = pl.col
    if question == "q8":
        return frame.drop_nulls("v3").sort("v3", descending=True).group_by("id6").head(2)
    aggs = {
        "q1": [c("v1").sum()], "q2": [c("v1").sum()],
        "q3": [c("v1").sum(), c("v3").mean()],
        "q4": [c("v1").mean(), c("v2").mean(), c("v3").mean()],
        "q5": [c("v1").sum(), c("v2").sum(), c("v3").sum()],
        "q6": [c("v3").median().alias("v3_median"), c("v3").std().alias("v3_std")],
        "q7": [(c("v1").max() - c("v2").min()).alias("range_v1_v2")],
        "q9": [(pl.corr("v1", "v2") ** 2).alias("r2")],
        "q10": [c("v3").sum(), pl.len().alias("count")],
    }[question]
    return frame.group_by(keys).agg(aggs)


def _finish(question: str, answer, form: str):
    """The user's last step where a question asks for more than the aggregations: q7's
    difference, q9's square."""
    if question not in ("q7", "q9"):
        return answer
    if form == "gpu":
        if question == "q7":
            answer["range_v1_v2"] = answer.pop("v1") - answer.pop("v2")
        else:
            answer["r2"] = answer.pop("v1") ** 2
        return answer
    import pyarrow.compute as pc

    if question == "q7":
        difference = pc.subtract(answer.column("v1"), answer.column("v2"))
        return answer.drop_columns(["v1", "v2"]).append_column("range_v1_v2", difference)
    squared = pc.power(answer.column("v1"), 2)
    return answer.drop_columns(["v1"]).append_column("r2", squared)


def _summary(answer) -> tuple[int, list[float]]:
    """Rows, and the sum of each result column past the keys (NaN as 0)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(answer, dict):
        columns = list(answer.values())
        rows = int(columns[0].shape[0])
        sums = [float(v.double().nan_to_num(0.0).sum()) for v in columns]
    else:
        table = answer.to_arrow() if hasattr(answer, "to_arrow") else answer
        rows = table.num_rows
        sums = []
        for column in table.columns:
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                continue
            column = pc.cast(column, pa.float64())
            sums.append(pc.sum(pc.fill_null(pc.if_else(pc.is_nan(column), 0.0, column), 0.0)
                               ).as_py() or 0.0)
    return rows, sums


def _same(ours, theirs, who: str, question: str) -> None:
    rows, sums = _summary(ours)
    want_rows, want = _summary(theirs)
    assert rows == want_rows, f"{who} {question}: {rows} groups, DuckDB {want_rows}"
    tail = RESULTS[question]
    for got, expected in zip(sums[-tail:], want[-tail:]):
        assert math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-6), (
            f"{who} {question}: column sums {sums} differ from DuckDB's {want}")


def _torch_answer(columns: dict, question: str):
    """torch.unique of the keys (one int64 code of several) and index_add_ per column."""
    import torch

    keys, aggs, _ = QUESTIONS[question]
    code = columns[keys[0]].long()
    for name in keys[1:]:
        code = code * 1000 + columns[name].long()  # K = 100 levels: no overlap
    uniques, inverse = torch.unique(code, return_inverse=True)
    out = {"key": uniques}
    size = torch.zeros(uniques.shape[0], dtype=torch.float64, device=code.device)
    size.index_add_(0, inverse, torch.ones_like(code, dtype=torch.float64))
    for name, agg in aggs.items():
        total = torch.zeros(uniques.shape[0], dtype=torch.float64, device=code.device)
        total.index_add_(0, inverse, columns[name].double())
        out[name] = total / size if agg == "mean" else total
    return out


def read_bandwidth() -> float:
    """The device's read bandwidth (GB/s): a sum of 1 GiB of float32, by CUDA events."""
    import torch

    from gpuhash.bench.harness import time_gpu

    data = torch.ones(1 << 28, dtype=torch.float32, device="cuda")
    ms = time_gpu(lambda: data.sum(), runs=5).median_ms
    return data.numel() * 4 / ms / 1e6


def _question_columns(question: str) -> list[str]:
    """The columns a question reads, in the table's order."""
    keys, aggs, _ = QUESTIONS[question]
    names = set(keys) | set(aggs) | {a[1] for a in aggs.values()
                                     if isinstance(a, tuple) and a[0] == "corr"}
    return [n for n in COLUMNS if n in names]


COLUMNS = ("id1", "id2", "id3", "id4", "id5", "id6", "v1", "v2", "v3")  # make_table's order


def _question_bytes(columns: dict, question: str) -> int:
    return sum(columns[n].numel() * columns[n].element_size()
               for n in _question_columns(question))


def run_question(table, gpu, frame, question: str, *, runs: int, device: str, peers,
                 forms, bandwidth: float | None) -> dict:
    """One question: each form's time and each peer's (ms), answers checked against DuckDB."""
    import gpuhash as gh

    keys, aggs, _ = QUESTIONS[question]
    result = {"question": question, "by": keys, "gpuhash": {}, "peers": {}}
    calls = {}
    if "duckdb" in peers:
        try:
            import duckdb

            con = duckdb.connect()
            con.execute(f"SET threads TO {os.cpu_count()}")
            con.register("x", table)
            sql = _sql(question)
            calls["duckdb"] = lambda: con.sql(sql).to_arrow_table()
        except ImportError:
            pass
    if "polars" in peers and frame is not None:
        import polars as pl

        calls["polars"] = lambda: _polars(frame, question)
        read = _question_columns(question)  # only what the question reads becomes a frame
        calls[ARROW_POLARS] = lambda: _polars(pl.from_arrow(table.select(read)),
                                              question).to_arrow()
    if "torch" in peers and gpu is not None and question in TORCH_ANSWERS:
        import torch

        def unique_and_add():
            answer = _torch_answer(gpu, question)
            torch.cuda.synchronize()
            return answer
        calls["torch"] = unique_and_add
    reference = calls["duckdb"]() if "duckdb" in calls else None
    ours = {}
    if "host" in forms:
        ours["host"] = lambda: _finish(question, gh.groupby(table, keys, aggs, device=device),
                                       "host")
    if "gpu" in forms and gpu is not None:
        import torch

        def on_gpu():
            answer = _finish(question, gh.groupby(gpu, keys, aggs), "gpu")
            torch.cuda.synchronize()
            return answer
        ours["gpu"] = on_gpu
    for form, call in ours.items():
        answer = call()
        if reference is not None:
            _same(answer, reference, f"gpuhash ({form})", question)
        result["gpuhash"][form] = _timed(call, runs)
    if "gpu" in ours and bandwidth:
        result["ceiling_ms"] = _question_bytes(gpu, question) / bandwidth / 1e6
    base = result["gpuhash"].get("gpu", result["gpuhash"].get("host"))
    for name, call in calls.items():
        if reference is not None and name != "duckdb":
            _same(call(), reference, name, question)
        ms = _timed(call, runs)
        against = result["gpuhash"].get("host") if name == ARROW_POLARS else base
        result["peers"][name] = {"ms": ms, "versus": "host" if name == ARROW_POLARS else (
            "gpu" if "gpu" in result["gpuhash"] else "host"),
            "ratio": round(ms / against, 3) if against else None}
    return result


QUICK_MS = 20.0  # calls quicker than this are timed at least QUICK_RUNS times: a host's
QUICK_RUNS = 25  # passing stall moves a median of a few sub-millisecond calls by a third


def _timed(call, runs: int) -> float:
    """Median milliseconds of ``call`` (see QUICK_MS), after the one warm-up."""
    start = time.perf_counter()
    call()
    once = (time.perf_counter() - start) * 1e3
    return time_cpu(call, warmup=0, runs=max(runs, QUICK_RUNS) if once < QUICK_MS
                    else runs).median_ms


def factorize_case(n: int, groups: int, *, runs: int, device: str) -> dict:
    """gh.factorize of ``n`` int64 keys drawn from ``groups`` random values beside
    torch.unique(return_inverse=True) on the same tensor, each to a synchronised answer;
    both answers checked (every key rebuilt from its id and the distinct keys)."""
    import torch

    import gpuhash as gh

    generator = torch.Generator().manual_seed(7)
    domain = torch.randint(-(2**62), 2**62, (groups,), generator=generator)
    keys = domain[torch.randint(0, groups, (n,), generator=generator)].to(device)

    def done(answer):
        if keys.is_cuda:
            torch.cuda.synchronize()
        return answer

    ours = lambda: done(gh.factorize(keys))  # noqa: E731
    theirs = lambda: done(torch.unique(keys, return_inverse=True))  # noqa: E731
    ids, uniques = ours()
    distinct, inverse = theirs()
    assert uniques.shape == distinct.shape and torch.equal(uniques[ids], keys)
    assert torch.equal(distinct[inverse], keys)
    ms = _timed(ours, runs)
    peer = _timed(theirs, runs)
    return {"n": n, "groups": int(uniques.shape[0]), "gpuhash_ms": ms,
            "torch_unique_ms": peer, "ratio": round(peer / ms, 3)}


def sizes(*, quick: bool, on_gpu: bool) -> list[int]:
    """N per run: 1e7 and 1e8 on a GPU machine, 1e6 and 1e7 on a CPU (--quick: the first)."""
    chosen = [10**7, 10**8] if on_gpu else [10**6, 10**7]
    return chosen[:1] if quick else chosen


def steps(*, quick: bool, on_gpu: bool, chosen: list[int] | None = None) -> int:
    return 1 + len(chosen or sizes(quick=quick, on_gpu=on_gpu)) * (2 + len(QUESTIONS))


def run(*, quick: bool, runs: int | None, on_gpu: bool, peers=PEERS, forms=FORMS,
        sizes_: list[int] | None = None, nulls: float = 0.0, step: Step = quiet) -> dict:
    """Every size and question, with the device's read bandwidth measured in the same run.
    With ``nulls`` only the host form runs (CUDA tensors carry no nulls)."""
    runs = runs or 3
    device = "cuda" if on_gpu else "cpu"
    step("ceilings: the device's read bandwidth" if on_gpu else "ceilings: none on a CPU")
    bandwidth = read_bandwidth() if on_gpu else None
    forms = [f for f in forms if (on_gpu and not nulls) or f == "host"]
    report = {"ceilings": {"read_gbps": bandwidth} if bandwidth else {}, "sizes": [],
              "forms": forms, "nulls": nulls}
    for n in sizes_ or sizes(quick=quick, on_gpu=on_gpu):
        step(f"N={n:.0e}: making the table")
        table = make_table(n, nulls=nulls)
        gpu = gpu_columns(table) if "gpu" in forms else None
        frame = None
        if "polars" in peers:
            try:
                import polars

                frame = polars.from_arrow(table)
            except ImportError:
                pass
        questions = []
        for question in QUESTIONS:
            step(f"N={n:.0e} {question}: gpuhash and its peers")
            questions.append(run_question(table, gpu, frame, question, runs=runs,
                                          device=device, peers=peers, forms=forms,
                                          bandwidth=bandwidth))
        report["sizes"].append({"n": n, "questions": questions})
        del table, gpu, frame
        step(f"N={n:.0e}: factorize beside torch.unique")
        report.setdefault("factorize", []).append(
            factorize_case(n, max(1, n // 100), runs=runs, device=device))
    return report
