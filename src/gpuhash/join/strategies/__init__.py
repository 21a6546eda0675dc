"""The join strategies, in one explicit registry: the planner (join/plan.py) names a strategy,
and ``STRATEGIES`` maps that name to its description and the function that runs it. Every
name the planner can choose is here (a test checks it); nothing registers itself on import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpuhash.join.strategies.parts import run_partitioned
from gpuhash.join.strategies.radix import run_radix
from gpuhash.join.strategies.stream import run_streamed
from gpuhash.join.strategies.table import run_cross, run_hash_table


@dataclass(frozen=True)
class Strategy:
    """A named way to run a join: ``run(left, right, plan, nulls_equal)`` takes the two
    checked sides (join/sides.py) and the plan, and returns the join's gather maps."""

    name: str
    description: str
    run: Callable


def _registry(*strategies: Strategy) -> Mapping[str, Strategy]:
    return MappingProxyType({strategy.name: strategy for strategy in strategies})


STRATEGIES: Mapping[str, Strategy] = _registry(
    Strategy("hash-table", "build a gpuhash table on the build side, probe it with the other",
             run_hash_table),
    Strategy("hash-table-chunked", "the build side's table probed by chunks of the probe side",
             run_hash_table),
    Strategy("hash-partitioned", "both sides split by key hash into parts joined one at a "
             "time", run_partitioned),
    Strategy("cross-product", "every pair of rows (how='cross'); keys only give the lengths",
             run_cross),
    Strategy("gpu-radix", "both sides split by key hash into partitions of about 1,500 build "
             "rows, each joined by one GPU block in a shared-memory table", run_radix),
    Strategy("out-of-core-streams", "host inputs joined on a GPU: the probe side copied in "
             "chunks that overlap the joins, results copied back (both sides split by key "
             "hash on the host when the build side passes the budget)", run_streamed),
)
