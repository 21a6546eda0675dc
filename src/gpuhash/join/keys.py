"""Join keys at the edge: checking them, and encoding them as one table key per row.

A join key is a 1-D integer array or a tuple of them (one per key column). This module owns
the rules for what two sides may be joined on, and the :class:`KeyEncoder`, which is fitted on
the build side and maps any row of either side to a single non-negative integer code, with a
mask of the rows that can match at all. Codes never take the two key values a
:class:`~gpuhash.MultiMap` reserves, and fit a 32-bit table whenever the build side's key
range (or its number of distinct keys) allows, which halves the table's traffic.

Example:
    >>> import torch
    >>> columns, _ = key_columns(torch.tensor([7, -1, 7]), "right_keys")
    >>> encoder = KeyEncoder(columns, None)
    >>> codes, ok = encoder.encode(key_columns(torch.tensor([7, 3, -1]), "left_keys")[0])
    >>> encoder.key_dtype, ok.tolist(), codes[0] == encoder.encode(columns)[0][0]
    (torch.int32, [True, True, True], tensor(True))
"""

from __future__ import annotations

from typing import Any

import torch

from gpuhash._common import arrays as _arrays

SIGNED = (torch.int8, torch.int16, torch.int32, torch.int64)
UNSIGNED = (torch.uint8, torch.uint16, torch.uint32, torch.uint64)
BITS = {torch.int8: 8, torch.int16: 16, torch.int32: 32, torch.int64: 64,
        torch.uint8: 8, torch.uint16: 16, torch.uint32: 32, torch.uint64: 64}
SPAN_32 = 2**32 - 2      # codes 0 .. 2**32 - 3 avoid the two reserved 32-bit patterns
SPAN_LIMIT = 2**62       # combined multi-column codes stay below this (no int64 overflow)


def key_columns(keys: Any, name: str) -> tuple[list[torch.Tensor], str]:
    """The key columns of one side as torch tensors, checked, and the caller's array kind.

    Example:
        >>> import torch
        >>> cols, kind = key_columns((torch.tensor([1, 2]), torch.tensor([3, 4])), "keys")
        >>> len(cols), kind
        (2, 'torch')
    """
    if isinstance(keys, torch.Tensor) and keys.dim() == 1 and keys.dtype in BITS:
        return [keys], _arrays.TORCH  # the common case, cheaply: a small join is host time
    parts = list(keys) if isinstance(keys, tuple) else [keys]  # a list is not columns
    if not parts:
        raise ValueError(f"{name} is an empty tuple; give at least one key column")
    columns, kinds = [], []
    for i, part in enumerate(parts):
        label = name if len(parts) == 1 else f"{name}[{i}]"
        tensor, kind = _arrays.as_tensor(part, label)
        if tensor.dtype not in BITS:
            raise TypeError(f"{label} must hold integers (int8..int64, uint8..uint64), got "
                            f"{tensor.dtype}; encode other keys first (gh.merge does this)")
        if tensor.dim() != 1:
            raise ValueError(f"{label} must be 1-D, got shape {tuple(tensor.shape)}")
        if columns and tensor.shape[0] != columns[0].shape[0]:
            raise ValueError(f"{label} has {tensor.shape[0]} rows but {name}[0] has "
                             f"{columns[0].shape[0]}; every key column needs the same length")
        if columns and tensor.device != columns[0].device:
            raise ValueError(f"{label} is on {tensor.device} but {name}[0] is on "
                             f"{columns[0].device}")
        columns.append(tensor)
        kinds.append(kind)
    return columns, kinds[0]


def check_sides(left: list[torch.Tensor], right: list[torch.Tensor]) -> None:
    """Refuse key columns that cannot be compared. Same-signedness widening is allowed (int32
    joins int64 by value); signed against unsigned is refused, since a value such as -1 and
    its bit pattern 2**64 - 1 would otherwise silently meet or silently miss.

    Example:
        >>> import torch
        >>> check_sides([torch.tensor([1], dtype=torch.int32)], [torch.tensor([1])])
    """
    if len(left) != len(right):
        raise ValueError(f"left_keys has {len(left)} key columns but right_keys has "
                         f"{len(right)}")
    for i, (a, b) in enumerate(zip(left, right)):
        if (a.dtype in SIGNED) != (b.dtype in SIGNED):
            suffix = f"[{i}]" if len(left) > 1 else ""
            raise TypeError(f"left_keys{suffix} has dtype {a.dtype} but right_keys{suffix} "
                            f"has {b.dtype}: signed and unsigned keys are not joined; cast "
                            f"one side")
        if a.device != b.device:
            raise ValueError(f"left_keys are on {a.device} but right_keys are on {b.device}; "
                             f"move one side")


def check_valid(valid: Any, rows: int, name: str, device: torch.device) -> torch.Tensor | None:
    """A validity mask (True = a key, False = null), checked against its side's rows.

    Example:
        >>> import torch
        >>> check_valid([True, False], 2, "left_valid", torch.device("cpu")).tolist()
        [True, False]
    """
    if valid is None:
        return None
    if isinstance(valid, (list, tuple)):
        valid = torch.tensor(valid, dtype=torch.bool)
    mask, _ = _arrays.as_tensor(valid, name)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool mask, got dtype {mask.dtype}")
    if mask.dim() != 1 or mask.shape[0] != rows:
        raise ValueError(f"{name} has shape {tuple(mask.shape)} but its keys have {rows} rows")
    if mask.device != device:
        raise ValueError(f"{name} is on {mask.device} but its keys are on {device}")
    return mask.contiguous()  # the kernels read a byte a row by index


def canonical(column: torch.Tensor) -> torch.Tensor:
    """int64 values equal exactly where the keys are equal by value (uint64 keeps its bits).

    Example:
        >>> import torch
        >>> canonical(torch.tensor([-1], dtype=torch.int32)).tolist()
        [-1]
    """
    dtype = column.dtype
    if dtype == torch.uint64:
        return column.view(torch.int64)
    if dtype in (torch.uint32, torch.uint16):  # torch lacks most ops on these: widen by bits
        signed = torch.int32 if dtype == torch.uint32 else torch.int16
        return column.view(signed).to(torch.int64) & ((1 << BITS[dtype]) - 1)
    return column.to(torch.int64)


def _column_stats(values: torch.Tensor, valid: torch.Tensor | None,
                  alone: bool) -> list[torch.Tensor]:
    """A key column's facts for :class:`_Column` as device scalars, so that every column's
    come back in one read: its valid rows, their smallest and largest value and, for a
    column alone, whether one holds a reserved value (the key itself is its code only
    without one). No row is dropped first: a masked_select would read its size back."""
    if values.shape[0] == 0:  # no rows: nothing to reduce (an empty build side)
        found = [values.new_zeros(()), values.new_zeros(()), values.new_full((), -1)]
        return found + [values.new_zeros(())] * alone
    if valid is None:
        found = [values.new_full((), values.shape[0]), *torch.aminmax(values)]  # no copy
        reserved = (values == -1) | (values == -2)
    else:
        found = [valid.sum(dtype=torch.int64),
                 torch.where(valid, values, 2**63 - 1).min(),
                 torch.where(valid, values, -(2**63)).max()]
        reserved = ((values == -1) | (values == -2)) & valid
    if alone:
        found.append(reserved.any().to(torch.int64))
    return [f.reshape(()) for f in found]


class _Column:
    """How one key column becomes a code in ``[0, span)``: an offset from the build side's
    minimum, the key itself (one wide column with no reserved value), or its rank among the
    build side's sorted distinct keys. ``stats``: :func:`_column_stats` as numbers;
    ``valid_values()`` gives the build side's valid values, asked only for a rank."""

    def __init__(self, stats: list[int], valid_values, *, alone: bool):
        self.uniques = None
        self.low, self.high = 0, -1  # an empty build side: nothing matches
        self.mode, self.span = "offset", 1
        rows, low, high, *reserved = stats
        if rows == 0:
            return
        width = high - low + 1
        if width <= (SPAN_32 if alone else SPAN_LIMIT):
            self.low, self.high, self.span = low, high, width
            return
        if alone and not reserved[0]:
            self.mode, self.span = "direct", None
            return
        self.ranked(valid_values())

    def ranked(self, values: torch.Tensor) -> None:
        """Code the column by its rank among the build side's distinct ``values``: a span of
        at most the build's rows, whatever the keys' range."""
        self.mode = "sorted"
        self.uniques = torch.unique(values)
        self.span = self.uniques.shape[0]

    def apply(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.mode == "direct":
            return values, (values != -1) & (values != -2)
        if self.mode == "sorted":
            return _rank(self.uniques, values)
        ok = (values >= self.low) & (values <= self.high)
        return torch.where(ok, values - self.low, 0), ok


def _rank(uniques: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    position = torch.searchsorted(uniques, values).clamp_(max=uniques.shape[0] - 1)
    return position, uniques.index_select(0, position) == values  # not [ ]: slow on CPU


class Direct32:
    """The encoding of one 32-bit key column that needs no pass over the build side: each
    value is its own code, offset so that codes run from 0 (``value + 2**31`` for int32, the
    value for uint32). Only the two largest values of the dtype would take the table's
    reserved codes; the kernels count a build row holding one as unplaced, and the join then
    refits a :class:`KeyEncoder` (``refit``) and builds again, so such keys cost time, never
    rows. The same ``kernel_input`` as :class:`KeyEncoder`.

    Example:
        >>> import torch
        >>> column, valid, shape, low, high = Direct32(torch.int32).kernel_input(
        ...     [torch.tensor([5, -5], dtype=torch.int32)], None)
        >>> shape, low, high
        (1, -2147483648, 2147483645)
    """

    key_dtype = torch.int32
    code_span = None  # any 32-bit code, bar the two reserved ones
    refit = True  # a build row out of range means: fit a KeyEncoder and build again

    def __init__(self, dtype: torch.dtype):
        self.low = 0 if dtype in UNSIGNED else -2**31
        self.high = self.low + SPAN_32 - 1

    @staticmethod
    def suits(columns: list[torch.Tensor]) -> bool:
        """Whether the build side is one 32-bit column (the common join key)."""
        return len(columns) == 1 and columns[0].dtype in (torch.int32, torch.uint32)

    def kernel_input(self, columns: list[torch.Tensor], valid: torch.Tensor | None
                     ) -> tuple[torch.Tensor, torch.Tensor | None, int, int, int]:
        """``(column, valid, shape, low, high)`` for the join kernels, the probe column as
        it is where its width allows (an int64 probe of an int32 build included)."""
        column = columns[0]
        if column.dtype == torch.uint32:
            return column.contiguous().view(torch.int32), valid, 2, self.low, self.high
        if column.dtype == torch.uint64:
            column = column.view(torch.int64)  # values past 2**63 fall below low: no match
        elif BITS[column.dtype] < 32:
            column = canonical(column)
        return column.contiguous(), valid, 1, self.low, self.high


def build_encoder(columns: list[torch.Tensor], valid: torch.Tensor | None):
    """The encoder a join's build side starts with: :class:`Direct32` for one 32-bit column
    (no pass over the keys), else a fitted :class:`KeyEncoder`.

    Example:
        >>> import torch
        >>> type(build_encoder([torch.tensor([1, 2], dtype=torch.int32)], None)).__name__
        'Direct32'
    """
    if Direct32.suits(columns):
        return Direct32(columns[0].dtype)
    return KeyEncoder(columns, valid)


class KeyEncoder:
    """Fitted on the build side's key columns (its valid rows); maps rows of either side to
    one code per row. Multi-column keys are combined by mixed radix, the codes so far ranked
    again among the build side's whenever the product would pass 2**62.

    Example:
        >>> import torch
        >>> build = [torch.tensor([5, 5, 9]), torch.tensor([1, 2, 1])]
        >>> encoder = KeyEncoder(build, None)
        >>> codes, ok = encoder.encode([torch.tensor([9, 4]), torch.tensor([1, 1])])
        >>> ok.tolist(), bool(codes[0] == encoder.encode(build)[0][2])
        ([True, False], True)
    """

    refit = False  # fitted on the build side: every build row is in range

    def __init__(self, columns: list[torch.Tensor], valid: torch.Tensor | None):
        values = [canonical(c) for c in columns]
        alone = len(values) == 1
        # every column's range in one read (one synchronisation for the whole build side)
        stats = torch.stack([f for v in values for f in _column_stats(v, valid, alone)])
        width = 4 if alone else 3
        stats = stats.tolist()

        def valid_rows(tensor):  # the build side's valid rows only (a rank's uniques)
            return tensor if valid is None else tensor.masked_select(valid)

        self.steps: list[tuple[str, Any]] = []
        combined, total = None, 1  # the codes so far, of every build row
        for i, column in enumerate(values):
            fitted = _Column(stats[i * width:(i + 1) * width],
                             lambda column=column: valid_rows(column), alone=alone)
            if combined is not None and total * fitted.span > SPAN_LIMIT:
                uniques = torch.unique(valid_rows(combined))
                self.steps.append(("rank", uniques))
                combined, total = _rank(uniques, combined)[0], max(1, uniques.shape[0])
                if total * fitted.span > SPAN_LIMIT:
                    # still too wide to combine without passing 64 bits: rank this column
                    # too (both ranks are at most the build's rows, whose square fits)
                    fitted.ranked(valid_rows(column))
            if i + 1 < len(values):  # the last column's codes are never combined further
                codes, _ = fitted.apply(column)
                combined = codes if combined is None else combined * fitted.span + codes
            total = None if fitted.span is None else total * fitted.span
            self.steps.append(("column", i, fitted))
        self.columns = len(values)
        self.key_dtype = torch.int64 if total is None or total > SPAN_32 else torch.int32
        self.code_span = total  # codes lie in [0, code_span) (None: any 64-bit pattern)

    def kernel_input(self, columns: list[torch.Tensor], valid: torch.Tensor | None
                     ) -> tuple[torch.Tensor, torch.Tensor | None, int, int, int]:
        """What the join kernels read for these rows: ``(column, valid, shape, low, high)``
        (join/kernels/join_code.cuh: gh_join_code). One 32- or 64-bit column whose build range fits
        an offset code goes as it is, the kernels subtracting ``low``; anything else is
        encoded here first (shape 0: the codes are table key bits), its unmatchable rows
        folded into ``valid``.

        Example:
            >>> import torch
            >>> encoder = KeyEncoder([torch.tensor([10, 12])], None)
            >>> column, valid, shape, low, high = encoder.kernel_input(
            ...     [torch.tensor([11, 99])], None)
            >>> shape, low, high, valid is None
            (1, 10, 12, True)
        """
        if len(self.steps) == 1:
            fitted = self.steps[0][2]
            column = columns[0]
            if fitted.mode == "offset" and BITS[column.dtype] >= 32:
                shape = 2 if column.dtype == torch.uint32 else 1
                if column.dtype in (torch.uint32, torch.uint64):  # kernels read the bits
                    column = column.view(torch.int32 if shape == 2 else torch.int64)
                return column.contiguous(), valid, shape, fitted.low, fitted.high
        codes, ok = self.encode(columns)
        return codes.contiguous(), ok if valid is None else ok & valid, 0, 0, 0

    def encode(self, columns: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Codes as the table's key dtype, and a mask of the rows whose key the build side
        can hold (False rows match nothing; their codes are arbitrary)."""
        combined, ok = None, None
        for step in self.steps:
            if step[0] == "rank":
                combined, found = _rank(step[1], combined)
                ok = found if ok is None else ok & found
                continue
            _, i, fitted = step
            codes, found = fitted.apply(canonical(columns[i]))
            combined = codes if combined is None else combined * fitted.span + codes
            ok = found if ok is None else ok & found
        if self.key_dtype == torch.int32:  # codes 0 .. 2**32 - 3 as 32-bit patterns
            combined = torch.where(combined >= 2**31, combined - 2**32, combined)
            combined = combined.to(torch.int32)
        return combined, ok
