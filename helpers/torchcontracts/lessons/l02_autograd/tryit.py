"""Lesson 02's "Try it" exercises: a custom autograd.Function, a gradient hook, and a graph walk.

Each check runs the learner's function on small hand-built graphs and judges the *gradients* it
produces, not its source: a clamp is right when values and gradients match ``torch.clamp``'s
contract (the gradient passes at the boundary), a hook is right when the leaf's ``.grad`` shows the
clipping and its handle removes it, a node count is right when a diamond-shaped graph counts each
node once. The expected values are written into the cases, so no reference answer lives here.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from torchcontracts.checks import Case, Check, Comparison, compare
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXERCISES"]


# 02.1: a clamp written as a torch.autograd.Function --------------------------------------------


def _clamp_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    x = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0])  # holds both boundaries exactly
    upstream = torch.tensor([0.5, 1.5, -2.0, 3.0, 0.25, -1.0, 4.0])  # not all ones: backward must use it
    wide = torch.randn(3, 4, generator=g, dtype=torch.float64)
    wide[0, 0], wide[2, 3] = 0.0, 0.5  # the boundaries again, in float64
    return [
        Case("x on [-1, 1], with x == -1 and x == 1", (x, -1.0, 1.0, upstream)),
        Case(
            "3x4 float64 on [0, 0.5], boundaries included",
            (wide, 0.0, 0.5, torch.randn(3, 4, generator=g, dtype=torch.float64)),
        ),
    ]


def _clamp_call(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call ``fn(x, lo, hi)`` on a fresh leaf, then backward with the case's upstream gradient."""
    x0, lo, hi, upstream = case.args
    x = x0.clone().requires_grad_(True)
    out = fn(x, lo, hi)
    if not isinstance(out, torch.Tensor) or out.grad_fn is None:
        return {"out": out, "node": None, "python": False, "grad": None}
    out.backward(upstream)
    return {
        "out": out.detach(),
        "node": type(out.grad_fn).__name__,
        "python": isinstance(out.grad_fn, torch.autograd.function.BackwardCFunction),
        "grad": x.grad,
    }


def _clamp_judge(case: Case, got: dict[str, Any]) -> list[Comparison]:
    x, lo, hi, upstream = case.args
    if got["node"] is None:
        return [
            Comparison.plain(
                "output",
                False,
                "the output has no grad_fn: return YourFunction.apply(x, lo, hi)",
                expected="a tensor with a grad_fn",
                got=got["out"],
            )
        ]
    rows = [
        Comparison.plain(
            "a custom autograd.Function",
            got["python"],
            "yes" if got["python"] else "this is a built-in op: write a torch.autograd.Function",
            expected="a Python Function node",
            got=got["node"],
        )
    ]
    rows.append(compare("forward values", got["out"], x.clamp(lo, hi)))
    passes = ((x >= lo) & (x <= hi)).to(x.dtype)  # torch.clamp lets x == lo or hi through
    if got["grad"] is None:
        rows.append(Comparison.plain("gradient", False, "x.grad is None: backward returned no gradient for x"))
    else:
        row = compare("gradient (upstream * [lo <= x <= hi])", got["grad"], upstream * passes, atol=1e-12)
        at_edge = (x == lo) | (x == hi)
        if (
            not row.ok
            and isinstance(got["grad"], torch.Tensor)
            and got["grad"].shape == x.shape
            and torch.equal(got["grad"][~at_edge], (upstream * passes)[~at_edge])
        ):
            row = Comparison.plain(
                row.name,
                False,
                "wrong only at x == lo or x == hi: the boundary passes the gradient (use <=, as torch.clamp does)",
                expected=upstream * passes,
                got=got["grad"],
            )
        rows.append(row)
    return rows


# 02.2: a tensor hook that clips the gradient flowing through a tensor ---------------------------


def _hook_cases(seed: int) -> list[Case]:
    return [
        Case("bound 1, y = 3x", (torch.tensor([1.0, 2.0, 3.0]), 1.0, torch.tensor([-5.0, 0.5, 5.0]))),
        Case("bound 0.25, y = 3x", (torch.tensor([-1.0, 0.0, 4.0, 2.0]), 0.25, torch.tensor([0.1, -0.3, 2.0, -0.25]))),
    ]


def _hook_call(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """y = 3x; ``fn(y, bound)`` registers the hook; backward twice: with the hook, then after ``remove()``."""
    x0, bound, upstream = case.args
    x = x0.clone().requires_grad_(True)
    y = x * 3
    handle = fn(y, bound)
    y.backward(upstream, retain_graph=True)
    with_hook = x.grad.clone()
    removable = callable(getattr(handle, "remove", None))
    after = None
    if removable:
        handle.remove()
        x.grad = None
        y.backward(upstream)
        after = x.grad.clone()
    return {"with hook": with_hook, "removable": removable, "after remove": after}


def _hook_judge(case: Case, got: dict[str, Any]) -> list[Comparison]:
    _, bound, upstream = case.args
    rows = [compare("x.grad with the hook (3 * clipped upstream)", got["with hook"], 3 * upstream.clamp(-bound, bound))]
    if not got["removable"]:
        rows.append(
            Comparison.plain(
                "returned handle",
                False,
                "return the handle that register_hook gives you",
                expected="a RemovableHandle",
                got="no .remove()",
            )
        )
    else:
        rows.append(compare("x.grad after handle.remove() (3 * upstream)", got["after remove"], 3 * upstream))
    return rows


# 02.3: count the nodes of a backward graph ------------------------------------------------------


def _graph_cases(seed: int) -> list[Case]:
    x = torch.randn(3, requires_grad=True, generator=torch.Generator().manual_seed(seed))
    w = torch.randn(3, requires_grad=True)
    a = x.exp()
    return [
        Case("a leaf: no grad_fn", (x, 0)),
        Case("x * 2: Mul + AccumulateGrad", (x * 2, 2)),
        Case("(w * x).sum(): two leaves", ((w * x).sum(), 4)),
        Case("(x * data).sum(): data has no node", ((x * torch.ones(3)).sum(), 3)),
        Case("a * a + a.sin() with a = x.exp(): a diamond", (a * a + a.sin(), 5)),
    ]


def _graph_call(fn: Callable[..., Any], case: Case) -> Any:
    return fn(case.args[0])


def _graph_judge(case: Case, got: Any) -> list[Comparison]:
    want = case.args[1]
    ok = isinstance(got, int) and not isinstance(got, bool) and got == want
    status = (
        "right"
        if ok
        else (
            "return an int"
            if not isinstance(got, int) or isinstance(got, bool)
            else "too many: a shared node counted twice, or a None edge counted"
            if got > want
            else "too few: count the AccumulateGrad nodes of leaves too"
        )
    )
    return [Comparison.plain("distinct nodes", ok, status, expected=want, got=got)]


EXERCISES = exercises_by_id(
    [
        Exercise(
            "02.1",
            "a clamp as a custom autograd.Function",
            "my_clamp",
            (Check("02.1", "values, gradient and the boundary", _clamp_cases, _clamp_judge, call=_clamp_call),),
            hint="forward keeps what backward needs (ctx.save_for_backward); backward returns one gradient per "
            "forward input, None for the floats lo and hi. Compare with torch.clamp at x == lo yourself",
        ),
        Exercise(
            "02.2",
            "a hook that clips the gradient through a tensor",
            "clip_grad_hook",
            (Check("02.2", "clips on the way back, and can be removed", _hook_cases, _hook_judge, call=_hook_call),),
            hint="t.register_hook(fn) calls fn with the gradient flowing into t; what fn returns replaces it, "
            "and register_hook returns the handle",
        ),
        Exercise(
            "02.3",
            "count the nodes of a backward graph",
            "count_nodes",
            (Check("02.3", "each node once, None edges skipped", _graph_cases, _graph_judge, call=_graph_call),),
            hint="node.next_functions holds (node, input_nr) pairs, some of them (None, 0); one node can be "
            "reached along two paths",
        ),
    ]
)
