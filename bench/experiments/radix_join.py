"""The radix-partitioned join (gpu-radix) against the single table, J3-J5 and a J4 with
repeated build keys, on one GPU in one process (device experiment: patches the planner's
radix_bits to force a choice, so each variant runs the package's own code).
Run: PYTHONPATH=src python bench/experiments/radix_join.py [--out FILE.json]."""

import argparse
import importlib
import json

import torch

import gpuhash as gh
from gpuhash import _join_plan
from gpuhash.bench.harness import time_gpu
from gpuhash.bench.join_suite import FULL, Shape, make_inputs

join_module = importlib.import_module("gpuhash.join")
original = _join_plan.radix_bits


def force(bits):
    """bits None: the planner's own choice; an int: that many bits for every table."""
    choice = original if bits is None else (lambda table, device: bits)
    _join_plan.radix_bits = join_module.radix_bits = choice


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    device = torch.device("cuda")
    results = []
    for name in ("J3", "J4", "J5"):
        build, probe = make_inputs(Shape(name, *FULL[name]), device)
        expected = None
        for bits in (0, None, 4, 6, 8, 10):
            force(bits)
            plan = gh.explain_join(probe, build)
            got = gh.join(probe, build)
            count = got[0].shape[0]
            expected = count if expected is None else expected
            assert count == expected, (name, bits, count, expected)
            ms = time_gpu(lambda: gh.join(probe, build), runs=args.runs).median_ms
            row = {"join": name, "bits": "planner" if bits is None else bits,
                   "strategy": plan.strategy, "radix_bits": plan.radix_bits, "ms": ms,
                   "pairs": count}
            results.append(row)
            print(row, flush=True)
        del build, probe
        torch.cuda.empty_cache()
    force(None)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
