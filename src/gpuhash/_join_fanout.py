"""The join planner's estimate of repeated keys: how many build rows a probe row matches.

A join's output is sized exactly by its probe's count, so the estimate never changes what a
join returns. It changes what a plan holds in memory at once: a probe chunk's output pairs (16
bytes a pair) lie on the device until they are gathered or copied back, so a many-to-many
join planned as if each probe row matched one build row could pass its budget by the fanout.

Two estimates from random samples of rows (a fixed seed, so the same inputs get the same plan):
- ``cross``: each sampled probe row's key counted among the sampled build rows, scaled by the
  build's rows over the sample's. Unbiased, but where keys repeat seldom (unique build keys
  among hundreds of millions) a sample meets few of them and the figure scatters.
- ``self``: the rows a build row's key has, on average, from the equal pairs within the build
  sample (the self-join size over the rows). Exactly 1 for unique keys however large the side,
  but it weighs keys as the build side does, so a skewed build (Zipf) probed by evenly spread
  keys reads far above what the probe meets.

The plan takes the smaller, and at least 1: ``cross`` where the build skews, ``self`` where
its keys are (nearly) unique. Where a side has at most ``SAMPLE_ROWS`` rows the sample is the
whole side and ``cross`` is the exact fanout. A probe concentrated on the build's heaviest
keys can still read low; the exact count that sizes the output stays the guard.

Cost: on the 2-core machine, 12-14 ms for a 10M-row build and a 1.61G-row probe in host
memory (the streamed join of `gpuhash bench join`, about 0.7 s on the H100), mostly the
sampled rows' reads from the large side.

Example:
    >>> import torch
    >>> build = [torch.arange(1000).repeat_interleave(4)]   # every key 4 times
    >>> estimate_fanout(build, None, [torch.arange(1000)], None)
    4.0
"""

from __future__ import annotations

import numpy as np
import torch

SAMPLE_ROWS = 1 << 16
SEED = 0x5EED
MIX = -0x61C8864680B583EB  # 0x9E3779B97F4A7C15 as a signed 64-bit constant


def _sampled_rows(columns: list[torch.Tensor], valid: torch.Tensor | None,
                  picked: torch.Tensor | None) -> torch.Tensor:
    """The picked rows (all where None) with a valid key, as an (n, columns) int64 CPU tensor
    (columns of other widths join by value; uint64 keeps its bits)."""
    taken = []
    for column in columns:
        part = column if picked is None else column[picked.to(column.device)]
        part = part.cpu()
        taken.append(part.view(torch.int64) if part.dtype == torch.uint64
                     else part.to(torch.int64))
    rows = torch.stack(taken, dim=1)
    if valid is not None:
        keep = valid if picked is None else valid[picked.to(valid.device)]
        rows = rows[keep.cpu()]
    return rows


def _one_word(rows: torch.Tensor) -> torch.Tensor:
    """One int64 a row: the key itself for one column, else a mix of the columns (a rare
    collision only nudges an estimate; torch.unique over rows took 25x as long). The counting
    is NumPy's: its unique took a tenth of torch's on the 2-core machine."""
    if rows.shape[1] == 1:
        return rows[:, 0]
    mixed = torch.zeros(rows.shape[0], dtype=torch.int64)
    for column in rows.unbind(1):
        mixed = (mixed ^ column) * MIX  # int64 products wrap
        mixed = mixed ^ (mixed >> 31)
    return mixed


def _pick(rows: int, sample: int, generator: torch.Generator) -> torch.Tensor | None:
    """Row numbers of a sample drawn with replacement, or None for the whole side."""
    if rows <= sample:
        return None
    return torch.randint(0, rows, (sample,), generator=generator)


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
    if build_pick is None:
        self_join = float((counts * counts).sum()) / build_rows
    else:  # equal ordered pairs of draws, of s * (s - 1), estimate the sum of squared counts
        drawn = build_drawn
        self_join = float((counts * (counts - 1)).sum()) * build_rows / (drawn * (drawn - 1))
    return max(1.0, min(cross, self_join))
