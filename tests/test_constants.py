"""The kernels and the Python engines take their shared numbers from one place: every kernel
file, as the compiler sees it, holds the generated header once."""

import pytest

from gpuhash._common.constants import kernel_header
from gpuhash._common.cuda.compile import inline_source

KERNEL_FILES = ["table/kernels/map.cu", "table/kernels/multimap.cu", "cache/kernels/cache.cu",
                "join/kernels/join.cu", "join/kernels/radix_join.cu", "_common/kernels/fill.cu",
                "bench/kernels/bench.cu", "distributed/kernels/shard.cu"]


@pytest.mark.parametrize("name", KERNEL_FILES)
def test_every_kernel_file_holds_the_generated_constants_once(name):
    source = inline_source(name)
    body = kernel_header().replace("#pragma once", "")
    assert source.count(body) == 1
    assert "#include" not in source  # NVRTC gets one string
