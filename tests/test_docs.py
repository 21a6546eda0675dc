"""The examples in the docstrings run and show what they say, in every module of the package.

Modules are found by walking the package, so a new module's examples run without being listed
here. A module with no examples passes; the public ones must have some. Modules that need
CUDA (cuda.core and a device) run only where there is one, and a module that cannot be
imported for want of cuda.core is skipped.

Each example is self-contained: it runs with its own module's definitions in scope and nothing
else, so any other name it uses (torch, numpy, gpuhash's public classes) it imports, as a
user's code would. `python -m pytest --doctest-modules src/gpuhash` runs the same examples
(the repository's conftest.py skips the CUDA modules' there without a device).
"""

import doctest
import importlib
import inspect
import pkgutil
import types

import pytest
import torch

import gpuhash

# the modules users read: each must show at least one example
PUBLIC = {"gpuhash", "gpuhash.table.hash_map", "gpuhash.table.multimap", "gpuhash.table.format",
          "gpuhash.cache.api", "gpuhash.cache.format", "gpuhash.join.api", "gpuhash.join.merge",
          "gpuhash.distributed", "gpuhash.distributed.tables", "gpuhash.distributed.cache_map",
          "gpuhash.dask", "gpuhash.dask.merging", "gpuhash.dask.grouping"}
# code that drives the GPU: its examples (if any) need a device
NEEDS_CUDA = ("gpuhash._common.cuda", "gpuhash.table.cuda", "gpuhash.cache.cuda",
              "gpuhash.join.cuda", "gpuhash.cache.values")


def _module_names() -> list[str]:
    found = pkgutil.walk_packages(gpuhash.__path__, "gpuhash.", onerror=lambda name: None)
    return ["gpuhash", *sorted(info.name for info in found)]


def _needs_cuda(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in NEEDS_CUDA)


def _own_names(module: types.ModuleType) -> dict:
    """The module's globals less what it imports (modules, and classes and functions defined
    elsewhere): what an example may use without importing it."""
    def imported(value) -> bool:
        return isinstance(value, types.ModuleType) or (
            (inspect.isclass(value) or inspect.isroutine(value))
            and getattr(value, "__module__", module.__name__) != module.__name__)

    return {name: value for name, value in vars(module).items() if not imported(value)}


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
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = doctest.DocTestFinder().find(module, name, globs=_own_names(module))
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
    if name in PUBLIC:
        assert result.attempted > 0, f"{name} shows no examples"


def test_an_example_that_uses_a_name_it_does_not_import_fails():
    """The check above is not vacuous: torch is imported by the module, not by the example."""
    module = importlib.import_module("gpuhash.table.format")
    assert "torch" in vars(module) and "torch" not in _own_names(module)
    example = doctest.DocTestParser().get_doctest(
        ">>> torch.zeros(1).tolist()\n[0.0]\n", _own_names(module), "t", None, 0)
    runner = doctest.DocTestRunner()
    runner.run(example, out=lambda text: None)
    assert runner.summarize(verbose=False).failed == 1
