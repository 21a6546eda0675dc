"""``gh.distributed.merge``: a join of two tables partitioned over the ranks of a process
group, each rank's part joined by ``gh.merge``.

Both sides' rows go to the rank that owns their key (distributed/key_hash.py: one hash of the
key values, equal on every rank for equal keys, whatever the two sides' key types; then
:func:`gpuhash.distributed.owner_of`), so that each key's rows from every rank meet at one
rank, which joins what it received with ``gh.merge``. Every kind of join is then exact rank
by rank: a key's matches and its unmatched rows are all at its owner. Rows whose key holds a
null match nothing (unless ``nulls_equal=True``, then nulls meet at one owner), so they stay
on their rank: a left, right or outer join still keeps them there, and no rank gathers every
null of the table. The result stays partitioned: each rank returns the rows it joined.

``broadcast="right"`` (or ``"left"``) sends that side whole to every rank instead and leaves
the other side's rows where they are: for a small side, one exchange of it rather than a
shuffle of both. Only a side whose unmatched rows the join drops can go (the right side of
an inner, left, semi or anti join; the left of an inner or right join), since every rank
would emit that side's unmatched rows again. ``broadcast="auto"`` (the default, as Spark's
and Dask's joins choose) broadcasts such a side when its whole, over every rank, is at most
BROADCAST_BYTES and at most the other side's share of one rank: each rank then receives fewer
bytes than a shuffle would move through it, and the larger side, and its key skew, stays put.
A ``validate`` other than many-to-many keeps the shuffle, which checks it exactly.
"""

from __future__ import annotations

from typing import Any, Literal

from gpuhash._common.phases import Phases
from gpuhash.distributed.frames import (
    EVERY_RANK,
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
from gpuhash.join.frames import POLARS

How = Literal["inner", "left", "right", "outer", "full", "semi", "anti", "left_anti",
              "right_anti"]
HOWS = ("inner", "left", "right", "outer", "full", "semi", "anti", "left_anti", "right_anti")
# the side a join may send whole to every rank: one whose unmatched rows it drops
BROADCASTABLE = {"right": ("inner", "left", "semi", "anti", "left_anti"),
                 "left": ("inner", "right", "right_anti")}
BROADCAST_BYTES = 1 << 30  # the most of a side every rank receives whole, under "auto"


@on_rank_cores
def merge(left: Any, right: Any, *, on: str | list[str] | None = None,
          left_on: str | list[str] | None = None, right_on: str | list[str] | None = None,
          how: How = "inner", suffixes: tuple[str | None, str | None] | None = None,
          nulls_equal: bool = False, indicator: bool | str = False,
          validate: str | None = None, sort: bool = False, coalesce: bool | None = None,
          broadcast: Literal["auto", "left", "right"] | None = "auto", group: Any = None,
          device: Any = None, explain: bool = False) -> Any:
    """Join two tables partitioned over the ranks of a process group; each rank returns its
    part of the join. Collective: every rank calls it with its own partitions (empty ones
    too) and the same options.

    Args:
        left, right: this rank's partitions: pyarrow Tables, or pandas or polars DataFrames;
            one kind, and one schema a side, on every rank.
        on, left_on, right_on, how, suffixes, nulls_equal, indicator, sort, coalesce: as in
            :func:`gpuhash.merge` (``how="cross"`` is not offered). ``sort`` orders each
            rank's part by the keys.
        validate: as in :func:`gpuhash.merge`; exact over every rank, since each key's rows
            meet at one rank (with ``broadcast``: only None or ``"m:m"``).
        broadcast: ``"right"`` / ``"left"``: send that side whole to every rank and leave
            the other where it is (see the module docstring); None: both sides go by key;
            ``"auto"``: a small side that may go is broadcast, else both go by key.
        group: the process group (None: the default group).
        device: where each rank matches keys (default: its GPU where it has one).
        explain: rank 0 prints each phase's time on every rank (the agreement, the owners,
            the exchange's steps, the local merge).

    Returns:
        This rank's part of the join, of the inputs' kind, with the columns and names
        :func:`gpuhash.merge` gives; the parts of every rank together hold the rows of
        ``gpuhash.merge`` on the concatenated partitions. A pandas part has the dtypes of
        that whole join (an int column a left join leaves empty anywhere is float64 on every
        rank).

    Raises:
        PeerError: on the ranks whose own input was sound, when another rank's failed.

    Example:
        >>> import pandas as pd
        >>> import gpuhash as gh
        >>> orders = pd.DataFrame({"id": [1, 2, 3, 1], "qty": [5, 6, 7, 8]})
        >>> names = pd.DataFrame({"id": [1, 3], "name": ["ada", "cy"]})
        >>> with gh.distributed.single_process_group():
        ...     part = gh.distributed.merge(orders, names, on="id", how="left", device="cpu")
        >>> part.sort_values("qty")["name"].fillna("-").tolist()
        ['ada', '-', 'cy', 'ada']
    """
    from gpuhash.join.key_names import key_names as _key_names

    require_group()
    what = "gh.distributed.merge"
    phases = Phases() if explain else None
    note = phases.done if phases is not None else (lambda *_: None)

    def check():
        if how not in HOWS:
            raise ValueError(f"how must be one of {', '.join(map(repr, HOWS))}, got {how!r} "
                             f"(a cross join is not offered: every pair of ranks would meet)")
        if broadcast not in (None, "auto", "left", "right"):
            raise ValueError(f"broadcast must be 'auto', 'left', 'right' or None, got "
                             f"{broadcast!r}")
        if broadcast in ("left", "right") and how not in BROADCASTABLE[broadcast]:
            raise ValueError(f"how={how!r} cannot broadcast the {broadcast} side: every rank "
                             f"would repeat its unmatched rows; use broadcast=None")
        if broadcast in ("left", "right") and validate not in (None, "m:m", "many_to_many"):
            raise ValueError(f"validate={validate!r} with broadcast={broadcast!r}: a rank sees "
                             f"only its part of the other side; use broadcast=None")
        kind = table_kind(left, "left")
        other = table_kind(right, "right")
        if kind != other:
            raise TypeError(f"left is a {kind} table but right is a {other} table; convert one")
        if kind == POLARS and on is None and left_on is None and right_on is None:
            raise ValueError("polars frames join on the columns named by on (or left_on and "
                             "right_on), as polars' join takes them; give on=...")
        tables = as_arrow(left, kind, "left"), as_arrow(right, kind, "right")
        keys = _key_names(tables[0].column_names, tables[1].column_names, on, left_on,
                          right_on, "full" if how == "outer" else how)
        options = (how, keys, suffixes, nulls_equal, indicator, validate, sort, coalesce,
                   broadcast, bool(explain))  # explain too: every rank must send its phases
        return ((kind, tables, keys), (describe(left, kind), describe(right, kind), options),
                (shape_of(left, kind, tables[0]), shape_of(right, kind, tables[1]),
                 (tables[0].nbytes, tables[1].nbytes)))

    (kind, tables, keys), shapes = agree(group, what, check)
    note("agreement")
    chosen = _broadcast_side(broadcast, how, validate, [sum(s[2][i] for s in shapes)
                                                        for i in (0, 1)], len(shapes))
    exchange = open_exchange(group)
    error, targets, models = None, [], [None, None]
    try:
        models = [model_of(frame, kind, [s[i] for s in shapes])
                  for i, frame in enumerate((left, right))]
        tables = [conform_table(table, unified_schema([s[i][0] for s in shapes], side))
                  for i, (table, side) in enumerate(zip(tables, ("left", "right")))]
        targets = _targets(tables, keys, chosen, nulls_equal, exchange)
        note("owners", f"broadcast {chosen}" if chosen else "both sides by key")
    except Exception as caught:  # raised on every rank by the exchange's header
        error = caught
    arrived = exchange_tables(exchange, tables, targets, what=what, error=error,
                              phases=phases)
    result, error = None, None
    try:
        import gpuhash as gh

        received = arrived.tables()
        note("tables received", " + ".join(f"{t.num_rows} rows" for t in received))
        result = gh.merge(as_kind(received[0], kind, models[0]),
                          as_kind(received[1], kind, models[1]),
                          on=on, left_on=left_on, right_on=right_on, how=how,
                          suffixes=suffixes, nulls_equal=nulls_equal, indicator=indicator,
                          validate=validate, sort=sort, coalesce=coalesce, device=device)
        note("local merge")
    except Exception as caught:  # validate refused a repeated key, memory: every rank raises
        error = caught
    return finish(exchange, result, error, kind, what, phases)


def _broadcast_side(broadcast, how: str, validate, totals: list[int], world: int):
    """The side sent whole to every rank ("left", "right") or None: as asked, or under
    "auto" the smaller side that may go, when it is small (the module docstring). ``totals``:
    each side's bytes over every rank; the same on every rank, so every rank chooses alike."""
    if broadcast != "auto":
        return broadcast
    if world == 1 or validate not in (None, "m:m", "many_to_many"):
        return None
    sides = sorted(((totals[i], side) for i, side in enumerate(("left", "right"))
                    if how in BROADCASTABLE[side]))
    for size, side in sides:
        other = totals[1 - ("left", "right").index(side)]
        if size <= BROADCAST_BYTES and size <= other / world:
            return side
    return None


def _targets(tables, keys, broadcast, nulls_equal, exchange) -> list:
    """Where each side's rows go: owner ranks by key hash, or every rank / none for a
    broadcast."""

    from gpuhash.distributed.key_hash import key_types, row_hashes

    if exchange.world == 1:  # every row is this rank's own: nothing to hash or send
        return [None, None]
    if broadcast == "right":
        return [None, EVERY_RANK]
    if broadcast == "left":
        return [EVERY_RANK, None]
    types = key_types([tables[0].schema.field(k).type for k in keys[0]],
                      [tables[1].schema.field(k).type for k in keys[1]])
    targets = []
    for table, names in zip(tables, keys):
        hashes, nulls = row_hashes(table, names, types, device=exchange.device)
        owners = owners_of(hashes, exchange.world)
        if not nulls_equal:  # a null key matches nothing: its row stays where it is
            owners[nulls.cpu().numpy()] = exchange.rank
        targets.append(owners)
    return targets
