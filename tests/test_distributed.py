"""The sharded tables (gh.distributed) on worlds of 2 and 4 CPU processes over gloo, checked
against one single-process table fed every rank's batch concatenated in rank order (the order
the sharded tables document).

Every rank draws every rank's batches from one seed, so each rank builds the same model and
checks its own answers itself. Each world runs in spawned processes with a time limit
(tests/distributed_worlds.py): a rank that fails reports its traceback, and a rank that hangs
fails the test instead of the run.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from distributed_worlds import every_rank, gathered, mine, run_world, values_for

import gpuhash as gh


# --- scenarios (run in the children) ----------------------------------------------------------
def map_operations(rank: int, world: int, folder: str) -> None:
    from gpuhash.distributed import ShardedHashMap, owner_of

    table = ShardedHashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
                           capacity=16)  # small: the shards grow
    model = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,))
    for step in range(3):
        parts = every_rank(step, world)
        keys = torch.cat(parts)
        inserted = table.insert(parts[rank], values_for(parts[rank], step))
        expected = model.insert(keys, values_for(keys, step))
        assert inserted.tolist() == expected[mine(parts, rank)].tolist(), step
    assert len(table) == len(model)

    probe = every_rank(7, world, high=260)
    values, found = table.find(probe[rank], default=-5.0)
    want, want_found = model.find(probe[rank], default=-5.0)
    assert torch.equal(found, want_found) and torch.equal(values, want)
    assert table.contains(probe[rank]).tolist() == want_found.tolist()

    keys, values = table.items()  # this rank's shard: its keys, every key once over ranks
    assert bool((owner_of(keys, world) == rank).all())
    everything = {k: v for part in gathered((keys.tolist(), values.tolist()))
                  for k, v in zip(*part)}
    model_keys, model_values = model.items()
    assert everything == dict(zip(model_keys.tolist(), model_values.tolist()))

    gone = every_rank(8, world)
    erased = table.erase(gone[rank])
    erased_keys = {k for part in gathered(gone[rank][erased].tolist()) for k in part}
    all_gone = torch.cat(gone)
    model_erased = model.erase(all_gone)
    assert erased_keys == set(all_gone[model_erased].tolist())
    assert int(erased.sum()) == len(set(gone[rank][erased].tolist()))  # one row a key
    assert len(table) == len(model)

    counts = ShardedHashMap(key_dtype=torch.int32, value_dtype=torch.int64)
    counted = gh.HashMap(key_dtype=torch.int32, value_dtype=torch.int64)
    for step in range(2):
        parts = every_rank(step, world, high=30, dtype=torch.int32)
        ones = torch.ones(parts[rank].shape[0], dtype=torch.int64)
        new = counts.insert_or_apply(parts[rank], ones, op="add")
        all_keys = torch.cat(parts)
        counted.insert_or_apply(all_keys, torch.ones(all_keys.shape[0], dtype=torch.int64))
        assert sum(gathered(int(new.sum()))) <= len(counted)
    probe = torch.arange(-31, 31, dtype=torch.int32)
    assert torch.equal(counts.find(probe)[0], counted.find(probe)[0])
    mins = ShardedHashMap(key_dtype=torch.int64, value_dtype=torch.float64)
    parts = every_rank(4, world, high=20)
    mins.insert_or_apply(parts[rank], parts[rank].double() * (rank + 1), op="min")
    model_min = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float64)
    for r, part in enumerate(parts):
        model_min.insert_or_apply(part, part.double() * (r + 1), op="min")
    probe = torch.arange(-20, 20)
    assert torch.equal(mins.find(probe)[0], model_min.find(probe)[0])


def set_operations(rank: int, world: int, folder: str) -> None:
    import numpy as np

    from gpuhash.distributed import ShardedHashSet

    for dtype in (torch.uint64, torch.int32):
        table = ShardedHashSet(key_dtype=dtype)
        model = gh.HashSet(key_dtype=dtype)
        parts = every_rank(2, world, dtype=dtype)
        assert table.insert(parts[rank]).tolist() == model.insert(
            torch.cat(parts))[mine(parts, rank)].tolist()
        assert len(table) == len(model)
        probe = every_rank(3, world, dtype=dtype)[rank]
        assert table.contains(probe).tolist() == model.contains(probe).tolist()
    # NumPy in, NumPy out, as the single table
    answer = table.contains(np.array([1, 2], dtype=np.int32))
    assert isinstance(answer, np.ndarray)


def bad_input(rank: int, world: int, folder: str) -> None:
    from gpuhash.distributed import PeerError, ShardedHashMap

    table = ShardedHashMap(key_dtype=torch.int64, value_dtype=torch.float32)
    keys = torch.arange(rank * 10, rank * 10 + 10)

    def expect(error_here, call) -> str:
        try:
            call()
        except error_here as caught:
            return str(caught)
        raise AssertionError("the call did not raise")

    # a wrong key dtype on rank 1 only: rank 1 gets the single table's error, the others a
    # PeerError quoting it, and no shard changed
    bad = keys.int() if rank == 1 else keys
    message = expect(TypeError if rank == 1 else PeerError,
                     lambda: table.insert(bad, torch.ones(10)))
    assert "dtype" in message
    assert len(table) == 0
    # values of the wrong shape on the last rank
    rows = 9 if rank == world - 1 else 10
    expect(ValueError if rank == world - 1 else PeerError,
           lambda: table.insert(keys, torch.ones(rows)))
    # a default that does not fit, on rank 0
    expect(ValueError if rank == 0 else PeerError,
           lambda: table.find(keys, default=[1.0, 2.0] if rank == 0 else 0.0))
    # options that differ between ranks: every rank raises the same error
    expect(ValueError, lambda: table.insert_or_apply(keys, torch.ones(10),
                                                     op="min" if rank == 0 else "max"))
    # the ranks are still in step: a sound call works
    assert table.insert(keys, torch.ones(10)).all()
    assert len(table) == 10 * world

    # a full shard while applying (growable=False): that owner's error, a PeerError elsewhere
    small = ShardedHashMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
                           growable=False)
    many = torch.arange(rank * 100_000, rank * 100_000 + (500 if rank == 0 else 1))
    try:
        small.insert(many, torch.ones(many.shape[0]))
    except (gh.TableFullError, PeerError):
        pass
    else:
        raise AssertionError("the full shard did not raise")
    assert small.contains(torch.arange(3)).shape == (3,)  # still in step

    # a constructor refused on one rank raises on every rank
    expect(ValueError if rank == 1 else PeerError,
           lambda: ShardedHashMap(key_dtype=torch.int64, value_dtype=torch.float32,
                                  max_load_factor=2.0 if rank == 1 else 0.9))
    # options that differ: a ValueError everywhere
    expect(ValueError, lambda: ShardedHashMap(key_dtype=torch.int64,
                                              value_dtype=torch.float32 if rank else torch.int32))


def save_map(rank: int, world: int, folder: str) -> None:
    from gpuhash.distributed import ShardedCacheMap, ShardedHashMap, ShardedHashSet

    table = ShardedHashMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(2,))
    parts = every_rank(0, world, high=1000)
    table.insert(parts[rank].to(torch.uint64), values_for(parts[rank], 0))
    table.save(os.path.join(folder, "map"))
    keys = ShardedHashSet(key_dtype=torch.int32)
    keys.insert(parts[rank].to(torch.int32))
    keys.save(os.path.join(folder, "set"))
    cache = ShardedCacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(4,),
                            capacity=1024, policy="custom")
    cache.insert_or_assign(parts[rank], torch.ones(parts[rank].shape[0], 4) * rank,
                           scores=parts[rank] + 1000)
    cache.save(os.path.join(folder, "cache"))


def load_map(rank: int, world: int, folder: str) -> None:
    from gpuhash.distributed import ShardedCacheMap, ShardedHashMap, ShardedHashSet, owner_of

    folder = os.path.join(os.path.dirname(folder), "saving")  # what save_map wrote
    saved = every_rank(0, 2, high=1000)
    model = gh.HashMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(2,))
    every = torch.cat(saved)
    model.insert(every.to(torch.uint64), values_for(every, 0))
    table = ShardedHashMap.load(os.path.join(folder, "map"))
    assert len(table) == len(model)
    keys, values = table.items()
    assert bool((owner_of(keys, world) == rank).all())
    want, found = model.find(keys)
    assert bool(found.all()) and torch.equal(values, want)
    probe = torch.arange(-1000, 1000).to(torch.uint64)
    assert torch.equal(table.find(probe)[0], model.find(probe)[0])
    assert table.insert(torch.tensor([5000 + rank], dtype=torch.uint64), torch.ones(1, 2)).all()

    keys = ShardedHashSet.load(os.path.join(folder, "set"))
    assert len(keys) == len(set(every.tolist()))
    assert bool(keys.contains(every.to(torch.int32)).all())

    cache = ShardedCacheMap.load(os.path.join(folder, "cache"))
    assert cache.local.policy == "custom"
    stored, stored_values, scores = cache.export()
    assert bool((owner_of(stored, world) == rank).all())
    assert torch.equal(scores.view(torch.int64), stored + 1000)  # scores kept
    last = {}
    for r, part in enumerate(saved):
        last.update(dict.fromkeys(part.tolist(), float(r)))  # the higher rank's row won
    for reserved in (-1, -2):  # the two keys a cache refuses
        last.pop(reserved, None)
    assert len(cache) == len(last)
    values, found = cache.find(torch.tensor(sorted(last)))
    assert bool(found.all()) and values[:, 0].tolist() == [last[k] for k in sorted(last)]


def cache_operations(rank: int, world: int, folder: str) -> None:
    from gpuhash.distributed import ShardedCacheMap

    dim = 8
    table = ShardedCacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=dim,
                            capacity=4096)
    model = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=dim,
                        capacity=8192)
    # find_or_insert of a deduplicated id batch per rank, a scalar init differing by rank
    parts = [torch.unique(p) for p in every_rank(0, world)]
    rows, found = table.find_or_insert(parts[rank], init=float(rank))
    for r, part in enumerate(parts):  # the lowest rank's row of a key acts
        want_rows, want_found = model.find_or_insert(part, init=float(r))
        if r == rank:
            assert torch.equal(rows, want_rows) and torch.equal(found, want_found)
    # a row per key as init
    parts = every_rank(1, world)
    init = values_for(parts[rank], 1).repeat(1, dim // 2)
    rows, found = table.find_or_insert(parts[rank], init=init)
    every = torch.cat(parts)
    want_rows, want_found = model.find_or_insert(
        every, init=values_for(every, 1).repeat(1, dim // 2))
    assert torch.equal(rows, want_rows[mine(parts, rank)])
    assert torch.equal(found, want_found[mine(parts, rank)])
    # insert_or_assign: statuses as the single cache's on the concatenation
    parts = every_rank(2, world)
    every = torch.cat(parts)
    status = table.insert_or_assign(parts[rank], torch.full((parts[rank].shape[0], dim), 7.0))
    want = model.insert_or_assign(every, torch.full((every.shape[0], dim), 7.0))
    assert status.tolist() == want[mine(parts, rank)].tolist()
    probe = every_rank(3, world, high=260)[rank]
    values, found = table.find(probe, default=-1.0)
    want_values, want_found = model.find(probe, default=-1.0)
    assert torch.equal(values, want_values) and torch.equal(found, want_found)
    assert len(table) == len(model)
    # assign, accum_or_assign, contains, erase
    parts = every_rank(4, world)
    every = torch.cat(parts)
    assert table.assign(parts[rank], torch.zeros(parts[rank].shape[0], dim)).tolist() == \
        model.assign(every, torch.zeros(every.shape[0], dim))[mine(parts, rank)].tolist()
    adding = parts[rank] % 2 == 0
    status = table.accum_or_assign(parts[rank], torch.ones(parts[rank].shape[0], dim), adding)
    want = model.accum_or_assign(every, torch.ones(every.shape[0], dim), every % 2 == 0)
    assert status.tolist() == want[mine(parts, rank)].tolist()
    assert torch.equal(table.find(probe)[0], model.find(probe)[0])
    assert table.contains(probe).tolist() == model.contains(probe).tolist()
    assert table.erase(parts[rank]).tolist() == model.erase(every)[mine(parts, rank)].tolist()
    assert len(table) == len(model)


# --- the tests --------------------------------------------------------------------------------
def cache_contracts(rank: int, world: int, folder: str) -> None:
    """find_or_insert refused on one rank, or with rows of init on one rank and a scalar on
    another, raises on every rank (one header size whatever a rank's input); insert_and_evict
    leaves every key given in some shard or in some rank's output, each refused row in its
    caller's."""
    from gpuhash.distributed import PeerError, ShardedCacheMap

    lru = ShardedCacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
    keys = torch.arange(10) + 100 * rank
    try:
        lru.find_or_insert(keys.float() if rank == 1 else keys, init=1.0)
        raise AssertionError("the call did not raise")
    except (TypeError, PeerError):
        pass
    try:
        init = torch.ones(10) if rank == 0 else 1.0
        lru.find_or_insert(keys, init=init)
        raise AssertionError("the call did not raise")
    except ValueError as caught:
        assert "options" in str(caught)
    assert len(lru) == 0
    assert lru.find_or_insert(keys, init=2.0)[0].tolist() == [2.0] * 10  # still in step
    # unique=True on one rank only: a ValueError everywhere, nothing written
    try:
        lru.insert_or_assign(keys, torch.ones(10), unique=rank == 0)
        raise AssertionError("the call did not raise")
    except ValueError as caught:
        assert "options" in str(caught)
    assert lru.find(keys)[0].tolist() == [2.0] * 10
    # keys unique over every rank's batch, declared so: the same answers as without
    ids = torch.arange(20) * world + rank
    statuses = lru.insert_or_assign(ids, ids.float(), unique=True)
    assert bool((statuses != gh.REFUSED).all())
    assert lru.assign(ids, ids.float() + 1, unique=True).all()
    got, found = lru.find_or_insert(ids, init=0.0, unique=True)
    assert bool(found.all()) and got.tolist() == (ids.float() + 1).tolist()
    cache = ShardedCacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
                            bucket_slots=16, policy="custom")
    given: dict[int, int] = {}
    out: dict[int, int] = {}
    for step in range(4):
        generator = torch.Generator().manual_seed(10 * step + rank)
        new = torch.randperm(5000, generator=generator)[:40] + 10_000 * (step * world + rank)
        scores = torch.randint(0, 100, (40,), generator=generator)
        status, (gone, _, gone_scores) = cache.insert_and_evict(new, torch.zeros(40),
                                                                scores=scores)
        mine_refused = set(new[status == gh.REFUSED].tolist())
        assert mine_refused <= set(gone.tolist())  # a caller's refused rows come back to it
        given.update(zip(new.tolist(), scores.tolist()))
        out.update(zip(gone.tolist(), gone_scores.view(torch.int64).tolist()))
    # filters over every shard: a bad one on one rank raises on all before any shard changes
    before = cache.size_if()
    assert before == len(cache)
    try:
        cache.erase_if(max_score=-1 if rank == 1 else 10)
        raise AssertionError("the call did not raise")
    except (ValueError, PeerError):
        pass
    assert cache.size_if() == before
    low = cache.size_if(max_score=10)
    assert cache.erase_if(max_score=10) == low and cache.size_if(max_score=10) == 0
    out = {k: s for k, s in out.items() if s > 10}  # the rest of the check: what stayed
    given = {k: s for k, s in given.items() if s > 10}
    everything_given = {k: v for part in gathered(given) for k, v in part.items()}
    everything_out = {k: v for part in gathered(out) for k, v in part.items()}
    kept = {k for part in gathered(cache.local.export()[0].tolist()) for k in part}
    assert kept | set(everything_out) == set(everything_given)
    assert all(everything_given[k] == s for k, s in everything_out.items())

    # a checkpoint of another layout restored: each rank's part of it goes to the owners,
    # entries keep their values and scores whatever the policy
    part = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
                       capacity=256, policy="custom")
    ids = torch.arange(30) * world + rank
    part.insert_or_assign(ids, torch.stack([ids.float(), -ids.float()], 1), scores=ids * 7)
    restored = ShardedCacheMap(key_dtype=torch.int64, value_dtype=torch.float32,
                               value_shape=(2,), capacity=1024, policy="lru")
    restored.merge_from(part)
    assert len(restored) == 30 * world
    got = {k: (s, v) for keys_, values_, scores_ in gathered(
        [t.tolist() for t in restored.export()]) for k, v, s in zip(keys_, values_, scores_)}
    assert got == {k: (7 * k, [float(k), -float(k)]) for k in range(30 * world)}


@pytest.mark.parametrize("world", [2, 4])
def test_a_sharded_map_answers_as_one_map_fed_every_batch_in_rank_order(world, tmp_path):
    run_world("test_distributed:map_operations", world, tmp_path)


def test_a_sharded_set_of_each_key_width(tmp_path):
    run_world("test_distributed:set_operations", 2, tmp_path)


@pytest.mark.parametrize("world", [2, 4])
def test_a_bad_batch_on_one_rank_raises_on_every_rank(world, tmp_path):
    run_world("test_distributed:bad_input", world, tmp_path)


@pytest.mark.parametrize("world", [2, 4])
def test_a_sharded_cache_answers_as_one_cache(world, tmp_path):
    run_world("test_distributed:cache_operations", world, tmp_path)


def test_a_sharded_cache_keeps_the_single_caches_contracts(tmp_path):
    run_world("test_distributed:cache_contracts", 2, tmp_path)


def test_saved_on_two_ranks_loads_on_four_one_and_two(tmp_path):
    run_world("test_distributed:save_map", 2, tmp_path / "saving")
    for world in (4, 1, 2):
        # reads tmp_path/saving
        run_world("test_distributed:load_map", world, tmp_path / f"loading{world}")


def out_of_memory(rank: int, world: int, folder: str) -> None:
    """A rank that cannot make room for a big call's rows (a table's insert, a group-by's
    exchange) raises, and so does every other rank: none is left waiting in the all-to-all.
    The table is unchanged, and the next calls work."""
    import pyarrow as pa

    from gpuhash.distributed import PeerError, ShardedHashMap
    from gpuhash.distributed import frames as _frames

    table = ShardedHashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=1 << 18)
    keys = torch.arange(40_000) * world + rank  # 40,000 rows a rank: past AGREED_ROWS

    def refuse(*args, **kwargs):
        raise RuntimeError("out of memory (simulated)")

    for target, name in ((torch.Tensor, "new_empty"), (_frames, "to_device")):
        real = getattr(target, name)
        if rank == 1:
            setattr(target, name, refuse)
        try:
            if name == "new_empty":
                table.insert(keys, keys)
            else:
                gh.distributed.groupby(pa.table({"k": keys.numpy() % 5000,
                                                 "v": keys.numpy()}), "k", {"v": "sum"},
                                       device="cpu")
            raise AssertionError("the call did not raise")
        except (RuntimeError, PeerError) as caught:
            assert "out of memory (simulated)" in str(caught), caught
        finally:
            setattr(target, name, real)
    assert len(table) == 0
    assert bool(table.insert(keys, keys).all()) and len(table) == 40_000 * world
    part = gh.distributed.groupby(pa.table({"k": keys.numpy() % 5000, "v": keys.numpy()}),
                                  "k", {"v": "sum"}, device="cpu")
    assert sum(gathered(part.num_rows)) == 5000


def test_a_rank_out_of_memory_raises_on_every_rank(tmp_path):
    run_world("test_distributed:out_of_memory", 2, tmp_path)


def test_a_rank_that_raises_outside_the_tables_is_reported(tmp_path):
    with pytest.raises(AssertionError, match="no_such_scenario"):
        run_world("test_distributed:no_such_scenario", 2, tmp_path)


# --- routing, without a process group ------------------------------------------------------------
def test_owners_are_even_and_independent_of_the_tables_buckets():
    from gpuhash._common.hashing import mix64
    from gpuhash.distributed import owner_of

    keys = torch.arange(200_000)
    owners = owner_of(keys, 4)
    counts = torch.bincount(owners, minlength=4)
    assert counts.min() > 49_000 and counts.max() < 51_000
    # one shard's keys fill the table's first buckets evenly (the table's seed, 1024 buckets)
    mine = keys[owners == 0]
    spec = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64).spec
    home = (mix64(mine ^ spec.signed_seed) & 0xFFFFFFFF) * 1024 >> 32
    per_bucket = torch.bincount(home, minlength=1024).float()
    assert per_bucket.std() < 1.2 * per_bucket.mean().sqrt()  # as for random buckets
    # a 32-bit key and its unsigned view have one owner
    small = torch.arange(-50, 50, dtype=torch.int32)
    assert torch.equal(owner_of(small, 3), owner_of(small.view(torch.uint32), 3))
    assert torch.equal(owner_of(small.view(torch.uint32), 3),
                       owner_of(small.to(torch.int64) & 0xFFFFFFFF, 3))
    with pytest.raises(ValueError, match="world_size"):
        owner_of(keys, 0)


def test_gpuhash_imports_the_distributed_package_on_first_use():
    code = ("import sys, gpuhash as gh; gh.HashMap; "
            "assert 'gpuhash.distributed' not in sys.modules; "
            "assert gh.distributed.ShardedHashMap.__name__ == 'ShardedHashMap'; "
            "assert 'distributed' in dir(gh)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr


def test_without_a_process_group_the_error_says_what_to_do():
    import torch.distributed as dist

    from gpuhash.distributed import ShardedHashSet

    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        ShardedHashSet(key_dtype=torch.int64)
