"""The join's two engines offer the join engine protocol's operations with the same
parameters, so a reader can diff join/cpu/engine.py against join/cuda/engine.py."""

import inspect

import pytest

from gpuhash.join.engine import JoinEngine


def test_both_join_engines_offer_the_protocol_with_the_same_signatures():
    from gpuhash.join.cpu import engine as cpu_engine

    modules = [cpu_engine]
    try:
        from gpuhash.join.cuda import engine as cuda_engine
    except ImportError:  # cuda.core missing: only the GPU engine needs it
        pytest.skip("cuda.core is not installed")
    modules.append(cuda_engine)
    operations = [name for name in vars(JoinEngine) if not name.startswith("_")]
    assert set(operations) == {"build", "probe"}
    for module in modules:
        assert isinstance(module, JoinEngine), module.__name__
        for name in operations:
            wanted = list(inspect.signature(getattr(JoinEngine, name)).parameters)[1:]
            assert list(inspect.signature(getattr(module, name)).parameters) == wanted, name
