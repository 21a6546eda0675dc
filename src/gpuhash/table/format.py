"""The table format: a frozen description plus a few plain tensors, shared by both engines.

A table is stored as

* ``slots``: int64 words, shape ``(num_slots + 2, words_per_slot)``, in buckets of
  ``bucket_slots`` slots, 64 bytes wide in most tables: 8 slots of 8 bytes, or 4 of 16 (pair
  slots). HBM serves 64-byte pieces on the GPUs tuned for (a 32-byte read costs the DRAM traffic
  of 64 bytes), so a 64-byte bucket costs about the same per access as a 32-byte one and keeps
  more keys in their first bucket, the more so at high load. Two exceptions: tables small enough
  to live in L2, at loads up to 0.75, keep 32-byte buckets of 8-byte slots (from L2, bytes read
  are what a find costs), and pair tables meant to run above load 0.95 get 8-slot buckets (two
  choices of 4-slot buckets cannot be filled past about 0.976). The last two rows are the
  out-of-band slots for the two keys that equal an internal sentinel (so no key is refused).
* ``values``: only for the ``rows`` layout, shape ``(num_slots + 2, *value_shape)``; row ``i``
  belongs to slot ``i``.
* ``reserved_keys`` and ``reserved_values``: a MultiMap's copies of the two sentinel key
  values, which it may hold any number of (absent, None, while it holds none; table/reserved.py).
* ``overflow``: int32 words holding 16 filter bits per bucket. A key placed outside its first
  bucket sets the bit its hash fingerprint picks among its first bucket's low 8; a key placed
  past its second bucket also sets its fingerprint's bit among the second bucket's high 8. A
  miss whose bucket is full stops there unless its own bit is set.
* ``counts``: int64, ``COUNTS_LEN`` entries: ``[live entries, used bucket slots, rows that
  could not be placed (an error flag), stash fill]``. Used counts tombstones too but not the
  out-of-band slots, which live counts: so ``live <= used + 2``. Files written when counts
  had only the first two entries load with the others zero.

Layouts (chosen from key and value width):

* ``packed``: key and value share one 64-bit word (32-bit key + value of at most 4 bytes, or
  any key with no value). One CAS claims key and value together.
* ``pair``: a 16-byte slot, key word then value word (value of at most 8 bytes), in one
  sector. On sm_90 one 128-bit CAS claims key and value together; on sm_80 the key word is
  claimed by CAS and the value written after it.
* ``rows``: key words in the buckets, values in ``values`` addressed by slot.

The key part of a slot word is the low 32 bits for 32-bit keys, the whole word for 64-bit
keys. ``EMPTY`` is the all-ones key part, ``TOMBSTONE`` all-ones minus one; out-of-band slot 0
holds key ``EMPTY`` when its key part equals ``EMPTY`` (absent: ``TOMBSTONE``), slot 1 holds key
``TOMBSTONE`` when its key part equals ``TOMBSTONE`` (absent: ``EMPTY``).

Seeds are unsigned 64-bit ints; kernels take them as signed 64-bit arguments
(``TableSpec.signed_seed``), the same bits.

``load_state`` checks everything in a file (structure, every spec field, each tensor's dtype,
shape and contiguity, the counts' ranges) before an engine sees it: kernels trust the shapes a
spec implies. Anything that is not a table file, or is damaged, is one ``ValueError`` naming
the path.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import torch

from gpuhash._common.constants import DEFAULT_SEED

FORMAT_NAME = "gpuhash.table"
FORMAT_VERSION = 2  # 2: random bucket steps after the second choice
BUCKET_SLOTS = 4  # 64 bytes of 16-byte pair slots; 32 of 8-byte slots (small tables)
WIDE_BUCKET_SLOTS = 8  # 64 bytes of 8-byte slots, 128 of pair slots
# 8-slot buckets of 8-byte slots insert and miss faster than 4-slot ones in tables past L2
# (one 64-byte read either way, and fewer keys leave their first bucket), but a table in L2
# finds faster with 4-slot ones: from L2 the bytes read are what a find costs.
L2_TABLE_BYTES = 32 * 2**20  # L2-resident up to this size (the GPUs tuned for have more L2)
NARROW_MAX_LOAD = 0.75  # above it even small tables take 8-slot buckets (fewer overflows)
PAIR_WIDE_ABOVE = 0.95  # pair slots: 4-slot buckets cannot reach such loads
FILTER_BITS = 16  # per bucket: 8 "left its first bucket" + 8 "went past its second bucket"
SEED_LIMIT = 2**64  # seeds are unsigned 64-bit; kernels take them as int64 (signed_seed)
MAX_LOAD_FACTOR = 0.99
MAX_BUCKETS = 2**31 - 1  # bucket choice multiplies a 32-bit hash by the bucket count in 64 bits

KEY_DTYPES = (torch.int32, torch.uint32, torch.int64, torch.uint64)
PACKED, PAIR, ROWS = "packed", "pair", "rows"
# counts: [live entries, used bucket slots, rows that could not be placed, stash fill]
COUNTS_LEN = 4
LEGACY_COUNTS_LEN = 2  # files written before the last two counters; they load as zeros


@dataclass(frozen=True)
class TableSpec:
    """What a table stores and how: everything but the contents.

    Example:
        >>> import torch
        >>> spec = TableSpec(key_dtype=torch.int64, value_dtype=torch.float32, value_shape=(8,),
        ...                  num_buckets=1024)
        >>> spec.layout, spec.value_bytes
        ('rows', 32)
    """

    key_dtype: torch.dtype
    value_dtype: torch.dtype | None
    value_shape: tuple[int, ...]
    num_buckets: int
    seed: int = DEFAULT_SEED
    max_load_factor: float = 0.9
    bucket_slots: int = BUCKET_SLOTS
    # every row its own entry (a MultiMap's table: repeated keys kept); the bytes are the
    # same either way, but the operations, and so the kernels compiled, differ
    multi: bool = False

    def __post_init__(self) -> None:
        check_seed(self.seed)
        # a tuple whatever sequence was given: specs are hashed (sized_for is memoised)
        object.__setattr__(self, "value_shape", tuple(self.value_shape))

    @property
    def signed_seed(self) -> int:
        """The seed's 64 bits as a signed int, for kernel arguments (int64: a seed of 2**63 or
        more would overflow them)."""
        return self.seed - SEED_LIMIT if self.seed >= SEED_LIMIT // 2 else self.seed

    @property
    def key_bytes(self) -> int:
        return self.key_dtype.itemsize

    @property
    def bits_dtype(self) -> torch.dtype:
        """The signed dtype keys are handled as inside (their raw bits)."""
        return torch.int32 if self.key_bytes == 4 else torch.int64

    @functools.cached_property
    def value_bytes(self) -> int:
        if self.value_dtype is None:
            return 0
        return self.value_dtype.itemsize * math.prod(self.value_shape)

    @functools.cached_property
    def layout(self) -> str:
        if self.value_bytes == 0 or (self.key_bytes == 4 and self.value_bytes <= 4):
            return PACKED
        if self.value_bytes <= 8:
            return PAIR
        return ROWS

    @functools.cached_property
    def words_per_slot(self) -> int:
        return 2 if self.layout == PAIR else 1

    @property
    def value_offset(self) -> int:
        """Byte offset of the value inside a slot (packed and pair layouts)."""
        return 4 if self.layout == PACKED else 8

    @functools.cached_property
    def num_slots(self) -> int:
        return self.num_buckets * self.bucket_slots

    @property
    def key_mask(self) -> int:
        return (1 << (8 * self.key_bytes)) - 1

    @property
    def empty_key(self) -> int:
        return self.key_mask

    @property
    def tombstone_key(self) -> int:
        return self.key_mask - 1

    @property
    def max_entries(self) -> int:
        """How many bucket slots may be used before the table must grow or refuse: the floor
        of ``max_load_factor * num_slots`` computed exactly (see _load_ratio)."""
        num, den = _load_ratio(self.max_load_factor)
        return self.num_slots * num // den

    def sized_for(self, entries: int, *, bucket_slots: int | None = None) -> TableSpec:
        """This spec with the bucket width and count that hold ``entries`` keys at
        ``max_load_factor``. The width depends on the table's size (bucket_slots_for) unless
        ``bucket_slots`` forces one (benchmarks, and tables saved with another width).

        Example:
            >>> import torch
            >>> spec = TableSpec(key_dtype=torch.int32, value_dtype=None, value_shape=(),
            ...                  num_buckets=1).sized_for(1000)
            >>> spec.num_slots >= 1000 / spec.max_load_factor
            True
        """
        return _sized(self, max(entries, 1), bucket_slots)

    def bytes_per_slot(self) -> int:
        row = self.value_bytes if self.layout == ROWS else 0
        return 8 * self.words_per_slot + row


@functools.lru_cache(maxsize=256)
def _sized(spec: TableSpec, entries: int, bucket_slots: int | None) -> TableSpec:
    """TableSpec.sized_for, kept: a spec is immutable, and tables of one size are made again
    and again (a join makes one per call; small calls feel the host time)."""
    num, den = _load_ratio(spec.max_load_factor)
    slots = -(-entries * den // num)  # ceil(entries / max_load_factor), exactly
    width = bucket_slots or bucket_slots_for(spec, slots)
    sized = dataclasses.replace(spec, bucket_slots=width,
                                num_buckets=buckets_for(entries, spec.max_load_factor, width))
    # buckets_for's exact arithmetic already guarantees the capacity; this loop keeps the
    # promise (capacity >= entries) from resting on that alone
    while sized.max_entries < entries:
        sized = dataclasses.replace(sized, num_buckets=sized.num_buckets + 1)
    return sized


def bucket_slots_for(spec: TableSpec, slots: int) -> int:
    """Slots per bucket for a table of this layout and ``max_load_factor`` with about
    ``slots`` slots."""
    if spec.words_per_slot == 2:
        return WIDE_BUCKET_SLOTS if spec.max_load_factor > PAIR_WIDE_ABOVE else BUCKET_SLOTS
    small = fits_l2(slots, spec)
    return BUCKET_SLOTS if small and spec.max_load_factor <= NARROW_MAX_LOAD else WIDE_BUCKET_SLOTS


def fits_l2(slots: int, spec: TableSpec) -> bool:
    """Whether ``slots`` slots of this spec's width count as L2-resident (L2_TABLE_BYTES)."""
    return slots * spec.bytes_per_slot() <= L2_TABLE_BYTES


def buckets_for(entries: int, max_load_factor: float, bucket_slots: int) -> int:
    """The fewest buckets that hold ``entries`` keys without passing ``max_load_factor``."""
    num, den = _load_ratio(max_load_factor)
    return max(-(-max(entries, 1) * den // (num * bucket_slots)), 1)


@functools.lru_cache(maxsize=64)
def _load_ratio(max_load_factor: float) -> tuple[int, int]:
    """``max_load_factor`` as the exact ratio of the decimal it was written as. The float 0.7
    is 0.69999999999999996, so ``int(0.7 * 180)`` gives 125 where 126 is meant (1,166 of the
    capacities below 100,000 came out one short at 0.7); ``repr`` gives back "0.7"."""
    ratio = Fraction(repr(float(max_load_factor)))
    return ratio.numerator, ratio.denominator


def check_seed(seed: object) -> None:
    """Refuse a seed that is not an int in [0, 2**64) (the hash mixes 64 unsigned bits)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")


@dataclass
class TableState:
    """The tensors of one table; either engine operates on them in place.

    The first five fields are the table's contents (saved, copied, compared), and so are the
    two after them, a MultiMap's copies of the sentinel keys (None while it holds none). The
    rest belong to no file: ``spare``, zero words an engine made with the table for its caller
    (a join build's arrays); ``join_groups``, a join build's group array and its counters (the
    join engine's build sets them, its probe reads them); ``caches``, what an engine or the
    join keeps with the table between calls (launch arguments, locks, a stash, a pooled
    table's first-use words), by name, dropped with the state.
    """

    spec: TableSpec
    slots: torch.Tensor
    values: torch.Tensor | None
    overflow: torch.Tensor
    counts: torch.Tensor
    reserved_keys: torch.Tensor | None = None
    reserved_values: torch.Tensor | None = None
    spare: torch.Tensor | None = field(default=None, repr=False, compare=False)
    join_groups: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False,
                                                                   compare=False)
    caches: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def device(self) -> torch.device:
        return self.slots.device

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {"slots": self.slots, "overflow": self.overflow, "counts": self.counts}
        if self.values is not None:
            out["values"] = self.values
        if self.reserved_keys is not None:
            out["reserved_keys"] = self.reserved_keys
            if self.reserved_values is not None:
                out["reserved_values"] = self.reserved_values
        return out

    def key_view(self) -> torch.Tensor:
        """Key part of every slot as a 1-D int32/int64 view (raw bits)."""
        if self.spec.key_bytes == 4:
            return self.slots.view(torch.int32)[:, 0]
        return self.slots[:, 0]

    def value_view(self) -> torch.Tensor | None:
        """Value storage indexable by slot: a view into ``slots`` or the ``values`` tensor."""
        spec = self.spec
        if spec.value_dtype is None:
            return None
        if spec.layout == ROWS:
            return self.values
        raw = self.slots.view(torch.uint8)
        start = spec.value_offset
        cells = raw[:, start : start + spec.value_bytes].view(spec.value_dtype)
        return cells.view(raw.shape[0], *spec.value_shape)


def value_bytes_view(state: TableState) -> torch.Tensor | None:
    """Value storage as raw bytes, shape ``(rows, value_bytes)``: dtype-blind copies."""
    spec = state.spec
    if spec.value_dtype is None:
        return None
    if spec.layout == ROWS:
        return state.values.view(torch.uint8).view(state.values.shape[0], spec.value_bytes)
    start = spec.value_offset
    return state.slots.view(torch.uint8)[:, start : start + spec.value_bytes]


def as_value_bytes(values: torch.Tensor) -> torch.Tensor:
    """A contiguous batch of values as raw bytes, shape ``(n, value_bytes)``."""
    width = values.element_size() * math.prod(values.shape[1:])
    # flattened first: a contiguous tensor's dimensions of size 1 may carry any stride (an
    # expanded row), and a byte view needs the last stride to be 1
    flat = values.contiguous().reshape(-1)
    if flat.numel() == 1 and flat.stride(0) != 1:  # one element: torch keeps any stride
        flat = flat.as_strided((1,), (1,))
    return flat.view(torch.uint8).view(values.shape[0], width)


def gather_values(state: TableState, rows: torch.Tensor) -> torch.Tensor:
    """Copies of the values at the given slot rows, as ``(len(rows), *value_shape)``."""
    spec = state.spec
    raw = value_bytes_view(state)[rows]
    return raw.view(spec.value_dtype).view(rows.shape[0], *spec.value_shape)


def check_buckets(spec: TableSpec) -> None:
    """Refuse a table of more buckets than the format addresses."""
    if spec.num_buckets > MAX_BUCKETS:
        raise ValueError(f"capacity needs {spec.num_buckets} buckets; at most {MAX_BUCKETS}")


def filter_words(spec: TableSpec) -> int:
    """int32 words of a table's overflow bits (FILTER_BITS a bucket)."""
    return (spec.num_buckets * FILTER_BITS + 31) // 32


def state_bytes(spec: TableSpec) -> int:
    """Bytes a table of ``spec`` takes: its slots, value rows, filter bits and counters."""
    rows = spec.num_slots + 2
    values = rows * spec.value_bytes if spec.layout == ROWS else 0
    return 8 * rows * spec.words_per_slot + values + 4 * filter_words(spec) + 8 * COUNTS_LEN


def empty_state(spec: TableSpec, device: torch.device | str, *, spare_words: int = 0,
                filled: bool = True) -> TableState:
    """A table with no entries: every bucket slot EMPTY, both out-of-band slots absent. (The
    CPU engine's; the CUDA engine makes the same bytes in one launch.) ``spare_words``: zero
    int64 words for the caller, ``state.spare`` (the CUDA engine's ride in the
    table's allocation). ``filled`` is the CUDA engine's option (a join build fills there);
    here the table is always filled."""
    check_buckets(spec)
    device = torch.device(device)
    rows = spec.num_slots + 2
    slots = torch.full((rows, spec.words_per_slot), -1, dtype=torch.int64, device=device)
    state_values = None
    if spec.layout == ROWS:
        state_values = torch.zeros((rows, *spec.value_shape), dtype=spec.value_dtype,
                                   device=device)
    overflow = torch.zeros((filter_words(spec),), dtype=torch.int32, device=device)
    counts = torch.zeros((COUNTS_LEN,), dtype=torch.int64, device=device)
    state = TableState(spec, slots, state_values, overflow, counts)
    reset_out_of_band(state)
    if spare_words:
        state.spare = torch.zeros(spare_words, dtype=torch.int64, device=device)
    return state


def reset_out_of_band(state: TableState) -> None:
    """Mark both out-of-band slots absent (slot 0 holds TOMBSTONE, slot 1 holds EMPTY) in slots
    just filled with -1: every word all ones, the EMPTY key of either width, so slot 1 is
    absent already and only slot 0 is written (a fill is a launch on a GPU: small joins feel
    each one)."""
    n = state.spec.num_slots
    # fill_ of a one-row view: a Python scalar assigned by index would be copied from pageable
    # host memory on a GPU, slower than the fill kernel
    state.key_view().narrow(0, n, 1).fill_(
        _signed(state.spec.tombstone_key, state.spec.key_bytes))


def live_slots(state: TableState) -> torch.Tensor:
    """Bool per slot row: does it hold a live key. Engine-neutral (plain torch)."""
    spec = state.spec
    keys = state.key_view()
    empty = _signed(spec.empty_key, spec.key_bytes)
    tomb = _signed(spec.tombstone_key, spec.key_bytes)
    live = (keys != empty) & (keys != tomb)
    n = spec.num_slots
    live[n] = keys[n] == empty
    live[n + 1] = keys[n + 1] == tomb
    return live


def _signed(value: int, nbytes: int) -> int:
    bits = 8 * nbytes
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def copy_state(state: TableState, device: torch.device | str) -> TableState:
    """The same table on another device (always a copy)."""
    device = torch.device(device)

    def copied(tensor: torch.Tensor | None) -> torch.Tensor | None:
        return None if tensor is None else tensor.to(device, copy=True)

    return TableState(state.spec, copied(state.slots), copied(state.values),
                      copied(state.overflow), copied(state.counts),
                      copied(state.reserved_keys), copied(state.reserved_values))
