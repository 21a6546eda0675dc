"""Host arrays to the GPU and back through a ring of reused pinned staging buffers.

``tensor.to("cuda")`` of pageable memory copies through the driver's own small staging
buffers on one thread, at a fraction of the host link's speed; pinning a whole column first
costs a pinned allocation as large as the column. Here each device keeps ``STAGES`` pinned
buffers of ``STAGE_BYTES`` for the life of the process: a piece of the array is copied into a
free buffer (torch's CPU copy, on every intra-op thread) while the previous pieces travel to
the GPU on a stream of the ring's own, so the host copy and the link overlap. The caller's
current stream waits for the copies; the call returns as soon as the last piece is staged.

The other way (``to_host``), pieces travel into the ring and are copied out into host memory
from _common/host_buffers.py, whose blocks come back with their pages mapped: ``.cpu()`` of a
large tensor writes fresh pageable memory, a page fault every 4 KiB, at a tenth of the link's
speed. The array handed back can become an Arrow buffer without another copy.

Arrays under ``SMALLEST`` bytes go straight through torch's own copy. One transfer at a time
a device (a lock): concurrent callers take turns rather than share buffers. A forked child
builds its own ring (the parent's pinned memory and streams are not the child's).

Example:
    >>> import numpy as np, torch
    >>> from gpuhash._common.transfers import to_device, to_host
    >>> to_host(to_device(np.arange(4, dtype=np.int32), torch.device("cpu"))).tolist()
    [0, 1, 2, 3]
"""

from __future__ import annotations

import os
import threading
import warnings

import numpy as np
import torch

from gpuhash._common import host_buffers

STAGE_BYTES = 8 << 20  # a piece: large enough that a copy's launch costs little beside it
STAGES = 4  # pieces in flight: the host copies the next while earlier ones travel
SMALLEST = 1 << 20  # below this, torch's own copy costs less than the ring's steps


class _Ring:
    """One device's staging buffers, the events that say when each is free again, and the
    stream the pieces travel on."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.buffers = [torch.empty(STAGE_BYTES, dtype=torch.uint8, pin_memory=True)
                        for _ in range(STAGES)]
        self.done: list[torch.cuda.Event | None] = [None] * STAGES
        self.stream = torch.cuda.Stream(device)
        self.lock = threading.Lock()


_rings: dict[int, _Ring] = {}
_rings_lock = threading.Lock()
_parents: list[dict[int, _Ring]] = []  # a forked child's inherited rings, never freed there


def _in_forked_child() -> None:
    """The child starts without rings. The parent's stay referenced, never freed: freeing a
    pinned buffer that a copy used records CUDA events, which a forked child cannot."""
    global _rings, _rings_lock
    _parents.append(_rings)
    _rings, _rings_lock = {}, threading.Lock()


os.register_at_fork(after_in_child=_in_forked_child)


def _ring(device: torch.device) -> _Ring:
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _rings_lock:
        ring = _rings.get(index)
        if ring is None:
            ring = _rings[index] = _Ring(torch.device("cuda", index))
        return ring


def _host_tensor(array: np.ndarray) -> torch.Tensor:
    """A 1-D uint8 view of a C-contiguous NumPy array (Arrow's buffers are read-only: the
    view is only read)."""
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(flat)


def upload_into(target: torch.Tensor, array: np.ndarray) -> None:
    """Copy ``array``'s bytes into ``target``, a contiguous CUDA tensor of as many bytes,
    ordered on the current stream of ``target``'s device."""
    source = _host_tensor(array)
    out = target.view(-1).view(torch.uint8)
    if out.shape[0] != source.shape[0]:
        raise ValueError(f"upload of {source.shape[0]} bytes into a tensor of "
                         f"{out.shape[0]}: the sizes must agree")
    if source.shape[0] < SMALLEST or target.device.type != "cuda":
        out.copy_(source)
        return
    ring = _ring(target.device)
    current = torch.cuda.current_stream(ring.device)
    with ring.lock:
        ring.stream.wait_stream(current)  # ``target`` may be fresh from the current stream
        for piece, start in enumerate(range(0, source.shape[0], STAGE_BYTES)):
            stop = min(source.shape[0], start + STAGE_BYTES)
            slot = piece % STAGES
            if ring.done[slot] is not None:
                ring.done[slot].synchronize()  # its last piece has left the buffer
            staged = ring.buffers[slot][:stop - start]
            staged.copy_(source[start:stop])
            with torch.cuda.stream(ring.stream):
                out[start:stop].copy_(staged, non_blocking=True)
                event = torch.cuda.Event()
                event.record(ring.stream)
            ring.done[slot] = event
        current.wait_stream(ring.stream)
        target.record_stream(ring.stream)  # its memory is not reused before the copies end


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` as a tensor on ``device`` (a copy; on the CPU a view where NumPy allows)."""
    with warnings.catch_warnings():  # read-only Arrow buffers: the tensor is only read
        warnings.simplefilter("ignore", UserWarning)
        host = torch.from_numpy(np.ascontiguousarray(array))
    if device.type != "cuda":
        return host.to(device)
    out = torch.empty(host.shape, dtype=host.dtype, device=device)
    if host.numel():
        upload_into(out, array)
    return out


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """``tensor`` (contiguous, any device) as a NumPy array in host memory: a view of a CPU
    tensor, else a copy into memory from host_buffers."""
    if tensor.device.type != "cuda":
        return tensor.numpy()
    tensor = tensor.contiguous()
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes < SMALLEST:
        return tensor.cpu().numpy()
    numpy_dtype = torch.empty(0, dtype=tensor.dtype).numpy().dtype
    out = host_buffers.take(tensor.numel(), numpy_dtype)
    target = torch.from_numpy(out.reshape(-1).view(np.uint8))
    source = tensor.view(-1).view(torch.uint8)
    ring = _ring(tensor.device)
    starts = list(range(0, nbytes, STAGE_BYTES))
    with ring.lock:
        ring.stream.wait_stream(torch.cuda.current_stream(ring.device))
        arrived: list[torch.cuda.Event] = []

        def send(piece: int) -> None:
            start = starts[piece]
            stop = min(nbytes, start + STAGE_BYTES)
            staged = ring.buffers[piece % STAGES][:stop - start]
            with torch.cuda.stream(ring.stream):
                staged.copy_(source[start:stop], non_blocking=True)
                event = torch.cuda.Event()
                event.record(ring.stream)
            arrived.append(event)

        for piece in range(min(STAGES, len(starts))):
            send(piece)
        for piece, start in enumerate(starts):
            stop = min(nbytes, start + STAGE_BYTES)
            arrived[piece].synchronize()
            target[start:stop].copy_(ring.buffers[piece % STAGES][:stop - start])
            if piece + STAGES < len(starts):  # its buffer is free again: the next piece
                send(piece + STAGES)
        ring.done = [None] * STAGES  # every piece has left the buffers
    return out.reshape(tensor.shape)
