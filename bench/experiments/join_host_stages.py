"""Where a small join's host time goes, stage by stage: gh.join of tiny CUDA inputs (100 x
1,000 int32 keys, so the kernels take microseconds and a call's wall time is the host's),
then the same path cut into its stages, each timed alone over many calls, and the price of
the primitives it is made of (a torch allocation, a fill, a launch, a one-word read); the
cProfile of the same path is join_host.py's. Reads internals, patches nothing.
On the GPU machine: PYTHONPATH=src python bench/experiments/join_host_stages.py"""

import importlib

import torch

import gpuhash as gh
from gpuhash.join.keys import build_encoder
from gpuhash.bench.harness import time_host_calls

J = importlib.import_module("gpuhash.join")
DEVICE = torch.device("cuda")


def main():
    generator = torch.Generator().manual_seed(1)
    build = (torch.randperm(100, generator=generator) * 2).to(torch.int32).to(DEVICE)
    probe = torch.randint(0, 200, (1000,), generator=generator, dtype=torch.int32).to(DEVICE)
    print(f"gh.join whole: {time_host_calls(lambda: gh.join(probe, build)):.1f} us a call")
    left, right = J._sides(probe, build, None, None)
    plan = J._plan(left, right, "inner", None, left.device)
    print(f"plan: {plan.strategy}, build side {plan.build_side}")
    stages = {
        "_sides + check": lambda: J._sides(probe, build, None, None),
        "_plan": lambda: J._plan(left, right, "inner", None, left.device),
        "build_encoder": lambda: build_encoder(right.columns, None),
        "JoinBuild._of (table + build launch)": lambda: J.JoinBuild._of(right),
    }
    joined = J.JoinBuild._of(right)
    stages["_match (probe, one sync)"] = lambda: joined._match(left, "inner", False, None)
    matches = joined._match(left, "inner", False, None)
    stages["assemble"] = matches.assemble
    stages["MultiMap(...)"] = lambda: gh.MultiMap(
        key_dtype=torch.int32, value_dtype=torch.int32, capacity=100, max_load_factor=0.5,
        growable=False, device=DEVICE)
    word = torch.zeros(2, dtype=torch.int64, device=DEVICE)
    stages["torch new_zeros(2)"] = lambda: word.new_zeros(2)
    stages["torch new_empty((2, 1000))"] = lambda: word.new_empty((2, 1000))
    stages["torch empty(1000)"] = lambda: torch.empty(1000, dtype=torch.int64, device=DEVICE)
    stages["tolist of 2 words (sync)"] = word.tolist
    stages["slice"] = lambda: word[:1]
    stages["torch.cuda.current_device"] = torch.cuda.current_device
    for name, call in stages.items():
        print(f"{name:40s} {time_host_calls(call):8.1f} us", flush=True)


if __name__ == "__main__":
    main()
