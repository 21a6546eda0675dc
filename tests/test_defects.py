"""Defects found by review and by running peers' cases, each pinned by the case that showed it:
value rows of one element, multi-column join keys whose combined span passes 64 bits, a
MultiMap's contains on CUDA, and torch's thread count kept across the CPU engine's start."""

from __future__ import annotations

import pytest
import torch

import gpuhash as gh

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _skip_without(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1,), (1, 1)])
def test_cache_rows_of_one_element_write_find_and_init(shape, device):
    _skip_without(device)
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=shape,
                        capacity=256, device=device)
    keys = torch.arange(5, device=device)
    cache.insert_or_assign(keys, torch.full((5, *shape), 4.0, device=device))
    values, found = cache.find(torch.arange(7, device=device), default=-1.0)
    assert found.tolist() == [True] * 5 + [False] * 2
    assert values.reshape(-1).tolist() == [4.0] * 5 + [-1.0] * 2
    values, found = cache.find_or_insert(torch.tensor([3, 9], device=device), init=2.0)
    assert values.reshape(-1).tolist() == [4.0, 2.0] and found.tolist() == [True, False]


@pytest.mark.parametrize("device", DEVICES)
def test_multi_column_keys_past_64_bits_of_span_match_only_equal_keys(device):
    _skip_without(device)

    def t(values):
        return torch.tensor(values, device=device)

    build = gh.JoinBuild((t([0, 1, 2, 3, 4]), t([2**62 - 1] * 3 + [5, 0])))
    left, right = build.probe((t([0, 4]), t([0, 0])))
    assert sorted(zip(left.tolist(), right.tolist())) == [(1, 4)]
    left, right = gh.join((t([0, 4, 1, 3]), t([0, 0, 2**62 - 1, 5])),
                          (t([0, 1, 2, 3, 4]), t([2**62 - 1] * 3 + [5, 0])))
    assert sorted(zip(left.tolist(), right.tolist())) == [(1, 4), (2, 1), (3, 3)]


@pytest.mark.gpu
def test_multimap_contains_on_cuda_answers_as_on_the_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    keys = torch.tensor([1, 1, 5, 9], dtype=torch.int64)
    queries = torch.tensor([1, 2, 5, 9, 10])
    answers = []
    for device in ("cpu", "cuda"):
        table = gh.MultiMap(key_dtype=torch.int64, device=device)
        table.insert(keys.to(device))
        answers.append(table.contains(queries.to(device)).cpu().tolist())
    assert answers[0] == answers[1] == [True, False, True, True, False]


@pytest.mark.parametrize("make", [
    lambda: gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32,
                       value_shape=(10**6, 10**6)),
    lambda: gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(4096,),
                       capacity=2_000_000_000),
    lambda: gh.MultiMap(key_dtype=torch.int32, value_dtype=torch.float64, value_shape=(4096,),
                        capacity=100_000_000),
    lambda: gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(4096,),
                        capacity=2**33),
])
def test_a_size_past_the_devices_memory_names_the_argument_and_the_bytes(make):
    with pytest.raises(MemoryError, match=r"capacity=\d+ .*needs \d+ bytes of cpu memory; "
                                          r"\d+ are free"):
        make()


def test_a_reserve_past_memory_leaves_the_table_unchanged():
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(4096,))
    table.insert(torch.arange(10), torch.ones(10, 4096))
    capacity = table.capacity
    with pytest.raises(MemoryError, match="the table is unchanged"):
        table.reserve(2_000_000_000)
    assert table.capacity == capacity and len(table) == 10
    assert bool(table.find(torch.arange(10))[1].all())


def test_the_cpu_engine_keeps_the_users_torch_thread_count():
    """numba's OpenMP pool, as it starts, set the OpenMP runtime's thread count, which torch
    shares: a user's torch.set_num_threads(1) was undone by the first CPU group-by. Run in a
    fresh process, where the pool has not started."""
    import subprocess
    import sys

    script = (
        "import torch, gpuhash as gh\n"
        "torch.set_num_threads(1)\n"
        "keys = torch.zeros(100_000, dtype=torch.int32)\n"
        "gh.groupby({'k': keys, 'v': torch.ones(100_000)}, 'k', {'v': 'sum'}, device='cpu')\n"
        "m = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, device='cpu')\n"
        "m.insert(torch.arange(200_000), torch.arange(200_000))\n"
        "print(torch.get_num_threads())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=True)
    assert done.stdout.split()[-1] == "1"
