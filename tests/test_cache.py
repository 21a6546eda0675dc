"""CacheMap on the CPU engine: the model of tests/model_cache.py slot by slot for every policy,
eviction quality, and the error paths (a clear message, the cache unchanged)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings
from model_cache import make_cache_machine

import gpuhash as gh
from gpuhash._cache_format import POLICIES
from gpuhash._format import _checksum as gpuhash_checksum

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("policy", POLICIES)
def test_cache_matches_its_model_slot_by_slot(policy):
    machine = make_cache_machine(policy=policy, device="cpu", exact=True)
    machine.TestCase.settings = settings(max_examples=30, stateful_step_count=15, **SETTINGS)
    machine.TestCase().runTest()


def test_the_readme_training_loop_runs():
    """The README's dynamic-embedding example, as written (on the CPU here)."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    loop = next(b for b in blocks if "find_or_insert_index(ids" in b)
    scope: dict = {}
    exec(compile(loop, "README.md", "exec"), scope)
    table = scope["table"]
    assert 0 < len(table) <= table.capacity
    assert bool(table.values.abs().sum() > 0)  # the sparse steps wrote back


def test_bad_cache_input_names_the_problem_and_changes_nothing():
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
                        capacity=64)
    cache.insert_or_assign(torch.tensor([1, 2]), torch.ones(2, 2))
    before = [t.clone() for t in cache._state.tensors().values()]
    cases = [
        (lambda: cache.insert_or_assign(torch.tensor([1], dtype=torch.int32), torch.ones(1, 2)),
         TypeError, "key_dtype"),
        (lambda: cache.insert_or_assign(torch.tensor([1]), torch.ones(1, 3)), ValueError,
         "shape"),
        (lambda: cache.insert_or_assign(torch.tensor([1]), torch.ones(1, 2),
                                        scores=torch.tensor([5])), ValueError, "custom"),
        (lambda: cache.set_global_epoch(-1), ValueError, "epoch"),
        (lambda: cache.accum_or_assign(torch.tensor([1]), torch.ones(1, 2), torch.tensor([1])),
         ValueError, "accumulate"),
        (lambda: cache.erase_if(max_score=-3), ValueError, "max_score"),
        (lambda: cache.export(offset=10**9), ValueError, "offset"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert all(torch.equal(a, b) for a, b in zip(before, cache._state.tensors().values()))
    custom = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
                         policy="custom")
    with pytest.raises(ValueError, match="needs scores"):
        custom.insert_or_assign(torch.tensor([1]), torch.ones(1))
    with pytest.raises(ValueError, match="bucket_slots"):
        gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
                    bucket_slots=8)
    with pytest.raises(NotImplementedError, match="max_hbm_bytes"):
        gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
                    max_hbm_bytes=1)


def test_a_damaged_cache_file_is_refused_with_its_path(tmp_path):
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
    cache.insert_or_assign(torch.tensor([1, 2]), torch.ones(2))
    path = tmp_path / "c.pt"
    cache.save(path)
    payload = torch.load(path, weights_only=True)
    free = int(torch.nonzero(payload["tensors"]["keys"] == -1)[0])
    payload["tensors"]["digests"][free] = 7  # a used slot's digest on a free slot
    payload["checksum"] = gpuhash_checksum(payload["tensors"])
    torch.save(payload, path)
    with pytest.raises(ValueError, match=str(path)):
        gh.CacheMap.load(path)
    (tmp_path / "text.pt").write_text("not a cache")
    with pytest.raises(ValueError, match="text.pt"):
        gh.CacheMap.load(tmp_path / "text.pt")
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
    table.save(tmp_path / "map.pt")
    with pytest.raises(ValueError, match="not a CacheMap"):
        gh.CacheMap.load(tmp_path / "map.pt")
    with pytest.raises(ValueError, match="holds a CacheMap, not a HashMap"):
        gh.HashMap.load(tmp_path / "c.pt")
