"""gh.merge as a drop-in for polars' DataFrame.join, in the manner of polars' own join tests
(tests/unit/operations/test_join.py): ``coalesce`` and ``maintain_order`` for every ``how``,
keys repeated on both sides, compared with polars on the same frames."""

from __future__ import annotations

import numpy as np
import pytest

import gpuhash as gh

pl = pytest.importorskip("polars")


def _frames(seed: int):
    rng = np.random.default_rng(seed)
    left = pl.DataFrame({"k": rng.integers(0, 10, 30), "a": np.arange(30)})
    right = pl.DataFrame({"k": rng.integers(5, 15, 12), "b": np.arange(12)})
    return left, right


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
@pytest.mark.parametrize("coalesce", [None, True, False])
@pytest.mark.parametrize("order", ["left", "left_right", "right", "right_left"])
def test_coalesce_and_maintain_order_as_polars(seed, how, coalesce, order):
    left, right = _frames(seed)
    got = gh.merge(left, right, on="k", how=how, coalesce=coalesce, maintain_order=order,
                   device="cpu")
    want = left.join(right, on="k", how=how, coalesce=coalesce, maintain_order=order)
    assert got.columns == want.columns
    if order in ("left_right", "right_left"):
        assert got.equals(want, null_equal=True)
        return
    # "left" / "right": that side's rows in its order; the other side's unmatched rows in no
    # order polars promises
    kept = "a" if order == "left" else "b"
    assert got.drop_nulls(kept).equals(want.drop_nulls(kept), null_equal=True)
    assert got.sort(got.columns, nulls_last=True).equals(
        want.sort(want.columns, nulls_last=True), null_equal=True)


def test_bad_ordering_options_are_refused():
    left, right = _frames(0)
    with pytest.raises(ValueError, match="maintain_order must be one of"):
        gh.merge(left, right, on="k", maintain_order="up", device="cpu")
    with pytest.raises(ValueError, match="coalesce must be None, True or False"):
        gh.merge(left, right, on="k", coalesce="yes", device="cpu")
