"""Lab 02's grader half: the references and judges of its checks (grader-only: see ``grading.hidden``).

A judge runs in the grader's own process and compares what a driver returned with references built
from plain torch ops (``F.linear``, ``torch.logsumexp``, ``F.softplus`` ...); it never calls the
learner's code. A graded kernel sees placeholders here, so the pieces the drivers in ``lab02_autograd``
share with the judges (``NO_GRAD``, ``_fresh``, ``build_mlp``) live in ``lab02_parts``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from torchcontracts.checks import Case, Comparison, compare
from torchcontracts.lessons.l02_autograd.lab02_parts import NO_GRAD, _fresh, build_mlp

__all__ = [
    "NO_GRAD",
    "build_mlp",
    "judge_double_backward",
    "judge_monitor",
    "judge_passed",
    "make_backward_judge",
    "ref_clip_grad",
    "ref_linear",
    "ref_logsumexp",
    "ref_sign_ste",
]

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
