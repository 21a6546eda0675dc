"""Compile every kernel file for sm_80 and sm_90 with nvcc, warnings as errors (no GPU needed).

Each kernel file is compiled once per architecture with every template instance the CUDA
engine can ask NVRTC for (each engine's kernel_names, for every layout, width and value
type), instantiated by taking their addresses, with includes inlined as NVRTC sees them. Exit
status 1 if any compile fails.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from gpuhash._common.cuda.compile import inline_source
from gpuhash.cache.cuda import engine as cache_cuda
from gpuhash.cache.format import BUCKET_SHAPES, CacheSpec
from gpuhash.distributed.cuda import engine as shard_cuda
from gpuhash.groupby.cuda import engine as groupby_cuda
from gpuhash.join.cuda import engine as join_cuda
from gpuhash.join.cuda import radix as radix_cuda
from gpuhash.table.cuda.engine import kernel_names
from gpuhash.table.format import TableSpec

ARCHS = ("sm_80", "sm_90")
VALUES = [(None, ()), (torch.int8, ()), (torch.int8, (3,)), (torch.float16, ()),
          (torch.int32, ()), (torch.int16, (3,)), (torch.float64, ()), (torch.float32, (3,)),
          (torch.float32, (8,)), (torch.float64, (5,)), (torch.int64, ()), (torch.float32, ()),
          (torch.int32, (2,)), (torch.int64, (4,))]


def instances() -> dict[str, list[str]]:
    """Kernel file -> every name expression the engine may compile from it."""
    found: dict[str, list[str]] = {"table/kernels/map.cu": [], "table/kernels/multimap.cu": []}
    for key, (value, shape), width in itertools.product((torch.int32, torch.int64), VALUES,
                                                        (4, 8)):
        for name, multi in (("table/kernels/map.cu", False), ("table/kernels/multimap.cu", True)):
            spec = TableSpec(key_dtype=key, value_dtype=value, value_shape=shape, num_buckets=1,
                             bucket_slots=width, multi=multi)
            for expression in kernel_names(spec).values():
                if expression not in found[name]:
                    found[name].append(expression)
    found["cache/kernels/cache.cu"] = []
    for (value, shape), width in itertools.product(VALUES[1:], BUCKET_SHAPES):
        spec = CacheSpec(key_dtype=torch.int64, value_dtype=value, value_shape=shape,
                         num_buckets=1, bucket_slots=width)
        for expression in cache_cuda.kernel_names(spec).values():
            if expression not in found["cache/kernels/cache.cu"]:
                found["cache/kernels/cache.cu"].append(expression)
    found["join/kernels/join.cu"] = []
    for key, width in itertools.product((torch.int32, torch.int64), (4, 8)):
        for rows in join_cuda.ROW_DTYPES:
            spec = TableSpec(key_dtype=key, value_dtype=rows, value_shape=(), num_buckets=1,
                             bucket_slots=width, multi=True)
            found["join/kernels/join.cu"] += join_cuda.kernel_names(spec).values()
    found["join/kernels/radix_join.cu"] = list(radix_cuda.kernel_names().values())
    found["groupby/kernels/groupby.cu"] = list(groupby_cuda.kernel_names().values())
    found["groupby/kernels/strings.cu"] = list(groupby_cuda.STRING_KERNELS.values())
    found["distributed/kernels/shard.cu"] = list(shard_cuda.kernel_names().values())
    return found


def compile_one(source: Path, arch: str, label: str) -> bool:
    command = ["nvcc", "-std=c++17", f"-arch={arch}", "-Werror", "all-warnings", "-c",
               str(source), "-o", "/dev/null"]
    result = subprocess.run(command, capture_output=True, text=True)
    print(f"{'ok  ' if result.returncode == 0 else 'FAIL'} {source.name} {arch} {label}")
    if result.returncode:
        print(result.stdout + result.stderr)
    return result.returncode == 0


def main() -> int:
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        extra = (("bench/kernels/bench.cu", []), ("_common/kernels/fill.cu", []))
        for name, expressions in (*instances().items(), *extra):
            source = Path(folder) / Path(name).name
            # taking each instance's address makes nvcc instantiate (and compile) it
            refs = "".join(f"    (void*)&{e},\n" for e in expressions)
            array = "[[maybe_unused]] static void* gh_instances[]"
            tail = f"\n{array} = {{\n{refs}}};\n" if expressions else ""
            source.write_text(inline_source(name) + tail)  # the text NVRTC compiles, + refs
            for arch in ARCHS:
                ok &= compile_one(source, arch, f"({len(expressions)} instances)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
