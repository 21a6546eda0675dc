"""How a join runs: the cost model that chooses a strategy, and the frozen plan it returns.

The planner names one of the strategies of the registry (join/strategies: STRATEGIES). The
model is deliberately small: estimated bytes decide what fits the memory budget (one table,
its probe side in chunks, both sides partitioned, or streamed from host memory), a row
threshold decides among what fits (``gpu-radix`` from RADIX_MIN_BUILD_ROWS a side, where
partitions beat one table), and every decision is written into the plan's ``why``.
``COST_NS``'s per-row figures only estimate the chosen plan's time for ``explain``
(``estimates["hash_table_ms"]``); they choose nothing.

Example:
    >>> import torch
    >>> plan = plan_join(1000, 100, how="inner", key_bytes=4, device=torch.device("cpu"))
    >>> plan.strategy, plan.build_side
    ('hash-table', 'right')
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import torch

from gpuhash.join import radix_format as _radix_format
from gpuhash.join.build_arrays import direct_entries, planned_array_words, ranked_words

HOWS = ("inner", "left", "right", "full", "semi", "anti", "cross")
SYMMETRIC = ("inner", "left", "right", "full")  # either side may be the build side

# nanoseconds per row, guesses: building a table entry, probing a row, writing an output pair
COST_NS = {"cuda": {"build": 0.5, "probe": 0.3, "pair": 0.1, "call": 20_000},
           "cpu": {"build": 60.0, "probe": 40.0, "pair": 5.0, "call": 200}}
LOAD = 0.5          # the table's load after growth, at worst: bytes per entry / LOAD
BUDGET_SHARE = 0.6  # of the free memory, when no memory_budget is given
# A join needing at most this share of a GPU's total memory takes BUDGET_SHARE of the total
# as its budget without asking the driver for free memory (cudaMemGetInfo costs a noticeable
# share of a small join's time); past it, the free memory decides.
SMALL_SHARE = 1 / 16
MIN_CHUNK_ROWS = 16
# The streamed join's copier queues STAGED_AHEAD chunks of probe keys on the GPU; beside the
# chunk being joined there may also be one on its way and one more the copier starts while
# the caller still holds the chunk it just finished: STAGED_CHUNKS, counted against the budget
STAGED_AHEAD = 2
STAGED_CHUNKS = STAGED_AHEAD + 2
MAX_PARTS = 1 << 10
# From this many build rows a GPU join runs by partitions in shared memory (gpu-radix) where
# both sides' partitions fit the budget: one table there is far past L2, so each probe row's
# read goes to HBM, and the partitions beat it at every build size tried from here up, most
# where build keys repeat. Below it one table wins: a build of distinct keys there may still
# probe through a ranked array that fits L2 (no build past this size tries one: ranked_words).
RADIX_MIN_BUILD_ROWS = 16_000_000
# A join whose working set (one match a probe row) is at least 1/FANOUT_SHARE of its budget is
# planned again with an estimate of its repeated keys (wants_fanout); a smaller one would need
# more matches a row than the sample costs to tell apart
FANOUT_SHARE = 16


@dataclass(frozen=True)
class JoinPlan:
    """The chosen strategy, its parameters and the reason, as ``explain=True`` shows it.
    Frozen: plans of small joins are shared between calls (shared_plan).

    Example:
        >>> import torch
        >>> plan = plan_join(10, 10, how="semi", key_bytes=8, device=torch.device("cpu"))
        >>> "hash-table" in str(plan)
        True
    """

    strategy: str
    how: str
    build_side: str
    device: str
    left_rows: int
    right_rows: int
    memory_budget: int
    chunk_rows: int | None = None
    parts: int = 1
    estimates: dict[str, float] = field(default_factory=dict)  # read-only by convention
    why: str = ""

    def __str__(self) -> str:
        extra = [f"chunks of {self.chunk_rows} probe rows"] if self.chunk_rows else []
        extra += [f"{self.parts} parts"] if self.parts > 1 else []
        detail = f" ({', '.join(extra)})" if extra else ""
        return (f"join how={self.how!r}: {self.strategy}{detail} on {self.device}, build side "
                f"{self.build_side} ({self.left_rows} x {self.right_rows} rows). {self.why}")


class _Draft:
    """A plan while the planner decides it: JoinPlan's fields, mutable; ``frozen()`` ends it."""

    def __init__(self, strategy: str, how: str, build_side: str, device: str, left_rows: int,
                 right_rows: int, memory_budget: int):
        self.strategy, self.how, self.build_side, self.device = strategy, how, build_side, device
        self.left_rows, self.right_rows, self.memory_budget = left_rows, right_rows, memory_budget
        self.chunk_rows: int | None = None
        self.parts = 1
        self.estimates: dict[str, float] = {}
        self.why = ""

    def frozen(self) -> JoinPlan:
        fields = dict(vars(self))
        fields["estimates"] = dict(self.estimates)
        return JoinPlan(**fields)


def free_bytes(device: torch.device) -> int:
    """Free memory of ``device`` in bytes (host memory for the CPU).

    Example:
        >>> import torch
        >>> free_bytes(torch.device("cpu")) > 0
        True
    """
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 34


@functools.cache
def total_bytes(device: torch.device) -> int:
    """Total memory of a GPU (asked once per device)."""
    return int(torch.cuda.get_device_properties(device).total_memory)


def default_budget(device: torch.device, need: int) -> int:
    """The memory budget of a join needing about ``need`` bytes, when none is given:
    BUDGET_SHARE of the free memory, or of the total memory when ``need`` is a small share of
    it (see SMALL_SHARE).

    Example:
        >>> import torch
        >>> default_budget(torch.device("cpu"), 1000) > 0
        True
    """
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        total = total_bytes(device)
        if need <= total * SMALL_SHARE:
            return int(total * BUDGET_SHARE)
    return int(free_bytes(device) * BUDGET_SHARE)


def table_bytes(rows: int, key_bytes: int, *, direct: bool = False) -> int:
    """Bytes a build table of ``rows`` entries may take: its slot (key and row id, packed in
    8 bytes or a pair of words) and a group counter a slot at the worst load, and the group
    array for the worst case (half again the rows: the join engine's build); with ``direct``,
    the direct array a GPU build tries before it too (join/kernels/join_build.cuh)."""
    array = 8 * planned_array_words(rows) if direct else 0
    row_bytes = 4 if rows < 2**30 else 8  # join/build.py: build_spec
    slot_bytes = 8 if key_bytes == 4 and row_bytes == 4 else 16  # packed or pair slots
    return (int(rows * (slot_bytes + row_bytes) / LOAD) + 64 + array
            + (rows + rows // 2 + 1) * row_bytes)


def probe_bytes_per_row(key_bytes: int, fanout: float) -> int:
    """Bytes one probe row needs while it is joined: its code, masks and output pairs."""
    return key_bytes + 8 + int(16 * max(1.0, fanout)) + 8


def wants_fanout(plan: JoinPlan, *, keys_on_gpu: bool) -> bool:
    """Whether a plan made with one match a probe row should be made again with an estimate
    of the repeated keys (join/fanout.py): a join of rows paired by key (not semi / anti, whose
    output is at most a row a probe row) whose working set is at least 1/FANOUT_SHARE of its
    budget, where more output a row could change its chunks. Keys on a GPU are sampled only
    where the plan already streams or partitions them (it synchronises a chunk anyway), so
    a join in one go keeps its one synchronisation.

    Example:
        >>> import torch
        >>> plan = plan_join(10, 10, how="inner", key_bytes=4, device=torch.device("cpu"),
        ...                  memory_budget=100)
        >>> wants_fanout(plan, keys_on_gpu=False)
        True
    """
    if plan.how not in SYMMETRIC or plan.strategy in ("cross-product", "gpu-radix"):
        return False  # (the radix join sizes its output from its own count)
    if keys_on_gpu:
        return bool(plan.chunk_rows) or plan.parts > 1
    need = plan.estimates["table_bytes"] + plan.estimates["probe_bytes"]
    return need * FANOUT_SHARE >= plan.estimates["budget_bytes"]


def _partition(plan: _Draft, build: int, probe: int, key_bytes: int, per_row: int,
               build_row: int = 0, *, direct: bool = False) -> int:
    """Parts for a build table past half the budget (each part's table, with ``build_row``
    more bytes a build row and its direct array where ``direct``, fits half of it), and
    chunk rows when a part's probe rows still pass the budget; returns the parts."""
    budget = plan.memory_budget
    parts = 2
    while parts < MAX_PARTS and (table_bytes(build // parts + 1, key_bytes, direct=direct)
                                 + (build // parts + 1) * build_row) > budget // 2:
        parts *= 2
    plan.parts = parts
    part_built = (table_bytes(build // parts + 1, key_bytes, direct=direct)
                  + (build // parts + 1) * build_row)
    if part_built + (probe // parts + 1) * per_row > budget:
        plan.chunk_rows = max(MIN_CHUNK_ROWS, (budget // 2) // per_row)
    return parts


def radix_bytes(build: int, probe: int, key_bytes: int, fanout: float = 1.0, *,
                how: str = "inner") -> int:
    """Bytes a radix join of these sides may need at once: a code and a row number a row of
    each side partitioned, the probe side twice (its two passes), and the output: pairs, or
    for semi / anti a mask and the rows.

    Example:
        >>> radix_bytes(10, 100, 4, how="semi") < radix_bytes(10, 100, 4)
        True
    """
    row = key_bytes + 4
    output = 9 * probe if how in ("semi", "anti") else int(16 * probe * max(1.0, fanout))
    return row * (build + 2 * probe) + output + build


@functools.cache
def block_shared_bytes(device: str) -> int:
    """The most shared memory one block may take on GPU ``device`` (an unbounded stand-in
    where CUDA is absent: a plan made without a GPU, as the CPU tests make them)."""
    if not torch.cuda.is_available():
        return 1 << 62
    return int(torch.cuda.get_device_properties(torch.device(device))
               .shared_memory_per_block_optin)


def _radix_fits(plan: _Draft, build: int, probe: int, key_bytes: int, fanout: float, *,
                build_fixed: bool) -> tuple[bool, str]:
    """Whether ``plan`` becomes a radix join (GPU, a build side of its own, at least
    RADIX_MIN_BUILD_ROWS rows a side, build rows within what the partitions are sized for,
    rows that fit 4-byte row numbers, a GPU that gives a block the shared memory of the
    partition passes' tiles, and the partitions within the budget), and why not where the
    sides' sizes alone would have taken it (else ""); sets its strategy and parts."""
    if (plan.device.split(":")[0] != "cuda" or build_fixed
            or not RADIX_MIN_BUILD_ROWS <= build <= _radix_format.max_build_rows(key_bytes)
            or not RADIX_MIN_BUILD_ROWS <= probe <= _radix_format.MAX_ROWS):
        return False, ""  # (a small probe side may not repay partitioning; not tried)
    declined = "the radix join (gpu-radix) is not taken: "
    shared = block_shared_bytes(plan.device)
    if shared < _radix_format.BLOCK_SHARED_BYTES:
        return False, (f"{declined}this GPU lets a block take {shared} bytes of shared "
                       f"memory, its partition passes {_radix_format.BLOCK_SHARED_BYTES}")
    need = radix_bytes(build, probe, key_bytes, fanout, how=plan.how)
    plan.estimates["radix_bytes"] = need
    if need > plan.memory_budget:
        return False, (f"{declined}both sides' partitions (~{need} bytes) pass the budget of "
                       f"{plan.memory_budget} bytes")
    plan.strategy = "gpu-radix"
    plan.parts = 1 << _radix_format.partition_bits(build, key_bytes)
    return True, ""


def shared_plan(left_rows: int, right_rows: int, *, how: str, key_bytes: int,
                device: torch.device) -> JoinPlan:
    """:func:`plan_join`'s plan with the default budget, one object shared by every call with
    the same arguments where the plan cannot depend on the free memory: a GPU join whose
    worst case (either side built, either probed) needs at most SMALL_SHARE of the GPU's
    memory, whose budget is then a share of the total (default_budget). Read-only: a small
    join's planning is a good part of its time. Others are planned afresh. The module's
    settings (COST_NS, the shares, the direct array's limits) are read when a size is first
    planned.

    Example:
        >>> import torch
        >>> plan = shared_plan(10, 10, how="inner", key_bytes=4, device=torch.device("cpu"))
        >>> plan.strategy
        'hash-table'
    """
    if device.type == "cuda" and max(left_rows, right_rows) <= _small_rows(device, key_bytes):
        return _small_gpu_plan(left_rows, right_rows, how, key_bytes, device)
    return plan_join(left_rows, right_rows, how=how, key_bytes=key_bytes, device=device)


@functools.lru_cache(maxsize=64)
def _small_rows(device: torch.device, key_bytes: int) -> int:
    """The most rows a side may have for shared_plan: the worst case of that many rows on
    both sides (either built, either probed) needs at most SMALL_SHARE of the GPU's memory.
    The need grows with the rows but where the arrays a build tries end (the direct array's
    near 2M rows, the ranked array's near 16M, where the need drops by at most 64 MB), so the
    limit found by bisection, once a device and key width, may pass the share by that much."""
    limit = total_bytes(device) * SMALL_SHARE
    per_row = probe_bytes_per_row(key_bytes, 1.0)
    low, high = 0, 1 << 40
    while low < high:
        rows = (low + high + 1) // 2
        if table_bytes(rows, key_bytes, direct=True) + rows * per_row <= limit:
            low = rows
        else:
            high = rows - 1
    return low


@functools.lru_cache(maxsize=256)
def _small_gpu_plan(left_rows: int, right_rows: int, how: str, key_bytes: int,
                    device: torch.device) -> JoinPlan:
    return plan_join(left_rows, right_rows, how=how, key_bytes=key_bytes, device=device)


def plan_join(left_rows: int, right_rows: int, *, how: str, key_bytes: int,
              device: torch.device, memory_budget: int | None = None, fanout: float = 1.0,
              build_fixed: bool = False, data_device: torch.device | None = None,
              input_bytes: int | None = None) -> JoinPlan:
    """Choose a strategy for joining ``left_rows`` with ``right_rows`` on ``device``.

    ``key_bytes`` is the table key's width (4 or 8), ``fanout`` the expected matches per
    probe row, ``build_fixed`` True when the build side is already chosen (a JoinBuild),
    ``data_device`` where the keys are when that is not ``device`` (host keys joined on a GPU:
    the budget is the GPU's, the keys come over in chunks, and the chunks waiting on the GPU
    count too: ``input_bytes`` a probe row, its key columns and null mask as they travel,
    default ``key_bytes``).

    Example:
        >>> import torch
        >>> p = plan_join(100, 5000, how="inner", key_bytes=4, device=torch.device("cpu"),
        ...               memory_budget=1000)
        >>> p.strategy, p.build_side, p.parts > 1
        ('hash-partitioned', 'left', True)
    """
    if memory_budget is not None and (isinstance(memory_budget, bool)
                                      or not isinstance(memory_budget, (int, float))
                                      or not memory_budget >= 1):
        raise ValueError(f"memory_budget must be a positive number of bytes, got "
                         f"{memory_budget!r}")
    plan = _Draft("hash-table", how, "right", str(device), left_rows, right_rows, 0)
    if how == "cross":
        plan.strategy, plan.why = "cross-product", "how='cross' pairs every row with every row."
        return plan.frozen()
    reasons = []
    if how in SYMMETRIC and not build_fixed and left_rows < right_rows:
        plan.build_side = "left"
        reasons.append("the left side is smaller, so it is the build side")
    build, probe = ((left_rows, right_rows) if plan.build_side == "left"
                    else (right_rows, left_rows))
    built = table_bytes(build, key_bytes, direct=device.type == "cuda")
    per_row = probe_bytes_per_row(key_bytes, fanout)
    budget = plan.memory_budget = (int(memory_budget) if memory_budget is not None
                                   else default_budget(device, built + probe * per_row))
    plan.estimates = {"table_bytes": built, "probe_bytes": probe * per_row,
                      "budget_bytes": budget, "fanout": round(fanout, 3)}
    if fanout > 1:
        reasons.append(f"about {fanout:.3g} build rows match a probe row (sampled: "
                       f"_join_fanout), {per_row} bytes a probe row while it is joined")
    kind = "cuda" if device.type == "cuda" else "cpu"
    costs = COST_NS[kind]
    plan.estimates["hash_table_ms"] = round(
        (costs["call"] + build * costs["build"] + probe * costs["probe"]
         + probe * fanout * costs["pair"]) / 1e6, 4)
    if kind == "cuda" and data_device is not None and data_device.type != "cuda":
        plan.strategy = "out-of-core-streams"
        # on the GPU besides the table: the build side's keys, copied over, and each probe
        # chunk's own key columns (wider than its code for several columns) and the chunks
        # waiting behind it
        row_input = key_bytes if input_bytes is None else input_bytes
        probe_row = per_row + max(0, row_input - key_bytes)
        streamed = probe_row + STAGED_CHUNKS * row_input
        built += build * row_input
        plan.estimates["table_bytes"] = built
        if built + probe * probe_row <= budget:
            reasons.append(f"the keys are in host memory; the table (~{built} bytes) and the "
                           f"probe (~{probe * probe_row} bytes) fit the budget of {budget} "
                           f"bytes, so both sides are copied over at once")
        elif built <= budget // 2:
            plan.chunk_rows = max(MIN_CHUNK_ROWS, (budget - built) // streamed)
            reasons.append(f"the keys are in host memory and the probe side (~"
                           f"{probe * probe_row} bytes) passes the budget of {budget} bytes, "
                           f"so it is copied over in chunks while the previous chunk is "
                           f"joined")
        else:
            parts = _partition(plan, build, probe, key_bytes, streamed, row_input,
                               direct=True)
            reasons.append(f"the keys are in host memory and the table (~{built} bytes) passes"
                           f" half the budget of {budget} bytes, so both sides are split by "
                           f"key hash on the host into {parts} parts, each streamed")
        plan.why = " ".join(r[0].upper() + r[1:] + "." for r in reasons)
        return plan.frozen()
    radix, radix_declined = _radix_fits(plan, build, probe, key_bytes, fanout,
                                        build_fixed=build_fixed)
    if radix:
        reasons.append(f"both sides' rows ({build} to build) are at least RADIX_MIN_BUILD_ROWS "
                       f"({RADIX_MIN_BUILD_ROWS}), where one table is far past L2, and both "
                       f"sides' partitions (~{plan.estimates['radix_bytes']} bytes) fit the "
                       f"budget of {budget} bytes: {plan.parts} partitions of about "
                       f"{build // plan.parts + 1} build rows, each joined in shared memory")
    elif built + probe * per_row <= budget:
        reasons.append(f"the table (~{built} bytes) and the probe (~{probe * per_row} bytes) "
                       f"fit the budget of {budget} bytes")
    elif built <= budget // 2 or build_fixed:
        plan.strategy = "hash-table-chunked"
        plan.chunk_rows = max(MIN_CHUNK_ROWS, (budget - built) // per_row)
        reasons.append(f"the probe side (~{probe * per_row} bytes) passes the budget of "
                       f"{budget} bytes, so it is streamed through the table in chunks")
    else:
        plan.strategy = "hash-partitioned"
        parts = _partition(plan, build, probe, key_bytes, per_row,
                           direct=device.type == "cuda")
        reasons.append(f"the table (~{built} bytes) passes half the budget of {budget} "
                       f"bytes, so both sides are split by key hash into {parts} parts")
    if radix_declined:
        reasons.append(radix_declined)
    entries = direct_entries(build) if device.type == "cuda" and plan.parts == 1 else 0
    words = ranked_words(build) if device.type == "cuda" and plan.parts == 1 else 0
    if entries:
        reasons.append(f"a build of 32-bit key codes first tries a direct array of {entries} "
                       f"entries, used where the build's keys are distinct and dense (one "
                       f"entry read a probe row)")
    elif words:
        reasons.append(f"a build of 32-bit key codes first tries a ranked array of "
                       f"{32 * words} bits, used where the build's keys are distinct and "
                       f"below that (a word and a row read a probe row)")
    plan.why = " ".join(r[0].upper() + r[1:] + "." for r in reasons)
    return plan.frozen()
