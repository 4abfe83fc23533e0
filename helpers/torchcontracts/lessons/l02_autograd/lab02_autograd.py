"""Lab 02 (autograd): the tasks, the call drivers the grader imports by name, and the public checks.

A driver (``run_backward`` ...) runs next to the learner's code: it calls the learner's function
on fresh copies of a case's inputs, runs backward, and returns plain tensors. A judge runs in the
grader's own process and compares those tensors with references built from plain torch ops
(``F.linear``, ``torch.logsumexp``, ``F.softplus`` ...). Hidden checks live in the solution notebook.

Public names (the hidden-check cells use them too): the drivers ``run_backward``, ``run_gradcheck``,
``run_gradgradcheck``, ``run_double_backward``, ``run_monitor``; the judges ``make_backward_judge``,
``judge_passed``, ``judge_double_backward``, ``judge_monitor``; the references ``ref_*``; ``build_mlp``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch.autograd.gradcheck import GradcheckError

from torchcontracts.checks import Case, Check, Comparison, LabSpec, Task, compare

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

NO_GRAD = "no gradient"  # what a driver returns for a float input whose .grad stayed None
Result = dict[str, Any]


# --- drivers: run in the learner's kernel, return plain data --------------------------------


def _fresh(a: Any) -> Any:
    """A floating tensor becomes a fresh leaf that requires grad; anything else passes as is."""
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return a.detach().clone().requires_grad_(True)
    return a


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


def build_mlp(weights: Sequence[torch.Tensor]) -> torch.nn.Sequential:
    """Linear layers with these (weight, bias) pairs and Tanh between them: ``0.weight``, ``0.bias``, ``2.weight`` ..."""
    layers: list[torch.nn.Module] = []
    for i in range(0, len(weights), 2):
        w, b = weights[i], weights[i + 1]
        lin = torch.nn.Linear(w.shape[1], w.shape[0], dtype=w.dtype)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        layers += [lin, torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


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


# --- references and judges: run in the grader's process, plain torch only ------------------


def _leaves(args: Sequence[Any]) -> list[Any]:
    return [_fresh(a) for a in args]


def _reference(
    f: Callable[..., torch.Tensor], args: Sequence[Any], grad_out: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    inputs = _leaves(args)
    out = f(*inputs)
    out.backward(grad_out)
    return out.detach(), [a.grad for a in inputs if isinstance(a, torch.Tensor) and a.is_floating_point()]


def ref_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, w, b)


def ref_logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.logsumexp(x, dim)


def ref_clip_grad(x: torch.Tensor, bound: float) -> torch.Tensor:
    return x.clone()  # forward only; the clipped gradient is built in the judge


def ref_sign_ste(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x)


def _not_a_result(result: Any, what: str) -> list[Comparison]:
    return [Comparison.plain("result", False, f"the check's driver returned {what}: rerun the cell")]


def _node_rows(result: dict[str, Any]) -> list[Comparison]:
    node = str(result.get("node", "none"))
    if node.startswith("custom:") or node == "none":  # "none" is reported by the gradient rows
        return []
    return [
        Comparison.plain(
            "grad_fn",
            False,
            f"the output's grad_fn is {node}, a built-in op: compute it in your autograd.Function "
            "and return Function.apply(...)",
        )
    ]


def _backward_rows(
    result: Any,
    ref_out: torch.Tensor,
    ref_grads: list[torch.Tensor],
    names: Sequence[str],
    args: Sequence[Any],
    tol: float,
) -> list[Comparison]:
    if not isinstance(result, dict) or "grads" not in result:
        return _not_a_result(result, type(result).__name__)
    out = result["out"]
    if isinstance(out, str):
        return [Comparison.plain("output", False, f"expected a torch.Tensor, got {out}", dtype=out)]
    rows = [compare("output", out, ref_out, atol=tol, rtol=tol)]
    rows += _node_rows(result)
    grads = result["grads"]
    if not isinstance(grads, (list, tuple)):
        return rows + [
            Comparison.plain("grads", False, "the check's driver returned no gradient list: rerun the cell", got=grads)
        ]
    if all(g == NO_GRAD for g in grads if isinstance(g, str)) and all(isinstance(g, str) for g in grads):
        rows.append(
            Comparison.plain(
                "grads",
                False,
                "no gradient reached the inputs: call your Function with .apply(...) and return its output",
            )
        )
        return rows
    for name, g, want in zip(names, grads, ref_grads):
        if isinstance(g, str):
            rows.append(Comparison.plain(f"grad {name}", False, f"{g}: backward returned None for {name}"))
        else:
            rows.append(compare(f"grad {name}", g, want, atol=tol, rtol=tol))
    after = [a for a in result.get("inputs_after") or [] if isinstance(a, torch.Tensor)]
    before = [a for a in args if isinstance(a, torch.Tensor)]
    for a, b in zip(after, before):
        if a.shape != b.shape or not torch.equal(a, b):
            rows.append(
                Comparison.plain(
                    "inputs", False, "your Function changed an input in place: work on a copy (x - m, not x.sub_(m))"
                )
            )
            break
    return rows


def make_backward_judge(
    ref: Callable[..., torch.Tensor],
    names: Sequence[str],
    tol: float = 1e-9,
    grad_rule: Callable[..., list[torch.Tensor]] | None = None,
) -> Callable[[Case, Any], list[Comparison]]:
    """A judge for ``run_backward``: the learner's output and gradients against ``ref``'s autograd.

    ``grad_rule(*args, grad_out)`` replaces autograd's gradients when the Function's backward is a
    deliberate rule (clipping, straight-through) rather than the true derivative.
    """

    def judge(case: Case, result: Any) -> list[Comparison]:
        *args, grad_out = case.args
        ref_out, ref_grads = _reference(ref, args, grad_out)
        if grad_rule is not None:
            ref_grads = grad_rule(*args, grad_out)
        return _backward_rows(result, ref_out, ref_grads, names, args, tol)

    return judge


def judge_passed(case: Case, result: Any) -> list[Comparison]:
    """A judge for ``run_gradcheck`` / ``run_gradgradcheck``."""
    if not isinstance(result, dict) or "passed" not in result:
        return _not_a_result(result, type(result).__name__)
    ok = result["passed"] is True
    return [Comparison.plain("gradcheck", ok, "passed" if ok else str(result.get("message", ""))[:160])]


def judge_double_backward(case: Case, result: Any, tol: float = 1e-7) -> list[Comparison]:
    """A judge for ``run_double_backward`` of a softplus: value, gradient and second-order vjp."""
    x, grad_out, v = case.args
    xr = x.detach().clone().requires_grad_(True)
    out = F.softplus(xr)
    (g,) = torch.autograd.grad(out, xr, grad_out, create_graph=True)
    (g2,) = torch.autograd.grad(g, xr, v)
    if not isinstance(result, dict) or "out" not in result:
        return _not_a_result(result, type(result).__name__)
    if isinstance(result["out"], str):
        return [Comparison.plain("output", False, f"expected a torch.Tensor, got {result['out']}", dtype=result["out"])]
    rows = [compare("output", result["out"], out.detach(), atol=tol, rtol=tol)]
    rows += _node_rows(result)
    if "grad" not in result:
        rows.append(
            Comparison.plain("grad", False, "the output does not require grad: call your Function with .apply(...)")
        )
        return rows
    rows.append(compare("grad", result["grad"], g.detach(), atol=tol, rtol=tol))
    g2_out = result.get("grad2")
    if isinstance(g2_out, str):
        rows.append(Comparison.plain("second derivative", False, g2_out))
    else:
        rows.append(compare("second derivative", g2_out, g2, atol=tol, rtol=tol))
    return rows


def judge_monitor(case: Case, result: Any, tol: float = 1e-6) -> list[Comparison]:
    """A judge for ``run_monitor``: each parameter's gradient norm of this backward, and no hooks left."""
    weights, x, y, _ = case.args
    model = build_mlp(weights)
    F.mse_loss(model(x), y).backward()
    want = {n: p.grad.norm() for n, p in model.named_parameters()}
    if not isinstance(result, dict) or "norms" not in result:
        return _not_a_result(result, type(result).__name__)
    norms = result["norms"]
    if not isinstance(norms, dict):
        return [Comparison.plain("norms", False, f"expected a dict name -> norm, got {norms}", dtype=str(norms))]
    rows = []
    missing = sorted(set(want) - set(norms))
    extra = sorted(set(norms) - set(want))
    if missing or extra:
        rows.append(
            Comparison.plain(
                "names", False, f"keys should be model.named_parameters() names; missing {missing}, unexpected {extra}"
            )
        )
    for name in sorted(set(want) & set(norms)):
        got = norms[name]
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            got = torch.tensor(float(got), dtype=want[name].dtype)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.reshape(()).to(want[name].dtype)
        rows.append(compare(f"norm {name}", got, want[name], atol=tol, rtol=tol))
    left = result.get("hooks_left", 0)
    if left:
        rows.append(
            Comparison.plain(
                "hooks", False, f"{left} hook(s) still registered after the call: keep the handles and .remove() them"
            )
        )
    return rows


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
            "t1",
            "t1 output and gradients",
            _t1_cases,
            make_backward_judge(ref_linear, ["x", "w", "b"]),
            call=run_backward,
        ),
        Check("t2", "t2 output and gradient", _t2_cases, make_backward_judge(ref_logsumexp, ["x"]), call=run_backward),
        Check("t2", "t2 gradcheck (float64)", _t2_gradcheck_cases, judge_passed, call=run_gradcheck),
        Check(
            "t3",
            "t3 identity forward, clipped gradient",
            _t3_cases,
            make_backward_judge(ref_clip_grad, ["x"], grad_rule=_clip_rule),
            call=run_backward,
        ),
        Check(
            "t4",
            "t4 sign forward, straight-through gradient",
            _t4_cases,
            make_backward_judge(ref_sign_ste, ["x"], grad_rule=_ste_rule),
            call=run_backward,
        ),
        Check(
            "t5", "t5 value, gradient, second derivative", _t5_cases, judge_double_backward, call=run_double_backward
        ),
        Check("t5", "t5 gradgradcheck (float64)", _t5_gradgradcheck_cases, judge_passed, call=run_gradgradcheck),
        Check("t6", "t6 gradient norms", _t6_cases, judge_monitor, call=run_monitor),
    ],
)
