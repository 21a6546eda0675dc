"""Compile every kernel file for sm_80 and sm_90 with nvcc, warnings as errors (no GPU needed).

The table kernels are compiled once per layout and width the CUDA engine can ask for, with the
same definitions it passes to NVRTC (engines/cuda.py: defines), with includes inlined as NVRTC
sees them. Exit status 1 if any compile fails.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from gpuhash._cuda.compile import inline_source
from gpuhash._format import TableSpec
from gpuhash.engines.cuda import defines

ARCHS = ("sm_80", "sm_90")
VALUES = [(None, ()), (torch.int8, ()), (torch.int8, (3,)), (torch.float16, ()),
          (torch.int32, ()), (torch.int16, (3,)), (torch.float64, ()), (torch.float32, (3,)),
          (torch.float32, (8,)), (torch.float64, (5,))]


def configurations() -> list[tuple[tuple[str, int], ...]]:
    seen = []
    for key, (value, shape), width in itertools.product((torch.int32, torch.int64), VALUES,
                                                        (4, 8)):
        spec = TableSpec(key_dtype=key, value_dtype=value, value_shape=shape, num_buckets=1,
                         bucket_slots=width)
        if defines(spec) not in seen:
            seen.append(defines(spec))
    return seen


def compile_one(source: Path, arch: str, macros: tuple[tuple[str, int], ...]) -> bool:
    flags = [f"-D{name}={value}" for name, value in macros]
    command = ["nvcc", "-std=c++17", f"-arch={arch}", "-Werror", "all-warnings", "-c",
               str(source), "-o", "/dev/null", *flags]
    result = subprocess.run(command, capture_output=True, text=True)
    label = " ".join(flags) or "(no definitions)"
    print(f"{'ok  ' if result.returncode == 0 else 'FAIL'} {source.name} {arch} {label}")
    if result.returncode:
        print(result.stdout + result.stderr)
    return result.returncode == 0


def main() -> int:
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        for name, macro_sets in (("map.cu", configurations()), ("bench.cu", [()])):
            source = Path(folder) / name
            source.write_text(inline_source(name))  # exactly the text NVRTC compiles
            for arch, macros in itertools.product(ARCHS, macro_sets):
                ok &= compile_one(source, arch, macros)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
