"""Children made by ``fork`` after the CPU engine ran in the parent (multiprocessing's default
start method on Linux, and every DataLoader worker) use gpuhash and exit: tables inherited
from the parent and new ones, through os.fork, a multiprocessing pool and a DataLoader. Each
case runs in a fresh interpreter with a time limit, since the failure is a child that hangs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

PARENT = """
import os, sys, torch, gpuhash as gh
table = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
table.insert(torch.arange(200_000), torch.ones(200_000))  # the engine's parallel loops ran
cache = gh.CacheMap(key_dtype=torch.int64, value_dtype=torch.float32, capacity=1 << 12)
cache.insert_or_assign(torch.arange(1000), torch.ones(1000))
import pyarrow as pa
facts = pa.table({"k": list(range(300_000)), "s": [str(i) for i in range(300_000)]})
assert gh.merge(facts, pa.table({"k": [1, 2], "v": [1.0, 2.0]}), on="k").num_rows == 2


def child_work(seed):
    fresh = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32)
    keys = torch.arange(seed, seed + 100_000)
    fresh.insert(keys, keys.float())
    multi = gh.MultiMap(key_dtype=torch.int64)
    multi.insert(keys.repeat(2))
    assert len(fresh) == 100_000 and int(multi.count(keys[:5]).sum()) == 10
    assert bool(table.find(torch.arange(10))[1].all()), "the inherited table"
    assert bool(cache.find(torch.arange(10))[1].all()), "the inherited cache"
    left, right = gh.join(keys[:1000], torch.arange(seed, seed + 500))
    assert left.shape[0] == 500
    merged = gh.merge(facts, pa.table({"s": ["7", "9", "x"], "w": [7, 9, 0]}), on="s")
    assert merged.column("k").to_pylist() == [7, 9], "a merge of host tables"
    return len(fresh)


def in_a_forked_child(work):  # True if work() returned in a child made by os.fork
    pid = os.fork()
    if pid == 0:
        try:
            work()
        except BaseException as error:
            print(repr(error), file=sys.stderr, flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0
"""


def _run(body: str, timeout: int = 120) -> subprocess.CompletedProcess:
    code = textwrap.dedent(PARENT) + textwrap.dedent(body)
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"a forked child hung: {expired.stdout!r} {expired.stderr!r}")


def test_an_os_fork_child_uses_inherited_and_new_tables():
    done = _run("""
        assert in_a_forked_child(lambda: child_work(7))
        assert len(table) == 200_000  # the parent goes on
        print("ok")
    """)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_a_multiprocessing_fork_pool_uses_the_engine():
    done = _run("""
        import multiprocessing
        with multiprocessing.get_context("fork").Pool(2) as pool:
            assert pool.map(child_work, [1, 2, 3, 4]) == [100_000] * 4
        print("ok")
    """)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_dataloader_workers_use_gpuhash():
    done = _run("""
        from torch.utils.data import DataLoader, Dataset

        class Lookups(Dataset):
            def __len__(self):
                return 8

            def __getitem__(self, i):
                return child_work(100 * i)

        loader = DataLoader(Lookups(), batch_size=2, num_workers=2,
                            multiprocessing_context="fork")
        assert sum(int(batch.sum()) for batch in loader) == 8 * 100_000
        print("ok")
    """, timeout=180)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


@pytest.mark.gpu
def test_a_cuda_table_in_the_parent_does_not_break_a_cpu_engine_child():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    done = _run("""
        on_gpu = gh.HashMap(key_dtype=torch.int64, value_dtype=torch.float32, device="cuda")
        on_gpu.insert(torch.arange(1000, device="cuda"), torch.ones(1000, device="cuda"))
        torch.cuda.synchronize()
        assert in_a_forked_child(lambda: child_work(3))
        print("ok")
    """)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_a_fork_while_another_thread_holds_a_tables_lock_leaves_the_child_a_usable_table():
    done = _run("""
        import threading
        held, release = threading.Event(), threading.Event()

        def hold():
            with table._order.lock:  # another thread in the middle of an operation
                held.set()
                release.wait()

        thread = threading.Thread(target=hold)
        thread.start()
        held.wait()
        def grow():
            table.insert(torch.arange(200_000, 200_100), torch.ones(100))
            assert len(table) == 200_100

        assert in_a_forked_child(grow)  # the child runs while the thread still holds it
        release.set()
        thread.join()
        print("ok")
    """)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_a_fork_after_a_distributed_call_that_failed_early_leaves_the_child_usable():
    # the call sets each rank's share of numba's threads (starting its pool) and raises before
    # any loop of the engine ran: the fork guard must already be in place
    code = textwrap.dedent("""
        import os
        os.environ["LOCAL_WORLD_SIZE"] = "2"
        import numpy as np, pyarrow as pa, gpuhash as gh
        from gpuhash.distributed.frames import on_rank_cores

        @on_rank_cores
        def fails():
            raise RuntimeError("before any loop")

        try:
            fails()
        except RuntimeError:
            pass
        pid = os.fork()
        if pid == 0:
            facts = pa.table({"k": np.arange(200_000) % 1000, "v": np.arange(200_000)})
            out = gh.merge(facts, pa.table({"k": np.arange(1000)}), on="k", device="cpu")
            os._exit(0 if out.num_rows == 200_000 else 1)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"a forked child hung: {expired.stdout!r} {expired.stderr!r}")
    assert done.returncode == 0 and "child 0" in done.stdout, done.stderr
