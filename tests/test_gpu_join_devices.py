"""Joins on the paths a user takes that the benchmark does not: an explicit stream whose keys
are still being written when the join is called, and keys on a second GPU while another is
current (every launch, temporary and copy must follow the keys)."""

from __future__ import annotations

import pytest
import torch

import gpuhash as gh

pytestmark = pytest.mark.gpu

HOWS = ["inner", "left", "right", "full", "semi", "anti"]


def pairs(result, how) -> list[int]:
    """The result's pairs, each as one int64 (rows below 2**30; -1 allowed), sorted."""
    if how in ("semi", "anti"):
        return torch.sort(result.cpu()).values.tolist()
    left, right = (r.cpu() for r in result)
    return torch.sort((left + 1) * 2**31 + right + 1).values.tolist()


def unique_build(rows: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Build keys: a permutation of 0..rows-1 (int32); and each key's row."""
    right = torch.randperm(rows, device=device).to(torch.int32)
    row_of = torch.empty(rows, dtype=torch.int64, device=device)
    row_of[right.long()] = torch.arange(rows, device=device)
    return right, row_of


@pytest.mark.parametrize("build_rows", [50_000, 4_000_000])  # a table in L2, one past it
def test_a_join_on_a_busy_stream_waits_for_its_keys(build_rows):
    """The probe keys are written on ``stream`` behind a long sleep; a join issued on that
    stream must see them (a launch or temporary on another stream would read the zeros)."""
    right, row_of = unique_build(build_rows, "cuda")
    truth = torch.randint(0, 2 * build_rows, (3 * build_rows,), device="cuda", dtype=torch.int32)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        left = torch.zeros_like(truth)
        torch.cuda._sleep(200_000_000)
        left.copy_(truth)
    got_left, got_right = gh.join(left, right, how="inner", stream=stream)
    stream.synchronize()
    hit = truth.long() < build_rows
    expect_left = torch.nonzero(hit).flatten()
    order = torch.argsort(got_left)
    assert torch.equal(got_left[order], expect_left)
    assert torch.equal(got_right[order], row_of[truth[expect_left].long()])


@pytest.mark.parametrize("how", ["inner", "left"])  # left marks build rows: stray writes
def test_a_build_prepared_on_a_busy_stream_is_whole_before_a_probe_on_another(how):
    """JoinBuild on a stream held up by a long sleep; a probe issued at once on another stream
    must wait for the build (it would read an unfilled table otherwise)."""
    right, row_of = unique_build(4_000_000, "cuda")
    left = torch.randint(0, 8_000_000, (6_000_000,), device="cuda", dtype=torch.int32)
    torch.cuda.synchronize()
    build_stream, probe_stream = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(build_stream):
        torch.cuda._sleep(200_000_000)
    built = gh.JoinBuild(right, stream=build_stream)
    got_left, got_right = built.probe(left, how=how, stream=probe_stream)
    probe_stream.synchronize()
    hit = left.long() < 4_000_000
    matched = got_right >= 0
    order = torch.argsort(got_left[matched])
    expect_left = torch.nonzero(hit).flatten()
    assert torch.equal(got_left[matched][order], expect_left)
    assert torch.equal(got_right[matched][order], row_of[left[expect_left].long()])
    assert int((~matched).sum()) == (int((~hit).sum()) if how == "left" else 0)
    if how == "left":  # the probe rows without a match, each once, -1 on the right
        assert torch.equal(torch.sort(got_left[~matched]).values,
                           torch.nonzero(~hit).flatten())


# (build rows, probe rows, key dtype): a table in L2 with a direct array; int64 keys through
# the hash table past L2; both sides at the radix join's threshold (gpu-radix)
SIDE_STREAM_SHAPES = [(100_000, 1_000_000, torch.int32), (3_000_000, 3_000_000, torch.int64),
                      (16_777_216, 16_777_216, torch.int32)]


@pytest.mark.parametrize("shape", SIDE_STREAM_SHAPES, ids=["direct", "table", "radix"])
def test_a_join_on_a_side_stream_runs_beside_work_on_the_default_stream(shape):
    """gh.join and a prepared build's probe on a stream of their own finish while about a
    second of work still runs on the default stream: nothing in them (a launch, a temporary,
    a copy, a cooperative build that needs the whole GPU) waits for another stream's work,
    and nothing of theirs runs there. Fails when the default stream is idle by the time their
    results are on the host, or when those results, copied on their stream, are wrong."""
    build_rows, probe_rows, dtype = shape
    generator = torch.Generator(device="cuda").manual_seed(build_rows)
    right = torch.randperm(build_rows, device="cuda", generator=generator).to(dtype)
    left = torch.randint(0, 2 * build_rows, (probe_rows,), device="cuda", dtype=dtype,
                         generator=generator)
    row_of = torch.empty(build_rows, dtype=torch.int64, device="cuda")
    row_of[right.long()] = torch.arange(build_rows, device="cuda")
    hit = torch.nonzero(left < build_rows).flatten()
    expected = pairs((hit, row_of[left[hit].long()]), "inner")
    strategy = "gpu-radix" if build_rows >= 2**24 else "hash-table"
    assert gh.explain_join(left, right).strategy == strategy
    side = torch.cuda.Stream()
    torch.cuda.synchronize()  # the keys, made on the default stream, before `side` reads them
    gh.join(left, right, stream=side)  # kernels compiled, tables kept
    prepared = gh.JoinBuild(right, stream=side)
    prepared.probe(left, stream=side)
    torch.cuda.synchronize()
    for run in (lambda: gh.join(left, right, stream=side),
                lambda: prepared.probe(left, stream=side)):
        torch.cuda._sleep(2_000_000_000)  # the default stream, about a second
        got = run()
        with torch.cuda.stream(side):  # ordered after the join's work on `side` only
            host = tuple(t.to("cpu") for t in got)
        assert not torch.cuda.default_stream().query(), "the join waited for the default stream"
        torch.cuda.synchronize()
        assert pairs(host, "inner") == expected


def two_gpus():
    return pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


@two_gpus()
@pytest.mark.parametrize("how", HOWS)
def test_joins_on_the_second_gpu_match_the_cpu_engine(how):
    torch.cuda.set_device(0)
    generator = torch.Generator().manual_seed(HOWS.index(how))
    # a table in L2, one past it, and dense distinct keys past the direct array: the ranked one
    for rows_l, rows_r, dense in ((30_000, 8_000, False), (3_000_000, 3_000_000, False),
                                  (5_000_000, 5_000_000, True)):
        left = torch.randint(0, rows_r * 2, (rows_l,), generator=generator)
        right = (torch.randperm(rows_r, generator=generator) if dense
                 else torch.randint(0, rows_r, (rows_r,), generator=generator))
        valid = torch.rand(rows_l, generator=generator) > 0.1
        expected = pairs(gh.join(left, right, how=how, left_valid=valid), how)
        on_1 = dict(left_keys=left.to("cuda:1"), right_keys=right.to("cuda:1"),
                    left_valid=valid.to("cuda:1"))
        got = gh.join(**on_1, how=how)
        assert torch.cuda.current_device() == 0
        first = got if isinstance(got, torch.Tensor) else got[0]
        assert first.device == torch.device("cuda:1")
        assert pairs(got, how) == expected
        plan = gh.explain_join(**on_1, how=how, memory_budget=rows_r * 40)
        assert plan.strategy == "hash-partitioned" and plan.parts > 1, plan
        budget = gh.join(**on_1, how=how, memory_budget=rows_r * 40)  # part by part
        assert pairs(budget, how) == expected
        build = gh.JoinBuild(right.to("cuda:1"))
        _, _, _, words, ranked = build._table._built
        assert (ranked is not None and int(words[-1]) == 0) is dense
        for _ in range(2):  # reusable
            again = build.probe(left.to("cuda:1"), left_valid=valid.to("cuda:1"), how=how)
            assert pairs(again, how) == expected
        assert torch.cuda.current_device() == 0


@two_gpus()
def test_host_keys_stream_through_the_second_gpu():
    torch.cuda.set_device(0)
    generator = torch.Generator().manual_seed(7)
    left = torch.randint(0, 400_000, (2_000_000,), generator=generator).to(torch.int32)
    right = torch.randperm(200_000, generator=generator).to(torch.int32)
    for how in ("inner", "left", "semi"):
        expected = pairs(gh.join(left, right, how=how), how)
        plan = gh.explain_join(left, right, how=how, device="cuda:1", memory_budget=6_000_000)
        assert plan.strategy == "out-of-core-streams", plan
        for pinned in (False, True):
            keys = left.pin_memory() if pinned else left
            got = gh.join(keys, right, how=how, device="cuda:1", memory_budget=6_000_000)
            first = got if isinstance(got, torch.Tensor) else got[0]
            assert first.device.type == "cpu" and torch.cuda.current_device() == 0
            assert pairs(got, how) == expected


@two_gpus()
@pytest.mark.parametrize("how", ["inner", "left", "full"])
def test_a_dict_merge_on_the_second_gpu_matches_the_cpu(how):
    torch.cuda.set_device(0)
    generator = torch.Generator().manual_seed(11)
    left = {"k": torch.randint(0, 5_000, (20_000,), generator=generator),
            "a": torch.rand(20_000, 3, generator=generator)}
    right = {"k": torch.randint(0, 5_000, (4_000,), generator=generator),
             "b": torch.randint(0, 100, (4_000,), generator=generator, dtype=torch.int16)}
    expected = gh.merge(left, right, on="k", how=how)
    got = gh.merge({n: c.to("cuda:1") for n, c in left.items()},
                   {n: c.to("cuda:1") for n, c in right.items()}, on="k", how=how)
    assert torch.cuda.current_device() == 0
    assert set(got) == set(expected)
    assert all(column.device == torch.device("cuda:1") for column in got.values())
    def rows(table):
        columns = [table[n].cpu().reshape(len(table["k"]), -1).double() for n in sorted(table)]
        return sorted(map(tuple, torch.cat(columns, dim=1).tolist()))
    assert rows(got) == rows(expected)


@two_gpus()
def test_a_multimap_on_the_second_gpu_counts_and_finds_every_row():
    torch.cuda.set_device(0)
    keys = torch.arange(100_000, device="cuda:1") % 1000
    table = gh.MultiMap(key_dtype=torch.int64, value_dtype=torch.int64, device="cuda:1")
    table.insert(keys, torch.arange(100_000, device="cuda:1"))
    assert torch.cuda.current_device() == 0
    counts = table.count(torch.arange(2000, device="cuda:1"))
    assert counts.device == torch.device("cuda:1")
    assert torch.equal(counts.cpu(), (torch.arange(2000) < 1000).long() * 100)
    rows, index = table.find_all(torch.tensor([5, 1500], device="cuda:1"))
    assert sorted(table.values[index].cpu().tolist()) == list(range(5, 100_000, 1000))
    assert bool((rows == 0).all())
