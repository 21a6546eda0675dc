"""What the join tests of the direct and ranked arrays share: the hows, pairs as sorted lists,
and a build table with its array filled by one engine, made by hand so that each engine can
be asked to fill the same array (tests/test_join_direct.py, tests/test_join_ranked.py)."""

from __future__ import annotations

import torch

from gpuhash.join import build as join_build
from gpuhash.join import build_arrays
from gpuhash.join import dense as _join_dense
from gpuhash.join.engine import engine_for as join_engine_for

HOWS = ["inner", "left", "right", "full", "semi", "anti"]


def pairs(result, how) -> list:
    """A join's result as a sorted list: rows for semi / anti, (left, right) pairs else."""
    if how in ("semi", "anti"):
        return sorted(result.cpu().tolist())
    return sorted(zip(*(r.cpu().tolist() for r in result), strict=True))


def engine_build(device, keys: torch.Tensor, valid: torch.Tensor | None, direct_words: int,
                 ranked_words: int = 0):
    """A build table of ``keys`` on ``device`` and its array (``direct_words`` zeroed words;
    with ``ranked_words``, a ranked array's bits, and that many words more for its base, rows
    and chunk sums) filled by that device's engine: (table, array, ranked words or None)."""
    encoder = join_build.build_encoder([keys], valid)
    table = join_build.RowTable.__new__(join_build.RowTable)
    table.rows, table.device, table._unique = keys.shape[0], torch.device(device), None
    table._pooled = False
    table._build = ([keys.to(device)], None if valid is None else valid.to(device))
    multi = join_build.MultiMap._empty(join_build.build_spec(encoder.key_dtype, table.rows, 0.5),
                                 table.device, growable=False, duplicates="any")
    direct = torch.zeros(direct_words, dtype=torch.int64, device=device)
    ranked = (torch.zeros(ranked_words, dtype=torch.int64, device=device) if ranked_words
              else None)
    groups = torch.zeros(join_build.group_words(multi._state.spec), dtype=torch.int64,
                         device=device)
    join_engine_for(multi.device).build(multi._state, *encoder.kernel_input(*table._build),
                                   groups=groups, direct=direct, ranked=ranked)
    table._built = (encoder, multi, None, direct, ranked)
    return table, direct, ranked


def arrays_anywhere(monkeypatch, *, ranked: bool) -> None:
    """Let CPU joins take the hash table's path with a direct array (``ranked``: a ranked one
    in its place), as only GPU joins do: no dense table, the arrays' GPU-only rule lifted."""
    monkeypatch.setattr(_join_dense, "DENSE_MIN_ROWS", 1 << 62)
    if ranked:
        monkeypatch.setattr(build_arrays, "DIRECT_MAX_BYTES", 0)

    def any_device(encoder, rows, device):
        if encoder.key_dtype != torch.int32:
            return 0, 0
        return build_arrays.array_words(rows, encoder.code_span)

    monkeypatch.setattr(join_build, "direct_words", any_device)
