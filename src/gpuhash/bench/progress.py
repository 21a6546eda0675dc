"""Which step of a benchmark run is being measured, n of m, on stderr (the figures go to
stdout): a progress bar when stderr is a terminal, else one line a step, so that a log shows
where a long run stands and a terminal is not left silent.

Suites take ``step``, a callable given each step's label as the step starts (None: say nothing).

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> with Steps("map", 2, stream=out) as step:
    ...     step("u32->u32 load 0.5")
    ...     step("u32->u32 load 0.9")
    >>> print(out.getvalue(), end="")
    gpuhash bench map [1/2] u32->u32 load 0.5
    gpuhash bench map [2/2] u32->u32 load 0.9
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

Step = Callable[[str], None]


def quiet(label: str) -> None:
    """A ``step`` that says nothing."""


class Steps:
    """Counts the steps of a run of ``total`` steps and shows each as it starts; a context
    manager (the bar is taken down at the end, leaving the terminal to the figures). The bar
    is drawn only when a step starts: no thread redraws it while a figure is timed."""

    def __init__(self, suite: str, total: int, *, stream: TextIO | None = None):
        self.suite, self.total, self.done = suite, total, 0
        self._stream = stream
        self._bar = None
        self._task = None

    def __enter__(self) -> Steps:
        stream = self._stream or sys.stderr
        if stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.table import Column

            # the label takes what the fixed columns leave, and is the one cut if need be
            label = TextColumn("{task.description}",
                               table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis"))
            self._bar = Progress(TextColumn("gpuhash bench {task.fields[suite]}"),
                                 BarColumn(bar_width=10), MofNCompleteColumn(),
                                 TimeElapsedColumn(), label, console=Console(file=stream),
                                 transient=True, auto_refresh=False, expand=True)
            self._bar.start()
            self._task = self._bar.add_task("", total=self.total, suite=self.suite)
        return self

    def __call__(self, label: str) -> None:
        self.done += 1
        self.total = max(self.total, self.done)  # a count that fell short still reads n of m
        if self._bar is not None:
            # the bar counts finished steps; this one is starting
            self._bar.update(self._task, completed=self.done - 1, total=self.total,
                             description=label, refresh=True)
        else:
            print(f"gpuhash bench {self.suite} [{self.done}/{self.total}] {label}",
                  file=self._stream or sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
