"""``gh.factorize`` and ``gh.groupby``: validation at the edge, then keys made group ids
(groupby/keys.py), then each aggregation (groupby/aggregate.py), then the caller's kind of
answer.

Tables (pyarrow, pandas, polars, dicts of arrays) come back as the same kind with the key
columns first; arrays come back as the same kind of array. Options a pandas or polars user
looks for, and what was chosen:

* ``sort=False`` (default): groups in no particular order, as polars and DuckDB give them (the
  order costs a sort of the groups); ``sort=True``: by the keys, nulls last, as pandas.
* ``dropna=False`` (default): a null key is a group of its own, as polars and SQL (pandas'
  ``dropna=False``); ``dropna=True`` drops those rows.
* Key columns come back as columns, not as an index (pandas' ``as_index=False``).
"""

from __future__ import annotations

from typing import Any

import torch

from gpuhash._common.arrays import as_tensor, gather, to_kind
from gpuhash._common.phases import Phases
from gpuhash.groupby.aggregate import (
    BY_ENGINE,
    Reductions,
    aggregate,
    correlation,
    top_rows,
    usable,
)
from gpuhash.groupby.columns import Column, tensor_column
from gpuhash.groupby.keys import factorize_columns
from gpuhash.groupby.specs import ROWS_A_GROUP, STRING_OK, AggSpec, parse_aggs

NARROW_CODES = ("median", "quantile", "var", "std", "corr")  # aggregations by engine passes
NUMBER_RESULTS = ("count", "size", "sum", "mean", "var", "std", "median", "quantile", "nunique",
                  "any", "all", "corr")  # results that are numbers whatever the column holds


def _key_arrays(keys: Any, name: str) -> tuple[list[torch.Tensor], str, bool]:
    several = isinstance(keys, (tuple, list))
    if several and keys and all(isinstance(k, (int, float, bool)) for k in keys):
        raise TypeError(f"{name} is a list of numbers: pass one array (torch.tensor([...]) or "
                        f"numpy.array([...])), or a tuple of arrays for several key columns")
    arrays = list(keys) if several else [keys]
    if not arrays:
        raise ValueError(f"{name} is an empty tuple: give at least one key array")
    tensors, kinds = [], []
    for i, array in enumerate(arrays):
        tensor, kind = as_tensor(array, f"{name}[{i}]" if several else name)
        if tensor.dim() != 1:
            raise ValueError(f"{name} must be 1-D arrays, got shape {tuple(tensor.shape)}")
        tensors.append(tensor.contiguous())  # the kernels read rows one after another
        kinds.append(kind)
    _same_rows(tensors, [f"{name}[{i}]" for i in range(len(tensors))] if several else [name])
    if len({t.device for t in tensors}) > 1:
        devices = sorted({str(t.device) for t in tensors})
        raise ValueError(f"{name} are on several devices: {devices}; move them to one")
    return tensors, kinds[0], several


def _same_rows(tensors: list[torch.Tensor], names: list[str]) -> None:
    lengths = {n: t.shape[0] for n, t in zip(names, tensors)}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"columns differ in length: {lengths}; every column needs one value "
                         f"a row")


def factorize(keys: Any, *, sort: bool = False, dropna: bool = False,
              valid: Any = None) -> tuple[Any, Any]:
    """A dense int64 group id for each row and the distinct keys, as ``pandas.factorize``.

    Args:
        keys: one array, or a tuple of arrays of one length (a multi-column key): integers,
            floats or bools; torch, NumPy, CuPy or DLPack, on any device.
        sort: number the groups in the keys' order (nulls last); else by first appearance.
        dropna: give rows with a null key the id -1 (pandas' sentinel); else a null key is a
            group of its own. Float NaN is a null; so is a row where ``valid`` is False.
        valid: an optional bool array per key array (or one for a single array).

    Returns:
        ``(ids, uniques)``: int64 ids of the keys' kind, and the distinct keys (a tuple of
        arrays for a tuple of keys) in id order. A null key's group holds NaN (floats) or 0.

    Example:
        >>> import torch
        >>> import gpuhash as gh
        >>> ids, uniques = gh.factorize(torch.tensor([30, 10, 30, 20]))
        >>> ids.tolist(), uniques.tolist()
        ([0, 1, 0, 2], [30, 10, 20])
    """
    columns, kind, several = _key_arrays(keys, "keys")
    valids = _valid_arrays(valid, columns, several)
    groups = factorize_columns(columns, valids, dropna=dropna,
                               order="sorted" if sort else "first")
    uniques = [with_nan(key, ok) for key, ok in zip(groups.keys, groups.key_valid)]
    uniques = [to_kind(u, kind) for u in uniques]
    return to_kind(groups.ids, kind), tuple(uniques) if several else uniques[0]


def _valid_arrays(valid: Any, columns: list[torch.Tensor], several: bool):
    if valid is None:
        return [None] * len(columns)
    given = list(valid) if several else [valid]
    if len(given) != len(columns):
        raise ValueError(f"valid has {len(given)} masks for {len(columns)} key arrays")
    out = []
    for i, (mask, column) in enumerate(zip(given, columns)):
        if mask is None:
            out.append(None)
            continue
        tensor, _ = as_tensor(mask, f"valid[{i}]")
        if tensor.dtype != torch.bool or tensor.shape != column.shape:
            raise ValueError(f"valid[{i}] must be a bool array of shape {tuple(column.shape)}, "
                             f"got {tensor.dtype} of shape {tuple(tensor.shape)}")
        out.append(tensor.to(column.device).contiguous())
    return out


def with_nan(values: torch.Tensor, ok: torch.Tensor | None) -> torch.Tensor:
    """Float results with NaN where ``ok`` is False (others as they are)."""
    if ok is None or not values.dtype.is_floating_point:
        return values
    return torch.where(ok, values, float("nan"))


def _is_table(data: Any) -> bool:
    module = type(data).__module__.split(".")[0]
    return isinstance(data, dict) or (module in ("pyarrow", "pandas", "polars")
                                      and type(data).__name__ in ("Table", "DataFrame"))


def _default_device(device: Any) -> torch.device:
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def groupby(data: Any, by: Any = None, aggs: Any = None, *, sort: bool = False,
            dropna: bool = False, device: str | torch.device | None = None,
            chunk_rows: int | None = None, explain: bool = False) -> Any:
    """Group rows by key columns and aggregate value columns.

    Args:
        data: a pyarrow Table, a pandas or polars DataFrame, or a dict of 1-D arrays; or key
            arrays (one array or a tuple of them), with the values as ``by``.
        by: the key column name(s) of a table; for key arrays, the values: one array (then
            ``aggs`` is a name or a list of names) or a dict of arrays.
        aggs: value column -> aggregation(s): ``"count"`` (non-null), ``"size"``, ``"sum"``,
            ``"mean"``, ``"min"``, ``"max"``, ``"var"``, ``"std"`` (ddof=1), ``"median"``,
            ``("quantile", q)``, ``"first"``, ``"last"`` (first / last non-null), ``"nunique"``,
            ``"any"``, ``"all"``, ``("corr", other)``, ``("top_k", k)`` / ``("bottom_k", k)``
            (the k largest / smallest values of each group, k rows a group). Nulls are
            skipped. See groupby/specs.py for names of the output columns.
        sort: groups in the keys' order (nulls last); else in no particular order.
        dropna: drop rows whose key is null; else a null key is a group.
        device: where the work runs (default: a GPU when there is one). Arrays stay where
            they are.
        chunk_rows: group a pyarrow, pandas or polars table this many rows at a time, the
            partial aggregates merged at the end (groupby/stream.py): for tables larger than
            the device's memory. The median, quantiles, nunique and corr are refused then.
        explain: print how the keys were grouped and what each phase cost.

    Returns:
        The input's kind of table: the key columns, then one column per aggregation. For key
        arrays: ``(uniques, results)``, the distinct keys as ``factorize`` gives them and a dict
        of result arrays (NaN where a group has no value to aggregate).

    Example:
        >>> import pyarrow as pa
        >>> import gpuhash as gh
        >>> t = pa.table({"k": ["a", "b", "a"], "v": [1, 2, 4]})
        >>> gh.groupby(t, "k", {"v": ["sum", "max"]}, sort=True, device="cpu").to_pydict()
        {'k': ['a', 'b'], 'v_sum': [5, 2], 'v_max': [4, 2]}
    """
    if chunk_rows is not None:
        return _chunked_groupby(data, by, aggs, sort=sort, dropna=dropna, device=device,
                                chunk_rows=chunk_rows, explain=explain)
    if _is_table(data):
        return _table_groupby(data, by, aggs, sort=sort, dropna=dropna, device=device,
                              explain=explain)
    return _array_groupby(data, by, aggs, sort=sort, dropna=dropna, explain=explain)


def _array_groupby(keys, values, aggs, *, sort, dropna, explain):
    columns, kind, several = _key_arrays(keys, "keys")
    if isinstance(values, dict):
        named = values
    elif values is None:
        raise TypeError("groupby of key arrays needs the values as its second argument")
    else:
        named = {"value": values}
        if isinstance(aggs, (str, tuple, list)):
            aggs = {"value": aggs}
    specs = parse_aggs(aggs)
    if any(s.name in ROWS_A_GROUP for s in specs):
        raise ValueError("top_k and bottom_k give several rows a group: group a table "
                         "(a dict of arrays) for them")
    table = {name: tensor_column(array, name, columns[0].device) for name, array in named.items()}
    _same_rows([columns[0], *(c.values for c in table.values())],
               ["keys", *(f"values[{name!r}]" for name in table)])
    results, _ = _run(columns, [None] * len(columns), table, specs, sort=sort, dropna=dropna,
                      explain=explain)
    groups, outputs = results
    uniques = [to_kind(with_nan(k, ok), kind) for k, ok in zip(groups.keys, groups.key_valid)]
    answer = {s.output: to_kind(with_nan(v, ok) if v.dtype.is_floating_point else v, kind)
              for s, (v, ok) in zip(specs, outputs)}
    return (tuple(uniques) if several else uniques[0]), answer


def _run(key_columns, key_valids, table: dict[str, Column], specs: list[AggSpec], *, sort,
         dropna, explain, prelude: tuple[str, float, str] | None = None,
         sampled: bool = True):
    """Group ids, then every aggregation: ((groups, [(values, valid)]), top-k rows or None).
    ``prelude``: a phase before this one (a host table's columns made tensors), for explain.
    ``sampled``: a long key column may take its sample's bounds where every aggregation is
    an engine pass (they leave out the rows outside them and count the rest); if the count
    falls short, the group-by runs again on the column's own bounds."""
    phases = Phases()
    if prelude is not None:
        phases.rows.append(prelude)
    _check_columns(table, specs)
    device = key_columns[0].device
    timed = explain and device.type == "cuda"  # phases timed to the GPU's finish: explain only
    if timed:
        torch.cuda.synchronize(device)
    by_engine = all(s.name in BY_ENGINE and Reductions.takes(table[s.column].values,
                                                            key_columns[0]) for s in specs)
    groups = factorize_columns(key_columns, key_valids, dropna=dropna,
                               order="sorted" if sort else "any", sparse=True,
                               sampled=sampled and by_engine and bool(specs))
    if timed:
        torch.cuda.synchronize(device)
    phases.done("keys", f"{groups.count} {'codes' if groups.decode else 'groups'} "
                        f"({groups.strategy})")
    outputs, rows, passes, shared = [], None, {}, {}
    codes = groups.ids if groups.offset == 0 and groups.ids.dtype == torch.int64 else None
    narrow = None
    for spec in specs:
        column = table[spec.column]
        if spec.column not in passes and Reductions.takes(column.values, groups.ids):
            passes[spec.column] = Reductions(groups.ids, groups.count, column.values,
                                             column.valid, groups.offset, shared,
                                             groups_hold_rows=True)
        if spec.column in passes and spec.name in BY_ENGINE:
            outputs.append(passes[spec.column].result(spec.name))
            continue
        if spec.name in NARROW_CODES:  # engine passes only: int32 codes will do
            narrow = groups.narrow_codes() if narrow is None else narrow
        codes = groups.codes() if codes is None and spec.name not in NARROW_CODES else codes
        if spec.name == "corr":
            other = table[spec.parameter]
            # the rows counted by its first pass serve every later pass (and the group-by's)
            outputs.append(correlation(narrow, groups.count, column.values, column.valid,
                                       other.values, other.valid,
                                       shared=shared))
        elif spec.name in ROWS_A_GROUP:
            use = usable(codes, column.values, column.valid)
            rows = top_rows(spec.parameter, codes, groups.count, column.values, use,
                            largest=spec.name == "top_k")
        else:
            q = spec.parameter if spec.name == "quantile" else None
            outputs.append(aggregate(spec.name, narrow if spec.name in NARROW_CODES else codes,
                                     groups.count, column.values, column.valid, q=q,
                                     reductions=passes.get(spec.column)))
    codes_seen = groups.count
    sampled_span = groups.sampled
    if groups.decode is not None:
        groups, outputs, rows, seen = _drop_empty_codes(groups, outputs, rows, passes, shared)
        if sampled_span and seen != key_columns[0].shape[0]:  # a key past the sample's span
            if explain:  # the wasted run shown too
                phases.done("aggregate", f"{seen} of {key_columns[0].shape[0]} rows in the "
                                         f"sample's span: grouped again on the column's own")
                print(f"groupby\n{phases}")
            return _run(key_columns, key_valids, table, specs, sort=sort, dropna=dropna,
                        explain=explain, prelude=prelude, sampled=False)
    if timed:
        torch.cuda.synchronize(device)
    how = ""
    if device.type == "cuda" and passes:  # which accumulators the reductions used
        from gpuhash.groupby.cuda.engine import accumulators

        how = f", {accumulators(codes_seen)}"
    phases.done("aggregate", f"{len(specs)} aggregations on {device}{how}")
    if explain:
        print(f"groupby\n{phases}")
    return (groups, outputs), rows


def _drop_empty_codes(groups, outputs, rows, passes, shared):
    """A sparse group-by's results narrowed to the codes that hold rows, and the rows those
    hold (short of the key column's where a sampled span left rows out)."""
    done = next(iter(passes.values()), None)
    if "rows" in shared:  # counted by an earlier pass
        held = shared["rows"]
    elif done is not None:
        held = done.get("counts")[2]
    else:
        codes = groups.codes()
        slot = torch.where(codes < 0, groups.count, codes)
        held = torch.bincount(slot, minlength=groups.count + 1)[:groups.count]
    present = held > 0
    # the one synchronisation: how many codes hold rows, and how many rows they hold
    count, seen = torch.stack([present.sum(), held.sum()]).tolist()
    if count == groups.count:  # every code holds rows: nothing to narrow
        used = torch.arange(count, device=held.device)
        return groups.compacted(used), outputs, rows, seen
    used = torch.nonzero_static(present, size=count).squeeze(1)
    narrowed = groups.compacted(used)
    outputs = [(gather(values, used), None if ok is None else gather(ok, used))
               for values, ok in outputs]
    if rows is not None:
        renumber = torch.cumsum(present, 0) - 1
        rows = (renumber[rows[0]], rows[1])
    return narrowed, outputs, rows, seen


def _check_columns(table: dict[str, Column], specs: list[AggSpec]) -> None:
    for spec in specs:
        for name in (spec.column, spec.parameter if spec.name == "corr" else None):
            if name is not None and name not in table:
                raise KeyError(f"aggs names column {name!r}, which the table lacks; it has "
                               f"{sorted(table)}")
        for name in (spec.column, spec.parameter if spec.name == "corr" else None):
            if name is None:
                continue
            column = table[name]
            if column.arrow_type is not None and (column.is_string or _temporal(column)) and (
                    spec.name not in STRING_OK):
                raise TypeError(f"aggs[{spec.column!r}]: {spec.name} of a column of "
                                f"{column.arrow_type} ({name!r}): only {', '.join(STRING_OK)} "
                                f"take strings, categories, dates and times")


def _temporal(column: Column) -> bool:
    import pyarrow as pa

    return pa.types.is_temporal(column.arrow_type)


def _table_groupby(data, by, aggs, *, sort, dropna, device, explain):
    from gpuhash.groupby.tables import group_table

    return group_table(data, by, aggs, sort=sort, dropna=dropna, device=device,
                       explain=explain, run=_run, default_device=_default_device)


def _chunked_groupby(data, by, aggs, *, sort, dropna, device, chunk_rows, explain):
    from gpuhash.groupby.stream import group_chunks
    from gpuhash.groupby.tables import _names
    from gpuhash.join.frames import PANDAS, POLARS, TENSORS, frame_kind, to_arrow

    if not isinstance(chunk_rows, int) or isinstance(chunk_rows, bool) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive int, got {chunk_rows!r}")
    kind = frame_kind(data, "data") if _is_table(data) else None
    if kind in (None, TENSORS):
        raise TypeError("chunk_rows takes a pyarrow, pandas or polars table; arrays and dicts "
                        "of arrays are grouped whole")
    table = to_arrow(data, kind)
    if table.num_rows <= chunk_rows:  # one chunk: the whole table's group-by
        return _table_groupby(data, by, aggs, sort=sort, dropna=dropna, device=device,
                              explain=explain)
    chunks = (table.slice(start, chunk_rows) for start in range(0, table.num_rows, chunk_rows))
    answer = group_chunks(chunks, _names(by), aggs, sort=sort, dropna=dropna,
                          device=_default_device(device), explain=explain)
    if kind == PANDAS:  # pandas' extension dtypes kept, as the whole table's group-by does
        from gpuhash.groupby.specs import parse_aggs
        from gpuhash.groupby.tables import _pandas_answer

        keys = _names(by)
        return _pandas_answer(answer, data, keys, parse_aggs(aggs, tuple(keys)))
    if kind == POLARS:
        import polars

        return polars.from_arrow(answer)
    return answer
