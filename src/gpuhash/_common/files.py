"""The container every gpuhash file shares (a torch.save archive of a dict, its tensors with a
checksum) and the checks that refuse a damaged or foreign file with one clear error: the table
files (table/io.py) and the cache files (cache/io.py) are read through it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

FORMAT_NAME = "gpuhash.table"  # every gpuhash file's marker; its "kind" says which structure
ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive


def dtype_name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


def checksum(tensors: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(name.encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_kind(payload: object, kind: str, path: str | Path) -> None:
    """Refuse a gpuhash file of another kind by name, before its fields are checked as this
    kind's (which would call it damaged)."""
    if isinstance(payload, dict) and isinstance(payload.get("kind"), str) and (
            payload.get("format") == FORMAT_NAME and payload["kind"] != kind):
        raise ValueError(f"{path} holds a {payload['kind']}, not a {kind}")


class Damaged(Exception):
    """What is wrong with a file; load_state adds the path."""


def read_payload(path: str | Path) -> object:
    # open() first: a missing or unreadable file keeps its own OSError
    with open(path, "rb") as file:
        head = file.read(len(ZIP_MAGIC))
        if head != ZIP_MAGIC:
            raise Damaged("empty file" if not head else "not a torch.save archive")
        file.seek(0)
        try:
            return torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:  # truncated archives, foreign pickles: all mean the same here
            raise Damaged(f"torch.load cannot read it ({type(exc).__name__})") from exc


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_keys(where: str, raw: object, keys: tuple[str, ...]) -> None:
    if not isinstance(raw, dict):
        raise Damaged(f"{where} holds a {type(raw).__name__}, not a dict")
    missing = [key for key in keys if key not in raw]
    if missing:
        raise Damaged(f"{where} lacks {', '.join(missing)}")
    unknown = sorted(repr(key) for key in raw if key not in keys)
    if unknown:
        raise Damaged(f"{where} has unexpected entries {', '.join(unknown)}")


def dtype_from(field: str, name: object) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise Damaged(f"{field} is {name!r}, not the name of a torch dtype")
    return dtype
