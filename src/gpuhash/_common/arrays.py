"""Arrays at the edge: DLPack in and out, and every check on user input before an engine runs.

Torch tensors pass through; NumPy, CuPy and anything with ``__dlpack__`` are viewed as torch
tensors without copying, and results go back as the same kind of array. Errors name the
argument and the offending value so the user can fix the call.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from gpuhash.table.format import KEY_DTYPES, TableSpec

TORCH, NUMPY, CUPY = "torch", "numpy", "cupy"
# dtypes torch lacks kernels for (hashing, gathers, fills), used as the signed integers of
# their width: the same bits, and zero bits are zero in each
SIGNED_VIEW = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64,
               torch.float8_e4m3fn: torch.int8, torch.float8_e5m2: torch.int8}


def as_tensor(array: Any, name: str) -> tuple[torch.Tensor, str]:
    """View ``array`` as a torch tensor (no copy) and say which kind it was."""
    if isinstance(array, torch.Tensor):
        return array, TORCH
    module = type(array).__module__.split(".")[0]
    if module == "numpy":
        try:
            return torch.from_numpy(array), NUMPY
        except TypeError:  # strings, objects: no tensor holds them
            raise TypeError(f"{name} is a NumPy array of {array.dtype}, which no torch "
                            f"tensor holds (numbers and bools only)") from None
        except ValueError:  # negative strides or a non-native byte order: a native copy
            import numpy

            native = numpy.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
            return torch.from_numpy(native), NUMPY
    if module == "pyarrow" and getattr(array, "null_count", 0):
        raise TypeError(f"{name} is a pyarrow array with {array.null_count} nulls, which no "
                        f"tensor holds: pass its values with a validity mask (join's "
                        f"left_valid= / right_valid=), or join the tables with gh.merge")
    if hasattr(array, "__dlpack__"):
        return torch.from_dlpack(array), CUPY if module == "cupy" else TORCH
    raise TypeError(
        f"{name} must be a torch tensor, NumPy/CuPy array or DLPack object, "
        f"not {type(array).__name__}"
    )


PARALLEL_GATHER_ROWS = 1 << 16  # CPU gathers from this many rows on run on every core
_PARALLEL_GATHER_DTYPES = (torch.bool, torch.int8, torch.uint8, torch.int16, torch.uint16,
                           torch.int32, torch.uint32, torch.int64, torch.uint64, torch.float32,
                           torch.float64)


def gather(tensor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``tensor[rows]`` for in-range ``rows`` (no check): index_select, or on the CPU for
    large 1-D gathers the CPU engine's parallel gather. torch's indexing by a tensor has a
    large fixed cost a call and runs three times slower than index_select on large ones;
    index_select runs on one core (1e7 random int32 rows on two cores: 66 ms, 15 in
    parallel)."""
    if tensor.dtype in SIGNED_VIEW:  # torch lacks index_select for some: gather the bits
        return gather(tensor.view(SIGNED_VIEW[tensor.dtype]), rows).view(tensor.dtype)
    if (tensor.device.type == "cpu" and rows.shape[0] >= PARALLEL_GATHER_ROWS
            and tensor.dim() == 1 and tensor.dtype in _PARALLEL_GATHER_DTYPES):
        from gpuhash._common.cpu.runtime import run

        out = torch.empty(rows.shape[0], dtype=tensor.dtype)
        run("merge_take", tensor.contiguous().numpy(), rows.contiguous().numpy(), out.numpy())
        return out
    return tensor.index_select(0, rows)


def select(condition: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.where(condition, a, b)`` of two tensors of one dtype, unsigned ones selected
    through their signed twin: CUDA has no where kernel for uint16-uint64."""
    twin = SIGNED_VIEW.get(a.dtype, a.dtype)
    return torch.where(condition, a.view(twin), b.view(twin)).view(a.dtype)


def zeroed(tensor: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """A copy of ``tensor`` with 0 where ``where`` is true (unsigned ones as select does)."""
    return tensor.view(SIGNED_VIEW.get(tensor.dtype, tensor.dtype)).masked_fill(
        where, 0).view(tensor.dtype)


def to_kind(tensor: torch.Tensor, kind: str) -> Any:
    """Return ``tensor`` as the kind of array the caller passed in."""
    if kind == NUMPY:
        return tensor.numpy()
    if kind == CUPY:
        import cupy

        return cupy.from_dlpack(tensor)
    return tensor


def _check_device(tensor: torch.Tensor, name: str, device: torch.device) -> None:
    if tensor.device.type != device.type or (
        device.index is not None and tensor.device.index not in (None, device.index)
    ):
        raise ValueError(
            f"{name} is on {tensor.device} but the table is on {device}; move it with "
            f"{name}.to('{device}')"
        )


def _check_contiguous(tensor: torch.Tensor, name: str) -> None:
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous (strides {tuple(tensor.stride())}); "
                         f"pass {name}.contiguous()")


def check_keys(array: Any, spec: TableSpec, device: torch.device,
               device_index: int) -> tuple[torch.Tensor, str]:
    """Validate a batch of keys; returns the keys as raw int32/int64 bits and the array kind.
    ``device_index`` is ``device``'s as ``Tensor.get_device()`` gives it (-1 for the CPU)."""
    keys, kind = as_tensor(array, "keys")
    if (keys.dtype is spec.key_dtype and keys.dim() == 1 and keys.get_device() == device_index
            and keys.is_contiguous()):  # the common case, checked cheaply: small calls are
        if keys.dtype in SIGNED_VIEW:   # dominated by host overhead
            keys = keys.view(SIGNED_VIEW[keys.dtype])
        return keys, kind
    if keys.dtype not in KEY_DTYPES:
        raise TypeError(f"keys must hold integers of dtype {spec.key_dtype}, got {keys.dtype}")
    if keys.dtype != spec.key_dtype:
        raise TypeError(f"keys have dtype {keys.dtype} but the table's key_dtype is "
                        f"{spec.key_dtype}; convert with keys.to({spec.key_dtype})")
    if keys.dim() != 1:
        raise ValueError(f"keys must be 1-D, got shape {tuple(keys.shape)}")
    _check_device(keys, "keys", device)
    _check_contiguous(keys, "keys")
    if keys.dtype in SIGNED_VIEW:  # engines take raw bits as signed ints (torch lacks uint ops)
        keys = keys.view(SIGNED_VIEW[keys.dtype])
    return keys, kind


def check_values(array: Any, spec: TableSpec, device: torch.device, rows: int, *,
                 name: str = "values") -> torch.Tensor:
    """Validate values for ``rows`` keys: dtype, shape, device, contiguity, alignment
    (``name``: the argument they came as, for the errors)."""
    values, _ = as_tensor(array, name)
    if values.dtype != spec.value_dtype:
        raise TypeError(f"{name} have dtype {values.dtype} but the table's value_dtype is "
                        f"{spec.value_dtype}")
    want = (rows, *spec.value_shape)
    if tuple(values.shape) != want:
        if values.dim() >= 1 and values.shape[0] != rows:
            raise ValueError(f"{name} has {values.shape[0]} rows but keys has {rows}")
        raise ValueError(f"{name} must have shape {want}, got {tuple(values.shape)}")
    _check_device(values, name, device)
    _check_contiguous(values, name)
    if values.data_ptr() % copy_width(spec.value_bytes):
        values = values.clone()  # kernels copy rows in aligned words; an odd view gets a copy
    return values


def default_row(default: Any, spec: TableSpec, device: torch.device, *,
                name: str = "default") -> torch.Tensor:
    """The value returned for missing keys, as one contiguous row of ``value_shape``
    (``name``: the argument it came as, for the errors). A fraction for integer values is
    refused, not truncated."""
    integral = not spec.value_dtype.is_floating_point and not spec.value_dtype.is_complex
    if integral and isinstance(default, float) and not default.is_integer():
        raise ValueError(f"{name} {default!r} is not a whole number, and the values are "
                         f"{spec.value_dtype}")
    try:
        if isinstance(default, (int, float, bool)) and device.type != "cpu" and (
                spec.value_dtype not in (torch.uint16, torch.uint32, torch.uint64)):
            # converted on the host, filled on the device: a copy from pageable host memory
            # would first wait for everything queued on the stream
            value = torch.as_tensor(default, dtype=spec.value_dtype).item()
            return torch.full(spec.value_shape, value, dtype=spec.value_dtype, device=device)
        row = torch.as_tensor(default, dtype=spec.value_dtype, device=device)
        row = row.expand(spec.value_shape).contiguous()
        # kernels copy a row in aligned words: an offset view of a user's tensor gets a copy
        return row.clone() if row.data_ptr() % copy_width(spec.value_bytes) else row
    except (RuntimeError, TypeError, ValueError) as error:
        raise ValueError(f"{name} {default!r} does not fit value_shape {spec.value_shape} "
                         f"of dtype {spec.value_dtype}: {error}") from None


def cached_default_row(cache: dict, default: Any, spec: TableSpec, device: torch.device,
                       device_index: int, *, name: str = "default") -> torch.Tensor:
    """default_row, made on the current stream (the operation's): a row of a scalar is kept
    in ``cache`` per stream, so it is never read by a kernel ordered before its making."""
    cacheable = isinstance(default, (int, float, bool)) and default == default  # not NaN
    if not cacheable:
        return default_row(default, spec, device, name=name)
    stream = torch._C._cuda_getCurrentRawStream(device_index) if device.type == "cuda" else 0
    # -0.0 == 0.0 (and hashes alike), but their rows differ: the sign is part of the key
    sign = math.copysign(1.0, default) if isinstance(default, float) else 0.0
    key = (type(default), default, sign, stream)
    row = cache.get(key)
    if row is None:
        row = default_row(default, spec, device, name=name)
        if len(cache) >= 64:  # streams made per call would grow it forever
            cache.clear()
        cache[key] = row
    return row


def copy_width(value_bytes: int) -> int:
    """Largest power of two (at most 16) that divides the value width: the copy word."""
    width = 16
    while width > 1 and value_bytes % width:
        width //= 2
    return width


def resolve_device(device: Any) -> torch.device:
    """``device`` as a torch device of an engine: the CPU, or a CUDA device with its index
    (the current one where none is given); a ValueError naming it otherwise."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {device!r} is not a torch device") from None
    if resolved.type not in ("cpu", "cuda"):  # the engines: the CPU's and CUDA's
        raise ValueError(f"device {device!r} is neither a CPU nor a CUDA device")
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for CUDA but no CUDA device is available")
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved
