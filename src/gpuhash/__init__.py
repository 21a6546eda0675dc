"""gpuhash: GPU hash tables for Python, with a CPU engine over the same table format.

Example:
    >>> import torch, gpuhash as gh
    >>> m = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
    >>> _ = m.insert(torch.tensor([1, 2]), torch.tensor([0.5, 1.5]))
    >>> m.find(torch.tensor([2]))[0].tolist()
    [1.5]
"""

from gpuhash.cache.api import (
    ASSIGNED,
    INSERTED,
    INSERTED_EVICTING,
    REFUSED,
    SKIPPED,
    SUPERSEDED,
    CacheMap,
)
from gpuhash.join.api import JoinBuild, explain_join, join
from gpuhash.join.merge import merge
from gpuhash.join.plan import JoinPlan
from gpuhash.join.pool import clear as clear_join_cache
from gpuhash.table.base import TableFullError
from gpuhash.table.hash_map import HashMap, HashSet
from gpuhash.table.multimap import MultiMap

__all__ = ["ASSIGNED", "INSERTED", "INSERTED_EVICTING", "REFUSED", "SKIPPED", "SUPERSEDED",
           "CacheMap", "HashMap", "HashSet", "JoinBuild", "JoinPlan", "MultiMap", "TableFullError",
           "clear_join_cache", "explain_join", "join", "merge"]
__version__ = "0.1.0"
