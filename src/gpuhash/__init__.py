"""gpuhash: GPU hash tables for Python, with a CPU engine over the same table format.

Example:
    >>> import torch, gpuhash as gh
    >>> m = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
    >>> _ = m.insert(torch.tensor([1, 2]), torch.tensor([0.5, 1.5]))
    >>> m.find(torch.tensor([2]))[0].tolist()
    [1.5]

The public names are imported on first use (PEP 562), so ``import gpuhash`` and the command
line's ``--help`` do not pay for torch, numba or pyarrow. ``gh.dask`` (``gh.dask.merge``,
``gh.dask.groupby``) is the module of Dask adapters, imported (with Dask) on first use too.
"""

from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

# each public name and the module that defines it
_MODULES = {
    **dict.fromkeys(("ASSIGNED", "INSERTED", "INSERTED_EVICTING", "REFUSED", "SKIPPED",
                     "SUPERSEDED", "CacheMap"), "gpuhash.cache.api"),
    "TableFullError": "gpuhash.table.base",
    **dict.fromkeys(("HashMap", "HashSet"), "gpuhash.table.hash_map"),
    "MultiMap": "gpuhash.table.multimap",
    **dict.fromkeys(("JoinBuild", "explain_join", "join"), "gpuhash.join.api"),
    "merge": "gpuhash.join.merge",
    **dict.fromkeys(("factorize", "groupby"), "gpuhash.groupby.api"),
    "JoinPlan": "gpuhash.join.plan",
    "clear_join_cache": "gpuhash.join.pool",
    "release_host_memory": "gpuhash._common.host_buffers",
}
# modules reached as attributes, imported on first use: gh.distributed (sharded tables) and
# gh.dask (the Dask adapters; needs the dask extra, so it stays out of __all__)
_SUBMODULES = {"distributed": "gpuhash.distributed", "dask": "gpuhash.dask"}
_RENAMED = {"clear_join_cache": "clear", "release_host_memory": "release"}

__all__ = ["ASSIGNED", "INSERTED", "INSERTED_EVICTING", "REFUSED", "SKIPPED", "SUPERSEDED",
           "CacheMap", "HashMap", "HashSet", "JoinBuild", "JoinPlan", "MultiMap", "TableFullError",
           "clear_join_cache", "distributed", "explain_join", "factorize", "groupby", "join",
           "merge", "release_host_memory"]

_loaded: dict[str, object] = {}
_SHADOWED = ("join", "groupby")  # functions named as a subpackage: see _Package


def _load(name: str):
    if name not in _loaded:
        module = _MODULES[name]
        _loaded[name] = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    return _loaded[name]


def __getattr__(name: str):
    if name in _SUBMODULES:  # importing it binds it here, so later lookups skip this
        return importlib.import_module(_SUBMODULES[name])
    if name in _MODULES:
        value = _load(name)
        if name not in _SHADOWED:
            globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'gpuhash' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))


def _function_over_subpackage(name: str) -> property:
    def get(self):
        return _load(name)

    def set_(self, value) -> None:
        if not isinstance(value, types.ModuleType):  # a caller's replacement, kept
            _loaded[name] = value

    return property(get, set_)


class _Package(types.ModuleType):
    """The package's module type: ``gpuhash.join`` and ``gpuhash.groupby`` are the functions,
    although the import system binds the subpackages of the same names here when it first
    loads them (the subpackages are reached by import, ``from gpuhash.join import api``)."""

    join = _function_over_subpackage("join")
    groupby = _function_over_subpackage("groupby")


sys.modules[__name__].__class__ = _Package
