"""A kernel-level timer the experiments share: calls back to back between two CUDA events, so
the host's launch time hides behind the kernels (unlike gpuhash.bench.harness.time_gpu, which
times each call alone from an idle GPU, as a user's single call runs)."""

import torch


def back_to_back(call, calls: int = 20) -> float:
    """CUDA-event milliseconds a call of ``calls`` made back to back, after 3 warm-up calls."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls
