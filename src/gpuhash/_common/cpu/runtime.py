"""How the CPU engines run their numba loops (_common/cpu/probe.py, table/cpu/claims.py,
cache/cpu/loops.py): imported on first use (numba's import would slow ``import gpuhash``),
compiled into a cache directory numba can write, run on a threading layer that survives a
fork, and called under a lock where numba's threading layer cannot take two callers at once.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from contextlib import contextmanager
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
    """Keep the CPU engine usable in a child made by ``fork`` (multiprocessing's default on
    Linux, DataLoader workers). numba's OpenMP pool, the fastest here, does not survive a fork:
    numba ends a child that enters a parallel loop of a pool its parent used. So a forked child
    runs serial twins of the loops (_serial_twins) and torch's CPU operations on one thread, as
    a DataLoader worker does. (The fork-safe layers, workqueue and TBB, ran batches of a few
    hundred thousand keys at about half OpenMP's speed.)"""
    os.register_at_fork(after_in_child=_in_forked_child)


_FORKED = False  # a child made by fork of a process with an OpenMP pool: serial twins run
_TWINS: dict[str, object] = {}
_TWINS_LOCK = threading.Lock()  # one thread builds a module's twins (it swaps the cache dir)


def _in_forked_child() -> None:
    global _FORKED, _SERIAL, _TWINS_LOCK
    # another thread may have held these at the fork: the child's copies stay held forever
    _SERIAL, _TWINS_LOCK = threading.Lock(), threading.Lock()
    _TWINS.clear()
    if _LOOPS is None or not _layer_is_openmp():  # no pool inherited, or a fork-safe one
        return
    _FORKED = True
    import torch

    torch.set_num_threads(1)


def _serial_twins(module) -> dict[str, object]:
    """Every compiled loop of ``module`` again, without ``parallel`` (a prange runs as a
    range) and calling each other's twins, cached apart from the parallel ones (their cache
    entries share names and files)."""
    import types

    import numba

    own = vars(module)
    # the module's own loops; those it imports are serial (the probe walk's helpers) and stay
    names = {name: value for name, value in own.items()
             if isinstance(value, numba.core.registry.CPUDispatcher)
             and value.py_func.__globals__ is own}
    space = dict(vars(module))  # the twins' globals: each loop's name resolves to its twin
    for name, value in own.items():  # the module's plain functions call the twins too
        if isinstance(value, types.FunctionType) and value.__globals__ is own:
            space[name] = types.FunctionType(value.__code__, space, value.__name__,
                                             value.__defaults__, value.__closure__)
    # cached in a folder of their own: a twin's cache files are named as its parallel loop's
    folder = _twin_cache_dir(numba)
    chosen, numba.config.CACHE_DIR = numba.config.CACHE_DIR, folder or numba.config.CACHE_DIR
    try:
        for name, dispatcher in names.items():
            source = dispatcher.py_func
            plain = types.FunctionType(source.__code__, space, source.__name__,
                                       source.__defaults__, source.__closure__)
            options = {key: value for key, value in dispatcher.targetoptions.items()
                       if key not in ("parallel", "cache", "nopython")}
            space[name] = numba.njit(cache=folder is not None, **options)(plain)
    finally:
        numba.config.CACHE_DIR = chosen
    return space


def _twin_cache_dir(numba) -> str | None:
    """A writable folder for the serial twins' compiled code, beside the loops' own cache
    (None: none is writable, and the twins compile in each child)."""
    base = Path(numba.config.CACHE_DIR) if numba.config.CACHE_DIR else (
        Path(__file__).resolve().parents[2] / "__pycache__")
    for candidate in (base / "forked-serial",
                      Path(tempfile.gettempdir()) / f"gpuhash-numba-serial-{os.getuid()}"):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(candidate, os.W_OK):
            return str(candidate)
    return None


def _twin(module, name: str):
    key = module.__name__
    if key not in _TWINS:
        # before any cache-dir swap
        loops(), claim_loops(), cache_loops(), merge_loops(), group_loops(), shard_loops()
        with _TWINS_LOCK:
            if key not in _TWINS:
                _TWINS[key] = _serial_twins(module)
    return _TWINS[key][name]


def loops():
    """The compiled loops module of the tables."""
    global _LOOPS
    if _LOOPS is None:
        import numba

        _choose_cache_dir(numba)
        _fork_safe(numba)
        from gpuhash._common.cpu import probe as _cpu_loops

        _LOOPS = _cpu_loops
        # after _LOOPS: a child forked from here on knows to ask whether a pool exists
        _start_pool(numba)
    return _LOOPS


def _start_pool(numba) -> None:
    """Start numba's thread pool now, keeping torch's thread count: numba's OpenMP layer sets
    the count of the OpenMP runtime as its pool starts, and where torch loaded that runtime
    first (its wheels bring GNU OpenMP) the count is torch's too, so a user's
    ``torch.set_num_threads`` would be undone by the first parallel loop."""
    import torch

    before = torch.get_num_threads()
    # starts the pool (a ValueError: no threading layer can start here; the loops say so)
    with contextlib.suppress(ValueError):
        numba.get_num_threads()
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


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


def _layer_is_openmp() -> bool:
    """Whether numba's pool is OpenMP's (asked once a pool exists: a child whose parent never
    ran a parallel loop may start its own pool of any layer)."""
    try:
        return loops().numba.threading_layer() == "omp"
    except ValueError:  # no pool yet: none inherited either
        return False


def claim_loops():
    """The compiled claims of the tables (they call the tables' probe)."""
    loops()
    from gpuhash.table.cpu import claims as _cpu_claims

    return _cpu_claims


def merge_loops():
    """The compiled loops of merges of host tables (gathers of Arrow buffers)."""
    loops()
    from gpuhash.join.cpu import table_loops as _table_loops

    return _table_loops


def group_loops():
    """The compiled loops of group-bys."""
    loops()
    from gpuhash.groupby.cpu import loops as _group_loops

    return _group_loops


def shard_loops():
    """The compiled routing loops of the sharded tables."""
    loops()
    from gpuhash.distributed.cpu import loops as _shard_loops

    return _shard_loops


_CLAIMS = ("claim", "write_rows")


def run(name: str, *args):
    """Call the compiled loop ``name`` (CacheMap's: named cache_*; merges': merge_*;
    group-bys': group_*; the sharded tables' routing: shard_*; the claims: _CLAIMS)."""
    module = (cache_loops() if name.startswith("cache_") else
              merge_loops() if name.startswith("merge_") else
              group_loops() if name.startswith("group_") else
              shard_loops() if name.startswith("shard_") else
              claim_loops() if name in _CLAIMS else loops())
    function = _twin(module, name) if _FORKED else getattr(module, name)
    if _serialise():
        with _SERIAL:
            return function(*args)
    return function(*args)


def host_cores() -> int:
    """The cores this process may run on (its affinity where the system says)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@contextmanager
def core_share(threads: int, *, torch_threads: bool = False):
    """The CPU engine's parallel loops (and, with ``torch_threads``, torch's host operations)
    on ``threads`` threads inside the block, the counts before restored after it. numba's
    count is this thread's own (numba's rule); torch's is the process's. The fork guard is
    set first: asking numba for its threads starts its pool."""
    import numba
    import torch

    loops()
    before = numba.get_num_threads(), torch.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    if torch_threads:
        torch.set_num_threads(max(1, threads))
    try:
        yield
    finally:
        numba.set_num_threads(before[0])
        if torch_threads:
            torch.set_num_threads(before[1])
