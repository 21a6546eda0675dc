"""What a kernel launch costs the host by the route it takes: the package's (cuda.core's
`launch`, _cuda/launch.py) against the driver's cuLaunchKernel called through cuda.bindings
with the parameters packed beforehand (an array of 8-byte values and an array of pointers to
them, the changing ones written in place each call). An empty kernel of 24 eight-byte
parameters, launched back to back, host us a launch (median of 7 rounds of 2000).
On the GPU machine: PYTHONPATH=src python bench/experiments/launch_paths.py"""

import ctypes
import statistics
import time

import cuda.bindings
import cuda.core
import numpy as np
import torch
from cuda.bindings import driver
from cuda.core import Device, Program, ProgramOptions

from gpuhash._common.cuda.launch import launch

SOURCE = r"""
#define P(i) long long a##i
extern "C" __global__ void args24(P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7), P(8), P(9),
                                  P(10), P(11), P(12), P(13), P(14), P(15), P(16), P(17),
                                  P(18), P(19), P(20), P(21), P(22), P(23)) {}
"""
CALLS, ROUNDS = 2000, 7


def per_call(call) -> float:
    rounds = []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(CALLS):
            call()
        rounds.append((time.perf_counter() - began) / CALLS * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def main() -> None:
    print(f"cuda.core {cuda.core.__version__}, cuda.bindings {cuda.bindings.__version__}")
    torch.zeros(1, device="cuda")
    device = Device(0)
    device.set_current()
    major, minor = device.compute_capability
    program = Program(SOURCE, code_type="c++",
                      options=ProgramOptions(arch=f"sm_{major}{minor}"))
    kernel = program.compile("cubin", name_expressions=("args24",)).get_kernel("args24")
    args = list(range(1, 25))
    core = per_call(lambda: launch(kernel, 256, *args, device=0))
    print(f"cuda.core launch:        {core:.2f} us")

    values = np.arange(1, 25, dtype=np.uint64)
    pointers = (ctypes.c_void_p * 24)(*[values.ctypes.data + 8 * i for i in range(24)])
    address = ctypes.addressof(pointers)
    function = driver.CUfunction(int(kernel._handle))

    def packed(wrap=int):
        stream = wrap(torch._C._cuda_getCurrentRawStream(0))
        values[0] = 7  # the parameters a call changes, written in place
        values[10] = 9
        values[20] = 11
        return driver.cuLaunchKernel(function, 1, 1, 1, 256, 1, 1, 0, stream, address, 0)

    try:
        status = packed()
    except TypeError as error:  # a stream given as a plain int refused
        print("int stream refused:", error)
        status = packed(driver.CUstream)
        print(f"cuLaunchKernel, packed (CUstream made a call): "
              f"{per_call(lambda: packed(driver.CUstream)):.2f} us, status {status}")
        return
    print(f"cuLaunchKernel, packed:  {per_call(packed):.2f} us, status {status}")


if __name__ == "__main__":
    main()
