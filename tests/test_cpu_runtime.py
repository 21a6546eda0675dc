"""How the CPU engine runs its numba loops: where they are cached, and calls from several
threads under numba's fallback threading layer."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from gpuhash._common.cpu import runtime as _cpu_runtime

THREADED_FINDS = """
import threading, torch, gpuhash as gh, numba
maps = [gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=50000)
        for _ in range(4)]
keys = torch.randint(0, 10**9, (20000,))
for m in maps:
    m.insert(keys, torch.rand(20000))
def work(m):
    for _ in range(30):
        assert bool(m.find(keys)[1].all())
threads = [threading.Thread(target=work, args=(m,)) for m in maps]
[t.start() for t in threads]
[t.join() for t in threads]
print("layer", numba.threading_layer())
"""


@pytest.mark.slow  # a fresh interpreter importing torch and the package
def test_threads_calling_the_cpu_engine_at_once_under_the_workqueue_layer():
    """numba's workqueue layer aborts the process ("Concurrent access has been detected")
    when two threads run parallel loops at once, unless the calls are serialised."""
    environment = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    result = subprocess.run([sys.executable, "-c", THREADED_FINDS], capture_output=True,
                            text=True, timeout=600, env=environment)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "layer workqueue" in result.stdout


def test_an_unwritable_install_and_home_get_a_cache_directory_of_their_own(monkeypatch, tmp_path):
    """numba refuses to compile a cached function where it can write no cache."""
    scratch = tmp_path / "tmp"  # the only place the fake os.access calls writable
    monkeypatch.setattr(os, "access", lambda path, mode: str(path).startswith(str(scratch)))
    monkeypatch.setattr(_cpu_runtime.Path, "home", staticmethod(lambda: tmp_path / "ro-home"))
    monkeypatch.setattr(_cpu_runtime.tempfile, "gettempdir", lambda: str(scratch))
    fake = types.SimpleNamespace(config=types.SimpleNamespace(CACHE_DIR=""))
    _cpu_runtime._choose_cache_dir(fake)
    assert fake.config.CACHE_DIR.startswith(str(scratch))
    # a directory the user chose is kept
    fake.config.CACHE_DIR = "/chosen"
    _cpu_runtime._choose_cache_dir(fake)
    assert fake.config.CACHE_DIR == "/chosen"


def test_the_users_threading_layer_is_kept():
    code = ("import torch, gpuhash as gh, numba\n"
            "m = gh.HashSet(key_dtype=torch.int64)\n"
            "m.insert(torch.arange(100_000))\n"
            "print('layer', numba.threading_layer())\n")
    chosen = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=600, env=chosen)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "workqueue"
