"""The examples in the docstrings run and show what they say, in every module of the package.

Modules are found by walking the package, so a new module's examples run without being listed
here. A module with no examples passes; the public ones must have some. Modules that need
CUDA (cuda.core and a device) run only where there is one, and a module that cannot be
imported for want of cuda.core is skipped.
"""

import doctest
import importlib
import pkgutil

import pytest
import torch

import gpuhash

# the modules users read: each must show at least one example
PUBLIC = {"gpuhash", "gpuhash.table.hash_map", "gpuhash.table.multimap", "gpuhash.table.format",
          "gpuhash.cache.api", "gpuhash.cache.format", "gpuhash.join.api", "gpuhash.join.merge"}
# examples in internal modules show the public names, as a user would write them
NAMES = {"torch": torch, "HashMap": gpuhash.HashMap, "HashSet": gpuhash.HashSet,
         "MultiMap": gpuhash.MultiMap, "CacheMap": gpuhash.CacheMap}
# code that drives the GPU: its examples (if any) need a device
NEEDS_CUDA = ("gpuhash._common.cuda", "gpuhash.table.cuda", "gpuhash.cache.cuda",
              "gpuhash.join.cuda", "gpuhash.cache.values")


def _module_names() -> list[str]:
    found = pkgutil.walk_packages(gpuhash.__path__, "gpuhash.", onerror=lambda name: None)
    return ["gpuhash", *sorted(info.name for info in found)]


def _needs_cuda(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in NEEDS_CUDA)


def test_the_walk_finds_the_package():
    names = _module_names()
    assert set(names) >= PUBLIC
    assert set(names) >= {"gpuhash.cli", "gpuhash.bench.harness", "gpuhash.table.cpu.engine"}


@pytest.mark.parametrize("name", _module_names())
def test_docstring_examples(name):
    if _needs_cuda(name) and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    try:
        module = importlib.import_module(name)
    except ImportError as error:  # cuda.core missing: only the GPU engine needs it
        if not (error.name or "").startswith("cuda"):
            raise
        pytest.skip(f"cannot be imported without {error.name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, extraglobs=NAMES)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
    if name in PUBLIC:
        assert result.attempted > 0, f"{name} shows no examples"
