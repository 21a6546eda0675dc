"""GPU tests of the core outside the benchmark's path: streams, several GPUs, racing writers of
wide values, rows no slot could take, the sm_80 code paths, the bytes both engines write, and
the newer operations against the CPU engine and the Python models. Marked gpu."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings
from model_ops import make_apply_machine, make_multimap_machine
from test_core_ops import full_table

import gpuhash as gh

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))
SLEEP_CYCLES = 2_000_000_000  # about a second of a busy stream


def busy(stream: torch.cuda.Stream | None = None) -> None:
    """Queue about a second of GPU work on ``stream`` (the current stream if None)."""
    if stream is None:
        torch.cuda._sleep(SLEEP_CYCLES)
        return
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_CYCLES)


def test_a_default_row_is_made_on_the_operations_stream():
    """The default row of a find travels to the GPU on the find's stream: made on the busy
    ambient stream, the kernel on `s` read it before it arrived."""
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(4,),
                       device="cuda")
    table.insert(torch.arange(10, device="cuda"), torch.zeros(10, 4, device="cuda"))
    missing = torch.arange(100, 1100, device="cuda")
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    busy()  # the ambient (default) stream
    got, found = table.find(missing, default=torch.tensor([1.0, 2.0, 3.0, 4.0]), stream=stream)
    stream.synchronize()
    assert not bool(found.any())
    assert torch.equal(got.cpu(), torch.tensor([1.0, 2.0, 3.0, 4.0]).expand(1000, 4))
    torch.cuda.synchronize()


def test_insert_on_one_stream_then_find_on_another_ordered_by_an_event():
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, device="cuda",
                       capacity=100_000)
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    keys = torch.arange(50_000, device="cuda")
    torch.cuda.synchronize()
    busy(first)  # the insert waits behind this on `first`
    table.insert(keys, keys * 3, stream=first)
    done = first.record_event()
    second.wait_event(done)
    got, found = table.find(keys, stream=second)
    second.synchronize()
    assert bool(found.all()) and torch.equal(got, keys * 3)


def test_a_long_kernel_on_the_default_stream_does_not_block_a_find_on_another():
    """The find on `stream` is done while the default stream's second of work still runs:
    it did not wait for it (nor did the host)."""
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, device="cuda")
    keys = torch.arange(1000, device="cuda")
    table.insert(keys, keys)
    stream = torch.cuda.Stream()
    table.find(keys, stream=stream)  # compiled and warm
    torch.cuda.synchronize()
    busy()
    got, found = table.find(keys, stream=stream)
    stream.synchronize()
    still_busy = not torch.cuda.default_stream().query()
    torch.cuda.synchronize()
    assert still_busy, "the find waited for the default stream"
    assert bool(found.all()) and torch.equal(got, keys)


def test_streams_of_the_cuda_stream_protocol_and_bad_streams():
    table = gh.HashSet(key_dtype=torch.int64, device="cuda")
    stream = torch.cuda.Stream()
    keys = torch.arange(100, device="cuda")
    table.insert(keys, stream=stream)

    class Foreign:  # anything speaking the __cuda_stream__ protocol
        def __cuda_stream__(self):
            return (0, stream.cuda_stream)

    assert bool(table.contains(keys, stream=Foreign()).all())
    with pytest.raises(TypeError, match="stream"):
        table.contains(keys, stream="default")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tables_on_two_gpus_interleaved_from_one_thread():
    torch.cuda.set_device(0)
    tables = [gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(8,),
                         device=f"cuda:{i}") for i in (0, 1)]
    sets = [gh.HashSet(key_dtype=torch.uint32, device=f"cuda:{i}") for i in (0, 1)]
    for round_ in range(3):
        for i in (1, 0):
            device = f"cuda:{i}"
            keys = torch.arange(round_ * 10_000, (round_ + 1) * 10_000, device=device) * (i + 1)
            values = keys[:, None].float().expand(-1, 8).contiguous()
            tables[i].insert(keys, values)
            sets[i].insert(keys.to(torch.int32).view(torch.uint32))
            assert torch.cuda.current_device() == 0
    for i in (0, 1):
        device = f"cuda:{i}"
        keys = torch.arange(30_000, device=device) * (i + 1)
        got, found = tables[i].find(keys)
        assert bool(found.all()) and torch.equal(got[:, 0], keys.float())
        assert bool(sets[i].contains(keys.to(torch.int32).view(torch.uint32)).all())
        assert len(tables[i]) == 30_000
    torch.cuda.set_device(1)
    got, found = tables[0].find(torch.arange(100, device="cuda:0"))
    assert bool(found.all()) and torch.cuda.current_device() == 1
    assert gh.HashSet(key_dtype=torch.int64, device="cuda").device == torch.device("cuda:1")
    torch.cuda.set_device(0)
    assert gh.HashSet(key_dtype=torch.int64, device="cuda").device == torch.device("cuda:0")


@pytest.mark.parametrize("width", [8, 32])
def test_racing_rows_of_wide_values_never_tear(width):
    """duplicates='any', 1M rows over 1000 keys, values of 32 and 128 bytes: each stored row
    is one whole row of its key."""
    keys = torch.randint(0, 1000, (1_000_000,), device="cuda")
    rows = torch.arange(keys.numel(), device="cuda", dtype=torch.float32)
    values = rows[:, None].expand(-1, width).contiguous()
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(width,),
                       duplicates="any", device="cuda")
    table.insert(keys, values)
    stored_keys, stored = table.items()
    assert bool((stored == stored[:, :1]).all()), "a stored row mixes two rows' values"
    assert torch.equal(keys[stored[:, 0].long()], stored_keys)


@pytest.mark.parametrize("value_shape", [(), (8,)])
def test_a_row_no_slot_could_take_raises_at_the_next_sync_with_the_table_whole(value_shape):
    table = full_table("cuda") if value_shape == () else None
    if table is None:
        pytest.skip("the crafted full table is int32 -> int32")
    held = table.items()[0].clone()
    extra = torch.tensor([-5, -6, -7], dtype=torch.int32, device="cuda")
    inserted = table.insert(extra, extra)
    with pytest.raises(RuntimeError, match="could not be placed"):
        len(table)
    assert bool(table.contains(held).all())
    assert bool(table.contains(extra[inserted]).all())
    assert len(table) == held.numel() + int(inserted.sum())


def test_seeds_above_two_to_the_63_work_on_the_gpu_and_match_the_cpu():
    options = dict(key_dtype=torch.int64, value_dtype=torch.int64, seed=2**64 - 5, capacity=100_000)
    gpu, cpu = gh.HashMap(device="cuda", **options), gh.HashMap(device="cpu", **options)
    keys = torch.randint(-(2**62), 2**62, (64,))
    for key in keys.split(1):  # one key a launch: each takes the first free lane of its bucket
        gpu.insert(key.cuda(), key.cuda())
        cpu.insert(key, key)
    assert torch.equal(gpu.find(keys.cuda())[0].cpu(), keys)
    assert torch.equal(gpu.find_index(keys.cuda())[0].cpu(), cpu.find_index(keys)[0])


@pytest.mark.parametrize(("key_dtype", "value_dtype", "shape"),
                         [(torch.int32, torch.int8, (3,)), (torch.uint32, None, ()),
                          (torch.int64, torch.int16, (3,)), (torch.int64, torch.int32, ())],
                         ids=str)
def test_both_engines_write_the_same_slot_bytes(key_dtype, value_dtype, shape):
    keys = torch.randperm(5000)[:2000].to(key_dtype)
    tables = []
    for device in ("cuda", "cpu"):
        if value_dtype is None:
            table = gh.HashSet(key_dtype=key_dtype, device=device)
            table.insert(keys.to(device))
        else:
            table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                               device=device)
            table.insert(keys.to(device), torch.full((2000, *shape), 5).to(value_dtype).to(device))
            table.insert(keys[::2].contiguous().to(device),
                         torch.full((1000, *shape), -3).to(value_dtype).to(device))
        tables.append(table)
    gpu, cpu = tables
    index_gpu = gpu._engine.find_index(gpu._state, gpu._keys(keys.cuda())[0])[0].cpu()
    index_cpu = cpu._engine.find_index(cpu._state, cpu._keys(keys)[0])[0]
    assert torch.equal(gpu._state.slots.cpu()[index_gpu], cpu._state.slots[index_cpu])


@pytest.mark.parametrize(("key_dtype", "value_dtype", "shape"),
                         [(torch.int32, None, ()), (torch.int32, torch.int32, ()),
                          (torch.int64, torch.int32, ()), (torch.int32, torch.int64, ()),
                          (torch.int64, torch.float32, (8,)), (torch.int64, None, ())],
                         ids=str)
@pytest.mark.parametrize("capacity", [0, 1000, 300_000])
def test_a_new_cuda_table_holds_the_bytes_of_a_new_cpu_table(key_dtype, value_dtype, shape,
                                                              capacity):
    """The CUDA engine makes a table in one allocation set by one kernel (fill.cu); every
    tensor must hold what the format's torch fills make, byte for byte, and the tensors must
    not overlap (a view too long would let one overwrite another)."""
    from gpuhash.table.cuda import engine as cuda_engine
    from gpuhash.table.format import TableSpec, empty_state

    for load in (0.5, 0.9):
        spec = TableSpec(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                         num_buckets=1, max_load_factor=load).sized_for(capacity)
        expected = empty_state(spec, "cpu")
        words = sum(t.numel() * t.element_size() for name, t in expected.tensors().items()
                    if name != "values")
        # the caching allocator hands the next table the block freed here: a fill that skipped
        # any word would leave this pattern, not the bytes of a fresh table
        torch.empty(words + 16, dtype=torch.uint8, device="cuda").fill_(0x5A)
        made = cuda_engine.empty_state(spec, "cuda")
        got = made.tensors()
        for name, tensor in expected.tensors().items():
            assert torch.equal(got[name].cpu(), tensor), (spec, name)
        # the probe's counter words close the allocation: a join's first probe counts in them
        counters = made.caches["_zeroed_counters"].cpu().tolist()
        assert counters == [0] * cuda_engine._PROBE_COUNTERS, spec
        made.counts.fill_(7)
        made.overflow.fill_(-1)
        made.caches["_zeroed_counters"].fill_(9)
        assert torch.equal(made.slots.cpu(), expected.slots), spec  # untouched by the others
        assert torch.equal(made.overflow.cpu(), torch.full_like(expected.overflow, -1)), spec
        assert int(made.counts.sum()) == 7 * made.counts.shape[0]


def test_insert_or_apply_matches_the_cpu_engine_at_scale():
    keys = torch.randint(0, 10_000, (1_000_000,))
    values = torch.randint(-100, 100, (1_000_000,), dtype=torch.int64)
    for op in ("add", "min", "max"):
        results = []
        for device in ("cuda", "cpu"):
            table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, device=device)
            inserted = table.insert_or_apply(keys.to(device), values.to(device), op=op)
            assert int(inserted.sum()) == torch.unique(keys).numel()
            stored_keys, stored = table.items()
            order = torch.argsort(stored_keys.cpu())
            results.append((stored_keys.cpu()[order], stored.cpu()[order]))
        assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1],
                                                                         results[1][1])


def test_multimap_matches_the_cpu_engine_at_scale():
    keys = torch.randint(0, 50_000, (200_000,))
    values = torch.arange(200_000)
    queries = torch.randint(0, 60_000, (100_000,))
    found = []
    for device in ("cuda", "cpu"):
        table = gh.MultiMap(key_dtype=torch.int64, value_dtype=torch.int64, device=device,
                            max_load_factor=0.95)
        table.insert(keys.to(device), values.to(device))
        counts = table.count(queries.to(device)).cpu()
        rows, index = table.find_all(queries.to(device))
        pairs = torch.stack([rows.cpu(), table.values[index].cpu()], 1)
        pairs = pairs[torch.argsort(pairs[:, 0] * 1_000_000 + pairs[:, 1])]
        found.append((counts, pairs))
    assert torch.equal(found[0][0], found[1][0]) and torch.equal(found[0][1], found[1][1])


@pytest.mark.parametrize(("key_dtype", "value_shape"),
                         [(torch.int64, ()), (torch.uint32, None), (torch.int32, (3,))], ids=str)
def test_gpu_multimap_behaves_like_a_multiset(key_dtype, value_shape):
    machine = make_multimap_machine(key_dtype=key_dtype, value_shape=value_shape, device="cuda")
    machine.TestCase.settings = settings(max_examples=12, stateful_step_count=15, **SETTINGS)
    machine.TestCase().runTest()


@pytest.mark.parametrize(("key_dtype", "value_dtype", "value_shape"),
                         [(torch.int32, torch.int32, ()), (torch.int64, torch.float64, ()),
                          (torch.uint32, torch.float32, (4,)), (torch.int64, torch.int64, ())],
                         ids=str)
def test_gpu_insert_or_apply_folds_like_a_dict(key_dtype, value_dtype, value_shape):
    machine = make_apply_machine(key_dtype=key_dtype, value_dtype=value_dtype,
                                 value_shape=value_shape, device="cuda")
    machine.TestCase.settings = settings(max_examples=12, stateful_step_count=12, **SETTINGS)
    machine.TestCase().runTest()


@pytest.mark.skipif(os.environ.get("GPUHASH_CUDA_ARCH") is not None, reason="already sm_80")
def test_the_sm80_paths_run_as_compute_80_ptx():
    """Pair slots without a 128-bit CAS (bucket locks, two-launch insert_or_apply) run when the
    kernels are compiled for compute_80 and the driver carries the PTX forward."""
    env = dict(os.environ, GPUHASH_CUDA_ARCH="compute_80")
    chosen = ("matches_cpu_engine or displacement or apply or multimap or racing or "
              "no_slot or same_slot_bytes or last_row or cache")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "gpu",
         str(HERE / "test_gpu.py"), str(HERE / "test_gpu_core.py"),
         str(HERE / "test_gpu_cache.py"), "-k", chosen],
        env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


@pytest.mark.parametrize(("key_dtype", "value_shape"), [(torch.int32, ()), (torch.int64, (8,))],
                         ids=str)
def test_gpu_reuses_erased_slots_and_churn_keeps_every_key(key_dtype, value_shape):
    table = gh.HashMap(key_dtype=key_dtype, value_dtype=torch.float32, value_shape=value_shape,
                       capacity=400_000, max_load_factor=0.9, device="cuda")
    keys = torch.randperm(10_000_000)[:300_000].to(key_dtype).cuda()
    values = torch.rand(300_000, *value_shape, device="cuda")
    table.insert(keys, values)
    capacity = table.capacity
    table.erase(keys)
    assert bool(table.insert(keys, values).all()) and len(table) == 300_000
    assert table.capacity == capacity
    live, live_values, fresh = keys, values, 10_000_000
    for _ in range(20):  # churn: erase 5%, insert as many new keys
        gone = torch.randperm(live.numel(), device="cuda")[:15_000]
        keep = torch.ones(live.numel(), dtype=torch.bool, device="cuda")
        keep[gone] = False
        assert bool(table.erase(live[gone]).all())
        new = torch.arange(fresh, fresh + 15_000, device="cuda").to(key_dtype)
        fresh += 15_000
        new_values = torch.rand(15_000, *value_shape, device="cuda")
        assert bool(table.insert(new, new_values).all())
        live = torch.cat([live[keep], new])
        live_values = torch.cat([live_values[keep], new_values])
    got, found = table.find(live)
    assert bool(found.all()) and torch.equal(got, live_values) and len(table) == live.numel()
    cpu = table.to("cpu")  # the CPU engine reads the same table
    assert bool(cpu.contains(live.cpu()).all())


@pytest.mark.parametrize("key_dtype", [torch.int32, torch.uint32, torch.int64, torch.uint64],
                         ids=str)
@pytest.mark.parametrize("rows", [1, 1000, 300_000])
@pytest.mark.parametrize("wide", [False, True], ids=["", "past the limit"])
def test_last_rows_kernel_matches_cpu_engine(key_dtype, rows, wide, monkeypatch):
    """gh_last_rows (no sort) marks the last row of each key, as the CPU engine's sort does,
    whether keys repeat rarely or often, the sentinel key values included; `wide`: as a batch
    past LAST_ROWS_LIMIT rows would (the limit lowered: 64-bit keys take the instance with
    8-byte rows; 32-bit keys keep their packed one)."""
    from gpuhash.table.cpu import engine as cpu_engine
    from gpuhash.table.cuda import engine as cuda_engine

    if wide:
        monkeypatch.setattr(cuda_engine, "LAST_ROWS_LIMIT", 0)

    table = gh.HashSet(key_dtype=key_dtype, device="cuda")
    for distinct in (rows, max(1, rows // 50)):
        # -3..-1: the sentinel key values (all ones, all ones minus one) and their neighbour
        raw = torch.randint(-3, distinct, (rows,), dtype=torch.int64)
        keys = raw.to(torch.int32 if key_dtype in (torch.int32, torch.uint32) else torch.int64)
        got = cuda_engine.last_rows(table._state, keys.cuda()).cpu()
        assert torch.equal(got, cpu_engine.last_rows(None, keys)), (distinct, rows)
        torch.cuda.synchronize()
        assert int(table._state.counts[2]) == 0


@pytest.mark.parametrize("wide", [False, True], ids=["4-byte rows", "8-byte rows"])
@pytest.mark.parametrize("rows", [1, 1000, 300_000])
def test_first_rows_of_a_cache_batch_match_cpu_engine(rows, wide, monkeypatch):
    """The cache's gh_last_rows instances with `first` (find_or_insert's acting rows) and
    without mark the rows the CPU engine does, keys repeating rarely or often; `wide`: the
    instance with 8-byte rows that batches past LAST_ROWS_LIMIT rows take (the limit lowered
    here, since such a batch needs about 80 GB)."""
    from gpuhash.cache.cpu import engine as cache_cpu
    from gpuhash.cache.cuda import engine as cache_cuda
    from gpuhash.table.cuda import engine as cuda_engine

    if wide:
        monkeypatch.setattr(cuda_engine, "LAST_ROWS_LIMIT", 0)
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
                        device="cuda")
    launched = []  # which instance ran: the test must fail if the limit chose the other
    launch = cuda_engine.launch
    monkeypatch.setattr(cuda_engine, "launch",
                        lambda kernel, *args, **options: (launched.append(kernel),
                                                          launch(kernel, *args, **options)))
    for distinct in (rows, max(1, rows // 50)):
        keys = torch.randint(-3, distinct, (rows,), dtype=torch.int64)
        for first in (False, True):
            got = cache_cuda.last_rows(cache._state, keys.cuda(), first=first).cpu()
            want = cache_cpu.last_rows(None, keys, first=first)
            assert torch.equal(got, want), (distinct, rows, first)
    kernels = cache_cuda._launch_info(cache._state)[0]
    chosen = kernels["last_rows_wide" if wide else "last_rows"]
    assert launched and all(kernel is chosen for kernel in launched)


@pytest.mark.parametrize(("key_dtype", "value_dtype", "shape"),
                         [(torch.int32, torch.int32, ()), (torch.int64, torch.float64, ()),
                          (torch.uint64, torch.float32, (8,)), (torch.uint32, torch.int8, (3,))],
                         ids=str)
@pytest.mark.parametrize("load", [0.5, 0.99])
def test_last_row_wins_matches_cpu_engine(key_dtype, value_dtype, shape, load):
    """Batches that repeat keys, into a table already holding some of them: each key ends with
    its last row's value and the same rows are marked inserted on both engines."""
    n = 20_000
    outcomes = []
    for device in ("cuda", "cpu"):
        table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                           capacity=n, max_load_factor=load, growable=False, device=device)
        generator = torch.Generator().manual_seed(7)
        marks = []
        for _ in range(3):
            keys = torch.randint(0, n, (n // 2,), generator=generator).to(key_dtype)
            values = torch.randint(-100, 100, (n // 2, *shape), generator=generator)
            marks.append(table.insert(keys.to(device), values.to(value_dtype).to(device)).cpu())
        probe = torch.arange(n).to(key_dtype)
        got, found = table.find(probe.to(device))
        outcomes.append((marks, got.cpu(), found.cpu(), len(table)))
    (gpu_marks, gpu_got, gpu_found, gpu_len), (cpu_marks, cpu_got, cpu_found, cpu_len) = outcomes
    assert all(torch.equal(a, b) for a, b in zip(gpu_marks, cpu_marks))
    assert torch.equal(gpu_found, cpu_found) and gpu_len == cpu_len
    assert torch.equal(gpu_got[gpu_found], cpu_got[cpu_found])
