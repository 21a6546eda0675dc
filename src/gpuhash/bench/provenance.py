"""Which code a figure measured: the commit every benchmark result records.

Example:
    >>> isinstance(source_commit(), str)
    True
"""

from __future__ import annotations

import os
import subprocess


def source_commit() -> str:
    """``$GPUHASH_COMMIT`` when set (a copy of the tree whose own git history is stale, as on
    a machine the tree was carried to), else the checkout's HEAD, marked ``+uncommitted``
    when tracked files differ from it; ``unknown`` outside a git checkout."""
    if os.environ.get("GPUHASH_COMMIT"):
        return os.environ["GPUHASH_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + "+uncommitted" if changed else head  # a figure names the code it measured
