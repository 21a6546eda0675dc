"""A group-by of a table too large to hold on the device at once: chunks of rows grouped one
at a time into partial aggregates, which a last group-by of the partials merges.

Each aggregation is split into partials that merge exactly: ``count``, ``size`` and ``sum``
add up; ``min``, ``max``, ``any`` and ``all`` take their own kind again; ``first`` and
``last`` take the first / last non-null partial in chunk order; ``mean`` is a sum and a
count; ``var`` and ``std`` are a count, a mean and the squared distances from it of each
chunk, merged by Chan's formula (``M2 = sum(M2_i) + sum(n_i * (mean_i - mean)**2)``, the
groups' means matched back to their partials first, so no large terms cancel);
``top_k`` and ``bottom_k`` keep each chunk's k rows. ``median``, ``quantile``, ``nunique`` and
``corr`` need a group's rows together and are refused in chunks.

Example:
    >>> import pyarrow as pa
    >>> table = pa.table({"k": [1, 2, 1, 1], "v": [1.0, 5.0, 3.0, 8.0]})
    >>> chunks = [table.slice(0, 2), table.slice(2)]
    >>> group_chunks(chunks, ["k"], {"v": ["mean", "var", "last"]}, sort=True,
    ...              dropna=False, device="cpu").to_pydict()
    {'k': [1, 2], 'v_mean': [4.0, 5.0], 'v_var': [13.0, None], 'v_last': [8.0, 5.0]}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuhash._common.validity import arrow_array
from gpuhash.groupby.specs import ROWS_A_GROUP, AggSpec, parse_aggs

WHOLE_GROUPS = ("median", "quantile", "nunique", "corr")  # need a group's rows at once
SAME_KIND = ("min", "max", "any", "all", "first", "last")  # merged by the same aggregation
ADDED = ("count", "size", "sum")  # merged by a sum


def _partials(spec: AggSpec, index: int) -> dict[str, Any]:
    """Partial column name -> (value column, aggregation) of one requested output."""
    name = f"__{index}"
    if spec.name in ADDED or spec.name in SAME_KIND:
        return {f"{name}_{spec.name}": (spec.column, spec.name)}
    if spec.name == "mean":
        return {f"{name}_sum": (spec.column, "sum"), f"{name}_count": (spec.column, "count")}
    return {f"{name}_count": (spec.column, "count"), f"{name}_mean": (spec.column, "mean"),
            f"{name}_var": (spec.column, "var")}  # var and std


def partial_plan(specs: list[AggSpec]) -> tuple[list[dict[str, Any]], dict[str, list]]:
    """Each requested output's partial columns (``_partials``), and the aggregations a chunk's
    group-by computes for them: value column -> aggregation names, each once."""
    plan = [_partials(spec, i) for i, spec in enumerate(specs)]
    asked: dict[str, list] = {}
    for partial in plan:
        for column, agg in partial.values():
            if agg not in asked.setdefault(column, []):
                asked[column].append(agg)
    return plan, asked


def chunk_partials(chunk, by: list[str], plan, asked, *, dropna: bool, device: Any):
    """One chunk's (a pyarrow Table's) partial aggregates: the keys, then one column per
    partial under its own name (``partial_plan``)."""
    import pyarrow as pa

    import gpuhash as gh

    grouped = gh.groupby(chunk, by, {c: list(a) for c, a in asked.items()}, dropna=dropna,
                         device=device)
    renamed = {}
    for partial in plan:
        for name, (column, agg) in partial.items():
            alone = len(asked[column]) == 1 and column not in by  # groupby's naming
            renamed[name] = grouped.column(column if alone else f"{column}_{agg}")
    return pa.table({**{k: grouped.column(k) for k in by}, **renamed})


def group_chunks(chunks: Iterable, by: list[str], aggs: Any, *, sort: bool, dropna: bool,
                 device: Any, explain: bool = False):
    """The group-by of the rows of every chunk (pyarrow Tables) as one pyarrow Table."""
    import pyarrow as pa

    import gpuhash as gh

    specs = parse_aggs(aggs, tuple(by))
    whole = sorted({s.name for s in specs if s.name in WHOLE_GROUPS})
    if whole:
        raise ValueError(f"{', '.join(whole)} need every row of a group at once and are not "
                         f"computed in chunks: group the whole table (no chunk_rows), or ask "
                         f"for them in a call of their own on a table that fits")
    if any(s.name in ROWS_A_GROUP for s in specs):
        spec = specs[0]
        parts = [gh.groupby(chunk, by, {spec.column: (spec.name, spec.parameter)},
                            dropna=dropna, device=device) for chunk in chunks]
        merged = pa.concat_tables(parts) if parts else None
        return gh.groupby(merged, by, {spec.column: (spec.name, spec.parameter)}, sort=sort,
                          dropna=dropna, device=device, explain=explain)
    plan, asked = partial_plan(specs)
    parts = [chunk_partials(chunk, by, plan, asked, dropna=dropna, device=device)
             for chunk in chunks]
    if not parts:
        raise ValueError("no chunk to group: the input has no rows batch")
    partials = pa.concat_tables(parts, promote_options="permissive")
    return _merge(partials, by, specs, plan, sort=sort, dropna=dropna, device=device,
                  explain=explain)


def _with_distances(partials, by, spreads: list[int], *, dropna, device):
    """The partials with, for each variance asked for, each chunk's squared distances
    (``__i_m2``: (n_i - 1) var_i) and its mean's weighted squared distance from the group's
    mean (``__i_spread``: n_i (mean_i - mean)**2), Chan's two terms, each summed by the last
    group-by. The groups' means come from a first group-by of the partials, matched back to
    them by their keys (nulls matching nulls)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    import gpuhash as gh

    weighted = {}
    for i in spreads:
        n = pc.cast(partials.column(f"__{i}_count"), pa.float64())
        weighted[f"__{i}_weight"] = n
        weighted[f"__{i}_nm"] = pc.multiply(n, pc.fill_null(partials.column(f"__{i}_mean"),
                                                            0.0))
    for name, column in weighted.items():
        partials = partials.append_column(name, column)
    means = gh.groupby(partials, by, {name: "sum" for name in weighted}, dropna=dropna,
                       device=device)
    columns = {k: means.column(k) for k in by}
    for i in spreads:
        columns[f"__{i}_groupmean"] = pc.divide(means.column(f"__{i}_nm"),
                                                means.column(f"__{i}_weight"))
    matched = gh.merge(partials, pa.table(columns), on=by, how="left", nulls_equal=True,
                       device=device)
    for i in spreads:
        n = matched.column(f"__{i}_weight")
        apart = pc.subtract(pc.fill_null(matched.column(f"__{i}_mean"), 0.0),
                            pc.fill_null(matched.column(f"__{i}_groupmean"), 0.0))
        spread = pc.multiply(n, pc.multiply(apart, apart))
        m2 = pc.multiply(pc.fill_null(matched.column(f"__{i}_var"), 0.0),
                         pc.max_element_wise(pc.subtract(n, 1.0), 0.0))
        matched = matched.append_column(f"__{i}_spread", spread)
        matched = matched.append_column(f"__{i}_m2", m2)
    return matched


def _merge(partials, by, specs, plan, *, sort, dropna, device, explain):
    """The last group-by: each requested output from its partials."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    import gpuhash as gh

    spreads = [i for i, spec in enumerate(specs) if spec.name in ("var", "std")]
    if spreads:
        partials = _with_distances(partials, by, spreads, dropna=dropna, device=device)
    final = {}
    for i, (spec, partial) in enumerate(zip(specs, plan)):
        for name in partial:
            agg = name.rsplit("_", 1)[1]
            final[name] = "sum" if agg in ADDED or agg == "sum" else agg
        if spec.name in ("var", "std"):
            for name in (f"__{i}_m2", f"__{i}_spread"):
                final[name] = "sum"
            final[f"__{i}_count"] = "sum"
            final.pop(f"__{i}_mean")
            final.pop(f"__{i}_var")
    merged = gh.groupby(partials, by, final, sort=sort, dropna=dropna, device=device,
                        explain=explain)
    columns = {k: merged.column(k) for k in by}
    for i, spec in enumerate(specs):
        if spec.name in ADDED or spec.name in SAME_KIND:
            columns[spec.output] = merged.column(f"__{i}_{spec.name}")
        elif spec.name == "mean":
            total = pc.cast(merged.column(f"__{i}_sum"), pa.float64())
            count = merged.column(f"__{i}_count")
            columns[spec.output] = pc.if_else(pc.greater(count, 0),
                                              pc.divide(total, pc.cast(count, pa.float64())),
                                              pa.scalar(None, pa.float64()))
        else:
            n = np.asarray(merged.column(f"__{i}_count"), dtype=np.float64)
            m2 = np.asarray(merged.column(f"__{i}_m2"), dtype=np.float64)
            spread = np.asarray(merged.column(f"__{i}_spread"), dtype=np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                var = (m2 + spread) / (n - 1)
            out = np.sqrt(np.maximum(var, 0.0)) if spec.name == "std" else var
            columns[spec.output] = arrow_array(out, n >= 2)
    return pa.table(columns)


def merge_partials(partials, by: list[str], specs: list[AggSpec], plan, *, sort: bool,
                   dropna: bool, device: Any, explain: bool = False):
    """The requested outputs (a pyarrow Table) from partial aggregates: chunks' (or
    ``combine_partials``') tables concatenated."""
    return _merge(partials, by, specs, plan, sort=sort, dropna=dropna, device=device,
                  explain=explain)


def combine_partials(partials, by: list[str], specs: list[AggSpec], plan, *, dropna: bool,
                     device: Any):
    """Partial aggregates of several chunks (their tables concatenated) merged into one
    table of the same columns, a group a row: a level of a tree reduction, whose result
    combines again or ends in ``merge_partials``. A variance's partials (count, mean, var)
    merge by Chan's formula as ``_merge`` does, then become a count, a mean and a var
    again."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    import gpuhash as gh

    spreads = [i for i, spec in enumerate(specs) if spec.name in ("var", "std")]
    if spreads:
        partials = _with_distances(partials, by, spreads, dropna=dropna, device=device)
    final = {}
    for i, partial in enumerate(plan):
        if i in spreads:
            final.update(dict.fromkeys((f"__{i}_count", f"__{i}_nm", f"__{i}_m2",
                                        f"__{i}_spread"), "sum"))
            continue
        for name in partial:
            agg = name.rsplit("_", 1)[1]
            final[name] = "sum" if agg in ADDED else agg  # a mean's sum and count add up
    merged = gh.groupby(partials, by, final, dropna=dropna, device=device)
    columns = {k: merged.column(k) for k in by}
    for i, partial in enumerate(plan):
        if i not in spreads:
            columns.update({name: merged.column(name) for name in partial})
            continue
        count = merged.column(f"__{i}_count")
        n = np.asarray(count, dtype=np.float64)
        total = np.asarray(merged.column(f"__{i}_nm"), dtype=np.float64)
        m2 = np.asarray(merged.column(f"__{i}_m2"), dtype=np.float64)
        spread = np.asarray(merged.column(f"__{i}_spread"), dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean, var = total / n, (m2 + spread) / (n - 1)
        columns[f"__{i}_count"] = pc.cast(count, pa.int64())
        columns[f"__{i}_mean"] = arrow_array(mean, n >= 1)
        columns[f"__{i}_var"] = arrow_array(var, n >= 2)
    return pa.table(columns)
