"""What a CacheMap does with the whole cache rather than with keys: erase, count and export
the entries a filter chooses (key bits under a mask, a score range), clear, the epoch, and
moving it to another device or a file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from gpuhash._common.arrays import resolve_device as _resolve_device
from gpuhash.cache.base import _SIGN, UPSERT, CacheCore, _as_u64_int
from gpuhash.cache.format import EMPTY_KEY, LOCKED_KEY, PINNED, copy_cache
from gpuhash.cache.io import load_cache, save_cache

if TYPE_CHECKING:
    from gpuhash.cache.api import CacheMap


def _as_int64_bits(value: int) -> int:
    """A uint64 as the int64 of the same bits (the key words' dtype)."""
    return value - 2**64 if value >= 2**63 else value


class CacheWhole(CacheCore):
    """The whole-cache operations of CacheMap (the class users see)."""

    def _live(self) -> torch.Tensor:
        keys = self._state.keys
        return (keys != EMPTY_KEY) & (keys != LOCKED_KEY)

    def _chosen(self, part: slice, key_mask: int | None, key_pattern: int,
                min_score: int | None, max_score: int | None) -> torch.Tensor:
        """The live slots of ``part`` that pass the filters (checked by ``_filters``), as a
        mask made on the cache's device: the table never leaves it."""
        state = self._state
        keep = self._live()[part]
        if key_mask is not None:
            mask, pattern = (_as_int64_bits(v) for v in (key_mask, key_pattern))
            keep &= (state.keys[part] & mask) == (pattern & mask)
        if min_score is not None:
            keep &= (state.scores[part] ^ _SIGN) >= min_score - 2**63
        if max_score is not None:
            keep &= (state.scores[part] ^ _SIGN) <= max_score - 2**63
        return keep

    @staticmethod
    def _filters(key_mask: int | None, key_pattern: int, min_score: int | None,
                 max_score: int | None) -> tuple:
        # key bits as int64 keys give them (negative) or as uint64 (at least 2**63): the same
        for name, bits in (("key_mask", key_mask), ("key_pattern", key_pattern)):
            if bits is not None and (isinstance(bits, bool) or not isinstance(bits, int)
                                     or not -2**63 <= bits < 2**64):
                raise ValueError(f"{name} must be an int of 64 bits (in [-2**63, 2**64)), got "
                                 f"{bits!r}")
        key_mask = None if key_mask is None else key_mask % 2**64
        key_pattern %= 2**64
        if key_mask is None and key_pattern != 0:
            raise ValueError(f"key_pattern={key_pattern} needs key_mask, the key bits it "
                             f"compares (key_mask=2**64 - 1 compares whole keys)")
        for name, bound in (("min_score", min_score), ("max_score", max_score)):
            if bound is not None:
                _as_u64_int(bound, name)
        return key_mask, key_pattern, min_score, max_score

    def erase_if(self, *, key_mask: int | None = None, key_pattern: int = 0,
                 min_score: int | None = None, max_score: int | None = None,
                 stream: Any = None) -> int:
        """Remove every entry whose key has ``key_pattern`` under ``key_mask`` (``key & mask ==
        pattern & mask``: a table id in the high bits, say) and whose score is in
        ``[min_score, max_score]``; at least one filter is required. Runs on the cache's
        device without copying the table out; returns how many (synchronises).

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
            ...              policy="custom")
            >>> _ = c.insert_or_assign(torch.tensor([1, 2, 1 << 40]), torch.zeros(3),
            ...                        scores=torch.tensor([10, 20, 30]))
            >>> c.erase_if(max_score=15), len(c)
            (1, 2)
            >>> c.erase_if(key_mask=0xFF << 40, key_pattern=1 << 40), len(c)
            (1, 1)
        """
        filters = self._filters(key_mask, key_pattern, min_score, max_score)
        if key_mask is None and min_score is None and max_score is None:
            raise ValueError("erase_if needs a filter (key_mask, min_score or max_score); "
                             "clear() removes every entry")

        def work():
            state = self._state
            doomed = self._chosen(slice(None), *filters)
            state.keys.masked_fill_(doomed, EMPTY_KEY)
            state.digests.masked_fill_(doomed, 0)
            state.scores.masked_fill_(doomed, 0)
            state.pins[:-1].masked_fill_(doomed, 0)  # an erased entry is unlocked
            self._engine.refresh(state)
            gone = doomed.sum()
            state.counts[0] -= gone
            return int(gone)
        return self._run(work, writes=True, stream=stream)

    def size_if(self, *, key_mask: int | None = None, key_pattern: int = 0,
                min_score: int | None = None, max_score: int | None = None,
                stream: Any = None) -> int:
        """How many entries pass ``erase_if``'s filters (all of them with none), counted on the
        cache's device (synchronises).

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
            ...              policy="custom")
            >>> _ = c.insert_or_assign(torch.tensor([1, 2]), torch.zeros(2),
            ...                        scores=torch.tensor([10, 20]))
            >>> c.size_if(min_score=15), c.size_if()
            (1, 2)
        """
        filters = self._filters(key_mask, key_pattern, min_score, max_score)
        return self._run(lambda: int(self._chosen(slice(None), *filters).sum()), writes=False,
                         stream=stream)

    def export(self, *, offset: int = 0, count: int | None = None, min_score: int | None = None,
               max_score: int | None = None, key_mask: int | None = None, key_pattern: int = 0,
               stream: Any = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The live entries among slots ``[offset, offset + count)`` (all by default) that pass
        ``erase_if``'s filters: (keys, values, scores), in slot order. The filters run where
        the cache is; only the chosen entries are gathered.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1]), torch.tensor([3.0]))
            >>> keys, values, scores = c.export()
            >>> keys.tolist(), values.tolist()
            ([1], [3.0])
        """
        filters = self._filters(key_mask, key_pattern, min_score, max_score)
        with self._order.lock:  # the capacity and the export of one state
            return self._export(offset, count, filters, stream)

    def _export(self, offset, count, filters, stream):
        slots = self.capacity
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= slots:
            raise ValueError(f"offset must be an int in [0, {slots}], got {offset!r}")
        if count is None:
            count = slots - offset
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count must be a non-negative int, got {count!r}")

        def work():
            state = self._state
            part = slice(offset, min(slots, offset + count))
            at = self._chosen(part, *filters).nonzero().flatten() + part.start
            return (self._out_keys(state.keys[at]), self._engine.gather(state, at),
                    state.scores[at].view(torch.uint64))
        return self._run(work, writes=False, stream=stream)

    def set_global_epoch(self, epoch: int) -> None:
        """The epoch the ``epoch_*`` policies write into the high 32 bits of scores.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
            ...              policy="epoch_lru")
            >>> c.set_global_epoch(3)
            >>> _ = c.insert_or_assign(torch.tensor([1]), torch.tensor([0.0]))
            >>> int(c.scores.view(torch.int64).max()) >> 32
            3
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < 2**32:
            raise ValueError(f"epoch must be an int in [0, 2**32), got {epoch!r}")
        with self._order.lock:  # a write in flight reads one epoch
            self._epoch = epoch

    def clear(self, *, stream: Any = None) -> None:
        """Remove every entry, locked ones too (the capacity stays)."""
        def work():
            state = self._state
            state.keys.fill_(EMPTY_KEY)
            state.digests.zero_()
            state.scores.zero_()
            state.pins.zero_()
            state.caches.pop(PINNED, None)
            state.counts.zero_()
            self._engine.refresh(state)
        self._run(work, writes=True, stream=stream)

    # --- moving and files -----------------------------------------------------------------
    def to(self, device: str | torch.device) -> CacheMap:
        """A new cache with the same bytes on ``device`` (this one is unchanged), keeping
        ``max_hbm_bytes``."""
        target = _resolve_device(device)
        # the copy is queued on the current stream, after the cache's last write elsewhere,
        # and recorded as a read there, which a later write on another stream waits for
        with self._order.ordered(None, writes=False):
            other = type(self).__new__(type(self))
            other._adopt(copy_cache(self._state, target, max_hbm_bytes=self._max_hbm_bytes),
                         step=self._step, epoch=self._epoch, max_slots=self._max_slots,
                         max_hbm_bytes=self._max_hbm_bytes)
            other._grow_at = self._grow_at
            return other

    def save(self, path: Any) -> None:
        """Write the cache to ``path`` (its bytes, the step counter, the epoch and
        ``max_capacity``)."""
        with self._order.lock:
            if self._device.type == "cuda":  # every stream: the last write may be on another
                torch.cuda.synchronize(self._device)
            save_cache(self._state, path, step=self._step, epoch=self._epoch,
                       max_slots=self._max_slots)

    def merge_from(self, source: Any, *, chunk_slots: int = 1 << 22,
                   stream: Any = None) -> None:
        """Insert every entry of ``source`` (a CacheMap, the path of a saved one, or a tuple
        ``(keys, values, scores)`` as ``export`` gives) with its value and its own score,
        whatever this cache's policy: a key present here takes the
        source's value and score; where a pair of buckets is full the lowest scores go, as in
        any write. So a checkpoint restores into a cache of another capacity or bucket shape,
        or into one already holding entries (resharding one merges several). The source is
        read ``chunk_slots`` slots at a time; a file is read into host memory.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> a = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
            ...              policy="custom")
            >>> _ = a.insert_or_assign(torch.tensor([1, 2]), torch.ones(2),
            ...                        scores=torch.tensor([5, 6]))
            >>> b = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=256)
            >>> b.merge_from(a)
            >>> sorted(zip(*[t.tolist() for t in b.export()[::2]]))
            [(1, 5), (2, 6)]
        """
        if isinstance(source, tuple) and len(source) == 3:
            keys, values, scores = source
            if scores is None:
                raise ValueError("a (keys, values, scores) source needs its scores: the "
                                 "entries keep them (export gives all three)")
            # keys repeated in the tuple: the last row of each is the entry (the check runs)
            self._write(UPSERT, keys, values, scores=scores, stream=stream, exact_scores=True,
                        tick=False)
            return
        if isinstance(source, (str, Path)):
            source = type(self).load(source, device="cpu")
        if not isinstance(source, CacheWhole):
            raise TypeError(f"source must be a CacheMap, the path of a saved one or a tuple "
                            f"(keys, values, scores), got {type(source).__name__}")
        if isinstance(chunk_slots, bool) or not isinstance(chunk_slots, int) or chunk_slots < 1:
            raise ValueError(f"chunk_slots must be a positive int, got {chunk_slots!r}")
        mine, theirs = self._state.spec, source._state.spec
        for field in ("key_dtype", "value_dtype", "value_shape"):
            if getattr(mine, field) != getattr(theirs, field):
                raise ValueError(f"source has {field}={getattr(theirs, field)} but this cache "
                                 f"{field}={getattr(mine, field)}; merge caches of one kind")
        # a chunk at a time, each read under the source's lock and written under this one's:
        # never both held, so two caches merging each other cannot wait on one another (a
        # source written meanwhile gives each chunk as it is then)
        for offset in range(0, source.capacity, chunk_slots):
            keys, values, scores = source.export(offset=offset, count=chunk_slots)
            if keys.numel():  # a cache's keys are distinct: no repeat check
                self._write(UPSERT, keys.to(self._device), values.to(self._device),
                            scores=scores.to(self._device), stream=stream, unique=True,
                            exact_scores=True, tick=False)

    @classmethod
    def load(cls, path: Any, *, device: str | torch.device = "cpu",
             max_hbm_bytes: int | None = None) -> CacheMap:
        """Read a cache written by ``save``, onto ``device``, its value rows past
        ``max_hbm_bytes`` in host memory. It may grow up to the ``max_capacity`` it was saved
        with (a file of format version 1, which did not record it, cannot grow)."""
        state, step, epoch, max_slots = load_cache(path, _resolve_device(device),
                                                   max_hbm_bytes=max_hbm_bytes)
        cache = cls.__new__(cls)
        cache._adopt(state, step=step, epoch=epoch, max_slots=max_slots,
                     max_hbm_bytes=max_hbm_bytes)
        return cache

