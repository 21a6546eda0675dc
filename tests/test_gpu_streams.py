"""Every structure orders its operations across streams by one helper (_common/streams.py):
an operation on one stream sees the writes queued on another, with no host synchronisation,
and a foreign stream the caller destroys between calls is never touched again."""

import pytest
import torch

import gpuhash as gh

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

SLEEP = 1_000_000_000  # cycles: a write queued behind it is still pending when the read comes


def _delayed(stream: torch.cuda.Stream) -> None:
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP)


def test_a_hash_map_read_on_another_stream_waits_for_the_write():
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1 << 17,
                       device="cuda")
    writer, reader = torch.cuda.Stream(), torch.cuda.Stream()
    keys = torch.arange(100_000, device="cuda")
    values = keys.float()
    torch.cuda.synchronize()
    _delayed(writer)
    table.insert(keys, values, stream=writer)
    got, found = table.find(keys, stream=reader)
    reader.synchronize()
    assert bool(found.all()) and torch.equal(got, values)


def test_a_write_on_another_stream_waits_for_reads_and_clear_takes_a_stream():
    table = gh.HashSet(key_dtype=torch.int32, capacity=1 << 17, device="cuda")
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    keys = torch.arange(100_000, dtype=torch.int32, device="cuda")
    table.insert(keys)
    torch.cuda.synchronize()
    _delayed(first)
    seen = table.contains(keys, stream=first)  # still queued when the clear comes
    table.clear(stream=second)
    second.synchronize()
    first.synchronize()
    assert bool(seen.all())
    assert len(table) == 0


def test_a_multimap_erase_on_another_stream_waits_for_its_insert():
    table = gh.MultiMap(key_dtype=torch.int64, value_dtype=torch.int64, device="cuda")
    writer, other = torch.cuda.Stream(), torch.cuda.Stream()
    keys = torch.arange(50_000, device="cuda").repeat(2)
    torch.cuda.synchronize()
    _delayed(writer)
    table.insert(keys, keys, stream=writer)
    erased = table.erase(keys[:50_000].contiguous(), stream=other)
    other.synchronize()
    assert bool((erased == 2).all())
    assert len(table) == 0


def test_a_foreign_stream_destroyed_between_calls_is_never_waited_on():
    core = pytest.importorskip("cuda.core")
    device = core.Device(torch.cuda.current_device())
    device.set_current()
    for table in (gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, device="cuda"),
                  gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32,
                              capacity=1 << 12, device="cuda")):
        foreign = device.create_stream()
        keys = torch.arange(1000, device="cuda")
        torch.cuda.synchronize()
        if isinstance(table, gh.CacheMap):
            table.insert_or_assign(keys, keys.float(), stream=foreign)
        else:
            table.insert(keys, keys, stream=foreign)
        foreign.sync()
        foreign.close()  # its handle may be reused by the next stream made
        other = torch.cuda.Stream()
        found = table.contains(keys, stream=other)
        other.synchronize()
        assert bool(found.all())


def test_a_table_made_on_one_stream_is_whole_before_a_call_on_another():
    """The new table's fill is queued on the stream current where it is made (here behind a
    long sleep): an insert on another stream must wait for it, or the fill would wipe it."""
    maker, other = torch.cuda.Stream(), torch.cuda.Stream()
    keys = torch.arange(50_000, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(maker):
        torch.cuda._sleep(SLEEP)
        table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64,
                           capacity=1 << 16, device="cuda")
    table.insert(keys, keys, stream=other)
    values, found = table.find(keys, stream=other)
    other.synchronize()
    assert bool(found.all()) and torch.equal(values, keys)


def test_growth_on_a_second_stream_keeps_every_entry():
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    # room for the first insert, which so neither grows nor synchronises: it is still queued
    # behind the sleep when the second insert grows the table
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=2048,
                       device="cuda")
    keys = torch.arange(200_000, device="cuda")
    torch.cuda.synchronize()
    _delayed(first)
    table.insert(keys[:1000], keys[:1000], stream=first)
    table.insert(keys, keys, stream=second)  # grows while the first insert may still be queued
    values, found = table.find(keys, stream=first)
    first.synchronize()
    assert bool(found.all()) and torch.equal(values, keys)


def test_find_or_insert_on_a_foreign_stream_destroyed_after_the_call():
    core = pytest.importorskip("cuda.core")
    device = core.Device(torch.cuda.current_device())
    device.set_current()
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1 << 12,
                        device="cuda")
    keys = torch.arange(1000, device="cuda")
    torch.cuda.synchronize()
    foreign = device.create_stream()
    index, found = cache.find_or_insert_index(keys, init=1.0, stream=foreign)
    status, _ = cache.insert_and_evict(keys + 5000, keys.float(), stream=foreign)
    foreign.sync()
    foreign.close()
    other = torch.cuda.Stream()
    hits = cache.contains(torch.cat([keys, keys + 5000]), stream=other)
    other.synchronize()
    assert bool(hits.all()) and not bool(found.any())
