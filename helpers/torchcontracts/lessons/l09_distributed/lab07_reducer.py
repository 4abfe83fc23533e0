"""Lab 07 t1 (``ddp_grads``): the rank's recorder of what DDP's reducer all-reduced (kernel side; the judge is
``lab07_judges.judge_grads``, which a graded kernel cannot see).

A right gradient on every rank does not prove that each rank computed on its own shard and DDP combined them:
ranks that share a folder (one submission's ranks share a uid, a ``/tmp`` and a working folder) can swap their
shards through files, or gather them with a collective, and then compute the whole batch's gradient on every
rank. What only the task's way produces is in DDP's communication hook: what each rank hands to the all-reduce,
before it is combined, is the gradient of *its own shard's* loss (some multiple of it, whatever the loss
weighting), and the ranks' contributions differ. ``t1_rank`` (the grader's rank setup, run in each rank around
the learner's call) registers a recording hook on every DDP the learner builds in that call, and returns, beside
the learner's gradients, each parameter's gradient as it went into the all-reduce and how many all-reduces ran.

The hook performs the same average as DDP's default one. What stays open, as for t3: the learner's code runs in
the same process as the hook, so code written to forge the record could; no shortcut that just computes
differently can.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from torchcontracts.lessons.l09_distributed.lab07_parts import make_model

__all__ = ["t1_rank"]


def t1_rank(
    fn: Callable[..., Any],
    rank: int,
    world: int,
    weights: list[torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    n_global: int,
) -> dict[str, Any]:
    """One rank of a t1 check: the learner's call, with every DDP it builds recording what it all-reduces."""
    model = make_model(weights)
    params = list(model.parameters())
    index = {id(p): i for i, p in enumerate(params)}
    sent: dict[int, torch.Tensor] = {}
    calls = [0]

    def record(state, bucket):  # type: ignore[no-untyped-def]  # (DDP refuses a hook whose bucket is annotated else)
        calls[0] += 1
        for p, g in zip(bucket.parameters(), bucket.gradients()):
            if id(p) in index:
                sent[index[id(p)]] = g.detach().clone()  # before the all-reduce: this rank's own contribution
        return dist.all_reduce(bucket.buffer() / world, async_op=True).get_future().then(lambda f: f.value()[0])

    real_init = DDP.__init__

    def init(self: DDP, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self.register_comm_hook(None, record)

    DDP.__init__ = init  # type: ignore[method-assign]  # this rank only: it is a forked worker, gone after the call
    try:
        grads = fn(rank, world, model, x, y, n_global)
    finally:
        DDP.__init__ = real_init  # type: ignore[method-assign]
    contributed = [sent.get(i, torch.full_like(p, math.nan)) for i, p in enumerate(params)]
    return {"grads": grads, "sent": contributed, "allreduces": calls[0]}
