"""Behaviour shared by HashMap and HashSet: engine choice, room checks, growth, save/load.

The engines assume valid input and enough free slots; this layer guarantees both. Growth and
compaction are a rehash into a fresh table state by the engine itself (on the GPU for CUDA
tables), so no entries travel through the host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from gpuhash._common import arrays as _arrays
from gpuhash._common.constants import STASH_CAPACITY
from gpuhash._common.memory import require
from gpuhash._common.streams import StreamOrder
from gpuhash.table import reserved
from gpuhash.table.format import (
    KEY_DTYPES,
    MAX_LOAD_FACTOR,
    TableSpec,
    TableState,
    copy_state,
    live_slots,
    reset_out_of_band,
    state_bytes,
)
from gpuhash.table.io import load_state, save_state

DUPLICATE_POLICIES = ("last", "any")


class TableFullError(RuntimeError):
    """An insert into a table created with ``growable=False`` would pass its maximum load."""


_ENGINES: dict[str, Any] = {}  # device type -> engine module, imported on first use


def _engine_for(device: torch.device):
    engine = _ENGINES.get(device.type)
    if engine is not None:
        return engine
    if device.type == "cuda":
        from gpuhash.table.cuda import engine
    elif device.type == "cpu":
        from gpuhash.table.cpu import engine
    else:
        raise ValueError(f"device must be 'cpu' or a CUDA device, got {device}")
    _ENGINES[device.type] = engine
    return engine


class _Table:
    """Common core of the public tables; not part of the API."""

    _kind = "table"
    _multi = False  # every row its own entry (MultiMap)

    def _setup(self, *, key_dtype, value_dtype, value_shape, capacity, device, max_load_factor,
               growable, duplicates, seed) -> None:
        if key_dtype not in KEY_DTYPES:
            raise TypeError(f"key_dtype must be one of int32, uint32, int64, uint64; "
                            f"got {key_dtype}")
        if value_dtype is not None and not isinstance(value_dtype, torch.dtype):
            raise TypeError(f"value_dtype must be a torch dtype, got {value_dtype!r}")
        shape = (value_shape,) if isinstance(value_shape, int) else value_shape
        try:
            shape = tuple(shape)
        except TypeError:
            raise TypeError(f"value_shape must be an int or a tuple of ints, got "
                            f"{value_shape!r}") from None
        if any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in shape):
            raise ValueError(f"value_shape must hold positive ints, got {value_shape!r}")
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
            raise ValueError(f"capacity must be a non-negative int, got {capacity!r}")
        if not 0 < max_load_factor <= MAX_LOAD_FACTOR:
            raise ValueError(f"max_load_factor must be in (0, {MAX_LOAD_FACTOR}], "
                             f"got {max_load_factor!r}")
        if duplicates not in DUPLICATE_POLICIES:
            raise ValueError(f"duplicates must be one of {DUPLICATE_POLICIES}, "
                             f"got {duplicates!r}")
        spec = TableSpec(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                         num_buckets=1, max_load_factor=float(max_load_factor), multi=self._multi,
                         **({} if seed is None else {"seed": int(seed)})).sized_for(capacity)
        device = _arrays.resolve_device(device)
        require(state_bytes(spec), device, what=f"capacity={capacity} with value_dtype="
                f"{value_dtype} and value_shape={tuple(shape)}",
                fix="use a smaller capacity or value rows, or free memory first")
        self._adopt(_engine_for(device).empty_state(spec, device), growable=growable,
                    duplicates=duplicates, used=0)

    @classmethod
    def _empty(cls, spec: TableSpec, device: torch.device, *, growable: bool,
               duplicates: str, spare_words: int = 0, filled: bool = True) -> _Table:
        """An empty table of a sized ``spec`` on ``device`` (a torch device with its index),
        for internal callers whose arguments are right by construction (the join's build
        tables): the constructor's checks and sizing cost more host time than a small join's
        kernels take. ``spare_words``: zero words for the caller (``_state.spare``); not
        ``filled``: the engine may leave the memory to the join build that follows (the
        engine's empty_state)."""
        table = object.__new__(cls)
        table._adopt(_engine_for(device).empty_state(spec, device, spare_words=spare_words,
                                                     filled=filled),
                     growable=growable, duplicates=duplicates, used=0, ordered=False)
        return table

    def _adopt(self, state: TableState, *, growable: bool, duplicates: str,
               used: int | None = None, ordered: bool = True) -> None:
        """Take ``state`` as this table's; ``used``: its used slots when known (an empty
        table), which saves reading them from the device (a synchronisation). ``ordered``:
        record the state's making (a fill or a copy, queued on the current stream) as a write,
        which a call on another stream then waits for; not for the join's internal tables,
        used on the stream that made them."""
        assert state.spec.multi == self._multi, "a MultiMap's spec says multi, no other's"
        self._state = state
        self._device = state.device  # cached: small calls are dominated by host overhead
        self._device_index = state.slots.get_device()
        self._engine = _engine_for(state.device)
        self._growable = bool(growable)
        self._duplicates = duplicates
        self._default_cache: dict[Any, torch.Tensor] = {}
        self._order = StreamOrder(self._device)
        if ordered:
            with self._order.ordered(None, writes=True):
                pass
        # the spec before an insert grew the table to an upper bound of its new keys, until
        # _fit_after_growth has checked whether repeats left it too large
        self._grown_from: TableSpec | None = None
        # Host-side upper bound on used bucket slots: lets inserts skip a device sync until
        # the bound nears the limit.
        self._used_bound = int(state.counts[1]) if used is None else used

    # --- properties -------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """The device the table lives on."""
        return self._device

    @property
    def capacity(self) -> int:
        """Entries the table holds before it must grow (or, if not growable, refuse)."""
        return self._state.spec.max_entries

    @property
    def load_factor(self) -> float:
        """Live entries over bucket slots. Synchronises with the device."""
        return len(self) / self._state.spec.num_slots

    @property
    def spec(self) -> TableSpec:
        """The frozen description of the table's format."""
        return self._state.spec

    def __len__(self) -> int:
        """Live entries. Synchronises with the device (Python must know the number)."""
        return self._counts()[0]

    def __repr__(self) -> str:
        spec = self._state.spec
        return (f"{type(self).__name__}(key_dtype={spec.key_dtype}, len={len(self)}, "
                f"capacity={self.capacity}, device='{self.device}')")

    # --- helpers ----------------------------------------------------------------------
    def _stream(self, stream: Any, *, writes: bool):
        """The context of one operation: torch's current stream (of the table's device) is
        the one it runs on, where every temporary is made and every kernel launched, ordered
        after the table's work on other streams (_common/streams.py: StreamOrder)."""
        return self._order.ordered(stream, writes=writes)

    def _counts(self) -> list[int]:
        """The table's counters, read on the current stream (synchronises). A row the kernels
        could not place (only possible if the counters lied about the table's use) raises
        here, after any entry it displaced has been put back."""
        with self._order.lock:  # the read and any repair it needs: one step
            with self._order.ordered(None, writes=False):
                counts = self._state.counts.tolist()
            if len(counts) > 2 and counts[2]:
                with self._order.ordered(None, writes=True):  # the repair writes entries back
                    self._repair(counts[2], counts[3])
            return counts

    def _repair(self, unplaced: int, stashed: int) -> None:
        state = self._state
        kept = min(stashed, STASH_CAPACITY)
        entries = self._engine.stashed(state, kept)
        state.counts[2:] = 0
        # a stashed entry was counted where it stood; it no longer stands anywhere
        state.counts[:2] -= stashed
        if entries is not None:
            words, value_bytes = entries
            spec = state.spec
            keys = words
            if spec.key_bytes == 4:  # the key is the low half of each word (little-endian)
                keys = words.view(torch.int32).view(-1, 2)[:, 0].contiguous()
            values = None
            if spec.value_dtype is not None:
                values = value_bytes.contiguous().view(spec.value_dtype).view(
                    -1, *spec.value_shape)
            # a key inserted again since it was displaced keeps its newer value (an erase
            # since then cannot be told apart: the key comes back, as the error says)
            absent = ~self._engine.contains(self._state, keys)
            keys = keys[absent]
            values = None if values is None else values[absent]
            self._make_room(keys, distinct=True)
            self._engine.insert(self._state, keys, values, duplicates="distinct")
        raise RuntimeError(
            f"{unplaced} rows could not be placed: the table's counters did not match its "
            f"slots. Rows marked inserted are in the table; {kept} entries displaced by the "
            f"failed placements were put back (one erased since then would be back too) and "
            f"{stashed - kept} were lost.")

    def _keys(self, keys: Any) -> tuple[torch.Tensor, str]:
        return _arrays.check_keys(keys, self._state.spec, self._device, self._device_index)

    def _rehash(self, spec: TableSpec) -> None:
        # the old table stays until the new one is full: both must fit
        require(state_bytes(spec), self.device, what=f"growing the table to hold "
                f"{spec.max_entries} entries", fix="the table is unchanged; reserve less or "
                "free memory first")
        target = self._engine.empty_state(spec, self.device)
        old = self._state
        self._engine.rehash(old, target)
        if self.device.type == "cuda":  # the old tensors may be freed while the rehash runs
            stream = torch.cuda.current_stream(self.device)
            # the table's own tensors and the engine's scratch kept with it (locks, stash)
            kept = [*old.tensors().values(), *(() if old.spare is None else (old.spare,)),
                    *(v for v in old.caches.values() if isinstance(v, torch.Tensor))]
            for tensor in kept:
                tensor.record_stream(stream)
        # a MultiMap's copies of the sentinel keys live beside the slots, untouched by growth
        target.reserved_keys, target.reserved_values = old.reserved_keys, old.reserved_values
        self._state = target
        self._default_cache.clear()
        self._used_bound = self._counts()[1]

    def _new_keys(self, keys: torch.Tensor, distinct: bool, room: int, live: int) -> int:
        """Number of distinct keys of the batch not yet in the table, or an upper bound of it
        (syncs). Exact whenever it exceeds ``room``, except for a growable table on the CPU.
        The rows whose key is absent are counted first, at a find's cost (none for an empty
        table); only if they could overflow ``room`` are those rows alone deduplicated (a batch
        of many rows over few keys, as insert_or_apply takes, never pays for deduplicating the
        whole batch). On the CPU that costs a sort, about as much as the insert itself, so a
        growable table there grows to fit the upper bound and gives back what the batch's
        repeats did not use afterwards (_fit_after_growth)."""
        spec = self._state.spec
        growing_on_cpu = self._growable and self.device.type == "cpu"
        if growing_on_cpu and not live and not distinct and keys.shape[0] > room:
            self._grown_from = spec  # every row may be new: no pass over the batch to count
            return keys.shape[0]
        empty = spec.empty_key - (1 << 8 * spec.key_bytes)
        absent = (keys != empty) & (keys != empty - 1)
        if live:
            absent &= ~self._engine.contains(self._state, keys)
        bound = int(absent.sum())
        if bound <= room or distinct:
            return bound
        if growing_on_cpu:
            self._grown_from = spec
            return bound
        return int(self._engine.last_rows(self._state, keys[absent]).sum())

    def _make_room(self, keys: torch.Tensor, *, distinct: bool = False) -> None:
        """Ensure every new key of the batch gets a slot, before the table is touched."""
        spec = self._state.spec
        rows = keys.shape[0]
        if self._used_bound + rows <= spec.max_entries:
            return
        live, used = self._counts()[:2]
        self._used_bound = used
        if used + rows <= spec.max_entries:
            return
        new = (rows if self._multi else
               self._new_keys(keys, distinct, spec.max_entries - used, live))
        if used + new <= spec.max_entries:
            return
        if live + new <= spec.max_entries and used > live:
            self._rehash(spec)  # tombstones make the room: compact in place
            return
        if not self._growable:
            raise TableFullError(
                f"inserting {new} new keys into a table holding {live} of at most "
                f"{spec.max_entries} (max_load_factor={spec.max_load_factor}); create it with "
                f"a larger capacity or growable=True"
            )
        try:
            self._rehash(spec.sized_for(max(2 * spec.max_entries, live + new)))
        except MemoryError:  # no room to double: the least size that holds the batch
            if 2 * spec.max_entries <= live + new:
                raise
            self._rehash(spec.sized_for(live + new))

    def _fit_after_growth(self) -> None:
        """After an insert for which the table grew to an upper bound of its new keys: if the
        batch's repeats left it under a quarter full, rehash it to the size an exact count
        would have given."""
        before, self._grown_from = self._grown_from, None
        if before is None:
            return
        live = self._counts()[0]
        fitted = before.sized_for(max(2 * before.max_entries, live))
        if live * 4 < self._state.spec.max_entries and fitted.num_buckets < self.spec.num_buckets:
            self._rehash(fitted)

    # --- operations shared by map and set ---------------------------------------------
    def _insert(self, keys: Any, values: Any, *, stream: Any) -> Any:
        with self._stream(stream, writes=True):
            bits, kind = self._keys(keys)
            spec = self._state.spec
            rows = bits.shape[0]
            checked = None
            if spec.value_dtype is not None:
                checked = _arrays.check_values(values, spec, self.device, rows)
            if rows == 0:
                return _arrays.to_kind(bits.new_zeros(0, dtype=torch.bool), kind)
            last = None
            if (self._duplicates == "last" and self._device.type == "cuda"
                    and self._used_bound + rows > spec.max_entries
                    and rows < 2**31):  # larger batches go in parts (table/cuda/engine.py)
                # the room check will synchronise: queue the batch's last rows before it, so
                # the GPU finds them while the host waits, not idle while the host launches
                # them after the wait
                last = self._engine.last_rows(self._state, bits)
            self._make_room(bits)
            inserted = self._engine.insert(self._state, bits, checked,
                                           duplicates=self._duplicates, last=last)
            self._fit_after_growth()
            self._used_bound += rows
        return _arrays.to_kind(inserted, kind)

    def contains(self, keys: Any, *, stream: Any = None) -> Any:
        """True where the key is in the table. No host synchronisation.

        Example:
            >>> import torch
            >>> from gpuhash import HashSet
            >>> s = HashSet(key_dtype=torch.int64)
            >>> _ = s.insert(torch.tensor([4, 9]))
            >>> s.contains(torch.tensor([9, 5])).tolist()
            [True, False]
        """
        with self._stream(stream, writes=False):
            bits, kind = self._keys(keys)
            return _arrays.to_kind(self._engine.contains(self._state, bits), kind)

    def erase(self, keys: Any, *, stream: Any = None) -> Any:
        """Remove keys; True on one row per removed key (for a repeated key, which row is
        unspecified). Missing keys are ignored. No host synchronisation.

        Example:
            >>> import torch
            >>> from gpuhash import HashSet
            >>> s = HashSet(key_dtype=torch.int32)
            >>> _ = s.insert(torch.tensor([1, 2], dtype=torch.int32))
            >>> s.erase(torch.tensor([2, 3], dtype=torch.int32)).tolist()
            [True, False]
        """
        with self._stream(stream, writes=True):
            bits, kind = self._keys(keys)
            return _arrays.to_kind(self._engine.erase(self._state, bits), kind)

    def clear(self, *, stream: Any = None) -> None:
        """Remove every entry, keeping the capacity (and any views of the value storage). No
        host synchronisation.

        Example:
            >>> import torch
            >>> from gpuhash import HashSet
            >>> s = HashSet(key_dtype=torch.int64)
            >>> _ = s.insert(torch.tensor([1]))
            >>> s.clear(); len(s)
            0
        """
        with self._stream(stream, writes=True):
            state = self._state
            state.slots.fill_(-1)
            reset_out_of_band(state)
            reserved.drop(state)
            state.overflow.zero_()
            state.counts.zero_()
            self._used_bound = 0

    def reserve(self, entries: int, *, stream: Any = None) -> None:
        """Grow now so that ``entries`` keys fit without further growth (a table made with
        ``growable=False`` too: that stops only the growth a write would start).

        Example:
            >>> import torch
            >>> from gpuhash import HashSet
            >>> s = HashSet(key_dtype=torch.int64, capacity=10)
            >>> s.reserve(1000); s.capacity >= 1000
            True
        """
        if not isinstance(entries, int) or isinstance(entries, bool) or entries < 0:
            raise ValueError(f"entries must be a non-negative int, got {entries!r}")
        with self._stream(stream, writes=True):  # the size is read under the lock
            spec = self._state.spec
            if entries > spec.max_entries:
                self._counts()
                self._rehash(spec.sized_for(entries))

    def _live(self) -> torch.Tensor:
        self._counts()
        return live_slots(self._state).nonzero().squeeze(1)

    def _live_keys(self, rows: torch.Tensor) -> torch.Tensor:
        return self._state.key_view()[rows].view(self._state.spec.key_dtype)

    def _copy_to(self, device: Any):
        with self._order.lock:
            self._counts()
            other = object.__new__(type(self))
            other._adopt(copy_state(self._state, _arrays.resolve_device(device)),
                         growable=self._growable, duplicates=self._duplicates)
            return other

    def save(self, path: str | Path) -> None:
        """Write the table to ``path`` (format version and checksum included).

        Example:
            >>> import torch
            >>> from gpuhash import HashSet
            >>> s = HashSet(key_dtype=torch.int64)
            >>> s.save("/tmp/gpuhash_doc_set.pt")
        """
        with self._order.lock:
            self._counts()
            save_state(self._state, path, kind=self._kind)

    @classmethod
    def _load(cls, path: str | Path, device: Any, growable: bool, duplicates: str):
        table = object.__new__(cls)
        state = load_state(path, _arrays.resolve_device(device), kind=cls._kind)
        table._adopt(state, growable=growable, duplicates=duplicates)
        return table
