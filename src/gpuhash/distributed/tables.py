"""ShardedHashMap and ShardedHashSet: a HashMap or HashSet split over the ranks of a process
group, one shard a rank, each key held by the rank its shard hash names
(distributed/routing.py).

Every key operation is collective: every rank of the group calls it, in the same order, each
with its own batch (empty ones too), and gets the answers for its own rows in its row order.
Rows of one key from several ranks are applied as the single table would apply every rank's
batch concatenated in rank order (distributed/base.py). Each shard is an ordinary table on the
rank's device and grows as one does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch

from gpuhash._common import arrays as _arrays
from gpuhash.distributed import io as _io
from gpuhash.distributed.base import Checked, ShardedBase, default_device, fills_zero
from gpuhash.distributed.routing import owner_of
from gpuhash.table.hash_map import APPLY_DTYPES, APPLY_OPS, HashMap, HashSet

Duplicates = Literal["last", "any"]
ApplyOp = Literal["add", "min", "max"]


class _ShardedTable(ShardedBase):
    """What the sharded map and set share: the key-only operations, growth, files."""

    def contains(self, keys: Any) -> Any:
        """True where the key is in the table. Collective.

        Example:
            >>> import torch
            >>> import gpuhash as gh
            >>> with gh.distributed.single_process_group():
            ...     s = gh.distributed.ShardedHashSet(key_dtype=torch.int64)
            ...     _ = s.insert(torch.tensor([3]))
            ...     print(s.contains(torch.tensor([3, 4])).tolist())
            [True, False]
        """
        kind, (found,) = self._call("contains", lambda: (*self._keys(keys), [], None),
                                    lambda bits, _, plan: [self._local.contains(bits)])
        return _arrays.to_kind(found, kind)

    def erase(self, keys: Any) -> Any:
        """Remove keys; True on one row per removed key (of a key several rows name, which
        one is unspecified). Collective.

        Example:
            >>> import torch
            >>> import gpuhash as gh
            >>> with gh.distributed.single_process_group():
            ...     s = gh.distributed.ShardedHashSet(key_dtype=torch.int64)
            ...     _ = s.insert(torch.tensor([3]))
            ...     print(s.erase(torch.tensor([3, 4])).tolist(), len(s))
            [True, False] 0
        """
        kind, (erased,) = self._call("erase", lambda: (*self._keys(keys), [], None),
                                     lambda bits, _, plan: [self._local.erase(bits)])
        return _arrays.to_kind(erased, kind)

    def clear(self) -> None:
        """Empty this rank's shard (call it on every rank to empty the table). Local."""
        self._local.clear()

    def reserve(self, entries: int) -> None:
        """Grow this rank's shard now to hold ``entries`` keys without further growth. Local:
        the shard of each rank is sized by its own call (about ``total / world_size`` each,
        plus a margin: the shard hash splits keys evenly, not exactly)."""
        self._local.reserve(entries)

    def save(self, path: str | Path) -> None:
        """Write the table to the folder ``path``: a file a shard (the single table's format)
        and ``manifest.json`` (the kind, the shards, the routing), written by rank 0 once
        every shard is on disk. Collective; synchronises.

        Example:
            >>> import tempfile, torch
            >>> import gpuhash as gh
            >>> folder = tempfile.mkdtemp()
            >>> with gh.distributed.single_process_group():
            ...     s = gh.distributed.ShardedHashSet(key_dtype=torch.int64)
            ...     _ = s.insert(torch.arange(10))
            ...     s.save(folder)
            ...     print(len(gh.distributed.ShardedHashSet.load(folder)))
            10
        """
        _io.save_sharded(self, path)

    def _apply_insert(self, bits, columns, plan) -> list[torch.Tensor]:
        return [self._local.insert(bits, *columns)]

    # --- the hooks of distributed/io.py -----------------------------------------------------
    _options: dict  # what a shard's file does not keep: growable, duplicates

    def _file_options(self) -> dict:
        return dict(self._options)

    @classmethod
    def _load_local(cls, file: Path, device: Any, options: dict) -> Any:
        return cls._local_type.load(file, device=device, **options)

    @classmethod
    def _empty_like(cls, shard: Any, device: Any, entries: int) -> Any:
        spec = shard.spec
        values = {} if cls._local_type is HashSet else {
            "value_dtype": spec.value_dtype, "value_shape": spec.value_shape}
        return cls._local_type(key_dtype=spec.key_dtype, capacity=entries, device=device,
                               max_load_factor=spec.max_load_factor, seed=spec.seed, **values)

    @staticmethod
    def _take_owned(shard: Any, local: Any, rank: int, world: int) -> None:
        items = shard.items()
        keys, values = (items, None) if isinstance(items, torch.Tensor) else items
        mine = (owner_of(keys, world) == rank).nonzero().flatten()
        signed = keys.view(_arrays.SIGNED_VIEW.get(keys.dtype, keys.dtype))
        keys = signed.index_select(0, mine).view(keys.dtype).to(local.device)
        if values is None:
            local.insert(keys)
        else:
            signed = _arrays.SIGNED_VIEW.get(values.dtype, values.dtype)
            picked = values.view(signed).index_select(0, mine).view(values.dtype)
            local.insert(keys, picked.to(local.device))


class ShardedHashMap(_ShardedTable):
    """A :class:`~gpuhash.HashMap` sharded over a process group: rank r holds the keys whose
    owner (``routing.owner_of``) is r.

    The options are HashMap's; ``capacity`` is each shard's. ``device``: the shard's device
    (default: the current CUDA device under NCCL, else the CPU, gloo's tensors). ``group``:
    the process group (default: torch.distributed's default group). Every rank must make the
    table with the same options (checked: the constructor is collective). Keys and values
    come as torch tensors (or NumPy arrays) on the table's device, and the answers go back the
    same way. ``find_index`` and ``values`` are the shard's own (``local``): a rank cannot
    index another rank's storage.

    A key's rows from several ranks are applied in rank order, then row order: the single
    HashMap's "last row wins" over every rank's batch concatenated in rank order. A bad batch
    on any rank (a wrong dtype, shape or device) makes the call raise on every rank before any
    shard changes: the rank with the bad batch raises the single table's error, the others a
    :class:`PeerError` quoting it.

    Example:
        >>> import torch
        >>> import gpuhash as gh
        >>> with gh.distributed.single_process_group():
        ...     m = gh.distributed.ShardedHashMap(key_dtype=torch.int64,
        ...                                       value_dtype=torch.float32)
        ...     print(m.insert(torch.tensor([1, 2, 1]), torch.tensor([1.0, 2.0, 3.0])).tolist())
        ...     values, found = m.find(torch.tensor([1, 5]), default=-1.0)
        ...     print(values.tolist(), found.tolist(), len(m))
        [False, True, True]
        [3.0, -1.0] [True, False] 2
    """

    _kind = "ShardedHashMap"
    _local_type = HashMap

    def __init__(self, *, key_dtype: torch.dtype, value_dtype: torch.dtype,
                 value_shape: tuple[int, ...] = (), capacity: int = 1024,
                 device: str | torch.device | None = None, max_load_factor: float = 0.9,
                 growable: bool = True, duplicates: Duplicates = "last",
                 seed: int | None = None, group: Any = None):
        shape = (value_shape,) if isinstance(value_shape, int) else value_shape

        def make() -> HashMap:
            return HashMap(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                           capacity=capacity,
                           device=default_device(group) if device is None else device,
                           max_load_factor=max_load_factor, growable=growable,
                           duplicates=duplicates, seed=seed)
        self._join(make, group, ("HashMap", key_dtype, value_dtype, tuple(shape),
                                 max_load_factor, growable, duplicates, seed))
        self._options = {"growable": growable, "duplicates": duplicates}

    def insert(self, keys: Any, values: Any) -> Any:
        """Insert or assign; True where the row added a new key (of a key's rows, the one
        applied last). Collective.

        Example:
            >>> import torch
            >>> import gpuhash as gh
            >>> with gh.distributed.single_process_group():
            ...     m = gh.distributed.ShardedHashMap(key_dtype=torch.int32,
            ...                                       value_dtype=torch.int64)
            ...     k = torch.tensor([7, 8], dtype=torch.int32)
            ...     print(m.insert(k, torch.tensor([70, 80])).tolist())
            [True, True]
        """
        local = self._local

        def check() -> Checked:
            bits, kind = self._keys(keys)
            return bits, kind, [_arrays.check_values(values, local.spec, local.device,
                                                     bits.shape[0])], None
        kind, (inserted,) = self._call("insert", check, self._apply_insert)
        return _arrays.to_kind(inserted, kind)

    def find(self, keys: Any, *, default: Any = 0) -> tuple[Any, Any]:
        """Values for the keys, shaped ``(n, *value_shape)``, ``default`` where missing, and a
        found mask. Collective.

        Example:
            >>> import torch
            >>> import gpuhash as gh
            >>> with gh.distributed.single_process_group():
            ...     m = gh.distributed.ShardedHashMap(key_dtype=torch.int64,
            ...                                       value_dtype=torch.int64, value_shape=(2,))
            ...     _ = m.insert(torch.tensor([4]), torch.tensor([[1, 2]]))
            ...     print(m.find(torch.tensor([4, 6]), default=-1)[0].tolist())
            [[1, 2], [-1, -1]]
        """
        local = self._local
        alone = self.world_size == 1
        row = None

        def check() -> Checked:
            nonlocal row
            bits, kind = self._keys(keys)
            row = local._default(default)  # the single map's check (and its row, kept)
            return bits, kind, [], None

        def apply(bits, _, plan) -> list[torch.Tensor]:
            # alone, the rows are the caller's own: its default goes in as they are found
            return list(local.find(bits, default=row if alone else 0))
        kind, (found_values, found) = self._call("find", check, apply)
        if not alone and not fills_zero(default):
            # the default is the caller's, put in here: it never travels (the owners left
            # missing rows zero)
            shape = (-1,) + (1,) * len(local.spec.value_shape)
            found_values = _arrays.select(found.view(shape), found_values, row)
        return _arrays.to_kind(found_values, kind), _arrays.to_kind(found, kind)

    def insert_or_apply(self, keys: Any, values: Any, *, op: ApplyOp = "add") -> Any:
        """Combine each row's value into its key's with ``op`` (``"add"``, ``"min"``,
        ``"max"``), as :meth:`HashMap.insert_or_apply`; True on one row per new key. Every
        rank must pass the same ``op`` (checked). Collective.

        Example:
            >>> import torch
            >>> import gpuhash as gh
            >>> with gh.distributed.single_process_group():
            ...     m = gh.distributed.ShardedHashMap(key_dtype=torch.int64,
            ...                                       value_dtype=torch.int64)
            ...     _ = m.insert_or_apply(torch.tensor([1, 1, 2]), torch.tensor([1, 1, 1]))
            ...     print(m.find(torch.tensor([1, 2]))[0].tolist())
            [2, 1]
        """
        local = self._local

        def check() -> Checked:
            if op not in APPLY_OPS:
                raise ValueError(f"op must be one of {APPLY_OPS}, got {op!r}")
            if local.spec.value_dtype not in APPLY_DTYPES:
                raise TypeError(f"insert_or_apply needs values of dtype int32, int64, float32 "
                                f"or float64; this table's value_dtype is "
                                f"{local.spec.value_dtype}")
            bits, kind = self._keys(keys)
            return bits, kind, [_arrays.check_values(values, local.spec, local.device,
                                                     bits.shape[0])], None

        def apply(bits, columns, plan) -> list[torch.Tensor]:
            return [local.insert_or_apply(bits, columns[0], op=op)]
        options = APPLY_OPS.index(op) + 1 if op in APPLY_OPS else 0
        kind, (inserted,) = self._call("insert_or_apply", check, apply, options=options)
        return _arrays.to_kind(inserted, kind)

    def items(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of this rank's shard (not the whole table: gather them where every
        rank's are wanted), in no particular order. Local; synchronises."""
        return self._local.items()

    @classmethod
    def load(cls, path: str | Path, *, device: str | torch.device | None = None,
             group: Any = None) -> ShardedHashMap:
        """Read a table written by :meth:`save`, onto ``group``'s ranks. Saved on as many
        ranks, each rank reads its own shard; on another number, each rank reads every
        shard and keeps the keys it owns (re-sharding). Collective."""
        return _io.load_sharded(cls, path, device=device, group=group)


class ShardedHashSet(_ShardedTable):
    """A :class:`~gpuhash.HashSet` sharded over a process group, as
    :class:`ShardedHashMap` shards a map (the same options, less the value ones).

    Example:
        >>> import torch
        >>> import gpuhash as gh
        >>> with gh.distributed.single_process_group():
        ...     s = gh.distributed.ShardedHashSet(key_dtype=torch.uint64)
        ...     print(s.insert(torch.tensor([1, 2, 2], dtype=torch.uint64)).tolist(), len(s))
        [True, False, True] 2
    """

    _kind = "ShardedHashSet"
    _local_type = HashSet

    def __init__(self, *, key_dtype: torch.dtype, capacity: int = 1024,
                 device: str | torch.device | None = None, max_load_factor: float = 0.9,
                 growable: bool = True, duplicates: Duplicates = "last",
                 seed: int | None = None, group: Any = None):
        def make() -> HashSet:
            return HashSet(key_dtype=key_dtype, capacity=capacity,
                           device=default_device(group) if device is None else device,
                           max_load_factor=max_load_factor, growable=growable,
                           duplicates=duplicates, seed=seed)
        self._join(make, group, ("HashSet", key_dtype, max_load_factor, growable, duplicates,
                                 seed))
        self._options = {"growable": growable, "duplicates": duplicates}

    def insert(self, keys: Any) -> Any:
        """Add keys; True on the row that added each new key (of a key's rows, the one applied
        last). Collective."""
        kind, (inserted,) = self._call("insert", lambda: (*self._keys(keys), [], None),
                                       self._apply_insert)
        return _arrays.to_kind(inserted, kind)

    def items(self) -> torch.Tensor:
        """The keys of this rank's shard, in no particular order. Local; synchronises."""
        return self._local.items()

    @classmethod
    def load(cls, path: str | Path, *, device: str | torch.device | None = None,
             group: Any = None) -> ShardedHashSet:
        """Read a set written by :meth:`save` (re-sharding as :meth:`ShardedHashMap.load`).
        Collective."""
        return _io.load_sharded(cls, path, device=device, group=group)
