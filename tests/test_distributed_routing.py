"""The sharded tables' routing in one pass (gh.distributed.routing: owners, route; the numba
loops of distributed/cpu) against its definition in torch operations (owner_of), for every key
dtype; and calls big enough that each column travels by its own all-to-all (the small calls of
tests/test_distributed.py travel packed in one matrix), against one table on gloo ranks."""

from __future__ import annotations

import pytest
import torch
from distributed_worlds import gathered, run_world

import gpuhash as gh
from gpuhash.distributed import exchange
from gpuhash.distributed.base import fills_zero
from gpuhash.distributed.routing import owner_dtype, owner_of, owners, route

KEY_DTYPES = (torch.int32, torch.uint32, torch.int64, torch.uint64)
# one rank, a few, the widest one-byte owners and the first int32 ones, many
WORLDS = (1, 2, 3, 4, 7, 256, 257, 5000)


def random_keys(rows: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Keys of every bit pattern of ``dtype`` (the high bit set in half of them)."""
    generator = torch.Generator().manual_seed(seed)
    words = torch.randint(-2**63, 2**63 - 1, (rows,), generator=generator)
    if dtype.itemsize == 4:
        words = words.view(torch.int32)[:rows].contiguous()
    return words.view(dtype)


@pytest.mark.parametrize("dtype", KEY_DTYPES)
@pytest.mark.parametrize("rows", [0, 1, 1000, 200_003])  # one chunk, and several in parallel
def test_owners_in_one_pass_are_owner_of_bit_for_bit(dtype, rows):
    keys = random_keys(rows, dtype, seed=rows)
    for world in WORLDS:
        found, counts = owners(keys, world)
        want = owner_of(keys, world)
        assert found.dtype == owner_dtype(world) and found.shape == (rows,)
        assert torch.equal(found.to(torch.int64), want), (dtype, world)
        assert counts.dtype == torch.int64
        assert torch.equal(counts, torch.bincount(want, minlength=world)), (dtype, world)


@pytest.mark.parametrize("dtype", KEY_DTYPES)
@pytest.mark.parametrize("rows", [0, 1, 999, 140_001])
def test_route_is_a_stable_sort_by_owner(dtype, rows):
    keys = random_keys(rows, dtype, seed=7 + rows)
    for world in WORLDS:
        order, counts = route(keys, world)
        want = owner_of(keys, world)
        assert order.dtype == torch.int64
        assert torch.equal(order, torch.argsort(want, stable=True)), (dtype, world)
        assert torch.equal(counts, torch.bincount(want, minlength=world)), (dtype, world)


def test_a_key_and_its_unsigned_view_have_one_owner():
    small = torch.arange(-50, 50, dtype=torch.int32)
    assert torch.equal(owners(small, 3)[0], owners(small.view(torch.uint32), 3)[0])
    assert torch.equal(owners(small, 3)[0].long(),
                       owner_of(small.to(torch.int64) & 0xFFFFFFFF, 3))
    wide = torch.arange(-50, 50)
    assert torch.equal(owners(wide, 5)[0], owners(wide.view(torch.uint64), 5)[0])


def test_routing_refuses_what_owner_of_refuses():
    keys = torch.arange(10)
    for bad in (0, -1, 2**31, True, 2.0):
        with pytest.raises(ValueError, match="world_size"):
            owners(keys, bad)
        with pytest.raises(ValueError, match="world_size"):
            route(keys, bad)
    with pytest.raises(TypeError, match="int32, uint32, int64 or uint64"):
        owners(torch.arange(4, dtype=torch.float64), 2)
    # a strided batch is read as its rows
    assert torch.equal(owners(keys[::2], 3)[0].long(), owner_of(keys[::2].contiguous(), 3))


def test_a_default_the_owners_leave_needs_no_filling():
    assert all(fills_zero(d) for d in (0, 0.0, False))
    assert not any(fills_zero(d) for d in (-0.0, 1, -1.5, True, float("nan"), torch.tensor(0)))
    # the single table's kept rows: -0.0 after 0.0 is its own row, not the one of 0.0
    table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
    for default in (0.0, -0.0, 0.0):
        got = table.find(torch.tensor([1]), default=default)[0]
        assert torch.signbit(got).item() == (str(default) == "-0.0")


# --- calls whose columns travel one by one -----------------------------------------------------
BIG = exchange.PACK_ROWS  # rows a rank: every call here is over PACK_ROWS rows in all


def big_batch(step: int, rank: int) -> torch.Tensor:
    """Repeats within and across ranks, and half the keys of a step new."""
    generator = torch.Generator().manual_seed(100 * step + rank)
    return torch.randint(-3 * BIG, 3 * BIG, (BIG - 7 * rank,), generator=generator)


def big_calls(rank: int, world: int, folder: str) -> None:
    """On gloo the CPU's tensors, on NCCL this rank's GPU's (test_gpu_distributed_routing.py)."""
    import torch.distributed as dist

    from gpuhash.distributed import ShardedCacheMap, ShardedHashMap

    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    table = ShardedHashMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(3,))
    model = gh.HashMap(key_dtype=torch.uint64, value_dtype=torch.float32, value_shape=(3,),
                       device=device)
    for step in range(2):
        parts = [big_batch(step, r).to(device) for r in range(world)]
        start = sum(p.shape[0] for p in parts[:rank])
        here = slice(start, start + parts[rank].shape[0])
        keys = torch.cat(parts).view(torch.uint64)
        shifted = (torch.cat(parts) + 1).view(torch.uint64)  # half of them in the table
        values = torch.randn(keys.shape[0], 3, generator=torch.Generator().manual_seed(step))
        values = values.to(device)
        got = table.insert(parts[rank].view(torch.uint64), values[here])
        assert torch.equal(got, model.insert(keys, values)[here]), step
        for default in (0, -0.0, 2.5):
            found_values, found = table.find(shifted[here], default=default)
            want_values, want_found = model.find(shifted, default=default)
            assert torch.equal(found, want_found[here])
            assert torch.equal(found_values.view(torch.int32), want_values[here].view(torch.int32))
        applied = table.insert_or_apply(parts[rank].view(torch.uint64), values[here], op="max")
        assert torch.equal(applied, model.insert_or_apply(keys, values, op="max")[here])
        # which row of a repeated key says True is unspecified (HashMap.erase; on a GPU the
        # rows race): the keys erased, on one row each over all ranks, are the model's
        erased = table.erase(shifted[here])
        every = torch.cat([part.to(device) for part in gathered(erased.cpu())])
        signed = shifted.view(torch.int64)
        want = model.erase(shifted)
        assert torch.equal(signed[every].sort().values, signed[want].sort().values)
    assert sum(gathered(len(table.local))) == len(model) == len(table)

    cache = ShardedCacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
                            capacity=1 << 17)
    single = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
                         capacity=1 << 17, device=device)
    parts = [big_batch(5, r).to(device) for r in range(world)]
    start = sum(p.shape[0] for p in parts[:rank])
    here = slice(start, start + parts[rank].shape[0])
    rows, found = cache.find_or_insert(parts[rank], init=-0.0)
    want_rows, want_found = single.find_or_insert(torch.cat(parts), init=-0.0)
    assert torch.equal(found, want_found[here])
    assert torch.equal(rows.view(torch.int32), want_rows[here].view(torch.int32))
    ones = torch.ones(want_rows.shape[0], 2, device=device)
    status = cache.insert_or_assign(parts[rank], ones[here], scores=parts[rank].abs())
    want = single.insert_or_assign(torch.cat(parts), ones, scores=torch.cat(parts).abs())
    assert torch.equal(status, want[here])


def test_big_calls_send_each_column_by_itself_and_answer_as_one_table(tmp_path):
    run_world("test_distributed_routing:big_calls", 2, tmp_path)
