"""The table's engine protocol: the same small set of operations over the table format
(table/format.py), one module per kind of device. ``Engine`` declares that set;
table/cpu/engine.py and table/cuda/engine.py each satisfy it as a module, and a test checks
both against it.

Engines assume valid input and enough free slots (the table layer guarantees both), and they
alone change a table's counters (``TableState.counts``): the table layer only reads them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from gpuhash.table.format import TableSpec, TableState


@runtime_checkable
class Engine(Protocol):
    """The operations every engine offers, with the same names and signatures."""

    def empty_state(self, spec: TableSpec, device: torch.device, *, spare_words: int = 0,
                    filled: bool = True) -> TableState:
        """A table of ``spec`` with no entries on ``device`` (table/format.py: empty_state's
        bytes), and ``spare_words`` zero words for the caller. Not ``filled``: an engine may
        leave the filling to the join build that comes next (the join engine's build)."""

    def last_rows(self, state: TableState, keys: torch.Tensor) -> torch.Tensor:
        """True on the last row of each distinct key of a batch (batch order)."""

    def insert(self, state: TableState, keys: torch.Tensor, values: torch.Tensor | None, *,
               duplicates: str = "last", last: torch.Tensor | None = None) -> torch.Tensor:
        """Insert or assign each row; True where the row added a new key. ``duplicates``:
        "last" (a repeated key's last row wins and is the one marked), "any" (one row wins) or
        "distinct" (the caller guarantees no key repeats). ``last``: the batch's last_rows,
        when the caller has them already (an engine that settles rows in order needs none)."""

    def insert_or_apply(self, state: TableState, keys: torch.Tensor, values: torch.Tensor,
                        op: str, slots: torch.Tensor | None = None) -> torch.Tensor:
        """Combine each row's value into its key's with ``op``; True on one row per new key.
        ``slots``: filled with each row's slot row, as find_index gives (None: not wanted)."""

    def find(self, state: TableState, keys: torch.Tensor,
             default: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (``default`` where missing) and a found mask."""

    def find_index(self, state: TableState,
                   keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Slot row of each key (-1 where missing) and a found mask."""

    def contains(self, state: TableState, keys: torch.Tensor) -> torch.Tensor:
        """True where the key is in the table."""

    def erase(self, state: TableState, keys: torch.Tensor) -> torch.Tensor:
        """Remove each key; True on one row per removed key."""

    def rehash(self, source: TableState, target: TableState) -> None:
        """Insert every live entry of ``source`` into the empty ``target``."""

    def multi_insert(self, state: TableState, keys: torch.Tensor,
                     values: torch.Tensor | None) -> None:
        """Add every row as its own entry (a multimap)."""

    def multi_count(self, state: TableState, keys: torch.Tensor) -> torch.Tensor:
        """Entries holding each key."""

    def multi_find_all(self, state: TableState,
                       keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(query row, slot) of every match, grouped by query row."""

    def multi_erase(self, state: TableState, keys: torch.Tensor) -> torch.Tensor:
        """Remove every copy of each key; copies removed by each row."""

    def stashed(self, state: TableState,
                count: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Entries a failed placement displaced and kept aside (key words, value bytes)."""
