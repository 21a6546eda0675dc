"""GPU tests (marked gpu; skipped without CUDA). Run on the GPU machine with
``python -m pytest -m gpu``: the CUDA engine against the CPU engine on fresh random inputs,
tables moved between devices, streams, CuPy, the compile cache, and compute-sanitizer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings
from model import make_machine

import gpuhash as gh
from conftest import adversarial_keys, key_list, key_tensor
from gpuhash.table.format import empty_state

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent

TYPES = [  # packed, pair and rows layouts with both key widths
    (torch.int32, torch.int32, ()),
    (torch.uint64, torch.int64, ()),
    (torch.int32, torch.float64, ()),
    (torch.int64, torch.float32, (8,)),
    (torch.uint32, torch.int8, (3,)),
]


def random_unique(n: int, dtype: torch.dtype) -> torch.Tensor:
    wide = dtype in (torch.int64, torch.uint64)
    raw = torch.randint(-(2**63) if wide else -(2**31), 2**63 - 1 if wide else 2**31 - 1,
                        (int(n * 1.1) + 16,), dtype=torch.int64 if wide else torch.int32)
    raw = torch.unique(raw)
    raw = raw[torch.randperm(raw.numel())][:n]
    return raw.view(dtype)


def random_values(n: int, dtype: torch.dtype, shape) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(n, *shape).to(dtype)
    return torch.randint(-100, 100, (n, *shape)).to(dtype)


@pytest.mark.parametrize(("key_dtype", "value_dtype", "shape"), TYPES, ids=str)
@pytest.mark.parametrize(("n", "load"), [(1000, 0.5), (20_000, 0.9), (50_000, 0.99)])
def test_cuda_engine_matches_cpu_engine(key_dtype, value_dtype, shape, n, load):
    compare_engines(key_dtype, value_dtype, shape, n, load)


@pytest.mark.parametrize(("key_dtype", "value_dtype", "shape"),
                         [(torch.int32, torch.int32, ()), (torch.uint32, torch.int8, (3,))],
                         ids=str)
def test_four_slot_buckets_of_one_word_slots(key_dtype, value_dtype, shape):
    """4-slot buckets of 8-byte slots at load 0.9: the format picks them only for small tables
    at loads up to 0.75, but a saved table may hold them at any load."""
    compare_engines(key_dtype, value_dtype, shape, 20_000, 0.9, bucket_slots=4)


def compare_engines(key_dtype, value_dtype, shape, n, load, *, bucket_slots=None):
    keys = random_unique(2 * n, key_dtype)
    keys[:4] = key_tensor(adversarial_keys(key_dtype)[-4:], key_dtype)  # sentinels too
    hits, misses = keys[:n], keys[n:]
    values = random_values(n, value_dtype, shape)
    options = dict(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                   capacity=n, max_load_factor=load, growable=False)
    gpu = gh.HashMap(device="cuda", **options)
    cpu = gh.HashMap(device="cpu", **options)
    if bucket_slots is not None:  # another width than the format picks today
        for table in (gpu, cpu):
            spec = table.spec.sized_for(n, bucket_slots=bucket_slots)
            table._adopt(empty_state(spec, table.device), growable=False, duplicates="last")
    batch = torch.cat([hits, hits[: n // 4]])  # repeated keys: the last row must win
    batch_values = torch.cat([values, random_values(n // 4, value_dtype, shape)])
    assert torch.equal(gpu.insert(batch.cuda(), batch_values.cuda()).cpu(),
                       cpu.insert(batch, batch_values))
    assert len(gpu) == len(cpu) == n
    queries = torch.cat([hits, misses])[torch.randperm(2 * n)]
    for table_a, table_b in ((gpu, cpu), (gpu.to("cpu"), cpu.to("cuda"))):
        got_a, found_a = table_a.find(queries.to(table_a.device), default=7)
        got_b, found_b = table_b.find(queries.to(table_b.device), default=7)
        assert torch.equal(found_a.cpu(), found_b.cpu())
        assert torch.equal(got_a.cpu(), got_b.cpu())
        index, found = table_a.find_index(queries.to(table_a.device))
        assert torch.equal(found.cpu(), found_b.cpu())
        hit_values = table_a.values[index[found]].cpu()
        assert torch.equal(hit_values, got_b[found_b.to(got_b.device)].cpu())
    erase = torch.cat([hits[::3], misses[:50]]).contiguous()
    assert int(gpu.erase(erase.cuda()).sum()) == int(cpu.erase(erase).sum()) == len(hits[::3])
    assert torch.equal(gpu.contains(queries.cuda()).cpu(), cpu.contains(queries))
    gpu.insert(hits[::3].contiguous().cuda(), values[::3].contiguous().cuda())
    assert len(gpu) == n
    keys_g, values_g = gpu.items()
    order = torch.argsort(keys_g.cpu().view(torch.int64 if keys_g.element_size() == 8
                                            else torch.int32))
    assert sorted(key_list(keys_g)) == sorted(key_list(hits))
    assert values_g.cpu()[order].shape == (n, *shape)


@pytest.mark.parametrize(("key_dtype", "value_shape"),
                         [(torch.int32, ()), (torch.uint64, None), (torch.int64, (3,))],
                         ids=str)
def test_gpu_table_behaves_like_a_dict(key_dtype, value_shape):
    machine = make_machine(key_dtype=key_dtype, value_shape=value_shape, device="cuda")
    machine.TestCase.settings = settings(max_examples=15, stateful_step_count=20,
                                         deadline=None,
                                         suppress_health_check=list(HealthCheck))
    machine.TestCase().runTest()


def test_gpu_any_duplicates_policy():
    machine = make_machine(key_dtype=torch.int64, value_shape=(), device="cuda",
                           duplicates="any")
    machine.TestCase.settings = settings(max_examples=15, stateful_step_count=20,
                                         deadline=None, suppress_health_check=list(HealthCheck))
    machine.TestCase().runTest()


@pytest.mark.parametrize("load", [0.5, 0.99])
@pytest.mark.parametrize("bucket_slots", [4, 8])
def test_many_copies_of_a_key_in_one_launch_leave_one_entry(load, bucket_slots):
    """Rows of one key race for the same slot inside one insert launch (`any` policy, probe
    loop claims reading buckets through L1): each key must end up exactly once, with the
    value of one of its rows, and exactly one of its rows marked inserted."""
    distinct = 40_000
    keys = random_unique(distinct, torch.int32)
    rows = keys[torch.randint(0, distinct, (1_000_000,))]
    rows[:distinct] = keys  # every key at least once
    rows = rows[torch.randperm(rows.numel())].cuda()
    table = gh.HashMap(key_dtype=torch.int32, value_dtype=torch.int32, duplicates="any",
                       max_load_factor=load, growable=False, device="cuda")
    spec = table.spec.sized_for(distinct, bucket_slots=bucket_slots)
    table._adopt(empty_state(spec, table.device), growable=False, duplicates="any")
    values = torch.arange(rows.numel(), dtype=torch.int32, device="cuda")
    inserted = table.insert(rows, values)
    assert len(table) == distinct and int(inserted.sum()) == distinct
    stored, _ = table.items()
    assert torch.unique(stored).numel() == distinct
    got, found = table.find(rows)
    assert bool(found.all())
    assert torch.equal(rows[got.long()], rows)  # the value is the index of a row of that key


def test_growth_on_gpu_keeps_everything():
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.int64, capacity=16,
                       device="cuda")
    keys = random_unique(500_000, torch.int64).cuda()
    for part in torch.chunk(torch.arange(keys.numel(), device="cuda"), 7):
        table.insert(keys[part], part)
    values, found = table.find(keys)
    assert bool(found.all()) and torch.equal(values, torch.arange(keys.numel(), device="cuda"))
    assert len(table) == keys.numel()


def test_wrong_device_is_refused():
    table = gh.HashSet(key_dtype=torch.int64, device="cuda")
    with pytest.raises(ValueError, match="keys is on cpu"):
        table.insert(torch.arange(3))


def test_cupy_in_cupy_out():
    cupy = pytest.importorskip("cupy")
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, device="cuda")
    keys = cupy.arange(10, dtype=cupy.int64)
    table.insert(keys, cupy.ones(10, dtype=cupy.float32))
    values, found = table.find(keys)
    assert isinstance(values, cupy.ndarray) and bool(found.all())


def test_warm_start_does_not_recompile(tmp_path):
    code = ("import torch, gpuhash as gh; m = gh.HashMap(key_dtype=torch.int64, "
            "value_dtype=torch.int16, value_shape=(5,), device='cuda'); "
            "m.insert(torch.arange(9, device='cuda'), torch.ones(9, 5, dtype=torch.int16, "
            "device='cuda')); assert len(m) == 9")
    env = dict(os.environ, GPUHASH_CACHE_DIR=str(tmp_path))
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    first = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert first, "nothing was cached"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == first


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_kernels_under_compute_sanitizer(tool):
    sanitizer = "compute-sanitizer"
    if subprocess.run(["which", sanitizer], capture_output=True).returncode:
        pytest.skip("compute-sanitizer not installed")
    # cuda.core probes optional driver entry points (cuGetProcAddress), which memcheck would
    # report as API errors; only device-side findings matter here
    result = subprocess.run(
        [sanitizer, f"--tool={tool}", "--report-api-errors", "no", "--error-exitcode=3",
         sys.executable, str(HERE / "sanitize_workload.py")],
        capture_output=True, text=True, timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "sanitize workload done" in output
    summary = "ERROR SUMMARY: 0 errors" if tool == "memcheck" else "(0 errors, 0 warnings)"
    assert summary in output, output[-4000:]


@pytest.mark.parametrize(("key_dtype", "value_shape"), [(torch.int32, ()), (torch.int64, (1,))],
                         ids=str)
def test_gpu_high_load_table_behaves_like_a_dict(key_dtype, value_shape):
    machine = make_machine(key_dtype=key_dtype, value_shape=value_shape, device="cuda",
                           max_load_factor=0.99)
    machine.TestCase.settings = settings(max_examples=15, stateful_step_count=25,
                                         deadline=None, suppress_health_check=list(HealthCheck))
    machine.TestCase().runTest()


@pytest.mark.parametrize(("key_dtype", "value_dtype"),
                         [(torch.uint32, torch.int32), (torch.int64, torch.float64),
                          (torch.int32, torch.int64)], ids=str)
def test_displacement_at_load_099_keeps_every_key(key_dtype, value_dtype):
    n = 1 << 20
    keys = random_unique(2 * n, key_dtype)
    hits, misses = keys[:n].cuda(), keys[n:].cuda()
    values = random_values(n, value_dtype, ()).cuda()
    table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype, capacity=n,
                       max_load_factor=0.99, growable=False, device="cuda")
    assert bool(table.insert(hits, values).all()) and len(table) == n
    got, found = table.find(hits)
    assert bool(found.all()) and torch.equal(got, values)
    assert not bool(table.contains(misses).any())
    # the CPU engine reads and extends a table the GPU built by displacement
    cpu = table.to("cpu")
    erase = hits[: n // 2].cpu()
    assert bool(cpu.erase(erase).all())
    again = cpu.insert(erase, values[: n // 2].cpu())
    assert bool(again.all()) and len(cpu) == n
    got, found = cpu.find(hits.cpu())
    assert bool(found.all()) and torch.equal(got, values.cpu())
