"""The public tables: HashMap (keys to fixed-shape values) and HashSet (keys only).

Both run on the CUDA engine for CUDA devices and on the CPU engine otherwise, over the same
table format, so ``to()``, ``save()`` and ``load()`` move a table between them unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from gpuhash._common import arrays as _arrays
from gpuhash.table.base import _Table
from gpuhash.table.format import gather_values

APPLY_OPS = ("add", "min", "max")
APPLY_DTYPES = (torch.int32, torch.int64, torch.float32, torch.float64)


class HashMap(_Table):
    """A hash map from integer keys to fixed-shape values of any torch dtype.

    Keys may be int32, uint32, int64 or uint64, and every key value is usable. Values are rows
    of ``value_shape`` (``()`` for scalars). Operations take batches: torch tensors on the
    table's device, or NumPy / CuPy / DLPack arrays (viewed without copying); results come back
    as the same kind of array (torch tensors for DLPack arrays of other libraries).

    Args:
        key_dtype: dtype of the keys.
        value_dtype: dtype of the values.
        value_shape: trailing shape of one value; ``()`` for a scalar.
        capacity: entries to hold before the first growth.
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        max_load_factor: fraction of slots that may be used, at most 0.99.
        growable: grow automatically (default). If False, an insert that would pass the
            maximum load raises :class:`TableFullError` and leaves the table unchanged.
        duplicates: ``"last"`` (default): when a batch repeats a key, the last row wins, as
            with a dict; no sort: on a GPU one pass over a scratch table finds each key's last
            row, and on the CPU a key's rows settle in row order. ``"any"``: one of the rows
            wins, unspecified (cuCollections' and HierarchicalKV's behaviour), without that
            pass.
        seed: hash seed (default fixed, so tables are reproducible).

    Example:
        >>> import torch
        >>> from gpuhash import HashMap
        >>> m = HashMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,))
        >>> m.insert(torch.tensor([10, 20]), torch.tensor([[1., 2.], [3., 4.]])).tolist()
        [True, True]
        >>> values, found = m.find(torch.tensor([20, 30]))
        >>> values.tolist(), found.tolist()
        ([[3.0, 4.0], [0.0, 0.0]], [True, False])
    """

    _kind = "HashMap"

    def __init__(self, *, key_dtype: torch.dtype, value_dtype: torch.dtype,
                 value_shape: tuple[int, ...] = (), capacity: int = 1024,
                 device: str | torch.device = "cpu", max_load_factor: float = 0.9,
                 growable: bool = True, duplicates: str = "last", seed: int | None = None):
        if value_dtype is None:
            raise TypeError("value_dtype is required for a HashMap; use HashSet for keys only")
        self._setup(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=value_shape,
                    capacity=capacity, device=device, max_load_factor=max_load_factor,
                    growable=growable, duplicates=duplicates, seed=seed)

    def insert(self, keys: Any, values: Any, *, stream: Any = None) -> Any:
        """Insert or assign; True where the row added a new key. Existing keys take the new
        value. Completes for every row or raises with the table unchanged. No host
        synchronisation unless the table is near its maximum load.

        Example:
            >>> import torch
            >>> from gpuhash import HashMap
            >>> m = HashMap(key_dtype=torch.int32, value_dtype=torch.int32)
            >>> k = torch.tensor([1, 1, 2], dtype=torch.int32)
            >>> m.insert(k, torch.tensor([5, 6, 7], dtype=torch.int32)).tolist()
            [False, True, True]
            >>> m.find(torch.tensor([1], dtype=torch.int32))[0].tolist()
            [6]
        """
        return self._insert(keys, values, stream=stream)

    def find(self, keys: Any, *, default: Any = 0, stream: Any = None) -> tuple[Any, Any]:
        """Values for the keys, shaped ``(n, *value_shape)``, ``default`` where missing, and a
        found mask. No host synchronisation.

        Example:
            >>> import torch
            >>> from gpuhash import HashMap
            >>> m = HashMap(key_dtype=torch.int64, value_dtype=torch.int64)
            >>> _ = m.insert(torch.tensor([3]), torch.tensor([30]))
            >>> m.find(torch.tensor([3, 4]), default=-1)[0].tolist()
            [30, -1]
        """
        with self._stream(stream, writes=False):
            bits, kind = self._keys(keys)
            values, found = self._engine.find(self._state, bits, self._default(default))
        if kind is _arrays.TORCH:
            return values, found
        return _arrays.to_kind(values, kind), _arrays.to_kind(found, kind)

    def find_index(self, keys: Any, *, stream: Any = None) -> tuple[Any, Any]:
        """Row of each key in :attr:`values` (int64, -1 where missing) and a found mask.
        Rows stay valid until the next ``insert`` or ``reserve``: an insert may move entries
        (growth; and, for values of up to 8 bytes, displacement between a key's two buckets).
        Erase and find never move them.

        Example:
            >>> import torch
            >>> from gpuhash import HashMap
            >>> m = HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
            >>> _ = m.insert(torch.tensor([7]), torch.tensor([1.5]))
            >>> index, found = m.find_index(torch.tensor([7]))
            >>> m.values[index].tolist()
            [1.5]
        """
        with self._stream(stream, writes=False):
            bits, kind = self._keys(keys)
            index, found = self._engine.find_index(self._state, bits)
        return _arrays.to_kind(index, kind), _arrays.to_kind(found, kind)

    @property
    def values(self) -> torch.Tensor:
        """The value storage, indexable by :meth:`find_index` rows; writes go into the table.

        Example:
            >>> import torch
            >>> from gpuhash import HashMap
            >>> m = HashMap(key_dtype=torch.int64, value_dtype=torch.int32)
            >>> _ = m.insert(torch.tensor([1]), torch.tensor([5], dtype=torch.int32))
            >>> m.values[m.find_index(torch.tensor([1]))[0]] = 9
            >>> m.find(torch.tensor([1]))[0].tolist()
            [9]
        """
        return self._state.value_view()

    def items(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of every live entry, in no particular order. Synchronises (Python
        must know how many there are).

        Example:
            >>> import torch
            >>> from gpuhash import HashMap
            >>> m = HashMap(key_dtype=torch.int64, value_dtype=torch.int64)
            >>> _ = m.insert(torch.tensor([2]), torch.tensor([4]))
            >>> [t.tolist() for t in m.items()]
            [[2], [4]]
        """
        with self._order.lock:
            rows = self._live()
            return self._live_keys(rows), gather_values(self._state, rows)

    def to(self, device: str | torch.device) -> HashMap:
        """A copy of the table on ``device``.

        Example:
            >>> import torch
            >>> from gpuhash import HashMap
            >>> m = HashMap(key_dtype=torch.int64, value_dtype=torch.int64)
            >>> m.to("cpu").device.type
            'cpu'
        """
        return self._copy_to(device)

    @classmethod
    def load(cls, path: str | Path, *, device: str | torch.device = "cpu",
             growable: bool = True, duplicates: str = "last") -> HashMap:
        """Read a table written by :meth:`save`, verifying its format version and checksum.

        Example:
            >>> import torch
            >>> from gpuhash import HashMap
            >>> m = HashMap(key_dtype=torch.int64, value_dtype=torch.int64)
            >>> m.save("/tmp/gpuhash_doc_map.pt")
            >>> len(HashMap.load("/tmp/gpuhash_doc_map.pt"))
            0
        """
        return cls._load(path, device, growable, duplicates)

    def insert_or_apply(self, keys: Any, values: Any, *, op: str = "add",
                        return_index: bool = False, stream: Any = None) -> Any:
        """Combine each row's value into its key's stored value with ``op`` (``"add"``,
        ``"min"`` or ``"max"``, element by element); a new key takes its row's value (several
        rows of a new key: combined). True on one row per new key (which row is unspecified).
        Values must be int32, int64, float32 or float64; float sums follow no fixed order.
        No host synchronisation unless the table is near its maximum load.
        ``return_index``: also each row's index in the value storage, as ``find_index`` gives
        it after the call (found by the same probe: no second pass over the keys); returns
        ``(inserted, index)``.

        Example:
            >>> import torch
            >>> from gpuhash import HashMap
            >>> m = HashMap(key_dtype=torch.int64, value_dtype=torch.int64)
            >>> m.insert_or_apply(torch.tensor([4, 4, 9]), torch.tensor([1, 2, 5])).sum().item()
            2
            >>> _ = m.insert_or_apply(torch.tensor([9]), torch.tensor([10]))
            >>> m.find(torch.tensor([4, 9]))[0].tolist()
            [3, 15]
        """
        if op not in APPLY_OPS:
            raise ValueError(f"op must be one of {APPLY_OPS}, got {op!r}")
        spec = self._state.spec
        if spec.value_dtype not in APPLY_DTYPES:
            raise TypeError(f"insert_or_apply needs values of dtype int32, int64, float32 or "
                            f"float64; this table's value_dtype is {spec.value_dtype}")
        with self._stream(stream, writes=True):
            bits, kind = self._keys(keys)
            checked = _arrays.check_values(values, spec, self.device, bits.shape[0])
            if bits.shape[0] == 0:
                empty = bits.new_zeros(0, dtype=torch.bool)
                return (_arrays.to_kind(empty, kind), _arrays.to_kind(
                    bits.new_zeros(0, dtype=torch.int64), kind)) if return_index else (
                    _arrays.to_kind(empty, kind))
            self._make_room(bits)
            slots = bits.new_empty(bits.shape[0], dtype=torch.int64) if return_index else None
            applied_to = self._state
            inserted = self._engine.insert_or_apply(self._state, bits, checked, op, slots)
            self._fit_after_growth()
            if return_index and self._state is not applied_to:  # refitted: the slots moved
                slots = self._engine.find_index(self._state, bits)[0]
            self._used_bound += bits.shape[0]
        if return_index:
            return _arrays.to_kind(inserted, kind), _arrays.to_kind(slots, kind)
        return _arrays.to_kind(inserted, kind)

    def _default(self, default: Any) -> torch.Tensor:
        return _arrays.cached_default_row(self._default_cache, default, self._state.spec,
                                          self.device, self._device_index)


class HashSet(_Table):
    """A hash set of integer keys (int32, uint32, int64 or uint64; every value usable).

    Takes the same options as :class:`HashMap` except the value ones.

    Example:
        >>> import torch
        >>> from gpuhash import HashSet
        >>> s = HashSet(key_dtype=torch.int32)
        >>> s.insert(torch.tensor([3, 3, 8], dtype=torch.int32)).tolist()
        [False, True, True]
        >>> len(s), s.contains(torch.tensor([8, 9], dtype=torch.int32)).tolist()
        (2, [True, False])
    """

    _kind = "HashSet"

    def __init__(self, *, key_dtype: torch.dtype, capacity: int = 1024,
                 device: str | torch.device = "cpu", max_load_factor: float = 0.9,
                 growable: bool = True, duplicates: str = "last", seed: int | None = None):
        self._setup(key_dtype=key_dtype, value_dtype=None, value_shape=(),
                    capacity=capacity, device=device, max_load_factor=max_load_factor,
                    growable=growable, duplicates=duplicates, seed=seed)

    def insert(self, keys: Any, *, stream: Any = None) -> Any:
        """Add keys; True on the row that added each new key (the last, for a repeated key).

        Example:
            >>> import torch
            >>> from gpuhash import HashSet
            >>> s = HashSet(key_dtype=torch.int64)
            >>> s.insert(torch.tensor([1, 2])).tolist(), s.insert(torch.tensor([2])).tolist()
            ([True, True], [False])
        """
        return self._insert(keys, None, stream=stream)

    def items(self) -> torch.Tensor:
        """Every key in the set, in no particular order. Synchronises.

        Example:
            >>> import torch
            >>> from gpuhash import HashSet
            >>> s = HashSet(key_dtype=torch.int64)
            >>> _ = s.insert(torch.tensor([6]))
            >>> s.items().tolist()
            [6]
        """
        with self._order.lock:
            return self._live_keys(self._live())

    def to(self, device: str | torch.device) -> HashSet:
        """A copy of the set on ``device``.

        Example:
            >>> import torch
            >>> from gpuhash import HashSet
            >>> HashSet(key_dtype=torch.int32).to("cpu").device.type
            'cpu'
        """
        return self._copy_to(device)

    @classmethod
    def load(cls, path: str | Path, *, device: str | torch.device = "cpu",
             growable: bool = True, duplicates: str = "last") -> HashSet:
        """Read a set written by :meth:`save`.

        Example:
            >>> import torch
            >>> from gpuhash import HashSet
            >>> s = HashSet(key_dtype=torch.int64)
            >>> s.save("/tmp/gpuhash_doc_set2.pt")
            >>> len(HashSet.load("/tmp/gpuhash_doc_set2.pt"))
            0
        """
        return cls._load(path, device, growable, duplicates)
