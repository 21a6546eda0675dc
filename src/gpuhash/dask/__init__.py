"""Dask adapters: ``gh.dask.merge`` and ``gh.dask.groupby`` over dask DataFrames.

Dask moves the rows (its shuffle co-partitions both sides of a join on the keys, or one small
side is sent whole to every partition of the other; a group-by's partial aggregates are
reduced as a tree, or its rows shuffled on the keys) and gpuhash does the work of each
partition: ``gh.merge`` / ``gh.groupby`` on the partition's pandas frame, on the worker's GPU
where it has one and with the CPU engine otherwise. Both return dask DataFrames, lazy until
``.compute()``. Needs the ``dask`` extra (``pip install "gpuhash[dask]"``); ``import
gpuhash`` does not import Dask, ``gh.dask`` does on first use.

Example:
    >>> import pandas as pd, dask.dataframe as dd, gpuhash as gh
    >>> left = dd.from_pandas(pd.DataFrame({"k": [1, 2, 3, 4], "a": [1., 2., 3., 4.]}),
    ...                       npartitions=2)
    >>> right = dd.from_pandas(pd.DataFrame({"k": [2, 4, 4], "b": ["x", "y", "z"]}),
    ...                        npartitions=2)
    >>> out = gh.dask.merge(left, right, on="k", device="cpu")
    >>> out.compute().sort_values(["k", "b"]).values.tolist()
    [[2, 2.0, 'x'], [4, 4.0, 'y'], [4, 4.0, 'z']]
"""

from __future__ import annotations

from gpuhash.dask.grouping import groupby
from gpuhash.dask.merging import merge

__all__ = ["groupby", "merge"]
