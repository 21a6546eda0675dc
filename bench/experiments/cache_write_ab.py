"""One value width of HierarchicalKV's workload (`gpuhash bench cache`'s `workload`) for an A/B
of two trees in one device call: run it once per tree with that tree's src on PYTHONPATH.
Run: PYTHONPATH=src python bench/experiments/cache_write_ab.py --dim 8 --label current
[--capacity-log2 27] [--runs 5] [--json FILE]. Prints B-KV/s (wall, events) per API and load.
Also the run of gpuhash beside HierarchicalKV's benchmark in one call (before it):
bench/results/cache_dim8_h100_3e75a26_same_call_as_hkv_run1.json."""

import argparse
import json

import torch

from gpuhash.bench.cache_suite import APIS, BATCH, workload


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--capacity-log2", type=int, default=27)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--label", default="")
    parser.add_argument("--json")
    args = parser.parse_args()
    out = workload(args.dim, 1 << args.capacity_log2, torch.device("cuda"), batch=BATCH,
                   runs=args.runs, bucket_slots=128)
    for api in APIS:
        cells = [f"{row[api]['bkv_per_s']:.2f} ({row[api]['bkv_per_s_events']:.2f})"
                 for row in out["loads"].values()]
        print(f"{args.label:10s} dim {args.dim} {api:22s}", " / ".join(cells), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
