"""What a CacheMap does with the whole cache rather than with keys: erase by score, export,
clear, the epoch, and moving it to another device or a file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from gpuhash._common.arrays import resolve_device as _resolve_device
from gpuhash.cache.base import _SIGN, CacheCore, _as_u64_int
from gpuhash.cache.format import EMPTY_KEY, LOCKED_KEY, copy_cache
from gpuhash.cache.io import load_cache, save_cache

if TYPE_CHECKING:
    from gpuhash.cache.api import CacheMap


class CacheWhole(CacheCore):
    """The whole-cache operations of CacheMap (the class users see)."""

    def _live(self) -> torch.Tensor:
        keys = self._state.keys
        return (keys != EMPTY_KEY) & (keys != LOCKED_KEY)

    def erase_if(self, *, max_score: int, stream: Any = None) -> int:
        """Remove every entry whose score is at most ``max_score``; returns how many
        (synchronises).

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64,
            ...              policy="custom")
            >>> _ = c.insert_or_assign(torch.tensor([1, 2]), torch.zeros(2),
            ...                        scores=torch.tensor([10, 20]))
            >>> c.erase_if(max_score=15), len(c)
            (1, 1)
        """
        limit = _as_u64_int(max_score, "max_score")

        def work():
            state = self._state
            doomed = self._live() & ((state.scores ^ _SIGN) <= (limit - 2**63))
            state.keys.masked_fill_(doomed, EMPTY_KEY)
            state.digests.masked_fill_(doomed, 0)
            state.scores.masked_fill_(doomed, 0)
            self._engine.refresh(state)
            gone = doomed.sum()
            state.counts[0] -= gone
            return int(gone)
        return self._run(work, writes=True, stream=stream)

    def export(self, *, offset: int = 0, count: int | None = None, min_score: int | None = None,
               stream: Any = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The live entries among slots ``[offset, offset + count)`` (all by default) whose
        score is at least ``min_score``: (keys, values, scores), in slot order.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1]), torch.tensor([3.0]))
            >>> keys, values, scores = c.export()
            >>> keys.tolist(), values.tolist()
            ([1], [3.0])
        """
        with self._order.lock:  # the capacity and the export of one state
            return self._export(offset, count, min_score, stream)

    def _export(self, offset, count, min_score, stream):
        slots = self.capacity
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= slots:
            raise ValueError(f"offset must be an int in [0, {slots}], got {offset!r}")
        if count is None:
            count = slots - offset
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count must be a non-negative int, got {count!r}")
        floor = None if min_score is None else _as_u64_int(min_score, "min_score")

        def work():
            state = self._state
            part = slice(offset, min(slots, offset + count))
            keep = self._live()[part]
            if floor is not None:
                keep &= (state.scores[part] ^ _SIGN) >= floor - 2**63
            at = keep.nonzero().flatten() + part.start
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
        self._epoch = epoch

    def clear(self, *, stream: Any = None) -> None:
        """Remove every entry (the capacity stays)."""
        def work():
            state = self._state
            state.keys.fill_(EMPTY_KEY)
            state.digests.zero_()
            state.scores.zero_()
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
            return other

    def save(self, path: Any) -> None:
        """Write the cache to ``path`` (its bytes, the step counter, the epoch and
        ``max_capacity``)."""
        with self._order.lock:
            if self._device.type == "cuda":  # every stream: the last write may be on another
                torch.cuda.synchronize(self._device)
            save_cache(self._state, path, step=self._step, epoch=self._epoch,
                       max_slots=self._max_slots)

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

