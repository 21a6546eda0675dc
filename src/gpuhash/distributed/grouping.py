"""``gh.distributed.groupby``: a group-by of a table partitioned over the ranks of a process
group; each rank returns the groups it owns (distributed/key_hash.py and
:func:`gpuhash.distributed.owner_of` name a group's owner by its key values).

Two plans, chosen by the aggregations (``method="auto"``):

* partials: each rank groups its own rows into partial aggregates that merge exactly
  (groupby/stream.py: count, size and sum add up, min, max, any and all take their kind
  again, first and last the first / last non-null partial, mean is a sum and a count, var
  and std a count, a mean and a var merged by Chan's formula), and only those travel, a row
  a group a rank, to the group's owner, which merges them. The traffic is the groups, not
  the rows.
* rows: each row goes to its group's owner, which groups what it received with
  ``gh.groupby``. The median, quantiles, nunique, corr and the top / bottom k need a
  group's rows together and take this plan; so can the others (``method="rows"``).

Rows and partials reach an owner in rank order, each rank's in its row order, so first and
last are those of the partitions concatenated in rank order, as in one group-by of it. With
``dropna=True`` the rows of null keys are dropped before anything travels; else each null
key is a group, owned by one rank.
"""

from __future__ import annotations

from typing import Any, Literal

from gpuhash._common.phases import Phases
from gpuhash.distributed.frames import (
    agree,
    as_arrow,
    as_kind,
    conform_table,
    describe,
    exchange_tables,
    finish,
    model_of,
    on_rank_cores,
    open_exchange,
    owners_of,
    require_group,
    shape_of,
    table_kind,
    unified_schema,
)
from gpuhash.join.frames import PANDAS, POLARS

Method = Literal["auto", "partials", "rows"]
METHODS = ("auto", "partials", "rows")
# aggregations whose partials merge exactly (groupby/stream.py); the others need the rows
PARTIALS_OK = ("count", "size", "sum", "min", "max", "any", "all", "first", "last", "mean",
               "var", "std")


@on_rank_cores
def groupby(table: Any, by: str | list[str], aggs: dict[str, Any], *, sort: bool = False,
            dropna: bool = False, method: Method = "auto", group: Any = None,
            device: Any = None, explain: bool = False) -> Any:
    """Group the rows of a table partitioned over the ranks of a process group by key
    columns and aggregate value columns; each rank returns the groups it owns. Collective:
    every rank calls it with its own partition (an empty one too) and the same options.

    Args:
        table: this rank's partition: a pyarrow Table, or a pandas or polars DataFrame; one
            kind and one schema on every rank.
        by: the key column name(s).
        aggs: value column -> aggregation(s), as :func:`gpuhash.groupby` takes them
            (``"sum"``, ``["mean", "std"]``, ``("quantile", 0.9)``, ...).
        sort: each rank's groups ordered by the keys (nulls last); else in no particular
            order.
        dropna: drop rows whose key is null; else a null key is a group of its own.
        method: ``"partials"`` (partial aggregates travel), ``"rows"`` (rows travel) or
            ``"auto"``: partials when every aggregation's merge exactly (count, size, sum,
            min, max, any, all, first, last, mean, var, std), else rows.
        group: the process group (None: the default group).
        device: where each rank groups (default: its GPU where it has one).
        explain: rank 0 prints each phase's time on every rank (the agreement, the partial
            aggregates and owners, the exchange's steps, the local group-by).

    Returns:
        This rank's groups, of the input's kind: the key columns, then one column per
        aggregation, named and typed as :func:`gpuhash.groupby` gives them for the
        concatenated partitions (pandas: the dtypes of that whole answer on every rank). The
        parts of every rank together hold each group once.

    Raises:
        PeerError: on the ranks whose own input was sound, when another rank's failed.

    Example:
        >>> import pyarrow as pa
        >>> import gpuhash as gh
        >>> sales = pa.table({"shop": ["a", "b", "a", "b", "a"], "eur": [1., 2., 3., 4., 8.]})
        >>> with gh.distributed.single_process_group():
        ...     part = gh.distributed.groupby(sales, "shop", {"eur": ["sum", "median"]},
        ...                                   sort=True, device="cpu")
        >>> part.to_pydict()
        {'shop': ['a', 'b'], 'eur_sum': [12.0, 6.0], 'eur_median': [3.0, 3.0]}
    """
    from gpuhash.groupby.specs import parse_aggs
    from gpuhash.groupby.tables import _names

    require_group()
    what = "gh.distributed.groupby"
    phases = Phases() if explain else None
    note = phases.done if phases is not None else (lambda *_: None)

    def check():
        kind = table_kind(table, "table")
        keys = _names(by)
        specs = parse_aggs(aggs, tuple(keys))
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}, got "
                             f"{method!r}")
        whole = sorted({s.name for s in specs if s.name not in PARTIALS_OK})
        if method == "partials" and whole:
            raise ValueError(f"method='partials' cannot compute {', '.join(whole)}: they need "
                             f"every row of a group at once; use method='rows' (or 'auto')")
        arrow = as_arrow(table, kind)
        wanted = list(dict.fromkeys(keys + [s.column for s in specs] + [
            s.parameter for s in specs if s.name == "corr"]))
        missing = [n for n in wanted if n not in arrow.column_names]
        if missing:
            role = "by" if missing[0] in keys else "aggs"
            raise KeyError(f"{role} names column {missing[0]!r}, which the table lacks; it "
                           f"has {arrow.column_names}")
        rows = method == "rows" or bool(whole)
        options = (keys, repr(aggs), sort, dropna, rows, bool(explain))  # (as merge's)
        arrow = arrow.select(wanted)
        return ((kind, arrow, keys, specs, rows), (describe(table, kind), options),
                shape_of(table, kind, arrow))

    (kind, arrow, keys, specs, rows), shapes = agree(group, what, check)
    note("agreement")
    exchange = open_exchange(group)
    error, sent, targets, plan, model = None, [], [], None, None
    try:
        model = model_of(table, kind, shapes)
        arrow = conform_table(arrow, unified_schema([s[0] for s in shapes], "table"))
        if rows:
            sent = arrow
        else:
            from gpuhash.groupby.stream import chunk_partials, partial_plan

            plan, asked = partial_plan(specs)
            sent = chunk_partials(arrow, keys, plan, asked, dropna=dropna, device=device)
        sent, targets = _routed(sent, keys, dropna, exchange)
        note("partials and owners" if not rows else "owners",
             "rows travel" if rows else f"{sent.num_rows} partial groups travel")
    except Exception as caught:  # raised on every rank by the exchange's header
        error = caught
    arrived = exchange_tables(exchange, [sent], [targets], what=what, error=error,
                              phases=phases)
    result, error = None, None
    try:
        received = arrived.tables()[0]
        note("tables received", f"{received.num_rows} rows")
        if rows:
            import gpuhash as gh

            result = gh.groupby(as_kind(received, kind, model), keys, aggs, sort=sort,
                                dropna=dropna, device=device)
        else:
            result = _merged(received, keys, specs, plan, kind, model, sort=sort,
                             dropna=dropna, device=device)
        note("local group-by")
    except Exception as caught:  # memory, say: every rank raises
        error = caught
    return finish(exchange, result, error, kind, what, phases)


def _routed(sent, keys: list[str], dropna: bool, exchange):
    """The rows to send (null keys dropped with ``dropna``) and their owners."""
    import pyarrow as pa

    from gpuhash.distributed.key_hash import key_types, row_hashes

    if exchange.world == 1:  # every row is this rank's own: kept here (the local group-by
        return sent, None  # drops null keys itself with dropna)
    types = key_types([sent.schema.field(k).type for k in keys])
    hashes, nulls = row_hashes(sent, keys, types, device=exchange.device, nan_is_null=True)
    if dropna and sent.num_rows:
        kept = ~nulls
        if not bool(kept.all()):
            sent = sent.filter(pa.array(kept.cpu().numpy()))
            hashes = hashes[kept]
    return sent, owners_of(hashes, exchange.world)


def _merged(partials, keys, specs, plan, kind, like, *, sort, dropna, device):
    """This rank's groups from the partial aggregates it received, as ``kind``."""
    from gpuhash.groupby.api import _default_device
    from gpuhash.groupby.stream import merge_partials
    from gpuhash.groupby.tables import _pandas_answer

    answer = merge_partials(partials, keys, specs, plan, sort=sort, dropna=dropna,
                            device=_default_device(device))
    if kind == PANDAS:  # the input's dtypes, where the answer keeps them, from an empty frame
        import pandas as pd

        empty = pd.DataFrame({n: pd.Series([], dtype=d) for n, d in like.items()})
        return _pandas_answer(answer, empty, keys, specs)
    if kind == POLARS:
        import polars

        return polars.from_arrow(answer)
    return answer
