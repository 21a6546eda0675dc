"""Arrow validity and fixed-width columns taken from Arrow's buffers (_common/validity.py,
groupby/columns.py): the bools and values equal Arrow's own conversion on every layout Arrow
gives (chunks, slices whose bits start mid-byte, no nulls, all nulls), and on a GPU host tables
with nulls in key and value columns group as on the CPU engine."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch

import gpuhash as gh
from gpuhash._common import validity
from gpuhash._common.validity import host_validity, validity_on
from gpuhash.groupby import columns

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
TYPES = [pa.int8(), pa.int32(), pa.uint16(), pa.int64(), pa.uint64(), pa.float16(),
         pa.float32(), pa.float64(), pa.date32(), pa.time32("ms"), pa.timestamp("us"),
         pa.duration("ns")]


def _chunked(rng, rows: int, type_, nulls: float, chunks: int):
    """A column cut into chunks that are slices of a larger array (offsets past bit 0)."""
    numbers = rng.integers(-100, 100, 2 * rows)
    if pa.types.is_unsigned_integer(type_):
        numbers = np.abs(numbers)
    mask = rng.random(2 * rows) < nulls
    if pa.types.is_temporal(type_):  # the storage's integers viewed as the type
        storage = pa.int32() if type_.bit_width == 32 else pa.int64()
        whole = pa.array(numbers, mask=mask).cast(storage).view(type_)
    else:
        whole = pa.array(numbers, mask=mask).cast(type_)
    cuts = sorted(rng.integers(0, rows + 1, chunks - 1)) if chunks > 1 else []
    edges = [0, *cuts, rows]
    skip = int(rng.integers(1, 8))
    return pa.chunked_array([whole.slice(skip + a, b - a) for a, b in zip(edges, edges[1:])],
                            type=type_)


@pytest.mark.parametrize("nulls", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("chunks", [1, 4])
def test_host_validity_is_arrows(nulls, chunks):
    rng = np.random.default_rng(chunks)
    column = _chunked(rng, 1000, pa.int32(), nulls, chunks)
    for chunk in column.chunks:
        assert host_validity(chunk).tolist() == np.asarray(chunk.is_valid()).tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("type_", TYPES, ids=str)
@pytest.mark.parametrize(("nulls", "chunks"), [(0.0, 1), (0.05, 1), (0.3, 5), (1.0, 2),
                                               (0.1, 300)])
def test_columns_from_buffers_equal_arrows_conversion(device, type_, nulls, chunks,
                                                     monkeypatch):
    monkeypatch.setattr(validity, "GPU_UNPACK_ROWS", 1)  # on a GPU, the bits unpacked there
    rng = np.random.default_rng(len(str(type_)) + chunks)
    column = _chunked(rng, 777, type_, nulls, chunks)
    valid = validity_on(column, torch.device(device))
    want_valid = np.concatenate([np.asarray(c.is_valid()) for c in column.chunks])
    assert valid.cpu().numpy().tolist() == want_valid.tolist()
    kind = "temporal" if pa.types.is_temporal(type_) else "number"
    values, mask = columns._numbers_on_gpu(column, kind, torch.device(device))
    plain = column.combine_chunks()
    if kind == "temporal":
        plain = plain.view(pa.int32() if type_.bit_width == 32 else pa.int64())
    want = pc.fill_null(plain, 0).to_numpy(zero_copy_only=False)
    assert values.cpu().numpy().tolist() == want.tolist()
    assert (mask is None) == (column.null_count == 0)


@pytest.mark.gpu
@pytest.mark.parametrize("nulls", [0.05, 0.5])
def test_host_tables_with_null_numbers_group_as_on_the_cpu(nulls):
    rng = np.random.default_rng(int(nulls * 100))
    rows = 30_000
    table = pa.table({"k": _chunked(rng, rows, pa.int32(), nulls, 3),
                      "j": _chunked(rng, rows, pa.int64(), nulls, 2),
                      "v": _chunked(rng, rows, pa.int32(), nulls, 4),
                      "w": _chunked(rng, rows, pa.float64(), nulls, 1),
                      "d": _chunked(rng, rows, pa.date32(), nulls, 3)})
    table = table.set_column(1, "j", pc.multiply(table.column("j"), 10**9))  # hashed keys
    aggs = {"v": ["sum", "count", "max"], "w": ["mean", "std"], "d": ["min", "first"]}
    # k and k, d: dense integer keys (one pass for several, a null its own digit); j: hashed
    for by, dropna in ((["k"], True), (["k"], False), (["k", "j"], False),
                       (["k", "d"], True), (["k", "d"], False)):
        want = gh.groupby(table, by=by, aggs=aggs, sort=True, dropna=dropna, device="cpu")
        got = gh.groupby(table, by=by, aggs=aggs, sort=True, dropna=dropna, device="cuda")
        assert got.column_names == want.column_names
        for name in want.column_names:
            a, b = got[name].to_pylist(), want[name].to_pylist()
            if name.startswith("w"):
                assert np.allclose(np.array(a, dtype=float), np.array(b, dtype=float),
                                   equal_nan=True)
            else:
                assert a == b, name


def test_validity_of_arrays_without_their_own_bits():
    everything_null = pa.nulls(5)
    assert host_validity(everything_null).tolist() == [False] * 5
    # a dictionary whose dictionary holds a null: that row is null too
    coded = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 0], pa.int32()),
                                           pa.array(["a", None]))
    assert host_validity(coded).tolist() == [True, False, False, True]
    chunked = pa.chunked_array([coded, coded])
    assert validity_on(chunked, torch.device("cpu")).tolist() == [True, False, False, True] * 2


def test_an_interval_column_is_refused_by_name():
    table = pa.table({"k": [1, 1], "v": pa.array([(1, 2, 3), (1, 2, 4)],
                                                  pa.month_day_nano_interval())})
    with pytest.raises(TypeError, match="'v'"):
        gh.groupby(table, "k", {"v": "nunique"}, device="cpu")


def test_large_chunks_travel_one_by_one_and_small_ones_as_one(monkeypatch):
    """Chunks of a megabyte or more are uploaded each from its own buffers; a column of
    smaller chunks is combined first (one transfer): both give Arrow's values."""
    rng = np.random.default_rng(7)
    whole = pa.array(rng.integers(-9, 9, 800_000).astype(np.int32),
                     mask=rng.random(800_000) < 0.1)
    large = pa.chunked_array([whole.slice(3, 350_000), whole.slice(350_003, 400_000)])
    small = pa.chunked_array([whole.slice(start, 2000) for start in range(5, 790_000, 2000)])
    uploads = []
    real = columns.upload_into
    monkeypatch.setattr(columns, "upload_into", lambda *a: uploads.append(1) or real(*a))
    for column, count in ((large, 2), (small, 1)):
        uploads.clear()
        values, mask = columns._numbers_on_gpu(column, "number", torch.device("cpu"))
        want = pc.fill_null(column.combine_chunks(), 0).to_numpy()
        assert values.numpy().tolist() == want.tolist()
        assert mask.numpy().tolist() == np.asarray(column.combine_chunks().is_valid()).tolist()
        assert len(uploads) == count
