"""The strategies that probe one build table: ``hash-table`` (the probe side at once or in
chunks) and ``cross-product``."""

from __future__ import annotations

from gpuhash.join.build import JoinBuild
from gpuhash.join.plan import JoinPlan
from gpuhash.join.sides import Side, cross


def run_hash_table(left: Side, right: Side, plan: JoinPlan, nulls_equal: bool):
    """One table on the plan's build side, probed by the other side (in ``plan.chunk_rows``
    chunks when set)."""
    build, probe = (left, right) if plan.build_side == "left" else (right, left)
    joined = JoinBuild._of(build, pooled=True)
    matches = joined._match(probe, plan.how, nulls_equal, plan.chunk_rows,
                            probe_is_left=plan.build_side != "left")
    joined._table.hand_back()  # its last probe has read its counters: nothing is pending
    return matches.assemble()


def run_cross(left: Side, right: Side, plan: JoinPlan, nulls_equal: bool):
    """Every pair of rows; the keys only give the lengths."""
    return cross(left.rows, right.rows, left.device)
