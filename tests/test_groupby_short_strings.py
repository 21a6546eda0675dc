"""The CPU engine's numbering of short strings (groupby/cpu/loops.py: group_number_strings):
codes by first appearance that rebuild the column from its dictionary, nulls left out, every
Arrow layout with offsets and Arrow's string and binary views, and the ways it hands a column
back to Arrow (a string past 15 bytes, or 12 in a view; more distinct strings than its tables
hold)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuhash as gh
from gpuhash.groupby import columns
from gpuhash.groupby.cpu import engine as cpu_engine

# short strings that differ only in length, in a zero byte, past the eighth byte
_WORDS = ["", "a", "é", "ab", "x" * 7, "y" * 8, "z" * 9, "q" * 15, "abcdefghijklmno",
          "abcdefghijklmnp", "\x00", "\x00\x00", "abcdefgh\x00"]


def _first_appearance(values: list) -> list[int]:
    seen: dict = {}
    return [seen.setdefault(v, len(seen)) if v is not None else 0 for v in values]


_VIEWS = (pa.string_view(), pa.binary_view())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from(_WORDS)), min_size=1, max_size=200),
       st.sampled_from([pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
                        *_VIEWS]),
       st.integers(0, 40))
def test_codes_follow_first_appearance_and_rebuild_the_column(values, type_, skip):
    if type_ in (pa.binary(), pa.large_binary(), pa.binary_view()):
        values = [None if v is None else v.encode() for v in values]
    array = pa.array(values, type=type_).slice(min(skip, len(values) - 1))
    present = array.to_pylist()
    valid = columns.host_validity(array) if array.null_count else None
    numbered = cpu_engine.short_string_codes(array, valid)
    if type_ in _VIEWS and any(v is not None and len(v) > 12 for v in present):
        assert numbered is None  # its bytes are in a buffer, not the view: Arrow's turn
        return
    codes, first = numbered
    assert codes.tolist() == _first_appearance(present)
    dictionary = (columns._inline_strings(array, first) if type_ in _VIEWS
                  else array.take(pa.array(first))).to_pylist()
    assert [None if v is None else dictionary[c] for c, v in zip(codes, present)] == present


def test_a_string_past_fifteen_bytes_goes_to_arrow(monkeypatch):
    array = pa.array(["short", "sixteen bytes!!!", "short"])
    assert cpu_engine.short_string_codes(array, None) is None
    tried = []  # at once: a larger table would not take it either
    run = cpu_engine.runtime.run
    monkeypatch.setattr(cpu_engine.runtime, "run", lambda *a: tried.append(a[0]) or run(*a))
    assert cpu_engine.short_string_codes(array, None) is None and len(tried) == 1
    valid, codes, dictionary, how = columns.host_string_codes(pa.chunked_array([array]))
    assert valid is None and dictionary.take(pa.array(codes)).equals(array)
    assert how == "strings encoded by Arrow"


def test_tables_that_fill_are_tried_larger_then_left_to_arrow(monkeypatch):
    values = pa.array([f"k{i % 40}" for i in range(400)])
    monkeypatch.setattr(cpu_engine, "SHORT_STRING_TABLE_BITS", (3, 7))
    codes, first = cpu_engine.short_string_codes(values, None)  # 40 strings: 128 slots
    assert len(first) == 40 and codes.tolist() == _first_appearance(values.to_pylist())
    monkeypatch.setattr(cpu_engine, "SHORT_STRING_TABLE_BITS", (3, 4))
    assert cpu_engine.short_string_codes(values, None) is None


@pytest.mark.parametrize("parts_rows", [1 << 16, 64])
def test_parts_number_as_one_pass_does(parts_rows, monkeypatch):
    """Rows split into parts (a table each) get the codes one part gives: merged in row order."""
    monkeypatch.setattr(cpu_engine, "SHORT_STRING_PART_ROWS", parts_rows)
    monkeypatch.setattr(cpu_engine.runtime, "host_cores", lambda: 8)  # parts on any machine
    rng = random.Random(3)
    values = [None if rng.random() < 0.1 else f"id{rng.randrange(300):03}" for _ in range(5000)]
    array = pa.array(values)
    codes, first = cpu_engine.short_string_codes(array, columns.host_validity(array))
    assert codes.tolist() == _first_appearance(values)


def test_a_table_of_short_string_keys_groups_as_pandas():
    rng = np.random.default_rng(4)
    keys = pa.array([None if r < 0.05 else f"id{k:03}" for r, k in
                     zip(rng.random(20_000), rng.integers(0, 120, 20_000))])
    table = pa.table({"k": keys, "v": rng.integers(0, 9, 20_000)})
    got = gh.groupby(table, "k", {"v": "sum"}, sort=True, dropna=False, device="cpu")
    want = table.to_pandas().groupby("k", dropna=False, sort=True).v.sum()
    assert got.column("k").to_pylist() == [None if k != k else k for k in want.index]
    assert got.column("v").to_pylist() == want.tolist()


@pytest.mark.parametrize("extra", [3, 8, 16])
def test_buffers_longer_than_their_rows_are_read_to_their_rows(extra):
    """Arrow lets a buffer run past the rows it holds (by any number of bytes)."""
    views = b"".join(np.array([len(s)], np.int32).tobytes() + s.ljust(12, b"\0")
                     for s in (b"a", b"bb", b"a"))
    offsets = np.array([0, 1, 3, 4], np.int32).tobytes()
    for array in (pa.Array.from_buffers(pa.string_view(), 3, [None, pa.py_buffer(
                      views + bytes(extra))]),
                  pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(
                      offsets + bytes(extra)), pa.py_buffer(b"abba")])):
        array.validate(full=True)
        _, codes, dictionary, how = columns.host_string_codes(pa.chunked_array([array]))
        assert codes.tolist() == [0, 1, 0] and dictionary.to_pylist() == ["a", "bb"]
        assert how == "strings numbered on the CPU"
