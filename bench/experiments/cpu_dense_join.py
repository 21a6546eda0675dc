"""The CPU engine's join of dense int32 keys through the array-indexed build side against the
hash table (forced by raising DENSE_MIN_ROWS, an experiment-only patch of a module constant)
and pandas' merge, in one process, rounds alternating; and of sparse keys (random 31-bit
values), where the array is not chosen. The J2 shape of `gpuhash bench join`: 1M distinct
build keys (the even numbers below 2M, shuffled), 1M probe keys below 2M. Wall ms, median
(min) of 7 rounds. On a CPU: PYTHONPATH=src python bench/experiments/cpu_dense_join.py"""

import statistics
import time

import pandas as pd
import torch

import gpuhash as gh
from gpuhash.join import dense as join_dense

ROWS = 1_000_000


def median_min(call, rounds=7):
    call()
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1e3)
    return round(statistics.median(times), 1), round(min(times), 1)


def hashed(left, right):
    kept = join_dense.DENSE_MIN_ROWS
    join_dense.DENSE_MIN_ROWS = 1 << 62
    try:
        return gh.join(left, right)
    finally:
        join_dense.DENSE_MIN_ROWS = kept


def main():
    generator = torch.Generator().manual_seed(12)
    dense_right = (torch.randperm(ROWS, generator=generator) * 2).to(torch.int32)
    dense_left = torch.randint(0, 2 * ROWS, (ROWS,), generator=generator, dtype=torch.int32)
    sparse_right = torch.randint(0, 2**31 - 2, (ROWS,), generator=generator, dtype=torch.int32)
    sparse_left = torch.where(torch.rand(ROWS, generator=generator) < 0.5,
                              sparse_right[torch.randint(0, ROWS, (ROWS,), generator=generator)],
                              torch.randint(0, 2**31 - 2, (ROWS,), generator=generator,
                                            dtype=torch.int32))
    measure("dense", dense_left, dense_right)
    measure("sparse", sparse_left, sparse_right)


def measure(name, left, right):
    ours, forced = gh.join(left, right), hashed(left, right)
    assert sorted(zip(*(r.tolist() for r in ours))) == sorted(zip(*(r.tolist() for r in forced)))
    frames = pd.DataFrame({"k": left.numpy()}), pd.DataFrame({"k": right.numpy()})
    print(name, {"gh.join": median_min(lambda: gh.join(left, right)),
                 "hash table forced": median_min(lambda: hashed(left, right)),
                 "pandas merge": median_min(lambda: frames[0].merge(frames[1], on="k")),
                 "pairs": int(ours[0].shape[0])}, flush=True)


if __name__ == "__main__":
    main()
