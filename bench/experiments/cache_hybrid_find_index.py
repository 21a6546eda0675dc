"""Issue 11's hybrid target, measured alone: find_index with half the value rows in host
memory (dim 64, 128M slots, `max_hbm_bytes` = 16 GiB) against every row in GPU memory (dim
64, 64M slots, as `gpuhash bench cache` runs it), HKV's workload and method
(`cache_suite.workload`), two rounds alternating, after a warm-up. B-KV/s by wall clock
(CUDA events in brackets) at load 0.5 / 0.75 / 1.0.
On the GPU machine: PYTHONPATH=src python bench/experiments/cache_hybrid_find_index.py"""

import torch

from gpuhash.bench.cache_suite import BATCH, workload
from gpuhash.bench.harness import warm_up_gpu

DEV = torch.device("cuda")


def main() -> None:
    warm_up_gpu(DEV, seconds=10.0)
    for round_ in range(2):
        for label, capacity, hbm in (("pure HBM, 64M", 64 << 20, None),
                                     ("hybrid, 128M", 128 << 20, (128 << 20) * 64 * 4 // 2)):
            out = workload(64, capacity, DEV, batch=BATCH, runs=5, bucket_slots=128,
                           max_hbm_bytes=hbm)
            for api in ("find_index", "find"):
                cells = " / ".join(
                    f"{row[api]['bkv_per_s']:.2f} ({row[api]['bkv_per_s_events']:.2f})"
                    for row in out["loads"].values())
                print(f"round {round_} {label:14s} {api:10s} {cells}", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
