"""Tables sharded over the ranks of a torch.distributed process group: one shard a rank,
each key held by the rank its shard hash names, every key operation a collective call.

Public names: :class:`ShardedHashMap`, :class:`ShardedHashSet`, :class:`ShardedCacheMap`,
:class:`PeerError` (raised on the ranks whose own part of a failed call was sound),
:func:`owner_of` (the rank that owns each key) and :func:`single_process_group` (a group of
this process alone, to try the tables without a launcher); :func:`merge` and :func:`groupby`,
a join and a group-by of tables (pyarrow, pandas, polars) partitioned over the ranks, rows
hash-partitioned by key and exchanged by all-to-all, each rank returning its part.

Example:
    >>> import torch
    >>> import gpuhash as gh
    >>> with gh.distributed.single_process_group():
    ...     m = gh.distributed.ShardedHashMap(key_dtype=torch.int64, value_dtype=torch.int64)
    ...     _ = m.insert(torch.tensor([1, 2]), torch.tensor([10, 20]))
    ...     print(m.find(torch.tensor([2]))[0].tolist(), len(m))
    [20] 2
"""

from gpuhash.distributed.cache_map import ShardedCacheMap
from gpuhash.distributed.exchange import PeerError
from gpuhash.distributed.grouping import groupby
from gpuhash.distributed.groups import single_process_group
from gpuhash.distributed.joins import merge
from gpuhash.distributed.routing import owner_of
from gpuhash.distributed.tables import ShardedHashMap, ShardedHashSet

__all__ = ["PeerError", "ShardedCacheMap", "ShardedHashMap", "ShardedHashSet", "groupby", "merge",
           "owner_of", "single_process_group"]
