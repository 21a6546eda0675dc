"""A join's build side as an array indexed by key, where its keys allow one: one 32-bit key
column whose values span at most DENSE_SPAN times its rows (dense integer ids), on the CPU.

A probe row then reads one entry at ``key - low`` instead of walking a hash bucket (DuckDB
calls this a perfect hash join). Distinct build keys keep each key's build row in the array
(-1 where none); repeated keys keep the rows sorted by key and where each key's rows start,
all in 4-byte entries when the build has fewer than 2**31 rows. The same interface as the
hash table (join/build.py: RowTable): ``pairs``, ``matched``, ``unique`` and ``encoder``, so
every strategy and ``how`` works unchanged. CPU only: sizing the array needs the keys' range, a
host synchronisation on a GPU beside the one a join may make.

Example:
    >>> import torch
    >>> from gpuhash.join.keys import Direct32
    >>> keys = torch.arange(5000, dtype=torch.int32) * 2  # 5,000 rows over 9,999 values
    >>> table = DenseTable.build(Direct32(torch.int32), [keys], None, 5000,
    ...                          torch.device("cpu"))
    >>> probe, build = table.pairs([torch.tensor([4, 5, 9998], dtype=torch.int32)], None)
    >>> probe.tolist(), build.tolist()
    ([0, 2], [2, 4999])
"""

from __future__ import annotations

import torch

from gpuhash.join.keys import Direct32, canonical

# the key range at most this many times the build's non-null rows: distinct keys then take
# at most the hash table's bytes (4-byte rows a key against 16 bytes a row at load 0.5), which
# is what the planner's memory budget counts
DENSE_SPAN = 2
DENSE_MIN_ROWS = 4096  # smaller build sides: the hash table costs as little


class DenseTable:
    """Build rows by key offset (see the module docstring)."""

    def __init__(self, encoder, low: int, span: int, rows: int, device: torch.device, *,
                 first: torch.Tensor | None, starts: torch.Tensor | None,
                 ordered_rows: torch.Tensor | None):
        self.encoder, self.low, self.span, self.rows, self.device = (
            encoder, low, span, rows, device)
        self._first = first  # distinct keys: the build row of each offset, -1 where none
        # repeated keys: the rows sorted by key, offset o's from starts[o] to starts[o + 1]
        self._starts, self._ordered_rows = starts, ordered_rows

    @classmethod
    def build(cls, encoder, columns: list[torch.Tensor], valid: torch.Tensor | None, rows: int,
              device: torch.device) -> DenseTable | None:
        """The array for these build keys, or None where they do not suit one (not one
        32-bit column on the CPU, too few rows, or a range past DENSE_SPAN times the rows)."""
        if (device.type != "cpu" or not isinstance(encoder, Direct32)
                or rows < DENSE_MIN_ROWS):
            return None
        values = canonical(columns[0])
        build_rows = None if valid is None else valid.nonzero().squeeze(1)
        if build_rows is not None:
            values = values.index_select(0, build_rows)
        if values.shape[0] < DENSE_MIN_ROWS:
            return None
        low, high = (int(v) for v in torch.aminmax(values))
        span = high - low + 1
        if span > DENSE_SPAN * values.shape[0]:
            return None
        if build_rows is None:
            build_rows = torch.arange(rows)
        offset = values - low
        row_type = torch.int32 if rows < 2**31 else torch.int64
        first = torch.full((span,), -1, dtype=row_type)
        first.index_copy_(0, offset, build_rows.to(row_type))
        if bool((first.index_select(0, offset) == build_rows).all()):  # no key repeats
            return cls(encoder, low, span, rows, device, first=first, starts=None,
                       ordered_rows=None)
        del first
        starts = torch.zeros(span + 1, dtype=row_type)  # 4-byte entries: under the table's
        torch.cumsum(torch.bincount(offset, minlength=span), 0, out=starts[1:])
        order = torch.argsort(offset, stable=True)
        return cls(encoder, low, span, rows, device, first=None, starts=starts,
                   ordered_rows=build_rows.index_select(0, order).to(row_type))

    def _counts_at(self, offset: torch.Tensor) -> torch.Tensor:
        """Build rows holding each offset's key (repeated keys), int64."""
        after = self._starts.index_select(0, offset + 1).to(torch.int64)
        return after.sub_(self._starts.index_select(0, offset))

    def _offsets_of(self, columns: list[torch.Tensor], valid: torch.Tensor | None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each probe row's offset into the array (0 where it has none) and whether it has
        one: a non-null key within the build's range."""
        offset = canonical(columns[0]) - self.low
        inside = (offset >= 0) & (offset < self.span)
        if valid is not None:
            inside &= valid
        return torch.where(inside, offset, 0), inside

    def pairs(self, columns: list[torch.Tensor], valid: torch.Tensor | None, *,
              keep_unmatched: bool = False, build_hit: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """(probe row, build row) of every match, plus (row, -1) for each probe row without
        one when ``keep_unmatched``; marks ``build_hit`` (as the hash table's)."""
        offset, inside = self._offsets_of(columns, valid)
        if self._first is not None:
            found = self._first.index_select(0, offset)
            hit = inside & (found >= 0)
            probe = hit.nonzero().squeeze(1)
            build = found.index_select(0, probe).to(torch.int64)
        else:
            count = self._counts_at(offset).mul_(inside)
            hit = count > 0
            probe = torch.repeat_interleave(torch.arange(count.shape[0]), count)
            # a pair's place among its probe row's matches, added to the key's first position
            # (in place: the output-sized temporaries are what a many-to-many join holds)
            place = torch.arange(probe.shape[0])
            place.sub_((torch.cumsum(count, 0).sub_(count)).index_select(0, probe))
            del count
            place.add_(self._starts.index_select(0, offset.index_select(0, probe)))
            build = self._ordered_rows.index_select(0, place).to(torch.int64)
            del place
        if build_hit is not None:
            build_hit.index_fill_(0, build, 1)
        if keep_unmatched:
            missing = (~hit).nonzero().squeeze(1)
            probe = torch.cat([probe, missing])
            build = torch.cat([build, torch.full_like(missing, -1)])
        return probe, build

    def pairs_and_unmatched(self, columns: list[torch.Tensor], valid: torch.Tensor | None, *,
                            keep_unmatched: bool, build_hit: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``pairs``, and the build rows no probe marked in ``build_hit`` (as the hash
        table's)."""
        probe, build = self.pairs(columns, valid, keep_unmatched=keep_unmatched,
                                  build_hit=build_hit)
        return probe, build, (build_hit == 0).nonzero().squeeze(1)

    def matched(self, columns: list[torch.Tensor], valid: torch.Tensor | None) -> torch.Tensor:
        """Whether each probe row has a match (bool)."""
        offset, inside = self._offsets_of(columns, valid)
        if self._first is not None:
            return inside & (self._first.index_select(0, offset) >= 0)
        return inside & (self._counts_at(offset) > 0)

    def picked(self, columns: list[torch.Tensor], valid: torch.Tensor | None, how: str
               ) -> torch.Tensor:
        """The probe rows with a match (``how`` "semi") or without one ("anti")."""
        hit = self.matched(columns, valid)
        return (hit if how == "semi" else ~hit).nonzero().squeeze(1)

    def hand_back(self) -> None:
        """Nothing to keep: the hash table's pool (join/pool.py) holds GPU tables only."""

    def unique(self) -> bool:
        """True when no non-null build key repeats."""
        return self._first is not None
