"""The phases of an operation and the wall-clock time each took, as ``explain=True`` prints
them (merges, group-bys).

Example:
    >>> phases = Phases()
    >>> phases.done("keys", "100 groups")
    >>> str(phases).split()[0], str(phases).split()[-2:]
    ('keys', ['100', 'groups'])
"""

from __future__ import annotations

import time


class Phases:
    """Wall-clock time of each phase, from the previous phase's end (or the start)."""

    def __init__(self):
        self.rows: list[tuple[str, float, str]] = []
        self._last = time.perf_counter()

    def done(self, phase: str, detail: str = "") -> None:
        now = time.perf_counter()
        self.rows.append((phase, (now - self._last) * 1e3, detail))
        self._last = now

    def __str__(self) -> str:
        width = max(len(p) for p, _, _ in self.rows) if self.rows else 0
        return "\n".join(f"  {p:<{width}}  {ms:8.2f} ms  {d}" for p, ms, d in self.rows)
