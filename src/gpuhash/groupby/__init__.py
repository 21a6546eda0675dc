"""factorize and groupby: rows grouped by keys through the core's tables, then aggregated."""

from gpuhash.groupby.api import factorize, groupby

__all__ = ["factorize", "groupby"]
