"""What a kernel launch from Python costs by its number of arguments: an empty kernel of 4,
12 and 24 eight-byte parameters launched through _cuda.launch (cuda.core), back to back, host
us a launch; then the same 24 values passed as one struct (a NumPy structured scalar) where
cuda.core takes it. On the GPU machine: PYTHONPATH=src python bench/experiments/launch_args.py"""

import numpy as np
import torch
from cuda.core import Device, Program, ProgramOptions

from gpuhash._common.cuda.launch import launch
from gpuhash.bench.harness import time_host_calls

SOURCE = r"""
extern "C" __global__ void args4(long long a0, long long a1, long long a2, long long a3) {}
#define P(i) long long a##i
extern "C" __global__ void args12(P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7), P(8), P(9),
                                  P(10), P(11)) {}
extern "C" __global__ void args24(P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7), P(8), P(9),
                                  P(10), P(11), P(12), P(13), P(14), P(15), P(16), P(17),
                                  P(18), P(19), P(20), P(21), P(22), P(23)) {}
struct Pack { long long a[24]; };
extern "C" __global__ void packed(Pack p) {}
"""


def main():
    torch.zeros(1, device="cuda")
    device = Device(0)
    device.set_current()
    major, minor = device.compute_capability
    code = Program(SOURCE, "c++", ProgramOptions(arch=f"sm_{major}{minor}")).compile("cubin")
    for name, count in (("args4", 4), ("args12", 12), ("args24", 24)):
        kernel = code.get_kernel(name)
        args = list(range(1, count + 1))
        us = time_host_calls(lambda k=kernel, a=args: launch(k, 1, *a, device=0))
        print(f"{count:2d} arguments: {us:.2f} us", flush=True)
    kernel = code.get_kernel("packed")
    pack = np.zeros(1, dtype=np.dtype([("a", np.int64, (24,))]))[0]
    try:
        us = time_host_calls(lambda: launch(kernel, 1, pack, device=0))
        print(f"one struct of 24: {us:.2f} us")
    except Exception as error:  # noqa: BLE001 (what cuda.core refuses is the finding)
        print(f"one struct of 24: refused ({type(error).__name__}: {error})")


if __name__ == "__main__":
    main()
