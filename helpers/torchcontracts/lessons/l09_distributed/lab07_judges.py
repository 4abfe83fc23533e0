"""Lab 07's grader half: the judges of t1 and t2, the single-process references, and the lab's model (t3's judge,
which reads the pattern its rank setup recorded, is in ``lab07_accum``).

A judge runs in the grader's own process on what a call driver (in ``lab07_ddp``, which re-exports
every public name here) returned: it recomputes the single-process gradient of the global batch from
the data the driver drew (``reference_grads``) or ``DistributedSampler``'s indices
(``reference_indices``), and names the usual mistake when a rank's answer differs. Judges never raise
on an odd answer: they return a failing row.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch.utils.data.distributed import DistributedSampler

from torchcontracts.checks import Case, Comparison, compare, short
from torchcontracts.checks.comparison import not_a_result as _not_a_result
from torchcontracts.lessons.l09_distributed.lab07_parts import IN, OUT, make_model

__all__ = [
    "IN",
    "OUT",
    "judge_grads",
    "judge_indices",
    "make_model",
    "mlp_grads",
    "reference_grads",
    "reference_indices",
]

ATOL, RTOL = 1e-5, 1e-4


def mlp_grads(weights: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The gradient of ``mse_loss(Linear -> Tanh -> Linear (x), y)`` by the chain rule, in float64, without autograd.

    The judges run in the learner's kernel (or the grader's), which forks the ranks. On a machine with a GPU and a
    CUDA build, that process's first ``backward()`` of any kind starts autograd's device threads, and from then on no
    fork of it can run backward (torch/csrc/autograd/engine.cpp: ``start_device_threads`` calls
    ``track_bad_autograd_forks``): a judge that called ``backward()`` would fail every later check of a correct
    answer. So the reference is computed by hand: ``weights`` = [W1, b1, W2, b2]; tests compare it with autograd.
    """
    w1, b1, w2, b2 = (torch.as_tensor(w).detach().double() for w in weights)
    x, y = x.detach().double(), y.detach().double()
    h = torch.tanh(x @ w1.T + b1)
    d_out = 2.0 * (h @ w2.T + b2 - y) / y.numel()  # d mean((out - y)^2) / d out
    d_pre = (d_out @ w2) * (1.0 - h * h)  # back through Tanh
    grads = [d_pre.T @ x, d_pre.sum(0), d_out.T @ h, d_out.sum(0)]
    return [g.to(torch.float32) for g in grads]


def reference_grads(weights: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The single-process gradient of ``mse_loss(model(x), y)`` over the whole global batch (``mlp_grads``: this
    process never runs ``backward()``, so the ranks it forks later still can)."""
    return mlp_grads(weights, x, y)


def _grad_list(value: Any, n: int) -> list[torch.Tensor] | None:
    if isinstance(value, (list, tuple)) and len(value) == n and all(isinstance(g, torch.Tensor) for g in value):
        return list(value)
    return None


def _close(grads: list[torch.Tensor] | None, want: list[torch.Tensor]) -> bool:
    return grads is not None and all(
        g.shape == w.shape and bool(torch.allclose(g.double(), w.double(), atol=ATOL, rtol=RTOL))
        for g, w in zip(grads, want)
    )


# --- t1 ddp_grads: DDP gradients equal one process's -------------------------------------------------


def _t1_mistake(
    weights: Sequence[torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    sizes: Sequence[int],
    rank: int,
    grads: list[torch.Tensor] | None,
) -> str:
    """Name the usual mistake whose gradient this rank returned ('' when none fits)."""
    parts = list(zip(x.split(list(sizes)), y.split(list(sizes))))
    local = reference_grads(weights, *parts[rank])
    if _close(grads, local):
        return (
            "this is the gradient of this rank's shard alone: wrap the model in DDP (and keep the DDP object alive "
            "until backward has run: its reducer does the all-reduce)"
        )
    mean_of_means = [sum(g) / len(parts) for g in zip(*(reference_grads(weights, xs, ys) for xs, ys in parts))]
    if _close(grads, mean_of_means) and len(set(sizes)) > 1:
        return (
            "DDP averages the ranks' gradients, and with uneven shards the average of the ranks' mean losses is not "
            "the global mean: scale this rank's loss by n_local * world_size / n_global"
        )
    full = reference_grads(weights, x, y)
    if _close(grads, [g * len(parts) for g in full]):
        return f"{len(parts)}x too large: DDP already averages across ranks, so do not multiply or all-reduce again"
    if _close(grads, [g / len(parts) for g in full]):
        return f"{len(parts)}x too small: the gradient was averaged twice"
    return ""


def _contribution_row(
    weights: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor, sizes: Sequence[int], rank: int, record: Any
) -> Comparison:
    """What this rank handed to DDP's all-reduce (``lab07_reducer``): a multiple of its own shard's gradient."""
    name = f"rank {rank}: its all-reduce"
    calls = record.get("allreduces") if isinstance(record, dict) else None
    sent = _grad_list(record.get("sent") if isinstance(record, dict) else None, len(weights))
    if not isinstance(calls, int) or sent is None:
        return Comparison.plain(name, False, "the check's driver did not return its record: rerun the cell")
    if calls < 1:
        return Comparison.plain(
            name,
            False,
            "no DDP all-reduce ran on this rank: wrap the model in DistributedDataParallel and call backward through "
            "it (its reducer does the all-reduce)",
            expected=">= 1 all-reduce",
            got=0,
        )
    xs, ys = x.split(list(sizes))[rank], y.split(list(sizes))[rank]
    own = torch.cat([g.flatten().double() for g in reference_grads(weights, xs, ys)])
    got = torch.cat([g.flatten().double() for g in sent])
    if not bool(got.isfinite().all()):
        return Comparison.plain(
            name, False, "some parameters never went through DDP's all-reduce: wrap the whole model"
        )
    scale = float(got @ own) / float(own @ own)
    off = float((got - scale * own).norm()) / max(float(got.norm()), 1e-30)
    ok = scale > 0 and off <= 1e-3
    return Comparison.plain(
        name,
        ok,
        "a gradient of this rank's own shard"
        if ok
        else "what this rank all-reduced is not a gradient of its own shard: compute the loss on this rank's x and y "
        "only, and let DDP combine the ranks",
        expected="a multiple of the own shard's gradient",
        got="that" if ok else f"{off:.2g} off it",
        diff=off,
    )


def judge_grads(case: Case, out: Any) -> list[Comparison]:
    """t1: every rank's gradients equal the single-process gradient of the global batch, and what each rank handed to
    DDP's all-reduce was a gradient of its own shard (``lab07_reducer``: not shards swapped through files or
    gathered, then the whole batch computed everywhere)."""
    bad = _not_a_result(out, ("x", "y", "grads"))
    if bad:
        return bad
    weights, sizes = case.args
    x, y, per_rank = out["x"], out["y"], out["grads"]
    if not (
        isinstance(x, torch.Tensor)
        and isinstance(y, torch.Tensor)
        and x.shape == (sum(sizes), IN)
        and y.shape == (sum(sizes), OUT)
        and bool(x.isfinite().all())
        and bool(y.isfinite().all())
    ):
        return [Comparison.plain("data", False, "the check's driver did not return its data: rerun the cell")]
    if not isinstance(per_rank, (list, tuple)) or len(per_rank) != len(sizes):
        return [Comparison.plain("ranks", False, f"expected one result per rank ({len(sizes)})", got=short(per_rank))]
    want = reference_grads(weights, x, y)
    rows = []
    for rank, record in enumerate(per_rank):
        got = record.get("grads") if isinstance(record, dict) else None
        grads = _grad_list(got, len(want))
        if grads is None:
            rows.append(
                Comparison.plain(
                    f"rank {rank}",
                    False,
                    f"return the list [p.grad for p in model.parameters()] ({len(want)} tensors)",
                    got=short(got),
                )
            )
            continue
        mistake = _t1_mistake(weights, x, y, sizes, rank, grads)
        for i, (g, w) in enumerate(zip(grads, want)):
            row = compare(f"rank {rank} grad {i}", g, w, atol=ATOL, rtol=RTOL)
            if not row.ok and mistake:
                row = Comparison(row.name, False, row.shape, row.dtype, row.strides, row.max_abs_diff, mistake)
            rows.append(row)
            if not row.ok and mistake:
                break  # one named mistake per rank is enough
        rows.append(_contribution_row(weights, x, y, sizes, rank, record))
    return rows


# --- t2 rank_indices: DistributedSampler shards -----------------------------------------------------------


def reference_indices(world: int, n: int, epochs: int, seed: int) -> list[list[list[int]]]:
    """What ``DistributedSampler(shuffle=True, seed=seed)`` with ``set_epoch(e)`` yields on each rank."""
    out = []
    for rank in range(world):
        sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed)
        per_epoch = []
        for e in range(epochs):
            sampler.set_epoch(e)
            per_epoch.append(list(sampler))
        out.append(per_epoch)
    return out


def _as_lists(value: Any, epochs: int) -> list[list[int]] | None:
    if not isinstance(value, (list, tuple)) or len(value) != epochs:
        return None
    lists = []
    for epoch in value:
        if isinstance(epoch, torch.Tensor) and epoch.dim() == 1 and not epoch.is_floating_point():
            epoch = epoch.tolist()
        if not isinstance(epoch, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in epoch
        ):
            return None
        lists.append(list(epoch))
    return lists


def judge_indices(case: Case, out: Any) -> list[Comparison]:
    """t2: the ranks' indices are complete, disjoint (up to DistributedSampler's padding), reshuffled, and exact."""
    bad = _not_a_result(out, ("indices",))
    if bad:
        return bad
    world, n, epochs, seed = case.args
    want = reference_indices(world, n, epochs, seed)
    got = [_as_lists(v, epochs) for v in out["indices"]] if isinstance(out["indices"], (list, tuple)) else []
    if len(got) != world or any(g is None for g in got):
        return [
            Comparison.plain(
                "indices",
                False,
                f"each rank returns a list of {epochs} lists of ints (one per epoch)",
                got=short(out["indices"]),
            )
        ]
    rows = []
    per_rank = math.ceil(n / world)
    for e in range(epochs):
        seen = [i for g in got for i in g[e]]  # type: ignore[index]
        complete = set(seen) == set(range(n))
        padded = len(seen) == per_rank * world and all(len(g[e]) == per_rank for g in got)  # type: ignore[index]
        rows.append(
            Comparison.plain(
                f"epoch {e} complete",
                complete,
                "every sample is visited"
                if complete
                else "some samples are visited by no rank (or indices out of range)",
                expected=f"all of range({n})",
                got=None if complete else sorted(set(seen)),
            )
        )
        rows.append(
            Comparison.plain(
                f"epoch {e} sizes",
                padded,
                f"{per_rank} per rank"
                if padded
                else f"each rank visits ceil({n} / {world}) = {per_rank} samples "
                "(DistributedSampler pads by repeating the first indices)",
                got=[len(g[e]) for g in got],
            )
        )  # type: ignore[index]
    for rank in range(world):
        mine = got[rank]
        if epochs > 1 and all(mine[e] == mine[0] for e in range(1, epochs)):  # type: ignore[index]
            rows.append(
                Comparison.plain(
                    f"rank {rank} reshuffles",
                    False,
                    "every epoch has the same order: call sampler.set_epoch(epoch) before each epoch",
                )
            )
            continue
        for e in range(epochs):
            ok = mine[e] == want[rank][e]  # type: ignore[index]
            rows.append(
                Comparison.plain(
                    f"rank {rank} epoch {e}",
                    ok,
                    "exact"
                    if ok
                    else "not DistributedSampler's order: shuffle=True with the same seed on every rank, "
                    "and set_epoch(epoch)",
                    expected=None if ok else want[rank][e],
                    got=None if ok else mine[e],
                )
            )  # type: ignore[index]
    return rows
