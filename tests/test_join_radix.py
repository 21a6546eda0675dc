"""The radix-partitioned join (``gpu-radix``): the strategy run on the CPU engine's twin and on
the GPU against the hash-table join (itself checked against DuckDB in test_join.py), the
engines' partitions (as sets of rows), bounds and pairs compared, the planner's choice, and
the kernel constants against _radix_format."""

from __future__ import annotations

import pytest
import torch

import gpuhash as gh
from conftest import covering
from gpuhash.join import build as join_build
from gpuhash.join import plan as _join_plan
from gpuhash.join import radix_format as fmt
from gpuhash.join import sides as join_sides
from gpuhash.join.cpu import radix as radix_cpu
from gpuhash.join.strategies.radix import Range32, run_radix

HOWS = ["inner", "left", "right", "full", "semi", "anti"]


def radix(left, right, how, *, left_valid=None, right_valid=None, nulls_equal=False):
    """The radix strategy's result for these keys, on their device (planned with room)."""
    left_side, right_side = join_sides.sides(left, right, left_valid, right_valid)
    plan = _join_plan.plan_join(left_side.rows, right_side.rows, how=how, key_bytes=8,
                                device=left_side.device, memory_budget=2**40)
    return run_radix(left_side, right_side, plan, nulls_equal)


def rows_of(result, how) -> list[int]:
    """The result's rows, or its pairs each as one int64 (rows below 2**30; -1 allowed),
    sorted."""
    if how in ("semi", "anti"):
        return torch.sort(result.cpu()).values.tolist()
    left, right = (r.cpu() for r in result)
    return torch.sort((left + 1) * 2**31 + right + 1).values.tolist()


def sides(kind: str, rows: int, generator: torch.Generator):
    """(left keys, right keys, left valid, right valid) of a kind of join input."""
    g = generator
    if kind == "unique":
        right = torch.randperm(rows, generator=g)
        left = torch.randint(0, 2 * rows, (3 * rows,), generator=g)
    elif kind == "repeats":  # each build key about 10 times: more pairs than probe rows
        right = torch.randint(0, rows // 10, (rows,), generator=g)
        left = torch.randint(0, rows // 5, (rows,), generator=g)
    elif kind == "skew":  # one key in 60% of the build rows: its partition overflows
        right = torch.randint(0, rows, (rows,), generator=g)
        right[: rows * 3 // 5] = 7
        left = torch.randint(0, rows, (2 * rows,), generator=g)
        left[:: rows // 10] = 7  # 20 probe rows: 12 times the rows of pairs
    elif kind == "hot_probe":  # one key in half the probe rows: its partition's many blocks
        right = torch.randperm(rows, generator=g)
        left = torch.randint(0, rows, (2 * rows,), generator=g)
        left[::2] = 7
    elif kind == "wide":  # two columns past 32 bits of codes: 8-byte codes
        right = (torch.randint(0, 2**40, (rows,), generator=g),
                 torch.randint(0, 3, (rows,), generator=g))
        pick = torch.randint(0, rows, (2 * rows,), generator=g)
        left = (right[0][pick], torch.randint(0, 4, (2 * rows,), generator=g))
    elif kind == "skew32":  # int32 keys, the largest in 60% of the build rows: it overflows
        top = 2**31 - 1         # (its code is all ones; the global table takes it widened)
        right = torch.randint(-2**31, top, (rows,), generator=g, dtype=torch.int64)
        right = right.to(torch.int32)
        right[: rows * 3 // 5] = top
        left = right[torch.randint(0, rows, (2 * rows,), generator=g)]
        left[left == top] = -5
        left[:: rows // 10] = top
    elif kind == "uint32":  # the whole unsigned range, its ends included
        right = torch.randint(0, 2**32, (rows,), generator=g).to(torch.uint32)
        right[:3] = torch.tensor([0, 2**32 - 1, 2**32 - 2]).to(torch.uint32)
        left = torch.cat([right[torch.randint(0, rows, (rows,), generator=g)],
                          torch.randint(0, 2**32, (rows,), generator=g).to(torch.uint32)])
    elif kind == "pair":  # two small columns: 4-byte codes made by the encoder (shape 0)
        right = (torch.randint(0, 300, (rows,), generator=g, dtype=torch.int16),
                 torch.randint(0, 50, (rows,), generator=g, dtype=torch.int16))
        left = (torch.randint(0, 330, (2 * rows,), generator=g, dtype=torch.int16),
                torch.randint(0, 50, (2 * rows,), generator=g, dtype=torch.int16))
    else:  # "int32": the common key, codes straight from the column
        right = torch.randint(-2**31, 2**31 - 1, (rows,), generator=g, dtype=torch.int64)
        right = right.to(torch.int32)
        right[:4] = torch.tensor([2**31 - 1, 2**31 - 2, -2**31, -1], dtype=torch.int32)
        left = torch.cat([right[torch.randint(0, rows, (rows,), generator=g)],
                          torch.randint(-2**31, 2**31 - 1, (rows,), generator=g).to(torch.int32)])
    left_rows = (left[0] if isinstance(left, tuple) else left).shape[0]
    right_rows = (right[0] if isinstance(right, tuple) else right).shape[0]
    return (left, right, torch.rand(left_rows, generator=g) > 0.1,
            torch.rand(right_rows, generator=g) > 0.1)


def moved(keys, device):
    if isinstance(keys, tuple):
        return tuple(k.to(device) for k in keys)
    return keys.to(device)


KINDS = ["unique", "repeats", "skew", "skew32", "hot_probe", "wide", "pair", "int32",
         "uint32"]


@pytest.mark.parametrize(("kind", "how"), covering(KINDS, HOWS))
def test_the_radix_join_on_the_cpu_engine_matches_the_hash_table_join(kind, how):
    left, right, left_valid, right_valid = sides(kind, 6000, torch.Generator().manual_seed(3))
    for nulls_equal in (False, True):
        options = dict(left_valid=left_valid, right_valid=right_valid, nulls_equal=nulls_equal)
        want = gh.join(left, right, how=how, **options)
        assert rows_of(radix(left, right, how, **options), how) == rows_of(want, how)
    assert rows_of(radix(right, left, how), how) == rows_of(gh.join(right, left, how=how), how)


def test_skewed_partitions_overflow_to_the_global_table():
    left, right, _, _ = sides("skew", 6000, torch.Generator().manual_seed(5))
    encoder = join_build.KeyEncoder([right], None)
    bits = fmt.partition_bits(6000, 4)
    built = radix_cpu.partition(*encoder.kernel_input([right], None), code_bytes=4, bits=bits)
    probed = radix_cpu.partition(*encoder.kernel_input([left], None), code_bytes=4, bits=bits)
    _, _, overflowed, used = radix_cpu.join_partitions(built, probed, bits=bits)
    assert overflowed.shape[0] == 1 and used[0] == 6000  # the partition of key 7
    assert 11_900 < used[1] <= 12_000  # probe keys past the build's range have no code


@pytest.mark.parametrize("how", ["inner", "left", "semi"])
def test_empty_sides_and_all_null_keys(how):
    keys = torch.arange(10)
    none = torch.zeros(0, dtype=torch.int64)
    for left, right in ((none, keys), (keys, none), (none, none)):
        assert rows_of(radix(left, right, how), how) == rows_of(gh.join(left, right, how=how),
                                                                how)
    nulls = torch.zeros(10, dtype=torch.bool)
    got = radix(keys, keys, how, left_valid=nulls, right_valid=nulls)
    assert rows_of(got, how) == rows_of(gh.join(keys, keys, how=how, left_valid=nulls,
                                                right_valid=nulls), how)


def test_the_planner_takes_the_radix_join_for_large_gpu_builds_within_the_budget():
    cuda = torch.device("cuda")
    big = _join_plan.plan_join(100_000_000, 100_000_000, how="inner", key_bytes=4,
                               device=cuda, memory_budget=40 * 2**30)
    assert big.strategy == "gpu-radix" and big.parts == 2**16, big
    assert "shared memory" in big.why
    small = _join_plan.plan_join(10_000_000, 100_000_000, how="inner", key_bytes=4,
                                 device=cuda, memory_budget=40 * 2**30)
    assert small.strategy == "hash-table", small
    tight = _join_plan.plan_join(100_000_000, 100_000_000, how="inner", key_bytes=4,
                                 device=cuda, memory_budget=2 * 2**30)
    assert tight.strategy != "gpu-radix", tight
    fixed = _join_plan.plan_join(100_000_000, 100_000_000, how="inner", key_bytes=4,
                                 device=cuda, memory_budget=40 * 2**30, build_fixed=True)
    assert fixed.strategy != "gpu-radix", fixed
    on_cpu = _join_plan.plan_join(100_000_000, 100_000_000, how="inner", key_bytes=4,
                                  device=torch.device("cpu"), memory_budget=40 * 2**30)
    assert on_cpu.strategy != "gpu-radix", on_cpu
    assert not _join_plan.wants_fanout(big, keys_on_gpu=True)
    few_probes = _join_plan.plan_join(1_000_000, 100_000_000, how="semi", key_bytes=4,
                                      device=cuda, memory_budget=40 * 2**30)
    assert few_probes.strategy != "gpu-radix", few_probes


def test_the_planner_leaves_the_radix_join_to_gpus_with_the_shared_memory_of_its_tiles(
        monkeypatch):
    cuda = torch.device("cuda")
    for shared, radix in ((48 * 1024, False), (fmt.BLOCK_SHARED_BYTES, True)):
        monkeypatch.setattr(_join_plan, "block_shared_bytes", lambda device, n=shared: n)
        plan = _join_plan.plan_join(100_000_000, 100_000_000, how="inner", key_bytes=4,
                                    device=cuda, memory_budget=40 * 2**30)
        assert (plan.strategy == "gpu-radix") is radix, (shared, plan)
        assert ("(gpu-radix) is not taken" in plan.why) is not radix, plan.why
    tight = _join_plan.plan_join(100_000_000, 100_000_000, how="inner", key_bytes=4,
                                 device=cuda, memory_budget=2 * 2**30)
    assert "(gpu-radix) is not taken: both sides' partitions" in tight.why, tight.why


def test_the_radix_layout_fits_a_block():
    assert {4: fmt.TILE[4] * 8, 8: fmt.TILE[8] * 12} == fmt.STAGED_BYTES
    assert fmt.BLOCK_SHARED_BYTES <= 64 * 1024 + 8192  # sm_75 gives 64 KB, later GPUs more


def test_partition_bits_stay_in_the_two_passes_range():
    assert fmt.partition_bits(0, 4) == fmt.MIN_BITS
    assert fmt.partition_bits(10**12, 8) == fmt.MAX_BITS
    assert fmt.pass_bits(16) == (8, 8) and fmt.pass_bits(5) == (3, 2)
    assert 2**fmt.MAX_BITS * fmt.LIMIT[4] > fmt.max_build_rows(4)


def _tiles(keys, tiles, code_bytes):
    """The (first row, rows) of each tile of a pass, as the kernels read them."""
    if tiles is None:
        tile = fmt.TILE[code_bytes]
        return [(first, min(tile, keys.shape[0] - first))
                for first in range(0, keys.shape[0], tile)]
    return [tuple(pair) for pair in tiles.tolist()]


def _bins(keys, valid, shape, low, high, *, code_bytes, bits, shift, bin_bits):
    """Each row's code, whether it is usable, and its bin in the pass."""
    codes, usable = radix_cpu.join_codes(code_bytes, keys, valid, shape, low, high)
    bins = (radix_cpu.partition_of(codes, bits) >> shift) & ((1 << bin_bits) - 1)
    return codes, usable, bins


def emulated_histogram(keys, valid, shape, low, high, tiles, *, code_bytes, bits, shift,
                       bin_bits, blocks):
    """kernels/radix_join.cu: gh_radix_hist, in torch on the CPU."""
    _, usable, bins = _bins(keys, valid, shape, low, high, code_bytes=code_bytes, bits=bits,
                            shift=shift, bin_bits=bin_bits)
    counts = torch.zeros(1 << bin_bits, blocks, dtype=torch.int32)
    for tile, (first, rows) in enumerate(_tiles(keys, tiles, code_bytes)):
        mine = bins[first:first + rows][usable[first:first + rows]]
        counts[:, tile] = torch.bincount(mine, minlength=1 << bin_bits).to(torch.int32)
    return counts.reshape(-1)


def emulated_scatter(keys, valid, shape, low, high, rows_in, tiles, raw, offsets, *,
                     code_bytes, bits, shift, bin_bits, blocks):
    """kernels/radix_join.cu: gh_radix_scatter, in torch on the CPU (a tile's rows of a bin in
    row order; the kernel's order within a run is free)."""
    codes, usable, bins = _bins(keys, valid, shape, low, high, code_bytes=code_bytes,
                                bits=bits, shift=shift, bin_bits=bin_bits)
    codes_out = torch.full((keys.shape[0],), -7, dtype=codes.dtype)
    rows_out = torch.full((keys.shape[0],), -7, dtype=torch.int32)
    at = offsets.view(1 << bin_bits, blocks).clone()
    for tile, (first, rows) in enumerate(_tiles(keys, tiles, code_bytes)):
        for i in range(first, first + rows):
            if usable[i]:
                place = int(at[bins[i], tile])
                at[bins[i], tile] += 1
                codes_out[place] = codes[i]
                rows_out[place] = i if rows_in is None else rows_in[i]
    return codes_out, rows_out


@pytest.mark.parametrize("rows, bits, code_bytes", [(0, 2, 4), (300, 3, 4), (9000, 5, 4),
                                                    (20_000, 9, 8), (30_000, 4, 4)])
def test_the_cuda_engines_glue_between_its_launches_places_every_row(monkeypatch, rows,
                                                                     bits, code_bytes):
    """radix_cuda.partition's torch glue (the second pass's tiles, every run's offsets, the
    bounds) around emulations of its two kernels, against the CPU engine's partitions: the
    layout the GPU's launches get is checked without a GPU. Small tiles, so that a run of
    the first pass spans many tiles of the second."""
    from gpuhash.join.cuda import radix as radix_cuda
    monkeypatch.setattr(radix_cuda, "_histogram", emulated_histogram)
    monkeypatch.setattr(radix_cuda, "_scatter", emulated_scatter)
    monkeypatch.setattr(fmt, "TILE", {4: 256, 8: 128})
    generator = torch.Generator().manual_seed(rows)
    dtype = torch.int32 if code_bytes == 4 else torch.int64
    keys = torch.randint(0, max(rows // 3, 1), (rows,), generator=generator).to(dtype)
    keys[: rows // 4] = 5  # one run spanning many of the second pass's tiles
    valid = torch.rand(rows, generator=generator) > 0.2
    want = radix_cpu.partition(keys, valid, 1, 0, 2**31 - 1 if code_bytes == 4 else 2**40,
                               code_bytes=code_bytes, bits=bits)
    got = radix_cuda.partition(keys, valid, 1, 0, 2**31 - 1 if code_bytes == 4 else 2**40,
                               code_bytes=code_bytes, bits=bits)
    assert torch.equal(got[2], want[2])
    assert partitions_by_number(got) == partitions_by_number(want)


# --- on the GPU ------------------------------------------------------------------------------
gpu = pytest.mark.gpu


def partitions_by_number(side) -> list:
    """A partitioned side as {partition: sorted (code, row)} over its used rows."""
    codes, rows, bounds = (t.cpu() for t in side)
    out = []
    for p in range(bounds.shape[0] - 1):
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        out.append(sorted(zip(codes[lo:hi].tolist(), rows[lo:hi].tolist())))
    return out


@gpu
@pytest.mark.parametrize("kind", KINDS)
def test_the_engines_partition_and_pair_the_same_rows(kind):
    from gpuhash.join.cuda import radix as radix_cuda
    left, right, left_valid, right_valid = sides(kind, 200_000, torch.Generator().manual_seed(9))
    right_columns = list(right) if isinstance(right, tuple) else [right]
    left_columns = list(left) if isinstance(left, tuple) else [left]
    encoder = (Range32(right_columns[0], right_valid) if join_build.Direct32.suits(right_columns)
               else join_build.KeyEncoder(right_columns, right_valid))  # as run_radix chooses
    code_bytes = 4 if encoder.key_dtype == torch.int32 else 8
    bits = fmt.partition_bits(200_000, code_bytes)
    results = {}
    for engine, device in ((radix_cpu, "cpu"), (radix_cuda, "cuda")):
        built, probed = (engine.partition(*encoder.kernel_input(
            [c.to(device) for c in columns], valid.to(device)), code_bytes=code_bytes,
            bits=bits) for columns, valid in ((right_columns, right_valid),
                                              (left_columns, left_valid)))
        build_hit = torch.zeros(200_000, dtype=torch.uint8, device=device)
        probe_rows, build_rows, overflowed, used = engine.join_partitions(
            built, probed, bits=bits, build_hit=build_hit)
        probe_hit = torch.zeros(left_columns[0].shape[0], dtype=torch.bool, device=device)
        engine.join_partitions(built, probed, bits=bits, probe_hit=probe_hit)
        results[device] = (partitions_by_number(built), partitions_by_number(probed),
                           sorted(zip(probe_rows.tolist(), build_rows.tolist())),
                           overflowed.tolist(), used, build_hit.cpu(), probe_hit.cpu())
    cpu, cuda = results["cpu"], results["cuda"]
    for a, b in zip(cpu, cuda):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
    assert cpu[4][0] > 0 and len(cpu[2]) > 0  # rows were partitioned and paired
    assert (len(cpu[3]) > 0) == kind.startswith("skew")


@gpu
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", HOWS)
def test_the_radix_join_on_the_gpu_matches_the_hash_table_join(kind, how):
    generator = torch.Generator().manual_seed(4)
    left, right, left_valid, right_valid = sides(kind, 100_000, generator)
    left, right = moved(left, "cuda"), moved(right, "cuda")
    if how == "full":  # nulls_equal pairs every null with every null: a few of them
        left_valid = torch.rand(left_valid.shape[0], generator=generator) > 0.002
        right_valid = torch.rand(right_valid.shape[0], generator=generator) > 0.002
    options = dict(left_valid=left_valid.cuda(), right_valid=right_valid.cuda())
    stream = torch.cuda.Stream()  # the strategy's work follows the current stream
    with torch.cuda.stream(stream):
        got = radix(left, right, how, **options, nulls_equal=how == "full")
    stream.synchronize()
    want = gh.join(left, right, how=how, **options, nulls_equal=how == "full")
    assert rows_of(got, how) == rows_of(want, how)


@gpu
@pytest.mark.parametrize("dtype", [torch.int32, torch.uint32, torch.int64])
def test_a_validity_mask_that_is_a_strided_view_is_read_by_row(dtype):
    """Masks reach the kernels as a byte a row: a view of every second byte must be copied
    first, on the radix and the hash-table joins alike."""
    generator = torch.Generator().manual_seed(6)
    left = torch.randint(0, 5000, (20_000,), generator=generator).to(dtype)
    right = torch.randint(0, 5000, (8000,), generator=generator).to(dtype)
    mask = torch.rand(40_000, generator=generator) > 0.3
    want = gh.join(left, right, how="left", left_valid=mask[::2])
    strided = mask.cuda()[::2]
    for got in (gh.join(left.cuda(), right.cuda(), how="left", left_valid=strided),
                radix(left.cuda(), right.cuda(), "left", left_valid=strided)):
        assert rows_of(got, "left") == rows_of(want, "left")


@gpu
def test_gh_join_chooses_the_radix_join_past_its_threshold(monkeypatch):
    monkeypatch.setattr(_join_plan, "RADIX_MIN_BUILD_ROWS", 100_000)
    _join_plan._small_gpu_plan.cache_clear()
    try:
        left, right, _, _ = sides("int32", 300_000, torch.Generator().manual_seed(2))
        left, right = left.cuda(), right.cuda()
        plan = gh.explain_join(left, right, memory_budget=2**34)
        assert plan.strategy == "gpu-radix", plan
        got = gh.join(left, right, memory_budget=2**34)
        monkeypatch.setattr(_join_plan, "RADIX_MIN_BUILD_ROWS", 2**40)
        assert rows_of(got, "inner") == rows_of(gh.join(left, right, memory_budget=2**34),
                                                "inner")
    finally:
        _join_plan._small_gpu_plan.cache_clear()


@gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs two GPUs")
def test_the_radix_join_on_the_second_gpu():
    torch.cuda.set_device(0)
    left, right, left_valid, _ = sides("repeats", 100_000, torch.Generator().manual_seed(8))
    want = gh.join(left, right, how="full", left_valid=left_valid)
    got = radix(left.to("cuda:1"), right.to("cuda:1"), "full",
                left_valid=left_valid.to("cuda:1"))
    assert torch.cuda.current_device() == 0 and got[0].device == torch.device("cuda:1")
    assert rows_of(got, "full") == rows_of(want, "full")
