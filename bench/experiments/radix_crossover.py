"""Where the radix-partitioned join (gpu-radix) overtakes one table: gh.join on the same keys
with the planner's RADIX_MIN_BUILD_ROWS set so that it takes one strategy or the other, in
alternating rounds (machine drift hits both), CUDA-event medians of 5, ms. Keys as `gpuhash
bench join`'s: unique int32 build keys, half the probe rows matching; "x10": each build key
10 times. Results checked equal once a shape. No public option forces a strategy, so this
sets the planner's threshold and clears its shared plans. On the GPU machine:
PYTHONPATH=src python bench/experiments/radix_crossover.py [shape ...]
Result: bench/results/radix_tiles_ab_h100_2026-11-26.txt (its "call 7", ROUNDS=3)."""

import functools
import os
import sys

import torch

import gpuhash as gh
from gpuhash.bench.harness import time_gpu
from gpuhash.join import plan as join_plan

DEV = torch.device("cuda")
SHAPES = {"J4": (10_000_000, 100_000_000, 1), "20Mx100M": (20_000_000, 100_000_000, 1),
          "30Mx100M": (30_000_000, 100_000_000, 1), "50Mx100M": (50_000_000, 100_000_000, 1),
          "J5": (100_000_000, 100_000_000, 1), "J5x10": (100_000_000, 100_000_000, 10)}
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def sides(build_rows: int, probe_rows: int, repeats: int, seed: int = 1):
    g = torch.Generator(device=DEV).manual_seed(seed)
    distinct = build_rows // repeats
    keys = torch.randperm(2 * distinct, device=DEV, generator=g)[:distinct].to(torch.int32)
    build = keys.repeat(repeats)[torch.randperm(build_rows, device=DEV, generator=g)]
    picks = torch.randint(0, distinct, (probe_rows // 2,), device=DEV, generator=g)
    absent = torch.randint(2 * distinct, 4 * distinct, (probe_rows - probe_rows // 2,),
                           device=DEV, generator=g).to(torch.int32)
    probe = torch.cat([keys[picks], absent])
    return build, probe[torch.randperm(probe_rows, device=DEV, generator=g)]


DEFAULT_MIN = join_plan.RADIX_MIN_BUILD_ROWS


def joined(probe, build, radix: bool):
    join_plan.RADIX_MIN_BUILD_ROWS = 1 if radix else 2**62
    join_plan._small_gpu_plan.cache_clear()
    try:
        return gh.join(probe, build)
    finally:
        join_plan.RADIX_MIN_BUILD_ROWS = DEFAULT_MIN


def timed(call, runs: int = 5) -> float:
    """Median ms of ``runs`` CUDA-event timings (the harness's; the 2026-11-26 figures came from
    a plain loop of warm-up + 5 timed calls, whose median this is within its outlier rule)."""
    return time_gpu(call, runs=runs).median_ms


def encoded(pairs) -> torch.Tensor:
    return torch.sort(pairs[0] * 2**31 + pairs[1]).values


def main() -> None:
    for name in sys.argv[1:] or list(SHAPES):
        build_rows, probe_rows, repeats = SHAPES[name]
        build, probe = sides(build_rows, probe_rows, repeats)
        plan = (join_plan.RADIX_MIN_BUILD_ROWS, gh.explain_join(probe, build).strategy)
        one, radix = joined(probe, build, False), joined(probe, build, True)
        same = torch.equal(encoded(one), encoded(radix))
        print(f"{name} {build_rows:,} x {probe_rows:,} (x{repeats}): {one[0].shape[0]:,} pairs,"
              f" equal {same}; default plan at RADIX_MIN_BUILD_ROWS {plan[0]:,}: {plan[1]}",
              flush=True)
        del one, radix
        for round_ in range(ROUNDS):
            table_ms = timed(functools.partial(joined, probe, build, False))
            radix_ms = timed(functools.partial(joined, probe, build, True))
            print(f"  round {round_}: one table {table_ms:.2f} ms, radix {radix_ms:.2f} ms "
                  f"({table_ms / radix_ms:.2f}x)", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
