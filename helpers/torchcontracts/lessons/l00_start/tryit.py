"""Lesson 00's "Try it" exercises: proof over promises, on any device."""

from __future__ import annotations

from typing import Any

import torch

from torchcontracts.checks import Case, Check, Comparison
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXERCISES"]


def _pairs(seed: int) -> list[Case]:
    x = torch.arange(12.0).reshape(3, 4)
    return [
        Case("x and x.T", (x, x.T)),
        Case("x and x.T.contiguous()", (x, x.T.contiguous())),
        Case("x and x[1:]", (x, x[1:])),
        Case("x and x.clone()", (x, x.clone())),
        Case("x and a new tensor with x's values", (x, torch.tensor(x.tolist()))),
    ]


def _shares_expected(case: Case) -> bool:
    a, b = case.args
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _judge_bool(expected: bool, out: Any) -> list[Comparison]:
    ok = isinstance(out, bool) and out == expected
    status = "right" if ok else ("return a bool (True/False)" if not isinstance(out, bool) else "wrong answer")
    return [Comparison.plain("answer", ok, status, expected=expected, got=out)]


def _devices(seed: int) -> list[Case]:
    return [Case("cpu: a real device", ("cpu",)), Case("meta: tensors with shapes but no data", ("meta",))]


EXERCISES = exercises_by_id(
    [
        Exercise(
            "00.1",
            "does b share a's memory?",
            "shares_memory",
            (
                Check(
                    "00.1",
                    "views share, copies don't",
                    _pairs,
                    lambda case, out: _judge_bool(_shares_expected(case), out),
                ),
            ),
            hint="compare where the storages start: a.untyped_storage().data_ptr()",
        ),
        Exercise(
            "00.2",
            "prove a device computes, don't trust it",
            "really_computes",
            (
                Check(
                    "00.2",
                    "only a checked result counts",
                    _devices,
                    lambda case, out: _judge_bool(case.args[0] != "meta", out),
                ),
            ),
            hint="run a small kernel on the device, bring the result back with .cpu(), compare it with the "
            "known answer, and return False if any step raises",
        ),
    ]
)
