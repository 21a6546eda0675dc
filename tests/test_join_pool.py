"""The build tables gh.join keeps for its next join of the same size (_join_pool): a kept
table must hold nothing of the join before it, whatever path that join took (direct array,
hash table, groups of repeated keys, nulls), from several threads at once; tables are kept a
stream, only small CUDA tables and the newest four, and prepared builds and partitioned
joins make their own."""

from __future__ import annotations

import threading

import pytest
import torch

import gpuhash as gh
from gpuhash.join import pool as _join_pool

HOWS = ["inner", "left", "right", "full", "semi", "anti"]
ROWS = 6_000  # every build side below: one spec, so each join takes the table of the last


def pairs(result, how) -> torch.Tensor:
    """The result's rows, or its (left, right) pairs as one sorted int64 each (rows stay below
    2**31 here), on the CPU: comparable with torch.equal, fast for a million pairs."""
    if how in ("semi", "anti"):
        return result.cpu().sort().values
    left, right = result
    return (left.cpu() * 2**32 + right.cpu()).sort().values


def build_sides(generator: torch.Generator):
    """Build keys of ROWS rows that take each path of the join build in turn."""
    dense = torch.randperm(ROWS, generator=generator).to(torch.int32)  # the direct array
    sparse = (torch.randperm(ROWS, generator=generator) * 7919).to(torch.int32)  # hash table
    repeated = torch.randint(0, 300, (ROWS,), generator=generator, dtype=torch.int32)  # groups
    hot = torch.where(torch.rand(ROWS, generator=generator) < 0.05, 11, dense)  # big group
    return [dense, sparse, repeated, hot, dense]


def probe_for(build: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Probe keys, about half of them from the build side."""
    drawn = build[torch.randint(0, ROWS, (ROWS * 2,), generator=generator)]
    other = torch.randint(-50_000, 50_000, (ROWS * 2,), generator=generator, dtype=torch.int32)
    return torch.where(torch.rand(ROWS * 2, generator=generator) < 0.5, drawn, other)


@pytest.mark.gpu
@pytest.mark.parametrize("how", HOWS)
def test_a_kept_table_holds_nothing_of_the_last_join(how):
    generator = torch.Generator().manual_seed(HOWS.index(how))
    gh.clear_join_cache()
    kept = []  # held, so no two of them can share an id
    for build in build_sides(generator):
        probe = probe_for(build, generator)
        valid = torch.rand(build.shape[0], generator=generator) > 0.05
        expected = pairs(gh.join(probe, build, how=how, right_valid=valid), how)
        got = gh.join(probe.cuda(), build.cuda(), how=how, right_valid=valid.cuda())
        assert torch.equal(pairs(got, how), expected)
        assert len(_join_pool._KEPT) == 1, "a small GPU join hands its table back"
        kept.append(next(iter(_join_pool._KEPT.values()))[0])
    # one spec for all five joins: each took the table the one before handed back
    assert len({id(multi) for multi in kept}) == 1


@pytest.mark.gpu
def test_threads_joining_at_once_each_get_a_table_of_their_own():
    generator = torch.Generator().manual_seed(7)
    work = []
    for build in build_sides(generator) * 3:
        probe = probe_for(build, generator)
        work.append((probe, build, pairs(gh.join(probe, build), "inner")))
    failures: list[str] = []

    def run(jobs):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(4):
                for probe, build, expected in jobs:
                    got = pairs(gh.join(probe.cuda(), build.cuda()), "inner")
                    if not torch.equal(got, expected):
                        failures.append(f"{len(got)} pairs against {len(expected)}")

    threads = [threading.Thread(target=run, args=(work[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


@pytest.mark.gpu
def test_only_small_gpu_tables_are_kept_and_the_newest_four(monkeypatch):
    gh.clear_join_cache()
    monkeypatch.setattr(_join_pool, "POOL_TABLE_BYTES", 1 << 10)
    build = torch.arange(ROWS, dtype=torch.int32)
    gh.join(build.cuda(), build.cuda())
    assert not _join_pool._KEPT
    monkeypatch.undo()
    sizes = [ROWS * 2**i for i in range(_join_pool.POOL_TABLES + 1)]  # a spec each
    for rows in sizes:
        keys = torch.arange(rows, dtype=torch.int32).cuda()
        gh.join(keys, keys)
    kept = [key[4] for key in _join_pool._KEPT]  # spare words: one value a size
    assert len(kept) == _join_pool.POOL_TABLES
    keys = torch.arange(sizes[0], dtype=torch.int32).cuda()
    gh.join(keys, keys)  # the oldest was dropped: this one comes back in place of the next
    assert len(_join_pool._KEPT) == _join_pool.POOL_TABLES
    assert [key[4] for key in _join_pool._KEPT][:-1] == kept[1:]
    gh.clear_join_cache()
    assert not _join_pool._KEPT


@pytest.mark.gpu
def test_tables_are_kept_a_stream():
    gh.clear_join_cache()
    keys = torch.arange(ROWS, dtype=torch.int32).cuda()
    gh.join(keys, keys)
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        left, right = gh.join(keys, keys)  # does not take the default stream's table
        assert torch.equal(left.sort().values, right.sort().values)
    streams = {key[1] for key in _join_pool._KEPT}
    assert len(_join_pool._KEPT) == 2 and other.cuda_stream in streams


@pytest.mark.gpu
def test_prepared_builds_and_partitioned_joins_make_their_own_tables():
    gh.clear_join_cache()
    keys = torch.arange(ROWS, dtype=torch.int32).cuda()
    gh.join(keys, keys)
    (key, (kept, _)), = _join_pool._KEPT.items()
    prepared = gh.JoinBuild(keys)
    for _ in range(3):
        left, right = prepared.probe(keys)
        assert torch.equal(left.sort().values, right.sort().values)
    assert gh.explain_join(keys, keys, memory_budget=60_000).strategy == "hash-partitioned"
    left, right = gh.join(keys, keys, memory_budget=60_000)
    assert torch.equal(left.sort().values, right.sort().values)
    assert list(_join_pool._KEPT) == [key] and _join_pool._KEPT[key][0] is kept


def test_cpu_joins_keep_no_table():
    gh.clear_join_cache()
    keys = torch.arange(ROWS, dtype=torch.int32)
    for how in HOWS:
        gh.join(keys, keys, how=how)
    assert not _join_pool._KEPT
