"""gh.dask.merge and gh.dask.groupby against Dask's own merge and group-by, on one local
cluster and the same persisted data: wall clock of ``compute()`` (the answer brought to the
client), best of 3 after a warm-up run, each answer checked against Dask's (rows and a sum).

    python bench/experiments/dask_peers.py --rows 1e6 --json out.json
        [--partitions 8] [--workers 2] [--threads-per-worker 1] [--in-process]

Data: db-benchmark's join tables (x of N rows: id1-id3 ints, id4-id6 their strings; small,
medium and big right tables) and group-by table (id1-id6, v1-v3, K=100), as ``gpuhash bench
merge`` / ``gpuhash bench groupby`` make them, as pandas frames split into ``--partitions``
partitions. Joins: j1 x inner small on id1 and j2-j4 x with medium (a broadcast side: one
partition), j5 x inner big on id3 (both sides shuffled). Group-bys: db-benchmark's q1-q6 and
q10 (q6's median takes gh's shuffle plan; the others its tree of partials). Writes the
device, date, commit, sizes, timings and speedups (Dask's time / gh's) as JSON. Worker
processes inherit the environment: ``NUMBA_NUM_THREADS=1`` gives the CPU engine one thread a
worker (recorded in the JSON).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import dask.dataframe as dd
import distributed
import numpy as np

import gpuhash as gh
from gpuhash.bench.groupby_suite import make_table
from gpuhash.bench.merge_suite import make_tables
from gpuhash.bench.provenance import source_commit

# name: (right table, key, how)
JOINS = {"j1": ("small", "id1", "inner"), "j2": ("medium", "id2", "inner"),
         "j3": ("medium", "id2", "left"), "j4": ("medium", "id5", "inner"),
         "j5": ("big", "id3", "inner")}
# name: (by, aggs as gh.groupby takes them, the answer's columns summed for the check)
GROUPBYS = {
    "q1": (["id1"], {"v1": "sum"}),
    "q2": (["id1", "id2"], {"v1": "sum"}),
    "q3": (["id3"], {"v1": "sum", "v3": "mean"}),
    "q4": (["id4"], {"v1": "mean", "v2": "mean", "v3": "mean"}),
    "q5": (["id6"], {"v1": "sum", "v2": "sum", "v3": "sum"}),
    "q6": (["id4", "id5"], {"v3": ["median", "std"]}),
    "q10": (["id1", "id2", "id3", "id4", "id5", "id6"], {"v3": "sum", "v1": "count"}),
}


def _device() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except ImportError:
        pass
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path(
            "/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _best(run, *args, runs: int = 3) -> tuple[float, object]:
    answer = run(*args)  # warm-up: workers compile the CPU engine's loops on their first call
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        answer = run(*args)
        times.append(time.perf_counter() - start)
    return min(times), answer


def _check(ours, theirs, columns: list[str], what: str) -> None:
    if len(ours) != len(theirs):
        raise AssertionError(f"{what}: {len(ours)} rows, Dask's {len(theirs)}")
    for column in columns:
        a = float(np.nansum(ours[column].to_numpy(dtype=float)))
        b = float(np.nansum(theirs[column].to_numpy(dtype=float)))
        if not np.isclose(a, b, rtol=1e-6):
            raise AssertionError(f"{what}: sum of {column} {a}, Dask's {b}")


def _frames(client, tables: dict, partitions: int) -> dict:
    """Each table as a dask DataFrame held by the workers: the big ones in ``partitions``
    partitions, the small ones (under a partition's rows) in one."""
    per_partition = max(tables["x"].num_rows // partitions, 1)
    frames = {}
    for name, table in tables.items():
        parts = max(1, min(partitions, table.num_rows // per_partition))
        frames[name] = client.persist(dd.from_pandas(table.to_pandas(), npartitions=parts))
    distributed.wait(list(frames.values()))
    return frames


def _gh_merge(left, right, key: str, how: str):
    return gh.dask.merge(left, right, on=key, how=how).compute()


def _dask_merge(left, right, key: str, how: str):
    return left.merge(right, on=key, how=how).compute()


def _gh_groupby(frame, by: list[str], aggs: dict):
    return gh.dask.groupby(frame, by, aggs).compute()


def _dask_groupby(frame, by: list[str], aggs: dict):
    """Dask's answer with gh.groupby's column names (the keys as columns)."""
    listed = {c: (a if isinstance(a, list) else [a]) for c, a in aggs.items()}
    frame = frame.groupby(by, dropna=False).agg(listed).compute().reset_index()
    names = list(by)
    for column, asked in aggs.items():
        listed = asked if isinstance(asked, list) else [asked]
        names += [column if len(listed) == 1 else f"{column}_{a}" for a in listed]
    frame.columns = names
    return frame


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--in-process", action="store_true",
                        help="workers as threads of this process (else processes of their own)")
    parser.add_argument("--json", help="where to write the results")
    args = parser.parse_args(argv)
    rows = int(args.rows)
    report = {"experiment": "dask_peers", "device": _device(), "date":
              datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "commit": source_commit(), "python": platform.python_version(),
              "dask": __import__("dask").__version__, "rows": rows,
              "partitions": args.partitions, "workers": args.workers,
              "threads_per_worker": args.threads_per_worker,
              "processes": not args.in_process,
              # numba's threads a worker (unset: one a core), beside Dask's own worker threads
              "numba_num_threads": os.environ.get("NUMBA_NUM_THREADS"),
              "method": "wall clock of compute(), best of 3 after a warm-up run, data "
              "persisted on the workers", "joins": {},
              "groupbys": {}}
    with distributed.LocalCluster(n_workers=args.workers,
                                  threads_per_worker=args.threads_per_worker,
                                  processes=not args.in_process, dashboard_address=None) as (
            cluster), distributed.Client(cluster) as client:
        frames = _frames(client, make_tables(rows), args.partitions)
        for name, (right, key, how) in JOINS.items():
            left_f, right_f = frames["x"], frames[right]
            ours, answer = _best(_gh_merge, left_f, right_f, key, how)
            theirs, expected = _best(_dask_merge, left_f, right_f, key, how)
            _check(answer, expected, ["v1", "v2"], name)
            report["joins"][name] = {"right": right, "on": key, "how": how,
                                     "right_partitions": right_f.npartitions,
                                     "output_rows": len(answer), "gpuhash_s": ours,
                                     "dask_s": theirs, "speedup": theirs / ours}
            print(json.dumps({name: report["joins"][name]}), flush=True)
        del frames
        table = client.persist(dd.from_pandas(make_table(rows).to_pandas(),
                                              npartitions=args.partitions))
        distributed.wait(table)
        for name, (by, aggs) in GROUPBYS.items():
            ours, answer = _best(_gh_groupby, table, by, aggs)
            theirs, expected = _best(_dask_groupby, table, by, aggs)
            _check(answer, expected, [c for c in answer.columns if c not in by], name)
            report["groupbys"][name] = {"by": by, "aggs": aggs, "groups": len(answer),
                                        "gpuhash_s": ours, "dask_s": theirs,
                                        "speedup": theirs / ours}
            print(json.dumps({name: report["groupbys"][name]}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
