"""Property tests on the CPU engine: random operation sequences against a Python dict."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, settings
from model import make_machine

from conftest import few_then_many

CONFIGS = [
    # (key dtype, value shape or None for a set): packed, pair and rows layouts all appear
    (torch.int32, ()),
    (torch.uint32, None),
    (torch.int64, ()),
    (torch.uint64, (2,)),
    (torch.int32, (3,)),
    (torch.uint64, None),
]


@pytest.mark.parametrize(("key_dtype", "value_shape"), CONFIGS,
                         ids=lambda x: str(x).removeprefix("torch."))
@few_then_many(6, 40)
def test_table_behaves_like_a_dict(key_dtype, value_shape, examples):
    machine = make_machine(key_dtype=key_dtype, value_shape=value_shape, device="cpu")
    machine.TestCase.settings = settings(max_examples=examples, stateful_step_count=25,
                                         deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
    machine.TestCase().runTest()


@few_then_many(4, 20)
def test_any_duplicates_policy_still_marks_one_row(examples):
    machine = make_machine(key_dtype=torch.int64, value_shape=(), device="cpu",
                           duplicates="any")
    machine.TestCase.settings = settings(max_examples=examples, stateful_step_count=20,
                                         deadline=None)
    machine.TestCase().runTest()


@few_then_many(4, 20)
def test_high_load_factor_table_behaves_like_a_dict(examples):
    machine = make_machine(key_dtype=torch.int32, value_shape=(), device="cpu",
                           max_load_factor=0.99)
    machine.TestCase.settings = settings(max_examples=examples, stateful_step_count=30,
                                         deadline=None)
    machine.TestCase().runTest()
