"""The examples in the public docstrings run and show what they say."""

import doctest

import pytest

import gpuhash
from gpuhash import _batch, _format, map


@pytest.mark.parametrize("module", [gpuhash, map, _batch, _format], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
