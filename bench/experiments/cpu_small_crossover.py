"""Where a join of CUDA tensors is faster on the CPU (the planner's cpu-small, copies included)
than on the GPU: gh.join of int32 keys on the GPU, forced each way by patching the planner's
CPU_SMALL_MAX_ROWS, beside pyarrow's join of the same keys (device-to-host copy of the keys
and host-to-device copy of the gather maps included), build : probe 1 : 10 and 1 : 1, about
half the probe rows matching, wall clock to a sync (median of 31; each size warmed up first).
On the GPU machine: PYTHONPATH=src python bench/experiments/cpu_small_crossover.py [--out F]"""

import argparse
import json
import statistics
import time

import numpy as np
import pyarrow as pa
import torch

import gpuhash as gh
from gpuhash.join import plan as _join_plan


def wall_ms(call, runs=31):
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        call()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - began) * 1e3)
    return statistics.median(samples)


def pyarrow_join(probe, build):
    left = pa.table({"k": probe.cpu().numpy(), "l": np.arange(probe.shape[0])})
    right = pa.table({"k": build.cpu().numpy(), "r": np.arange(build.shape[0])})
    out = left.join(right, "k", join_type="inner")
    return (torch.from_numpy(out["l"].to_numpy()).cuda(),
            torch.from_numpy(out["r"].to_numpy()).cuda())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(3)
    rows = []
    for total_log2 in range(6, 19):
        for ratio in (10, 1):
            probe_rows = (1 << total_log2) * ratio // (ratio + 1)
            build_rows = max(1, (1 << total_log2) - probe_rows)
            build = (torch.randperm(build_rows, generator=generator) * 2).to(torch.int32)
            probe = torch.randint(0, 2 * build_rows, (probe_rows,), generator=generator,
                                  dtype=torch.int32)
            build, probe = build.cuda(), probe.cuda()
            times = {}
            for name, limit in (("gpu", 0), ("cpu-small", 1 << 40)):
                _join_plan.CPU_SMALL_MAX_ROWS["gpuhash-cpu"] = limit
                times[name] = wall_ms(lambda p=probe, b=build: gh.join(p, b))
            times["pyarrow"] = wall_ms(lambda p=probe, b=build: pyarrow_join(p, b))
            row = {"total_rows": build_rows + probe_rows, "build": build_rows,
                   "probe": probe_rows, **{f"{k}_ms": round(v, 4) for k, v in times.items()}}
            rows.append(row)
            print(row, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
