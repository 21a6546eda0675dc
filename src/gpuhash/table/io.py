"""Saving and loading a table: its spec and tensors in the shared file container
(_common/files.py), with a format version and checks that refuse a damaged or foreign file
before an engine sees it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from gpuhash._common.files import (
    FORMAT_NAME,
    Damaged,
    check_keys,
    check_kind,
    checksum,
    dtype_from,
    dtype_name,
    is_int,
    read_payload,
)
from gpuhash.table.format import (
    BUCKET_SLOTS,
    COUNTS_LEN,
    FILTER_BITS,
    FORMAT_VERSION,
    KEY_DTYPES,
    LEGACY_COUNTS_LEN,
    MAX_BUCKETS,
    MAX_LOAD_FACTOR,
    ROWS,
    SEED_LIMIT,
    WIDE_BUCKET_SLOTS,
    TableSpec,
    TableState,
)


def save_state(state: TableState, path: str | Path, *, kind: str) -> None:
    """Write the tensors with a format version and a checksum that ``load_state`` verifies."""
    spec = state.spec
    tensors = {name: t.detach().cpu().contiguous() for name, t in state.tensors().items()}
    payload = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "kind": kind,
        "spec": {
            "key_dtype": dtype_name(spec.key_dtype),
            "value_dtype": dtype_name(spec.value_dtype),
            "value_shape": list(spec.value_shape),
            "num_buckets": spec.num_buckets,
            "seed": spec.seed,
            "max_load_factor": spec.max_load_factor,
            "bucket_slots": spec.bucket_slots,
        },
        "tensors": tensors,
        "checksum": checksum(tensors),
    }
    torch.save(payload, str(path))


def load_state(path: str | Path, device: torch.device | str, *, kind: str) -> TableState:
    """Read a table written by ``save_state``. Files of another kind or version are refused
    as such; anything else that is not a sound gpuhash table file, one ``ValueError`` naming
    the path. A missing or unreadable file raises its ``OSError``."""
    try:
        payload = read_payload(path)
        check_kind(payload, kind, path)
        check_keys("the file", payload, _PAYLOAD_KEYS)
        # type checks first: a crafted file may hold tensors where these compare by element
        if not isinstance(payload["format"], str) or payload["format"] != FORMAT_NAME:
            raise Damaged(f"its format marker is {payload['format']!r}, not {FORMAT_NAME!r}")
        if not is_int(payload["version"]) or payload["version"] != FORMAT_VERSION:
            raise ValueError(f"{path} has format version {payload['version']!r}; "
                             f"this gpuhash reads version {FORMAT_VERSION}")
        if not isinstance(payload["kind"], str) or payload["kind"] != kind:
            raise ValueError(f"{path} holds a {payload['kind']}, not a {kind}")
        spec = dataclasses.replace(_spec_from(payload["spec"]), multi=kind == "MultiMap")
        tensors = _checked_tensors(spec, payload["tensors"])
        if not isinstance(payload["checksum"], str):
            raise Damaged(f"its checksum is a {type(payload['checksum']).__name__}, not a str")
        if checksum(tensors) != payload["checksum"]:
            raise ValueError(f"{path} failed its checksum: the file is corrupt")
        counts = _checked_counts(spec, tensors["counts"])
    except Damaged as exc:
        raise ValueError(f"{path} is not a gpuhash table file or is damaged: {exc}"
                         ) from exc.__cause__
    device = torch.device(device)

    def moved(name: str) -> torch.Tensor | None:
        return tensors[name].to(device) if name in tensors else None

    return TableState(spec, moved("slots"), moved("values"), moved("overflow"),
                      counts.to(device), moved("reserved_keys"), moved("reserved_values"))


# --- load_state's checks: kernels index by the shapes the spec implies, so a file must match
# them exactly before an engine sees it ------------------------------------------------------

_PAYLOAD_KEYS = ("format", "version", "kind", "spec", "tensors", "checksum")
_SPEC_KEYS = ("key_dtype", "value_dtype", "value_shape", "num_buckets", "seed",
              "max_load_factor", "bucket_slots")


def _spec_from(raw: object) -> TableSpec:
    check_keys("spec", raw, _SPEC_KEYS)
    key_dtype = dtype_from("spec.key_dtype", raw["key_dtype"])
    if key_dtype not in KEY_DTYPES:
        raise Damaged(f"spec.key_dtype is {raw['key_dtype']!r}; keys are int32, uint32, "
                       f"int64 or uint64")
    value_dtype = raw["value_dtype"]
    if value_dtype is not None:
        value_dtype = dtype_from("spec.value_dtype", value_dtype)
    shape = raw["value_shape"]
    if not isinstance(shape, (list, tuple)) or not all(is_int(d) and d >= 1 for d in shape):
        raise Damaged(f"spec.value_shape is {shape!r}, not a list of positive ints")
    buckets = raw["num_buckets"]
    if not is_int(buckets) or not 1 <= buckets <= MAX_BUCKETS:
        raise Damaged(f"spec.num_buckets is {buckets!r}, not an int in [1, {MAX_BUCKETS}]")
    width = raw["bucket_slots"]
    if not is_int(width) or width not in (BUCKET_SLOTS, WIDE_BUCKET_SLOTS):
        raise Damaged(f"spec.bucket_slots is {width!r}, not {BUCKET_SLOTS} or "
                       f"{WIDE_BUCKET_SLOTS}")
    load = raw["max_load_factor"]
    # written this way round so that NaN fails too
    if not isinstance(load, (int, float)) or isinstance(load, bool) or not (
            0 < load <= MAX_LOAD_FACTOR):
        raise Damaged(f"spec.max_load_factor is {load!r}, not a number in "
                       f"(0, {MAX_LOAD_FACTOR}]")
    seed = raw["seed"]
    if not is_int(seed) or not 0 <= seed < SEED_LIMIT:
        raise Damaged(f"spec.seed is {seed!r}, not an int in [0, 2**64)")
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
    if spec.multi and isinstance(raw, dict) and "reserved_keys" in raw:
        copies = raw["reserved_keys"]
        copies = copies.shape[0] if isinstance(copies, torch.Tensor) and copies.dim() else 0
        expected["reserved_keys"] = (spec.bits_dtype, (copies,))
        if spec.value_dtype is not None:
            expected["reserved_values"] = (spec.value_dtype, (copies, *spec.value_shape))
    check_keys("tensors", raw, tuple(expected))
    tensors, storages = {}, set()
    for name, (dtype, shape) in expected.items():
        tensor = raw[name]
        if not isinstance(tensor, torch.Tensor):
            raise Damaged(f"tensors.{name} is a {type(tensor).__name__}, not a tensor")
        if tensor.layout != torch.strided or tensor.device.type != "cpu":
            raise Damaged(f"tensors.{name} is a {tensor.layout} tensor on {tensor.device}, "
                           f"not a dense one on the cpu")
        if tensor.dtype != dtype:
            raise Damaged(f"tensors.{name} has dtype {tensor.dtype}, not {dtype}")
        if shape is None:
            shape = (COUNTS_LEN,) if tensor.shape == (COUNTS_LEN,) else (LEGACY_COUNTS_LEN,)
        if tuple(tensor.shape) != shape:
            raise Damaged(f"tensors.{name} has shape {tuple(tensor.shape)}, not {shape} "
                           f"(spec: {spec.num_buckets} buckets of {spec.bucket_slots} slots)")
        if not tensor.is_contiguous():
            raise Damaged(f"tensors.{name} is not contiguous")
        # engines write in place: tensors sharing memory would overwrite each other
        storage = tensor.untyped_storage().data_ptr()
        if storage in storages:
            raise Damaged(f"tensors.{name} shares its memory with another tensor")
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
        raise Damaged(f"counts says {used} bucket slots are used, not in [0, {spec.num_slots}]")
    if not 0 <= live <= used + 2:
        raise Damaged(f"counts says {live} live entries, not in [0, {used} used + 2]")
    if unplaced < 0 or stash < 0:
        raise Damaged(f"counts holds negative counters {counts.tolist()}")
    return counts


