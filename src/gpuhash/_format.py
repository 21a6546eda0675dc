"""The table format: a frozen description plus a few plain tensors, shared by both engines.

A table is stored as

* ``slots``: int64 words, shape ``(num_slots + 2, words_per_slot)``, in buckets of
  ``bucket_slots`` slots, 64 bytes wide in most tables: 8 slots of 8 bytes, or 4 of 16 (pair
  slots). HBM serves 64-byte pieces on the H100 (ncu: a 32-byte read costs two sectors of DRAM
  traffic), so a 64-byte bucket costs about the same per access as a 32-byte one and keeps
  far more keys in their first bucket (8-byte slots: 99% against 96% at load 0.5, 87%
  against 79% at 0.9). Two exceptions: tables small enough to live in L2, at loads up to
  0.75, keep 32-byte buckets of 8-byte slots (from L2, bytes read are what a find costs), and
  pair tables meant to run above load 0.95 get 8-slot buckets (two choices of 4-slot buckets
  cannot be filled past about 0.976). The last two rows are the out-of-band slots for the two
  keys that equal an internal sentinel (so no key is refused).
* ``values``: only for the ``rows`` layout, shape ``(num_slots + 2, *value_shape)``; row ``i``
  belongs to slot ``i``.
* ``overflow``: int32 words holding 16 filter bits per bucket. A key placed outside its first
  bucket sets the bit its hash fingerprint picks among its first bucket's low 8; a key placed
  past its second bucket also sets its fingerprint's bit among the second bucket's high 8. A
  miss whose bucket is full stops there unless its own bit is set.
* ``counts``: int64 ``[live entries, used bucket slots]`` (used counts tombstones too).

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
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import torch

FORMAT_NAME = "gpuhash.table"
FORMAT_VERSION = 2  # 2: random bucket steps after the second choice
BUCKET_SLOTS = 4  # 64 bytes of 16-byte pair slots; 32 of 8-byte slots (small tables)
WIDE_BUCKET_SLOTS = 8  # 64 bytes of 8-byte slots, 128 of pair slots
# Measured on the H100 (bench/RESULTS.md): 8-slot buckets of 8-byte slots for 32M u32 keys at
# load 0.5 insert at 11.9 against 11.1 G/s and miss at 0.96 against 0.87 of C_hbm, but a 1M-key
# table in L2 finds at 0.59 / 0.51 of C_l2 (hits / misses) against 0.66 / 0.65 with 4-slot ones.
L2_TABLE_BYTES = 32 * 2**20  # tables up to this size count as L2-resident (50 MB on the H100)
NARROW_MAX_LOAD = 0.75  # above it even small tables take 8-slot buckets (fewer overflows)
PAIR_WIDE_ABOVE = 0.95  # pair slots: 4-slot buckets cannot reach such loads
FILTER_BITS = 16  # per bucket: 8 "left its first bucket" + 8 "went past its second bucket"
DEFAULT_SEED = 0x2545F4914F6CDD1D  # below 2**63 so it travels as a signed kernel argument
MAX_LOAD_FACTOR = 0.99
MAX_BUCKETS = 2**31 - 1  # bucket choice multiplies a 32-bit hash by the bucket count in 64 bits

KEY_DTYPES = (torch.int32, torch.uint32, torch.int64, torch.uint64)
PACKED, PAIR, ROWS = "packed", "pair", "rows"
LAYOUT_CODES = {PACKED: 0, PAIR: 1, ROWS: 2}


@dataclass(frozen=True)
class TableSpec:
    """What a table stores and how: everything but the contents.

    Example:
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

    @property
    def key_bytes(self) -> int:
        return self.key_dtype.itemsize

    @property
    def value_bytes(self) -> int:
        if self.value_dtype is None:
            return 0
        return self.value_dtype.itemsize * math.prod(self.value_shape)

    @property
    def layout(self) -> str:
        if self.value_bytes == 0 or (self.key_bytes == 4 and self.value_bytes <= 4):
            return PACKED
        if self.value_bytes <= 8:
            return PAIR
        return ROWS

    @property
    def words_per_slot(self) -> int:
        return 2 if self.layout == PAIR else 1

    @property
    def value_offset(self) -> int:
        """Byte offset of the value inside a slot (packed and pair layouts)."""
        return 4 if self.layout == PACKED else 8

    @property
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
        """How many bucket slots may be used before the table must grow or refuse."""
        return int(self.max_load_factor * self.num_slots)

    def sized_for(self, entries: int, *, bucket_slots: int | None = None) -> TableSpec:
        """This spec with the bucket width and count that hold ``entries`` keys at
        ``max_load_factor``. The width depends on the table's size (bucket_slots_for) unless
        ``bucket_slots`` forces one (experiments, and tables saved with another width).

        Example:
            >>> spec = TableSpec(key_dtype=torch.int32, value_dtype=None, value_shape=(),
            ...                  num_buckets=1).sized_for(1000)
            >>> spec.num_slots >= 1000 / spec.max_load_factor
            True
        """
        slots = math.ceil(max(entries, 1) / self.max_load_factor)
        width = bucket_slots or bucket_slots_for(self, slots)
        return dataclasses.replace(self, bucket_slots=width,
                                   num_buckets=buckets_for(entries, self.max_load_factor, width))

    def bytes_per_slot(self) -> int:
        row = self.value_bytes if self.layout == ROWS else 0
        return 8 * self.words_per_slot + row


def bucket_slots_for(spec: TableSpec, slots: int) -> int:
    """Slots per bucket for a table of this layout and ``max_load_factor`` with about
    ``slots`` slots."""
    if spec.words_per_slot == 2:
        return WIDE_BUCKET_SLOTS if spec.max_load_factor > PAIR_WIDE_ABOVE else BUCKET_SLOTS
    small = slots * spec.bytes_per_slot() <= L2_TABLE_BYTES
    return BUCKET_SLOTS if small and spec.max_load_factor <= NARROW_MAX_LOAD else WIDE_BUCKET_SLOTS


def buckets_for(entries: int, max_load_factor: float, bucket_slots: int) -> int:
    """The fewest buckets that hold ``entries`` keys without passing ``max_load_factor``."""
    need = math.ceil(max(entries, 1) / max_load_factor / bucket_slots)
    return max(need, 1)


@dataclass
class TableState:
    """The tensors of one table; either engine operates on them in place."""

    spec: TableSpec
    slots: torch.Tensor
    values: torch.Tensor | None
    overflow: torch.Tensor
    counts: torch.Tensor

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
    return values.contiguous().view(torch.uint8).view(values.shape[0], width)


def gather_values(state: TableState, rows: torch.Tensor) -> torch.Tensor:
    """Copies of the values at the given slot rows, as ``(len(rows), *value_shape)``."""
    spec = state.spec
    raw = value_bytes_view(state)[rows]
    return raw.view(spec.value_dtype).view(rows.shape[0], *spec.value_shape)


def empty_state(spec: TableSpec, device: torch.device | str) -> TableState:
    """A table with no entries: every bucket slot EMPTY, both out-of-band slots absent."""
    if spec.num_buckets > MAX_BUCKETS:
        raise ValueError(f"capacity needs {spec.num_buckets} buckets; at most {MAX_BUCKETS}")
    device = torch.device(device)
    rows = spec.num_slots + 2
    slots = torch.full((rows, spec.words_per_slot), -1, dtype=torch.int64, device=device)
    state_values = None
    if spec.layout == ROWS:
        state_values = torch.zeros((rows, *spec.value_shape), dtype=spec.value_dtype,
                                   device=device)
    overflow = torch.zeros(((spec.num_buckets * FILTER_BITS + 31) // 32,), dtype=torch.int32,
                           device=device)
    counts = torch.zeros((2,), dtype=torch.int64, device=device)
    state = TableState(spec, slots, state_values, overflow, counts)
    reset_out_of_band(state)
    return state


def reset_out_of_band(state: TableState) -> None:
    """Mark both out-of-band slots absent (slot 0 holds TOMBSTONE, slot 1 holds EMPTY)."""
    keys = state.key_view()
    n = state.spec.num_slots
    keys[n] = _signed(state.spec.tombstone_key, state.spec.key_bytes)
    keys[n + 1] = _signed(state.spec.empty_key, state.spec.key_bytes)


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


def _dtype_from(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"saved table names unknown dtype {name!r}")
    return dtype


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
    """Read a table written by ``save_state``; refuses other formats, versions and corrupt data."""
    payload = torch.load(str(path), map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_NAME:
        raise ValueError(f"{path} is not a gpuhash table file")
    if payload.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path} has format version {payload.get('version')!r}; "
                         f"this gpuhash reads version {FORMAT_VERSION}")
    if payload.get("kind") != kind:
        raise ValueError(f"{path} holds a {payload.get('kind')}, not a {kind}")
    tensors = payload["tensors"]
    if _checksum(tensors) != payload["checksum"]:
        raise ValueError(f"{path} failed its checksum: the file is corrupt")
    raw = payload["spec"]
    spec = TableSpec(
        key_dtype=_dtype_from(raw["key_dtype"]),
        value_dtype=_dtype_from(raw["value_dtype"]),
        value_shape=tuple(raw["value_shape"]),
        num_buckets=int(raw["num_buckets"]),
        seed=int(raw["seed"]),
        max_load_factor=float(raw["max_load_factor"]),
        bucket_slots=int(raw["bucket_slots"]),
    )
    device = torch.device(device)
    return TableState(
        spec,
        tensors["slots"].to(device),
        tensors["values"].to(device) if "values" in tensors else None,
        tensors["overflow"].to(device),
        tensors["counts"].to(device),
    )


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
