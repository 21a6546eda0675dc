"""A process group of this process alone, for trying the sharded tables (and running their
examples) without a launcher.

Example:
    >>> import torch.distributed as dist
    >>> from gpuhash.distributed import single_process_group
    >>> with single_process_group():
    ...     print(dist.get_world_size())
    1
    >>> dist.is_initialized()
    False
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

import torch.distributed as dist


@contextlib.contextmanager
def single_process_group() -> Iterator[None]:
    """Initialise torch.distributed's default group as one gloo rank for the ``with`` block,
    then destroy it. Refused where a default group already exists.

    Example:
        >>> import torch
        >>> import gpuhash as gh
        >>> with gh.distributed.single_process_group():
        ...     s = gh.distributed.ShardedHashSet(key_dtype=torch.int64)
        ...     print(s.insert(torch.tensor([4, 4])).tolist(), len(s))
        [False, True] 1
    """
    if dist.is_initialized():
        raise RuntimeError("torch.distributed is initialised already: use that group")
    with tempfile.TemporaryDirectory(prefix="gpuhash-group-") as folder:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(folder, "init"),
                                rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()
