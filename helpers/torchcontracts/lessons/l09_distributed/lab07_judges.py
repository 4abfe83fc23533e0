"""Lab 07's grader half: the judges of its three tasks, their single-process references, and the lab's model.

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
import torch.nn.functional as F
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from torchcontracts.checks import Case, Comparison, compare, short
from torchcontracts.checks.comparison import not_a_result as _not_a_result

__all__ = [
    "IN",
    "OUT",
    "judge_accum",
    "judge_grads",
    "judge_indices",
    "make_model",
    "reference_grads",
    "reference_indices",
]

IN, OUT = 6, 2
ATOL, RTOL = 1e-5, 1e-4


def make_model(weights: Sequence[torch.Tensor] | None = None, seed: int = 0) -> nn.Sequential:
    """The lab's model: Linear(6, 16) -> Tanh -> Linear(16, 2), with ``weights`` when given."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(IN, 16), nn.Tanh(), nn.Linear(16, OUT))
    if weights is not None:
        with torch.no_grad():
            for p, w in zip(model.parameters(), weights):
                p.copy_(w)
    return model


def reference_grads(weights: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The single-process gradient of ``mse_loss(model(x), y)`` over the whole global batch."""
    model = make_model(weights)
    F.mse_loss(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


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


def judge_grads(case: Case, out: Any) -> list[Comparison]:
    """t1: every rank's gradients equal the single-process gradient of the global batch."""
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
    for rank, got in enumerate(per_rank):
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


# --- t3 accumulate: no_sync, one all-reduce --------------------------------------------------------------


def judge_accum(case: Case, out: Any) -> list[Comparison]:
    """t3: one all-reduce per step on every rank, and the gradient of the whole global batch."""
    bad = _not_a_result(out, ("x", "y", "ranks"))
    if bad:
        return bad
    weights, world, micro, rows_each = case.args
    x, y, ranks = out["x"], out["y"], out["ranks"]
    n = world * micro * rows_each
    if not (
        isinstance(x, torch.Tensor)
        and isinstance(y, torch.Tensor)
        and x.shape == (n, IN)
        and y.shape == (n, OUT)
        and bool(x.isfinite().all())
        and bool(y.isfinite().all())
    ):
        return [Comparison.plain("data", False, "the check's driver did not return its data: rerun the cell")]
    if (
        not isinstance(ranks, (list, tuple))
        or len(ranks) != world
        or not all(isinstance(r, dict) and "grads" in r and "allreduces" in r for r in ranks)
    ):
        return [Comparison.plain("ranks", False, f"expected one result per rank ({world})", got=short(ranks))]
    want = reference_grads(weights, x, y)
    rows: list[Comparison] = []
    for rank, res in enumerate(ranks):
        try:
            count = int(res["allreduces"])
        except (TypeError, ValueError, RuntimeError):
            count = -1
        status = (
            "one all-reduce, after the last micro-batch"
            if count == 1
            else "no all-reduce at all: run the last micro-batch's backward outside no_sync()"
            if count == 0
            else f"{count} all-reduces: wrap every backward but the last in ddp_model.no_sync()"
        )
        rows.append(
            Comparison.plain(
                f"rank {rank} all-reduces",
                count == 1,
                status,
                expected=None if count == 1 else 1,
                got=None if count == 1 else count,
            )
        )
        grads = _grad_list(res["grads"], len(want))
        if grads is None:
            rows.append(Comparison.plain(f"rank {rank} grads", False, "gradients missing", got=short(res["grads"])))
            continue
        scaled = _close(grads, [g * micro for g in want])
        for i, (g, w) in enumerate(zip(grads, want)):
            row = compare(f"rank {rank} grad {i}", g, w, atol=ATOL, rtol=RTOL)
            if not row.ok and scaled:
                row = Comparison(
                    row.name,
                    False,
                    row.shape,
                    row.dtype,
                    row.strides,
                    row.max_abs_diff,
                    f"{micro}x too large: divide each micro-batch's loss by the number of micro-batches",
                )
            rows.append(row)
            if not row.ok and scaled:
                break
    return rows
