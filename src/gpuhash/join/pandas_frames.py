"""pandas frames in a merge: their column labels (Arrow names a column by its label as a
string), and the output frame made as pandas' merge makes it: each column with the label and
dtype of the column it came from, a key column of both sides with the dtype pandas gives it.

Example:
    >>> import pandas as pd, pyarrow as pa
    >>> out = restore_pandas(pa.table({"0": [1], "k": [2]}), pd.DataFrame({0: [1], "k": [2]}),
    ...                      pd.DataFrame({0: [1]}), {"0": "0", "k": "k"}, {}, (["0"], ["0"]))
    >>> list(out.columns)
    [0, 'k']
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

import numpy as np


def pandas_labels(frame: Any, name: str) -> dict:
    """Arrow column name -> the pandas column label it came from (Arrow names a column by its
    label as a string); MultiIndex columns are refused before any work.

    Example:
        >>> import pandas as pd
        >>> pandas_labels(pd.DataFrame({0: [1], "k": [2]}), "left")
        {'0': 0, 'k': 'k'}
    """
    import pandas as pd

    if isinstance(frame.columns, pd.MultiIndex):
        raise TypeError(f"{name} has MultiIndex columns, which merge does not take; flatten "
                        f"them to one level first")
    labels = {str(label): label for label in frame.columns}
    if len(labels) < len(frame.columns):  # pandas merges such a frame; Arrow cannot name it
        seen: dict = {}
        for label in frame.columns:
            seen.setdefault(str(label), []).append(label)
        twice = next(v for v in seen.values() if len(v) > 1)
        shown = sorted(set(map(repr, twice)))
        raise ValueError(f"the {name} frame has {len(twice)} columns labelled "
                         f"{' and '.join(shown)}; gh.merge needs distinct column labels (as "
                         f"strings): rename them first")
    return labels


def pandas_key_names(value: Any) -> Any:
    """``on`` / ``left_on`` / ``right_on`` for a pandas frame as Arrow's column names: a label
    that is not a string (an int column label) as its string; a list of them each so."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return [v if isinstance(v, str) else str(v) for v in value]
    return str(value)


def _object_values(frame: Any, keys: list[str]) -> list[str]:
    """The frame's columns (by Arrow name) that go through the join as row numbers: object
    columns other than keys. pandas gathers their Python objects as they are and fills a
    missing row with NaN, which Arrow's conversion would not (it makes 1 and pd.NA 1.0 and
    NaN, NaN None, and refuses mixed types)."""
    return [str(c) for c, d in frame.dtypes.items() if d == np.dtype(object) and str(c) not in keys]


def with_row_numbers(frame: Any, keys: list[str]) -> Any:
    """The frame (not a copy of its data) with each _object_values column replaced by its row
    numbers, which restore_pandas turns back into the objects.

    Example:
        >>> import pandas as pd
        >>> with_row_numbers(pd.DataFrame({"k": [1, 2], "o": [None, 3]}, dtype=object),
        ...                  ["k"])["o"].tolist()
        [0, 1]
    """
    names = _object_values(frame, keys)
    if not names:
        return frame
    labels = pandas_labels(frame, "frame")
    frame = frame.copy(deep=False)  # the caller's frame is left alone
    rows = np.arange(len(frame), dtype=np.int64)
    for name in names:
        frame[labels[name]] = rows
    return frame


def restore_pandas(table: Any, left: Any, right: Any, left_out: dict, right_out: dict,
                   keys: tuple[list, list], suffixes: Any = None,
                   lacks_left: str | None = None) -> Any:
    """A merge's output Table as a pandas frame (``left_out`` / ``right_out``: each side's
    column name -> its output name; ``keys``: both sides' key names; ``suffixes``: the
    caller's): columns keep the labels and dtypes of the columns they came from
    (pandas_frame; a key column of both sides the dtype pandas gives it, _pandas_key_dtype;
    object columns their objects, NaN where a row lacks the side). A label both sides have
    gets the suffix as pandas adds it: as a string, even where the suffix is ''.
    ``lacks_left``: whether "some" or "all" output rows lack the left side (None: none)."""
    import pandas as pd

    labels_l, labels_r = pandas_labels(left, "left"), pandas_labels(right, "right")
    dtypes = {out: right[labels_r[name]].dtype for name, out in right_out.items()}
    dtypes.update({out: left[labels_l[name]].dtype for name, out in left_out.items()})
    for a, b in zip(*keys):
        lk, rk = left[labels_l[a]], right[labels_r[b]]
        coerced = _coerced(lk.dtype, rk.dtype) if bool(len(lk)) == bool(len(rk)) else None
        kinds = coerced or (lk.dtype, rk.dtype)
        if a == b and a in left_out:  # one column holds both sides' keys
            dtypes[left_out[a]] = _pandas_key_dtype(*kinds, lacks_left)
        elif coerced and a in left_out:  # pandas casts the key columns of the left's name
            dtypes[left_out[a]] = kinds[0]
    objects = {}  # output name -> the input's objects, gathered by their row numbers
    for frame, labels, names, side_keys in ((left, labels_l, left_out, keys[0]),
                                            (right, labels_r, right_out, keys[1])):
        for name in _object_values(frame, side_keys):
            if name in names:
                objects[names[name]] = frame[labels[name]].to_numpy()
                dtypes[names[name]] = None
    frame = pandas_frame(table, dtypes)
    for out, values in objects.items():
        rows = frame[out].to_numpy(dtype=np.float64, na_value=np.nan)
        found = ~np.isnan(rows)
        column = np.full(len(rows), np.nan, dtype=object)
        column[found] = values[rows[found].astype(np.int64)]
        frame[out] = pd.Series(column, index=frame.index, dtype=object)
    for out in frame.columns:  # Arrow's nulls are None; pandas' missing values NaN
        if out not in objects and frame[out].dtype == object:
            frame[out] = frame[out].where(frame[out].notna(), np.nan)
    both = set(left_out) & set(right_out)  # the labels the suffixes were added to
    given = ("", "") if suffixes is None else tuple(suffixes)
    back = {out: labels_r[name] for name, out in right_out.items()
            if out == name and not (name in both and given[1] == "")}
    back.update({out: labels_l[name] for name, out in left_out.items()
                 if out == name and not (name in both and given[0] == "")})
    frame.columns = [back.get(c, c) for c in frame.columns]
    return frame


def _coerced(left, right):
    """The dtypes pandas casts a pair of key columns to before it merges them (its
    _maybe_coerce_merge_keys), None where it merges them as they are: categoricals of other
    categories, or a categorical against another dtype, as their categories' dtype, and the
    other side's object; bool or text against another dtype, and pairs of unlike kinds, both
    object. Numbers, datetimes and objects pair as they are."""
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    cats = isinstance(left, pd.CategoricalDtype), isinstance(right, pd.CategoricalDtype)
    if all(cats):
        if left.ordered == right.ordered and (
                list(left.categories) == list(right.categories) if left.ordered
                else set(left.categories) == set(right.categories)):
            return None
    elif not any(cats):
        if left == right or (left.kind == "M" and right.kind == "M"):
            return None
        if left == np.dtype(object) and right == np.dtype(object):
            return None
        if is_numeric_dtype(left) and is_numeric_dtype(right) and (
                not (is_bool_dtype(left) or is_bool_dtype(right)) or left.kind == right.kind):
            return None
    return tuple(d.categories.dtype if c else np.dtype(object)
                 for d, c in zip((left, right), cats))


def _pandas_key_dtype(left, right, lacks_left: str | None = None):
    """The dtype pandas gives a key column both sides fill (``left`` / ``right``: the sides'
    dtypes as _coerced makes them): the left's where every row has the left side, the right's
    where none has, else the two's common type; datetimes at the finer unit."""
    import pandas as pd

    if left == right:
        return left
    if left.kind == "M" and right.kind == "M":
        units = (getattr(d, "unit", None) or np.datetime_data(d)[0] for d in (left, right))
        finer = np.result_type(*(np.dtype(f"M8[{unit}]") for unit in units))
        tz = getattr(left, "tz", None)
        return finer if tz is None else pd.DatetimeTZDtype(unit=np.datetime_data(finer)[0],
                                                           tz=tz)
    if lacks_left is None:
        return left
    if lacks_left == "all":
        return right
    try:
        from pandas.core.dtypes.cast import find_common_type
    except ImportError:  # pandas' inner module moved: the left's, as without missing rows
        return left
    return find_common_type([left, right])


def pandas_frame(table: Any, dtypes: dict) -> Any:
    """A merge's pyarrow Table as a pandas DataFrame whose columns keep the extension dtypes
    their source columns had (``dtypes``: output name -> the input column's dtype), as pandas'
    merge keeps them: a nullable Int64 column with missing rows stays Int64 (Arrow's default
    makes it float64, which rounds values past 2**53), a nullable boolean stays boolean.

    Example:
        >>> import pandas as pd, pyarrow as pa
        >>> t = pa.table({"a": pa.array([2**53 + 1, None], pa.int64())})
        >>> pandas_frame(t, {"a": pd.Int64Dtype()})["a"].tolist()
        [9007199254740993, <NA>]
    """
    frame = table.to_pandas()
    for name, dtype in dtypes.items():
        if dtype is None or frame[name].dtype == dtype:
            continue
        got = frame[name].dtype
        if isinstance(dtype, np.dtype) and dtype.kind in "iuf" and got.kind in "iuf":
            # a key of two widths (int32 against int64) in the width pandas gives it, where
            # every value fits
            column = frame[name]
            if column.hasnans or (got.kind == "f" and not (column.abs() <= 2**53).all()):
                continue
            exact = column.astype(dtype)
            if (exact.astype(got) == column).all():
                frame[name] = exact
            continue
        if dtype == np.dtype(object) or (dtype.kind == "M" and got.kind == "M") or (
                got == "category" and not hasattr(dtype, "categories")):
            # pandas keeps object columns as object (Arrow makes them str or bool), a
            # datetime key at its unit, and a categorical key against another dtype as values
            with contextlib.suppress(TypeError, ValueError):
                frame[name] = frame[name].astype(dtype)
            continue
        if not hasattr(dtype, "__from_arrow__"):
            continue
        # (suppressed: the output's type cannot hold it, a key coalesced with another type's)
        with contextlib.suppress(TypeError, ValueError, NotImplementedError):
            frame[name] = table.column(name).to_pandas(types_mapper=lambda _, d=dtype: d)
    return frame


def merge_on_indexes(merge, left, right, left_index, right_index, keys, **options):
    """pandas' merge on both frames' indexes: the indexes joined as a key column by ``merge``
    (gh.merge), which becomes the output's index (named as the left's; a right join's as
    the right's)."""
    import pandas as pd

    if not (left_index and right_index) or any(k is not None for k in keys):
        raise NotImplementedError("left_index / right_index join on both indexes only (give "
                                  "both, and no on, left_on or right_on); for an index "
                                  "against a column, reset_index() that side first")
    for frame, side in ((left, "left"), (right, "right")):
        if isinstance(frame.index, pd.MultiIndex):
            raise TypeError(f"the {side} frame has a MultiIndex; reset_index() it first")
    name = "__gpuhash_index__"
    while name in left.columns or name in right.columns:
        name += "_"
    out = merge(left.assign(**{name: left.index}), right.assign(**{name: right.index}),
                on=name, **options)
    keys_out = out.pop(name)
    index_name = (right if options["how"] in ("right", "right_anti") else left).index.name
    out.index = pd.Index(keys_out)
    out.index.name = index_name
    return out


def _listed(value) -> list:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def index_levels(left: Any, right: Any, on: Any, left_on: Any, right_on: Any):
    """pandas' merge takes the names of index levels as keys: (left, right, keys) with such
    levels made columns, ``keys`` the ones that are levels on both sides (pandas makes them
    the output's index; a level against a column stays a column); None where no key names a
    level. A level of an index whose other levels are not keys, and levels named by left_on
    or right_on, are refused naming the level, with the fix."""
    sides = ((left, _listed(left_on if on is None else on), "left"),
             (right, _listed(right_on if on is None else on), "right"))
    levels = [[n for n in names if n not in frame.columns and n in frame.index.names]
              for frame, names, _ in sides]
    if not any(levels):
        return None
    for (frame, _, side), named in zip(sides, levels):
        if named and on is None:
            raise ValueError(f"{side}_on names {named[0]!r}, a level of the {side} frame's "
                             f"index; gh.merge takes index levels as keys through on= only: "
                             f"reset_index() the {side} frame first")
        others = [n for n in frame.index.names if n not in named]
        if named and others:
            raise ValueError(f"on names {named[0]!r}, a level of the {side} frame's index, "
                             f"whose other levels {others} are not keys; reset_index() the "
                             f"{side} frame first")
    left, right = (frame.reset_index() if named else frame
                   for (frame, _, _), named in zip(sides, levels))
    return left, right, [n for n in levels[0] if n in levels[1]]


def by_value(left: Any, right: Any, left_keys: list, right_keys: list) -> set[int]:
    """The key pairs (by position) that pandas merges as values, not as categories: a sort of
    the output orders them by value, not by the categories' order."""
    labels_l, labels_r = pandas_labels(left, "left"), pandas_labels(right, "right")
    return {k for k, (a, b) in enumerate(zip(left_keys, right_keys))
            if _coerced(left[labels_l[a]].dtype, right[labels_r[b]].dtype)}


_ANTI_INDEX = contextvars.ContextVar("gpuhash_anti_index", default=True)


def anti_index_wanted() -> bool:
    """Whether a pandas anti merge is to take pandas' index (not inside the merges that
    anti_from_outer makes for it)."""
    return _ANTI_INDEX.get()


def anti_from_outer(merge, left: Any, right: Any, how: str, *, indicator, **options) -> Any:
    """pandas' anti joins as pandas numbers them: the rows of the anti merge, labelled by
    their places in the left (right) merge, which is what pandas filters (the labels are
    that merge's row numbers, not the input's). The rows and their dtypes are the anti
    merge's own (a one-sided merge would widen a key column the rows do not need)."""
    import pandas as pd

    taken = {str(label) for label in [*left.columns, *right.columns]}
    hidden = next(f"__gh_side_{i}" for i in range(len(taken) + 1)
                  if f"__gh_side_{i}" not in taken)
    token = _ANTI_INDEX.set(False)
    try:
        rows = merge(left, right, how=how, indicator=indicator, **options)
        sided = merge(left, right, how="left" if how == "left_anti" else "right",
                      indicator=hidden, **options)
    finally:
        _ANTI_INDEX.reset(token)
    alone = "left_only" if how == "left_anti" else "right_only"
    places = np.flatnonzero((sided[hidden] == alone).to_numpy())
    assert places.shape[0] == rows.shape[0], "an anti merge's rows are its side's unmatched"
    rows.index = pd.Index(places)
    return rows
