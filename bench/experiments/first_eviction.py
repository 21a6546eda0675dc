"""The load at a CacheMap's first eviction and the share of the top scores it keeps, per bucket
width (`gpuhash bench cache`'s eviction_quality), for an A/B of two trees in one device call:
run it once per tree with that tree's src on PYTHONPATH.
Run: PYTHONPATH=src python bench/experiments/first_eviction.py --label current
[--capacity-log2 22] [--json FILE]."""

import argparse
import json

import torch

from gpuhash.bench.cache_suite import BATCH, eviction_quality


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--capacity-log2", type=int, default=22)
    parser.add_argument("--label", default="")
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for width in (16, 32, 64, 128):
        row = eviction_quality(1 << args.capacity_log2, width, torch.device("cuda"),
                               batch=BATCH >> 4)
        rows.append(row)
        print(f"{args.label:10s} {width:>3}-slot buckets: first eviction at load "
              f"{row['first_eviction_load']:.4f}, kept {row['kept_of_top']:.4f} of the top",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
