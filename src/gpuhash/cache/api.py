"""CacheMap: an evicting key-value store with HierarchicalKV's operations, on either engine.

A fixed number of slots; a full pair of candidate buckets first moves one of its entries to
that entry's other bucket, and near full load evicts its lowest score instead of refusing the
insert (cache/format.py states the rules). What happens to each row comes back
as a status. Operations on CUDA tensors are ordered on the device: a write waits for every
earlier operation on any stream, a read for the last write; reads may overlap one another
(cache/base.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from gpuhash._common import arrays as _arrays
from gpuhash._common.arrays import resolve_device as _resolve_device
from gpuhash.cache.base import (  # noqa: F401  (the status constants are re-exported by the package)
    _SIGN,
    ACCUMULATE,
    ASSIGN,
    ASSIGNED,
    FIND_OR_INSERT,
    INSERTED,
    INSERTED_EVICTING,
    REFUSED,
    SKIPPED,
    SUPERSEDED,
    UPSERT,
    CacheCore,
    _as_u64_int,
    _Written,
    check_load_factor,
)
from gpuhash.cache.format import (
    BUCKET_SHAPES,
    CACHE_KEY_DTYPES,
    DEFAULT_BUCKET_SLOTS,
    MAX_SLOTS,
    POLICIES,
    CacheSpec,
    empty_cache,
)
from gpuhash.cache.locks import CacheLocks

# value dtypes torch has no addition for, whose accum_or_assign is refused up front
_NO_ADDITION = (torch.float8_e4m3fn, torch.float8_e5m2)


def _as_custom(state):
    """The same tensors under policy custom: the engines then write the scores given as they
    are and evict by them (what a merge of another cache's entries needs)."""
    view = dataclasses.replace(state, spec=dataclasses.replace(state.spec, policy="custom"))
    view.caches = state.caches  # the engine's index and launch arguments are the same
    return view


class CacheMap(CacheLocks):
    """A fixed-capacity key-value cache that evicts the lowest-scored entry when a key's two
    candidate buckets are full (and none of their entries can move to its other bucket), with
    HierarchicalKV's operations.

    Keys are int64 or uint64; the two largest uint64 values (int64 -1 and -2) are reserved and
    refused. Values are rows of ``value_shape``. Scores are uint64, larger is more important;
    a write's optional ``scores`` (uint64 tensors, or int64 tensors read as the same 64 bits,
    torch's usual stand-in for uint64) set them under every policy:

    - ``lru``: the table's step counter, advanced by every call that sets scores (``scores``:
      the score itself, as a restored checkpoint has it);
    - ``lfu``: how often the key was written: each call adds 1 (repeats within a batch count
      once), or the row's ``scores``, the count to add (a pipeline that deduplicated its ids
      passes their counts); a new key always replaces the least frequent entry of its full
      buckets, so new ids enter a warm cache;
    - ``epoch_lru`` / ``epoch_lfu``: the global epoch (``set_global_epoch``) in the high 32
      bits; in the low 32 the step counter's low bits (``epoch_lru``, not restarted by a new
      epoch; ``scores``: the whole score) or the count (``epoch_lfu``: it goes on across
      epochs, saturating at 2**32 - 1; ``scores``: the count to add);
    - ``custom``: the caller's ``scores``, required on writes. A negative int64 is a score of
      at least 2**63, above every non-negative one. (Not checked: a check would read the
      scores back to the host on every write.)

    An absent key whose two buckets are full replaces their lowest score if its own is not
    lower, else it is ``REFUSED``.

    Every write takes ``unique=True`` where the caller vouches that the batch repeats no key
    (as an embedding pipeline's deduplicated ids): the check for repeats is then skipped. A
    batch that does repeat a key under it may store that key twice.

    A batch that repeats a key applies one row of it: the last (the first for
    ``find_or_insert``); the others report ``SUPERSEDED`` (``find_or_insert`` gives them the
    applied row's slot). Slot numbers (``find_index``) stay valid until the next write to the
    cache: a write may evict an entry and reuse its row, even one another row of the same
    batch found. ``lock_keys`` pins entries to their slots until ``unlock_keys`` (locks.py).

    Args:
        key_dtype: ``torch.int64`` or ``torch.uint64``.
        value_dtype: dtype of the values.
        value_shape: trailing shape of one value.
        capacity: slots; rounded up to whole buckets. The most the cache holds: past it,
            inserts evict.
        initial_capacity: slots to start with (None: ``capacity``); the cache doubles before
            a write could take its load past ``max_load_factor``, up to ``capacity``
            (``set_max_capacity`` raises that limit; a growing cache reads
            its entry count on each write, a host sync; ``reserve`` grows it ahead).
        max_load_factor: the load past which a growable cache doubles (at most 0.9).
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        policy: ``"lru"``, ``"lfu"``, ``"epoch_lru"``, ``"epoch_lfu"`` or ``"custom"``.
        bucket_slots: slots per bucket, 16 to 128; a key's candidates are two buckets.
        max_hbm_bytes: GPU memory the value rows may take (CUDA only; None: no limit). The
            rows of the slots past it, whole buckets, live in pinned host memory that the
            kernels read and write in place; ``values`` is then a :class:`SplitValues`.
        seed: hash seed.

    Example:
        >>> import torch
        >>> import gpuhash as gh
        >>> c = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(2,),
        ...                 capacity=256)
        >>> c.insert_or_assign(torch.tensor([7, 8]), torch.ones(2, 2)).tolist()
        [0, 0]
        >>> values, found = c.find(torch.tensor([8, 9]))
        >>> values.tolist(), found.tolist()
        ([[1.0, 1.0], [0.0, 0.0]], [True, False])
    """

    def __init__(self, *, key_dtype: torch.dtype, value_dtype: torch.dtype,
                 value_shape: tuple[int, ...] | int = (), capacity: int,
                 device: str | torch.device = "cpu", policy: str = "lru",
                 bucket_slots: int = DEFAULT_BUCKET_SLOTS, max_hbm_bytes: int | None = None,
                 initial_capacity: int | None = None, max_load_factor: float = 0.75,
                 seed: int | None = None):
        if key_dtype not in CACHE_KEY_DTYPES:
            raise TypeError(f"key_dtype must be torch.int64 or torch.uint64, got {key_dtype}")
        if not isinstance(value_dtype, torch.dtype):
            raise TypeError(f"value_dtype must be a torch dtype, got {value_dtype!r}")
        shape = (value_shape,) if isinstance(value_shape, int) else tuple(value_shape)
        if any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in shape):
            raise ValueError(f"value_shape must hold positive ints, got {value_shape!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        if capacity > MAX_SLOTS:  # checked here too: a cache may start smaller and grow
            raise ValueError(f"capacity {capacity} is over the limit of {MAX_SLOTS} slots")
        if bucket_slots not in BUCKET_SHAPES:
            raise ValueError(f"bucket_slots must be one of {BUCKET_SHAPES}, got {bucket_slots!r}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if max_hbm_bytes is not None and (isinstance(max_hbm_bytes, bool) or not isinstance(
                max_hbm_bytes, int) or max_hbm_bytes < 0):
            raise ValueError(f"max_hbm_bytes must be a non-negative int or None, got "
                             f"{max_hbm_bytes!r}")
        if initial_capacity is None:
            initial_capacity = capacity
        if isinstance(initial_capacity, bool) or not isinstance(initial_capacity, int) or not (
                1 <= initial_capacity <= capacity):
            raise ValueError(f"initial_capacity must be an int in [1, capacity={capacity}], "
                             f"got {initial_capacity!r}")
        grow_at = check_load_factor(max_load_factor)
        buckets = CacheSpec.buckets_for(capacity, bucket_slots)
        spec = CacheSpec(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                         num_buckets=CacheSpec.buckets_for(initial_capacity, bucket_slots),
                         bucket_slots=bucket_slots, policy=policy,
                         **({} if seed is None else {"seed": seed}))
        state = empty_cache(spec, _resolve_device(device), max_hbm_bytes=max_hbm_bytes)
        self._adopt(state, step=0, epoch=0, max_slots=buckets * bucket_slots,
                    max_hbm_bytes=max_hbm_bytes)
        self._grow_at = grow_at

    # --- writes ---------------------------------------------------------------------------
    def _write(self, mode: int, keys: Any, values: Any, *, scores: Any, stream: Any,
               accumulate: Any = None, evict: bool = False, first: bool = False,
               value_stride: int = 1, out: torch.Tensor | None = None,
               among: bool | None = None, tick: bool = True, unique: bool = False,
               exact_scores: bool = False) -> _Written:
        def work():
            bits, kind = self._keys(keys)
            rows = bits.shape[0]
            checked = None
            if values is not None:
                checked = (values if value_stride == 0 else self._values(values, rows))
            given = self._scores(scores, rows)
            mask = None
            if accumulate is not None:
                mask, _ = _arrays.as_tensor(accumulate, "accumulate")
                if mask.dtype != torch.bool or tuple(mask.shape) != (rows,):
                    raise ValueError(f"accumulate must be a bool tensor of shape ({rows},), got "
                                     f"{mask.dtype} {tuple(mask.shape)}")
                if mask.device != self._device:
                    raise ValueError(f"accumulate is on {mask.device} but the cache is on "
                                     f"{self._device}")
                mask = mask.contiguous()
            if mode != ASSIGN:
                self._grow_for(rows)
            engine, state = self._engine, self._state
            if unique:  # the caller vouches that no key repeats: every row acts
                acting = torch.ones(rows, dtype=torch.bool, device=bits.device)
            else:
                acting = engine.last_rows(state, bits, first=first)
            if exact_scores:  # the scores given are the entries' own (merge_from)
                state = _as_custom(state)
            if among is not None:  # only the rows whose accumulate flag is `among` act
                acting = acting & (mask if among else ~mask)
            status, index, found, evicted = engine.write(
                state, mode, bits, acting, values=checked, value_stride=value_stride,
                scores=given, accumulate=mask, step=self._tick() if tick else self._step,
                epoch=self._epoch,
                evict_capacity=max(rows, 1) if evict else 0, out=out)
            return _Written(bits, kind, acting, checked, mask, status, index, found, evicted)
        return self._run(work, writes=True, stream=stream)

    def insert_or_assign(self, keys: Any, values: Any, *, scores: Any = None,
                         stream: Any = None, unique: bool = False) -> Any:
        """Insert each key with its value, or assign the value of a present key; a full pair
        of buckets makes room by moving an entry, or evicts its lowest score. Returns each
        row's status (int8: ``INSERTED``, ``ASSIGNED``, ``INSERTED_EVICTING``, ``REFUSED``,
        ``SUPERSEDED``).

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap, ASSIGNED, INSERTED
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.int32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1]), torch.tensor([5], dtype=torch.int32))
            >>> c.insert_or_assign(torch.tensor([1, 2]), torch.tensor([6, 7], dtype=torch.int32)
            ...                    ).tolist() == [ASSIGNED, INSERTED]
            True
        """
        done = self._write(UPSERT, keys, values, scores=scores, stream=stream, unique=unique)
        return _arrays.to_kind(done.status, done.kind)

    def insert_and_evict(self, keys: Any, values: Any, *, scores: Any = None,
                         stream: Any = None, unique: bool = False
                         ) -> tuple[Any, tuple[Any, Any, Any]]:
        """As ``insert_or_assign``, and return what the call left out of the cache: ``(status,
        (keys, values, scores))``, every entry it evicted, then every row it refused with the
        value and the score the row brought, so each key given is either in the cache or in
        the output (HierarchicalKV's contract). Compact: synchronises to learn how many.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap, INSERTED_EVICTING, REFUSED
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=16,
            ...              bucket_slots=16, policy="custom")
            >>> _ = c.insert_or_assign(torch.arange(16), torch.zeros(16), scores=torch.arange(16))
            >>> status, (keys, _, scores) = c.insert_and_evict(
            ...     torch.tensor([99, 98]), torch.ones(2), scores=torch.tensor([50, 0]))
            >>> status.tolist() == [INSERTED_EVICTING, REFUSED], keys.tolist(), scores.tolist()
            (True, [0, 98], [0, 0])
        """
        with self._order.lock:
            with self._order.ordered(stream, writes=True):  # the count is read on the call's stream
                done = self._write(UPSERT, keys, values, scores=scores, stream=None, evict=True,
                                   unique=unique)
                kind, status = done.kind, done.status
                ev_keys, ev_values, ev_scores, count = done.evicted
                refused = (status == REFUSED).nonzero().flatten()
                n = int(count)
                rows = done.values.index_select(0, refused)
                brought = self._brought_scores(done.bits.shape[0], scores).index_select(
                    0, refused)
                out = (self._out_keys(torch.cat([ev_keys[:n], done.bits.index_select(0, refused)])),
                       torch.cat([ev_values[:n], rows]),
                       torch.cat([ev_scores[:n], brought]).view(torch.uint64))
            return (_arrays.to_kind(status, kind),
                    tuple(_arrays.to_kind(t, kind) for t in out))

    def _brought_scores(self, rows: int, scores: Any) -> torch.Tensor:
        """The score (int64 bits) each row would give its key as a new entry, as the engines
        make it (cache/kernels/cache.cuh: gh_new_score) for the step of the last write."""
        policy, epoch_bits = self.policy, (self._epoch << 32) - (2**64 if self._epoch >= 2**31
                                                                else 0)
        given = None if scores is None else self._scores(scores, rows)
        if given is not None and policy != "epoch_lfu":
            return given
        if policy == "epoch_lfu":
            count = (given & 0xFFFFFFFF) if given is not None else 1
            return torch.full((rows,), epoch_bits, dtype=torch.int64, device=self._device) | count
        first = {"lru": self._step, "lfu": 1,
                 "epoch_lru": epoch_bits | (self._step & 0xFFFFFFFF)}[policy]
        return torch.full((rows,), first, dtype=torch.int64, device=self._device)

    def assign(self, keys: Any, values: Any = None, *, scores: Any = None,
               stream: Any = None, unique: bool = False) -> Any:
        """Assign values (and scores, when given) of present keys only; ``values=None``
        updates scores alone. As every write it touches the scores by the policy (HierarchicalKV's
        ``assign_values`` leaves them); under ``custom`` without ``scores`` the entries keep
        theirs. Returns found per row: True on the row that assigned (of a key the batch
        repeats, its last row, which wins; the earlier ones say False).

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([3]), torch.tensor([1.0]))
            >>> c.assign(torch.tensor([3, 4]), torch.tensor([2.0, 2.0])).tolist()
            [True, False]
        """
        if scores is None and self.policy == "custom":
            with self._order.lock:  # the scores read and written back in one operation
                _, _, index, found = self._lookup(keys, copy=False, default=None,
                                                  update_scores=False, stream=stream)
                kept = self._state.scores[torch.where(found, index, 0)]
                done = self._write(ASSIGN, keys, values, scores=kept, stream=stream,
                                   unique=unique)
        else:
            done = self._write(ASSIGN, keys, values, scores=scores, stream=stream,
                               unique=unique)
        return _arrays.to_kind(done.found, done.kind)

    def accum_or_assign(self, keys: Any, values: Any, accumulate: Any, *, scores: Any = None,
                        stream: Any = None, unique: bool = False) -> Any:
        """Rows with ``accumulate`` set add their value to a present key's (``SKIPPED`` if
        the key is absent); then the other rows insert an absent key (``SKIPPED``, the entry
        untouched, if the key is present), as HierarchicalKV's ``accum_or_assign``. Returns
        each row's status.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap, ASSIGNED, INSERTED, SKIPPED
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1]), torch.tensor([1.0]))
            >>> s = c.accum_or_assign(torch.tensor([1, 2, 3]), torch.tensor([0.5, 9.0, 4.0]),
            ...                       torch.tensor([True, True, False]))
            >>> s.tolist() == [ASSIGNED, SKIPPED, INSERTED], c.find(torch.tensor([1]))[0].tolist()
            (True, [1.5])
        """
        with self._order.lock:
            dtype = self._state.spec.value_dtype
            if dtype == torch.bool or dtype in _NO_ADDITION:
                raise TypeError(f"accum_or_assign adds values: a cache of {dtype} values cannot")
            # the adding rows first, their deltas added before any row of the batch can evict
            # the entry they found; then the other rows, as an insert_or_assign
            adding = self._write(ACCUMULATE, keys, values, scores=scores, stream=stream,
                                 accumulate=accumulate, among=True, unique=unique)

            def add():
                adds = adding.accumulate & adding.acting & adding.found
                # unsigned values add as the signed integers of their width (the same bits, as
                # addition wraps alike), since torch has no addition kernels for them
                signed = _arrays.SIGNED_VIEW.get(dtype, dtype)
                given = adding.values.view(signed)
                shape = (-1,) + (1,) * (given.dim() - 1)
                delta = torch.where(adds.view(shape), given,
                                    torch.zeros((), dtype=signed, device=given.device))
                slots = torch.where(adds, adding.index, 0)
                state = self._state
                if state.host_values is None:
                    state.values.view(signed).index_add_(0, slots, delta)
                else:  # the rows of distinct keys: distinct slots, so gather-add-scatter is one add
                    slots = torch.where(adds, adding.index, -1)
                    summed = self._engine.gather(state, slots).view(signed) + delta
                    self._engine.scatter(state, slots, summed.view(dtype))
            self._run(add, writes=True, stream=stream)
            rest = self._write(ACCUMULATE, keys, values, scores=scores, stream=stream,
                               accumulate=accumulate, among=False, tick=False,  # one call, one step
                               unique=unique)
            status = torch.where(adding.accumulate, adding.status, rest.status)
            return _arrays.to_kind(status, adding.kind)

    def _init_rows(self, init: Any, rows: int) -> tuple[torch.Tensor, int]:
        spec = self._state.spec
        tensor = init if isinstance(init, torch.Tensor) else None
        if tensor is None and getattr(init, "ndim", 0) == len(spec.value_shape) + 1:
            tensor, _ = _arrays.as_tensor(init, "init")  # NumPy / CuPy / DLPack rows per key
        if tensor is not None and tensor.dim() == len(spec.value_shape) + 1:
            return self._values(tensor, rows, name="init"), 1
        row = _arrays.cached_default_row(self._defaults, init, spec, self._device,
                                         self._device_index, name="init")
        return row.reshape(1, *spec.value_shape), 0

    def _find_or_insert(self, keys: Any, init: Any, scores: Any, stream: Any, *,
                        copy: bool, unique: bool = False
                        ) -> tuple[str, torch.Tensor | None, torch.Tensor, torch.Tensor]:
        # the init row and the output are made on the call's stream, as its kernels run there;
        # the write and the repeats' reads inside are one operation on that stream
        with self._order.ordered(stream, writes=True):
            return self._find_or_insert_here(keys, init, scores, copy=copy, unique=unique)

    def _find_or_insert_here(self, keys: Any, init: Any, scores: Any, *,
                             copy: bool, unique: bool = False
                             ) -> tuple[str, torch.Tensor | None, torch.Tensor, torch.Tensor]:
        stream = None
        bits, kind = self._keys(keys)
        rows, stride = self._init_rows(init, bits.shape[0])
        spec = self._state.spec
        out = bits.new_empty((bits.shape[0], *spec.value_shape), dtype=spec.value_dtype)
        done = self._write(FIND_OR_INSERT, self._out_keys(bits), rows, scores=scores,
                           stream=stream, first=True, value_stride=stride,
                           out=out if copy else None, unique=unique)

        def repeats():  # rows after a key's first get its slot (and value) as it stands now
            state = self._state
            if copy:  # (the acting rows' values were copied by the write itself)
                if unique:  # every row acted
                    return
                self._engine.lookup(state, done.bits, only=~done.acting, index=done.index,
                                    found=done.found, default=rows, default_stride=stride,
                                    out=out)
                return
            # and another row of the call may have moved the entry an acting row found or
            # placed to its other bucket, or evicted it: that row's slot as the call leaves it
            self._engine.lookup(state, done.bits, verify=done.acting, index=done.index,
                                found=done.found)
        self._run(repeats, writes=False, stream=stream)
        return kind, out if copy else None, done.index, done.found

    def find_or_insert(self, keys: Any, *, init: Any = 0, scores: Any = None,
                       stream: Any = None, unique: bool = False) -> tuple[Any, Any]:
        """Each key's value, inserting absent keys with ``init`` (a scalar, one row, or a row
        per key) first. Returns (values, found): found says the row found its key rather
        than inserting it (a refused insert gives ``init`` and found False); a repeated key's
        later rows look after its first row, so they find what it inserted, unless another
        row of the call evicted it (at full load rows of one call may evict each other's
        entries: README, "CacheMap"). A repeated key's first row acts and
        gets the value it found or inserted, even if another row of the same call evicts that
        entry (``find_or_insert_index`` then gives -1 for it); its later rows get the value
        as the call leaves it.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> values, found = c.find_or_insert(torch.tensor([4, 4]), init=2.0)
            >>> values.tolist(), found.tolist()
            ([2.0, 2.0], [False, True])
        """
        kind, values, _, found = self._find_or_insert(keys, init, scores, stream, copy=True,
                                                     unique=unique)
        return _arrays.to_kind(values, kind), _arrays.to_kind(found, kind)

    def find_or_insert_index(self, keys: Any, *, init: Any = 0, scores: Any = None,
                             stream: Any = None, unique: bool = False) -> tuple[Any, Any]:
        """As ``find_or_insert``, returning each key's slot (row of ``values``) as the call
        leaves it instead of a copy of its value: -1 where the key was refused, or evicted by
        another row of the same call.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> index, found = c.find_or_insert_index(torch.tensor([5]), init=1.5)
            >>> c.values[index].tolist(), found.tolist()
            ([1.5], [False])
        """
        kind, _, index, found = self._find_or_insert(keys, init, scores, stream, copy=False,
                                                     unique=unique)
        return _arrays.to_kind(index, kind), _arrays.to_kind(found, kind)

    # --- removal and bulk -----------------------------------------------------------------
    def erase(self, keys: Any, *, stream: Any = None) -> Any:
        """Remove each key; True on the row that removed it.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1]), torch.tensor([3.0]))
            >>> c.erase(torch.tensor([1, 1, 2])).tolist()
            [True, False, False]
        """
        def work():
            bits, kind = self._keys(keys)
            return kind, self._engine.erase(self._state, bits)
        kind, erased = self._run(work, writes=True, stream=stream)
        return _arrays.to_kind(erased, kind)
