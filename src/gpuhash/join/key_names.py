"""Which columns a merge joins on: ``on`` / ``left_on`` / ``right_on`` (or the columns the two
sides share) resolved to each side's key names, for gh.merge and the adapters built on it
(Dask, torch.distributed).

Example:
    >>> key_names(["k", "a"], ["k", "b"], None, None, None, "inner")
    (['k'], ['k'])
"""

from __future__ import annotations

from typing import Any


def column_names(value: Any, argument: str) -> list[str]:
    names = [value] if isinstance(value, str) else list(value)
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{argument} must be a column name or a list of them, got {value!r}")
    return names


def resolve_keys(left_cols, right_cols, on, left_on, right_on) -> tuple[list[str], list[str]]:
    """The key columns of each side that ``on`` / ``left_on`` / ``right_on`` name (the shared
    column names when none does), checked for their form but not against the columns
    (gh.merge and the Dask adapter each say in their own terms which side lacks one)."""
    if on is not None:
        if left_on is not None or right_on is not None:
            raise ValueError("give either on or left_on/right_on, not both")
        return column_names(on, "on"), column_names(on, "on")
    if left_on is not None or right_on is not None:
        if left_on is None or right_on is None:
            raise ValueError(f"left_on and right_on go together; got left_on={left_on!r}, "
                             f"right_on={right_on!r}")
        left_keys, right_keys = column_names(left_on, "left_on"), column_names(right_on, "right_on")
        if len(left_keys) != len(right_keys):
            raise ValueError(f"left_on names {len(left_keys)} columns but right_on names "
                             f"{len(right_keys)}; pair each left key with a right one")
        return left_keys, right_keys
    shared = [c for c in left_cols if c in set(right_cols)]
    if not shared:
        raise ValueError("no on, left_on or right_on, and the sides share no column name; "
                         "name the key columns with on=...")
    return shared, list(shared)


def key_names(left_cols, right_cols, on, left_on, right_on, how):
    if how == "cross":
        if on is not None or left_on is not None or right_on is not None:
            raise ValueError("how='cross' takes no on, left_on or right_on")
        return [], []
    left_keys, right_keys = resolve_keys(left_cols, right_cols, on, left_on, right_on)
    for names, columns, side in ((left_keys, left_cols, "left"),
                                 (right_keys, right_cols, "right")):
        for name in names:
            if name not in columns:
                raise KeyError(f"key column {name!r} is not in the {side} table (columns: "
                               f"{list(columns)})")
    return left_keys, right_keys
