"""CacheMap over every value dtype torch has (unsigned and float8 ones included, which torch
lacks fill and addition kernels for), and the custom policy's scores on a scoring lookup:
paths a new user took that the model tests did not (found by an exploratory review)."""

from __future__ import annotations

import pytest
import torch

import gpuhash as gh

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
DTYPES = [torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.int8, torch.int64,
          torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.bool]
NO_ADDITION = (torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)


def _bits(values: torch.Tensor) -> list:
    """Values as comparable Python numbers (bit patterns for the dtypes torch cannot compare)."""
    wide = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[values.element_size()]
    return values.cpu().view(wide).tolist()


def _rows(count: int, dtype: torch.dtype, start: int) -> torch.Tensor:
    return (torch.arange(start, start + 2 * count) % 7).view(count, 2).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_value_dtype_is_stored_found_grown_exported_and_saved(dtype, device, tmp_path):
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=dtype, value_shape=(2,),
                        capacity=256, initial_capacity=16, device=device)
    keys = torch.arange(100, device=device)
    values = _rows(100, dtype, 3).to(device)
    cache.insert_or_assign(keys, values)  # grows from 16 slots on the way
    assert len(cache) == 100
    found, hit = cache.find(torch.tensor([5, 1000], device=device))
    assert hit.tolist() == [True, False]
    assert _bits(found) == _bits(torch.stack([values[5].cpu(), torch.zeros(2).to(dtype)]))
    got_keys, got_values, _ = cache.export()
    order = got_keys.cpu().argsort()  # indexed on the CPU: torch's CUDA index has no uint kernels
    assert _bits(got_values.cpu()[order]) == _bits(values)
    path = tmp_path / "cache.ghc"
    cache.save(path)
    loaded = gh.CacheMap.load(path, device=device)
    assert _bits(loaded.find(keys)[0]) == _bits(values)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_accum_or_assign_adds_every_addable_dtype_and_refuses_the_others_unchanged(dtype,
                                                                                 device):
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=dtype, value_shape=(2,),
                        capacity=64, device=device)
    start = _rows(2, dtype, 1).to(device)
    cache.insert_or_assign(torch.tensor([1, 2], device=device), start)
    before = [_bits(t) if t.dtype != torch.int64 else t.tolist() for t in cache.export()]
    keys = torch.tensor([1, 3, 2], device=device)
    given = _rows(3, dtype, 4).to(device)
    accumulate = torch.tensor([True, False, False], device=device)
    if dtype in NO_ADDITION:
        with pytest.raises(TypeError, match=str(dtype)):
            cache.accum_or_assign(keys, given, accumulate)
        assert [_bits(t) if t.dtype != torch.int64 else t.tolist()
                for t in cache.export()] == before
        return
    status = cache.accum_or_assign(keys, given, accumulate)
    # key 2's row does not accumulate and finds its key: left as it was (HierarchicalKV's rule)
    assert status.tolist() == [gh.ASSIGNED, gh.INSERTED, gh.SKIPPED]
    want = torch.stack([start[0].cpu().double() + given[0].cpu().double(),
                        start[1].cpu().double(), given[1].cpu().double()]).to(dtype)
    assert _bits(cache.find(torch.tensor([1, 2, 3], device=device))[0]) == _bits(want)


@pytest.mark.parametrize("device", DEVICES)
def test_a_scoring_lookup_leaves_custom_scores_as_the_caller_set_them(device):
    """Under policy custom a score comes only from the caller's scores=: find and find_index
    with update_scores leave it (the policy's rule has no score to give them)."""
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
                        policy="custom", device=device)
    cache.insert_or_assign(torch.tensor([1, 2], device=device), torch.zeros(2, device=device),
                           scores=torch.tensor([100, 50], device=device))
    cache.find(torch.tensor([1], device=device), update_scores=True)
    cache.find_index(torch.tensor([2], device=device), update_scores=True)
    keys, _, scores = cache.export()
    assert dict(zip(keys.tolist(), scores.tolist())) == {1: 100, 2: 50}
    assert cache.erase_if(max_score=0) == 0


def test_a_bad_init_is_named_init_and_a_fraction_for_integer_values_is_refused():
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.int8, capacity=64)
    keys = torch.tensor([1, 2])
    with pytest.raises(ValueError, match="^init has 3 rows but keys has 2"):
        cache.find_or_insert(keys, init=torch.zeros(3, dtype=torch.int8))
    for bad in (1.5, 300):
        with pytest.raises(ValueError, match=f"^init {bad}"):
            cache.find_or_insert(keys, init=bad)
        with pytest.raises(ValueError, match=f"^default {bad}"):
            cache.find(keys, default=bad)
    assert len(cache) == 0
    cache.find_or_insert(keys, init=2.0)  # a whole number is taken
    assert cache.find(keys)[0].tolist() == [2, 2]


def test_a_device_neither_cpu_nor_cuda_is_refused_up_front():
    with pytest.raises(ValueError, match="neither a CPU nor a CUDA device"):
        gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
                    device="meta")
    with pytest.raises(ValueError, match="neither a CPU nor a CUDA device"):
        gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, device="meta")
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
    with pytest.raises(ValueError, match="neither a CPU nor a CUDA device"):
        cache.to("meta")
