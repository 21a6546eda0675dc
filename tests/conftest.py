"""Shared test helpers: key generators, what a user sees of a table, and the marks that put
the long tests behind ``-m slow``."""

from __future__ import annotations

import itertools

import pytest
import torch

KEY_DTYPES = [torch.int32, torch.uint32, torch.int64, torch.uint64]
BITS = {torch.int32: 32, torch.uint32: 32, torch.int64: 64, torch.uint64: 64}


def key_tensor(values: list[int], dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """Keys from Python ints given as unsigned bit patterns (0 .. 2**bits - 1)."""
    bits = BITS[dtype]
    signed = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in values]
    raw = torch.tensor(signed, dtype=torch.int32 if bits == 32 else torch.int64)
    return raw.view(dtype).to(device)


def key_list(keys: torch.Tensor) -> list[int]:
    """Keys as unsigned bit patterns, whatever their dtype."""
    bits = BITS[keys.dtype]
    raw = keys.cpu().view(torch.int32 if bits == 32 else torch.int64).tolist()
    return [v % (1 << bits) for v in raw]


def adversarial_keys(dtype: torch.dtype) -> list[int]:
    """Sentinels and their neighbours, dtype limits, shared low bits, sequential runs."""
    bits = BITS[dtype]
    top = (1 << bits) - 1
    keys = {0, 1, 2, top, top - 1, top - 2, top - 3, 1 << (bits - 1), (1 << (bits - 1)) - 1,
            (1 << (bits - 1)) + 1}
    keys.update(i << (bits - 8) for i in range(64))  # identical low bits
    keys.update(range(100, 164))  # sequential
    return sorted(keys)


def contents(table) -> tuple:
    """What a user can see of a table or a cache: its len, its capacity and its entries (keys
    with their values, a cache's with their scores), in a fixed order; to check that a call
    that failed changed nothing."""
    if hasattr(table, "export"):  # a CacheMap
        columns = table.export()
    else:
        got = table.items()
        columns = got if isinstance(got, tuple) else (got,)
    rows = [c.cpu().reshape(c.shape[0], -1).tolist() for c in columns if c is not None]
    return len(table), table.capacity, sorted(zip(*rows), key=repr)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# --- the slow tests --------------------------------------------------------------------------
# `python -m pytest` leaves out the tests marked slow (pyproject's addopts); `-m slow` runs them
# and CI runs both. A test is slow for its depth, not its subject: every structure and engine
# keeps fast tests, and the slow ones take the same checks further (more examples, every
# combination of a matrix).
SLOW = pytest.mark.slow


def few_then_many(few: int, many: int):
    """A property test's number of examples as its parameter ``examples``: ``few`` in the
    default run, ``many`` under ``-m slow``."""
    return pytest.mark.parametrize("examples", [
        pytest.param(few, id=f"{few}-examples"),
        pytest.param(many, id=f"{many}-examples", marks=SLOW)])


def covering(*axes: list) -> list:
    """Every combination of the axes' values, as parametrize's list, all but a few marked
    slow: the fast ones take each value of every axis at least once (the i-th combination
    takes the i-th value of each axis, wrapping round the shorter axes)."""
    fast = {tuple(i % len(axis) for axis in axes) for i in range(max(map(len, axes)))}
    return [pytest.param(*(axis[i] for axis, i in zip(axes, picks)),
                         marks=() if picks in fast else SLOW)
            for picks in itertools.product(*(range(len(axis)) for axis in axes))]
