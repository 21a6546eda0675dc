"""gpuhash: GPU hash tables for Python, with a CPU engine over the same table format.

Example:
    >>> import torch, gpuhash as gh
    >>> m = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
    >>> _ = m.insert(torch.tensor([1, 2]), torch.tensor([0.5, 1.5]))
    >>> m.find(torch.tensor([2]))[0].tolist()
    [1.5]
"""

from . import _join_stream  # noqa: F401  (registers the out-of-core strategy)
from ._join_plan import JoinPlan
from ._table import TableFullError
from .cache import (
    ASSIGNED,
    INSERTED,
    INSERTED_EVICTING,
    REFUSED,
    SKIPPED,
    SUPERSEDED,
    CacheMap,
)
from .join import JoinBuild, explain_join, join
from .map import HashMap, HashSet
from .merge import merge
from .multimap import MultiMap

__all__ = ["ASSIGNED", "INSERTED", "INSERTED_EVICTING", "REFUSED", "SKIPPED", "SUPERSEDED",
           "CacheMap", "HashMap", "HashSet", "JoinBuild", "JoinPlan", "MultiMap", "TableFullError",
           "explain_join", "join", "merge"]
__version__ = "0.1.0"
