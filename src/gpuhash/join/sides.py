"""One side of a join: its key columns, null mask and array kind, checked once at the edge,
and the small helpers every strategy uses on sides."""

from __future__ import annotations

from typing import Any

import torch

from gpuhash.join.keys import check_sides, check_valid, key_columns
from gpuhash.join.plan import HOWS


def check_how(how: Any) -> str:
    """``how``, if it is one of HOWS (``"outer"``, pandas' name, as ``"full"``); else a
    ValueError naming the choices."""
    how = "full" if how == "outer" else how
    if how not in HOWS:
        raise ValueError(f"how must be one of {', '.join(map(repr, HOWS))} (or 'outer', "
                         f"pandas' name for 'full'); got {how!r}")
    return how


class Side:
    """One side's key columns, validity mask and array kind, checked."""

    def __init__(self, keys: Any, name: str, valid: Any, valid_name: str):
        self.columns, self.kind = key_columns(keys, name)
        self.rows = self.columns[0].shape[0]
        self.device = self.columns[0].device
        self.valid = check_valid(valid, self.rows, valid_name, self.device)

    def _mapped(self, change, rows: int | None = None) -> Side:
        """A side whose columns and mask are ``change(tensor)`` of this one's."""
        other = object.__new__(Side)
        other.columns = [change(c) for c in self.columns]
        other.valid = None if self.valid is None else change(self.valid)
        other.rows = self.rows if rows is None else rows
        other.device = other.columns[0].device
        other.kind = self.kind
        return other

    def slice(self, start: int, stop: int) -> Side:
        return self._mapped(lambda t: t[start:stop], stop - start)

    def clone(self) -> Side:
        return self._mapped(torch.clone)

    def to(self, device: torch.device) -> Side:
        return self._mapped(lambda t: t.to(device))

    def null_rows(self) -> torch.Tensor:
        if self.valid is None:
            return torch.zeros(0, dtype=torch.int64, device=self.device)
        return (~self.valid).nonzero().squeeze(1)


def slices(probe: Side, chunk_rows: int | None):
    """(first row, part) of ``probe`` ``chunk_rows`` at a time (all at once when None)."""
    if not chunk_rows:
        yield 0, probe
        return
    for start in range(0, probe.rows, chunk_rows):
        yield start, probe.slice(start, min(start + chunk_rows, probe.rows))


def cross(left_rows: int, right_rows: int, device: torch.device):
    left = torch.arange(left_rows, device=device).repeat_interleave(right_rows)
    right = torch.arange(right_rows, device=device).repeat(left_rows)
    return left, right


def sides(left_keys, right_keys, left_valid, right_valid) -> tuple[Side, Side]:
    left = Side(left_keys, "left_keys", left_valid, "left_valid")
    right = Side(right_keys, "right_keys", right_valid, "right_valid")
    check_sides(left.columns, right.columns)
    return left, right


def key_bytes(left: Side, right: Side) -> int:
    """The table key's likely width: 4 for one column of at most 32 bits (codes usually fit
    32 bits whenever the build side's range does; the planner only needs an estimate)."""
    narrow = all(c.element_size() <= 4 for c in left.columns + right.columns)
    return 4 if narrow and len(left.columns) == 1 else 8
