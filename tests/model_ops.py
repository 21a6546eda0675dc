"""Hypothesis state machines for the core's newer operations against Python models:
MultiMap (a dict of key -> list of values) and HashMap.insert_or_apply (a dict folded with the
operator). Used by the CPU tests and, on a GPU machine, the GPU tests."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import gpuhash as gh
from conftest import BITS, key_list, key_tensor


def make_multimap_machine(*, key_dtype: torch.dtype, value_shape: tuple[int, ...] | None,
                          device: str, max_load_factor: float = 0.9):
    """MultiMap with int32 values of ``value_shape`` (None: keys only) against a multiset."""
    top = (1 << BITS[key_dtype]) - 1  # this and the value below it are the slots' sentinels
    key_strategy = st.one_of(st.integers(0, 40),
                             st.sampled_from([top, top - 1, top - 2, top - 3, 1 << 20]))
    batch = st.lists(key_strategy, min_size=0, max_size=40)

    class MultiMapMachine(RuleBasedStateMachine):
        @initialize(capacity=st.integers(0, 64))
        def create(self, capacity):
            value_dtype = None if value_shape is None else torch.int32
            self.table = gh.MultiMap(key_dtype=key_dtype, value_dtype=value_dtype,
                                     value_shape=value_shape or (), capacity=capacity,
                                     device=device, max_load_factor=max_load_factor)
            self.model: list[tuple[int, object]] = []
            self.counter = 0

        @rule(keys=batch)
        def insert(self, keys):
            k = key_tensor(keys, key_dtype, device)
            if value_shape is None:
                self.table.insert(k)
                self.model += [(key, None) for key in keys]
                return
            width = 1
            for d in value_shape:
                width *= d
            values = torch.arange(self.counter * width, (self.counter + len(keys)) * width,
                                  dtype=torch.int32).reshape(len(keys), *value_shape)
            self.counter += len(keys)
            self.table.insert(k, values.to(device))
            self.model += [(key, values[row].tolist()) for row, key in enumerate(keys)]

        @rule(keys=batch)
        def query(self, keys):
            k = key_tensor(keys, key_dtype, device)
            held = Counter(key for key, _ in self.model)
            assert self.table.count(k).cpu().tolist() == [held[key] for key in keys]
            rows, index = self.table.find_all(k)
            rows = rows.cpu().tolist()
            assert rows == sorted(rows)  # grouped by query row
            assert Counter(rows) == Counter({r: held[key] for r, key in enumerate(keys)
                                             if held[key]})
            if value_shape is not None:
                got = self.table.values[index].cpu().tolist()
                for row in set(rows):
                    mine = sorted(v for r, v in zip(rows, got) if r == row)
                    want = sorted(v for key, v in self.model if key == keys[row])
                    assert mine == want

        @rule(keys=batch)
        def erase(self, keys):
            erased = self.table.erase(key_tensor(keys, key_dtype, device)).cpu().tolist()
            held = Counter(key for key, _ in self.model)
            for key in set(keys):
                assert sum(e for e, k2 in zip(erased, keys) if k2 == key) == held[key]
            self.model = [(key, v) for key, v in self.model if key not in set(keys)]

        @rule()
        def save_load_and_move(self):
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "multimap.pt"
                self.table.save(path)
                self.table = gh.MultiMap.load(path, device="cpu").to(device)

        @invariant()
        def same_entries(self):
            if not hasattr(self, "table"):
                return
            assert len(self.table) == len(self.model)
            keys, values = self.table.items()
            got = list(zip(key_list(keys), values.cpu().tolist() if values is not None
                           else [None] * len(self.model)))
            assert sorted(got, key=repr) == sorted(self.model, key=repr)

    return MultiMapMachine


OPS = {"add": lambda a, b: a + b, "min": min, "max": max}


def make_apply_machine(*, key_dtype: torch.dtype, value_dtype: torch.dtype,
                       value_shape: tuple[int, ...], device: str):
    """HashMap.insert_or_apply and insert against a dict folded element by element. Values are
    small integers (exact in every dtype), so float sums in any order give the same result."""
    top = (1 << BITS[key_dtype]) - 1
    key_strategy = st.one_of(st.integers(0, 30), st.sampled_from([top, top - 1]))
    batch = st.lists(key_strategy, min_size=0, max_size=40)
    width = 1
    for d in value_shape:
        width *= d

    class ApplyMachine(RuleBasedStateMachine):
        @initialize(capacity=st.integers(0, 32))
        def create(self, capacity):
            self.table = gh.HashMap(key_dtype=key_dtype, value_dtype=value_dtype,
                                    value_shape=value_shape, capacity=capacity, device=device)
            self.model: dict[int, list] = {}

        def _values(self, data, n):
            flat = data.draw(st.lists(st.integers(-50, 50), min_size=n * width,
                                      max_size=n * width))
            return torch.tensor(flat, dtype=torch.int64).to(value_dtype).reshape(n, *value_shape)

        @rule(keys=batch, op=st.sampled_from(sorted(OPS)), data=st.data(),
              with_index=st.booleans())
        def apply(self, keys, op, data, with_index):
            values = self._values(data, len(keys))
            given = key_tensor(keys, key_dtype, device)
            inserted = self.table.insert_or_apply(given, values.to(device), op=op,
                                                  return_index=with_index)
            if with_index:  # the probe's own slots: find_index's after the call
                inserted, index = inserted
                assert index.tolist() == self.table.find_index(given)[0].tolist()
            inserted = inserted.cpu().tolist()
            new = {key for key in keys if key not in self.model}
            for key in set(keys):  # exactly one row per new key is marked inserted
                assert sum(i for i, k2 in zip(inserted, keys) if k2 == key) == (key in new)
            for row, key in enumerate(keys):
                flat = values[row].reshape(-1).tolist()
                if key in self.model:
                    self.model[key] = [OPS[op](a, b) for a, b in zip(self.model[key], flat)]
                else:
                    self.model[key] = flat

        @rule(keys=batch, data=st.data())
        def assign(self, keys, data):
            values = self._values(data, len(keys))
            self.table.insert(key_tensor(keys, key_dtype, device), values.to(device))
            for row, key in enumerate(keys):
                self.model[key] = values[row].reshape(-1).tolist()

        @invariant()
        def same_entries(self):
            if not hasattr(self, "table"):
                return
            keys, values = self.table.items()
            got = dict(zip(key_list(keys), values.reshape(len(keys), width).cpu().tolist()))
            assert got == self.model

    return ApplyMachine
