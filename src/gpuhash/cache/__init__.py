"""CacheMap: an evicting key-value cache (scores, eviction policies, values in GPU or host
memory)."""

from gpuhash.cache.api import (
    ASSIGNED,
    INSERTED,
    INSERTED_EVICTING,
    REFUSED,
    SKIPPED,
    SUPERSEDED,
    CacheMap,
)

__all__ = ["ASSIGNED", "INSERTED", "INSERTED_EVICTING", "REFUSED", "SKIPPED", "SUPERSEDED",
           "CacheMap"]
