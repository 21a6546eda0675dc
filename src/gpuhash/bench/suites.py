"""What each suite of ``gpuhash bench`` measures, as its ``--help`` says it: descriptions,
what ``--quick`` leaves out, the default runs and what ``--plot`` draws."""

BENCH_MAP = """\
HashMap insert, find and find_index, every result checked before any time
counts.

On a GPU: tables of 1M and 32M keys (--quick: 1M and 8M) of u32->u32, u64->u64,
u32->f32x8 and u64->f32x8 (--quick: the first two) at load factors 0.5, 0.8, 0.9
and 0.99 (--quick: 0.5 and 0.9). Per table: insert (duplicates="any" and the
default), find of hits and of misses, find_index of hits, in G keys/s by CUDA
events and as a ratio to a memory ceiling measured in the same run (random 8-byte
gathers from 1 GiB, or from 16 MB for tables that fit in L2); bytes per entry and
the buckets a lookup reads. Then the host time of a 1K-key call, torch sort +
searchsorted as a read-only map, insert_or_apply against atomicAdd, MultiMap count
and find_all, an embedding table (u64->f32x8, 128M capacity) at load 0.99 against
0.5, and the CPU engine against a Python dict.

On a CPU (no CUDA device, or --cpu): the CPU engine inserting and finding 256K keys
(--quick: 32K) of u32->u32 and u64->f32x8 at loads 0.5 and 0.9, in M keys/s by
wall clock; the CPU engine against a Python dict (256K int64 keys; --quick: 64K);
5M int64 -> float32 keys (--quick: 256K) built and found by the CPU engine, pandas,
polars, a dict and torch sort + searchsorted (each when installed), beside a numpy
random-gather ceiling.
"""

BENCH_CACHE = """\
CacheMap on HierarchicalKV's benchmark workload: u64 keys, f32 x dim values, 1M
keys per call of which 60% are present, LRU, at loads 0.5, 0.75 and 1.0; every API
timed by wall clock to a device sync and by CUDA events, beside HierarchicalKV's
own H100 figures (dim 8).

On a GPU: dim 8, 32 and 64 at 128M slots (64M for dim 64; --quick: dim 8 at 16M);
then dim 64 with half the value rows in pinned host memory (max_hbm_bytes), where
values[index] of the host rows is timed beside a row-gather kernel and a bulk copy
of as many bytes. Last, per bucket shape (16 to 128 slots): the share of the top scores
kept when fed five times the capacity, the load at the first eviction, the find
speed. On a CPU: dim 8 at 512K slots, no host-memory run.
"""

BENCH_JOIN = """\
gpuhash.join on five shapes of int32 keys, J1-J5 (build x probe rows: 100K x 1M,
1M x 1M, 1M x 10M, 10M x 100M, 100M x 100M; distinct build keys, about half the
probe rows matching, gather maps out), beside DuckDB, pyarrow, polars (each when
installed), torch sort + searchsorted and a join made of a HashMap, with a copy of
the same bytes as the ceiling. Then (not with --quick) variants of J3 (many-to-many,
Zipf skew, int64 and two-column keys, left / full / semi / anti), merges with two
payload columns a side and, on a GPU, host keys streamed through a 4 GiB budget
beside the host link. --quick: J1 and J2. On a CPU every shape has 1/100 of its
rows, and J4-J5 are left out.
"""

BENCH_MERGE = """\
gh.merge of tables in host memory on db-benchmark's join task: a table x of N
rows (three int32 keys of N/1e6, N/1e3 and N distinct values, their three
strings, a double) joined with small (N/1e6 rows), medium (N/1e3) and big (N)
tables whose joined key is distinct: q1 inner small on id1, q2 inner medium on
id2, q3 left medium on id2, q4 inner medium on id5 (strings), q5 inner big on id3.
gpuhash is timed on pyarrow tables and, when polars is a peer, on polars frames.
Every answer is a table of every column, checked against DuckDB's (rows and column
sums) before a time counts; DuckDB, pyarrow's Table.join and polars (its frames,
and from Arrow to Arrow) timed in the same run (each when installed), each beside
gpuhash in the same form, with the host's memory copy bandwidth and, on a GPU
machine, the host link. N = 1e7 and 1e8 on a GPU machine, 1e6 and 1e7 on a
CPU (--quick: the first).
"""

BENCH_GROUPBY = """\
gh.groupby on db-benchmark's group-by task: N rows (K=100) of id1, id2 (strings of
100 levels), id3 (strings of N/100), id4, id5 (ints of 100), id6 (ints of N/100)
and v1, v2, v3, and its ten questions q1-q10 (sums, means, median and sd, max -
min, the two largest, a squared correlation, six keys). Two forms: host (a pyarrow
table in host memory in and out) and, on a GPU, gpu (a dict of CUDA tensors, string
keys as codes). Every answer is checked against DuckDB's (groups and column sums)
before a time counts; DuckDB, polars and torch.unique + index_add_ timed in the
same run (each when installed), beside the device's read bandwidth. N = 1e7 and
1e8 on a GPU machine, 1e6 and 1e7 on a CPU (--quick: the first).
"""

# name: (one line for `gpuhash bench --help`, the suite's own description)
SUITES = {
    "map": ("HashMap insert / find / find_index across sizes, loads and types", BENCH_MAP),
    "cache": ("CacheMap on HierarchicalKV's workload, and the bucket shapes", BENCH_CACHE),
    "join": ("gpuhash.join beside DuckDB, pyarrow, polars and torch", BENCH_JOIN),
    "merge": ("gh.merge of host tables on db-benchmark's join task, beside DuckDB and polars",
              BENCH_MERGE),
    "groupby": ("gh.groupby on db-benchmark's group-by task, beside DuckDB and polars",
                BENCH_GROUPBY),
}
QUICK = {"map": "fewer sizes, types and loads; fewer runs",
         "cache": "dim 8 only, fewer slots (on a GPU), fewer runs",
         "join": "J1 and J2 only, fewer runs",
         "merge": "the smaller N only", "groupby": "the smaller N only"}
DEFAULT_RUNS = {"map": "GPU 9, --quick 5; CPU 5, its peers 3",
                "cache": "5, 3 with --quick", "join": "5, 3 with --quick", "merge": "3",
                "groupby": "3"}
PLOTS = {"map": "throughput against load (GPU only)",
         "cache": "throughput against load (GPU only)",
         "join": "each join's time beside its peers'",
         "merge": "each question's time beside its peers'",
         "groupby": "each question's time beside its peers'"}
