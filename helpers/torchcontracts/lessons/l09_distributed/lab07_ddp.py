"""Lab 07 (DDP, optional): the tasks, their call drivers and public checks; hidden checks live in the solution only.

Every check runs the learner's per-rank function on a real gloo group of forked workers
(``torchcontracts.lessons.l09_distributed.rank_runner``), inside the grader's sandboxed kernel as in the notebook:

* t1 ``ddp_grads``: DDP gradients on uneven shards must equal the single-process gradient of the
  global batch, and what each rank hands to DDP's all-reduce must be a gradient of its own shard (recorded by a
  communication hook on every DDP the learner builds: ``lab07_reducer``);
* t2 ``rank_indices``: ``DistributedSampler`` sharding, disjoint and complete, reshuffled by ``set_epoch``;
* t3 ``accumulate``: gradient accumulation with ``no_sync``, judged by the gradients and by what only real
  accumulation produces: the pattern of forwards (their rows), backwards, ``no_sync`` windows and all-reduces that
  hooks on DDP's own machinery recorded in each rank (``lab07_accum``); a forward of more rows than one micro-batch
  raises, as the whole batch "does not fit".

Why a learner cannot forge t1 and t3 without a process group: the data is drawn *after* the workers
are forked and each rank receives only its own shard, so no rank can compute the global gradient
alone. The judge recomputes the single-process reference from the data the driver returns, by the chain rule
(``lab07_judges.mlp_grads``: the process that forks the ranks never runs ``backward()``, which on a GPU machine
would stop every later rank from running one). A rank that raises, dies or hangs fails the check with the
runner's one-line reason, and no worker outlives the call.

Public names the hidden-check cells build on: ``weights_case``, ``sampler_case``, ``accum_case``,
``judge_grads``, ``judge_indices``, ``judge_accum`` and the drivers ``run_ddp_grads``, ``run_indices``,
``run_accumulate``. Judges never raise on an odd answer: they return a failing row. The judges of t1 and t2,
their references live in ``lab07_judges``, t3's judge (``pattern``, ``expected_pattern``, ``judge_accum``) in
``lab07_accum_judges``; the graded kernel sees neither. ``make_model`` and the sizes live in ``lab07_parts``,
t3's rank setup (``t3_rank``) in ``lab07_accum``. Every public name is importable from here.
"""

from __future__ import annotations

import secrets
from typing import Any, Callable, Sequence

import torch
import torch._dynamo  # noqa: F401  DDP's constructor imports it: import it once here, before the workers fork

from torchcontracts.checks import Case, Check, LabSpec, Task
from torchcontracts.lessons.l09_distributed.lab07_accum import t3_rank
from torchcontracts.lessons.l09_distributed.lab07_accum_judges import expected_pattern, judge_accum, pattern
from torchcontracts.lessons.l09_distributed.lab07_judges import (
    judge_grads,
    judge_indices,
    reference_grads,
    reference_indices,
)
from torchcontracts.lessons.l09_distributed.lab07_parts import IN, OUT, make_model
from torchcontracts.lessons.l09_distributed.lab07_reducer import t1_rank
from torchcontracts.lessons.l09_distributed.rank_runner import run_ranks

__all__ = [
    "IN",
    "OUT",
    "accum_case",
    "expected_pattern",
    "judge_accum",
    "judge_grads",
    "judge_indices",
    "lab",
    "make_model",
    "pattern",
    "reference_grads",
    "reference_indices",
    "run_accumulate",
    "run_ddp_grads",
    "run_indices",
    "sampler_case",
    "weights_case",
]

TIMEOUT, PG_TIMEOUT = 15.0, 4.0  # seconds for a whole run, and for one collective that waits for a hung rank


def _weights(seed: int) -> list[torch.Tensor]:
    return [p.detach().clone() for p in make_model(seed=seed).parameters()]


def _fresh(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """New data for one run, from a seed no process had before the workers were forked."""
    g = torch.Generator().manual_seed(secrets.randbits(62))
    return torch.randn(rows, IN, generator=g), torch.randn(rows, OUT, generator=g)


# --- t1 ddp_grads(rank, world_size, model, x, y, n_global) ---------------------------------------------


def weights_case(label: str, seed: int, sizes: Sequence[int]) -> Case:
    """A t1 case: the model's weights and the rows each rank gets (``sizes[r]``; the data comes at run time)."""
    return Case(label, (_weights(seed), [int(s) for s in sizes]))


def _t1_cases(seed: int) -> list[Case]:
    return [
        weights_case("2 ranks, 8 + 8 rows", seed, [8, 8]),
        weights_case("2 ranks, uneven shards 12 + 4 rows", seed + 1, [12, 4]),
    ]


def run_ddp_grads(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: draw the global batch after the workers fork, send each rank its shard, collect its gradients."""
    weights, sizes = case.args
    data: dict[str, torch.Tensor] = {}

    def inputs() -> list[tuple[Any, ...]]:
        data["x"], data["y"] = _fresh(sum(sizes))
        return [(weights, xs, ys, sum(sizes)) for xs, ys in zip(data["x"].split(sizes), data["y"].split(sizes))]

    run = run_ranks(lambda r, w, *a: t1_rank(fn, r, w, *a), len(sizes), inputs, timeout=TIMEOUT, pg_timeout=PG_TIMEOUT)
    return {"x": data["x"], "y": data["y"], "grads": run.results}


# --- t2 rank_indices(rank, world_size, dataset_len, epochs, seed) -----------------------------------------


def sampler_case(label: str, world: int, dataset_len: int, epochs: int, seed: int) -> Case:
    """A t2 case: ``world`` ranks each list the indices they visit in each of ``epochs`` epochs."""
    return Case(label, (int(world), int(dataset_len), int(epochs), int(seed)))


def _t2_cases(seed: int) -> list[Case]:
    return [
        sampler_case("2 ranks, 20 samples, 2 epochs", 2, 20, 2, seed % 1000),
        sampler_case("2 ranks, 11 samples (uneven), 2 epochs", 2, 11, 2, seed % 1000 + 1),
    ]


def run_indices(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: every rank calls ``fn(rank, world_size, dataset_len, epochs, seed)`` inside the group."""
    world, n, epochs, seed = case.args
    run = run_ranks(fn, world, [(n, epochs, seed)] * world, timeout=TIMEOUT, pg_timeout=PG_TIMEOUT)
    return {"indices": run.results}


# --- t3 accumulate(rank, world_size, ddp_model, micro_batches) -------------------------------------------


def accum_case(label: str, seed: int, world: int, micro: int, rows: int) -> Case:
    """A t3 case: weights, ``world`` ranks, ``micro`` micro-batches of ``rows`` rows per rank (data at run time)."""
    return Case(label, (_weights(seed), int(world), int(micro), int(rows)))


def _t3_cases(seed: int) -> list[Case]:
    return [accum_case("2 ranks, 4 micro-batches of 4 rows", seed + 2, 2, 4, 4)]


def run_accumulate(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: fresh micro-batches per rank after the fork; return the data, and each rank's gradients and the
    record of its forwards, backwards and all-reduces (``lab07_accum.t3_rank``)."""
    weights, world, micro, rows = case.args
    data: dict[str, torch.Tensor] = {}

    def inputs() -> list[tuple[Any, ...]]:
        data["x"], data["y"] = _fresh(world * micro * rows)
        xs, ys = data["x"].split(micro * rows), data["y"].split(micro * rows)
        return [(weights, rows, list(zip(xr.split(rows), yr.split(rows)))) for xr, yr in zip(xs, ys)]

    run = run_ranks(lambda r, w, *a: t3_rank(fn, r, w, *a), world, inputs, timeout=TIMEOUT, pg_timeout=PG_TIMEOUT)
    return {"x": data["x"], "y": data["y"], "ranks": run.results}


lab = LabSpec(
    "lab07_ddp",
    "DDP on a real gloo group: equal gradients, sampler shards, accumulation with no_sync",
    tasks=[
        Task(
            "t1",
            "ddp_grads(rank, world_size, model, x, y, n_global): DDP gradients equal one process's",
            4,
            "ddp_grads",
        ),
        Task(
            "t2",
            "rank_indices(rank, world_size, dataset_len, epochs, seed): DistributedSampler shards",
            3,
            "rank_indices",
        ),
        Task("t3", "accumulate(rank, world_size, ddp_model, micro_batches): no_sync, one all-reduce", 3, "accumulate"),
    ],
    checks=[
        Check("t1", "t1 gradients equal the single-process gradients", _t1_cases, judge_grads, call=run_ddp_grads),
        Check("t2", "t2 shards are complete, disjoint and reshuffled", _t2_cases, judge_indices, call=run_indices),
        Check(
            "t3",
            "t3 a forward and backward per micro-batch, one all-reduce in the last, the global gradient",
            _t3_cases,
            judge_accum,
            call=run_accumulate,
        ),
    ],
)
