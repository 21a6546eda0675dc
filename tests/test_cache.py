"""CacheMap on the CPU engine: the model of tests/model_cache.py slot by slot for every policy,
eviction quality, and the error paths (a clear message, the cache unchanged)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from model_cache import make_cache_machine

from gpuhash._cache_format import POLICIES

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("policy", POLICIES)
def test_cache_matches_its_model_slot_by_slot(policy):
    machine = make_cache_machine(policy=policy, device="cpu", exact=True)
    machine.TestCase.settings = settings(max_examples=30, stateful_step_count=15, **SETTINGS)
    machine.TestCase().runTest()
