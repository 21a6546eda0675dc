"""Run-time compilation of the CUDA C++ kernels through NVRTC (cuda.core), cached on disk.

A module is one kernel file compiled for one GPU architecture with a list of name expressions:
the template instances the caller wants (``gh_insert<GhTable<4, 4, 0, 8>>``). NVRTC lowers each
to its mangled symbol; the mapping is kept beside the cubin, so a warm start finds the kernels
without compiling. Cubins live under ``$GPUHASH_CACHE_DIR`` (default ``~/.cache/gpuhash``),
keyed by the source text (includes inlined), the names, the architecture and the NVRTC version,
so a warm start never recompiles and any change to the kernels does.

Compiling and loading never change the caller's current CUDA device.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from gpuhash._common.constants import kernel_header

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # src/gpuhash
COMMON_KERNELS = PACKAGE_DIR / "_common" / "kernels"
_INCLUDE = re.compile(r'^\s*#include\s+"([^"]+)"\s*$', re.MULTILINE)


def cache_dir() -> Path:
    """Where compiled cubins are kept (``GPUHASH_CACHE_DIR`` overrides)."""
    return Path(os.environ.get("GPUHASH_CACHE_DIR", Path.home() / ".cache" / "gpuhash"))


def kernel_path(name: str, *, near: Path | None = None) -> Path:
    """A kernel file: ``name`` relative to the package (``table/kernels/map.cu``), or an
    include, found beside the file that includes it (``near``) and else in the shared core
    (``_common/kernels``)."""
    if near is None:
        return PACKAGE_DIR / name
    for folder in (near, COMMON_KERNELS):
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"kernel include {name!r} is neither in {near} nor in {COMMON_KERNELS}")


GENERATED_HEADER = "gh_constants.cuh"  # the text of constants.kernel_header(), no file


def inline_source(name: str, _seen: set | None = None, _near: Path | None = None) -> str:
    """The kernel file with its local includes inlined once each (NVRTC gets one string),
    the generated header of shared constants among them."""
    seen = set() if _seen is None else _seen
    if name == GENERATED_HEADER:
        if GENERATED_HEADER in seen:
            return ""
        seen.add(GENERATED_HEADER)
        return kernel_header().replace("#pragma once", "")
    path = kernel_path(name, near=_near)
    if path in seen:
        return ""
    seen.add(path)
    text = path.read_text().replace("#pragma once", "")
    return _INCLUDE.sub(lambda match: inline_source(match.group(1), seen, path.parent), text)


def _nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def _write_atomically(path: Path, data: bytes) -> None:
    """Write then rename, so a concurrent reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
        handle.write(data)
    os.replace(handle.name, path)


@functools.cache
def _arch(device_index: int, arch: str | None) -> str:
    """The architecture kernels are compiled for; cached: every insert asks (has_cas128)."""
    if arch is not None:
        return arch
    from cuda.core import Device

    major, minor = Device(device_index).compute_capability
    return f"sm_{major}{minor}"


def has_cas128(device_index: int, arch: str | None = None) -> bool:
    """Whether kernels compiled for this GPU (or for ``arch``) swap 16-byte slots with one CAS:
    they do from sm_90 on (_common/kernels/open_addressing.cuh: GH_HAS_CAS128)."""
    return int(_arch(device_index, arch).split("_")[1]) >= 90


@functools.cache
def load_module(name: str, names: tuple[str, ...], device_index: int, arch: str | None = None):
    """The compiled, loaded module (cuda.core ObjectCode) holding the named template instances
    of one kernel file, for the GPU ``device_index`` (or for ``arch``, e.g. ``compute_80``:
    PTX that the driver compiles for any later GPU, which runs the sm_80 code paths)."""
    import torch
    from cuda.core import ObjectCode, Program, ProgramOptions

    arch = _arch(device_index, arch)
    source = inline_source(name)
    key_text = "\n".join([source, repr(names), arch, "c++17", _nvrtc_version()])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:32]
    kind = "ptx" if arch.startswith("compute_") else "cubin"
    path = cache_dir() / f"{Path(name).stem}-{arch}-{key}.{kind}"
    symbols_path = path.with_suffix(".json")
    load = ObjectCode.from_ptx if kind == "ptx" else ObjectCode.from_cubin
    with torch.cuda.device(device_index):  # restores the caller's device on the way out
        if path.exists() and symbols_path.exists():
            symbols = {name: mangled.encode()
                       for name, mangled in json.loads(symbols_path.read_text()).items()}
            return load(path.read_bytes(), symbol_mapping=symbols)
        options = ProgramOptions(arch=arch, std="c++17")
        code = Program(source, "c++", options).compile(kind, name_expressions=names)
        # the name -> mangled symbol map of a compile lives on the object it returns (public
        # as symbol_mapping since cuda.core 0.4; _sym_map before); the cache keeps it to find
        # the kernels again. Without one, nothing is cached and the next process recompiles.
        symbols = getattr(code, "symbol_mapping", None) or getattr(code, "_sym_map", None) or {}
        symbols = {name: bytes(mangled).decode() if not isinstance(mangled, str) else mangled
                   for name, mangled in symbols.items()}
        data = code.code if isinstance(code.code, bytes) else bytes(code.code)
        if set(symbols) >= set(names):
            _write_atomically(path, data)
            _write_atomically(symbols_path, json.dumps(symbols).encode())
        return code
