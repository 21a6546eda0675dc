"""The bytes of a CacheMap, shared by both engines: its spec, its tensors, and the rules both
engines follow to place, find and evict a key.

A cache of ``num_buckets`` buckets of ``bucket_slots`` slots keeps four arrays indexed by slot:
``keys`` (int64, the key's 64 bits; ``EMPTY_KEY`` where free), ``digests`` (uint8: 8 hash bits of
the key, 0 where free, so a search compares a bucket's digests, one byte a slot, before it
reads any key), ``scores`` (int64 holding the uint64 score) and ``values`` (the value rows).
``counts`` holds [live entries, 0, rows a kernel could not place (never expected), 0], the
HashMap's counter layout. ``pins`` (uint8 a slot) is 1 where the entry is locked
(``lock_keys``): it neither moves nor is evicted until unlocked or erased. It has one byte
more than slots, which no slot reads: locking and unlocking write absent keys' rows there,
so neither needs to learn on the host which keys were found.

Value rows may be split by place (``max_hbm_bytes``): the rows of the first ``hbm_slots`` slots
(whole buckets) in ``values`` on the GPU, the rest in ``host_values``, pinned host memory that
kernels read and write directly (unified addressing). Slot s's row is ``values[s]`` below
``hbm_slots``, else ``host_values[s - hbm_slots]``. Only a CUDA cache splits: on the CPU every
row is host memory already, so ``values`` holds them all.

A key lives in one of its two buckets, b1 and b2 (the core's gh_home: the same hash bits as a
HashMap's first and second bucket), and nowhere else: that pair is its bounded candidate set.
- A search scans b1's digests, then b2's.
- A new key takes the first free slot of whichever of b1, b2 has more free slots (b1 on a tie).
- When both are full and the cache holds fewer than ``relocation_limit(capacity)`` entries
  (the CPU engine counts before each row; a GPU write reads the count once per warp of its
  eviction launch, every resident warp about together, so one large call may carry the cache
  past the limit by as many moves as a wave of warps makes), an entry of b1 or b2 first moves
  to its own other bucket to make room: of 16 candidates a bucket (slots
  ``i * step + digest % step``, ``step = bucket_slots // 16``, b1's then b2's, i ascending),
  the one whose other bucket has the most free slots (the earliest on a tie; none if no
  other bucket has one) moves to that bucket's first free slot, and the new key takes the
  slot it left (INSERTED). With the move a cache fills further before its first eviction
  than with two choices alone.
- Otherwise (past the limit, or no candidate's other bucket has room) it replaces the lowest
  score among their slots (the earliest slot of b1, then of b2, on a tie), unless its own
  score is lower than that: then it is refused.
- A locked entry is no candidate to move and no candidate to evict: when every slot of both
  buckets is locked, the key is refused.
- A slot being rewritten holds ``LOCKED_KEY`` (the GPU engine's writers; searches skip it).
So the two largest uint64 keys (int64 -1 and -2) are reserved, as in HierarchicalKV.

These are the bytes both engines share. The CUDA engine also keeps an index from key to slot
(cache/cuda/engine.py, cache/kernels/cache_index.cuh), derived from ``keys``: it finds a key in
one 64-byte bucket instead of the digest walk, and is made again from ``keys`` when they were
changed outside the engines (the engines' ``refresh``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from gpuhash._common.constants import POLICY_CODES
from gpuhash._common.memory import require
from gpuhash.table.format import DEFAULT_SEED, check_seed

# a state's caches key, set once an entry may be locked (lock_keys ran since the cache was
# last found without locks): only then do the CUDA kernels read ``pins`` (a null pointer
# before, sparing every eviction the loads)
PINNED = "pinned"
EMPTY_KEY = -1   # uint64 2**64 - 1
LOCKED_KEY = -2  # uint64 2**64 - 2
CACHE_KEY_DTYPES = (torch.int64, torch.uint64)
BUCKET_SHAPES = (16, 32, 64, 128)
DEFAULT_BUCKET_SLOTS = 128
POLICIES = tuple(POLICY_CODES)  # a policy's code is its place here (constants.py)
# 2**33 slots: the CUDA index has a bucket for every two slots, picked by a 32-bit hash range
# (_common/kernels/common.cuh: gh_range, exact for at most 2**32 buckets). Its 50 bytes a slot of
# metadata would be 430 GB, past any one GPU's memory.
MAX_SLOTS = 2**33
RELOCATION_CANDIDATES = 16  # entries a bucket offers to move (cache.cuh: 16 lanes each)


def relocation_limit(capacity: int) -> int:
    """Entries below which a key with two full buckets moves an entry before evicting: past
    it (the last 1/256 of the slots) a move rarely finds room, and every evicting row would
    pay for looking.

    Example:
        >>> relocation_limit(1 << 20), relocation_limit(48)
        (1044480, 48)
    """
    return capacity - capacity // 256


@dataclass(frozen=True)
class CacheSpec:
    """What a cache stores and how.

    Example:
        >>> import torch
        >>> spec = CacheSpec(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(8,),
        ...                  num_buckets=4)
        >>> spec.capacity, spec.value_bytes
        (512, 32)
    """

    key_dtype: torch.dtype
    value_dtype: torch.dtype
    value_shape: tuple[int, ...]
    num_buckets: int
    bucket_slots: int = DEFAULT_BUCKET_SLOTS
    policy: str = "lru"
    seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if self.bucket_slots not in BUCKET_SHAPES:
            raise ValueError(f"bucket_slots must be one of {BUCKET_SHAPES}, "
                             f"got {self.bucket_slots!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")

    @property
    def capacity(self) -> int:
        return self.num_buckets * self.bucket_slots

    @property
    def key_bytes(self) -> int:
        return 8

    @property
    def value_bytes(self) -> int:
        return self.value_dtype.itemsize * math.prod(self.value_shape)

    @property
    def signed_seed(self) -> int:
        return self.seed - 2**64 if self.seed >= 2**63 else self.seed

    @staticmethod
    def buckets_for(capacity: int, bucket_slots: int) -> int:
        """Buckets holding at least ``capacity`` slots (never fewer than one)."""
        return max(1, -(-capacity // bucket_slots))


@dataclass
class CacheState:
    """The tensors of one cache; either engine operates on them in place."""

    spec: CacheSpec
    keys: torch.Tensor
    digests: torch.Tensor
    scores: torch.Tensor
    values: torch.Tensor
    counts: torch.Tensor
    pins: torch.Tensor  # 1 on a locked entry's slot, and a scratch byte (transient: not
    # saved, not copied)
    host_values: torch.Tensor | None = None
    # what an engine keeps with the cache between calls (the CUDA engine: its launch
    # arguments and its index from key to slot), by name; not part of the contents
    caches: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def device(self) -> torch.device:
        return self.keys.device

    @property
    def hbm_slots(self) -> int:
        """Slots whose value rows are in ``values`` (all of them unless the rows are split)."""
        return self.values.shape[0]

    def all_values(self, device: torch.device | None = None) -> torch.Tensor:
        """Every value row in slot order as one tensor on ``device`` (the cache's by
        default): ``values`` itself unless the rows are split, else a copy."""
        device = self.device if device is None else torch.device(device)
        if self.host_values is None:
            return self.values.to(device)
        return torch.cat([self.values.to(device), self.host_values.to(device)])

    def tensors(self, device: torch.device | None = None) -> dict[str, torch.Tensor]:
        """The cache's bytes by name, the value rows whole (``all_values`` on ``device``)."""
        return {"keys": self.keys, "digests": self.digests, "scores": self.scores,
                "values": self.all_values(device), "counts": self.counts}


def hbm_slots_for(spec: CacheSpec, device: torch.device, max_hbm_bytes: int | None) -> int:
    """Slots whose value rows fit in ``max_hbm_bytes`` of GPU memory, in whole buckets (every
    slot on the CPU, or without a limit)."""
    if max_hbm_bytes is None or device.type != "cuda":
        return spec.capacity
    bucket_bytes = spec.value_bytes * spec.bucket_slots
    return min(spec.capacity, max_hbm_bytes // bucket_bytes * spec.bucket_slots)


def _place_values(rows: torch.Tensor, device: torch.device, hbm_slots: int
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Value rows (any device) split into their GPU part and their pinned host part."""
    if hbm_slots >= rows.shape[0]:
        return rows.to(device, copy=True), None
    host = torch.empty(rows[hbm_slots:].shape, dtype=rows.dtype, pin_memory=True)
    host.copy_(rows[hbm_slots:])
    return rows[:hbm_slots].to(device, copy=True), host


def empty_cache(spec: CacheSpec, device: torch.device | str, *,
                max_hbm_bytes: int | None = None) -> CacheState:
    """A cache with every slot free, its value rows past ``max_hbm_bytes`` (CUDA only) in
    pinned host memory."""
    slots = spec.capacity
    if slots > MAX_SLOTS:
        raise ValueError(f"capacity {slots} is over the limit of {MAX_SLOTS} slots")
    device = torch.device(device)
    hbm = hbm_slots_for(spec, device, max_hbm_bytes)
    fix = "use a smaller capacity or value rows (or max_hbm_bytes), or free memory first"
    what = (f"capacity={slots} with value_dtype={spec.value_dtype} and "
            f"value_shape={spec.value_shape}")
    # keys, digests, scores and pins a slot (the CUDA index comes on top), and the rows here
    require(slots * 18 + hbm * spec.value_bytes, device, what=what, fix=fix)
    if hbm < slots:
        require((slots - hbm) * spec.value_bytes, torch.device("cpu"), what=what, fix=fix)
    host = None
    if hbm < slots:
        host = torch.zeros((slots - hbm, *spec.value_shape), dtype=spec.value_dtype,
                           pin_memory=True)
    return CacheState(
        spec,
        keys=torch.full((slots,), EMPTY_KEY, dtype=torch.int64, device=device),
        digests=torch.zeros((slots,), dtype=torch.uint8, device=device),
        scores=torch.zeros((slots,), dtype=torch.int64, device=device),
        values=torch.zeros((hbm, *spec.value_shape), dtype=spec.value_dtype, device=device),
        counts=torch.zeros((4,), dtype=torch.int64, device=device),
        pins=torch.zeros((slots + 1,), dtype=torch.uint8, device=device),
        host_values=host,
    )


def place_cache(spec: CacheSpec, tensors: dict[str, torch.Tensor], device: torch.device, *,
                max_hbm_bytes: int | None = None) -> CacheState:
    """A state on ``device`` holding copies of ``tensors`` (as ``CacheState.tensors`` names
    them, value rows whole), the rows split by ``max_hbm_bytes``."""
    values, host = _place_values(tensors["values"], device,
                                 hbm_slots_for(spec, device, max_hbm_bytes))
    moved = {name: tensors[name].to(device, copy=True)
             for name in ("keys", "digests", "scores", "counts")}
    pins = torch.zeros(tensors["keys"].shape[0] + 1, dtype=torch.uint8, device=device)
    return CacheState(spec, values=values, host_values=host, pins=pins, **moved)


def copy_cache(state: CacheState, device: torch.device | str, *,
               max_hbm_bytes: int | None = None) -> CacheState:
    """The same bytes on another device (value rows split there by ``max_hbm_bytes``)."""
    device = torch.device(device)
    return place_cache(state.spec, state.tensors("cpu" if device.type == "cpu" else None),
                       device, max_hbm_bytes=max_hbm_bytes)
