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
import hashlib
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
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

    The first five fields are the table's contents (saved, copied, compared). The rest belong
    to no file: ``spare``, zero words an engine made with the table for its caller (a join
    build's arrays); ``join_groups``, a join build's group array and its counters (the join
    engine's build sets them, its probe reads them); ``caches``, what an engine or the join
    keeps with the table between calls (launch arguments, locks, a stash, a pooled table's
    first-use words), by name, dropped with the state.
    """

    spec: TableSpec
    slots: torch.Tensor
    values: torch.Tensor | None
    overflow: torch.Tensor
    counts: torch.Tensor
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


# --- save / load -------------------------------------------------------------------------

def _dtype_name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


def _checksum(tensors: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(name.encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def save_state(state: TableState, path: str | Path, *, kind: str) -> None:
    """Write the tensors with a format version and a checksum that ``load_state`` verifies."""
    spec = state.spec
    tensors = {name: t.detach().cpu().contiguous() for name, t in state.tensors().items()}
    payload = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "kind": kind,
        "spec": {
            "key_dtype": _dtype_name(spec.key_dtype),
            "value_dtype": _dtype_name(spec.value_dtype),
            "value_shape": list(spec.value_shape),
            "num_buckets": spec.num_buckets,
            "seed": spec.seed,
            "max_load_factor": spec.max_load_factor,
            "bucket_slots": spec.bucket_slots,
        },
        "tensors": tensors,
        "checksum": _checksum(tensors),
    }
    torch.save(payload, str(path))


def load_state(path: str | Path, device: torch.device | str, *, kind: str) -> TableState:
    """Read a table written by ``save_state``. Files of another kind or version are refused
    as such; anything else that is not a sound gpuhash table file, one ``ValueError`` naming
    the path. A missing or unreadable file raises its ``OSError``."""
    try:
        payload = _read_payload(path)
        check_kind(payload, kind, path)
        _check_keys("the file", payload, _PAYLOAD_KEYS)
        # type checks first: a crafted file may hold tensors where these compare by element
        if not isinstance(payload["format"], str) or payload["format"] != FORMAT_NAME:
            raise _Damaged(f"its format marker is {payload['format']!r}, not {FORMAT_NAME!r}")
        if not _is_int(payload["version"]) or payload["version"] != FORMAT_VERSION:
            raise ValueError(f"{path} has format version {payload['version']!r}; "
                             f"this gpuhash reads version {FORMAT_VERSION}")
        if not isinstance(payload["kind"], str) or payload["kind"] != kind:
            raise ValueError(f"{path} holds a {payload['kind']}, not a {kind}")
        spec = dataclasses.replace(_spec_from(payload["spec"]), multi=kind == "MultiMap")
        tensors = _checked_tensors(spec, payload["tensors"])
        if not isinstance(payload["checksum"], str):
            raise _Damaged(f"its checksum is a {type(payload['checksum']).__name__}, not a str")
        if _checksum(tensors) != payload["checksum"]:
            raise ValueError(f"{path} failed its checksum: the file is corrupt")
        counts = _checked_counts(spec, tensors["counts"])
    except _Damaged as exc:
        raise ValueError(f"{path} is not a gpuhash table file or is damaged: {exc}"
                         ) from exc.__cause__
    device = torch.device(device)
    return TableState(
        spec,
        tensors["slots"].to(device),
        tensors["values"].to(device) if "values" in tensors else None,
        tensors["overflow"].to(device),
        counts.to(device),
    )


# --- load_state's checks: kernels index by the shapes the spec implies, so a file must match
# them exactly before an engine sees it ------------------------------------------------------

_ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive
_PAYLOAD_KEYS = ("format", "version", "kind", "spec", "tensors", "checksum")
_SPEC_KEYS = ("key_dtype", "value_dtype", "value_shape", "num_buckets", "seed",
              "max_load_factor", "bucket_slots")


def check_kind(payload: object, kind: str, path: str | Path) -> None:
    """Refuse a gpuhash file of another kind by name, before its fields are checked as this
    kind's (which would call it damaged)."""
    if isinstance(payload, dict) and isinstance(payload.get("kind"), str) and (
            payload.get("format") == FORMAT_NAME and payload["kind"] != kind):
        raise ValueError(f"{path} holds a {payload['kind']}, not a {kind}")


class _Damaged(Exception):
    """What is wrong with a file; load_state adds the path."""


def _read_payload(path: str | Path) -> object:
    # open() first: a missing or unreadable file keeps its own OSError
    with open(path, "rb") as file:
        head = file.read(len(_ZIP_MAGIC))
        if head != _ZIP_MAGIC:
            raise _Damaged("empty file" if not head else "not a torch.save archive")
        file.seek(0)
        try:
            return torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:  # truncated archives, foreign pickles: all mean the same here
            raise _Damaged(f"torch.load cannot read it ({type(exc).__name__})") from exc


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_keys(where: str, raw: object, keys: tuple[str, ...]) -> None:
    if not isinstance(raw, dict):
        raise _Damaged(f"{where} holds a {type(raw).__name__}, not a dict")
    missing = [key for key in keys if key not in raw]
    if missing:
        raise _Damaged(f"{where} lacks {', '.join(missing)}")
    unknown = sorted(repr(key) for key in raw if key not in keys)
    if unknown:
        raise _Damaged(f"{where} has unexpected entries {', '.join(unknown)}")


def _dtype_from(field: str, name: object) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise _Damaged(f"{field} is {name!r}, not the name of a torch dtype")
    return dtype


def _spec_from(raw: object) -> TableSpec:
    _check_keys("spec", raw, _SPEC_KEYS)
    key_dtype = _dtype_from("spec.key_dtype", raw["key_dtype"])
    if key_dtype not in KEY_DTYPES:
        raise _Damaged(f"spec.key_dtype is {raw['key_dtype']!r}; keys are int32, uint32, "
                       f"int64 or uint64")
    value_dtype = raw["value_dtype"]
    if value_dtype is not None:
        value_dtype = _dtype_from("spec.value_dtype", value_dtype)
    shape = raw["value_shape"]
    if not isinstance(shape, (list, tuple)) or not all(_is_int(d) and d >= 1 for d in shape):
        raise _Damaged(f"spec.value_shape is {shape!r}, not a list of positive ints")
    buckets = raw["num_buckets"]
    if not _is_int(buckets) or not 1 <= buckets <= MAX_BUCKETS:
        raise _Damaged(f"spec.num_buckets is {buckets!r}, not an int in [1, {MAX_BUCKETS}]")
    width = raw["bucket_slots"]
    if not _is_int(width) or width not in (BUCKET_SLOTS, WIDE_BUCKET_SLOTS):
        raise _Damaged(f"spec.bucket_slots is {width!r}, not {BUCKET_SLOTS} or "
                       f"{WIDE_BUCKET_SLOTS}")
    load = raw["max_load_factor"]
    # written this way round so that NaN fails too
    if not isinstance(load, (int, float)) or isinstance(load, bool) or not (
            0 < load <= MAX_LOAD_FACTOR):
        raise _Damaged(f"spec.max_load_factor is {load!r}, not a number in "
                       f"(0, {MAX_LOAD_FACTOR}]")
    seed = raw["seed"]
    if not _is_int(seed) or not 0 <= seed < SEED_LIMIT:
        raise _Damaged(f"spec.seed is {seed!r}, not an int in [0, 2**64)")
    return TableSpec(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=tuple(shape),
                     num_buckets=buckets, seed=seed, max_load_factor=float(load),
                     bucket_slots=width)


def _checked_tensors(spec: TableSpec, raw: object) -> dict[str, torch.Tensor]:
    """The file's tensors, each of the dtype, shape and layout ``spec`` implies."""
    rows = spec.num_slots + 2
    expected = {
        "slots": (torch.int64, (rows, spec.words_per_slot)),
        "overflow": (torch.int32, ((spec.num_buckets * FILTER_BITS + 31) // 32,)),
        "counts": (torch.int64, None),  # two lengths: _checked_counts
    }
    if spec.layout == ROWS:
        expected["values"] = (spec.value_dtype, (rows, *spec.value_shape))
    _check_keys("tensors", raw, tuple(expected))
    tensors, storages = {}, set()
    for name, (dtype, shape) in expected.items():
        tensor = raw[name]
        if not isinstance(tensor, torch.Tensor):
            raise _Damaged(f"tensors.{name} is a {type(tensor).__name__}, not a tensor")
        if tensor.layout != torch.strided or tensor.device.type != "cpu":
            raise _Damaged(f"tensors.{name} is a {tensor.layout} tensor on {tensor.device}, "
                           f"not a dense one on the cpu")
        if tensor.dtype != dtype:
            raise _Damaged(f"tensors.{name} has dtype {tensor.dtype}, not {dtype}")
        if shape is None:
            shape = (COUNTS_LEN,) if tensor.shape == (COUNTS_LEN,) else (LEGACY_COUNTS_LEN,)
        if tuple(tensor.shape) != shape:
            raise _Damaged(f"tensors.{name} has shape {tuple(tensor.shape)}, not {shape} "
                           f"(spec: {spec.num_buckets} buckets of {spec.bucket_slots} slots)")
        if not tensor.is_contiguous():
            raise _Damaged(f"tensors.{name} is not contiguous")
        # engines write in place: tensors sharing memory would overwrite each other
        storage = tensor.untyped_storage().data_ptr()
        if storage in storages:
            raise _Damaged(f"tensors.{name} shares its memory with another tensor")
        storages.add(storage)
        tensors[name] = tensor.detach()
    return tensors


def _checked_counts(spec: TableSpec, counts: torch.Tensor) -> torch.Tensor:
    """``counts`` extended to COUNTS_LEN, once its values are possible for ``spec``."""
    if counts.shape[0] < COUNTS_LEN:
        counts = torch.cat([counts, counts.new_zeros(COUNTS_LEN - counts.shape[0])])
    live, used, unplaced, stash = counts.tolist()
    # used counts bucket slots (tombstones too); live also counts the two out-of-band slots
    if not 0 <= used <= spec.num_slots:
        raise _Damaged(f"counts says {used} bucket slots are used, not in [0, {spec.num_slots}]")
    if not 0 <= live <= used + 2:
        raise _Damaged(f"counts says {live} live entries, not in [0, {used} used + 2]")
    if unplaced < 0 or stash < 0:
        raise _Damaged(f"counts holds negative counters {counts.tolist()}")
    return counts


def copy_state(state: TableState, device: torch.device | str) -> TableState:
    """The same table on another device (always a copy)."""
    device = torch.device(device)
    return TableState(
        state.spec,
        state.slots.to(device, copy=True),
        None if state.values is None else state.values.to(device, copy=True),
        state.overflow.to(device, copy=True),
        state.counts.to(device, copy=True),
    )
