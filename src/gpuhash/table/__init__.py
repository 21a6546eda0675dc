"""HashMap, HashSet and MultiMap: open-addressing tables over the shared format, on two engines."""

from gpuhash.table.base import TableFullError
from gpuhash.table.hash_map import HashMap, HashSet
from gpuhash.table.multimap import MultiMap

__all__ = ["HashMap", "HashSet", "MultiMap", "TableFullError"]
