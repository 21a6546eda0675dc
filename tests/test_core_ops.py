"""The core's newer operations and the first review's defects, on the CPU engine: MultiMap and
insert_or_apply against Python models, the bytes both engines write, and the error paths."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, settings
from model_ops import make_apply_machine, make_multimap_machine

import gpuhash as gh
from conftest import contents, few_then_many
from gpuhash.table.cpu import engine as cpu_engine

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(("key_dtype", "value_shape"),
                         [(torch.int64, ()), (torch.uint32, None), (torch.int32, (3,)),
                          (torch.uint64, (1,))], ids=str)
@few_then_many(5, 25)
def test_multimap_behaves_like_a_multiset(key_dtype, value_shape, examples):
    machine = make_multimap_machine(key_dtype=key_dtype, value_shape=value_shape, device="cpu")
    machine.TestCase.settings = settings(max_examples=examples, stateful_step_count=20, **SETTINGS)
    machine.TestCase().runTest()


@pytest.mark.parametrize(("key_dtype", "value_dtype", "value_shape"),
                         [(torch.int32, torch.int32, ()), (torch.int64, torch.float64, ()),
                          (torch.uint32, torch.float32, (4,)), (torch.int64, torch.int64, (2,))],
                         ids=str)
@few_then_many(5, 25)
def test_insert_or_apply_folds_like_a_dict(key_dtype, value_dtype, value_shape, examples):
    machine = make_apply_machine(key_dtype=key_dtype, value_dtype=value_dtype,
                                 value_shape=value_shape, device="cpu")
    machine.TestCase.settings = settings(max_examples=examples, stateful_step_count=15, **SETTINGS)
    machine.TestCase().runTest()


def test_insert_or_apply_refuses_bad_op_and_dtype():
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64)
    with pytest.raises(ValueError, match="op must be one of"):
        table.insert_or_apply(torch.tensor([1]), torch.tensor([1]), op="mul")
    small = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int16)
    with pytest.raises(TypeError, match="int16"):
        small.insert_or_apply(torch.tensor([1]), torch.tensor([1], dtype=torch.int16))
    assert len(table) == len(small) == 0


@pytest.mark.parametrize("key_dtype", [torch.int64, torch.uint64, torch.int32, torch.uint32])
def test_multimap_holds_any_number_of_copies_of_the_sentinel_keys(key_dtype, tmp_path):
    """All ones and all ones minus one mark empty and erased slots; a MultiMap keeps copies
    of them out of band, through growth, queries, erase, save, load and moves."""
    signed = torch.int32 if key_dtype.itemsize == 4 else torch.int64
    as_keys = lambda xs: torch.tensor(xs).to(signed).view(key_dtype)  # noqa: E731
    table = gh.MultiMap(key_dtype=key_dtype, value_dtype=torch.float32, value_shape=(2,),
                        capacity=4, growable=True)
    keys = as_keys([-1, 3, -2, -1, 3, -1])
    values = torch.arange(12, dtype=torch.float32).view(6, 2)
    table.insert(keys, values)
    table.insert(as_keys(list(range(100, 200))), torch.zeros(100, 2))  # grows
    assert len(table) == 106
    query = as_keys([-2, -1, 7, -1])
    assert table.count(query).tolist() == [1, 3, 0, 3]
    assert table.contains(query).tolist() == [True, True, False, True]
    rows, index = table.find_all(query)
    assert rows.tolist() == [0, 1, 1, 1, 3, 3, 3]
    assert table.values[index[1:4]][:, 0].tolist() == [0.0, 6.0, 10.0]  # insertion order
    assert table.values[index[0]].tolist() == [4.0, 5.0]
    path = tmp_path / "multimap.pt"
    table.save(path)
    for other in (gh.MultiMap.load(path), table.to("cpu")):
        assert len(other) == 106 and other.count(query).tolist() == [1, 3, 0, 3]
    assert table.erase(as_keys([-1, 3, -1])).tolist() == [3, 2, 0]
    assert len(table) == 101 and table.count(query).tolist() == [1, 0, 0, 0]
    keys, values = table.items()
    assert sorted(keys.view(signed).tolist())[:2] == [-2, 100]
    table.clear()
    assert len(table) == 0 and table.count(query).tolist() == [0, 0, 0, 0]


def test_multimap_refusing_an_insert_for_room_keeps_the_sentinel_copies_out_too():
    table = gh.MultiMap(key_dtype=torch.int64, capacity=4, growable=False)
    with pytest.raises(gh.TableFullError):
        table.insert(torch.tensor([-1, *range(100)]))
    assert len(table) == 0 and table.count(torch.tensor([-1])).tolist() == [0]


@pytest.mark.parametrize(("key_dtype", "value_dtype", "shape"),
                         [(torch.int32, torch.int8, (3,)), (torch.int32, None, ()),
                          (torch.int64, torch.int16, (3,)), (torch.int64, torch.int32, ()),
                          (torch.uint32, torch.float16, ())], ids=str)
def test_bytes_above_a_value_are_zero(key_dtype, value_dtype, shape):
    """Packed and pair slots hold the value zero-padded, as the CUDA engine writes them, so
    the same table is the same bytes on both engines (the GPU test compares them)."""
    if value_dtype is None:
        table = gh.HashSet(key_dtype=key_dtype)
        table.insert(torch.arange(50).to(key_dtype))
    else:
        table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape)
        keys = torch.arange(50).to(key_dtype)
        table.insert(keys, torch.full((50, *shape), -1).to(value_dtype))
        table.insert(keys[::2].contiguous(), torch.full((25, *shape), 3).to(value_dtype))
    spec = table.spec
    index = torch.nonzero(table._state.key_view()[: spec.num_slots] >= 0).squeeze(1)
    raw = table._state.slots.view(torch.uint8)[index]
    if spec.layout == "packed" and spec.key_bytes == 4:
        assert bool((raw[:, 4 + spec.value_bytes: 8] == 0).all())
    if spec.layout == "pair":
        assert bool((raw[:, 8 + spec.value_bytes: 16] == 0).all())


def test_value_shape_may_be_an_int_and_reserve_refuses_negatives():
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=8)
    assert table.spec.value_shape == (8,)
    with pytest.raises(TypeError, match="value_shape"):
        gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=2.5)
    with pytest.raises(ValueError, match="entries must be a non-negative int, got -1"):
        table.reserve(-1)


def full_table(device: str = "cpu") -> gh.HashMap:
    """A table whose every bucket slot holds a key while its counters say it is nearly empty
    (a corruption no API call can make): the only way to reach the unplaced-row path."""
    table = gh.HashMap(key_dtype=torch.int32, value_dtype=torch.int32, capacity=200,
                       max_load_factor=0.99, growable=True)
    state = table._state
    keys = torch.arange(1, state.spec.num_slots + 1, dtype=torch.int32)
    cpu_engine.insert(state, keys, keys, duplicates="distinct")
    assert int((state.key_view()[: state.spec.num_slots] == -1).sum()) == 0
    state.counts[1] = 0  # the lie
    table._used_bound = 0
    return table.to(device) if device != "cpu" else table


def test_a_row_that_finds_no_slot_raises_and_leaves_the_cpu_table_unchanged():
    table = full_table()
    before = contents(table)
    extra = torch.tensor([-5, -6, -7], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="no free slot"):
        table.insert(extra, extra)
    assert contents(table) == before


def test_a_large_batch_that_finds_no_slot_gives_back_every_key_it_added():
    """The parallel passes claim some rows before a later row finds no slot: every key they
    added is taken out again (value bytes of the freed slots may differ: they are unread)."""
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=40_000,
                       max_load_factor=0.99, growable=False)
    kept = torch.arange(1, 30_001)
    table.insert(kept, kept * 7)
    table._state.counts[1] = 0  # the lie: the room check passes
    table._used_bound = 0
    before = contents(table)
    with pytest.raises(RuntimeError, match="no free slot"):
        table.insert(torch.arange(100_001, 120_001), torch.zeros(20_000, dtype=torch.int64))
    assert contents(table) == before and len(table) == 30_000
    got, found = table.find(kept)
    assert bool(found.all()) and torch.equal(got, kept * 7)
    assert not bool(table.contains(torch.arange(100_001, 120_001)).any())


@pytest.mark.parametrize("key_dtype", [torch.int64, torch.uint32])
def test_multimap_queries_of_the_reserved_keys_match_nothing_and_change_nothing(key_dtype):
    """A walk for the sentinel keys would take EMPTY or erased slots for copies of them."""
    table = gh.MultiMap(key_dtype=key_dtype, capacity=8)
    table.insert(torch.tensor([1, 2, 3]).to(key_dtype))
    table.erase(torch.tensor([2]).to(key_dtype))  # leaves an erased slot
    reserved = torch.tensor([-1, -2], dtype=torch.int64)
    reserved = reserved.to(torch.int32).view(key_dtype) if key_dtype == torch.uint32 else reserved
    before = contents(table)
    assert table.count(reserved).tolist() == [0, 0]
    rows, index = table.find_all(reserved)
    assert rows.numel() == index.numel() == 0
    assert table.erase(reserved).tolist() == [0, 0]
    assert contents(table) == before and len(table) == 2


def test_both_engines_offer_the_engine_protocol_with_the_same_signatures():
    import inspect

    from gpuhash.table.cpu import engine as cpu_module
    from gpuhash.table.engine import Engine

    engines = [cpu_module]
    try:
        from gpuhash.table.cuda import engine as cuda_module
    except ImportError:  # cuda.core missing: nothing to compare
        cuda_module = None
    else:
        engines.append(cuda_module)
    operations = [name for name in vars(Engine) if not name.startswith("_")]
    assert len(operations) >= 12
    for module in engines:
        assert isinstance(module, Engine), module.__name__
        for name in operations:
            wanted = list(inspect.signature(getattr(Engine, name)).parameters)[1:]
            assert list(inspect.signature(getattr(module, name)).parameters) == wanted, name


@pytest.mark.parametrize(("key_dtype", "value_shape"), [(torch.int32, ()), (torch.int64, (3,))],
                         ids=str)
def test_keys_erased_and_inserted_again_are_found_with_their_new_values(key_dtype,
                                                                        value_shape):
    """Erase every key and insert them again, many times over, in a table that may not grow:
    each round finds every key with its latest value (the erased slots are taken again)."""
    table = gh.HashMap(key_dtype=key_dtype, value_dtype=torch.int32, value_shape=value_shape,
                       capacity=4000, max_load_factor=0.9, growable=False)
    capacity = table.capacity
    keys = torch.randperm(1_000_000)[:3000].to(key_dtype)
    values = torch.arange(3000 * max(1, sum(value_shape)), dtype=torch.int32).reshape(
        3000, *value_shape)
    table.insert(keys, values)
    for round_ in range(1, 6):
        assert bool(table.erase(keys).all()) and len(table) == 0
        assert bool(table.insert(keys, values + round_).all())
        got, found = table.find(keys)
        assert bool(found.all()) and torch.equal(got, values + round_)
    assert len(table) == 3000 and table.capacity == capacity


def test_cpu_claims_do_not_depend_on_the_thread_count():
    """Claims run in parallel passes, a thread per range of bucket parts (at least
    ROWS_PER_THREAD rows a thread): the table's bytes must be those of one thread claiming row
    by row."""
    import numba

    from gpuhash.table.cpu.claims import ROWS_PER_THREAD, SERIAL_ROWS

    keys = torch.randperm(10**6)[: 4 * max(SERIAL_ROWS, ROWS_PER_THREAD)]
    tables = []
    before = numba.get_num_threads()
    try:
        for threads in (1, numba.config.NUMBA_NUM_THREADS):
            numba.set_num_threads(threads)
            table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64,
                               capacity=keys.shape[0], max_load_factor=0.95, growable=False)
            table.insert(keys, keys)
            tables.append(table._state.tensors())
    finally:
        numba.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(tables[0].values(), tables[1].values()))


def test_cpu_claims_across_many_parts_keep_dict_semantics():
    """Rows of a key meet in one part of one parallel pass, in row order: the last row's value
    stays and the last row of a new key is the one marked, in a table of many parts at load
    0.95 (keys settle in every pass and in the walk that follows them)."""
    generator = torch.Generator().manual_seed(3)
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=60_000,
                       max_load_factor=0.95, growable=False)
    assert table.spec.num_buckets > 4 * 2048
    model: dict[int, int] = {}
    for _ in range(3):
        keys = torch.randint(0, 60_000, (40_000,), generator=generator)
        values = torch.randint(0, 1 << 40, (40_000,), generator=generator)
        inserted = table.insert(keys, values).tolist()
        last = {key: row for row, key in enumerate(keys.tolist())}
        assert inserted == [key not in model and last[key] == row
                            for row, key in enumerate(keys.tolist())]
        model.update(zip(keys.tolist(), values.tolist()))
    probe = torch.tensor(sorted(model))
    got, found = table.find(probe)
    assert bool(found.all()) and got.tolist() == [model[key] for key in probe.tolist()]
    assert len(table) == len(model)


def test_large_multimap_batches_settle_in_parallel_passes_and_keep_every_copy():
    """A multimap's large batches take the parallel passes too (each row a new copy, EMPTY
    slots only): keys with many copies fill their first buckets and settle in later passes
    and the walk, across many parts at high load; every copy is kept, and a batch that finds
    no slot gives back every copy it placed, the passes' included."""
    from collections import Counter

    generator = torch.Generator().manual_seed(8)
    table = gh.MultiMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=90_000,
                        max_load_factor=0.9, growable=False)
    assert table.spec.num_buckets > 4 * 2048
    model: Counter = Counter()
    for part in range(2):
        keys = torch.cat([torch.randint(0, 20_000, (30_000,), generator=generator),
                          torch.full((200,), 7 + part)])  # one key with 200 copies
        table.insert(keys, keys * 3)
        model.update(keys.tolist())
    probe = torch.tensor(sorted(model))
    assert table.count(probe).tolist() == [model[k] for k in probe.tolist()]
    rows, index = table.find_all(probe)
    assert sorted(probe[rows].tolist()) == sorted(model.elements())
    assert bool((table.values[index] == probe[rows] * 3).all())
    assert len(table) == sum(model.values())
    table._state.counts[1] = 0  # the lie: the room check passes for a batch that cannot fit
    table._used_bound = 0
    keys_before = table._state.key_view().clone()
    with pytest.raises(RuntimeError, match="no free slot"):
        table.insert(torch.arange(10**6, 10**6 + 40_000), torch.zeros(40_000, dtype=torch.int64))
    assert torch.equal(table._state.key_view(), keys_before)


def test_cpu_claims_in_parallel_passes_reuse_erased_slots_and_take_the_sentinel_keys():
    """Batches large enough for the parallel passes, into a table of erased slots (rows that
    meet one in a full bucket go on to the walk), with the two sentinel keys among the rows
    and 4-byte values in 16-byte pair slots: dict semantics, the bytes above each value zero,
    and the counters right."""
    generator = torch.Generator().manual_seed(5)
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=50_000,
                       max_load_factor=0.9, growable=False)
    assert table.spec.layout == "pair"
    model: dict[int, float] = {}
    for round_ in range(4):
        keys = torch.randint(0, 45_000, (30_000,), generator=generator)
        keys[torch.randint(0, 30_000, (40,), generator=generator)] = -1 - round_ % 2
        values = torch.rand(30_000, generator=generator)
        inserted = table.insert(keys, values).tolist()
        last = {key: row for row, key in enumerate(keys.tolist())}
        assert inserted == [key not in model and last[key] == row
                            for row, key in enumerate(keys.tolist())]
        model.update(zip(keys.tolist(), values.tolist()))
        gone = torch.tensor(sorted(model)[::3])
        table.erase(gone)
        for key in gone.tolist():
            del model[key]
    probe = torch.tensor(sorted(model))
    got, found = table.find(probe)
    assert bool(found.all()) and got.tolist() == [model[key] for key in probe.tolist()]
    assert len(table) == len(model)
    spec = table.spec
    live = (table._state.key_view()[: spec.num_slots] >= 0).nonzero().squeeze(1)
    raw = table._state.slots.view(torch.uint8)[live]
    assert bool((raw[:, 8 + spec.value_bytes: 16] == 0).all())


def test_a_growable_cpu_table_gives_back_what_repeats_did_not_use():
    """It grows to fit every absent row (no sort to count keys), then rehashes down when the
    batch's repeats left it under a quarter full."""
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
    keys = torch.arange(100_000) % 1000
    table.insert(keys, torch.ones(100_000))
    assert len(table) == 1000 and table.capacity < 10_000
    distinct = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
    distinct.insert(torch.arange(100_000), torch.ones(100_000))
    assert len(distinct) == 100_000 and distinct.capacity >= 100_000


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_one_key_held_many_times_is_counted_and_found_once_a_copy(device):
    """A key whose copies fill buckets far past the random steps (walks into the linear part,
    where the revisit check reads only the steps before it) and a small table whose random
    steps revisit buckets: every copy is counted and found once, on either engine."""
    for buckets_worth, copies in ((40, 250), (3000, 9000)):
        table = gh.MultiMap(key_dtype=torch.int64, value_dtype=torch.int64,
                            capacity=buckets_worth * 8, max_load_factor=0.97, growable=False,
                            device=device)
        keys = torch.full((copies,), 5, dtype=torch.int64)
        others = torch.arange(100, 100 + copies // 9, dtype=torch.int64)
        table.insert(torch.cat([keys, others]).to(device),
                     torch.arange(copies + others.shape[0]).to(device))
        assert table.count(torch.tensor([5, 100, 7]).to(device)).tolist() == [copies, 1, 0]
        rows, index = table.find_all(torch.tensor([7, 5]).to(device))
        assert rows.tolist() == [1] * copies
        assert sorted(table.values[index].tolist()) == list(range(copies))
