"""MultiMap: a hash table that keeps every row, repeated keys included (a join's build side).

Same table format, engines and conventions as HashMap; the difference is that an insert never
looks for an existing copy of its key, and queries return every copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from gpuhash._common import arrays as _arrays
from gpuhash.table import reserved
from gpuhash.table.base import _Table
from gpuhash.table.format import gather_values


class MultiMap(_Table):
    """A hash multimap from integer keys to fixed-shape values: every inserted row is kept.

    Keys may be int32, uint32, int64 or uint64, every value of them. The two values the slot
    format reserves for empty and erased slots (all ones and all ones minus one of the key
    width, -1 and -2 when signed) are kept out of band, any number of copies of each: their
    value rows follow the slot rows in :attr:`values`.

    Args:
        key_dtype: dtype of the keys.
        value_dtype: dtype of the values, or None to keep keys only.
        value_shape: trailing shape of one value; ``()`` for a scalar.
        capacity: entries (copies) to hold before the first growth.
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        max_load_factor: fraction of slots that may be used, at most 0.99.
        growable: grow automatically (default); else an insert past the maximum load raises
            :class:`TableFullError` and leaves the table unchanged.
        seed: hash seed.

    Example:
        >>> import torch
        >>> from gpuhash import MultiMap
        >>> mm = MultiMap(key_dtype=torch.int64, value_dtype=torch.int64)
        >>> mm.insert(torch.tensor([5, 5, 8]), torch.tensor([50, 51, 80]))
        >>> mm.count(torch.tensor([5, 8, 9])).tolist()
        [2, 1, 0]
        >>> rows, index = mm.find_all(torch.tensor([9, 5]))
        >>> rows.tolist(), sorted(mm.values[index].tolist())
        ([1, 1], [50, 51])
    """

    _kind = "MultiMap"
    _multi = True

    def __init__(self, *, key_dtype: torch.dtype, value_dtype: torch.dtype | None = None,
                 value_shape: tuple[int, ...] | int = (), capacity: int = 1024,
                 device: str | torch.device = "cpu", max_load_factor: float = 0.9,
                 growable: bool = True, seed: int | None = None):
        self._setup(key_dtype=key_dtype, value_dtype=value_dtype,
                    value_shape=() if value_dtype is None else value_shape, capacity=capacity,
                    device=device, max_load_factor=max_load_factor, growable=growable,
                    duplicates="any", seed=seed)

    def __len__(self) -> int:
        """Live entries, copies included. Synchronises with the device."""
        return super().__len__() + reserved.held(self._state)

    def insert(self, keys: Any, values: Any = None, *, stream: Any = None) -> None:
        """Add every row as its own entry, repeated keys included. Completes for every row or
        raises with the table unchanged. Looks for the two sentinel key values among the keys
        (their copies are kept out of band), which synchronises with the device.

        Example:
            >>> import torch
            >>> from gpuhash import MultiMap
            >>> mm = MultiMap(key_dtype=torch.int32)
            >>> mm.insert(torch.tensor([1, 1], dtype=torch.int32)); len(mm)
            2
        """
        with self._stream(stream, writes=True):
            bits, _ = self._keys(keys)
            spec = self._state.spec
            checked = None
            if spec.value_dtype is not None:
                checked = _arrays.check_values(values, spec, self.device, bits.shape[0])
            elif values is not None:
                raise TypeError("values given to a MultiMap created without value_dtype")
            if bits.shape[0] == 0:
                return
            aside = reserved.reserved_rows(self._state, bits)
            if bool(aside.any()):
                kept = ~aside
                reserved_values = None if checked is None else checked[aside]
                reserved_bits, bits = bits[aside], bits[kept]
                checked = None if checked is None else checked[kept]
            else:
                reserved_bits = None
            if bits.shape[0]:
                self._make_room(bits)  # the only step that can refuse: before any change
                self._engine.multi_insert(self._state, bits, checked)
                self._used_bound += bits.shape[0]
            if reserved_bits is not None:
                reserved.add(self._state, reserved_bits, reserved_values)

    def count(self, keys: Any, *, stream: Any = None) -> Any:
        """Entries holding each key (int64). No host synchronisation.

        Example:
            >>> import torch
            >>> from gpuhash import MultiMap
            >>> mm = MultiMap(key_dtype=torch.int64)
            >>> mm.insert(torch.tensor([3, 3, 3]))
            >>> mm.count(torch.tensor([3, 4])).tolist()
            [3, 0]
        """
        with self._stream(stream, writes=False):
            bits, kind = self._keys(keys)
            counts = self._engine.multi_count(self._state, bits)
            if reserved.held(self._state):
                counts += reserved.count(self._state, bits)
            return _arrays.to_kind(counts, kind)

    def contains(self, keys: Any, *, stream: Any = None) -> Any:
        """True where the key has at least one entry. No host synchronisation.

        Example:
            >>> import torch
            >>> from gpuhash import MultiMap
            >>> mm = MultiMap(key_dtype=torch.int64)
            >>> mm.insert(torch.tensor([-1, 4, -1]))
            >>> mm.contains(torch.tensor([-1, -2, 4])).tolist()
            [True, False, True]
        """
        with self._stream(stream, writes=False):
            bits, kind = self._keys(keys)
            found = self._engine.contains(self._state, bits)
            if reserved.held(self._state):
                found |= reserved.count(self._state, bits) > 0
            return _arrays.to_kind(found, kind)

    def find_all(self, keys: Any, *, stream: Any = None) -> tuple[Any, Any]:
        """Every match as int64 pairs: the query row and the entry's row in :attr:`values`,
        grouped by query row, in no particular order within a row. Synchronises once (the
        number of matches sizes the output).

        Example:
            >>> import torch
            >>> from gpuhash import MultiMap
            >>> mm = MultiMap(key_dtype=torch.int64, value_dtype=torch.float32)
            >>> mm.insert(torch.tensor([7, 7]), torch.tensor([0.5, 1.5]))
            >>> rows, index = mm.find_all(torch.tensor([7]))
            >>> rows.tolist(), sorted(mm.values[index].tolist())
            ([0, 0], [0.5, 1.5])
        """
        with self._stream(stream, writes=False):
            bits, kind = self._keys(keys)
            rows, index = self._engine.multi_find_all(self._state, bits)
            if reserved.held(self._state):
                more_rows, more_index = reserved.matches(self._state, bits)
                if more_rows.shape[0]:
                    rows, order = torch.cat([rows, more_rows]).sort(stable=True)
                    index = torch.cat([index, more_index])[order]
        return _arrays.to_kind(rows, kind), _arrays.to_kind(index, kind)

    def erase(self, keys: Any, *, stream: Any = None) -> Any:
        """Remove every copy of each key; returns the copies each row removed (int64; for a
        key repeated in the batch, its rows' counts add up to the copies it had). No host
        synchronisation, unless the table holds copies of the two sentinel keys.

        Example:
            >>> import torch
            >>> from gpuhash import MultiMap
            >>> mm = MultiMap(key_dtype=torch.int64)
            >>> mm.insert(torch.tensor([2, 2, 6]))
            >>> mm.erase(torch.tensor([2, 9])).tolist(), len(mm)
            ([2, 0], 1)
        """
        with self._stream(stream, writes=True):
            bits, kind = self._keys(keys)
            erased = self._engine.multi_erase(self._state, bits)
            if reserved.held(self._state):  # then it synchronises
                erased += reserved.erase(self._state, bits)
            return _arrays.to_kind(erased, kind)

    @property
    def values(self) -> torch.Tensor | None:
        """The value storage, indexable by :meth:`find_all` rows (None without values). While
        the table holds copies of the two sentinel keys their values follow the slot rows, and
        this is a copy of both, not the storage."""
        state = self._state
        if state.value_view() is None or not reserved.held(state):
            return state.value_view()
        return torch.cat([state.value_view(), state.reserved_values])

    def items(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Keys and values of every entry (copies included), in no particular order.
        Synchronises.

        Example:
            >>> import torch
            >>> from gpuhash import MultiMap
            >>> mm = MultiMap(key_dtype=torch.int64, value_dtype=torch.int64)
            >>> mm.insert(torch.tensor([1, 1]), torch.tensor([4, 4]))
            >>> [t.tolist() for t in mm.items()]
            [[1, 1], [4, 4]]
        """
        with self._order.lock:
            state = self._state
            rows = self._live()
            keys, values = self._live_keys(rows), None
            if state.spec.value_dtype is not None:
                values = gather_values(state, rows)
            if reserved.held(state):
                keys = torch.cat([keys, state.reserved_keys.view(state.spec.key_dtype)])
                if values is not None:
                    values = torch.cat([values, state.reserved_values])
            return keys, values

    def to(self, device: str | torch.device) -> MultiMap:
        """A copy of the table on ``device``.

        Example:
            >>> import torch
            >>> from gpuhash import MultiMap
            >>> MultiMap(key_dtype=torch.int64).to("cpu").device.type
            'cpu'
        """
        return self._copy_to(device)

    @classmethod
    def load(cls, path: str | Path, *, device: str | torch.device = "cpu",
             growable: bool = True) -> MultiMap:
        """Read a table written by :meth:`save`.

        Example:
            >>> import torch
            >>> from gpuhash import MultiMap
            >>> mm = MultiMap(key_dtype=torch.int64)
            >>> mm.save("/tmp/gpuhash_doc_multimap.pt")
            >>> len(MultiMap.load("/tmp/gpuhash_doc_multimap.pt"))
            0
        """
        return cls._load(path, device, growable, "any")
