"""The aggregations of one value column over dense group ids, in plain torch on either device.

Every function takes the group id of each row (int64 in ``[0, groups)``, ``-1`` for a row
whose null key was dropped), the number of groups, the values and their validity (None: all
valid; float NaN is a null too, as pandas skips it), and returns one result a group with its
validity (None: every group has a result). Nulls are skipped (SQL). A group with no value
gets a null, except for ``count``, ``size``, ``nunique`` (zero), ``sum`` (zero, as pandas and
polars) and ``any`` / ``all`` (False / True).

Sums of integers and bools accumulate in int64, sums of floats in float64 whatever their
width (``mean``, ``var``, ``std``, ``median``, ``quantile`` and ``corr`` return float64;
``min``, ``max``, ``first``, ``last`` and ``top_k`` the values' dtype). Float sums on a GPU
follow no fixed order: results agree with a serial sum to a few float64 ulps a row.

Masked rows are sent to one spare group past the last (index ``groups``) rather than filtered
out: a mask costs one pass, a filter a copy of every column.

Example:
    >>> import torch
    >>> ids = torch.tensor([0, 1, 0, 1])
    >>> total, _ = aggregate("sum", ids, 2, torch.tensor([1, 2, 3, 4]), None)
    >>> total.tolist()
    [4, 6]
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpuhash.groupby.engine import engine_for

Result = tuple[torch.Tensor, torch.Tensor | None]


def usable(ids: torch.Tensor, values: torch.Tensor, valid: torch.Tensor | None,
           ) -> torch.Tensor | None:
    """Rows that count: a kept key and a valid, non-NaN value (None: every row)."""
    use = None if valid is None else valid
    if values.dtype.is_floating_point:
        number = ~torch.isnan(values)
        use = number if use is None else use & number
    return use


def _slots(ids: torch.Tensor, groups: int, use: torch.Tensor | None) -> torch.Tensor:
    """Each row's group, or the spare group ``groups`` for a row that does not count."""
    slot = torch.where(ids < 0, groups, ids)
    return slot if use is None else torch.where(use, slot, groups)


def _sum_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype.is_floating_point else torch.int64


def counts(ids: torch.Tensor, groups: int, use: torch.Tensor | None) -> torch.Tensor:
    return torch.bincount(_slots(ids, groups, use), minlength=groups + 1)[:groups]


def _nonempty(count: torch.Tensor, at_least: int = 1) -> torch.Tensor | None:
    ok = count >= at_least
    if ok.device.type != "cpu":  # asking whether every group has one would synchronise
        return ok
    return None if bool(ok.all()) else ok


def sums(ids, groups, values, use) -> torch.Tensor:
    """Each group's sum of the counting values (the engine's group_reduce where it takes the
    dtypes; it skips NaN and masked rows as ``use`` does)."""
    if Reductions.takes(values, ids):
        return engine_for(values.device).group_reduce(ids, 0, groups, values, use, "sum")[0]
    acc = _sum_dtype(values.dtype)
    data = values.to(acc)
    if use is not None:
        data = torch.where(use, data, 0)
    out = torch.zeros(groups + 1, dtype=acc, device=values.device)
    return out.index_add_(0, _slots(ids, groups, None), data)[:groups]


def _extreme(op: str, ids, groups, values, use) -> torch.Tensor:
    data = values.to(torch.int64) if values.dtype == torch.bool else values
    out = torch.zeros(groups + 1, dtype=data.dtype, device=values.device)
    out.scatter_reduce_(0, _slots(ids, groups, use), data, op, include_self=False)
    out = out[:groups]
    return out.to(torch.bool) if values.dtype == torch.bool else out


def _mean(ids, groups, values, use) -> Result:
    count = counts(ids, groups, use)
    return sums(ids, groups, values, use).to(torch.float64) / count, _nonempty(count)


def _var(ids, groups, values, use, summed=None) -> Result:
    """Two passes: the groups' means, then squared distances from them (no cancellation).
    ``summed``: the groups' sums and counts, when the engine made them already."""
    if summed is None:
        summed = sums(ids, groups, values, use), counts(ids, groups, use)
    total, count = summed
    mean = total.to(torch.float64) / count.clamp(min=1)
    squares, _, _ = _comoments(ids, groups, values, values, use, mean, mean)
    return squares / (count - 1).clamp(min=1), _nonempty(count, 2)


def _comoments(ids, groups, first, second, use, mean_first, mean_second):
    codes = ids if ids.dtype in (torch.int32, torch.int64) else ids.to(torch.int64)
    return engine_for(first.device).group_comoments(codes, groups, first, second, use,
                                                    mean_first, mean_second)


def _sorted_within_groups(ids, groups, values, use, *, descending: bool = False):
    """The counting values by group, then by value within each group, and each group's count
    and first position among them (the engine's group_sort)."""
    slot = _slots(ids, groups, use)
    return engine_for(values.device).group_sort(slot, groups, values, descending=descending)


def quantile(q: float, ids, groups, values, use) -> Result:
    """Linear interpolation between the two nearest ranks (pandas' default): the engine's
    group_quantile."""
    slot = _slots(ids, groups, use)
    out, count = engine_for(values.device).group_quantile(slot, groups, values, q)
    return out, _nonempty(count)


def _first_or_last(op: str, ids, groups, values, use) -> Result:
    rows = torch.arange(values.shape[0], device=values.device)
    count = counts(ids, groups, use)
    pick = torch.zeros(groups + 1, dtype=torch.int64, device=values.device)
    pick.scatter_reduce_(0, _slots(ids, groups, use), rows, op, include_self=False)
    pick = pick[:groups].clamp(0, max(values.shape[0] - 1, 0))
    taken = values[pick] if values.shape[0] else values.new_zeros(groups)
    return taken, _nonempty(count)


def _nunique(ids, groups, values, use) -> Result:
    from gpuhash.groupby.keys import factorize_columns

    slot = _slots(ids, groups, use)
    pairs = factorize_columns([slot, values], [None, None], dropna=True, order="any")
    per_group = torch.bincount(pairs.keys[0], minlength=groups + 1)[:groups]
    return per_group, None


def _truth(values, use) -> torch.Tensor:
    truth = values != 0
    return truth if use is None else truth & use


def _any(ids, groups, values, use) -> Result:
    return counts(ids, groups, _truth(values, use)) > 0, None


def _all(ids, groups, values, use) -> Result:
    nonzero = counts(ids, groups, _truth(values, use))
    return nonzero == counts(ids, groups, use), None


_EXACT_SUMS = (torch.int8, torch.uint8, torch.bool, torch.int16, torch.int32, torch.float32,
               torch.float64)  # summed by the engine as they are (int64 sums of these never wrap)


def correlation(ids, groups, first, first_valid, second, second_valid, *,
                shared: dict | None = None) -> Result:
    """Pearson's r of two columns over the rows where both count, from centred sums: a
    grouped sum of each column (which also counts the rows: ``shared["rows"]``, when the
    caller keeps them), then one pass of comoments."""
    first, second = (v if v.dtype in _EXACT_SUMS else as_float64(v) for v in (first, second))
    use = usable(ids, first, first_valid)
    other = usable(ids, second, second_valid)
    use = other if use is None else (use if other is None else use & other)
    engine = engine_for(first.device)
    rows = None if shared is None else shared.get("rows")
    total_first, count, rows = engine.group_reduce(ids, 0, groups, first, use, "sum", rows=rows)
    total_second, _, _ = engine.group_reduce(ids, 0, groups, second, use, "sum", rows=rows)
    if shared is not None:
        shared["rows"] = rows
    clamped = count.clamp(min=1)
    mean_first = total_first.to(torch.float64) / clamped
    mean_second = total_second.to(torch.float64) / clamped
    aa, bb, ab = _comoments(ids, groups, first, second, use, mean_first, mean_second)
    spread = torch.sqrt(aa * bb)
    r = ab / spread
    ok = (count >= 2) & (spread > 0)
    return r, None if bool(ok.all()) else ok


def top_rows(k: int, ids, groups, values, use, *, largest: bool,
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest (or smallest) counting values of each group: (group, value) rows,
    by group, then from the largest (smallest) down."""
    values, back = prepared("top_k", values)
    ranked, count, start = _sorted_within_groups(ids, groups, values, use, descending=largest)
    group = torch.repeat_interleave(torch.arange(groups, device=values.device), count)
    rank = torch.arange(ranked.shape[0], device=values.device) - start[group]
    keep = rank < k
    return group[keep], back(ranked[keep])


def _plain(function: Callable) -> Callable:
    def run(ids, groups, values, use) -> Result:
        return function(ids, groups, values, use), None
    return run


def _extreme_result(op: str) -> Callable:
    def run(ids, groups, values, use) -> Result:
        return _extreme(op, ids, groups, values, use), _nonempty(counts(ids, groups, use))
    return run


def _std(ids, groups, values, use, summed=None) -> Result:
    var, ok = _var(ids, groups, values, use, summed)
    return torch.sqrt(var), ok


AGGREGATIONS: dict[str, Callable[..., Result]] = {
    "count": lambda ids, groups, values, use: (counts(ids, groups, use), None),
    "size": lambda ids, groups, values, use: (counts(ids, groups, None), None),
    "sum": _plain(sums),
    "mean": _mean,
    "min": _extreme_result("amin"),
    "max": _extreme_result("amax"),
    "var": _var,
    "std": _std,
    "median": lambda ids, groups, values, use: quantile(0.5, ids, groups, values, use),
    "first": lambda ids, groups, values, use: _first_or_last("amin", ids, groups, values, use),
    "last": lambda ids, groups, values, use: _first_or_last("amax", ids, groups, values, use),
    "nunique": _nunique,
    "any": _any,
    "all": _all,
}
REDUCIBLE = (torch.int8, torch.uint8, torch.bool, torch.int16, torch.int32, torch.int64,
             torch.float32, torch.float64)
BY_ENGINE = ("count", "size", "sum", "mean", "min", "max")  # one pass of group_reduce each


class Reductions:
    """The engine's grouped sums, minima and maxima of one value column, each computed once
    however many aggregations ask for it (a mean and a sum share a pass; so do a count and
    anything)."""

    def __init__(self, ids: torch.Tensor, groups: int, values: torch.Tensor,
                 valid: torch.Tensor | None, offset: int = 0, shared: dict | None = None,
                 *, groups_hold_rows: bool = False):
        self.ids, self.groups, self.values, self.valid = ids, groups, values, valid
        self.offset = offset  # the group of a row is its id minus this
        # every group reported holds a row (a group-by's: its empty codes are dropped)
        self.groups_hold_rows = groups_hold_rows
        # the rows of each group, shared by every column grouped by the same ids: counted once
        self.shared = {} if shared is None else shared
        self._done: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def takes(values: torch.Tensor, ids: torch.Tensor) -> bool:
        return values.dtype in REDUCIBLE and ids.dtype in (torch.int32, torch.int64)

    def get(self, op: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(accumulator, values seen, rows seen) of ``op`` ("counts": of any op); the rows
        are counted by the first pass over the ids only."""
        if op not in self._done:
            first = next(iter(self._done.values()), None)
            if op == "counts" and first is not None:
                return first
            engine = engine_for(self.ids.device)
            self._done[op] = engine.group_reduce(
                self.ids, self.offset, self.groups, self.values, self.valid,
                "sum" if op == "counts" else op, rows=self.shared.get("rows"))
            self.shared["rows"] = self._done[op][2]
        return self._done[op]

    def float_sums(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Sums and counts for means: of int64 values in float64 (their int64 sum may wrap;
        pandas' mean of them is a float one too), else the engine's sums."""
        if self.values.dtype != torch.int64:
            total, counts, _ = self.get("sum")
            return total, counts
        if "float_sum" not in self._done:
            engine = engine_for(self.ids.device)
            self._done["float_sum"] = engine.group_reduce(
                self.ids, self.offset, self.groups, self.values.to(torch.float64), self.valid,
                "sum", rows=self.shared.get("rows"))
            self.shared["rows"] = self._done["float_sum"][2]
        total, counts, _ = self._done["float_sum"]
        return total, counts

    def result(self, name: str) -> Result:
        every_value = self.valid is None and not self.values.dtype.is_floating_point
        if (name == "size" or (name == "count" and every_value)) and "rows" in self.shared:
            return self.shared["rows"], None  # another column's pass counted them: no pass
        if name in ("count", "size"):
            _, counts, rows = self.get("counts")
            return (counts if name == "count" else rows), None
        if name == "sum":
            return self.get("sum")[0], None
        if name == "mean":
            total, counts = self.float_sums()
            return total.to(torch.float64) / counts, self._nonempty(counts)
        extreme, counts, _ = self.get(name)
        return extreme.to(self.values.dtype), self._nonempty(counts)

    def _nonempty(self, counts: torch.Tensor) -> torch.Tensor | None:
        """Groups with a value. Where every reported group holds a row and every row's value
        counts (integers without a validity mask), every group has one: None, sparing a
        comparison and a select a column."""
        if (self.groups_hold_rows and self.valid is None
                and not self.values.dtype.is_floating_point):
            return None
        return _nonempty(counts)


def aggregate(name: str, ids: torch.Tensor, groups: int, values: torch.Tensor,
              valid: torch.Tensor | None, *, q: float | None = None,
              reductions: Reductions | None = None) -> Result:
    """One aggregation of one column (see the module docstring); ``reductions``: the
    column's engine passes, shared with its other aggregations."""
    if name in BY_ENGINE and Reductions.takes(values, ids):
        reductions = reductions or Reductions(ids, groups, values, valid)
        return reductions.result(name)
    if name in ("var", "std") and reductions is not None:  # the first pass from the engine
        use = usable(ids, values, valid)
        summed = reductions.float_sums()
        return (_var if name == "var" else _std)(ids, groups, values, use, summed)
    values, back = prepared(name, values)
    use = usable(ids, values, valid)
    if name == "quantile":
        return quantile(q, ids, groups, values, use)
    result, ok = AGGREGATIONS[name](ids, groups, values, use)
    return back(result), ok


_ORDERED = ("min", "max", "first", "last", "top_k", "bottom_k")  # results of the values' kind
_FLOATS = ("sum", "mean", "var", "std", "median", "quantile", "corr")
_SIGN = torch.iinfo(torch.int64).min


def as_float64(values: torch.Tensor) -> torch.Tensor:
    """Values as float64, uint64 ones past int64 included: their high and low 32 bits
    converted apart (each exactly) and added, so one rounding gives the nearest float64.
    (Shifting them into int64's range first lost the small ones: 2 - 2**63 rounds to
    -2**63.)"""
    if values.dtype == torch.uint64:
        bits = values.view(torch.int64)
        high = (bits >> 32) & 0xFFFFFFFF
        return high.to(torch.float64) * 2.0**32 + (bits & 0xFFFFFFFF).to(torch.float64)
    return values.to(torch.float64)


def prepared(name: str, values: torch.Tensor):
    """(values in a dtype torch and numba aggregate, how to bring results back): half floats
    as float32, unsigned 16-32-bit integers as int64, uint64 with its top bit flipped where
    order matters (as int64 then), and the float aggregations of uint64 in float64; sums of
    uint64 wrap modulo 2**64 as NumPy's do."""
    dtype = values.dtype

    def keep(result):
        return result

    if dtype in (torch.float16, torch.bfloat16):
        return values.to(torch.float32), (lambda r: r.to(dtype)) if name in _ORDERED else keep
    if dtype in (torch.uint16, torch.uint32):
        return values.to(torch.int64), (lambda r: r.to(dtype)) if name in _ORDERED else keep
    if dtype == torch.uint64:
        if name in _ORDERED:
            return values.view(torch.int64) ^ _SIGN, lambda r: (r ^ _SIGN).view(torch.uint64)
        if name == "sum":
            return values.view(torch.int64), lambda r: r.view(torch.uint64)
        if name in _FLOATS:
            return as_float64(values), keep
    if dtype == torch.int64 and name in ("mean", "var", "std"):
        return values.to(torch.float64), keep  # an int64 sum may wrap
    return values, keep
