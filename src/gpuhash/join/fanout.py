"""The join planner's estimate of repeated keys: how many build rows a probe row matches.

A join's output is sized exactly by its probe's count, so the estimate never changes what a
join returns. It changes what a plan holds in memory at once: a probe chunk's output pairs (16
bytes a pair) lie on the device until they are gathered or copied back, so a many-to-many
join planned as if each probe row matched one build row could pass its budget by the fanout.

Two estimates from random samples of distinct rows (a fixed seed, so the same inputs get the
same plan):
- ``cross``: each sampled probe row's key counted among the sampled build rows, scaled by the
  build's rows over the sample's. Unbiased, but where keys repeat seldom (unique build keys
  among hundreds of millions) a sample meets few of them and the figure scatters.
- ``self``: the rows a build row's key has, on average, from the equal pairs within the build
  sample (the self-join size over the valid rows). Exactly 1 for unique keys however large
  the side, but it weighs keys as the build side does, so a skewed build (Zipf) probed by
  evenly spread keys reads far above what the probe meets.

The plan takes the smaller, and at least 1: ``cross`` where the build skews, ``self`` where
its keys are (nearly) unique. Where a side has at most ``SAMPLE_ROWS`` rows the sample is the
whole side and ``cross`` is the exact fanout. What it leaves out, and so may read low: a
probe concentrated on the build's heaviest keys; a probe sorted by key, whose chunks meet
its repeats unevenly; the unmatched probe rows of left and full joins (a pair each; the
plan counts at least one a row); null keys matching each other under ``nulls_equal``. The
exact count that sizes the output stays the guard.

Cost: a bounded sample of each side whatever its size, so small beside the joins that ask for
an estimate; mostly the sampled rows' reads from the large side.

Example:
    >>> import torch
    >>> build = [torch.arange(1000).repeat_interleave(4)]   # every key 4 times
    >>> estimate_fanout(build, None, [torch.arange(1000)], None)
    4.0
"""

from __future__ import annotations

import numpy as np
import torch

from gpuhash._common.hashing import GOLDEN_INT64
from gpuhash.join.keys import canonical

SAMPLE_ROWS = 1 << 16
SEED = 0x5EED
MIX = GOLDEN_INT64  # spreads the sampled codes
LOW_33 = (1 << 33) - 1
SIGNED = {torch.uint64: torch.int64, torch.uint32: torch.int32, torch.uint16: torch.int16}
SIGNED_BACK = {signed: unsigned for unsigned, signed in SIGNED.items()}


def _sampled_rows(columns: list[torch.Tensor], valid: torch.Tensor | None,
                  picked: torch.Tensor | None) -> torch.Tensor:
    """The picked rows (all where None) with a valid key, as an (n, columns) int64 CPU tensor
    of the keys' values (join/keys.py: canonical: other widths join by value, uint64 keeps its
    bits), gathered where the keys are and read back in one copy."""
    device = columns[0].device
    at = None if picked is None else picked.to(device)
    taken = []
    for column in columns + ([] if valid is None else [valid]):
        signed = SIGNED.get(column.dtype)
        if at is not None:  # unsigned tensors are gathered as their signed views
            column = (column if signed is None else column.view(signed))[at]
            column = column if signed is None else column.view(SIGNED_BACK[signed])
        taken.append(canonical(column))
    rows = torch.stack(taken, dim=1).cpu()
    if valid is not None:
        rows = rows[rows[:, -1] != 0, :-1]
    return rows


def _one_word(rows: torch.Tensor) -> torch.Tensor:
    """One int64 a row: the key itself for one column, else a mix of the columns (a rare
    collision only nudges an estimate; torch.unique over rows is far slower). The counting is
    NumPy's: its unique is much faster than torch's on a CPU."""
    if rows.shape[1] == 1:
        return rows[:, 0]
    mixed = torch.zeros(rows.shape[0], dtype=torch.int64)
    for column in rows.unbind(1):
        mixed = (mixed ^ column) * MIX  # int64 products wrap
        mixed = mixed ^ ((mixed >> 31) & LOW_33)  # a logical shift: the top bit kept
    return mixed


def _pick(rows: int, sample: int, generator: torch.Generator) -> torch.Tensor | None:
    """Distinct row numbers (up to ``sample`` drawn, repeats dropped), or None for the whole
    side. Without repeats, a side of unique keys has no equal pair in its sample: drawn with
    replacement, a row drawn twice made one, and the self-join figure of unique keys read far
    above 1 for some sizes of very large sides (the same draw for every data set of a size)."""
    if rows <= sample:
        return None
    return torch.unique(torch.randint(0, rows, (sample,), generator=generator))


def estimate_fanout(build_columns: list[torch.Tensor], build_valid: torch.Tensor | None,
                    probe_columns: list[torch.Tensor], probe_valid: torch.Tensor | None, *,
                    sample: int = SAMPLE_ROWS) -> float:
    """Build rows a probe row matches, estimated from at most ``sample`` rows of each side
    (null keys match nothing). Reads the sampled keys on the host: a synchronisation where
    they are on a GPU.

    Example:
        >>> import torch
        >>> estimate_fanout([torch.tensor([1, 2, 3])], None, [torch.tensor([3, 9])], None)
        1.0
    """
    build_rows, probe_rows = build_columns[0].shape[0], probe_columns[0].shape[0]
    if build_rows == 0 or probe_rows == 0:
        return 1.0
    generator = torch.Generator().manual_seed(SEED)
    build_pick = _pick(build_rows, sample, generator)
    probe_pick = _pick(probe_rows, sample, generator)
    build = _sampled_rows(build_columns, build_valid, build_pick)
    probe = _sampled_rows(probe_columns, probe_valid, probe_pick)
    if build.shape[0] == 0 or probe.shape[0] == 0:
        return 1.0
    keys, counts = np.unique(_one_word(build).numpy(), return_counts=True)
    counts = counts.astype(np.float64)
    probe_words = np.sort(_one_word(probe).numpy())  # sort and search: a third of the search
    at = np.minimum(np.searchsorted(keys, probe_words), keys.shape[0] - 1)
    met = np.where(keys[at] == probe_words, counts[at], 0.0)  # each probe row's build rows
    build_drawn = build_rows if build_pick is None else build_pick.shape[0]
    probe_drawn = probe_rows if probe_pick is None else probe_pick.shape[0]
    cross = float(met.sum()) / probe_drawn * build_rows / build_drawn
    if build_pick is None and probe_pick is None:
        return max(1.0, cross)  # both sides whole: the exact fanout
    # the self-join figure: the sum of squared counts over the valid rows (a probe drawn
    # like the build's keys; its null rows are no key)
    if build_pick is None:
        self_join = float((counts * counts).sum()) / float(counts.sum())
    else:
        # squares: the valid rows (each row paired with itself) and the ordered pairs of
        # distinct rows with one key, counted among the d drawn rows and scaled by
        # N (N - 1) / (d (d - 1)); the valid rows: those drawn, scaled by N / d
        drawn = build_drawn
        valid = float(counts.sum()) * build_rows / drawn
        pairs = float((counts * (counts - 1)).sum())
        squares = valid + pairs * build_rows * (build_rows - 1) / (drawn * (drawn - 1))
        self_join = squares / valid
    return max(1.0, min(cross, self_join))
