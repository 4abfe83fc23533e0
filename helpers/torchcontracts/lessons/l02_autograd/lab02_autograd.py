"""Lab 02 (autograd): the tasks, the call drivers the grader imports by name, and the public checks.

A driver (``run_backward`` ...) runs next to the learner's code: it calls the learner's function
on fresh copies of a case's inputs, runs backward, and returns plain tensors. A judge runs in the
grader's own process and compares those tensors with references built from plain torch ops
(``F.linear``, ``torch.logsumexp``, ``F.softplus`` ...); those live in ``lab02_judges``, which a graded
kernel sees as placeholders (``grading.hidden``): the drivers use only ``lab02_parts``, and a judge here is
built when it first judges (``_backward_judge``), in the grader. Hidden checks live in the solution notebook.

Public names (the hidden-check cells use them too, all importable from here): the drivers ``run_backward``,
``run_gradcheck``, ``run_gradgradcheck``, ``run_double_backward``, ``run_monitor``; the judges
``make_backward_judge``, ``judge_passed``, ``judge_double_backward``, ``judge_monitor``; the references
``ref_*``; ``build_mlp``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
from torch.autograd.gradcheck import GradcheckError

from torchcontracts.checks import Case, Check, LabSpec, Task
from torchcontracts.lessons.l02_autograd.lab02_judges import (
    judge_double_backward,
    judge_monitor,
    judge_passed,
    make_backward_judge,
    ref_clip_grad,
    ref_linear,
    ref_logsumexp,
    ref_sign_ste,
)
from torchcontracts.lessons.l02_autograd.lab02_parts import NO_GRAD, _fresh, build_mlp

__all__ = [
    "build_mlp",
    "lab",
    "judge_double_backward",
    "judge_monitor",
    "judge_passed",
    "make_backward_judge",
    "ref_clip_grad",
    "ref_linear",
    "ref_logsumexp",
    "ref_sign_ste",
    "run_backward",
    "run_double_backward",
    "run_gradcheck",
    "run_gradgradcheck",
    "run_monitor",
]

Result = dict[str, Any]


# --- drivers: run in the learner's kernel, return plain data --------------------------------


def _snapshot(inputs: Sequence[Any]) -> list[Any]:
    return [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in inputs]


def run_backward(fn: Callable[..., Any], case: Case) -> Result:
    """``out = fn(*args)``, then ``out.backward(grad_out)``; ``case.args = (*args, grad_out)``.

    Returns ``out``, one gradient per floating input (or ``"no gradient"``), and the inputs as
    they are after the call, so a judge can tell an in-place change of an input.
    """
    *args, grad_out = case.args
    inputs = [_fresh(a) for a in args]
    out = fn(*inputs)
    result: Result = {"out": out.detach().clone() if isinstance(out, torch.Tensor) else str(type(out).__name__)}
    result["node"] = _node(out)
    if isinstance(out, torch.Tensor) and out.requires_grad:
        out.backward(grad_out)
    result["grads"] = [
        (a.grad.detach().clone() if a.grad is not None else NO_GRAD)
        for a in inputs
        if isinstance(a, torch.Tensor) and a.is_floating_point()
    ]
    result["inputs_after"] = _snapshot(inputs)
    return result


def _node(out: Any) -> str:
    """``"custom:<Node>"`` when ``out`` came from a Python ``autograd.Function``, else the node's name."""
    fn = getattr(out, "grad_fn", None)
    if fn is None:
        return "none"
    prefix = "custom:" if isinstance(fn, torch.autograd.function.BackwardCFunction) else ""
    return prefix + type(fn).__name__


def _check_with(checker: Callable[..., bool], fn: Callable[..., Any], case: Case) -> Result:
    inputs = [_fresh(a) for a in case.args]
    where = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor) and a.requires_grad]

    def f(*tensors: torch.Tensor) -> Any:
        call = list(inputs)
        for i, t in zip(where, tensors):
            call[i] = t
        return fn(*call)

    try:
        checker(f, tuple(inputs[i] for i in where))
        return {"passed": True, "message": "passed"}
    except GradcheckError as err:
        return {"passed": False, "message": str(err).strip().splitlines()[0][:160]}


def run_gradcheck(fn: Callable[..., Any], case: Case) -> Result:
    """``torch.autograd.gradcheck`` of ``fn`` at ``case.args`` (float64 tensors are the variables)."""
    return _check_with(torch.autograd.gradcheck, fn, case)


def run_gradgradcheck(fn: Callable[..., Any], case: Case) -> Result:
    """``torch.autograd.gradgradcheck``: is the backward itself differentiable, and right?"""
    return _check_with(torch.autograd.gradgradcheck, fn, case)


def run_double_backward(fn: Callable[..., Any], case: Case) -> Result:
    """``case.args = (x, grad_out, v)``: out, ``g = vjp(grad_out)`` with a graph, and ``vjp of g`` with ``v``."""
    x, grad_out, v = case.args
    x = _fresh(x)
    out = fn(x)
    result: Result = {"out": out.detach().clone() if isinstance(out, torch.Tensor) else str(type(out).__name__)}
    result["node"] = _node(out)
    if not (isinstance(out, torch.Tensor) and out.requires_grad):
        return result
    (g,) = torch.autograd.grad(out, x, grad_out, create_graph=True)
    result["grad"] = g.detach().clone()
    if not g.requires_grad:
        result["grad2"] = "the gradient has no graph: backward used no_grad, detach or non-torch math"
        return result
    (g2,) = torch.autograd.grad(g, x, v, allow_unused=True)
    result["grad2"] = g2.detach().clone() if g2 is not None else "the gradient does not depend on x"
    return result


def _hooks_left(model: torch.nn.Module) -> int:
    n = 0
    for p in model.parameters():
        n += len(getattr(p, "_backward_hooks", None) or {}) + len(getattr(p, "_post_accumulate_grad_hooks", None) or {})
    for m in model.modules():
        n += sum(
            len(getattr(m, a, None) or {})
            for a in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
        )
    return n


def run_monitor(fn: Callable[..., Any], case: Case) -> Result:
    """``case.args = (weights, x, y, stale)``: build the MLP, optionally leave stale ``.grad`` on it, call ``fn``."""
    weights, x, y, stale = case.args
    model = build_mlp(weights)
    if stale:  # gradients left over from an earlier backward (accumulation): not this pass's gradient
        for p in model.parameters():
            p.grad = torch.full_like(p, 3.0)
    norms = fn(model, x, y)
    out: dict[str, Any] = {}
    if isinstance(norms, dict):
        for k, v in norms.items():
            out[str(k)] = (
                v.detach().clone() if isinstance(v, torch.Tensor) else (v if isinstance(v, (int, float)) else str(v))
            )
    return {"norms": out if isinstance(norms, dict) else f"a {type(norms).__name__}", "hooks_left": _hooks_left(model)}


# --- cases ---------------------------------------------------------------------------------


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=_g(seed), dtype=dtype)


def _t1_cases(seed: int) -> list[Case]:
    return [
        Case(
            "x (4, 3), w (2, 3), b (2,)",
            (_randn(4, 3, seed=1), _randn(2, 3, seed=2), _randn(2, seed=3), _randn(4, 2, seed=4)),
        ),
        Case("x (2, 5), w (3, 5), no bias", (_randn(2, 5, seed=5), _randn(3, 5, seed=6), None, _randn(2, 3, seed=7))),
    ]


def _t2_cases(seed: int) -> list[Case]:
    return [
        Case("x (3, 4), dim 1", (_randn(3, 4, seed=11), 1, _randn(3, seed=12))),
        Case("x (3, 4), dim 0", (_randn(3, 4, seed=13), 0, _randn(4, seed=14))),
    ]


def _t2_gradcheck_cases(seed: int) -> list[Case]:
    return [Case("gradcheck x (3, 4), dim 1", (_randn(3, 4, seed=15), 1))]


def _t3_cases(seed: int) -> list[Case]:
    return [
        Case(
            "x (5,), bound 1.0",
            (_randn(5, seed=21), 1.0, torch.tensor([-4.0, -0.5, 0.0, 0.7, 3.0], dtype=torch.float64)),
        )
    ]


def _clip_rule(x: torch.Tensor, bound: float, grad_out: torch.Tensor) -> list[torch.Tensor]:
    return [grad_out.clamp(-bound, bound)]


def _t4_cases(seed: int) -> list[Case]:
    x = torch.tensor([-2.5, -0.5, 0.25, 0.75, 3.0], dtype=torch.float64)
    return [Case("x with |x| < 1 and |x| > 1", (x, _randn(5, seed=31)))]


def _ste_rule(x: torch.Tensor, grad_out: torch.Tensor) -> list[torch.Tensor]:
    return [grad_out * (x.abs() <= 1).to(grad_out.dtype)]


def _t5_cases(seed: int) -> list[Case]:
    return [Case("x (6,)", (_randn(6, seed=41), _randn(6, seed=42), _randn(6, seed=43)))]


def _t5_gradgradcheck_cases(seed: int) -> list[Case]:
    return [Case("gradgradcheck x (4,)", (_randn(4, seed=44),))]


def _mlp_weights(sizes: Sequence[int], seed: int) -> list[torch.Tensor]:
    out = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        out += [_randn(b, a, seed=seed + 2 * i) / math.sqrt(a), _randn(b, seed=seed + 2 * i + 1) * 0.1]
    return out


def _t6_cases(seed: int) -> list[Case]:
    return [
        Case(
            "MLP 3-4-2, fresh .grad", (_mlp_weights([3, 4, 2], 51), _randn(5, 3, seed=52), _randn(5, 2, seed=53), False)
        )
    ]


# --- the lab -------------------------------------------------------------------------------


def _backward_judge(
    ref: Callable[..., torch.Tensor], names: Sequence[str], grad_rule: Callable[..., list[torch.Tensor]] | None = None
) -> Callable[[Case, Any], Any]:
    """``make_backward_judge(...)``, made when it first judges: in a graded kernel the judges are placeholders."""

    def judge(case: Case, result: Any) -> Any:
        return make_backward_judge(ref, names, grad_rule=grad_rule)(case, result)

    return judge


lab = LabSpec(
    "lab02_autograd",
    "Lab 02: custom autograd Functions and gradient hooks",
    tasks=[
        Task("t1", "a linear Function with its three gradients", 3, "linear"),
        Task("t2", "a stable log-sum-exp Function", 3, "logsumexp"),
        Task("t3", "a gradient-clipping identity", 2, "clip_grad"),
        Task("t4", "a straight-through sign estimator", 2, "sign_ste"),
        Task("t5", "a softplus whose backward is differentiable", 3, "softplus"),
        Task("t6", "a per-parameter gradient-norm monitor with hooks", 3, "grad_norms"),
    ],
    checks=[
        Check(
            "t1", "t1 output and gradients", _t1_cases, _backward_judge(ref_linear, ["x", "w", "b"]), call=run_backward
        ),
        Check("t2", "t2 output and gradient", _t2_cases, _backward_judge(ref_logsumexp, ["x"]), call=run_backward),
        Check("t2", "t2 gradcheck (float64)", _t2_gradcheck_cases, judge_passed, call=run_gradcheck),
        Check(
            "t3",
            "t3 identity forward, clipped gradient",
            _t3_cases,
            _backward_judge(ref_clip_grad, ["x"], grad_rule=_clip_rule),
            call=run_backward,
        ),
        Check(
            "t4",
            "t4 sign forward, straight-through gradient",
            _t4_cases,
            _backward_judge(ref_sign_ste, ["x"], grad_rule=_ste_rule),
            call=run_backward,
        ),
        Check(
            "t5", "t5 value, gradient, second derivative", _t5_cases, judge_double_backward, call=run_double_backward
        ),
        Check("t5", "t5 gradgradcheck (float64)", _t5_gradgradcheck_cases, judge_passed, call=run_gradgradcheck),
        Check("t6", "t6 gradient norms", _t6_cases, judge_monitor, call=run_monitor),
    ],
)
