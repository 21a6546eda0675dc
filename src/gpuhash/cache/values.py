"""The value rows of a CacheMap whose rows are split between GPU and pinned host memory
(``max_hbm_bytes``), read and written by slot as one array would be.

Such a cache's ``values`` cannot be one torch tensor (torch has no tensor spanning two kinds of
memory), so ``CacheMap.values`` returns this instead; indexing it with the slots that
``find_index`` gives reads or writes the rows wherever they live, with the kernels the cache's
operations use (the rows in host memory cross the host link, nothing else moves).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from gpuhash.cache.base import CacheCore


class SplitValues:
    """The value rows of a cache, indexed by slot: ``rows = v[index]`` gathers, ``v[index] =
    rows`` scatters (distinct slots; a slot of -1 reads zeros and is skipped on write).
    ``hbm`` holds the rows of slots ``[0, hbm_slots)``, ``host`` (pinned) the rest.

    Example:
        >>> import torch
        >>> from gpuhash import CacheMap
        >>> c = CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(4,),
        ...              capacity=256, device="cuda", max_hbm_bytes=2048)
        >>> c.values.hbm_slots  # one bucket: 128 rows of 16 bytes in GPU memory
        128
        >>> keys = torch.arange(100, device="cuda")
        >>> _ = c.insert_or_assign(keys, torch.ones(100, 4, device="cuda"))
        >>> index, found = c.find_index(keys)
        >>> c.values[index] = c.values[index] * 2
        >>> bool((c.find(keys)[0] == 2).all())
        True
    """

    def __init__(self, cache: CacheCore):
        self._cache = cache

    @property
    def hbm(self) -> torch.Tensor:
        """The rows in GPU memory (slots ``[0, hbm_slots)``), a view."""
        return self._cache._state.values

    @property
    def host(self) -> torch.Tensor | None:
        """The rows in pinned host memory (slots from ``hbm_slots`` on), a view."""
        return self._cache._state.host_values

    @property
    def hbm_slots(self) -> int:
        return self._cache._state.hbm_slots

    @property
    def shape(self) -> torch.Size:
        spec = self._cache._state.spec
        return torch.Size((spec.capacity, *spec.value_shape))

    @property
    def dtype(self) -> torch.dtype:
        return self._cache._state.spec.value_dtype

    @property
    def device(self) -> torch.device:
        return self._cache.device

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return (f"SplitValues(shape={tuple(self.shape)}, dtype={self.dtype}, "
                f"hbm_slots={self.hbm_slots}, device={self.device})")

    def _slots(self, index: Any) -> torch.Tensor:
        if isinstance(index, int) and not isinstance(index, bool):
            index = torch.tensor([index], device=self.device)
        if not isinstance(index, torch.Tensor) or index.dim() != 1 or (
                index.dtype not in (torch.int64, torch.int32)):
            raise TypeError(f"index must be a 1-D int64 tensor of slots (find_index), got "
                            f"{index!r:.80}")
        if index.device != self.device:
            raise ValueError(f"index is on {index.device} but the cache is on {self.device}")
        return index.to(torch.int64).contiguous()

    def __getitem__(self, index: Any) -> torch.Tensor:
        slots = self._slots(index)
        cache = self._cache
        return cache._run(lambda: cache._engine.gather(cache._state, slots), writes=False,
                          stream=None)

    def __setitem__(self, index: Any, rows: Any) -> None:
        slots = self._slots(index)
        cache = self._cache
        spec = cache._state.spec
        if not isinstance(rows, torch.Tensor):
            rows = torch.as_tensor(rows, dtype=spec.value_dtype, device=self.device)
        if rows.device != self.device:
            raise ValueError(f"rows is on {rows.device} but the cache is on {self.device}")
        want = (slots.shape[0], *spec.value_shape)
        try:
            rows = rows.to(spec.value_dtype).expand(want).contiguous()
        except RuntimeError as exc:
            raise ValueError(f"rows of shape {tuple(rows.shape)} do not fit {want}") from exc
        cache._run(lambda: cache._engine.scatter(cache._state, slots, rows), writes=True,
                   stream=None)

    def to_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        """Every row in slot order as one tensor on ``device`` (the cache's by default): a
        copy."""
        cache = self._cache
        return cache._run(lambda: cache._state.all_values(device), writes=False, stream=None)
