"""How the CPU engines run their numba loops (_common/cpu/probe.py, table/cpu/claims.py,
cache/cpu/loops.py): imported on first use (numba's import would slow ``import gpuhash``),
compiled into a cache directory numba can write, run on a threading layer that survives a
fork, and called under a lock where numba's threading layer cannot take two callers at once.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

_LOOPS = None
_LAYER: str | None = None
_SERIAL = threading.Lock()


def _choose_cache_dir(numba) -> None:
    """Numba caches compiled loops beside their module, else in the user's cache; where neither
    is writable (a read-only install run by a user without a home) it refuses to compile a
    cached function at all. Then use a directory of our own."""
    if numba.config.CACHE_DIR or os.access(Path(__file__).parent, os.W_OK):
        return
    for candidate in (Path.home() / ".cache" / "gpuhash" / "numba",
                      Path(tempfile.gettempdir()) / f"gpuhash-numba-{os.getuid()}"):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(candidate, os.W_OK):
            numba.config.CACHE_DIR = str(candidate)
            return


def _fork_safe(numba) -> None:
    """Make the CPU engine usable in a child made by ``fork`` (multiprocessing's default on
    Linux, DataLoader workers). GNU OpenMP's thread pool does not survive a fork: numba ends a
    child that enters a parallel region of a pool its parent used. So numba runs its loops on
    its own workqueue pool, fork-safe (its callers serialised: _serialise), unless the user
    chose a layer through NUMBA_THREADING_LAYER; and a forked child runs torch's CPU
    operations on one thread, as a DataLoader worker does. (TBB, also fork-safe, was no
    faster here.)"""
    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = "workqueue"
    os.register_at_fork(after_in_child=_in_forked_child)


def _in_forked_child() -> None:
    import torch

    torch.set_num_threads(1)


def loops():
    """The compiled loops module of the tables."""
    global _LOOPS
    if _LOOPS is None:
        import numba

        _choose_cache_dir(numba)
        _fork_safe(numba)
        from gpuhash._common.cpu import probe as _cpu_loops

        _LOOPS = _cpu_loops
    return _LOOPS


def cache_loops():
    """The compiled loops module of CacheMap (it calls the tables' hash)."""
    loops()
    from gpuhash.cache.cpu import loops as _cpu_cache_loops

    return _cpu_cache_loops


def _serialise() -> bool:
    """numba's fallback threading layer, workqueue (where neither TBB nor OpenMP is present),
    aborts the process when two threads run parallel loops at once. The layer is chosen by
    the first parallel loop: until then, serialise too."""
    global _LAYER
    if _LAYER is None:
        try:
            _LAYER = loops().numba.threading_layer()
        except ValueError:
            return True
    return _LAYER == "workqueue"


def claim_loops():
    """The compiled claims of the tables (they call the tables' probe)."""
    loops()
    from gpuhash.table.cpu import claims as _cpu_claims

    return _cpu_claims


_CLAIMS = ("claim", "write_rows")


def run(name: str, *args):
    """Call the compiled loop ``name`` (CacheMap's: named cache_*; the claims: _CLAIMS)."""
    module = (cache_loops() if name.startswith("cache_") else
              claim_loops() if name in _CLAIMS else loops())
    function = getattr(module, name)
    if _serialise():
        with _SERIAL:
            return function(*args)
    return function(*args)
