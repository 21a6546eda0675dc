"""Structures shared between Python threads, as a dict is: every operation is atomic with
respect to the others on the same structure, growth included, and nothing is lost. Threads
insert their own keys into one table (growing from a small capacity), or fold rows of shared
keys, and the result must equal what a serial run gives; on both engines."""

from __future__ import annotations

import threading

import pytest
import torch

import gpuhash as gh

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
THREADS, BATCHES, ROWS = 4, 30, 256


def _skip_without(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


def _run_threads(work) -> None:
    """Run ``work(thread)`` in THREADS threads started together; re-raise any error."""
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def body(thread: int) -> None:
        try:
            start.wait()
            work(thread)
        except BaseException as error:  # noqa: BLE001  (handed to the test's thread)
            errors.append(error)

    threads = [threading.Thread(target=body, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _keys_of(thread: int, batch: int, device: str) -> torch.Tensor:
    first = (thread * BATCHES + batch) * ROWS
    return torch.arange(first, first + ROWS, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["HashMap", "HashSet", "MultiMap"])
def test_threads_inserting_their_own_keys_lose_none(kind, device):
    _skip_without(device)
    if kind == "HashMap":
        table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=64,
                           device=device)
    elif kind == "HashSet":
        table = gh.HashSet(key_dtype=torch.int64, capacity=64, device=device)
    else:
        table = gh.MultiMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=64,
                            device=device)

    def work(thread: int) -> None:
        for batch in range(BATCHES):
            keys = _keys_of(thread, batch, device)
            if kind == "HashSet":
                table.insert(keys)
            else:
                table.insert(keys, keys * 3)
            assert bool(table.contains(keys).all())  # its own write, seen at once

    _run_threads(work)
    everything = torch.arange(THREADS * BATCHES * ROWS, device=device)
    assert len(table) == everything.shape[0]
    if kind == "HashMap":
        values, found = table.find(everything)
        assert bool(found.all()) and torch.equal(values, everything * 3)
    elif kind == "MultiMap":
        assert bool((table.count(everything) == 1).all())
    else:
        assert bool(table.contains(everything).all())


@pytest.mark.parametrize("device", DEVICES)
def test_threads_folding_shared_keys_count_every_row(device):
    _skip_without(device)
    table = gh.HashMap(key_dtype=torch.int32, value_dtype=torch.int64, capacity=16,
                       device=device)
    shared = torch.arange(1000, dtype=torch.int32, device=device)

    def work(thread: int) -> None:
        for _ in range(BATCHES):
            table.insert_or_apply(shared, torch.ones(1000, dtype=torch.int64, device=device))
            table.erase(shared[:0])  # an empty write between folds changes nothing

    _run_threads(work)
    values, found = table.find(shared)
    assert bool(found.all()) and bool((values == THREADS * BATCHES).all())


@pytest.mark.parametrize("device", DEVICES)
def test_threads_sharing_a_growing_cache_find_their_own_batches(device):
    _skip_without(device)
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
                        capacity=1 << 16, initial_capacity=512, device=device)

    def work(thread: int) -> None:
        for batch in range(BATCHES):
            keys = _keys_of(thread, batch, device)
            values = keys[:, None].float().expand(-1, 2).contiguous()
            cache.insert_or_assign(keys, values)
            got, found = cache.find(keys)
            assert bool(found.all()) and torch.equal(got, values)

    _run_threads(work)
    assert len(cache) == THREADS * BATCHES * ROWS
    keys, _, _ = cache.export()
    assert keys.shape[0] == len(cache)


@pytest.mark.parametrize("device", DEVICES)
def test_threads_mixing_reads_and_writes_on_shared_keys_keep_a_serial_outcome(device):
    """Each thread inserts a key range, reads it back and erases its odd keys; ranges
    overlap between neighbours, so reads and writes of shared keys interleave. Every
    outcome a serial order could give ends with the same set: the even keys of every range."""
    _skip_without(device)
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=32,
                       device=device)

    def work(thread: int) -> None:
        keys = torch.arange(thread * 500, thread * 500 + 1000, device=device)
        for _ in range(10):
            table.insert(keys, keys)
            values, found = table.find(keys)
            assert bool((values[found] == keys[found]).all())
        table.erase(keys[keys % 2 == 1].contiguous())

    _run_threads(work)
    span = torch.arange(0, (THREADS - 1) * 500 + 1000, device=device)
    found = table.contains(span)
    assert torch.equal(found, span % 2 == 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("refit", [False, True])
def test_threads_probing_one_prepared_build_get_the_serial_answers(refit, device):
    """``refit``: int32 keys holding the type's largest value, which the first probe finds
    the build table lacks and rebuilds: here several threads' first probes at once."""
    _skip_without(device)
    generator = torch.Generator().manual_seed(3)
    right = torch.randint(0, 5000, (20_000,), generator=generator)
    if refit:
        right = right.to(torch.int32)
        right[:3] = 2**31 - 1
    right = right.to(device)
    lefts = [torch.randint(0, 6000, (5000,), generator=generator).to(right.dtype).to(device)
             for _ in range(THREADS)]
    for left in lefts:
        left[:5] = 2**31 - 1

    def pairs(left, on=None):
        got = (on or build).probe(left, how="inner")
        return sorted(zip(got[0].tolist(), got[1].tolist()))

    expected = [pairs(left, gh.JoinBuild(right)) for left in lefts]  # a build of its own each
    build = gh.JoinBuild(right)  # its first probes come from the threads
    results: dict[int, list] = {}

    def work(thread: int) -> None:
        for _ in range(5):
            results[thread] = pairs(lefts[thread])
            assert results[thread] == expected[thread]

    _run_threads(work)
