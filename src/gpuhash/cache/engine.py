"""The cache's engine protocol: the operations over the cache format (cache/format.py) that
cache/cpu/engine.py and cache/cuda/engine.py each offer as a module, with the same names and
parameters (a test checks both against it). Engines assume valid input: the API layer
(cache/api.py, cache/base.py) checks everything first and orders the calls across streams.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from gpuhash.cache.format import CacheState


@runtime_checkable
class CacheEngine(Protocol):
    """The cache operations every engine offers."""

    def refresh(self, state: CacheState) -> None:
        """Make what the engine derives from the key words (the CUDA engine: its index from
        key to slot) after the keys changed other than through ``write`` / ``erase``."""

    def last_rows(self, state: CacheState, keys: torch.Tensor, *,
                  first: bool = False) -> torch.Tensor:
        """True on the last row (``first``: the first) of each distinct key (batch order)."""

    def write(self, state: CacheState, mode: int, keys: torch.Tensor, acting: torch.Tensor, *,
              values: torch.Tensor | None, value_stride: int, scores: torch.Tensor | None,
              accumulate: torch.Tensor | None, step: int, epoch: int, evict_capacity: int,
              out: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple | None]:
        """One write per acting row in ``mode`` (constants.WRITE_MODES): status (int8), slot
        (int64, -1 where none) and found per row, and with ``evict_capacity`` the evicted
        entries (keys, values, scores, count); with ``out``, each acting row's value as it
        found it."""

    def lookup(self, state: CacheState, keys: torch.Tensor, *, only: torch.Tensor | None = None,
               update: torch.Tensor | None = None, step: int = 0, epoch: int = 0,
               default: torch.Tensor | None = None, default_stride: int = 0,
               index: torch.Tensor | None = None, found: torch.Tensor | None = None,
               out: torch.Tensor | None = None, verify: torch.Tensor | None = None
               ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """Values (``default``'s rows where absent) when ``default`` is given, slot and found
        per row; rows with ``update`` set touch their key's score."""

    def erase(self, state: CacheState, keys: torch.Tensor) -> torch.Tensor:
        """Free each key's slot; True on the row that did."""

    def gather(self, state: CacheState, index: torch.Tensor) -> torch.Tensor:
        """The value rows of slots ``index`` (int64; -1: a row of zeros)."""

    def scatter(self, state: CacheState, index: torch.Tensor, rows: torch.Tensor) -> None:
        """Write row r of ``rows`` to the value of slot ``index[r]`` (distinct slots; -1:
        skipped)."""
