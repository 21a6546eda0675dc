"""The join's engine protocol: a build side stored in a MultiMap's table by key code, and its
probe. join/cpu/engine.py and join/cuda/engine.py each satisfy it as a module (a test checks
both); ``engine_for`` picks one by device, importing it on first use.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from gpuhash.table.format import TableState


@runtime_checkable
class JoinEngine(Protocol):
    """The join operations every engine offers, with the same names and signatures."""

    def build(self, state: TableState, keys: torch.Tensor,
                         valid: torch.Tensor | None, shape: int, low: int, high: int, *,
                         groups: torch.Tensor, direct: torch.Tensor | None = None,
                         ranked: torch.Tensor | None = None) -> None:
        """A join's build side: every usable row of a key column stored by its code, once a
        code: its row number, or for a code of several rows ~start of their group in
        ``state.join_groups[0]`` (the row count at start, the rows after it); a non-null row
        outside the code range is counted as unplaced (counts[2]). ``groups`` (zeroed words,
        join/build.py: group_words): groups[0] gets the number of rows that repeat a code.
        ``direct`` (zeroed): a direct array tried first (with ``ranked``, the bits of a
        ranked array: join/kernels/join_build.cuh); where it holds every row the table stays
        empty."""

    def probe(self, state: TableState, keys: torch.Tensor,
                         valid: torch.Tensor | None, shape: int, low: int, high: int, *,
                         keep_unmatched: bool = False, build_hit: torch.Tensor | None = None,
                         probe_hit: torch.Tensor | None = None,
                         direct: torch.Tensor | None = None, ranked: torch.Tensor | None = None,
                         one_row: str | None = None, unmatched_build: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None]:
        """(probe row, build row) of every match of a key column (and (row, -1) for rows
        without one when ``keep_unmatched``; with ``one_row`` "semi" / "anti" instead one
        (row, -1) for each row that has / lacks a match); marks ``build_hit``; with
        ``probe_hit`` only that mask; ``direct`` (and ``ranked``): the build's direct or
        ranked array, read in place of the table where it holds the build side. Then the
        build rows the table lacks (the result is complete only when it is zero), and with
        ``unmatched_build`` the build rows ``build_hit`` leaves unmarked (else None), learnt
        in the same one synchronisation."""


_ENGINES: dict[str, Any] = {}  # device type -> engine module


def engine_for(device: torch.device):
    """The join engine module of ``device``'s type."""
    engine = _ENGINES.get(device.type)
    if engine is None:
        if device.type == "cuda":
            from gpuhash.join.cuda import engine
        else:
            from gpuhash.join.cpu import engine
        _ENGINES[device.type] = engine
    return engine
