"""String keys coded by their hashes (groupby/string_keys.py) and host arrays moved through the
pinned ring (_common/transfers.py): codes and dictionaries that decode to the column itself on
every layout Arrow gives (chunks, slices, nulls, large and binary strings, empty strings and
zero bytes), a forced hash collision that falls back rather than merges two strings, and on a
GPU the kernels against their CPU twins bit for bit and group-bys against the CPU engine's."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch

import gpuhash as gh
from gpuhash._common import transfers as uploads
from gpuhash.groupby import string_keys
from gpuhash.groupby.cpu import engine as cpu_engine

CUDA = torch.cuda.is_available()
gpu = pytest.mark.gpu


def _levels(rng, count: int) -> list[str]:
    fixed = ["", "a", "a\x00", "\x00", "é", "x" * 17, "abcdefgh", "abcdefgh\x00"]
    return fixed + [f"id{rng.integers(10**9):0{rng.integers(1, 12)}d}" for _ in range(count)]


def _column(rng, rows: int, *, levels: int, nulls: float, large: bool, binary: bool,
            chunks: int):
    values = rng.choice(np.array(_levels(rng, levels), dtype=object), rows)
    mask = rng.random(rows) < nulls
    kind = {(False, False): pa.string(), (True, False): pa.large_string(),
            (False, True): pa.binary(), (True, True): pa.large_binary()}[(large, binary)]
    items = [None if m else (v.encode() if binary else v) for v, m in zip(values, mask)]
    whole = pa.array(items, type=kind)
    cuts = sorted(rng.integers(0, rows + 1, chunks - 1)) if chunks > 1 else []
    edges = [0, *cuts, rows]
    # a slice of a larger array, so chunks start past their buffers' first offset
    return pa.chunked_array([pa.concat_arrays([whole, whole]).slice(rows + a, b - a)
                             for a, b in zip(edges, edges[1:])], type=kind)


def _decoded(codes, valid, dictionary) -> list:
    codes = codes.cpu().numpy()
    valid = None if valid is None else valid.cpu().numpy()
    words = dictionary.to_pylist()
    return [None if valid is not None and not valid[i] else words[c]
            for i, c in enumerate(codes)]


DEVICES = ["cpu", pytest.param("cuda", marks=gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("large", "binary"), [(False, False), (True, False), (False, True),
                                               (True, True)])
@pytest.mark.parametrize("ordered", [False, True])
def test_codes_decode_to_the_column(device, large, binary, ordered):
    rng = np.random.default_rng(hash((device, large, binary, ordered)) % 2**32)
    for rows, levels, nulls, chunks in ((0, 3, 0.0, 1), (1, 3, 0.0, 1), (500, 40, 0.1, 3),
                                        (3000, 2000, 0.0, 5), (2000, 5, 1.0, 2)):
        column = _column(rng, rows, levels=levels, nulls=nulls, large=large, binary=binary,
                         chunks=chunks)
        codes, valid, dictionary = string_keys.string_codes(column, torch.device(device),
                                                            ordered=ordered)
        assert codes.dtype == torch.int32 and codes.device.type == device
        assert _decoded(codes, valid, dictionary) == column.to_pylist()
        assert len(pc.unique(dictionary)) == len(dictionary)  # one code a distinct string
        assert dictionary.null_count == 0
        if valid is not None:
            assert not bool(codes[~valid].any())  # nulls hold code 0, as Arrow's path
        if ordered:
            assert dictionary.to_pylist() == sorted(dictionary.to_pylist())


@pytest.mark.parametrize("device", DEVICES)
def test_large_columns_code_and_move_on_every_device(device):
    """Past the transfers' smallest piece (a CPU target copies straight, a GPU one through
    the pinned ring)."""
    rows = 300_000
    words = [f"key{i % 5000:07d}" for i in range(rows)]  # 3 MB of bytes, 1.2 MB of offsets
    column = pa.chunked_array([words[:100_000], words[100_000:]])
    codes, valid, dictionary = string_keys.string_codes(column, torch.device(device),
                                                        ordered=False)
    assert valid is None and len(dictionary) == 5000
    assert dictionary.take(pa.array(codes.cpu().numpy())).to_pylist() == words


@pytest.mark.parametrize("device", DEVICES)
def test_a_hash_collision_falls_back_instead_of_merging(device, monkeypatch):
    engine = cpu_engine if device == "cpu" else pytest.importorskip(
        "gpuhash.groupby.cuda.engine")
    monkeypatch.setattr(engine, "string_hashes",
                        lambda offsets, data: torch.zeros(offsets.shape[0] - 1,
                                                          dtype=torch.int64,
                                                          device=offsets.device))
    column = pa.chunked_array([["b", "a", "b", None]])
    assert string_keys.string_codes(column, torch.device(device), ordered=False) is None
    if device == "cuda":  # the group-by then takes Arrow's encoding: still two groups
        table = pa.table({"k": column, "v": [1, 2, 3, 4]})
        got = gh.groupby(table, by="k", aggs={"v": "sum"}, sort=True, device="cuda")
        assert got.to_pydict() == {"k": ["a", "b", None], "v": [2, 4, 4]}


@pytest.mark.parametrize("device", DEVICES)
def test_uploads_arrive_whole(device):
    rng = np.random.default_rng(5)
    edges = [0, 1, uploads.SMALLEST - 1, uploads.SMALLEST,
             3 * uploads.STAGE_BYTES + uploads.STAGES * 5 + 3]
    for nbytes in edges:
        for dtype in (np.uint8, np.int64, np.bool_):
            count = nbytes // np.dtype(dtype).itemsize
            array = (rng.integers(0, 2, count).astype(dtype) if dtype == np.bool_ else
                     rng.integers(0, 255, count).astype(dtype))
            got = uploads.to_device(array[::1], torch.device(device))
            assert got.device.type == device
            assert np.array_equal(got.cpu().numpy(), array)
            back = uploads.to_host(got)
            assert back.dtype == array.dtype and np.array_equal(back, array)


@gpu
def test_uploads_from_several_threads_each_arrive_whole():
    arrays = [np.full(uploads.STAGE_BYTES * 2 + 77, i, dtype=np.uint8) for i in range(6)]
    results: list = [None] * len(arrays)

    def move(i: int) -> None:
        out = uploads.to_device(arrays[i], torch.device("cuda"))
        back = uploads.to_host(out + 1)
        results[i] = bool((out == i).all()) and bool((back == i + 1).all())

    threads = [threading.Thread(target=move, args=(i,)) for i in range(len(arrays))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * len(arrays)


@gpu
def test_string_kernels_match_the_cpu_twins():
    from gpuhash.groupby.cuda import engine as cuda_engine

    rng = np.random.default_rng(11)
    column = _column(rng, 50_000, levels=3000, nulls=0.0, large=False, binary=False, chunks=4)
    offsets, data = string_keys.upload_strings(column, torch.device("cpu"))
    want = cpu_engine.string_hashes(offsets, data)
    got = cuda_engine.string_hashes(offsets.cuda(), data.cuda())
    assert torch.equal(got.cpu(), want)
    codes, _, first = cuda_engine.group_compact(got)
    assert cuda_engine.string_mismatches(offsets.cuda(), data.cuda(), codes, first) == 0
    wrong = first.roll(1)  # every row compared with another code's string
    assert (cuda_engine.string_mismatches(offsets.cuda(), data.cuda(), codes, wrong) ==
            cpu_engine.string_mismatches(offsets, data, codes.cpu(), wrong.cpu()) > 0)


@gpu
@pytest.mark.parametrize("nulls", [0.0, 0.05])
def test_host_tables_with_string_keys_group_as_on_the_cpu(nulls):
    rng = np.random.default_rng(int(nulls * 100))
    rows = 20_000
    table = pa.table({
        "s": _column(rng, rows, levels=50, nulls=nulls, large=False, binary=False, chunks=3),
        "t": _column(rng, rows, levels=900, nulls=nulls, large=True, binary=False, chunks=2),
        "v": rng.integers(0, 100, rows), "w": rng.random(rows)})
    aggs = {"v": ["sum", "max"], "w": ["mean", "min"], "t": ["min", "max", "nunique"]}
    for by in (["s"], ["s", "t"]):
        want = gh.groupby(table, by=by, aggs=aggs, sort=True, device="cpu")
        got = gh.groupby(table, by=by, aggs=aggs, sort=True, device="cuda")
        assert got.column_names == want.column_names
        for name in want.column_names:
            a, b = got[name].to_pylist(), want[name].to_pylist()
            if name.startswith("w"):
                assert np.allclose(np.array(a, dtype=float), np.array(b, dtype=float))
            else:
                assert a == b, name


@pytest.mark.parametrize("device", DEVICES)
def test_explain_says_how_the_string_keys_became_codes(device, capsys):
    table = pa.table({"k": ["b", "a", "b", None], "v": [1, 2, 3, 4]})
    gh.groupby(table, by="k", aggs={"v": "sum"}, device=device, explain=True)
    printed = capsys.readouterr().out
    how = "strings hashed on the GPU" if device == "cuda" else "strings numbered on the CPU"
    assert "columns" in printed and f"k: {how}" in printed, printed
    long_strings = pa.table({"k": ["a string of sixteen+", "b"], "v": [1, 2]})
    gh.groupby(long_strings, by="k", aggs={"v": "sum"}, device="cpu", explain=True)
    assert "k: strings encoded by Arrow" in capsys.readouterr().out


@gpu
def test_a_child_forked_after_transfers_lives():
    """The at-fork handler leaves the parent's pinned buffers alone in the child (freeing one
    that a copy used would record CUDA events there)."""
    import os

    moved = uploads.to_device(np.ones(uploads.STAGE_BYTES * 2, dtype=np.uint8),
                              torch.device("cuda"))
    assert int(uploads.to_host(moved)[-1]) == 1
    child = os.fork()
    if child == 0:  # the child: nothing CUDA, only the handler ran
        os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_string_view_keys_sort_and_keep_their_type(device):
    """Arrow neither sorts nor takes views: they are grouped as the plain strings they hold,
    and come back as views."""
    table = pa.table({"k": pa.array(["b", "a", "b", None], pa.string_view()),
                      "v": [1, 2, 3, 4]})
    got = gh.groupby(table, by="k", aggs={"k": "min", "v": "max"}, sort=True, device=device)
    assert got.to_pydict() == {"k": ["a", "b", None], "k_min": ["a", "b", None],
                               "v": [2, 3, 4]}
    assert got.schema.field("k").type == pa.string_view()
