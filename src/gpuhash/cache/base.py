"""What every CacheMap operation stands on: the state it owns (and its growth), the order of
operations across CUDA streams, the checks of its inputs, and the status and mode constants.
cache/api.py builds the operations on it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from gpuhash._common import arrays as _arrays
from gpuhash._common.constants import CACHE_STATUSES, WRITE_MODES
from gpuhash._common.streams import StreamOrder
from gpuhash.cache.format import (
    EMPTY_KEY,
    LOCKED_KEY,
    MAX_SLOTS,
    PINNED,
    CacheSpec,
    CacheState,
    empty_cache,
)
from gpuhash.cache.values import SplitValues

# What happened to a row (int8 status of every write); codes from constants.py.
# INSERTED: the key was added in a free slot (or one an entry left for its other bucket).
# ASSIGNED: the key was present; its value / score updated.
# INSERTED_EVICTING: the key was added in place of the lowest-scored entry of its buckets.
# REFUSED: not added: its score is below every entry it could replace (or the key is one of
# the two reserved values).
# SKIPPED: nothing to do: assign / accumulate to an absent key.
# SUPERSEDED: a later row of the batch has the same key; that row was applied.
INSERTED = CACHE_STATUSES["inserted"]
ASSIGNED = CACHE_STATUSES["assigned"]
INSERTED_EVICTING = CACHE_STATUSES["inserted_evicting"]
REFUSED = CACHE_STATUSES["refused"]
SKIPPED = CACHE_STATUSES["skipped"]
SUPERSEDED = CACHE_STATUSES["superseded"]

UPSERT, FIND_OR_INSERT, ASSIGN, ACCUMULATE = (WRITE_MODES[name] for name in WRITE_MODES)
_SIGN = -(2**63)  # xor maps uint64 order onto int64 order


class _Written(NamedTuple):
    """What a write left: the checked inputs and the engine's per-row results."""

    bits: torch.Tensor
    kind: str
    acting: torch.Tensor
    values: torch.Tensor | None
    accumulate: torch.Tensor | None
    status: torch.Tensor
    index: torch.Tensor
    found: torch.Tensor
    evicted: tuple | None


def _engine_for(device: torch.device):
    if device.type == "cuda":
        from gpuhash.cache.cuda import engine as cache_cuda

        return cache_cuda
    from gpuhash.cache.cpu import engine as cache_cpu

    return cache_cpu


def _as_u64_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise ValueError(f"{name} must be an int in [0, 2**64), got {value!r}")
    return value


GROW_AT = 0.75  # a growable cache doubles before a write could take it past this load
MAX_GROW_AT = 0.9  # the highest such load a caller may set (max_load_factor)


def check_load_factor(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 < value <= MAX_GROW_AT):
        raise ValueError(f"max_load_factor must be a number in (0, {MAX_GROW_AT}], got "
                         f"{value!r}")
    return float(value)


class CacheCore:
    """The state, ordering and input checks of a CacheMap (the class users see)."""

    def _adopt(self, state: CacheState, *, step: int, epoch: int, max_slots: int,
               max_hbm_bytes: int | None) -> None:
        self._state = state
        self._max_slots = max_slots  # capacity the cache may grow to (reserve)
        self._grow_at = GROW_AT  # the load a write may not carry a growable cache past
        self._max_hbm_bytes = max_hbm_bytes
        self._device = state.device
        self._device_index = state.keys.get_device()
        self._engine = _engine_for(state.device)
        self._step = step
        self._epoch = epoch
        self._order = StreamOrder(self._device)
        self._defaults: dict[Any, torch.Tensor] = {}
        # what the engine derives from the key words (CUDA: the index from key to slot), made
        # on the current stream after the new state's fill, and recorded as a write there, so
        # that a call on another stream waits for both
        with self._order.ordered(None, writes=True):
            self._engine.refresh(state)

    # --- properties ---------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """The device the cache lives on."""
        return self._device

    @property
    def capacity(self) -> int:
        """Slots now: entries held before inserts evict (or, below ``max_capacity``, grow
        the cache)."""
        return self._state.spec.capacity

    @property
    def max_capacity(self) -> int:
        """Slots the cache may grow to (``capacity`` when it was made at full size)."""
        return self._max_slots

    @property
    def max_load_factor(self) -> float:
        """The load a write may not carry the cache past while it can still grow: the cache
        doubles first (0.75 by default; at most 0.9). ``to()`` keeps it; ``save`` does not
        (a loaded cache starts at 0.75)."""
        return self._grow_at

    @max_load_factor.setter
    def max_load_factor(self, value: float) -> None:
        value = check_load_factor(value)
        with self._order.lock:  # a write in flight grows by one threshold
            self._grow_at = value

    @property
    def max_hbm_bytes(self) -> int | None:
        """The GPU memory value rows may take; rows past it live in pinned host memory."""
        return self._max_hbm_bytes

    @property
    def policy(self) -> str:
        return self._state.spec.policy

    @property
    def spec(self) -> CacheSpec:
        return self._state.spec

    @property
    def load_factor(self) -> float:
        """Live entries over slots. Synchronises with the device."""
        return len(self) / self.capacity

    def __len__(self) -> int:
        """Live entries. Synchronises with the device (after the last write, on any stream)."""
        return self._run(lambda: int(self._state.counts[0]), writes=False, stream=None)

    def __repr__(self) -> str:
        spec = self._state.spec
        return (f"CacheMap(key_dtype={spec.key_dtype}, value_dtype={spec.value_dtype}, "
                f"value_shape={spec.value_shape}, capacity={spec.capacity}, "
                f"policy={spec.policy!r}, device={self.device})")

    @property
    def values(self) -> torch.Tensor | SplitValues:
        """The value rows, indexed by slot (``find_index``): writes land in the cache. Rows
        of free slots hold stale bytes. A tensor (a view) while every row is in one memory;
        with rows in host memory (``max_hbm_bytes``), a :class:`SplitValues` that reads
        ``values[index]`` and writes ``values[index] = rows`` the same way.

        Index with the slots of found rows only: a tensor, as torch does, reads row -1 as the
        last row, where a SplitValues reads zeros for -1. Torch operations on this tensor run
        on the current stream, which the cache's own ordering does not see: issue them on the
        stream of the cache calls they follow (or wait for it)."""
        if self._state.host_values is None:
            return self._state.values
        return SplitValues(self)

    @property
    def scores(self) -> torch.Tensor:
        """The score of every slot (uint64; 0 where free), a view indexed by slot."""
        return self._state.scores.view(torch.uint64)

    # --- ordering and input -------------------------------------------------------------
    def _run(self, work, *, writes: bool, stream: Any):
        """Run ``work()`` on the operation's stream, ordered after the last write (and, for a
        write, after every read since) when those ran on other streams (StreamOrder)."""
        return self._order.run(work, writes=writes, stream=stream)

    def _keys(self, keys: Any) -> tuple[torch.Tensor, str]:
        return _arrays.check_keys(keys, self._state.spec, self._device, self._device_index)

    def _values(self, values: Any, rows: int, *, name: str = "values") -> torch.Tensor:
        return _arrays.check_values(values, self._state.spec, self._device, rows, name=name)

    def _scores(self, scores: Any, rows: int) -> torch.Tensor | None:
        custom = self.policy == "custom"
        if scores is None:
            if custom:
                raise ValueError("policy 'custom' needs scores= on every write")
            return None
        tensor, _ = _arrays.as_tensor(scores, "scores")
        if tensor.dtype not in (torch.int64, torch.uint64):
            raise TypeError(f"scores must be int64 or uint64, got {tensor.dtype}")
        if tuple(tensor.shape) != (rows,):
            raise ValueError(f"scores must have shape ({rows},), got {tuple(tensor.shape)}")
        if tensor.device != self._device:
            raise ValueError(f"scores is on {tensor.device} but the cache is on {self._device}")
        return tensor.contiguous().view(torch.int64)

    def _default(self, default: Any) -> torch.Tensor:
        return _arrays.cached_default_row(self._defaults, default, self._state.spec,
                                          self._device, self._device_index)

    def _tick(self) -> int:
        self._step += 1
        return self._step

    def _out_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return keys.view(torch.uint64) if self._state.spec.key_dtype == torch.uint64 else keys

    # --- growth ---------------------------------------------------------------------------
    def _grow_for(self, rows: int) -> None:
        """Below ``max_capacity``, grow (doubling) until ``rows`` more entries would keep the
        load at most ``max_load_factor``, unless an entry is locked (a growth moves every
        entry; the write then evicts or refuses as at full size). Synchronises with the
        device to read the entry count; a cache made at full size never does."""
        spec = self._state.spec
        if spec.capacity >= self._max_slots:
            return
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        if self._any_locked():  # a growth moves every entry: locked slots must stay
            return
        needed = int(self._state.counts[0]) + rows
        buckets = spec.num_buckets
        limit = self._max_slots // spec.bucket_slots
        while buckets < limit and needed > self._grow_at * buckets * spec.bucket_slots:
            buckets = min(limit, 2 * buckets)
        if buckets > spec.num_buckets:
            self._rehash(buckets)

    def _any_locked(self) -> bool:
        """Whether some entry is locked (lock_keys). Synchronises."""
        if not self._state.caches.get(PINNED):
            return False
        if self._state.pins[:-1].any():
            return True
        self._state.caches.pop(PINNED, None)  # the kernels may skip the pins again
        return False

    def _rehash(self, buckets: int) -> None:
        """Move every entry into a cache of ``buckets`` buckets, keeping its value and score.
        Raises, the cache unchanged, if one could not be placed (at a load of at most
        MAX_GROW_AT / 2 a pair of buckets does not fill)."""
        if self._device.type == "cuda":  # every stream: the last write may be on another
            torch.cuda.synchronize(self._device)
        old = self._state
        keep = (old.keys != EMPTY_KEY) & (old.keys != LOCKED_KEY)
        slots = keep.nonzero().flatten()
        keys, scores = old.keys[slots], old.scores[slots]
        values = self._engine.gather(old, slots)
        placing = dataclasses.replace(old.spec, num_buckets=buckets, policy="custom")
        state = empty_cache(placing, self._device, max_hbm_bytes=self._max_hbm_bytes)
        status, _, _, _ = self._engine.write(
            state, UPSERT, keys, torch.ones_like(keys, dtype=torch.bool), values=values,
            value_stride=1, scores=scores, accumulate=None, step=0, epoch=0,
            evict_capacity=0)
        if bool((status != INSERTED).any()):
            raise RuntimeError(f"growing the cache to {placing.capacity} slots could not place "
                               f"every entry; the cache is unchanged")
        # the same state object with its own policy: what the engine keeps beside its bytes
        # (CUDA: the index the move just filled) goes with it
        state.spec = dataclasses.replace(placing, policy=old.spec.policy)
        self._state = state
        # the move was queued on the current stream: calls on other streams wait for it
        with self._order.ordered(None, writes=True):
            pass

    def reserve(self, slots: int, *, stream: Any = None) -> None:
        """Grow to at least ``slots`` slots (whole buckets, doubling), up to
        ``max_capacity``; never shrinks. Synchronises with the device; the move is queued on
        ``stream`` (default: the current stream), which later calls elsewhere wait for.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1024,
            ...              initial_capacity=128)
            >>> c.capacity, c.max_capacity
            (128, 1024)
            >>> c.reserve(300); c.capacity
            512
        """
        with self._order.lock:
            if isinstance(slots, bool) or not isinstance(slots, int) or not (
                    0 <= slots <= self._max_slots):
                raise ValueError(f"slots must be an int in [0, max_capacity={self._max_slots}], "
                                 f"got {slots!r}")
            spec = self._state.spec
            buckets = spec.num_buckets
            limit = self._max_slots // spec.bucket_slots
            while buckets < limit and buckets * spec.bucket_slots < slots:
                buckets = min(limit, 2 * buckets)
            if buckets > spec.num_buckets:
                with self._order.ordered(stream, writes=True):
                    if self._any_locked():
                        raise ValueError(f"reserve({slots}) would move every entry, and some "
                                         f"are locked; unlock_keys first (the cache is "
                                         f"unchanged)")
                    self._rehash(buckets)

    def set_max_capacity(self, slots: int) -> None:
        """Let the cache grow past the maximum it was made with, up to ``slots`` (whole
        buckets; never below ``capacity``). Writes then double it as ``max_load_factor``
        says, and ``reserve`` grows it ahead.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=128)
            >>> c.set_max_capacity(1024); c.reserve(1000); c.capacity
            1024
        """
        with self._order.lock:
            spec = self._state.spec
            if isinstance(slots, bool) or not isinstance(slots, int) or not (
                    spec.capacity <= slots <= MAX_SLOTS):
                raise ValueError(f"slots must be an int in [capacity={spec.capacity}, "
                                 f"{MAX_SLOTS}], got {slots!r}")
            self._max_slots = CacheSpec.buckets_for(slots, spec.bucket_slots) * spec.bucket_slots
