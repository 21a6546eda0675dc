"""CacheMap's locks: entries pinned to their slots, so that a slot number a caller holds
(a prefetching pipeline's, say) stays the entry's across later writes.

A locked entry is never moved to its other bucket and never evicted (cache/format.py); its
value and score may still be written, in place. When every slot of a key's two buckets is
locked, a write of that key is refused, and reported so like any other refusal. Erasing an
entry (``erase``, ``erase_if``, ``clear``) unlocks it. While any entry is locked the cache
does not grow: a growable cache's writes evict or refuse as at full size, and ``reserve``
raises. Locks belong to this cache object: ``save``, ``to`` and ``merge_from`` carry none.
"""

from __future__ import annotations

from typing import Any

import torch

from gpuhash._common import arrays as _arrays
from gpuhash.cache.format import PINNED
from gpuhash.cache.reads import CacheReads


def _or_scratch(state, index: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """``index`` where ``chosen``, else the pins' scratch byte (past every slot): a write
    through it needs no host synchronisation to leave the other rows out."""
    return torch.where(chosen, index, state.pins.shape[0] - 1)


class CacheLocks(CacheReads):
    """lock_keys / unlock_keys of CacheMap (the class users see)."""

    def lock_keys(self, keys: Any, *, stream: Any = None) -> tuple[Any, Any]:
        """Lock each present key's entry in its slot; returns each key's slot (its row of
        ``values``; -1 where absent) and a mask of the keys now locked. Locking a locked key
        again changes nothing; an absent key is not inserted.

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1]), torch.tensor([3.0]))
            >>> index, locked = c.lock_keys(torch.tensor([1, 2]))
            >>> locked.tolist(), c.values[index[:1]].tolist()
            ([True, False], [3.0])
        """
        def work():
            bits, kind = self._keys(keys)
            state = self._state
            _, index, found = self._engine.lookup(state, bits)
            state.caches[PINNED] = True
            state.pins[_or_scratch(state, index, found)] = 1
            return kind, index, found
        kind, index, found = self._run(work, writes=True, stream=stream)
        return _arrays.to_kind(index, kind), _arrays.to_kind(found, kind)

    def unlock_keys(self, keys: Any, *, stream: Any = None) -> Any:
        """Unlock each key's entry; True on the rows whose key was present and locked
        (a key given twice: both rows).

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1, 2]), torch.zeros(2))
            >>> _ = c.lock_keys(torch.tensor([1]))
            >>> c.unlock_keys(torch.tensor([1, 2, 3])).tolist()
            [True, False, False]
        """
        def work():
            bits, kind = self._keys(keys)
            state = self._state
            _, index, found = self._engine.lookup(state, bits)
            was = found & (state.pins[index.clamp(min=0)] != 0)
            state.pins[_or_scratch(state, index, was)] = 0
            return kind, was
        kind, was = self._run(work, writes=True, stream=stream)
        return _arrays.to_kind(was, kind)

    def locked_count(self, *, stream: Any = None) -> int:
        """How many entries are locked (synchronises).

        Example:
            >>> import torch
            >>> from gpuhash import CacheMap
            >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=64)
            >>> _ = c.insert_or_assign(torch.tensor([1, 2]), torch.zeros(2))
            >>> _ = c.lock_keys(torch.tensor([1, 2]))
            >>> c.locked_count()
            2
        """
        def work():
            count = int(self._state.pins[:-1].sum())
            if not count:  # the kernels may skip the pins again
                self._state.caches.pop(PINNED, None)
            return count
        return self._run(work, writes=False, stream=stream)
