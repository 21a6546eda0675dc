"""CacheMap files: save and load, with every field checked before an engine sees the tensors
(kernels index by the shapes the spec implies). The container and its failure messages are
the table files' (table/format.py): a torch.save archive with a format marker, a kind and a
checksum.
"""

from __future__ import annotations

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
from gpuhash.cache.format import (
    BUCKET_SHAPES,
    CACHE_KEY_DTYPES,
    EMPTY_KEY,
    LOCKED_KEY,
    MAX_SLOTS,
    POLICIES,
    CacheSpec,
    CacheState,
    place_cache,
)
from gpuhash.table.format import SEED_LIMIT

KIND = "CacheMap"
VERSION = 2  # 2 added max_slots (the capacity the cache may grow to); 1 is read as not growing
_PAYLOAD_KEYS = {1: ("format", "version", "kind", "spec", "tensors", "checksum", "step", "epoch")}
_PAYLOAD_KEYS[2] = (*_PAYLOAD_KEYS[1], "max_slots")
_SPEC_KEYS = ("key_dtype", "value_dtype", "value_shape", "num_buckets", "bucket_slots",
              "policy", "seed")


def save_cache(state: CacheState, path: str | Path, *, step: int, epoch: int,
               max_slots: int) -> None:
    """Write a cache's tensors, spec, step counter, epoch and the capacity it may grow to."""
    spec = state.spec
    tensors = {name: t.detach().cpu().contiguous()
               for name, t in state.tensors("cpu").items()}
    torch.save({
        "format": FORMAT_NAME, "version": VERSION, "kind": KIND,
        "spec": {"key_dtype": dtype_name(spec.key_dtype),
                 "value_dtype": dtype_name(spec.value_dtype),
                 "value_shape": list(spec.value_shape), "num_buckets": spec.num_buckets,
                 "bucket_slots": spec.bucket_slots, "policy": spec.policy, "seed": spec.seed},
        "tensors": tensors, "checksum": checksum(tensors), "step": step, "epoch": epoch,
        "max_slots": max_slots,
    }, str(path))


def load_cache(path: str | Path, device: torch.device, *, max_hbm_bytes: int | None = None
               ) -> tuple[CacheState, int, int, int]:
    """Read a cache written by ``save_cache``: (state on ``device``, its value rows split by
    ``max_hbm_bytes``; step; epoch; the capacity it may grow to). Anything that is not a
    sound cache file raises one ``ValueError`` naming the path."""
    try:
        payload = read_payload(path)
        check_kind(payload, KIND, path)
        if not isinstance(payload, dict) or "version" not in payload:
            check_keys("the file", payload, _PAYLOAD_KEYS[VERSION])  # the table files' words
        version = payload["version"]
        if not is_int(version) or version not in _PAYLOAD_KEYS:
            raise ValueError(f"{path} has cache format version {version!r}; this gpuhash "
                             f"reads versions {', '.join(map(str, _PAYLOAD_KEYS))}")
        check_keys("the file", payload, _PAYLOAD_KEYS[version])
        if not isinstance(payload["format"], str) or payload["format"] != FORMAT_NAME:
            raise Damaged(f"its format marker is {payload['format']!r}, not {FORMAT_NAME!r}")
        if not isinstance(payload["kind"], str) or payload["kind"] != KIND:
            raise ValueError(f"{path} holds a {payload['kind']}, not a {KIND}")
        spec = _spec_from(payload["spec"])
        tensors = _checked_tensors(spec, payload["tensors"])
        if not isinstance(payload["checksum"], str) or (
                checksum(tensors) != payload["checksum"]):
            raise ValueError(f"{path} failed its checksum: the file is corrupt")
        step, epoch = payload["step"], payload["epoch"]
        if not is_int(step) or not 0 <= step < 2**63:
            raise Damaged(f"step is {step!r}, not an int in [0, 2**63)")
        if not is_int(epoch) or not 0 <= epoch < 2**32:
            raise Damaged(f"epoch is {epoch!r}, not an int in [0, 2**32)")
        max_slots = payload.get("max_slots", spec.capacity)
        if (not is_int(max_slots) or not spec.capacity <= max_slots <= MAX_SLOTS
                or max_slots % spec.bucket_slots):
            raise Damaged(f"max_slots is {max_slots!r}, not a multiple of "
                           f"{spec.bucket_slots} in [{spec.capacity}, {MAX_SLOTS}]")
    except Damaged as exc:
        raise ValueError(f"{path} is not a gpuhash cache file or is damaged: {exc}"
                         ) from exc.__cause__
    state = place_cache(spec, tensors, device, max_hbm_bytes=max_hbm_bytes)
    return state, step, epoch, max_slots


def _spec_from(raw: object) -> CacheSpec:
    check_keys("spec", raw, _SPEC_KEYS)
    key_dtype = dtype_from("spec.key_dtype", raw["key_dtype"])
    if key_dtype not in CACHE_KEY_DTYPES:
        raise Damaged(f"spec.key_dtype is {raw['key_dtype']!r}, not int64 or uint64")
    value_dtype = dtype_from("spec.value_dtype", raw["value_dtype"])
    shape = raw["value_shape"]
    if not isinstance(shape, (list, tuple)) or not all(is_int(d) and d >= 1 for d in shape):
        raise Damaged(f"spec.value_shape is {shape!r}, not a list of positive ints")
    width = raw["bucket_slots"]
    if not is_int(width) or width not in BUCKET_SHAPES:
        raise Damaged(f"spec.bucket_slots is {width!r}, not one of {BUCKET_SHAPES}")
    buckets = raw["num_buckets"]
    if not is_int(buckets) or not 1 <= buckets <= MAX_SLOTS // width:
        raise Damaged(f"spec.num_buckets is {buckets!r}, not an int in "
                       f"[1, {MAX_SLOTS // width}]")
    if raw["policy"] not in POLICIES:
        raise Damaged(f"spec.policy is {raw['policy']!r}, not one of {POLICIES}")
    seed = raw["seed"]
    if not is_int(seed) or not 0 <= seed < SEED_LIMIT:
        raise Damaged(f"spec.seed is {seed!r}, not an int in [0, 2**64)")
    return CacheSpec(key_dtype=key_dtype, value_dtype=value_dtype, value_shape=tuple(shape),
                     num_buckets=buckets, bucket_slots=width, policy=raw["policy"], seed=seed)


def _checked_tensors(spec: CacheSpec, raw: object) -> dict[str, torch.Tensor]:
    slots = spec.capacity
    expected = {"keys": (torch.int64, (slots,)), "digests": (torch.uint8, (slots,)),
                "scores": (torch.int64, (slots,)),
                "values": (spec.value_dtype, (slots, *spec.value_shape)),
                "counts": (torch.int64, (4,))}
    check_keys("tensors", raw, tuple(expected))
    tensors, storages = {}, set()
    for name, (dtype, shape) in expected.items():
        tensor = raw[name]
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            raise Damaged(f"tensors.{name} is not a dense tensor")
        if tensor.dtype != dtype or tuple(tensor.shape) != shape:
            raise Damaged(f"tensors.{name} is {tensor.dtype} {tuple(tensor.shape)}, not "
                           f"{dtype} {shape}")
        storage = tensor.untyped_storage().data_ptr()
        if storage in storages or not tensor.is_contiguous():
            raise Damaged(f"tensors.{name} is not contiguous or shares memory")
        storages.add(storage)
        tensors[name] = tensor.detach()
    # a slot is free (EMPTY key, digest 0) or holds a key with a digest: anything else would
    # look free to a claim that can never take it
    keys, digests = tensors["keys"], tensors["digests"]
    free = keys == EMPTY_KEY
    if bool(((digests == 0) != free).any()) or bool((keys == LOCKED_KEY).any()):
        raise Damaged("its slots mix free and used markers")
    live = int((~free).sum())
    if tensors["counts"].tolist() != [live, 0, 0, 0]:
        raise Damaged(f"counts {tensors['counts'].tolist()} do not match its {live} entries")
    return tensors
