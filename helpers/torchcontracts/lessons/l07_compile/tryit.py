"""Lesson 07's "Try it" exercises: remove graph breaks, predict recompilations, count FLOPs.

Every judge measures torch on the case at hand instead of trusting a hand-written answer:
07.1 runs the learner's function through ``torch._dynamo.explain`` (graphs, breaks, skipped
frames) and compares its values with the break-y original; 07.2 compiles a small function with a
graph-recording backend on the case's sizes and counts the graphs; 07.3 counts with
``FlopCounterMode``. Only dynamo's tracing runs (no Inductor), so each check takes well under a
second. The reference answers live only in the tests.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from torchcontracts.checks import Case, Check, Comparison, compare
from torchcontracts.lessons.l07_compile.compile_tools import GraphRecorder, graph_report
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXERCISES", "clip_scale_with_breaks"]


# 07.1: the same values, without graph breaks ---------------------------------------------------


def clip_scale_with_breaks(x: torch.Tensor) -> torch.Tensor:
    """The lesson's break-y original: scale x down to a peak of 1 when its peak is above 1, then 2 * tanh."""
    peak = x.abs().max().item()  # .item(): a graph break
    if peak > 1.0:  # a Python branch on a tensor's value
        x = x / peak
    return torch.tanh(x) * 2


def _clip_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case("peak above 1 (scaled down)", (torch.randn(64, generator=g) * 3,)),
        Case("peak below 1 (left alone)", (torch.rand(64, generator=g) * 0.5,)),
        Case("2-D, negative peak", (torch.tensor([[0.5, -4.0], [2.0, 1.0]]),)),
        Case("peak exactly 1", (torch.tensor([1.0, -0.25, 0.5]),)),
    ]


def _clip_call(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Run ``fn(x)`` eagerly for its values, then under ``torch._dynamo.explain`` for its graphs
    (which resets dynamo: functions compiled earlier in the session recompile on their next call)."""
    (x,) = case.args
    out = fn(x.clone())
    report = graph_report(fn, x.clone())
    return {
        "out": out,
        "graphs": report.graphs,
        "breaks": report.breaks,
        "skipped": report.skipped,
        "reason": report.reasons[0] if report.reasons else "",
    }


def _clip_judge(case: Case, got: dict[str, Any]) -> list[Comparison]:
    (x,) = case.args
    rows = [compare("values", got["out"], clip_scale_with_breaks(x.clone()), atol=1e-6, rtol=1e-5)]
    clean = got["graphs"] == 1 and got["breaks"] == 0 and got["skipped"] == 0
    if clean:
        rows.append(Comparison.plain("one graph, no breaks", True, "dynamo captured it whole"))
    else:
        why = f" ({got['reason']})" if got["reason"] else ""
        rows.append(
            Comparison.plain(
                "one graph, no breaks",
                False,
                f"dynamo still breaks{why}: keep the peak a tensor and choose with tensor ops",
                expected="1 graph, 0 breaks",
                got=f"{got['graphs']} graphs, {got['breaks']} breaks, {got['skipped']} skipped",
            )
        )
    return rows


# 07.2: how many graphs will dynamo compile? ----------------------------------------------------


def _compile_cases(seed: int) -> list[Case]:
    return [
        Case("sizes [8, 16, 32], dynamic=None", ([8, 16, 32], None)),
        Case("sizes [8, 8, 8], dynamic=None", ([8, 8, 8], None)),
        Case("sizes [8, 16, 32], dynamic=False", ([8, 16, 32], False)),
        Case("sizes [8, 16, 8, 16], dynamic=False", ([8, 16, 8, 16], False)),
        Case("sizes [8, 16, 32], dynamic=True", ([8, 16, 32], True)),
        Case("sizes [8, 16, 1], dynamic=None", ([8, 16, 1], None)),
        Case("sizes [1, 8, 16], dynamic=None", ([1, 8, 16], None)),
        Case("sizes [8, 1, 16], dynamic=True", ([8, 1, 16], True)),
    ]


def _sin_twice(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2


_MEASURED: dict[tuple[tuple[int, ...], bool | None], int] = {}


def measured_compiles(sizes: list[int], dynamic: bool | None) -> int:
    """Graphs dynamo compiles for ``torch.compile(sin(x) * 2, dynamic=dynamic)`` called on ``randn(n)`` for each n.

    Measured once per case and process (a fact of the installed torch), then remembered.
    """
    key = (tuple(sizes), dynamic)
    if key not in _MEASURED:
        _MEASURED[key] = _measure_compiles(sizes, dynamic)
    return _MEASURED[key]


def _measure_compiles(sizes: list[int], dynamic: bool | None) -> int:
    rec = GraphRecorder()
    torch.compiler.reset()
    fn = torch.compile(_sin_twice, backend=rec, dynamic=dynamic)
    for n in sizes:
        fn(torch.randn(n))
    torch.compiler.reset()
    return len(rec.graphs)


def _compile_judge(case: Case, got: Any) -> list[Comparison]:
    sizes, dynamic = case.args
    want = measured_compiles(sizes, dynamic)
    if isinstance(got, bool) or not isinstance(got, int):
        return [Comparison.plain("compiles", False, f"return an int, got {type(got).__name__}", expected=want, got=got)]
    if got == want:
        return [Comparison.plain("compiles", True, "right")]
    hint = (
        "one graph per distinct size is what dynamic=False does"
        if got == len(set(sizes))
        else "sizes 0 and 1 are special: dynamo never lets a dynamic size stand for them"
        if 1 in sizes
        else "wrong count"
    )
    return [Comparison.plain("compiles", False, hint, expected=want, got=got)]


# 07.3: FLOPs of an MLP, as FlopCounterMode counts them -----------------------------------------


def _flop_cases(seed: int) -> list[Case]:
    return [
        Case("batch 32, sizes [64, 128, 10], forward", (32, [64, 128, 10], False)),
        Case("batch 7, sizes [5, 9, 3, 2], forward", (7, [5, 9, 3, 2], False)),
        Case("batch 32, sizes [64, 128, 10], forward + backward", (32, [64, 128, 10], True)),
        Case("batch 7, sizes [5, 9, 3, 2], forward + backward", (7, [5, 9, 3, 2], True)),
    ]


def counted_flops(batch: int, sizes: list[int], backward: bool) -> int:
    """FlopCounterMode's total for Linear layers (ReLU between) on a ``(batch, sizes[0])`` input,
    with ``out.sum().backward()`` when ``backward``; the input does not require grad."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    x = torch.randn(batch, sizes[0])
    with FlopCounterMode(display=False) as counter:
        out = model(x)
        if backward:
            out.sum().backward()
    return int(counter.get_total_flops())


def _flop_judge(case: Case, got: Any) -> list[Comparison]:
    batch, sizes, backward = case.args
    want = counted_flops(batch, sizes, backward)
    if isinstance(got, bool) or not isinstance(got, int):
        return [Comparison.plain("FLOPs", False, f"return an int, got {type(got).__name__}", expected=want, got=got)]
    if got == want:
        return [Comparison.plain("FLOPs", True, "right")]
    forward = sum(2 * batch * a * b for a, b in zip(sizes, sizes[1:]))
    bias = batch * sum(sizes[1:])
    if got * 2 == want:
        hint = "a multiply-add is 2 FLOPs"
    elif got in (want + bias, want + 2 * bias):
        hint = "FlopCounterMode counts the matmuls only, not the bias adds"
    elif backward and got == 3 * forward:
        hint = "the input does not require grad, so the first layer's backward skips one matmul"
    elif backward and got == 2 * forward:
        hint = "forward + backward: count the forward matmuls too"
    elif not backward and got > forward:
        hint = "forward only: no backward matmuls in this case"
    else:
        hint = "wrong count"
    return [Comparison.plain("FLOPs", False, hint, expected=want, got=got)]


EXERCISES = exercises_by_id(
    [
        Exercise(
            "07.1",
            "the same values without graph breaks",
            "clip_scale",
            (Check("07.1", "values and one graph", _clip_cases, _clip_judge, call=_clip_call),),
            hint="keep the peak a 0-dim tensor (no .item()) and let a tensor op (torch.where, clamp) make the "
            "choice that `if` made",
        ),
        Exercise(
            "07.2",
            "predict how many graphs dynamo compiles",
            "predict_compiles",
            (Check("07.2", "graph counts match dynamo", _compile_cases, _compile_judge),),
            hint="dynamic=False: one graph per size seen; None: the first size is static, a second size makes "
            "the dim dynamic; sizes 0 and 1 always get their own graph",
        ),
        Exercise(
            "07.3",
            "count an MLP's FLOPs like FlopCounterMode",
            "mlp_flops",
            (Check("07.3", "FLOPs match FlopCounterMode", _flop_cases, _flop_judge),),
            hint="a (B, a) @ (a, b) matmul is 2 * B * a * b FLOPs; backward needs a matmul for each weight's grad "
            "and one for each layer's input grad, except where no gradient is needed",
        ),
    ]
)
