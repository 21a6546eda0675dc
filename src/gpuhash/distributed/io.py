"""Sharded tables on disk: a folder of one file a shard, each in its single table's format
(table/io.py, cache/io.py), and ``manifest.json``, which names the kind, the shards and the
routing they were split by.

Loading onto as many ranks as saved reads a shard a rank. Onto another number, each rank
reads every shard in turn (one at a time, on the CPU) and keeps the keys it owns now: the
owner is a function of the key and the number of ranks alone (routing.py), so no rank needs
another's answer. The folder must be one every rank reaches (a shared file system).

Example:
    >>> import json, tempfile, torch
    >>> import gpuhash as gh
    >>> folder = tempfile.mkdtemp()
    >>> with gh.distributed.single_process_group():
    ...     m = gh.distributed.ShardedHashMap(key_dtype=torch.int64, value_dtype=torch.int64)
    ...     _ = m.insert(torch.arange(5), torch.arange(5))
    ...     m.save(folder)
    >>> manifest = json.load(open(folder + "/manifest.json"))
    >>> manifest["kind"], manifest["world_size"], manifest["shards"][0]["entries"]
    ('ShardedHashMap', 1, 5)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gpuhash._common.constants import SHARD_BITS, SHARD_SALT
from gpuhash.distributed.base import default_device

MANIFEST = "manifest.json"
FORMAT = "gpuhash.sharded"
VERSION = 1
# how keys were routed: a folder routed otherwise cannot be loaded by its shards' files alone
ROUTING = {"hash": "murmur3-finalizer", "salt": SHARD_SALT, "bits": SHARD_BITS}


def shard_name(rank: int, world_size: int) -> str:
    """The file of shard ``rank`` of ``world_size``.

    Example:
        >>> from gpuhash.distributed.io import shard_name
        >>> shard_name(3, 8)
        'shard-00003-of-00008.pt'
    """
    return f"shard-{rank:05d}-of-{world_size:05d}.pt"


def save_sharded(table: Any, path: str | Path) -> None:
    """Every rank writes its shard; rank 0 then writes the manifest, and every rank returns
    once it is written (so a load that follows, on any rank, finds it)."""
    folder = Path(path)
    rank, world, group = table.rank, table.world_size, table.group
    error, entries = None, 0
    try:
        folder.mkdir(parents=True, exist_ok=True)
        table.local.save(folder / shard_name(rank, world))
        entries = len(table.local)
    except Exception as caught:  # every rank learns of it in the gather below
        error = caught
    done: list[Any] = [None] * world
    dist.all_gather_object(done, (entries, None if error is None else repr(error)),
                           group=group)
    failed = [f"rank {r}: {message}" for r, (_, message) in enumerate(done) if message]
    if error is not None:
        raise error
    if failed:
        raise OSError(f"saving the shards to {folder} failed on another rank "
                      f"({'; '.join(failed)})")
    if rank == 0:
        manifest = {"format": FORMAT, "version": VERSION, "kind": table._kind,
                    "world_size": world, "routing": ROUTING, "options": table._file_options(),
                    "shards": [{"file": shard_name(r, world), "entries": n}
                               for r, (n, _) in enumerate(done)]}
        temporary = folder / (MANIFEST + ".tmp")
        temporary.write_text(json.dumps(manifest, indent=1))
        os.replace(temporary, folder / MANIFEST)  # a reader never sees half a manifest
    dist.barrier(group=group)


def read_manifest(path: str | Path, kind: str) -> dict:
    """The manifest of a sharded folder, checked: a ValueError names what is wrong."""
    file = Path(path) / MANIFEST
    try:
        manifest = json.loads(file.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{file} is missing: {path} is not a folder written by a "
                                f"sharded table's save()") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{file} is not JSON: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{file} is not a gpuhash sharded manifest")
    if manifest.get("version") != VERSION:
        raise ValueError(f"{file} has version {manifest.get('version')!r}; this gpuhash reads "
                         f"version {VERSION}")
    if manifest.get("kind") != kind:
        raise ValueError(f"{path} holds a {manifest.get('kind')}, not a {kind}")
    if manifest.get("routing") != ROUTING:
        raise ValueError(f"{path} was routed by {manifest.get('routing')}, not by {ROUTING}")
    shards = manifest.get("shards")
    world = manifest.get("world_size")
    if not isinstance(world, int) or not isinstance(shards, list) or len(shards) != world:
        raise ValueError(f"{file} lists {len(shards or ())} shards for a world of {world!r}")
    return manifest


def load_sharded(cls: Any, path: str | Path, *, device: Any, group: Any) -> Any:
    """A ``cls`` table on ``group`` from the folder ``path`` (see the module's docstring)."""
    folder = Path(path)
    options: dict = {}

    def make() -> Any:
        manifest = read_manifest(folder, cls._kind)
        options.update(manifest["options"])
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        where = default_device(group) if device is None else torch.device(device)
        files = [folder / shard["file"] for shard in manifest["shards"]]
        if manifest["world_size"] == world:  # the same split: each rank reads its own
            return cls._load_local(files[rank], where, options)
        total = sum(shard["entries"] for shard in manifest["shards"])
        local = None
        for file in files:
            shard = cls._load_local(file, "cpu", options)
            if local is None:  # sized for its share, with a margin for the hash's unevenness
                local = cls._empty_like(shard, where, total // world + total // (4 * world) + 64)
            cls._take_owned(shard, local, rank, world)
            del shard
        return local

    table = cls.__new__(cls)
    table._join(make, group, (cls._kind, "load"))
    table._options = options
    return table
