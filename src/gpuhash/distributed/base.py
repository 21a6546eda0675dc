"""What every sharded table shares: its process group and device, the check that every rank
made the same table, and the one shape of a collective call (check, route, exchange, apply at
the owner, answer back in the caller's row order). On a group of one rank a call is the check
and the rank's own table: every row is its own, so nothing is routed or exchanged.

The passes over a call's rows besides the owners' table operation: one to find each row's
owner and count each rank's rows (routing.owners), a stable sort of the one-byte owners, one
gather a column into the buffer its all-to-all sends, and one scatter an answer column back to
the caller's row order. The received columns go to the table as they arrive.

Order of a key's rows. The owner applies the rows it receives as one batch: the rows from
rank 0 first, then rank 1's, and so on, each rank's rows in its batch order. A call therefore
acts as the single table would on the concatenation of every rank's batch in rank order: for
an insert the last row of a key on the highest rank that has one wins, for ``find_or_insert``
the first row on the lowest.

Calls are collective: every rank makes the same calls on a table in the same order, from one
thread (a second thread's call would pair with another call on the other ranks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from gpuhash._common import arrays as _arrays
from gpuhash.distributed.exchange import Exchange, PeerError, Plan
from gpuhash.distributed.routing import route

# what a call's check step gives: the keys (raw bits), the kind of array they came as, the
# other per-row columns that travel with them, and the header bytes every owner needs
Checked = tuple[torch.Tensor, str, list[torch.Tensor], "torch.Tensor | None"]


def default_device(group: Any) -> torch.device:
    """The tables' device on a group: this process's current CUDA device under NCCL, else
    the CPU (gloo's tensors)."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class ShardedBase:
    """The group, the exchange and the collective call of a sharded table; not public."""

    _local: Any

    def _join(self, make_local: Callable[[], Any], group: Any, description: tuple) -> None:
        """Make this rank's shard with ``make_local()`` and check (collectively) that every
        rank made one, of the same ``description``: a rank whose arguments were refused makes
        every rank raise."""
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("a sharded table needs torch.distributed initialised first: "
                               "torch.distributed.init_process_group(...) on every rank "
                               "(or gh.distributed.single_process_group() to try it alone)")
        error = None
        try:
            local = make_local()
        except Exception as caught:  # told to every rank below, then raised here
            error, local = caught, None
        seen: list[Any] = [None] * dist.get_world_size(group)
        text = repr(description) if error is None else f"{type(error).__name__}: {error}"
        dist.all_gather_object(seen, (error is None, text), group=group)
        if error is not None:
            raise error
        failed = [f"rank {rank}: {text}" for rank, (ok, text) in enumerate(seen) if not ok]
        if failed:
            raise PeerError(f"making the {type(self).__name__} failed on another rank, so it "
                            f"raises here too ({'; '.join(failed)})")
        if len({text for _, text in seen}) > 1:
            ranks = "; ".join(f"rank {rank}: {text}" for rank, (_, text) in enumerate(seen))
            raise ValueError(f"every rank must make the same {type(self).__name__} "
                             f"(got {ranks})")
        self._group = group
        self._local = local
        self._exchange = Exchange(group, local.device)

    @property
    def rank(self) -> int:
        """This process's rank in the table's group: the shard it holds."""
        return self._exchange.rank

    @property
    def world_size(self) -> int:
        """Ranks in the table's group: its number of shards."""
        return self._exchange.world

    @property
    def group(self) -> Any:
        """The process group (None: the default group)."""
        return self._group

    @property
    def device(self) -> torch.device:
        """The device of this rank's shard and of the tensors the calls exchange."""
        return self._local.device

    @property
    def local(self) -> Any:
        """This rank's shard: the single-device table holding the keys this rank owns."""
        return self._local

    def __len__(self) -> int:
        """Entries over every shard. Collective (an all-reduce); synchronises."""
        size = torch.tensor([len(self._local)], dtype=torch.int64, device=self.device)
        dist.all_reduce(size, group=self._group)
        return int(size.item())

    def _keys(self, keys: Any) -> tuple[torch.Tensor, str]:
        local = self._local
        return _arrays.check_keys(keys, local.spec, local.device, device_index(local.device))

    def _call(self, what: str, check: Callable[[], Checked],
              apply: Callable[[torch.Tensor, list[torch.Tensor], Plan], list[torch.Tensor]],
              *, options: int = 0, extra_bytes: int = 0) -> tuple[str, list[torch.Tensor]]:
        """One collective operation. ``check()`` validates this rank's input; ``apply(keys,
        columns, plan)`` runs the operation on the rows this rank owns and returns per-row
        answers. ``extra_bytes``: the header bytes the call may carry (the same on every
        rank: fixed by the call, not by a rank's input). Returns the kind of the caller's keys
        and the answers for its rows, in its row order."""
        exchange, error = self._exchange, None
        key_dtype = self._local.spec.key_dtype
        if exchange.world == 1:
            return self._call_alone(check, apply, key_dtype)
        try:
            bits, kind, columns, extra = check()
            order, counts = route(bits, exchange.world)
        except Exception as caught:  # any rank's failure is every rank's, before rows travel
            error, counts, extra = caught, None, None
        plan = exchange.open(counts, error, options=options, extra=extra,
                             extra_bytes=extra_bytes, what=what)
        rows = bits.shape[0]
        # each column gathered by owner straight into the buffer its all-to-all sends
        outgoing: list[torch.Tensor] = []
        error = None
        try:
            outgoing = [_signed(t).index_select(0, order) for t in [bits, *columns]]
        except Exception as caught:  # out of memory: raised on every rank by the send
            error = caught
        got = exchange.send(plan, outgoing, error=error, what=what)
        got = [t.view(c.dtype) for t, c in zip(got, [bits, *columns])]
        got[0] = got[0].view(key_dtype)  # travelled as signed bits
        error, answers = None, []
        try:
            answers = apply(got[0], got[1:], plan)
        except Exception as caught:  # a full table, memory: raise on every rank, not hang
            error = caught
        exchange.agree(error, what + " (applying the rows at their owners; shards that did "
                       "not fail keep their part)")
        del got  # the received rows: free before the answers come back
        back = exchange.answer(plan, answers, what=what)
        if rows < 2:  # one row or none: in its order already
            return kind, back
        out = []
        for answer in back:  # answers come grouped by owner: back to the caller's rows
            placed = torch.empty_like(answer)
            placed.index_copy_(0, order, answer)
            out.append(placed)
        return kind, out

    def _call_alone(self, check: Callable[[], Checked], apply: Callable, key_dtype: torch.dtype
                    ) -> tuple[str, list[torch.Tensor]]:
        """A call on a group of one rank: its rows are all its own, so nothing is routed or
        exchanged, and an error raises here as the agreement of one rank would raise it."""
        bits, kind, columns, extra = check()
        rows = bits.shape[0]
        extras = (torch.zeros((1, 0), dtype=torch.uint8, device=self.device) if extra is None
                  else extra.reshape(1, -1))
        return kind, apply(bits.view(key_dtype), columns, Plan([rows], [rows], extras, rows))


def _signed(column: torch.Tensor) -> torch.Tensor:
    """An unsigned column as the signed view of its bits (gathered as such everywhere)."""
    return column.view(_arrays.SIGNED_VIEW.get(column.dtype, column.dtype))


def fills_zero(default: Any) -> bool:
    """Whether a find's ``default`` is zero bits in every value dtype, as the owners' finds
    (default 0) leave missing rows: then the caller has nothing to put in. -0.0 is not."""
    if type(default) in (int, bool):
        return default == 0
    return type(default) is float and default == 0.0 and math.copysign(1.0, default) > 0


def device_index(device: torch.device) -> int:
    """A device as Tensor.get_device() gives it: -1 for the CPU."""
    return -1 if device.type == "cpu" else device.index


def repeat_extras(plan: Plan, like: torch.Tensor) -> torch.Tensor:
    """One row per received row from the header bytes each sender put there (a scalar
    ``init`` row, say): ``like`` gives the row's dtype and shape."""
    width = like.element_size() * like.numel()
    rows = plan.extras[:, :width].contiguous().reshape(-1).view(like.dtype)
    rows = rows.reshape(-1, *like.shape)
    # counts and the output's size from the host, copied without waiting for the device
    # (a blocking copy, or repeat_interleave left to size its output, would synchronise)
    counts = torch.tensor(plan.receive).to(rows.device, non_blocking=True)
    return rows.repeat_interleave(counts, dim=0, output_size=sum(plan.receive))
