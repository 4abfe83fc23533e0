"""Lesson 09's "Try it" exercises: predict what each rank holds after a collective, and average gradients by hand.

09.1 asks what every rank holds after ``all_reduce``, ``broadcast``, ``all_gather`` and
``reduce_scatter``; the judge finds out by running those collectives on a real two-process gloo
group (``rank_runner.run_ranks``), so the checker states what torch does, not a second formula.
09.2 asks for the all-reduce DDP does for you: run inside every rank after a local backward, it
must leave each rank with the single-process gradient of the global batch (computed here by the chain
rule: this process never runs backward, so the ranks it forks can).
The reference answers live only in tests/test_tryit_lesson09.py.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from torchcontracts.checks import Case, Check, Comparison, compare, short
from torchcontracts.lessons.l09_distributed.lab07_judges import mlp_grads
from torchcontracts.lessons.l09_distributed.rank_runner import run_ranks
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["COLLECTIVES", "EXERCISES", "measured_collectives"]

COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter")


# 09.1: what does each rank hold after a collective? ---------------------------------------------------


def _collectives_rank(rank: int, world: int, mine: torch.Tensor) -> dict[str, torch.Tensor]:
    out = {}
    t = mine.clone()
    dist.all_reduce(t)  # op=SUM
    out["all_reduce"] = t
    t = mine.clone()
    dist.broadcast(t, src=0)
    out["broadcast"] = t
    renamed = hasattr(dist, "all_gather_single")  # torch 2.13+; before, all_gather_into_tensor is the only name
    all_gather = dist.all_gather_single if renamed else dist.all_gather_into_tensor
    reduce_scatter = dist.reduce_scatter_single if renamed else dist.reduce_scatter_tensor
    gathered = torch.empty(world * mine.numel(), dtype=mine.dtype)
    all_gather(gathered, mine.clone())
    out["all_gather"] = gathered
    part = torch.empty(mine.numel() // world, dtype=mine.dtype)
    reduce_scatter(part, mine.clone())  # op=SUM, then rank r keeps chunk r
    out["reduce_scatter"] = part
    return out


def measured_collectives(inputs: list[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
    """Run the four collectives on a real gloo group, one rank per input; what each rank holds after each."""
    run = run_ranks(_collectives_rank, len(inputs), [(t,) for t in inputs], timeout=20.0, pg_timeout=5.0)
    return {name: [r[name] for r in run.results] for name in COLLECTIVES}


def _collective_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case("2 ranks, [0, 1, 2, 3] and [10, 11, 12, 13]", ([torch.arange(4.0), torch.arange(10.0, 14.0)],)),
        Case("3 ranks, random integers", ([torch.randint(0, 9, (6,), generator=g).float() for _ in range(3)],)),
    ]


_HINTS = {
    "all_reduce": "every rank ends with the element-wise sum of all ranks' tensors",
    "broadcast": "every rank ends with rank 0's tensor",
    "all_gather": "every rank ends with all ranks' tensors, concatenated in rank order",
    "reduce_scatter": "sum element-wise over ranks, then rank r keeps the r-th of world_size equal chunks",
}


def _judge_collectives(case: Case, out: Any) -> list[Comparison]:
    (inputs,) = case.args
    truth = measured_collectives(inputs)
    if not isinstance(out, dict) or set(out) != set(COLLECTIVES):
        return [
            Comparison.plain(
                "answer",
                False,
                f"return a dict with the keys {list(COLLECTIVES)}",
                got=sorted(out) if isinstance(out, dict) else type(out).__name__,
            )
        ]
    rows = []
    for name in COLLECTIVES:
        got = out[name]
        if not isinstance(got, (list, tuple)) or len(got) != len(inputs):
            rows.append(
                Comparison.plain(name, False, f"give a list with one tensor per rank ({len(inputs)})", got=short(got))
            )
            continue
        for rank, (g, want) in enumerate(zip(got, truth[name])):
            row = compare(f"{name}, rank {rank}", g, want, check_dtype=False)
            if not row.ok:
                row = Comparison(
                    row.name,
                    False,
                    row.shape,
                    row.dtype,
                    row.strides,
                    row.max_abs_diff,
                    f"{row.status}: {_HINTS[name]}",
                    row.expected,
                    row.got,
                )
            rows.append(row)
    return rows


# 09.2: average the gradients yourself --------------------------------------------------------------------


def _model(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))


def _average_rank(fn: Any, rank: int, world: int, seed: int, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    model = _model(seed)
    F.mse_loss(model(x), y).backward()  # this rank's shard only: no DDP here
    fn(model, world)
    return [
        p.grad.detach().clone() if p.grad is not None else torch.full_like(p, float("nan")) for p in model.parameters()
    ]


def _average_call(fn: Any, case: Case) -> dict[str, Any]:
    seed, world, x, y = case.args
    shards = list(zip(x.chunk(world), y.chunk(world)))
    run = run_ranks(
        lambda r, w, *a: _average_rank(fn, r, w, *a), world, [(seed, *s) for s in shards], timeout=20.0, pg_timeout=5.0
    )
    return {"grads": run.results}


def _average_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(f"{w} ranks, 12 rows", (seed + w, w, torch.randn(12, 5, generator=g), torch.randn(12, 1, generator=g)))
        for w in (2, 3)
    ]


def _judge_average(case: Case, out: Any) -> list[Comparison]:
    seed, world, x, y = case.args
    # by the chain rule, not backward(): this kernel forks the ranks, and on a GPU machine its first backward
    # would leave every later fork unable to run one (lab07_judges.mlp_grads says why)
    want = mlp_grads([p.detach() for p in _model(seed).parameters()], x, y)
    per_rank = out.get("grads") if isinstance(out, dict) else None
    if not isinstance(per_rank, list) or len(per_rank) != world:
        return [Comparison.plain("gradients", False, "the check's driver returned no gradients: rerun the cell")]
    rows = []
    for rank, grads in enumerate(per_rank):
        first = compare(f"rank {rank} weight grad", grads[0], want[0], atol=1e-6, rtol=1e-5)
        if not first.ok and isinstance(grads[0], torch.Tensor) and torch.allclose(grads[0], want[0] * world, atol=1e-6):
            first = Comparison.plain(first.name, False, f"{world}x too large: all_reduce sums, so divide by world_size")
        rows.append(first)
        rows += [
            compare(f"rank {rank} grad {i}", g, w, atol=1e-6, rtol=1e-5)
            for i, (g, w) in enumerate(zip(grads[1:], want[1:]), start=1)
        ]
    return rows


EXERCISES = exercises_by_id(
    [
        Exercise(
            "09.1",
            "what each rank holds after a collective",
            "after_collectives",
            (Check("09.1", "matches a real gloo run", _collective_cases, _judge_collectives),),
            hint="return {'all_reduce': [...], 'broadcast': [...], 'all_gather': [...], 'reduce_scatter': [...]}, "
            "each a list with one tensor per rank; inputs[r] is what rank r starts with",
        ),
        Exercise(
            "09.2",
            "average the gradients yourself",
            "average_gradients",
            (
                Check(
                    "09.2",
                    "every rank ends with the global-batch gradient",
                    _average_cases,
                    _judge_average,
                    call=_average_call,
                ),
            ),
            hint="every rank must end with the mean of the ranks' gradients: which collective of section 2 leaves "
            "every rank holding the sum?",
        ),
    ]
)
