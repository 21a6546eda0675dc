"""What a join found, and the gather maps assembled from it for each ``how``.

Every strategy (one table, chunks, parts, streamed host keys) hands the matching pairs, the
build rows that matched, or for semi / anti the probe rows they return (or, where the probe
cannot pick them, the probe rows' matched mask), to a :class:`_Matches` piece by piece;
``assemble`` turns them into ``(left_rows, right_rows)`` with -1 on the side a row lacks, or
the left rows of semi / anti.

Example:
    >>> import torch
    >>> found = _Matches("left", True, 3, 2, torch.device("cpu"))
    >>> found.add_pairs(torch.tensor([0, 2]), torch.tensor([1, 1]))
    >>> found.keep_probe_here = True  # the unmatched probe rows are added here
    >>> [t.tolist() for t in found.assemble()]
    [[0, 2, 1], [1, 1, -1]]
"""

from __future__ import annotations

import torch

from gpuhash._common.arrays import gather as _take  # noqa: F401  (the strategies' import)


class _Matches:
    """What a strategy found, as probe / build row pieces: matching pairs (with the probe
    side's unmatched rows when the join keeps them), a mask of the build rows that matched
    (when the join keeps the build side's unmatched rows; with the rows it leaves unmarked
    when the one probe found them), or for semi / anti the probe rows they return, at most
    one a probe row however many build rows match it (one key in half the rows stays cheap),
    or their matched mask."""

    def __init__(self, how: str, probe_is_left: bool, probe_rows: int, build_rows: int,
                 device: torch.device, *, store=None):
        # ``store(piece, lane)`` takes each piece as it is found, lane "probe", "build" or
        # "picked" naming the result it belongs to (the streamed join copies it to the host,
        # which then holds the result: self.device); the build rows' marks stay on ``device``
        self.how, self.device = how, device
        self.store = store or (lambda piece, lane: piece)
        self.pairs = how not in ("semi", "anti")
        outer_left, outer_right = how in ("left", "full"), how in ("right", "full")
        self.keep_probe = outer_left if probe_is_left else outer_right
        keep_build = outer_right if probe_is_left else outer_left
        self.probe_is_left = probe_is_left
        self.keep_probe_here = False  # set when the kernels cannot emit them (nulls_equal)
        self.probe_rows, self.build_rows = probe_rows, build_rows
        self.build_hit = (torch.zeros(build_rows, dtype=torch.uint8, device=device)
                          if keep_build else None)
        # the build rows build_hit left unmarked, when the last probe found them (else None)
        self.build_missing: torch.Tensor | None = None
        self.probe: list[torch.Tensor] = []
        self.build: list[torch.Tensor] = []
        self.hit: list[tuple[torch.Tensor | None, torch.Tensor]] = []  # (probe rows, matched)
        # semi / anti: the rows they return, as the probe picked them (add_picked) or as
        # add_hits picks them from a mask where a store takes the pieces (no mask of every
        # probe row is made there)
        self.picked: list[torch.Tensor] | None = [] if store is not None else None
        self.allocate = None  # (rows, dtype) -> a 1-D tensor for a concatenation, if given

    def add_pairs(self, probe: torch.Tensor, build: torch.Tensor) -> None:
        self.probe.append(self.store(probe, "probe"))
        self.build.append(self.store(build, "build"))

    def add_picked(self, rows: torch.Tensor) -> None:
        """Semi / anti: the probe rows (numbers of the whole probe side) a piece returns, in
        any order."""
        if self.picked is None:
            self.picked = []
        self.picked.append(self.store(rows, "picked"))

    def add_hits(self, rows: torch.Tensor | None, matched: torch.Tensor) -> None:
        """``matched`` for the probe rows ``rows`` (None: all of them, in order)."""
        if self.picked is not None:
            picked = (matched if self.how == "semi" else ~matched).nonzero().squeeze(1)
            self.picked.append(self.store(picked if rows is None else _take(rows, picked),
                                          "picked"))
            return
        self.hit.append((rows, matched))

    def assemble(self, device: torch.device | None = None):
        """The gather maps, (left rows, right rows), or the left rows of semi / anti, on
        ``device`` (default: the matches' device)."""
        self.device = device or self.device
        if self.picked is not None and not self.pairs:
            return self._joined(self.picked)
        if not self.pairs:
            if len(self.hit) == 1 and self.hit[0][0] is None:
                matched = self.hit[0][1]
            else:
                matched = torch.zeros(self.probe_rows, dtype=torch.bool, device=self.device)
                for rows, hit in self.hit:
                    if rows is None:
                        matched = hit
                    else:
                        matched[rows] = hit
            return (matched if self.how == "semi" else ~matched).nonzero().squeeze(1)
        probe, build = self._joined(self.probe), self._joined(self.build)
        if self.keep_probe and self.keep_probe_here:
            seen = torch.zeros(self.probe_rows, dtype=torch.bool, device=self.device)
            seen[probe] = True
            missing = (~seen).nonzero().squeeze(1)
            probe = torch.cat([probe, missing])
            build = torch.cat([build, torch.full_like(missing, -1)])
        if self.build_hit is not None:
            missing = self.build_missing
            if missing is None:
                missing = (self.build_hit == 0).nonzero().squeeze(1)
            missing = missing.to(self.device)
            probe = torch.cat([probe, torch.full_like(missing, -1)])
            build = torch.cat([build, missing])
        return (probe, build) if self.probe_is_left else (build, probe)

    def _joined(self, pieces: list[torch.Tensor]) -> torch.Tensor:
        """The row pieces as one int64 tensor on the matches' device: a view spanning them
        when they lie one after another in one storage (the streamed join's), else a copy."""
        if len(pieces) == 1:
            return pieces[0]
        if pieces and _consecutive(pieces):
            total = sum(p.shape[0] for p in pieces)
            return pieces[0].as_strided((total,), (1,), pieces[0].storage_offset())
        if self.allocate is None or not pieces:
            return torch.cat([torch.zeros(0, dtype=torch.int64, device=self.device), *pieces])
        out = self.allocate(sum(p.shape[0] for p in pieces), pieces[0].dtype)
        return torch.cat(pieces, out=out)


def _consecutive(pieces: list[torch.Tensor]) -> bool:
    """Whether 1-D contiguous pieces lie one after another in one storage."""
    storage = pieces[0].untyped_storage().data_ptr()
    at = pieces[0].storage_offset()
    for piece in pieces:
        if (piece.dim() != 1 or not piece.is_contiguous() or piece.storage_offset() != at
                or piece.untyped_storage().data_ptr() != storage):
            return False
        at += piece.shape[0]
    return True
