"""Lab 01 (strides): the tasks and public checks; hidden checks live in the solution notebook only."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from torchcontracts.check import Case, Check, Comparison, LabSpec, Task, compare

__all__ = ["lab", "strided_tensor", "compare_value"]

Shape = tuple[int, ...]
Strides = tuple[int, ...]


def strided_tensor(shape: Sequence[int], strides: Sequence[int]) -> torch.Tensor:
    """A real tensor with this shape and these strides, on a storage just big enough for it."""
    shape, strides = tuple(int(s) for s in shape), tuple(int(s) for s in strides)
    numel = math.prod(shape)
    need = 0 if numel == 0 else 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    return torch.empty(need).as_strided(shape, strides)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def compare_value(name: str, actual: Any, expected: Any) -> Comparison:
    """Compare a plain answer (a bool or a tuple of ints) with the truth, never raising."""
    if isinstance(expected, bool):
        kind = type(actual).__name__
        if not isinstance(actual, bool):
            hint = ": convert with bool(...)" if kind in ("Tensor", "bool_") else ""
            return Comparison.plain(name, False, f"expected a Python bool, got {kind}{hint}", dtype=kind)
        ok = actual == expected
        return Comparison.plain(name, ok, "exact" if ok else f"answered {actual}, torch says {expected}", dtype="bool")
    if not isinstance(actual, (tuple, list)):
        return Comparison.plain(name, False, f"expected a tuple of ints, got {type(actual).__name__}: {str(actual)[:40]}",
                                dtype=type(actual).__name__)
    odd = [v for v in actual if not _is_int(v)]
    if odd:
        return Comparison.plain(name, False, f"expected Python ints, got a {type(odd[0]).__name__}: convert with int(...)",
                                dtype=type(odd[0]).__name__)
    got, want = tuple(actual), tuple(expected)
    if len(got) != len(want):
        return Comparison(name, False, f"{len(got)} != {len(want)}", "int", str(got), math.nan,
                          f"wrong length: one stride per dim, expected {want}")
    ok = got == want
    diff = float(max((abs(a - b) for a, b in zip(got, want)), default=0))
    return Comparison(name, ok, str(len(got)), "int", str(got), diff,
                      "exact" if ok else f"values differ: expected {want}")


# --- t1 contiguous_strides ------------------------------------------------------------

def _t1_cases(seed: int) -> list[Case]:
    return [Case(f"shape {s}", (s,)) for s in [(2, 3, 4), (5,), (4, 1, 3)]]


def _t1_judge(case: Case, out: Any) -> list[Comparison]:
    (shape,) = case.args
    return [compare_value("strides", out, tuple(torch.empty(shape).stride()))]


# --- t2 is_contiguous -----------------------------------------------------------------

def _t2_cases(seed: int) -> list[Case]:
    pairs = [((2, 3, 4), (12, 4, 1)), ((3, 2), (1, 3)), ((2, 3), (0, 1)), ((2, 2), (3, 1)), ((6,), (1,))]
    return [Case(f"shape {s} strides {st}", (s, st)) for s, st in pairs]


def _t2_judge(case: Case, out: Any) -> list[Comparison]:
    shape, strides = case.args
    return [compare_value("is_contiguous", out, bool(strided_tensor(shape, strides).is_contiguous()))]


# --- t3 sliding_windows ---------------------------------------------------------------

def _t3_cases(seed: int) -> list[Case]:
    return [
        Case("arange(10), size 3, step 1", (torch.arange(10), 3, 1)),
        Case("arange(10), size 4, step 2", (torch.arange(10), 4, 2)),
        Case("arange(12.), size 3, step 3", (torch.arange(12.0), 3, 3)),
        Case("arange(9), size 2, step 4", (torch.arange(9), 2, 4)),
    ]


def _t3_judge(case: Case, out: Any) -> list[Comparison]:
    x, size, step = case.args
    return [compare("windows", out, x.unfold(0, size, step), view_of=x)]


# --- t4 im2col ------------------------------------------------------------------------

def _t4_cases(seed: int) -> list[Case]:
    return [
        Case("(1, 4, 4), k 2", (torch.arange(16.0).reshape(1, 4, 4), 2)),
        Case("(2, 3, 5), k 3", (torch.arange(30.0).reshape(2, 3, 5), 3)),
    ]


def _t4_judge(case: Case, out: Any) -> list[Comparison]:
    x, k = case.args
    return [compare("patches", out, x.unfold(1, k, 1).unfold(2, k, 1), view_of=x)]


# --- t5 diagonal_view -----------------------------------------------------------------

def _t5_cases(seed: int) -> list[Case]:
    return [
        Case("arange(16).reshape(4, 4)", (torch.arange(16).reshape(4, 4),)),
        Case("arange(9.).reshape(3, 3)", (torch.arange(9.0).reshape(3, 3),)),
    ]


def _t5_judge(case: Case, out: Any) -> list[Comparison]:
    (x,) = case.args
    return [compare("diagonal", out, torch.diagonal(x), view_of=x)]


lab = LabSpec(
    "lab01_strides",
    "Strides: predict them, then build zero-copy views with as_strided",
    tasks=[
        Task("t1", "contiguous_strides(shape)", 2, "contiguous_strides"),
        Task("t2", "is_contiguous(shape, strides)", 2, "is_contiguous"),
        Task("t3", "sliding_windows(x, size, step)", 3, "sliding_windows"),
        Task("t4", "im2col(x, k)", 3, "im2col"),
        Task("t5", "diagonal_view(x)", 2, "diagonal_view"),
    ],
    checks=[
        Check("t1", "t1 row-major strides", "contiguous_strides", _t1_cases, _t1_judge),
        Check("t2", "t2 contiguity of common layouts", "is_contiguous", _t2_cases, _t2_judge),
        Check("t3", "t3 windows of a fresh 1-D tensor", "sliding_windows", _t3_cases, _t3_judge),
        Check("t4", "t4 patches of a fresh (C, H, W) tensor", "im2col", _t4_cases, _t4_judge),
        Check("t5", "t5 diagonal of a fresh square matrix", "diagonal_view", _t5_cases, _t5_judge),
    ],
)
