"""A Hypothesis state machine that drives a HashMap or HashSet and a Python dict side by side.

Random sequences of insert / find / find_index / erase / reserve / clear / save-load / to()
over keys drawn from a small pool (so batches repeat keys and hit existing ones) plus the
adversarial keys of each dtype. Used by the CPU tests and, on a GPU machine, the GPU tests.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import gpuhash as gh
from conftest import adversarial_keys, key_list, key_tensor


def make_machine(*, key_dtype: torch.dtype, value_shape: tuple[int, ...] | None,
                 device: str, duplicates: str = "last", max_load_factor: float = 0.9):
    """A state machine class for one table configuration (value_shape None: a HashSet)."""
    pool = adversarial_keys(key_dtype)
    key_strategy = st.one_of(st.sampled_from(pool), st.integers(0, 60))
    batch = st.lists(key_strategy, min_size=0, max_size=40)
    is_set = value_shape is None

    class TableMachine(RuleBasedStateMachine):
        @initialize(capacity=st.integers(0, 64))
        def create(self, capacity):
            options = dict(key_dtype=key_dtype, capacity=capacity, device=device,
                           duplicates=duplicates, max_load_factor=max_load_factor)
            if is_set:
                self.table = gh.HashSet(**options)
            else:
                self.table = gh.HashMap(value_dtype=torch.int32, value_shape=value_shape,
                                        **options)
            self.model: dict[int, list[int] | None] = {}
            self.choices: dict[int, list] = {}
            self.counter = 0

        def _values(self, n):
            rows = torch.arange(self.counter, self.counter + n, dtype=torch.int32)
            self.counter += n
            width = 1
            for d in value_shape:
                width *= d
            return (rows[:, None] * width + torch.arange(width, dtype=torch.int32)).reshape(
                n, *value_shape)

        @rule(keys=batch)
        def insert(self, keys):
            k = key_tensor(keys, key_dtype, device)
            if is_set:
                inserted = self.table.insert(k)
            else:
                values = self._values(len(keys))
                inserted = self.table.insert(k, values.to(device))
            inserted = inserted.cpu().tolist()
            new = {key for key in keys if key not in self.model}
            for row, key in enumerate(keys):
                self.model[key] = None if is_set else values[row].tolist()
            if duplicates == "any" and not is_set:
                # any row of a repeated key may win; same_entries pins the table's choice
                for row, key in enumerate(keys):
                    self.choices.setdefault(key, []).append(values[row].tolist())
            if duplicates == "last":
                last_row = {key: row for row, key in enumerate(keys)}
                expected = [key in new and last_row[key] == row for row, key in enumerate(keys)]
                assert inserted == expected
            for key in set(keys):  # exactly one row per new key is marked inserted
                marks = sum(inserted[row] for row, k2 in enumerate(keys) if k2 == key)
                assert marks == (1 if key in new else 0)

        @rule(keys=batch)
        def lookup(self, keys):
            k = key_tensor(keys, key_dtype, device)
            found = self.table.contains(k).cpu().tolist()
            assert found == [key in self.model for key in keys]
            if is_set:
                return
            values, found2 = self.table.find(k, default=-7)
            assert found2.cpu().tolist() == found
            for row, key in enumerate(keys):
                want = self.model.get(key)
                got = values[row].cpu().tolist()
                assert got == (want if want is not None else torch.full(
                    value_shape, -7).tolist())
            index, found3 = self.table.find_index(k)
            assert found3.cpu().tolist() == found
            assert ((index >= 0) == found3).all()
            hits = index[found3]
            assert self.table.values[hits].cpu().tolist() == [
                self.model[key] for key in keys if key in self.model]

        @rule(keys=batch)
        def erase(self, keys):
            erased = self.table.erase(key_tensor(keys, key_dtype, device)).cpu().tolist()
            for key in set(keys):
                marks = sum(erased[row] for row, k2 in enumerate(keys) if k2 == key)
                assert marks == (1 if key in self.model else 0)
            for key in keys:
                self.model.pop(key, None)

        @rule(extra=st.integers(0, 200))
        def reserve(self, extra):
            self.table.reserve(len(self.model) + extra)
            assert self.table.capacity >= len(self.model) + extra

        @rule()
        def clear(self):
            self.table.clear()
            self.model.clear()
            self.choices.clear()

        @rule()
        def save_and_load(self):
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "table.pt"
                self.table.save(path)
                self.table = type(self.table).load(path, device=device, duplicates=duplicates)

        @rule()
        def round_trip_cpu(self):
            self.table = self.table.to("cpu").to(device)

        @invariant()
        def same_entries(self):
            if not hasattr(self, "table"):
                return
            assert len(self.table) == len(self.model)
            if is_set:
                keys = self.table.items()
                assert sorted(key_list(keys)) == sorted(self.model)
            else:
                keys, values = self.table.items()
                got = dict(zip(key_list(keys), values.cpu().tolist()))
                for key, options in self.choices.items():
                    if key in got:
                        assert got[key] in options
                        self.model[key] = got[key]
                self.choices.clear()
                assert got == self.model

    return TableMachine
