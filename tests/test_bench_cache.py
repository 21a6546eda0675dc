"""`gpuhash bench cache`'s workload on the CPU engine: every call meets the cache at the load
its row is labelled with (below full load a timed write's new keys are erased after its
timing; the full cache stays full), and every API gets a figure."""

import math

import torch

from gpuhash.bench import cache_suite


def test_each_load_row_ends_at_the_entries_it_began_with():
    capacity, batch = 1 << 14, 1 << 10
    out = cache_suite.workload(8, capacity, torch.device("cpu"), batch=batch, runs=1,
                               bucket_slots=128)
    rows = out["loads"]
    assert rows["0.5"]["entries_before"] == rows["0.5"]["entries_after"] == capacity // 2
    assert rows["0.75"]["entries_before"] == rows["0.75"]["entries_after"] == capacity * 3 // 4
    assert rows["1.0"]["entries_after"] == capacity
    for row in rows.values():
        assert row["present_found"] > 0.99
        for api in cache_suite.APIS:
            assert row[api]["bkv_per_s"] > 0
            assert math.isnan(row[api]["event_ms"])  # no CUDA events on the CPU
