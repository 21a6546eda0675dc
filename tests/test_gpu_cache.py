"""CacheMap on the GPU: the Python model (statuses and contents), the CPU engine on fresh random
batches, eviction at full load (no entry lost without a status, every key in its buckets, the
top scores kept), operations on two streams ordered without a host sync, two GPUs. Marked gpu;
the sanitizer workload (tests/sanitize_workload.py) runs the cache kernels too."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, settings
from model_cache import check_placement, make_cache_machine

import gpuhash as gh
from gpuhash.cache.format import POLICIES

pytestmark = pytest.mark.gpu
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))


def twin_caches(gpu="cuda", **options):
    return [gh.CacheMap(key_dtype=torch.int64, device=device, **options)
            for device in (gpu, "cpu")]


def two_gpus():
    """A second GPU, made the non-current one: every launch must follow the cache there."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    torch.cuda.set_device(0)
    return "cuda:1"


def contents(cache) -> dict:
    keys, values, scores = cache.export()
    rows = values.reshape(values.shape[0], -1).cpu().tolist()
    return dict(zip(keys.cpu().tolist(), zip(scores.view(torch.int64).cpu().tolist(),
                                             map(tuple, rows))))


@pytest.mark.parametrize("policy", POLICIES)
def test_gpu_cache_behaves_like_its_model(policy):
    machine = make_cache_machine(policy=policy, device="cuda", exact=False)
    machine.TestCase.settings = settings(max_examples=15, stateful_step_count=12, **SETTINGS)
    machine.TestCase().runTest()


@pytest.mark.parametrize(("value_dtype", "shape", "width"),
                         [(torch.float32, (8,), 128), (torch.int8, (3,), 16),
                          (torch.float64, (), 32), (torch.int64, (4,), 64)], ids=str)
@pytest.mark.parametrize("split", [False, True], ids=["hbm", "half_in_host_memory"])
def test_cuda_cache_matches_cpu_engine_below_capacity(value_dtype, shape, width, split):
    below_capacity_against_the_cpu_engine("cuda", value_dtype, shape, width, split)


@pytest.mark.parametrize("split", [False, True], ids=["hbm", "half_in_host_memory"])
def test_a_cache_on_the_second_gpu_matches_the_cpu_engine(split):
    device = two_gpus()
    below_capacity_against_the_cpu_engine(device, torch.float32, (8,), 128, split)
    assert torch.cuda.current_device() == 0


def below_capacity_against_the_cpu_engine(device, value_dtype, shape, width, split):
    """Every operation on fresh random batches below capacity, CUDA on ``device`` against
    the CPU engine: statuses, found flags, rows by slot, and contents."""
    row_bytes = value_dtype.itemsize * (shape[0] if shape else 1)
    hbm = (1 << 15) * row_bytes if split else None  # the rows of half the slots
    gpu, cpu = twin_caches(device, value_dtype=value_dtype, value_shape=shape,
                           capacity=1 << 16, bucket_slots=width, policy="lfu",
                           max_hbm_bytes=hbm)
    if split:
        assert gpu.values.hbm_slots == 1 << 15 and gpu.values.host.is_pinned()
    for _ in range(3):
        keys = torch.randint(0, 20_000, (10_000,))
        values = torch.randn(10_000, *shape).mul(50).to(value_dtype)
        got = gpu.insert_or_assign(keys.to(device), values.to(device))
        want = cpu.insert_or_assign(keys, values)
        assert torch.equal(got.cpu(), want)
        probe = torch.randint(0, 25_000, (5_000,))
        for cache in (gpu, cpu):  # lfu counts touched keys once per call
            cache.find(probe.to(cache.device), update_scores=True)
        index, found = gpu.find_or_insert_index(probe.to(device), init=1)
        index_cpu, found_cpu = cpu.find_or_insert_index(probe, init=1)
        assert torch.equal(found.cpu(), found_cpu) and torch.equal(index.cpu() >= 0,
                                                                    index_cpu >= 0)
        erase = torch.randint(0, 20_000, (2_000,))
        # which row of a repeated key reports the erase may differ; the keys erased may not
        erased_gpu = set(erase[gpu.erase(erase.to(device)).cpu()].tolist())
        assert erased_gpu == set(erase[cpu.erase(erase)].tolist())
        # rows read and written by slot, wherever they live (slots differ between engines:
        # the rows are matched by key)
        index, found = gpu.find_index(probe.to(device))
        index_cpu, found_cpu = cpu.find_index(probe)
        assert torch.equal(gpu.values[index[found]].cpu(), cpu.values[index_cpu[found_cpu]])
        chosen = probe[found.cpu()].unique()
        new_rows = torch.randn(chosen.shape[0], *shape).mul(50).to(value_dtype)
        gpu.values[gpu.find_index(chosen.to(device))[0]] = new_rows.to(device)
        cpu.values[cpu.find_index(chosen)[0]] = new_rows
        add = torch.rand(probe.shape[0]) < 0.5
        deltas = torch.ones(probe.shape[0], *shape).to(value_dtype)
        got = gpu.accum_or_assign(probe.to(device), deltas.to(device), add.to(device))
        assert torch.equal(got.cpu(), cpu.accum_or_assign(probe, deltas, add))
    assert len(gpu) == len(cpu)
    assert contents(gpu) == contents(cpu)
    moved = gpu.to("cpu")
    assert contents(moved) == contents(cpu)
    assert contents(moved.to(device)) == contents(cpu)


@pytest.mark.parametrize(("width", "hbm_buckets", "pairs"),
                         [(16, None, 1), (128, None, 1), (16, 40, 1), (32, None, 4),
                          (128, None, 4)])
def test_eviction_at_full_load_loses_nothing_without_a_status(width, hbm_buckets, pairs):
    evictions_lose_nothing("cuda", width, hbm_buckets, pairs)


@pytest.mark.parametrize("hbm_buckets", [None, 40])
def test_evictions_on_the_second_gpu_lose_nothing(hbm_buckets):
    device = two_gpus()
    evictions_lose_nothing(device, 32, hbm_buckets, 4)
    assert torch.cuda.current_device() == 0


def evictions_lose_nothing(device, width, hbm_buckets, pairs):
    """Batches of custom scores into a full cache on ``device``: every status accounted for,
    every evicted entry returned whole, the contents what the statuses say."""
    # hbm_buckets: the value rows of the first buckets in GPU memory, the rest in host memory;
    # pairs of int64 a value: 4 makes 64-byte rows, which the evict launch copies out before
    # the slot is rewritten (rows up to 32 bytes wait in registers: kernels/cache.cu)
    hbm = None if hbm_buckets is None else hbm_buckets * width * 16 * pairs
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.int64,
                        value_shape=(2 * pairs,), capacity=64 * width, device=device,
                        policy="custom", bucket_slots=width, max_hbm_bytes=hbm)
    stored: dict[int, int] = {}  # key -> score, as the statuses and evictions report them
    generator = torch.Generator().manual_seed(width)
    for _ in range(10):
        keys = torch.randint(0, 2**60, (cache.capacity // 2,), generator=generator)
        scores = torch.randint(0, 2**40, keys.shape, generator=generator)
        values = torch.stack([keys, scores] * pairs, 1)
        status, (gone, gone_values, gone_scores) = cache.insert_and_evict(
            keys.to(device), values.to(device), scores=scores.to(device))
        status = status.cpu()
        assert set(status.unique().tolist()) <= {gh.INSERTED, gh.ASSIGNED,
                                                  gh.INSERTED_EVICTING, gh.REFUSED}
        # the output: every evicted entry, then every refused row (HierarchicalKV's contract)
        assert int((status == gh.INSERTED_EVICTING).sum()) + int(
            (status == gh.REFUSED).sum()) == gone.numel()
        stored.update(zip(keys.tolist(), scores.tolist()))
        # an entry may be evicted by a later row of the batch that admitted it
        for key, score, row in zip(gone.cpu().tolist(), gone_scores.view(torch.int64).cpu(
                ).tolist(), gone_values.cpu().tolist()):
            assert stored.pop(key) == score and row == [key, score] * pairs
        check_placement(cache)
        assert contents(cache) == {k: (s, (k, s) * pairs) for k, s in stored.items()}


@pytest.mark.parametrize(("width", "pairs"), [(16, 1), (16, 4), (128, 1), (128, 4)])
def test_single_rows_evict_what_the_cpu_engine_evicts(width, pairs):
    """One row a call leaves no race, so both engines must choose the same victim, the lowest
    score of the two buckets and the earliest slot on a tie (scores 0-3: many ties), and
    leave the same bytes: status, evicted entry, keys and scores slot by slot. 64-byte rows
    take the evict launch's copy-out path, 16-byte rows its registers."""
    generator = torch.Generator().manual_seed(width + pairs)
    cpu = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.int64,
                      value_shape=(2 * pairs,), capacity=8 * width, policy="custom",
                      bucket_slots=width)
    keys = torch.randint(0, 2**62, (4 * cpu.capacity,), generator=generator)
    cpu.insert_or_assign(keys, keys[:, None].expand(-1, 2 * pairs).contiguous(),
                         scores=torch.randint(0, 3, keys.shape, generator=generator))
    gpu = cpu.to("cuda")
    for _ in range(100):
        key = torch.randint(0, 2**62, (1,), generator=generator)
        score = torch.randint(0, 4, (1,), generator=generator)
        value = key[:, None].expand(-1, 2 * pairs).contiguous()
        on_cpu = cpu.insert_and_evict(key, value, scores=score)
        on_gpu = gpu.insert_and_evict(key.cuda(), value.cuda(), scores=score.cuda())
        assert on_cpu[0].tolist() == on_gpu[0].cpu().tolist()
        for a, b in zip(on_cpu[1], on_gpu[1]):
            assert torch.equal(a, b.cpu())
        assert torch.equal(cpu._state.keys, gpu._state.keys.cpu())
        assert torch.equal(cpu._state.scores, gpu._state.scores.cpu())
    check_placement(gpu)


@pytest.mark.parametrize("pairs", [1, 4])
def test_a_row_decides_after_an_earlier_row_of_its_warp_moved_an_entry(pairs):
    """Below the move limit, row A moves an entry out of bucket x to take its slot, with a
    score lower than any other; row B, next in the same warp, shares x: it must see A's entry
    there and evict it, as the CPU engine does, rather than decide on the bucket as it was
    (a batch of rows found their candidates before any of them wrote; found by a review)."""
    from model_cache import CacheModel

    width, buckets, free_bucket = 32, 64, 0
    model = CacheModel(num_buckets=buckets, width=width, policy="custom")
    chooser = __import__("random").Random(1)

    def pick(ok):
        while True:
            key = chooser.getrandbits(62)
            if ok(key):
                return key

    def homes(key):
        return set(model.buckets(key))

    def other(key, bucket):
        return (homes(key) - {bucket}).pop() if len(homes(key)) == 2 else bucket

    a = pick(lambda k: len(homes(k)) == 2 and free_bucket not in homes(k))
    x, _ = model.buckets(a)
    parity = model.digest(a) % 2
    b = pick(lambda k: len(homes(k)) == 2 and free_bucket not in homes(k) and x in homes(k)
             and set(model.buckets(a)) != homes(k) and model.digest(k) % 2 != parity)
    movable = x * width + parity  # a candidate of A's whose other bucket is the free one
    used, keys, scores = {a, b}, [-1] * (buckets * width), [0] * (buckets * width)
    for bucket in range(buckets):
        if bucket == free_bucket:
            continue
        for i in range(width):
            slot = bucket * width + i
            if slot == movable:
                key = pick(lambda k, c=bucket: c in homes(k) and other(k, c) == free_bucket
                           and k not in used)
            else:
                key = pick(lambda k, c=bucket: c in homes(k) and free_bucket not in homes(k)
                           and k not in used)
            used.add(key)
            keys[slot], scores[slot] = key, 100
    z = (homes(b) - {x}).pop()
    scores[z * width + 3] = 50
    results = []
    for device in ("cpu", "cuda"):
        cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.int64,
                            value_shape=(2 * pairs,), capacity=buckets * width, device=device,
                            policy="custom", bucket_slots=width)
        state, table = cache._state, torch.tensor(keys)
        state.keys.copy_(table)
        state.scores.copy_(torch.tensor(scores))
        state.digests.copy_(torch.tensor([model.digest(k) if k >= 0 else 0 for k in keys],
                                         dtype=torch.uint8))
        state.values.copy_(table[:, None].expand(-1, 2 * pairs))
        state.counts[0] = int((table >= 0).sum())
        cache._engine.refresh(state)  # key words written by torch: the CUDA index again
        rows = torch.tensor([a, b])
        for score_b in (60, 20):
            copy = cache.to(device)
            status, (gone, _, gone_scores) = copy.insert_and_evict(
                rows.to(device), rows[:, None].expand(-1, 2 * pairs).contiguous().to(device),
                scores=torch.tensor([1, score_b]).to(device))
            results.append((status.cpu().tolist(), gone.cpu().tolist(),
                            gone_scores.view(torch.int64).cpu().tolist()))
            check_placement(copy)
    assert results[:2] == results[2:]
    assert results[0][0] == [gh.INSERTED, gh.INSERTED_EVICTING]  # B evicts A's new entry


def test_eviction_keeps_the_top_scores_and_starts_late():
    """Fed five times its capacity of random scores, the cache keeps nearly the best keys, and
    the first eviction comes near full load (issue: >= 99.5% kept, first eviction >= 0.98)."""
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1 << 18,
                        device="cuda", policy="custom")
    total = 5 * cache.capacity
    torch.manual_seed(11)  # the same stream each run (0.9954-0.9956 kept in runs so far)
    keys = torch.randint(0, 2**62, (total,), device="cuda")
    scores = torch.randint(0, 2**62, (total,), device="cuda")
    first_eviction = None
    # a row per bucket per call, as HierarchicalKV's benchmark has (1M keys into 128M slots):
    # rows of one call choose buckets from what the cache held before it, so many rows per
    # bucket per call fill buckets unevenly and evict sooner
    step = cache.capacity // cache.spec.bucket_slots
    for part in range(0, total, step):
        chunk = slice(part, part + step)
        before = len(cache)
        status = cache.insert_or_assign(keys[chunk], torch.zeros(keys[chunk].numel(),
                                                                  device="cuda"),
                                        scores=scores[chunk])
        if first_eviction is None and bool((status != gh.INSERTED).any()):
            first_eviction = (before + int((status == gh.INSERTED).sum())) / cache.capacity
    best = torch.topk(scores, cache.capacity).values
    kept = cache.export()[2].view(torch.int64)
    kept_fraction = torch.isin(kept, best).sum().item() / cache.capacity
    print(f"kept {kept_fraction:.4f} of the top scores; first eviction at load "
          f"{first_eviction:.4f}")
    assert kept_fraction >= 0.995 and first_eviction >= 0.98  # issue 11: 99.5%, 0.98


def test_writes_and_reads_on_two_streams_are_ordered_without_a_host_sync():
    cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(4,),
                        capacity=1 << 16, device="cuda")
    writer, reader = torch.cuda.Stream(), torch.cuda.Stream()
    keys = torch.arange(50_000, device="cuda")
    values = keys[:, None].float().expand(-1, 4).contiguous()
    torch.cuda.synchronize()
    with torch.cuda.stream(writer):
        torch.cuda._sleep(1_000_000_000)  # the write waits behind this
    cache.insert_or_assign(keys, values, stream=writer)
    got, found = cache.find(keys, stream=reader)  # ordered after the write by an event
    reader.synchronize()
    assert bool(found.all()) and torch.equal(got, values)
    with torch.cuda.stream(reader):
        torch.cuda._sleep(1_000_000_000)
    index, _ = cache.find_index(keys, stream=reader)
    cache.erase(keys[::2].contiguous(), stream=writer)  # must wait for the read
    writer.synchronize()
    assert bool((index >= 0).all())
    assert len(cache) == 25_000


def test_a_cache_made_or_grown_on_one_stream_is_whole_before_calls_on_another():
    """The new state's fill is queued on the stream current where the cache is made (here
    behind a long sleep): a write on another stream must wait for it, or the fill would wipe
    what it wrote. reserve()'s move is queued on the current stream too, and the next call
    on another stream waits for it the same way."""
    maker, other = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(maker):
        torch.cuda._sleep(1_000_000_000)
        cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
                            capacity=1 << 16, initial_capacity=1 << 12, device="cuda")
    keys = torch.arange(2_000, device="cuda")
    values = keys[:, None].float().expand(-1, 2).contiguous()
    torch.cuda.synchronize()  # the keys and values, made on the default stream
    with torch.cuda.stream(maker):
        torch.cuda._sleep(1_000_000_000)
    cache.insert_or_assign(keys, values, stream=other)
    got, found = cache.find(keys, stream=other)
    other.synchronize()
    assert bool(found.all()) and torch.equal(got, values)
    with torch.cuda.stream(maker):
        torch.cuda._sleep(1_000_000_000)  # the move is queued behind a second of work
        cache.reserve(1 << 16)
    got, found = cache.find(keys, stream=other)
    other.synchronize()
    assert cache.capacity == 1 << 16 and bool(found.all()) and torch.equal(got, values)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_caches_on_two_gpus_interleaved_from_one_thread():
    torch.cuda.set_device(0)
    caches = [gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(8,),
                          capacity=1 << 15, device=f"cuda:{i}") for i in (0, 1)]
    for round_ in range(3):
        for i in (1, 0):
            keys = torch.arange(round_ * 5_000, (round_ + 1) * 5_000, device=f"cuda:{i}")
            caches[i].insert_or_assign(keys * (i + 1), keys[:, None].float().expand(-1, 8)
                                       .contiguous())
            assert torch.cuda.current_device() == 0
    for i in (0, 1):
        keys = torch.arange(15_000, device=f"cuda:{i}")
        got, found = caches[i].find(keys * (i + 1))
        assert bool(found.all()) and torch.equal(got[:, 0], keys.float())


@pytest.mark.parametrize("max_hbm_bytes", [None, 2048 * 4])
@pytest.mark.parametrize("second_gpu", [False, True], ids=["cuda", "cuda_1"])
def test_a_growing_cuda_cache_matches_the_cpu_engine(max_hbm_bytes, second_gpu):
    device = two_gpus() if second_gpu else "cuda"
    gpu, cpu = twin_caches(device, value_dtype=torch.float32, capacity=8192,
                           initial_capacity=256, bucket_slots=32, policy="lru",
                           max_hbm_bytes=max_hbm_bytes)
    for start in range(0, 6000, 1000):
        keys = torch.arange(start, start + 1000)
        got = gpu.insert_or_assign(keys.to(device), keys.float().to(device))
        assert torch.equal(got.cpu(), cpu.insert_or_assign(keys, keys.float()))
        assert gpu.capacity == cpu.capacity
    gpu.reserve(8000)
    cpu.reserve(8000)
    assert gpu.capacity == cpu.capacity == 8192
    assert contents(gpu) == contents(cpu) and len(gpu) == 6000
    if max_hbm_bytes is None:  # the rows moved with the growth, on the cache's GPU
        assert gpu.values.device == torch.device("cuda", 1 if second_gpu else 0)
