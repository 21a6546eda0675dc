"""``gh.groupby`` of a table: the columns it names taken out of a pyarrow, pandas or polars
table (or a dict of arrays), and the answer built as the same kind of table.

Only the key columns and the aggregated columns are converted. Results are assembled as an
Arrow table (nulls where a group has no value) and converted once to pandas or polars; a dict
of arrays comes back as a dict of arrays of the keys' kind, NaN standing for a missing float.

Example:
    >>> import pandas as pd
    >>> import gpuhash as gh
    >>> frame = pd.DataFrame({"k": [2, 1, 2], "v": [1.0, None, 3.0]})
    >>> gh.groupby(frame, "k", {"v": "mean"}, sort=True, device="cpu")
       k    v
    0  1  NaN
    1  2  2.0
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from gpuhash.groupby.columns import Column, arrow_column, tensor_column
from gpuhash.groupby.specs import parse_aggs

ORDERED = ("min", "max", "top_k", "bottom_k")  # aggregations that compare strings


def _names(by: Any) -> list[str]:
    names = [by] if isinstance(by, str) else list(by) if isinstance(by, (list, tuple)) else None
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"by must name the key column(s) of the table: a str or a list of "
                        f"str, not {by!r}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"by names {repeated} more than once; name each key column once")
    return names


def group_table(data, by, aggs, *, sort, dropna, device, explain, run, default_device):
    from gpuhash.join.frames import ARROW, PANDAS, POLARS, TENSORS, frame_kind, to_arrow

    kind = frame_kind(data, "data")
    keys = _names(by)
    specs = parse_aggs(aggs, tuple(keys))
    wanted = list(dict.fromkeys(keys + [s.column for s in specs] + [
        s.parameter for s in specs if s.name == "corr"]))
    prelude = None  # the host columns' conversion, for explain
    if kind == TENSORS:
        present = list(data)
        take = None
    else:
        source = data
        if kind == POLARS and set(wanted) <= set(data.columns):
            source = data.select(wanted)  # only what the group-by reads leaves polars
        arrow = to_arrow(source, kind, views=True)  # polars' strings as views: no copy
        present = arrow.column_names
        take = arrow
    missing = [n for n in wanted if n not in present]
    if missing:
        role = "by" if missing[0] in keys else "aggs"
        raise KeyError(f"{role} names column {missing[0]!r}, which the table lacks; it has "
                       f"{present}")
    if kind == TENSORS:
        first = next(iter(data.values()))
        where = device if device is not None else getattr(first, "device", None)
        columns = {n: tensor_column(data[n], n, None if where is None else torch.device(where))
                   for n in wanted}
    else:
        target = default_device(device)
        # string codes need the strings' order only for these (a sort of the dictionary)
        ordered = {s.column for s in specs if s.name in ORDERED} | (set(keys) if sort else set())
        started = time.perf_counter()
        columns = _arrow_columns(take, wanted, target, ordered)
        if explain and target.type == "cuda":
            torch.cuda.synchronize(target)
        coded = [f"{n}: {c.how}" for n, c in columns.items() if c.how]
        prelude = ("columns", (time.perf_counter() - started) * 1e3,
                   f"{len(columns)} to {target}" + (f" ({'; '.join(coded)})" if coded else ""))
    lengths = {n: c.values.shape[0] for n, c in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"columns differ in length: {lengths}; every column needs one value "
                         f"a row")
    key_columns = [columns[n] for n in keys]
    (groups, outputs), rows = run([c.values for c in key_columns],
                                  [c.valid for c in key_columns], columns, specs, sort=sort,
                                  dropna=dropna, explain=explain, prelude=prelude)
    if kind == TENSORS:
        return _tensor_answer(data, keys, key_columns, groups, specs, outputs, rows)
    answer = _arrow_answer(keys, key_columns, groups, specs, outputs, rows, columns)
    if kind == PANDAS:
        return _pandas_answer(answer, data, keys, specs)
    if kind == POLARS:
        import polars

        return polars.from_arrow(answer)
    assert kind == ARROW
    return answer


def _arrow_columns(table, names: list[str], target: torch.device, ordered: set[str],
                   ) -> dict[str, Column]:
    """The named columns of an Arrow table as Columns. On the CPU, string columns of one
    piece are first encoded a thread each: Arrow encodes a piece on one thread, with the GIL
    released, so two string keys take the time of one on two cores (longer columns are
    encoded by pieces on every core already)."""
    from gpuhash.groupby.columns import PIECE_ROWS, host_string_codes, is_string_type

    strings = [n for n in names if is_string_type(table.column(n).type)
               and len(table.column(n)) <= PIECE_ROWS]
    threads = min(len(strings), os.cpu_count() or 1)
    encoded = {}
    if target.type == "cpu" and threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            encoded = dict(zip(strings, pool.map(host_string_codes,
                                                 [table.column(n) for n in strings])))
    return {n: arrow_column(table.column(n), n, target, ordered=n in ordered,
                            encoded=encoded.get(n)) for n in names}


def _group_keys(key_columns: list[Column], groups, pick: torch.Tensor | None = None):
    for column, values, ok in zip(key_columns, groups.keys, groups.key_valid):
        if pick is not None:
            values, ok = values[pick], None if ok is None else ok[pick]
        yield column, values, ok


def _arrow_answer(keys, key_columns, groups, specs, outputs, rows, columns):
    import pyarrow as pa

    from gpuhash.groupby.api import NUMBER_RESULTS

    names, arrays = [], []
    pick = None if rows is None else rows[0]
    for name, (column, values, ok) in zip(keys, _group_keys(key_columns, groups, pick)):
        names.append(name)
        arrays.append(column.to_arrow(values, ok))
    if rows is not None:
        spec = specs[0]
        names.append(spec.output)
        arrays.append(columns[spec.column].to_arrow(rows[1], None))
        return pa.table(arrays, names=names)
    for spec, (values, ok) in zip(specs, outputs):
        column = columns[spec.column]
        as_numbers = spec.name in NUMBER_RESULTS
        names.append(spec.output)
        arrays.append(column.to_arrow(values, ok, as_numbers=as_numbers))
    return pa.table(arrays, names=names)


def _tensor_answer(data, keys, key_columns, groups, specs, outputs, rows):
    from gpuhash._common.arrays import as_tensor, to_kind
    from gpuhash.groupby.api import with_nan

    _, kind = as_tensor(data[keys[0]], f"column {keys[0]!r}")
    pick = None if rows is None else rows[0]
    answer = {}
    for name, (_, values, ok) in zip(keys, _group_keys(key_columns, groups, pick)):
        answer[name] = to_kind(with_nan(values, ok), kind)
    if rows is not None:
        answer[specs[0].output] = to_kind(rows[1], kind)
        return answer
    for spec, (values, ok) in zip(specs, outputs):
        answer[spec.output] = to_kind(with_nan(values, ok), kind)
    return answer


def _pandas_answer(answer, frame, keys: list[str], specs):
    """The answer as a pandas frame whose key columns, and results of a column's own kind
    (min, max, first, last, the top k), keep that column's pandas dtype where it is an
    extension one (nullable integers, pandas strings, Arrow-backed): Arrow's plain
    conversion would make a nullable int64 with nulls a float64."""
    import pandas as pd

    from gpuhash.groupby.specs import ROWS_A_GROUP

    own_kind = ("min", "max", "first", "last", *ROWS_A_GROUP)
    sources = {k: k for k in keys}
    sources.update({s.output: s.column for s in specs if s.name in own_kind})
    out = answer.to_pandas()
    for name, source in sources.items():
        if source not in frame.columns:
            continue
        dtype = frame[source].dtype
        if not isinstance(dtype, pd.api.extensions.ExtensionDtype) or isinstance(
                dtype, pd.CategoricalDtype) or not hasattr(dtype, "__from_arrow__"):
            continue
        column = answer.column(name)
        out[name] = pd.Series(dtype.__from_arrow__(column), index=out.index, name=name)
    return out
