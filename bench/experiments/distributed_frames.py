"""gh.distributed.merge and gh.distributed.groupby on db-benchmark's join and group-by tasks,
each rank holding its own part, beside one rank's gh.merge / gh.groupby of its part alone.

Each rank makes its part with the benchmark suites' generators (gpuhash.bench.merge_suite,
gpuhash.bench.groupby_suite) from its own seed. Join task: rank r's x and y tables of N rows
(y: small N/1e6, medium N/1e3, big N rows) with every integer key shifted by r times its
domain (strings id4..id6 remade from the shifted keys), so the whole table is the ranks'
disjoint key ranges: each key's rows and its y row (distinct in y, as in db-benchmark) meet
at one owner, and the answer is every rank's answer of one N. Group-by task: rank r's G1 table
of N rows (K=100); id1, id2, id4, id5 share their levels over ranks, id3 and id6 have N/K
levels a rank (drawn from one range, so they meet too).

The questions: j1 x inner small on id1; j2 x inner medium on id2; j3 x left medium on id2; j4
x inner medium on id5 (a string key); j5 x inner big on id3; j6 x inner big on id1, id2, id3.
Group-by q1..q5 of the group-by suite (partial aggregates travel), and q6 (median and std by
id4, id5: the rows travel).

Each figure: wall ms from a barrier to every rank's end (CUDA synchronised where used), best
of repeats. ``single_ms``: rank 0's gh.merge / gh.groupby of its own part alone on its device
(the other ranks wait), the ideal a rank's share of the distributed call has; ``efficiency``:
single_ms / distributed ms (the target: 0.7 or more, a rank's N rows through the exchange at
0.7 of the rate one device groups or joins them alone).

On a GPU machine, from the repository root:
    torchrun --nproc_per_node=8 bench/experiments/distributed_frames.py [--rows 1e8]
``--explain`` adds each question's phases on every rank (one more call, untimed).
On CPUs (gloo), small N, to check it runs:
    torchrun --nproc_per_node=2 bench/experiments/distributed_frames.py --rows 1e5 \\
        --backend gloo --out /tmp/distributed_frames.json
Rank 0 prints and writes the JSON (device, world size, date, commit, figures) after every
question; ``--budget-s`` starts no question past that many seconds (listed under
``not_run``). Default OUT: bench/results/distributed_frames_<device>_x<world>.json. The tables
of 1e8 rows a rank take minutes to make: keep a device call to a few questions.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import time

import pyarrow as pa
import pyarrow.compute as pc
import torch
import torch.distributed as dist

import gpuhash as gh
from gpuhash.bench.groupby_suite import QUESTIONS as GROUPBY_QUESTIONS
from gpuhash.bench.groupby_suite import make_table
from gpuhash.bench.merge_suite import id_strings, make_tables
from gpuhash.bench.provenance import source_commit

JOINS = {"j1": ("small", ["id1"], "inner"), "j2": ("medium", ["id2"], "inner"),
         "j3": ("medium", ["id2"], "left"), "j4": ("medium", ["id5"], "inner"),
         "j5": ("big", ["id3"], "inner"), "j6": ("big", ["id1", "id2", "id3"], "inner")}
GROUPBYS = ("q1", "q2", "q3", "q4", "q5", "q6")
SCALES = {"id1": 10**6, "id2": 10**3, "id3": 1}  # a key's domain: about N / scale values


def join_tables(n: int, rank: int) -> dict:
    """Rank ``rank``'s x, small, medium and big: the suite's tables of ``n`` rows, the keys
    shifted into the rank's own range."""
    tables = make_tables(n, seed=108 + rank)
    out = {}
    for name, table in tables.items():
        for i, key in enumerate(("id1", "id2", "id3")):
            if key not in table.column_names:
                continue
            span = 2 * max(1, n // SCALES[key]) + 2  # past the suite's keys (n + 10% + 1)
            shifted = pc.add(table.column(key).cast(pa.int64()), rank * span)
            table = table.set_column(table.schema.get_field_index(key), key, shifted)
            text = f"id{i + 4}"
            strings = id_strings(shifted.to_numpy())
            table = table.set_column(table.schema.get_field_index(text), text, strings)
        out[name] = table
    return out


def _timed(call, cuda: bool) -> tuple[float, object]:
    dist.barrier()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = call()
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    return (time.perf_counter() - start) * 1e3, out


def _best(call, repeats: int, cuda: bool) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        ms, out = _timed(call, cuda)
        best = min(best, ms)
    return best, out


def _rows(part) -> int:
    total = torch.tensor([part.num_rows], dtype=torch.int64)
    if dist.get_backend() == "nccl":
        total = total.cuda()
    dist.all_reduce(total)
    return int(total.item())


def _single(rank: int, call, repeats: int, cuda: bool) -> float | None:
    """Rank 0's call alone (the others wait at the barriers): its best ms."""
    times = []
    for _ in range(repeats):
        dist.barrier()
        if rank == 0:
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            call()
            if cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
        dist.barrier()
    return min(times) if times else None


def _go_on(started: float, budget_s: float | None) -> bool:
    """Whether to start another question: rank 0 decides for every rank (a rank that
    stopped alone would leave the others waiting in the next question's collectives)."""
    flag = [budget_s is None or time.perf_counter() - started < budget_s]
    dist.broadcast_object_list(flag, src=0)
    return bool(flag[0])


def _explained(call) -> str:
    """One more call with ``explain=True``, untimed: rank 0's printed table of every rank's
    time a phase ('' on the other ranks)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        call(explain=True)
    return printed.getvalue()


def run(*, rows: int, join_rows: int, repeats: int, device: str | None, out: str | None,
        questions: list[str], budget_s: float | None = None, explain: bool = False) -> dict:
    """Every question asked, in order, the JSON rewritten after each (a run cut short keeps
    what it measured); none started once ``budget_s`` seconds have passed (those are listed
    under ``not_run``). ``explain``: each question's phases, from one more call, printed and
    kept in the JSON."""
    started = time.perf_counter()
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = dist.get_backend() == "nccl"
    figures: dict = {}
    result = {
        "experiment": "distributed_frames",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "backend": dist.get_backend(), "world_size": world, "rows_per_rank": rows,
        "join_rows_per_rank": join_rows,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": source_commit(), "torch": torch.__version__,
        "method": "wall ms from a barrier to every rank's end, best of repeats; single_ms: "
                  "rank 0's gh.merge / gh.groupby of its own part alone",
        "figures": figures, "not_run": [],
    }
    name = result["device"].split()[-1].lower()
    path = out or os.path.join("bench", "results", f"distributed_frames_{name}_x{world}.json")
    tables, table = None, None
    for question in questions:
        if not _go_on(started, budget_s):
            result["not_run"].append(question)
            continue
        if question in JOINS:
            tables = tables or join_tables(join_rows, rank)
            right, keys, how = JOINS[question]
            x, y = tables["x"], tables[right]

            def call(x=x, y=y, keys=keys, how=how, **more):
                return gh.distributed.merge(x, y, on=keys, how=how, device=device, **more)

            ms, part = _best(call, repeats, cuda)
            single = _single(rank, lambda x=x, y=y, keys=keys, how=how: gh.merge(
                x, y, on=keys, how=how, device=device), repeats, cuda)
            row = {"ms": ms, "rows_out": _rows(part), "single_ms": single}
        else:
            table = table if table is not None else make_table(rows, seed=108 + rank)
            keys, aggs = GROUPBY_QUESTIONS[question][:2]

            def call(table=table, keys=keys, aggs=aggs, **more):
                return gh.distributed.groupby(table, keys, aggs, device=device, **more)

            ms, part = _best(call, repeats, cuda)
            single = _single(rank, lambda table=table, keys=keys, aggs=aggs: gh.groupby(
                table, keys, aggs, device=device), repeats, cuda)
            row = {"ms": ms, "groups_out": _rows(part), "single_ms": single}
        if row["single_ms"] is not None:
            row["efficiency"] = row["single_ms"] / row["ms"]
        if explain:
            row["phases"] = _explained(call)
        figures[question] = row
        if rank == 0:
            print(f"{question}: {row['ms']:.1f} ms over {world} ranks, one rank alone "
                  f"{row['single_ms']:.1f} ms, efficiency {row.get('efficiency', 0):.2f} "
                  f"({time.perf_counter() - started:.0f} s in)", flush=True)
            if explain:
                print(row["phases"], end="", flush=True)
            with open(path, "w") as file:
                json.dump(result, file, indent=1)
    if rank == 0 and result["not_run"]:
        print("not run (past the budget):", ",".join(result["not_run"]), flush=True)
        with open(path, "w") as file:
            json.dump(result, file, indent=1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=float, default=1e8, help="group-by rows a rank")
    parser.add_argument("--join-rows", type=float, default=None,
                        help="join x rows a rank (default: --rows)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                        help="default: nccl where CUDA is, else gloo")
    parser.add_argument("--questions", default=",".join([*JOINS, *GROUPBYS]))
    parser.add_argument("--out", default=None)
    parser.add_argument("--explain", action="store_true",
                        help="each question's phases on every rank (one more call, untimed)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no question after this many seconds (a device call's "
                             "time limit: what was measured is written already)")
    args = parser.parse_args()
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    options = {}
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        options["device_id"] = torch.device("cuda", local_rank)
    dist.init_process_group(backend, **options)
    try:
        rows = int(args.rows)
        run(rows=rows, join_rows=int(args.join_rows or rows), repeats=args.repeats,
            device=None if backend == "nccl" else "cpu", out=args.out,
            questions=args.questions.split(","), budget_s=args.budget_s,
            explain=args.explain)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
