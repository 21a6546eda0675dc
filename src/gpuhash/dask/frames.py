"""What both Dask adapters share: checks of their inputs at the edge, each partition's
answer made to carry the dtypes its ``meta`` promised, and the cores a task's CPU engine may
use on a worker.

The dtypes of a pandas join or group-by hang on the data (an int column a left join leaves
empty on some rows comes out float64), so partitions of one result could disagree with each
other and with ``meta``; every partition's answer is cast to ``meta``'s dtypes, which are
chosen as the widest the operation can give.

Example:
    >>> import pandas as pd
    >>> conform(pd.DataFrame({"a": [1, 2]}), pd.DataFrame({"a": [0.5]}).iloc[:0]).dtypes
    a    float64
    dtype: object
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import pandas as pd


def dask_frame(value: Any, argument: str):
    """``value`` if it is a dask DataFrame; else a TypeError saying how to make one."""
    try:
        import dask.dataframe as dd
    except ImportError as error:
        raise ImportError(f"gh.dask needs Dask ({error}): pip install \"gpuhash[dask]\"") from (
            error)

    if isinstance(value, dd.DataFrame):
        return value
    kind = f"{type(value).__module__.split('.')[0]}.{type(value).__name__}"
    fix = (f"wrap it: dd.from_pandas({argument}, npartitions=...)"
           if isinstance(value, pd.DataFrame) else
           "call gh.merge / gh.groupby on it, or make a dask DataFrame of it")
    raise TypeError(f"{argument} must be a dask DataFrame (dask.dataframe.DataFrame), got "
                    f"{kind}; {fix}")


def column_names(value: Any, argument: str) -> list[str]:
    """A column name or a list of them, as a list; else a ValueError naming the argument."""
    names = [value] if isinstance(value, str) else (
        list(value) if isinstance(value, (list, tuple)) else None)
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{argument} must be a column name or a list of them, got {value!r}")
    return names


def check_columns(names: list[str], frame, argument: str, side: str = "") -> None:
    """A KeyError naming the argument and the columns there are, for a name ``frame``
    lacks."""
    for name in names:
        if name not in frame.columns:
            where = f"the {side} dask DataFrame" if side else "the dask DataFrame"
            raise KeyError(f"{argument} names column {name!r}, which {where} lacks; it has "
                           f"{list(frame.columns)}")


def conform(frame: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each column cast to ``meta``'s dtype where the two differ."""
    if list(frame.columns) != list(meta.columns):
        return frame  # dask's own check of the columns names the difference
    changed = {name: meta.dtypes[name] for name in meta.columns
               if frame.dtypes[name] != meta.dtypes[name]}
    return frame.astype(changed) if changed else frame


def threads_by_host() -> dict[str, int] | None:
    """The worker threads of the connected Dask cluster on each host (by address), or None
    without a distributed client. Read where the graph is made, once a call."""
    try:
        from distributed import get_client

        workers = get_client().scheduler_info(n_workers=-1)["workers"]
    except (ImportError, ValueError):  # no distributed, or no client: the local schedulers
        return None
    totals: dict[str, int] = {}
    for info in workers.values():
        totals[info["host"]] = totals.get(info["host"], 0) + int(info["nthreads"])
    return totals


@contextmanager
def task_cores(threads: dict[str, int] | None):
    """Inside a Dask worker, the CPU engine's parallel loops use the host's cores shared out
    among every worker thread on it: each worker process otherwise starts a thread a core for
    each of its tasks, and on a host of several workers they crowd each other out (group-bys
    ran 2-4x slower so). Outside a worker, or without the cluster's counts, nothing changes."""
    if not threads:
        yield
        return
    try:
        from distributed import get_worker
        from distributed.comm.addressing import get_address_host

        host = get_address_host(get_worker().address)
    except (ImportError, ValueError):
        yield
        return
    from gpuhash._common.cpu.runtime import core_share, host_cores

    with core_share(host_cores() // max(1, threads.get(host, 1))):
        yield


def with_task_cores(task: Callable, threads: dict[str, int] | None) -> Callable:
    """``task`` run under ``task_cores(threads)`` (a module-level callable Dask can ship)."""
    return _CoresTask(task, threads)


class _CoresTask:
    def __init__(self, task: Callable, threads: dict[str, int] | None):
        self.task, self.threads = task, threads
        self.__name__ = getattr(task, "__name__", "task")  # Dask names the graph's keys so

    def __call__(self, *args, **kwargs):
        with task_cores(self.threads):
            return self.task(*args, **kwargs)
