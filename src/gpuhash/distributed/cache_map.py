"""ShardedCacheMap: a CacheMap split over the ranks of a process group, one shard a rank: the
row-wise sharded embedding table of a training job, where each rank looks up the ids of its
own batch and the rows live on the rank that owns each id.

Every key operation is collective (distributed/base.py says how rows of one key from several
ranks are ordered). Each shard keeps its own scores, step counter and evictions: a shard
evicts among the keys it owns. A scalar ``init`` travels once a call in the header exchange,
not once a row; ``default`` never travels (the caller fills its own missing rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist

from gpuhash._common import arrays as _arrays
from gpuhash.cache.api import REFUSED, CacheMap
from gpuhash.cache.format import DEFAULT_BUCKET_SLOTS
from gpuhash.distributed import io as _io
from gpuhash.distributed.base import (
    Checked,
    ShardedBase,
    default_device,
    device_index,
    fills_zero,
    repeat_extras,
)
from gpuhash.distributed.routing import owner_of

Policy = Literal["lru", "lfu", "epoch_lru", "epoch_lfu", "custom"]


class ShardedCacheMap(ShardedBase):
    """A :class:`~gpuhash.CacheMap` sharded over a process group: rank r holds the keys whose
    owner (``routing.owner_of``) is r, in a cache of ``capacity`` slots (each shard's).

    The options are CacheMap's, plus ``device`` (default: the current CUDA device under
    NCCL, else the CPU) and ``group`` (default: the default group); every rank must pass the
    same ones (checked: the constructor is collective). Statuses, found masks and values come
    back for the caller's rows in its row order. A key repeated across ranks acts as in one
    batch of every rank's rows in rank order: its last row is applied (``find_or_insert``: its
    first), the others say ``SUPERSEDED``. ``find_index``, ``values``, ``scores`` and
    ``export`` belong to the shard (``local``).

    Example:
        >>> import torch
        >>> import gpuhash as gh
        >>> with gh.distributed.single_process_group():
        ...     table = gh.distributed.ShardedCacheMap(key_dtype=torch.int64,
        ...         value_dtype=torch.float32, value_shape=(2,), capacity=1024)
        ...     rows, found = table.find_or_insert(torch.tensor([5, 6]), init=0.5)
        ...     print(rows.tolist(), found.tolist())
        ...     _ = table.insert_or_assign(torch.tensor([5]), torch.ones(1, 2))
        ...     print(table.find(torch.tensor([5, 7]), default=-1.0)[0].tolist())
        [[0.5, 0.5], [0.5, 0.5]] [False, False]
        [[1.0, 1.0], [-1.0, -1.0]]
    """

    _kind = "ShardedCacheMap"
    _options: dict = {}

    def __init__(self, *, key_dtype: torch.dtype, value_dtype: torch.dtype,
                 value_shape: tuple[int, ...] | int = (), capacity: int,
                 device: str | torch.device | None = None, policy: Policy = "lru",
                 bucket_slots: int = DEFAULT_BUCKET_SLOTS, max_hbm_bytes: int | None = None,
                 initial_capacity: int | None = None, seed: int | None = None,
                 group: Any = None):
        shape = (value_shape,) if isinstance(value_shape, int) else value_shape

        def make() -> CacheMap:
            return CacheMap(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=shape,
                            capacity=capacity,
                            device=default_device(group) if device is None else device,
                            policy=policy, bucket_slots=bucket_slots,
                            max_hbm_bytes=max_hbm_bytes, initial_capacity=initial_capacity,
                            seed=seed)
        self._join(make, group, ("CacheMap", key_dtype, value_dtype, tuple(shape), policy,
                                 bucket_slots, seed))

    # --- checks ------------------------------------------------------------------------------
    def _rows(self, keys: Any, values: Any, scores: Any, *, name: str = "values",
              optional_values: bool = False) -> Checked:
        local = self._local
        bits, kind = self._keys(keys)
        columns = []
        if values is not None or not optional_values:
            columns.append(_arrays.check_values(values, local.spec, local.device, bits.shape[0],
                                                name=name))
        # the single cache's own check and messages (scores required under policy "custom")
        given = local._scores(scores, bits.shape[0])
        if given is not None:
            columns.append(given)
        return bits, kind, columns, None

    def _split(self, columns: list[torch.Tensor], with_values: bool = True) -> tuple[Any, Any]:
        """(values, scores) of the received columns: scores travel where the callers gave
        them (every rank alike: the options' code says so, _scored)."""
        values = columns[0] if with_values else None
        scores = columns[-1] if len(columns) > int(with_values) else None
        return values, scores

    @staticmethod
    def _scored(code: int, scores: Any, unique: bool = False) -> int:
        """An options' code that also says whether this rank gave scores and declared its
        keys unique, so ranks that differ raise rather than send columns the owners would
        misread (or skip a duplicate check another rank's rows need)."""
        return 4 * code + 2 * int(bool(unique)) + int(scores is not None)

    # --- writes ------------------------------------------------------------------------------
    def insert_or_assign(self, keys: Any, values: Any, *, scores: Any = None,
                         unique: bool = False) -> Any:
        """Insert or assign each row (:meth:`CacheMap.insert_or_assign`); each row's status.
        Collective. ``unique=True``, on every rank alike, promises that no key appears twice
        in the whole call (every rank's batch together: an owner receives them all), and the
        owners skip the duplicate check; a key given twice anyway gets an unspecified row.

        Example:
            >>> import torch
            >>> import gpuhash as gh
            >>> with gh.distributed.single_process_group():
            ...     c = gh.distributed.ShardedCacheMap(key_dtype=torch.int64,
            ...         value_dtype=torch.float32, capacity=256)
            ...     s = c.insert_or_assign(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]))
            ...     print(s.tolist() == [gh.SUPERSEDED, gh.INSERTED])
            True
        """
        def apply(bits, columns, plan) -> list[torch.Tensor]:
            given, score = self._split(columns)
            return [self._local.insert_or_assign(bits, given, scores=score, unique=unique)]
        kind, (status,) = self._call("insert_or_assign",
                                     lambda: self._rows(keys, values, scores), apply,
                                     options=self._scored(1, scores, unique))
        return _arrays.to_kind(status, kind)

    def insert_and_evict(self, keys: Any, values: Any, *, scores: Any = None,
                         unique: bool = False) -> tuple[Any, tuple[Any, Any, Any]]:
        """As :meth:`insert_or_assign`; also returns what the call left out of the cache, as
        :meth:`CacheMap.insert_and_evict` does: the entries this rank's shard evicted
        (whoever's rows evicted them), then this rank's own refused rows (their key, value and
        the score they brought). Every key given is in the cache or in some rank's output.
        ``unique`` as in :meth:`insert_or_assign`. Collective."""
        evicted: list[Any] = []
        checked: list[Any] = []

        def check() -> Checked:
            out = self._rows(keys, values, scores)
            checked.append(out)
            return out

        def apply(bits, columns, plan) -> list[torch.Tensor]:
            given, score = self._split(columns)
            status, (out_keys, out_values, out_scores) = self._local.insert_and_evict(
                bits, given, scores=score, unique=unique)
            # the shard's own evictions stay here; the refused rows go back with their status
            kept = out_keys.shape[0] - int((status == REFUSED).sum())
            evicted.append((out_keys[:kept], out_values[:kept], out_scores[:kept]))
            return [status]
        kind, (status,) = self._call("insert_and_evict", check, apply,
                                     options=self._scored(1, scores, unique))
        bits, _, columns, _ = checked[0]
        local = self._local
        refused = (status == REFUSED).nonzero().flatten()
        brought = local._brought_scores(bits.shape[0], scores).index_select(0, refused)
        out_keys, out_values, out_scores = evicted[0]
        dtype = out_values.dtype  # unsigned rows move as the signed ints of their width
        signed = _arrays.SIGNED_VIEW.get(dtype, dtype)
        rows = columns[0].view(signed).index_select(0, refused)
        out = (local._out_keys(torch.cat([out_keys.view(torch.int64),
                                          bits.view(torch.int64).index_select(0, refused)])),
               torch.cat([out_values.view(signed), rows]).view(dtype),
               torch.cat([out_scores.view(torch.int64), brought]).view(torch.uint64))
        return _arrays.to_kind(status, kind), tuple(_arrays.to_kind(t, kind) for t in out)

    def assign(self, keys: Any, values: Any = None, *, scores: Any = None,
               unique: bool = False) -> Any:
        """Assign values (and scores, if given) of present keys only; found per row (True on
        the row applied). ``unique`` as in :meth:`insert_or_assign`. Collective."""
        with_values = values is not None

        def apply(bits, columns, plan) -> list[torch.Tensor]:
            given, score = self._split(columns, with_values)
            return [self._local.assign(bits, given, scores=score, unique=unique)]
        kind, (found,) = self._call(
            "assign", lambda: self._rows(keys, values, scores, optional_values=True), apply,
            # every rank with values, or every rank without; and the same for scores
            options=self._scored(int(with_values) + 1, scores, unique))
        return _arrays.to_kind(found, kind)

    def accum_or_assign(self, keys: Any, values: Any, accumulate: Any, *,
                        scores: Any = None, unique: bool = False) -> Any:
        """Rows with ``accumulate`` set add to a present key's value, the others insert an
        absent key (:meth:`CacheMap.accum_or_assign`); each row's status. ``unique`` as in
        :meth:`insert_or_assign`. Collective."""
        local = self._local

        def check() -> Checked:
            bits, kind, columns, _ = self._rows(keys, values, scores)
            mask, _ = _arrays.as_tensor(accumulate, "accumulate")
            if mask.dtype != torch.bool or tuple(mask.shape) != (bits.shape[0],):
                raise ValueError(f"accumulate must be a bool tensor of shape ({bits.shape[0]},),"
                                 f" got {mask.dtype} {tuple(mask.shape)}")
            if mask.device != local.device:
                raise ValueError(f"accumulate is on {mask.device} but the cache is on "
                                 f"{local.device}")
            return bits, kind, [*columns, mask], None

        def apply(bits, columns, plan) -> list[torch.Tensor]:
            given, score = self._split(columns[:-1])
            return [local.accum_or_assign(bits, given, columns[-1], scores=score,
                                          unique=unique)]
        kind, (status,) = self._call("accum_or_assign", check, apply,
                                     options=self._scored(1, scores, unique))
        return _arrays.to_kind(status, kind)

    def find_or_insert(self, keys: Any, *, init: Any = 0, scores: Any = None,
                       unique: bool = False) -> tuple[Any, Any]:
        """Each key's value, inserting absent keys with ``init`` (a scalar, one row, or a row
        per key) first (:meth:`CacheMap.find_or_insert`); (values, found). A key's first row
        over every rank in rank order acts. ``unique`` as in :meth:`insert_or_assign`.
        Collective.

        Example:
            >>> import torch
            >>> import gpuhash as gh
            >>> with gh.distributed.single_process_group():
            ...     c = gh.distributed.ShardedCacheMap(key_dtype=torch.int64,
            ...         value_dtype=torch.float32, capacity=256)
            ...     _ = c.find_or_insert(torch.tensor([3]), init=torch.tensor([1.5]))
            ...     print(c.find_or_insert(torch.tensor([3, 4]))[0].tolist())
            [1.5, 0.0]
        """
        local = self._local
        spec = local.spec
        per_row = init if isinstance(init, torch.Tensor) else None
        if per_row is None and getattr(init, "ndim", 0) == len(spec.value_shape) + 1:
            per_row = init  # NumPy / CuPy rows
        per_row_given = per_row is not None and getattr(per_row, "ndim", 0) == len(
            spec.value_shape) + 1

        def check() -> Checked:
            if per_row_given:
                bits, kind, columns, _ = self._rows(keys, per_row, scores, name="init")
                return bits, kind, columns, None
            bits, kind, columns, _ = self._rows(keys, None, scores, optional_values=True)
            row = _arrays.cached_default_row(local._defaults, init, spec, local.device,
                                             device_index(local.device), name="init")
            return bits, kind, columns, row.reshape(-1).view(torch.uint8)

        def apply(bits, columns, plan) -> list[torch.Tensor]:
            if per_row_given:
                rows, score = self._split(columns)
            elif self.world_size == 1:  # the caller's own rows: its one init row
                rows = plan.extras.reshape(-1).view(spec.value_dtype).reshape(spec.value_shape)
                score = self._split(columns, False)[1]
            else:
                template = torch.empty(spec.value_shape, dtype=spec.value_dtype)
                rows, score = repeat_extras(plan, template), self._split(columns, False)[1]
            return list(local.find_or_insert(bits, init=rows, scores=score, unique=unique))
        # the header carries a scalar init row, sized by the spec on every rank (a rank with
        # rows of init, or a refused batch, sends zeros there): one header size for all
        kind, (values, found) = self._call("find_or_insert", check, apply,
                                           options=self._scored(int(per_row_given) + 1, scores,
                                                                unique),
                                           extra_bytes=spec.value_bytes)
        return _arrays.to_kind(values, kind), _arrays.to_kind(found, kind)

    # --- reads and removal -------------------------------------------------------------------
    def find(self, keys: Any, *, default: Any = 0,
             update_scores: bool = False) -> tuple[Any, Any]:
        """Each key's value (``default`` where absent) and a found mask; ``update_scores``
        touches found keys' scores (every rank must pass the same, checked). Collective."""
        local, spec = self._local, self._local.spec
        alone = self.world_size == 1
        row = None

        def check() -> Checked:
            nonlocal row
            bits, kind = self._keys(keys)
            row = local._default(default)  # the single cache's check (and its row, kept)
            return bits, kind, [], None

        def apply(bits, _, plan) -> list[torch.Tensor]:
            # alone, the rows are the caller's own: its default goes in as they are found
            return list(local.find(bits, default=row if alone else 0,
                                   update_scores=update_scores))
        kind, (values, found) = self._call("find", check, apply,
                                           options=int(bool(update_scores)) + 1)
        if not alone and not fills_zero(default):  # the owners left missing rows zero
            shape = (-1,) + (1,) * len(spec.value_shape)
            values = _arrays.select(found.view(shape), values, row)
        return _arrays.to_kind(values, kind), _arrays.to_kind(found, kind)

    def contains(self, keys: Any) -> Any:
        """True where the key is in the cache. Collective."""
        kind, (found,) = self._call("contains", lambda: (*self._keys(keys), [], None),
                                    lambda bits, _, plan: [self._local.contains(bits)])
        return _arrays.to_kind(found, kind)

    def erase(self, keys: Any) -> Any:
        """Remove each key; True on the row that removed it. Collective."""
        kind, (erased,) = self._call("erase", lambda: (*self._keys(keys), [], None),
                                     lambda bits, _, plan: [self._local.erase(bits)])
        return _arrays.to_kind(erased, kind)

    def merge_from(self, source: Any) -> None:
        """Every entry of this rank's ``source`` (a CacheMap, the path of a saved one, or a
        tuple ``(keys, values, scores)``) into its owner's shard with its own value and score,
        as :meth:`CacheMap.merge_from` does: a checkpoint of any layout (one cache, or shards
        of another number of ranks, each rank passing its part) restored into this one.
        Collective: every rank passes a source (an empty one too).

        Example:
            >>> import torch
            >>> import gpuhash as gh
            >>> with gh.distributed.single_process_group():
            ...     c = gh.distributed.ShardedCacheMap(key_dtype=torch.int64,
            ...         value_dtype=torch.float32, capacity=256)
            ...     c.merge_from((torch.tensor([5, 6]), torch.ones(2), torch.tensor([9, 3])))
            ...     print(sorted(zip(*[t.tolist() for t in c.export()[::2]])))
            [(5, 9), (6, 3)]
        """
        if isinstance(source, (str, Path)):
            source = CacheMap.load(source, device="cpu")
        if isinstance(source, CacheMap):
            source = source.export()
        if not (isinstance(source, tuple) and len(source) == 3 and source[2] is not None):
            raise TypeError(f"source must be a CacheMap, the path of a saved one or a tuple "
                            f"(keys, values, scores), got {type(source).__name__}")
        keys, values, scores = (t.to(self.device) if isinstance(t, torch.Tensor) else t
                                for t in source)

        def apply(bits, columns, plan) -> list[torch.Tensor]:
            given, score = self._split(columns)
            self._local.merge_from((bits, given, score))
            return [torch.zeros(bits.shape[0], dtype=torch.int8, device=bits.device)]
        self._call("merge_from", lambda: self._rows(keys, values, scores), apply,
                   options=self._scored(1, scores))

    def size_if(self, *, key_mask: int | None = None, key_pattern: int = 0,
                min_score: int | None = None, max_score: int | None = None) -> int:
        """Entries over every shard that pass :meth:`CacheMap.size_if`'s filters (key bits
        under a mask, a score range; every entry with none). Collective: every rank passes
        the same filters; a bad one on any rank raises on all."""
        filters = (key_mask, key_pattern, min_score, max_score)
        return self._over_shards("size_if", filters, lambda: self._local.size_if(
            key_mask=key_mask, key_pattern=key_pattern, min_score=min_score,
            max_score=max_score))

    def erase_if(self, *, key_mask: int | None = None, key_pattern: int = 0,
                 min_score: int | None = None, max_score: int | None = None) -> int:
        """Remove the entries of every shard that pass :meth:`CacheMap.erase_if`'s filters (at
        least one); how many over every shard. Collective, checked on every rank before any
        shard changes.

        Example:
            >>> import torch
            >>> import gpuhash as gh
            >>> with gh.distributed.single_process_group():
            ...     c = gh.distributed.ShardedCacheMap(key_dtype=torch.int64,
            ...         value_dtype=torch.float32, capacity=256, policy="custom")
            ...     _ = c.insert_or_assign(torch.tensor([1, 2]), torch.zeros(2),
            ...                            scores=torch.tensor([10, 20]))
            ...     print(c.erase_if(max_score=15), c.size_if())
            1 1
        """
        filters = (key_mask, key_pattern, min_score, max_score)
        if key_mask is None and min_score is None and max_score is None:
            error: BaseException | None = ValueError(
                "erase_if needs a filter (key_mask, min_score or max_score); clear() on every "
                "rank removes every entry")
        else:
            error = None
        return self._over_shards("erase_if", filters, lambda: self._local.erase_if(
            key_mask=key_mask, key_pattern=key_pattern, min_score=min_score,
            max_score=max_score), error=error)

    def _over_shards(self, what: str, filters: tuple, run, *,
                     error: BaseException | None = None) -> int:
        """``run()`` on every shard once every rank's filters passed their check, and the sum
        of its counts (one all-reduce)."""
        if error is None:
            try:
                self._local._filters(*filters)
            except Exception as caught:  # told to every rank before any shard changes
                error = caught
        self._exchange.agree(error, what)
        total = torch.tensor([run()], dtype=torch.int64, device=self.device)
        dist.all_reduce(total, group=self._group)
        return int(total.item())

    # --- this rank's shard -------------------------------------------------------------------
    def export(self, **options: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This rank's shard's entries: :meth:`CacheMap.export` of ``local``. Local."""
        return self._local.export(**options)

    def set_global_epoch(self, epoch: int) -> None:
        """The epoch of the ``epoch_*`` policies, for this rank's shard: call it on every
        rank. Local."""
        self._local.set_global_epoch(epoch)

    def clear(self) -> None:
        """Empty this rank's shard (call it on every rank to empty the cache). Local."""
        self._local.clear()

    def reserve(self, slots: int) -> None:
        """Grow this rank's shard to ``slots`` slots, up to its ``max_capacity``. Local."""
        self._local.reserve(slots)

    def save(self, path: str | Path) -> None:
        """Write the cache to the folder ``path``: a file a shard and ``manifest.json``
        (distributed/io.py). Collective."""
        _io.save_sharded(self, path)

    @classmethod
    def load(cls, path: str | Path, *, device: str | torch.device | None = None,
             group: Any = None) -> ShardedCacheMap:
        """Read a cache written by :meth:`save`. Onto another number of ranks each rank keeps
        the entries it owns, with their values and scores; a shard is sized to hold its
        share with room to spare (at least the saved shards' capacity), and an entry that
        still finds no room is evicted by score, as any insert. Collective."""
        return _io.load_sharded(cls, path, device=device, group=group)

    # --- the hooks of distributed/io.py ------------------------------------------------------
    def _file_options(self) -> dict:
        return {}

    @classmethod
    def _load_local(cls, file: Path, device: Any, options: dict) -> CacheMap:
        return CacheMap.load(file, device=device)

    @classmethod
    def _empty_like(cls, shard: CacheMap, device: Any, entries: int) -> CacheMap:
        spec = shard.spec
        return CacheMap(key_dtype=spec.key_dtype, value_dtype=spec.value_dtype,
                        value_shape=spec.value_shape,
                        capacity=max(shard.max_capacity, entries), device=device,
                        policy=spec.policy, bucket_slots=spec.bucket_slots, seed=spec.seed)

    @staticmethod
    def _take_owned(shard: CacheMap, local: CacheMap, rank: int, world: int) -> None:
        keys, values, scores = shard.export()
        mine = (owner_of(keys, world) == rank).nonzero().flatten()
        signed = keys.view(torch.int64)
        keys = signed.index_select(0, mine).view(keys.dtype).to(local.device)
        dtype = _arrays.SIGNED_VIEW.get(values.dtype, values.dtype)
        values = values.view(dtype).index_select(0, mine).view(values.dtype).to(local.device)
        scores = scores.view(torch.int64).index_select(0, mine).to(local.device)
        # the entries come in with their saved scores, whatever the policy
        local.merge_from((keys, values, scores))
        # the saved counters: a shard's step and epoch go on from the largest saved
        local._step = max(local._step, shard._step)
        local._epoch = max(local._epoch, shard._epoch)
