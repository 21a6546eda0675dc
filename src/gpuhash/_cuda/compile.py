"""Run-time compilation of the CUDA C++ kernels through NVRTC (cuda.core), cached on disk.

A module is one kernel file compiled with a set of ``-D`` definitions for one GPU architecture.
Cubins are cached under ``$GPUHASH_CACHE_DIR`` (default ``~/.cache/gpuhash``), keyed by the
source text (includes inlined), the options, the architecture and the NVRTC version, so a warm
start never recompiles and any change to the kernels does.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels"
_INCLUDE = re.compile(r'^\s*#include\s+"([^"]+)"\s*$', re.MULTILINE)


def cache_dir() -> Path:
    """Where compiled cubins are kept (``GPUHASH_CACHE_DIR`` overrides)."""
    return Path(os.environ.get("GPUHASH_CACHE_DIR", Path.home() / ".cache" / "gpuhash"))


def inline_source(name: str, _seen: set[str] | None = None) -> str:
    """The kernel file with its local includes inlined once each (NVRTC gets one string)."""
    seen = set() if _seen is None else _seen
    if name in seen:
        return ""
    seen.add(name)
    text = (KERNEL_DIR / name).read_text()
    text = text.replace("#pragma once", "")
    return _INCLUDE.sub(lambda match: inline_source(match.group(1), seen), text)


def _nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def _options(arch: str, defines: tuple[tuple[str, int], ...]):
    from cuda.core import ProgramOptions

    macros = [(k, str(v)) for k, v in defines] or None  # cuda.core refuses an empty list
    return ProgramOptions(arch=arch, std="c++17", define_macro=macros)


@functools.cache
def load_module(name: str, defines: tuple[tuple[str, int], ...], device_index: int):
    """The compiled, loaded module (cuda.core ObjectCode) for one kernel file and definitions."""
    from cuda.core import Device, ObjectCode, Program

    device = Device(device_index)
    device.set_current()
    major, minor = device.compute_capability
    arch = f"sm_{major}{minor}"
    source = inline_source(name)
    key_text = "\n".join([source, repr(defines), arch, "c++17", _nvrtc_version()])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:32]
    path = cache_dir() / f"{Path(name).stem}-{arch}-{key}.cubin"
    if path.exists():
        return ObjectCode.from_cubin(path.read_bytes())
    program = Program(source, "c++", _options(arch, defines))
    code = program.compile("cubin")
    path.parent.mkdir(parents=True, exist_ok=True)
    # write then rename, so a concurrent reader never sees half a file
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
        handle.write(bytes(code.code))
    os.replace(handle.name, path)
    return code
