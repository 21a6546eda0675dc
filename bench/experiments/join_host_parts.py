"""Where J1's host time goes, part by part, beside a tiny join's: each piece of gh.join's
path (the sides, the plan, the build table's allocation, its one launch, the probe launch
with its one read, the result) timed alone over many calls back to back, and the whole call
by CUDA events from an idle GPU as the benchmark times it. join_host_stages.py times the
coarser stages and the torch primitives. Reads internals, patches nothing.
On the GPU machine: PYTHONPATH=src python bench/experiments/join_host_parts.py"""

import importlib

import torch

import gpuhash as gh
from gpuhash.join import pool as _join_pool
from gpuhash._common.cuda.launch import launch, launch_cooperative
from gpuhash.join.keys import build_encoder
from gpuhash.table.base import stream_context
from gpuhash.bench.harness import time_gpu, time_host_calls
from gpuhash.bench.join_suite import FULL, Shape, make_inputs
from gpuhash.table.cpu import engine as cpu
from gpuhash.table.cuda import engine as cuda
from gpuhash.table.multimap import MultiMap

J = importlib.import_module("gpuhash.join")
# the CPU engine only to try the script where there is no GPU (its figures mean nothing)
GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda", torch.cuda.current_device()) if GPU else torch.device("cpu")
engine = cuda if GPU else cpu
if not GPU:
    torch.cuda.synchronize = lambda *args: None


def parts(name: str, build: torch.Tensor, probe: torch.Tensor) -> None:
    whole = time_gpu(lambda: gh.join(probe, build), runs=31).median_ms if GPU else 0.0
    print(f"{name}: gh.join events {whole * 1e3:.1f} us, back to back "
          f"{time_host_calls(lambda: gh.join(probe, build), calls=500):.1f} us", flush=True)
    left, right = J._sides(probe, build, None, None)
    plan = J._plan(left, right, "inner", None, left.device)
    encoder = build_encoder(right.columns, right.valid)
    rows = right.rows
    entries = J._direct_entries(encoder, rows, DEVICE)
    spec = J._build_spec(encoder.key_dtype, rows, J._RowTable.LOAD)
    spare = (entries + 1 if entries else 0) + J._group_words(spec)
    table = J._RowTable(encoder, right.columns, right.valid, rows, DEVICE)
    multi = table.multi
    steps = {
        "_check_how + _sides": lambda: J._sides(probe, build, None, None),
        "_plan": lambda: J._plan(left, right, "inner", None, left.device),
        "build_encoder": lambda: build_encoder(right.columns, right.valid),
        "_direct_entries + _build_spec": lambda: (
            J._direct_entries(encoder, rows, DEVICE),
            J._build_spec(encoder.key_dtype, rows, J._RowTable.LOAD)),
        "engine.empty_state (unfilled)": lambda: engine.empty_state(
            spec, DEVICE, spare_words=spare, filled=False),
        "MultiMap._empty (unfilled)": lambda: MultiMap._empty(
            spec, DEVICE, growable=False, duplicates="any", spare_words=spare, filled=False),
        # a build fills a new table: its launch is this less the line above (a second build
        # into one table would find every code stored, and its groups overrun their array)
        "_RowTable (table + build)": lambda: J._RowTable(
            encoder, right.columns, right.valid, rows, DEVICE),
        "JoinBuild._of": lambda: J.JoinBuild._of(right),
        "multi_join_probe (launch + read)": lambda: multi._engine.multi_join_probe(
            multi._state, *encoder.kernel_input(left.columns, left.valid),
            direct=table._built[3]),
        "_Matches(...)": lambda: J._Matches("inner", True, left.rows, rows, DEVICE),
        "JoinBuild._match + assemble": lambda: J.JoinBuild._of(right)._match(
            left, "inner", False, plan.chunk_rows).assemble(),
        "to_kind of the pair": lambda: gh._arrays.to_kind(probe, left.kind),
    }
    def kept_table():  # the path gh.join takes: a table from the pool, built, handed back
        J._RowTable(encoder, right.columns, right.valid, rows, DEVICE).hand_back()

    def take_and_hand_back():
        _join_pool.hand_back(_join_pool.take(spec, DEVICE, spare_words=spare))

    def no_stream():
        with stream_context(None, DEVICE):
            pass

    steps["_RowTable from the pool, built, handed back"] = kept_table
    steps["_join_pool.take + hand_back"] = take_and_hand_back
    steps["encoder.kernel_input"] = lambda: encoder.kernel_input(*table._build)
    steps["stream_context(None) enter + exit"] = no_stream
    steps["_Side of the probe keys"] = lambda: J._Side(probe, "left_keys", None, "left_valid")
    if GPU:
        state = multi._state
        steps["_launch_info (kept)"] = lambda: cuda._launch_info(state)
        stream = torch.cuda.current_stream(DEVICE).cuda_stream
        steps["_barrier_word"] = lambda: cuda._barrier_word(DEVICE.index, stream)
        steps["torch current raw stream"] = lambda: torch._C._cuda_getCurrentRawStream(
            DEVICE.index)
        word = torch.zeros(2, dtype=torch.int64, device=DEVICE).data_ptr()
        steps["fill launch of 1 word"] = lambda: launch(cuda._fill_kernel(DEVICE.index, None),
                                                        1, word, 0, 1, 1, device=DEVICE.index)
        steps["the same, launched cooperatively"] = lambda: launch_cooperative(
            cuda._fill_kernel(DEVICE.index, None), 1, word, 0, 1, 1, device=DEVICE.index)
    for step, call in steps.items():
        print(f"  {step:40s} {time_host_calls(call, calls=500 if GPU else 3):8.1f} us", flush=True)


def main():
    generator = torch.Generator().manual_seed(1)
    tiny_build = (torch.randperm(100, generator=generator) * 2).to(torch.int32).to(DEVICE)
    tiny_probe = torch.randint(0, 200, (1000,), generator=generator,
                               dtype=torch.int32).to(DEVICE)
    parts("tiny 100 x 1,000", tiny_build, tiny_probe)
    for name in ("J1", "J2") if GPU else ():
        build, probe = make_inputs(Shape(name, *FULL[name]), DEVICE)
        parts(name, build, probe)


if __name__ == "__main__":
    main()
