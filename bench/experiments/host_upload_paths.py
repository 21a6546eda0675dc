"""Ways to move a host column (NumPy memory that is not pinned, as Arrow's buffers are) to the
GPU, timed side by side: which one the group-by's host path should take.

* ``pageable``: ``torch.from_numpy(a).to("cuda")`` (the driver stages it on one thread);
* ``ring``: ``gpuhash._common.transfers.to_device`` as it is (pieces of ``STAGE_BYTES``
  copied into reused pinned buffers while earlier ones cross the link);
* ``ring_<MB>``: the same with other piece sizes;
* ``register``: the array's pages registered with the driver in place
  (``cudaHostRegister``), one copy at the link's speed, then unregistered: the registration
  is part of the time, since a user's column is a new buffer every call;
* ``pinned_alloc``: a fresh pinned tensor (torch's caching host allocator), the host copy
  into it, then the copy to the GPU.

Each: wall clock to a synchronised copy, best of repeats, GB/s of the array's bytes. The
answer of each is checked against the array. On a GPU machine, from the repository root:
    python bench/experiments/host_upload_paths.py --out /tmp/uploads.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import time

import numpy as np
import torch

from gpuhash._common import transfers
from gpuhash.bench.provenance import source_commit


def _pageable(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array).to("cuda")


def _ring(array: np.ndarray) -> torch.Tensor:
    return transfers.to_device(array, torch.device("cuda"))


def _ring_of(stage_bytes: int):
    def move(array: np.ndarray) -> torch.Tensor:
        saved = transfers.STAGE_BYTES
        transfers.STAGE_BYTES = stage_bytes
        transfers._rings.clear()  # buffers of the new size
        try:
            return transfers.to_device(array, torch.device("cuda"))
        finally:
            transfers.STAGE_BYTES = saved
            transfers._rings.clear()
    return move


def _register(array: np.ndarray) -> torch.Tensor:
    cudart = torch.cuda.cudart()
    host = torch.from_numpy(array)
    nbytes = array.nbytes
    code = cudart.cudaHostRegister(host.data_ptr(), nbytes, 0)
    if int(code) != 0:
        raise RuntimeError(f"cudaHostRegister returned {code}")
    try:
        out = torch.empty_like(host, device="cuda")
        out.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        return out
    finally:
        cudart.cudaHostUnregister(host.data_ptr())


def _pinned_alloc(array: np.ndarray) -> torch.Tensor:
    host = torch.from_numpy(array)
    staged = torch.empty(host.shape, dtype=host.dtype, pin_memory=True)
    staged.copy_(host)
    return staged.to("cuda", non_blocking=True)


def _best_ms(move, array: np.ndarray, repeats: int) -> float:
    out = move(array)  # warm-up, and the check
    torch.cuda.synchronize()
    if not np.array_equal(out.cpu().numpy(), array):
        raise AssertionError(f"{move.__name__} moved other bytes")
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        move(array)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", default="40,200,1000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    paths = {"pageable": _pageable, "ring": _ring, "ring_2": _ring_of(2 << 20),
             "ring_32": _ring_of(32 << 20), "register": _register,
             "pinned_alloc": _pinned_alloc}
    rows = []
    for megabytes in (int(m) for m in args.sizes_mb.split(",")):
        array = np.random.default_rng(1).integers(0, 1 << 30, megabytes << 18,
                                                  dtype=np.int32)  # 4 bytes a value
        row = {"mb": megabytes}
        for name, move in paths.items():
            try:
                ms = _best_ms(move, array, args.repeats)
                row[name] = {"ms": ms, "gbps": array.nbytes / ms / 1e6}
            except Exception as error:  # a path the machine refuses: say so, go on
                row[name] = {"error": f"{type(error).__name__}: {error}"}
        rows.append(row)
        print(megabytes, "MB:", ", ".join(
            f"{name} {value['gbps']:.1f} GB/s" if "gbps" in value else f"{name} failed"
            for name, value in row.items() if name != "mb"), flush=True)
    result = {"experiment": "host_upload_paths", "device": torch.cuda.get_device_name(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds"),
              "commit": source_commit(), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "stage_bytes": transfers.STAGE_BYTES,
              "method": "wall clock to a synchronised copy, best of repeats",
              "sizes": rows}
    if args.out:
        with open(args.out, "w") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
