"""pytest's settings for the whole repository, beside tests/conftest.py (the tests' helpers).

`python -m pytest --doctest-modules src/gpuhash` runs every docstring example in the package;
without a CUDA device the examples of the modules that drive the GPU are skipped (the CPU
engine's run everywhere). tests/test_docs.py runs the same examples in the default suite.
"""

from __future__ import annotations

import pytest

# code that drives the GPU: its examples need a device (tests/test_docs.py lists the same)
NEEDS_CUDA = ("gpuhash._common.cuda", "gpuhash.table.cuda", "gpuhash.cache.cuda",
              "gpuhash.join.cuda", "gpuhash.cache.values")


def pytest_collection_modifyitems(config, items):
    doctests = [item for item in items if isinstance(item, pytest.DoctestItem)]
    if not doctests:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in doctests:
        name = item.dtest.name
        if any(name == prefix or name.startswith(prefix + ".") for prefix in NEEDS_CUDA):
            item.add_marker(skip)
