"""The streamed (out-of-core) join at one size, with a per-phase profile of one call: for
looking at where its time goes before `gpuhash bench join` measures it.
Run: PYTHONPATH=src python bench/experiments/join_stream_probe.py --budget-gib 1 [--ratio 1.5]
[--json FILE]."""

import argparse
import cProfile
import json
import pstats

import torch

from gpuhash.bench.join_stream import run_streamed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-gib", type=float, default=1.0)
    parser.add_argument("--ratio", type=float, default=1.5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    device = torch.device("cuda")
    budget = int(args.budget_gib * 2**30)
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
    out = run_streamed(device, budget_bytes=budget, ratio=args.ratio, runs=2)
    if args.profile:
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    print(out["plan"])
    print("link", {k: round(v, 1) for k, v in out["link"].items()})
    for name, r in out["runs"].items():
        print(f"{name:16s} {r['seconds']:.3f} s ({r['all_seconds']}), {r['output_rows']:,} rows "
              f"out, {r['gb_per_s']:.1f} GB/s, ceiling {r['link_ceiling_s']:.3f} s: "
              f"{r['of_link_ceiling']:.2f} of it", flush=True)
    # the floor: the same join with both sides already in GPU memory, results left there
    from gpuhash.join import api as join
    from gpuhash.bench.harness import time_gpu
    from gpuhash.bench.join_stream import BUILD_ROWS
    build = (torch.randperm(BUILD_ROWS, device=device) * 2).to(torch.int32)
    probe = torch.randint(0, 2 * BUILD_ROWS, (out["probe_rows"],), device=device,
                          dtype=torch.int32)
    for how in ("inner", "semi"):
        t = time_gpu(lambda how=how: join(probe, build, how=how), runs=3)
        print(f"{how} with the keys in GPU memory: {t.median_ms:.1f} ms", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
