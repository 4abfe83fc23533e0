"""Lab 07 t3 (gradient accumulation with ``no_sync``): the rank's recorder (kernel side; the judge of what it
recorded is ``lab07_accum_judges``, which a graded kernel cannot see).

A right gradient with one all-reduce does not prove accumulation: one forward and one backward on the
concatenated micro-batches gives both. What only real accumulation produces is a *pattern*: one forward of one
micro-batch, then its backward, micro-batch after micro-batch; every forward but the last inside ``no_sync()``;
and the one all-reduce during the last backward, none in the earlier ones. ``t3_rank`` (the grader's rank setup,
run in each rank before the learner's function) records that pattern from hooks on DDP's own machinery:

* a forward pre-hook on the DDP wrapper: a forward through DDP, and whether it will sync (``no_sync`` windows);
* a forward pre-hook on the wrapped model: the rows of every forward, and the memory limit: a forward of more
  rows than one micro-batch raises (the whole batch "does not fit"), so concatenating fails where it happens
  (not worded "out of memory": the grader reads those words as its own kernel's memory limit);
* a post-accumulate-grad hook on every parameter: each backward, as autograd accumulates into ``.grad``;
* DDP's communication hook (registered before the learner's call; DDP refuses a second one): each all-reduce.

Each event is written at once, as a fixed-size record, to a pipe the rank drains only after the learner's
function returned: it leaves Python's heap as it happens, so no counter or list of the check's is there for the
learner's code to edit afterwards. ``lab07_accum_judges.judge_accum`` renders every rank's record as a short pattern
(``fb fb fb Fb+ar``: ``f``/``F`` a forward inside/outside ``no_sync``, ``m`` one that bypassed DDP, ``b`` a
backward, ``+ar`` an all-reduce) and compares it, with the rows of each forward and the gradients, to what
accumulation gives. What stays open: the learner's code runs in the same process as the hooks, so code written to
forge (removing the hooks, writing records to the pipe's descriptor) could fake a pattern; no shortcut that just
computes differently can.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import struct
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from torchcontracts.lessons.l09_distributed.lab07_parts import make_model

__all__ = ["ALLREDUCE", "FORWARD_DDP", "FORWARD_ROWS", "GRAD", "MAX_EVENTS", "t3_rank"]

FORWARD_DDP, FORWARD_ROWS, GRAD, ALLREDUCE = 1, 2, 3, 4  # event kinds; a record is (kind, value)
_RECORD = struct.Struct("!Bi")
MAX_EVENTS = 4096  # far more than any accumulation of these checks makes; beyond it the record is cut (and fails)


class _Record:
    """An append-only record of events in a pipe of this rank, drained once after the learner's call."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        os.set_blocking(self.read_fd, False)

    def add(self, kind: int, value: int) -> None:
        try:
            os.write(self.write_fd, _RECORD.pack(kind, max(-(2**31), min(2**31 - 1, int(value)))))
        except OSError as err:  # a full pipe: the record is cut, and the judge sees a pattern that cannot match
            if err.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                raise

    def drain(self) -> list[list[int]]:
        blob = bytearray()
        try:
            while len(blob) < MAX_EVENTS * _RECORD.size:
                chunk = os.read(self.read_fd, 1 << 16)
                if not chunk:
                    break
                blob += chunk
        except BlockingIOError:
            pass
        finally:
            for fd in (self.read_fd, self.write_fd):
                with contextlib.suppress(OSError):  # closed already (by the learner's code): the record is what it is
                    os.close(fd)
        n = min(len(blob) // _RECORD.size, MAX_EVENTS)
        return [list(_RECORD.unpack_from(blob, i * _RECORD.size)) for i in range(n)]


def t3_rank(
    fn: Callable[..., Any],
    rank: int,
    world: int,
    weights: list[torch.Tensor],
    rows: int,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
) -> dict[str, Any]:
    """One rank of a t3 check: the model in DDP with the recording hooks, the learner's call, the gradients and record."""
    model = make_model(weights)
    record = _Record()

    def fits(module, args):  # type: ignore[no-untyped-def]  # the memory limit, and the rows of every forward
        n = int(args[0].shape[0]) if args and isinstance(args[0], torch.Tensor) and args[0].dim() else -1
        if n > rows:
            raise RuntimeError(
                f"the whole batch does not fit: {n} rows in one forward, at most {rows} (one micro-batch): "
                "do not concatenate the micro-batches"
            )
        if torch.is_grad_enabled():
            record.add(FORWARD_ROWS, n)

    def through_ddp(module, args):  # type: ignore[no-untyped-def]  # a forward through DDP; will it sync?
        if torch.is_grad_enabled():
            record.add(FORWARD_DDP, int(bool(module.require_backward_grad_sync)))

    def comm_hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP's all-reduce (average), recorded
        # (no annotations: DDP refuses a hook whose ``bucket`` annotation is not dist.GradBucket)
        record.add(ALLREDUCE, bucket.index())
        return dist.all_reduce(bucket.buffer() / world, async_op=True).get_future().then(lambda f: f.value()[0])

    ddp = DDP(model)
    ddp.register_comm_hook(None, comm_hook)
    ddp.register_forward_pre_hook(through_ddp)
    model.register_forward_pre_hook(fits)
    for i, p in enumerate(model.parameters()):
        p.register_post_accumulate_grad_hook(lambda _p, i=i: record.add(GRAD, i))
    try:
        fn(rank, world, ddp, batches)
    finally:
        events = record.drain()
    grads = [
        p.grad.detach().clone() if p.grad is not None else torch.full_like(p, math.nan) for p in model.parameters()
    ]
    return {"grads": grads, "events": events}
