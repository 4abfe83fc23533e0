"""Lesson 06's "Try it" exercises: predict BatchNorm's running statistics, autocast's dtypes, GradScaler's scale.

Each judge measures the real thing on the case at hand (a ``BatchNorm1d`` fed the same batches, the
expressions run under CPU autocast, a ``GradScaler("cpu")`` driven through the same overflows), so the
checker states what torch does rather than a second hand-written formula. The reference answers live
only in the tests.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from torchcontracts.checks import Case, Check, Comparison, compare, short
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXPRESSIONS", "EXERCISES"]


# 06.1: BatchNorm1d's running statistics after a few training batches ------------------------------


def _bn_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    batches = lambda n, b, c: [torch.randn(b, c, generator=g) * 2 + 3 for _ in range(n)]  # noqa: E731
    return [
        Case("3 batches of (8, 3), momentum 0.1", (batches(3, 8, 3), 0.1)),
        Case("2 batches of (4, 2), momentum 0.5", (batches(2, 4, 2), 0.5)),
        Case("4 batches of (5, 3), momentum None", (batches(4, 5, 3), None)),
    ]


def _bn_measured(batches: list[torch.Tensor], momentum: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    bn = nn.BatchNorm1d(batches[0].shape[1], momentum=momentum)
    with torch.no_grad():
        for b in batches:
            bn(b)
    return bn.running_mean.clone(), bn.running_var.clone()


def _judge_bn(case: Case, out: Any) -> list[Comparison]:
    batches, momentum = case.args
    want_mean, want_var = _bn_measured(batches, momentum)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        return [Comparison.plain("answer", False, "return a pair (running_mean, running_var) of tensors", got=out)]
    rows = [
        compare("running_mean", out[0], want_mean, atol=1e-5, rtol=1e-5),
        compare("running_var", out[1], want_var, atol=1e-5, rtol=1e-5),
    ]
    if rows[1].ok or not isinstance(out[1], torch.Tensor) or out[1].shape != want_var.shape:
        return rows
    biased = _biased_var(batches, momentum)
    if torch.allclose(out[1].double(), biased.double(), atol=1e-5):
        rows[1] = Comparison.plain(
            "running_var",
            False,
            "running_var uses the unbiased variance of each batch "
            "(n / (n - 1) times the biased one), while the output is normalised with the "
            "biased one",
            expected=want_var,
            got=out[1],
        )
    return rows


def _biased_var(batches: list[torch.Tensor], momentum: float | None) -> torch.Tensor:
    var = torch.ones(batches[0].shape[1])
    for k, b in enumerate(batches, start=1):
        m = 1.0 / k if momentum is None else momentum
        var = (1 - m) * var + m * b.var(0, unbiased=False)
    return var


# 06.2: which dtype comes out of each expression under CPU autocast? -----------------------------

EXPRESSIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "a @ b": lambda a, b: a @ b,
    "torch.softmax(a @ b, dim=1)": lambda a, b: torch.softmax(a @ b, dim=1),
    "torch.softmax(a, dim=1)": lambda a, b: torch.softmax(a, dim=1),
    "F.mse_loss(a @ b, b)": lambda a, b: F.mse_loss(a @ b, b),
    "(a @ b) + a": lambda a, b: (a @ b) + a,
    "torch.cat([a @ b, a])": lambda a, b: torch.cat([a @ b, a]),
    "(a @ b).sum()": lambda a, b: (a @ b).sum(),
    "F.relu(a @ b)": lambda a, b: F.relu(a @ b),
}


def _dtype_cases(seed: int) -> list[Case]:
    return [Case("8 expressions on float32 a, b (8 x 8)", ())]


def _measured_dtypes() -> dict[str, torch.dtype]:
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return {name: fn(a, b).dtype for name, fn in EXPRESSIONS.items()}


def _as_dtype(v: Any) -> torch.dtype | None:
    if isinstance(v, torch.dtype):
        return v
    if isinstance(v, str):
        found = getattr(torch, v.replace("torch.", "").strip(), None)
        return found if isinstance(found, torch.dtype) else None
    return None


def _judge_dtypes(case: Case, out: Any) -> list[Comparison]:
    want = _measured_dtypes()
    if not isinstance(out, dict):
        return [
            Comparison.plain(
                "answer",
                False,
                "return a dict: expression -> dtype (torch.bfloat16 or torch.float32)",
                got=type(out).__name__,
            )
        ]
    rows = []
    for name, dtype in want.items():
        got = _as_dtype(out.get(name))
        ok = got == dtype
        rows.append(
            Comparison.plain(
                name,
                ok,
                "right" if ok else "missing" if name not in out else "wrong dtype",
                expected=None if ok else str(dtype).replace("torch.", ""),
                got=None if ok else short(out.get(name)),
            )
        )
    return rows


# 06.3: GradScaler's scale after a sequence of clean and overflowing steps ----------------------


def _scale_cases(seed: int) -> list[Case]:
    return [
        Case("4 clean steps, growth_interval 2", ([False, False, False, False], 1024.0, 2)),
        Case("an overflow at step 1, then 3 clean steps", ([False, True, False, False, False], 1024.0, 2)),
        Case("overflows at steps 0 and 1, growth_interval 1", ([True, True, False], 8.0, 1)),
        Case("2 clean, 1 overflow, 3 clean, growth_interval 2", ([False, False, True, False, False, False], 64.0, 2)),
    ]


def _measured_scale(found_inf: list[bool], init_scale: float, growth_interval: int) -> float:
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    for inf in found_inf:
        scaler.scale(p.sum())
        p.grad = torch.full((1,), float("inf") if inf else 1.0)
        scaler.step(opt)
        scaler.update()
    return float(scaler.get_scale())


def _judge_scale(case: Case, out: Any) -> list[Comparison]:
    want = _measured_scale(*case.args)
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        out = float(out)
    if isinstance(out, bool) or not isinstance(out, (int, float)):
        return [Comparison.plain("scale", False, "return the scale as a float", expected=want, got=out)]
    ok = float(out) == want
    return [
        Comparison.plain(
            "scale",
            ok,
            "right"
            if ok
            else "wrong scale: update() halves it after a skipped step "
            "(and restarts the count) and doubles it after growth_interval clean steps in a row",
            expected=None if ok else want,
            got=None if ok else out,
        )
    ]


EXERCISES = exercises_by_id(
    [
        Exercise(
            "06.1",
            "predict BatchNorm1d's running statistics",
            "running_stats",
            (Check("06.1", "running_mean and running_var match a real BatchNorm1d", _bn_cases, _judge_bn),),
            hint="start from mean 0 and var 1; each training batch moves them by momentum towards its own mean "
            "and its unbiased variance; momentum=None averages all batches so far",
        ),
        Exercise(
            "06.2",
            "predict the dtypes autocast produces",
            "autocast_dtypes",
            (Check("06.2", "dtypes match CPU autocast", _dtype_cases, _judge_dtypes),),
            hint="three groups: ops autocast lowers to bf16, ops on its fp32 list, and everything else, which runs "
            "in the dtype its inputs have (with the usual type promotion)",
        ),
        Exercise(
            "06.3",
            "predict GradScaler's scale",
            "scale_after",
            (Check("06.3", "scale matches a real GradScaler", _scale_cases, _judge_scale),),
            hint="backoff_factor=0.5 on any overflow, growth_factor=2.0 after growth_interval clean steps in a row",
        ),
    ]
)
