"""API behaviour on the CPU engine: bad input, full tables, array kinds, files, value dtypes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gpuhash as gh
from conftest import KEY_DTYPES, adversarial_keys, contents, key_list, key_tensor


def small_map(**options) -> gh.HashMap:
    defaults = dict(key_dtype=torch.int64, value_dtype=torch.float32, capacity=16)
    defaults.update(options)
    return gh.HashMap(**defaults)


BAD_INSERTS = [
    (lambda: torch.tensor([1, 2], dtype=torch.int32), lambda: torch.ones(2), TypeError,
     "keys have dtype torch.int32"),
    (lambda: torch.tensor([1.0, 2.0]), lambda: torch.ones(2), TypeError, "integers"),
    (lambda: torch.tensor([[1, 2]]), lambda: torch.ones(1, 2), ValueError, "1-D"),
    (lambda: torch.arange(6)[::2], lambda: torch.ones(3), ValueError, "contiguous"),
    (lambda: torch.tensor([1, 2]), lambda: torch.ones(3), ValueError, "values has 3 rows"),
    (lambda: torch.tensor([1, 2]), lambda: torch.ones(2, dtype=torch.float64), TypeError,
     "value_dtype"),
    (lambda: torch.tensor([1, 2]), lambda: torch.ones(2, 2), ValueError, "shape"),
    (lambda: [1, 2], lambda: torch.ones(2), TypeError, "keys must be a torch tensor"),
    (lambda: torch.tensor([1, 2]), lambda: torch.ones(4)[::2], ValueError, "contiguous"),
]


@pytest.mark.parametrize(("keys", "values", "error", "message"), BAD_INSERTS)
def test_bad_insert_names_the_problem_and_changes_nothing(keys, values, error, message):
    table = small_map()
    table.insert(torch.tensor([7, 8]), torch.tensor([1.0, 2.0]))
    before = contents(table)
    with pytest.raises(error, match=message):
        table.insert(keys(), values())
    assert contents(table) == before


def test_bad_constructor_arguments():
    with pytest.raises(TypeError, match="key_dtype"):
        gh.HashMap(key_dtype=torch.float32, value_dtype=torch.float32)
    with pytest.raises(ValueError, match="max_load_factor"):
        small_map(max_load_factor=1.0)
    with pytest.raises(ValueError, match="capacity"):
        small_map(capacity=-1)
    with pytest.raises(ValueError, match="duplicates"):
        small_map(duplicates="first")
    with pytest.raises(ValueError, match="value_shape"):
        small_map(value_shape=(0,))
    with pytest.raises(ValueError, match="device"):
        small_map(device="tpu")


def test_bad_lookups_and_default():
    table = small_map()
    with pytest.raises(TypeError, match="dtype"):
        table.find(torch.tensor([1], dtype=torch.uint64))
    with pytest.raises(ValueError, match="default"):
        table.find(torch.tensor([1]), default=[1.0, 2.0])
    # a CPU table accepts a stream argument (code can be device-agnostic) and ignores it
    table.insert(torch.tensor([1]), torch.tensor([2.0]), stream=object())
    assert table.find(torch.tensor([1]), stream=object())[0].tolist() == [2.0]


def test_empty_batches_return_empty_results():
    table = small_map(value_shape=(3,))
    empty = torch.empty(0, dtype=torch.int64)
    assert table.insert(empty, torch.empty(0, 3)).shape == (0,)
    values, found = table.find(empty)
    assert values.shape == (0, 3) and found.shape == (0,)
    assert table.erase(empty).shape == (0,)
    assert table.find_index(empty)[0].shape == (0,)
    assert len(table) == 0


def test_fixed_table_refuses_past_its_load_and_stays_unchanged():
    table = gh.HashSet(key_dtype=torch.int32, capacity=100, growable=False)
    limit = table.capacity
    assert table.insert(torch.arange(limit, dtype=torch.int32)).all()
    before = contents(table)
    with pytest.raises(gh.TableFullError, match="growable"):
        table.insert(torch.arange(limit, limit + 5, dtype=torch.int32))
    assert contents(table) == before
    # keys already present are updates and need no room
    assert not table.insert(torch.arange(10, dtype=torch.int32)).any()
    # erasing makes room again (tombstones are compacted away)
    table.erase(torch.arange(50, dtype=torch.int32))
    assert table.insert(torch.arange(limit, limit + 40, dtype=torch.int32)).all()
    assert len(table) == limit - 50 + 40


def test_growable_table_grows_and_keeps_everything():
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=4)
    keys = torch.randperm(10_000)
    table.insert(keys, keys * 3)
    assert len(table) == 10_000 and table.capacity >= 10_000
    values, found = table.find(keys)
    assert found.all() and torch.equal(values, keys * 3)


def test_repeated_updates_do_not_grow_the_table():
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=1000)
    capacity = table.capacity
    keys = torch.arange(1000)
    for round_ in range(5):
        table.insert(keys, keys + round_)
    assert table.capacity == capacity
    assert torch.equal(table.find(keys)[0], keys + 4)


def test_erase_then_reinsert_never_leaves_two_copies():
    table = gh.HashMap(key_dtype=torch.int32, value_dtype=torch.int32, capacity=64)
    keys = torch.arange(40, dtype=torch.int32)
    for round_ in range(20):
        table.insert(keys, keys + round_)
        table.erase(keys[::2].contiguous())
    table.insert(keys, keys)
    stored, _ = table.items()
    assert sorted(stored.tolist()) == keys.tolist()
    assert len(table) == 40


@pytest.mark.parametrize("dtype", KEY_DTYPES, ids=str)
def test_every_key_value_is_usable(dtype):
    keys = adversarial_keys(dtype)
    table = gh.HashMap(key_dtype=dtype, value_dtype=torch.int64, capacity=8)
    k = key_tensor(keys, dtype)
    assert table.insert(k, torch.arange(len(keys))).all()
    values, found = table.find(k)
    assert found.all() and values.tolist() == list(range(len(keys)))
    assert sorted(key_list(table.items()[0])) == keys
    assert table.erase(k).all() and len(table) == 0
    assert not table.contains(k).any()


@pytest.mark.parametrize(("dtype", "shape"), [
    (torch.bool, ()), (torch.float16, (2,)), (torch.bfloat16, ()), (torch.int8, (3,)),
    (torch.complex64, ()), (torch.float64, (4,)), (torch.uint8, (5,)), (torch.int16, (3,)),
])
@pytest.mark.parametrize("key_dtype", [torch.int32, torch.uint64], ids=str)
def test_values_of_any_dtype_and_shape(dtype, shape, key_dtype):
    table = gh.HashMap(key_dtype=key_dtype, value_dtype=dtype, value_shape=shape)
    keys = key_tensor(list(range(50)), key_dtype)
    values = (torch.randn(50, *shape) * 10).to(dtype)
    table.insert(keys, values)
    got, found = table.find(keys)
    assert found.all() and torch.equal(got, values)
    index, _ = table.find_index(keys)
    assert torch.equal(table.values[index], values)


def test_values_view_writes_into_the_table():
    table = small_map(value_shape=(2,))
    table.insert(torch.tensor([1, 2]), torch.zeros(2, 2))
    index, found = table.find_index(torch.tensor([2, 1]))
    table.values[index] = torch.tensor([[5.0, 6.0], [7.0, 8.0]])
    assert table.find(torch.tensor([1, 2]))[0].tolist() == [[7.0, 8.0], [5.0, 6.0]]


def test_numpy_in_numpy_out():
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
    keys = np.array([3, 1, 4], dtype=np.int64)
    inserted = table.insert(keys, np.array([0.5, 1.5, 2.5], dtype=np.float32))
    assert isinstance(inserted, np.ndarray) and inserted.all()
    values, found = table.find(np.array([4, 9], dtype=np.int64), default=-1)
    assert isinstance(values, np.ndarray) and values.tolist() == [2.5, -1.0]
    assert found.tolist() == [True, False]


def test_uint_keys_from_numpy():
    table = gh.HashSet(key_dtype=torch.uint32)
    keys = np.array([0, 2**32 - 1, 2**32 - 2, 7], dtype=np.uint32)
    assert table.insert(keys).all()
    assert table.contains(keys).all()


def test_save_load_round_trip_and_corruption(tmp_path):
    table = small_map(value_shape=(3,))
    keys = torch.arange(100)
    table.insert(keys, torch.randn(100, 3))
    path = tmp_path / "t.pt"
    table.save(path)
    loaded = gh.HashMap.load(path)
    assert torch.equal(loaded.find(keys)[0], table.find(keys)[0])
    payload = torch.load(path, weights_only=True)
    payload["tensors"]["slots"][3, 0] ^= 1
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="checksum"):
        gh.HashMap.load(tmp_path / "bad.pt")
    payload = torch.load(path, weights_only=True)
    payload["version"] = 99
    torch.save(payload, tmp_path / "future.pt")
    with pytest.raises(ValueError, match="version"):
        gh.HashMap.load(tmp_path / "future.pt")
    with pytest.raises(ValueError, match="HashMap, not a HashSet"):
        gh.HashSet.load(path)


def test_clear_keeps_capacity_and_values_view():
    table = small_map()
    table.insert(torch.arange(100), torch.ones(100))
    capacity, view = table.capacity, table.values
    table.clear()
    assert len(table) == 0 and table.capacity == capacity
    table.insert(torch.tensor([5]), torch.tensor([2.0]))
    index, _ = table.find_index(torch.tensor([5]))
    assert view[index].tolist() == [2.0]


def test_load_factor_and_len():
    table = gh.HashSet(key_dtype=torch.int64, capacity=1000, max_load_factor=0.5)
    table.insert(torch.arange(500))
    assert len(table) == 500
    assert 0.2 < table.load_factor <= 0.5


@pytest.mark.parametrize("load", [0.5, 0.9, 0.99])
def test_a_table_made_for_n_entries_takes_them_without_growing_at_any_load(load):
    for key_dtype, value_dtype in ((torch.int32, torch.int32), (torch.int64, torch.int64),
                                   (torch.int64, torch.float32)):
        for entries in (1, 1000, 10_000):
            table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, capacity=entries,
                               max_load_factor=load, growable=False)
            assert table.capacity >= entries
            keys = torch.randperm(10**6)[:entries].to(key_dtype)
            assert bool(table.insert(keys, keys.to(value_dtype)).all())
            assert len(table) == entries and table.load_factor <= load
            values, found = table.find(keys)
            assert bool(found.all()) and torch.equal(values, keys.to(value_dtype))


def test_a_small_table_grown_into_a_large_one_keeps_every_entry(monkeypatch):
    """Small (L2-resident) tables at low load take another slot layout than large ones: a table
    that grows past that size changes layout on the way and keeps what it held."""
    from gpuhash.table import format as _format

    monkeypatch.setattr(_format, "L2_TABLE_BYTES", 4096)  # "small" ends at 4 KB here
    table = gh.HashMap(key_dtype=torch.int32, value_dtype=torch.int32, capacity=10,
                       max_load_factor=0.5)
    capacity = table.capacity
    for first in range(0, 2000, 250):
        keys = torch.arange(first, first + 250, dtype=torch.int32)
        table.insert(keys, keys * 3)
    keys = torch.arange(2000, dtype=torch.int32)
    values, found = table.find(keys)
    assert bool(found.all()) and torch.equal(values, keys * 3)
    assert len(table) == 2000 and table.capacity >= 2000 > capacity


@pytest.mark.parametrize("duplicates", ["last", "any"])
def test_a_full_fixed_table_takes_many_rows_of_its_last_free_key(duplicates):
    # the room check counts distinct new keys exactly, not rows: 2000 rows of one new key and
    # rows of present keys need one slot
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=100,
                       growable=False, duplicates=duplicates)
    limit = table.capacity
    table.insert(torch.arange(limit - 1), torch.arange(limit - 1))
    rows = torch.cat([torch.full((2000,), 7777), torch.arange(limit - 1)])
    assert int(table.insert_or_apply(rows, torch.ones_like(rows)).sum()) == 1
    assert int(table.insert(rows, rows).sum()) == 0
    assert len(table) == limit
    with pytest.raises(gh.TableFullError):
        table.insert_or_apply(torch.tensor([1, 8888, 9999, 9999]), torch.ones(4, dtype=torch.int64))
    assert table.find(torch.tensor([7777]))[0].tolist() == [7777]
