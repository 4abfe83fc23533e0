"""Lab 07 t3's judge (grader side): render each rank's record as a pattern and compare it, the rows of each forward
and the gradients with what accumulation gives. The recorder is ``lab07_accum.t3_rank`` (kernel side).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from torchcontracts.checks import Case, Comparison, compare, short
from torchcontracts.checks.comparison import not_a_result as _not_a_result
from torchcontracts.lessons.l09_distributed.lab07_accum import ALLREDUCE, FORWARD_DDP, FORWARD_ROWS, GRAD, MAX_EVENTS
from torchcontracts.lessons.l09_distributed.lab07_judges import ATOL, RTOL, reference_grads
from torchcontracts.lessons.l09_distributed.lab07_parts import IN, OUT

__all__ = ["expected_pattern", "judge_accum", "pattern"]


# --- the judge's side: patterns --------------------------------------------------------------------------


def _passes(events: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    """Group a record into passes: the forwards before a backward, that backward's gradient events, its all-reduces."""
    passes: list[dict[str, Any]] = []
    sync: int | None = None  # the last DDP forward's flag, waiting for its module forward
    for kind, value in events:
        if kind in (FORWARD_DDP, FORWARD_ROWS) and (not passes or passes[-1]["grads"] or passes[-1]["allreduces"]):
            if kind == FORWARD_ROWS or sync is None:
                passes.append({"forwards": [], "rows": [], "grads": 0, "allreduces": 0})
        if kind == FORWARD_DDP:
            sync = value
        elif kind == FORWARD_ROWS:
            passes[-1]["forwards"].append("m" if sync is None else "F" if sync else "f")
            passes[-1]["rows"].append(value)
            sync = None
        elif kind in (GRAD, ALLREDUCE):
            if not passes:
                passes.append({"forwards": [], "rows": [], "grads": 0, "allreduces": 0})
            passes[-1]["grads" if kind == GRAD else "allreduces"] += 1
    return passes


def _token(p: dict[str, Any], nparams: int) -> str:
    grads = p["grads"]
    back = "b" * (grads // nparams) + (f"b({grads % nparams}/{nparams})" if grads % nparams else "")
    return "".join(p["forwards"]) + back + "+ar" * p["allreduces"]


def pattern(events: Sequence[Sequence[int]], nparams: int = 4) -> str:
    """A record as ``fb fb Fb+ar``: per pass its forwards (f in no_sync, F syncing, m bypassing DDP), b, +ar."""
    return " ".join(_token(p, nparams) for p in _passes(events)) or "nothing"


def expected_pattern(micro: int) -> str:
    """What accumulation over ``micro`` micro-batches records: no_sync forwards, then one syncing one, one all-reduce."""
    return " ".join(["fb"] * (micro - 1) + ["Fb+ar"])


def _hint(passes: list[dict[str, Any]], micro: int, rows: int) -> str:
    """The first mistake a pattern shows, in words."""
    forwards = [f for p in passes for f in p["forwards"]]
    seen = [r for p in passes for r in p["rows"]]
    if not forwards:
        return "no forward of the model was seen: call ddp_model(x) on each micro-batch"
    if max(seen) > rows:
        return f"a forward of {max(seen)} rows: at most {rows} fit (one micro-batch): do not concatenate them"
    if "m" in forwards:
        return "a forward bypassed DDP (ddp_model.module): call ddp_model(x), or DDP cannot sync"
    if len(forwards) != micro:
        return f"{len(forwards)} forwards for {micro} micro-batches: one forward and one backward per micro-batch"
    if any(len(p["forwards"]) > 1 for p in passes):
        return (
            "several forwards before one backward: call backward() on each micro-batch's loss before the next forward"
        )
    if any(p["grads"] == 0 for p in passes):
        return "a forward without its backward: call backward() on each micro-batch's loss"
    early = [i + 1 for i, p in enumerate(passes[:-1]) if p["allreduces"]]
    if early:
        return f"an all-reduce in micro-batch {early[0]}'s backward: only the last backward syncs (the others in no_sync())"
    if seen != [rows] * micro:
        return f"forwards of {seen} rows: one micro-batch of {rows} rows per forward"
    return "not one forward and backward per micro-batch, the last one alone outside no_sync() and all-reducing"


def _events(value: Any) -> list[tuple[int, int]] | None:
    if not isinstance(value, (list, tuple)) or len(value) > MAX_EVENTS:
        return None
    out = []
    for e in value:
        if not (isinstance(e, (list, tuple)) and len(e) == 2 and all(type(v) is int for v in e)):
            return None
        out.append((e[0], e[1]))
    return out


def _rank_rows(rank: int, res: dict[str, Any], micro: int, rows: int, want: list[torch.Tensor]) -> list[Comparison]:
    events = _events(res.get("events"))
    if events is None:
        return [Comparison.plain(f"rank {rank} record", False, "the check's record is missing: rerun the cell")]
    out: list[Comparison] = []
    count = sum(1 for kind, _ in events if kind == ALLREDUCE)
    status = (
        "one all-reduce"
        if count == 1
        else "no all-reduce at all: run the last micro-batch's backward outside no_sync()"
        if count == 0
        else f"{count} all-reduces: wrap every backward but the last in ddp_model.no_sync()"
    )
    out.append(
        Comparison.plain(
            f"rank {rank} all-reduces",
            count == 1,
            status,
            expected=None if count == 1 else 1,
            got=None if count == 1 else count,
        )
    )
    nparams = len(want)
    passes = _passes(events)
    got = pattern(events, nparams)
    seen = [r for p in passes for r in p["rows"]]
    want_pattern = expected_pattern(micro)
    ok = got == want_pattern and seen == [rows] * micro
    out.append(
        Comparison.plain(
            f"rank {rank} accumulation",
            ok,
            "a forward and a backward per micro-batch, the all-reduce in the last"
            if ok
            else _hint(passes, micro, rows),
            expected=None if ok else want_pattern,
            got=None if ok else got,
        )
    )
    grads = res.get("grads")
    grad_list = list(grads) if isinstance(grads, (list, tuple)) and len(grads) == nparams else None
    if grad_list is None or not all(isinstance(g, torch.Tensor) for g in grad_list):
        out.append(Comparison.plain(f"rank {rank} grads", False, "gradients missing", got=short(grads)))
        return out
    scaled = all(
        g.shape == w.shape and bool(torch.allclose(g.double(), w.double() * micro, atol=ATOL, rtol=RTOL))
        for g, w in zip(grad_list, want)
    )
    for i, (g, w) in enumerate(zip(grad_list, want)):
        row = compare(f"rank {rank} grad {i}", g, w, atol=ATOL, rtol=RTOL)
        if not row.ok and scaled:
            hint = f"{micro}x too large: divide each micro-batch's loss by the number of micro-batches"
            row = dataclasses.replace(row, status=hint, expected="", got="")
        out.append(row)
        if not row.ok and scaled:
            break
    return out


def judge_accum(case: Case, out: Any) -> list[Comparison]:
    """t3: on every rank the pattern of accumulation (a forward and a backward per micro-batch of at most one
    micro-batch's rows, no_sync for all but the last, one all-reduce during the last backward) and the global gradient."""
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
    if not isinstance(ranks, (list, tuple)) or len(ranks) != world or not all(isinstance(r, dict) for r in ranks):
        return [Comparison.plain("ranks", False, f"expected one result per rank ({world})", got=short(ranks))]
    want = reference_grads(weights, x, y)
    rows: list[Comparison] = []
    for rank, res in enumerate(ranks):
        rows.extend(_rank_rows(rank, res, micro, rows_each, want))
    return rows
