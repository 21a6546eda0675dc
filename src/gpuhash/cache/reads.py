"""CacheMap's reads: values or slots by key, and whether keys are present; a read may
touch the scores of the keys it finds (``update_scores``), as a write would."""

from __future__ import annotations

from typing import Any

from gpuhash._common import arrays as _arrays
from gpuhash.cache.whole import CacheWhole


class CacheReads(CacheWhole):
    """The key lookups of CacheMap (the class users see)."""

    # --- reads ----------------------------------------------------------------------------
    def _lookup(self, keys: Any, *, copy: bool, default: Any, update_scores: bool,
                stream: Any):
        # a 'custom' score comes from the caller's scores= alone: a touch without one leaves
        # it (the policy's rule would write 0, making the entry the first to go)
        update_scores = update_scores and self.policy != "custom"

        def work():
            bits, kind = self._keys(keys)
            engine, state = self._engine, self._state
            row = self._default(default) if copy else None
            update, step = None, 0
            if update_scores:
                update, step = engine.last_rows(state, bits), self._tick()
            out, index, found = engine.lookup(state, bits, update=update, step=step,
                                              epoch=self._epoch, default=row)
            return kind, out, index, found
        return self._run(work, writes=update_scores, stream=stream)

    def find(self, keys: Any, *, default: Any = 0, update_scores: bool = False,
             stream: Any = None) -> tuple[Any, Any]:
        """Each key's value (``default`` where absent) and a found mask; with
        ``update_scores`` a found key's score is touched as a write would (not under policy
        ``custom``, whose scores come from the caller's ``scores=`` alone).

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1]), torch.tensor([3.0]))
            >>> c.find(torch.tensor([1, 2]), default=-1.0)[0].tolist()
            [3.0, -1.0]
        """
        kind, out, _, found = self._lookup(keys, copy=True, default=default,
                                           update_scores=update_scores, stream=stream)
        return _arrays.to_kind(out, kind), _arrays.to_kind(found, kind)

    def find_index(self, keys: Any, *, update_scores: bool = False,
                   stream: Any = None) -> tuple[Any, Any]:
        """Each key's slot (its row of ``values``; -1 where absent) and a found mask.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1]), torch.tensor([3.0]))
            >>> index, found = c.find_index(torch.tensor([1]))
            >>> c.values[index].tolist()
            [3.0]
        """
        kind, _, index, found = self._lookup(keys, copy=False, default=None,
                                             update_scores=update_scores, stream=stream)
        return _arrays.to_kind(index, kind), _arrays.to_kind(found, kind)

    def contains(self, keys: Any, *, stream: Any = None) -> Any:
        """True where the key is in the cache.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1]), torch.tensor([3.0]))
            >>> c.contains(torch.tensor([1, 2])).tolist()
            [True, False]
        """
        kind, _, _, found = self._lookup(keys, copy=False, default=None, update_scores=False,
                                         stream=stream)
        return _arrays.to_kind(found, kind)
