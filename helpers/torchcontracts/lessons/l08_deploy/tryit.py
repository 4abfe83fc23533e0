"""Lesson 08's "Try it" exercises: a real buffer, the bytes of an int8 weight, a batch served in eval mode.

Each judge derives the expected answer from torch or torchao on the case at hand (what ``.to('meta')``
moves and ``state_dict()`` saves, the inner tensors torchao really stores, the model's own eval-mode
outputs), so the checker states what the libraries do rather than a second hand-written formula. The
reference answers live only in the tests.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import torch
from torch import nn

from torchcontracts.checks import Case, Check, Comparison, compare
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXERCISES", "ServedNet"]


# 08.1: a scale that is saved, moved and not trained ------------------------------------------------


def _scale_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case("scale of shape (3,)", (torch.rand(3, generator=g) + 0.5,)),
        Case("scale of shape (2, 1)", (torch.rand(2, 1, generator=g) + 0.5,)),
    ]


def _judge_scaler(case: Case, out: Any) -> list[Comparison]:
    (scale,) = case.args
    if not isinstance(out, nn.Module):
        return [Comparison.plain("module", False, f"return an nn.Module, got {type(out).__name__}")]
    x = torch.randn(4, *scale.shape)
    try:
        with torch.no_grad():
            got = out(x)
    except Exception as err:  # noqa: BLE001 - the learner's module, in one line
        return [Comparison.plain("forward", False, f"forward(x) raised {type(err).__name__}: {str(err)[:80]}")]
    rows = [compare("forward(x) = x * scale", got, x * scale, atol=1e-6, rtol=1e-6)]
    saved = [
        k
        for k, v in out.state_dict().items()
        if isinstance(v, torch.Tensor) and v.shape == scale.shape and torch.equal(v, scale)
    ]
    params = [n for n, p in out.named_parameters() if p.shape == scale.shape and torch.equal(p.detach(), scale)]
    buffers = [n for n, b in out.named_buffers() if b.shape == scale.shape and torch.equal(b, scale)]
    if params:
        rows.append(
            Comparison.plain(
                "not trained",
                False,
                f"{params[0]} is an nn.Parameter: an optimizer would train it; register it with register_buffer",
            )
        )
    if not saved:
        why = (
            "registered with persistent=False: state_dict() leaves it out"
            if buffers
            else "state_dict() does not have it: a plain tensor attribute is not saved"
        )
        rows.append(Comparison.plain("saved by state_dict()", False, why))
    moved = copy.deepcopy(out).to("meta")
    left = [k for k, v in vars(moved).items() if isinstance(v, torch.Tensor) and v.device.type != "meta"]
    rows.append(
        Comparison.plain(
            "moved by .to()",
            not left,
            "moved"
            if not left
            else f"self.{left[0]} stayed on {getattr(vars(moved)[left[0]], 'device', '?')} after "
            ".to('meta'): a plain attribute is not moved",
        )
    )
    if saved and not params:
        rows.append(Comparison.plain("saved by state_dict()", True, f"as {saved[0]!r}"))
    return rows


# 08.2: the bytes of an int8 weight-only Linear weight ------------------------------------------------


def _layer_cases(seed: int) -> list[Case]:
    return [
        Case("Linear(64, 256)", (64, 256)),
        Case("Linear(512, 10)", (512, 10)),
        Case("Linear(100, 3)", (100, 3)),
        Case("Linear(7, 129)", (7, 129)),
    ]


def _measured_bytes(in_features: int, out_features: int) -> int:
    """What torchao stores for an int8 weight-only Linear weight: the bytes of its inner tensors."""
    logging.getLogger("torchao").setLevel(logging.ERROR)
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    layer = nn.Sequential(nn.Linear(in_features, out_features))
    quantize_(layer, Int8WeightOnlyConfig())
    w = layer[0].weight
    names, _ = w.__tensor_flatten__()
    return sum(getattr(w, n).numel() * getattr(w, n).element_size() for n in names)


def _judge_bytes(case: Case, out: Any) -> list[Comparison]:
    i, o = case.args
    want = _measured_bytes(i, o)
    if isinstance(out, torch.Tensor) and out.numel() == 1 and not out.is_floating_point():
        out = int(out)
    if isinstance(out, bool) or not isinstance(out, int):
        return [
            Comparison.plain("bytes", False, f"return an int (bytes), got {type(out).__name__}", expected=want, got=out)
        ]
    if out == want:
        return [Comparison.plain("bytes", True, "right")]
    hints = {
        i * o: "that is the int8 values alone: torchao also keeps a float32 scale and an int8 zero point per "
        "output row",
        4 * i * o: "that is the float32 weight: int8 is one byte per value",
        i * o + 4 * o: "values and scales, but not the zero points (one int8 per output row)",
        i * o + 5: "one scale for the whole tensor? torchao keeps one per output row (per channel)",
        i * o + 5 * i: "per input column? the scales and zero points are per output row (out_features of them)",
        i * o + 5 * o + 4 * o: "that adds the bias: count the weight's inner tensors only",
    }
    return [Comparison.plain("bytes", False, hints.get(out, "wrong byte count"), expected=want, got=out)]


# 08.3: one forward, eval mode, no graph, the mode restored --------------------------------------------


class ServedNet(nn.Module):
    """A small image model with batch norm and dropout: its answers depend on the mode it runs in."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))))


def _served(state: dict[str, torch.Tensor]) -> ServedNet:
    model = ServedNet()
    model.load_state_dict(state)
    return model


def _serve_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = ServedNet()
    model.bn.running_mean.copy_(torch.randn(6, generator=g) * 0.3)
    model.bn.running_var.copy_(torch.rand(6, generator=g) + 0.5)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    return [
        Case("5 requests", (state, [torch.randn(1, 3, 8, 8, generator=g) for _ in range(5)])),
        Case("1 request", (state, [torch.randn(1, 3, 8, 8, generator=g)])),
    ]


def _count_serve(fn: Any, case: Case) -> dict[str, Any]:
    """Call ``fn(model, requests)`` on a model in training mode, counting its forward calls."""
    state, requests = case.args
    model = _served(state).train()
    calls = []
    hook = model.register_forward_pre_hook(lambda mod, args: calls.append(args[0].shape[0]))
    try:
        out = fn(model, [r.clone() for r in requests])
    finally:
        hook.remove()
    return {"out": out, "calls": calls, "training after": model.training}


def _judge_serve(case: Case, result: Any) -> list[Comparison]:
    state, requests = case.args
    out = result.get("out") if isinstance(result, dict) else None
    if not isinstance(out, (list, tuple)) or len(out) != len(requests):
        n = len(out) if isinstance(out, (list, tuple)) else type(out).__name__
        return [
            Comparison.plain(
                "outputs", False, "return a list with one output per request", expected=len(requests), got=n
            )
        ]
    ref = _served(state).eval()
    rows = []
    with torch.no_grad():
        for n, (r, o) in enumerate(zip(requests, out)):
            row = compare(f"request {n}", o, ref(r), atol=1e-5, rtol=1e-5)
            if not row.ok and row.status == "values differ":
                row = Comparison(
                    row.name,
                    False,
                    row.shape,
                    row.dtype,
                    row.strides,
                    row.max_abs_diff,
                    "values differ from eval mode: call model.eval() (batch norm's running stats, no dropout)",
                    row.expected,
                    row.got,
                )
            rows.append(row)
    graph = [n for n, o in enumerate(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    rows.append(
        Comparison.plain(
            "no graph",
            not graph,
            "no output requires grad"
            if not graph
            else "the outputs carry a graph: run under torch.inference_mode() (or torch.no_grad())",
        )
    )
    calls = result.get("calls", []) if isinstance(result, dict) else []
    rows.append(
        Comparison.plain(
            "one forward",
            len(calls) == 1,
            "one batched call"
            if len(calls) == 1
            else f"{len(calls)} forward calls: stack the requests (torch.cat) and run one",
            expected=1,
            got=len(calls),
        )
    )
    after = result.get("training after") if isinstance(result, dict) else None
    rows.append(
        Comparison.plain(
            "mode restored",
            after is True,
            "left in training mode, as found"
            if after is True
            else "the model was in training mode and is left in eval mode: restore it (model.train(was_training))",
        )
    )
    return rows


EXERCISES = exercises_by_id(
    [
        Exercise(
            "08.1",
            "a scale that is saved, moved and not trained",
            "make_scaler",
            (Check("08.1", "saved by state_dict, moved by .to, not a parameter", _scale_cases, _judge_scaler),),
            hint="nn.Module has one method for tensors that are state but not parameters",
        ),
        Exercise(
            "08.2",
            "the bytes of an int8 weight-only Linear weight",
            "int8_weight_bytes",
            (Check("08.2", "equal to torchao's inner tensors", _layer_cases, _judge_bytes),),
            hint="one byte per weight value, plus a float32 scale and an int8 zero point for each of the "
            "out_features rows",
        ),
        Exercise(
            "08.3",
            "serve a batch: one forward, eval mode, no graph",
            "serve",
            (
                Check(
                    "08.3",
                    "eval-mode answers from one forward, mode restored",
                    _serve_cases,
                    _judge_serve,
                    call=_count_serve,
                ),
            ),
            hint="remember model.training, call model.eval(), torch.cat the requests under torch.inference_mode(), "
            "split the output, then model.train(was)",
        ),
    ]
)
