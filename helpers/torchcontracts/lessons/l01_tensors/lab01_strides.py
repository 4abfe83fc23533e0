"""Lab 01 (strides): the tasks and public checks; hidden checks live in the solution notebook only.

The public cases hit every trap the lab's text names: a 0-dim shape and a size-0 dim (t1), a
tuple of Python ints rather than a list (t1), size-1 dims and empty tensors (t2), inputs that are
views with their own strides and storage offset (t3, t4, t5), a diagonal whose stride is not
``n + 1`` (t5), and a view rather than a copy (t3, t4, t5).

Public helpers, also used by the hidden-check cells: ``strided_tensor`` and ``compare_value``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from torchcontracts.checks import Case, Check, Comparison, LabSpec, Task, compare

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
    """Compare a plain answer (a bool or a tuple of ints) with the truth, never raising.

    The type is part of the contract: a list, a NumPy int or a tensor bool is a wrong answer.
    """
    kind = type(actual).__name__
    if isinstance(expected, bool):
        if not isinstance(actual, bool):
            hint = ": convert with bool(...)" if kind in ("Tensor", "bool_") else ""
            return Comparison.plain(name, False, f"expected a Python bool, got {kind}{hint}", dtype=kind)
        ok = actual == expected
        return Comparison.plain(
            name,
            ok,
            "exact" if ok else "wrong answer",
            dtype="bool",
            expected=None if ok else expected,
            got=None if ok else actual,
        )
    if not isinstance(actual, tuple):
        hint = ": return tuple(...)" if isinstance(actual, list) else ""
        return Comparison.plain(
            name,
            False,
            f"expected a tuple of ints, got a {kind}{hint}",
            dtype=kind,
            expected=tuple(expected),
            got=actual,
        )
    odd = [v for v in actual if not _is_int(v)]
    if odd:
        return Comparison.plain(
            name,
            False,
            f"expected Python ints, got a {type(odd[0]).__name__}: convert with int(...)",
            dtype=type(odd[0]).__name__,
        )
    got, want = tuple(actual), tuple(expected)
    if len(got) != len(want):
        return Comparison(
            name,
            False,
            f"{len(got)} != {len(want)}",
            "int",
            str(got),
            math.nan,
            "wrong length: one stride per dim",
            str(want),
            str(got),
        )
    ok = got == want
    diff = float(max((abs(a - b) for a, b in zip(got, want)), default=0))
    return Comparison(
        name,
        ok,
        str(len(got)),
        "int",
        str(got),
        diff,
        "exact" if ok else "values differ",
        "" if ok else str(want),
        "" if ok else str(got),
    )


# --- t1 contiguous_strides ------------------------------------------------------------


def _t1_cases(seed: int) -> list[Case]:
    return [Case(f"shape {s}", (s,)) for s in [(2, 3, 4), (5,), (4, 1, 3)]]


def _t1_edge_cases(seed: int) -> list[Case]:
    return [Case("size-0 dim, shape (2, 0, 3)", ((2, 0, 3),)), Case("0-dim, shape ()", ((),))]


def _t1_judge(case: Case, out: Any) -> list[Comparison]:
    (shape,) = case.args
    return [compare_value("strides", out, tuple(torch.empty(shape).stride()))]


# --- t2 is_contiguous -----------------------------------------------------------------


def _t2_cases(seed: int) -> list[Case]:
    pairs = [((2, 3, 4), (12, 4, 1)), ((3, 2), (1, 3)), ((2, 3), (0, 1)), ((2, 2), (3, 1)), ((6,), (1,))]
    return [Case(f"shape {s} strides {st}", (s, st)) for s, st in pairs]


def _t2_edge_cases(seed: int) -> list[Case]:
    pairs = [((3, 1, 2), (2, 5, 1)), ((1, 4), (1, 1)), ((2, 0, 3), (1, 1, 1)), ((0,), (5,))]
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


def _t3_view_cases(seed: int) -> list[Case]:
    return [
        Case("arange(20)[3::2] (stride 2, offset 3), size 3, step 2", (torch.arange(20)[3::2], 3, 2)),
        Case("arange(12.)[5:] (offset 5), size 4, step 1", (torch.arange(12.0)[5:], 4, 1)),
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


def _t4_view_cases(seed: int) -> list[Case]:
    return [
        Case(
            "arange(40.).reshape(2, 5, 4)[1:].transpose(1, 2) (offset 20), k 2",
            (torch.arange(40.0).reshape(2, 5, 4)[1:].transpose(1, 2), 2),
        )
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


def _t5_view_cases(seed: int) -> list[Case]:
    return [
        Case("arange(36).reshape(6, 6)[::2, ::2] (strides (12, 2))", (torch.arange(36).reshape(6, 6)[::2, ::2],)),
        Case("arange(25.).reshape(5, 5)[1:4, 1:4] (offset 6)", (torch.arange(25.0).reshape(5, 5)[1:4, 1:4],)),
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
        Check("t1", "t1 row-major strides", _t1_cases, _t1_judge),
        Check("t1", "t1 a size-0 dim and a 0-dim shape", _t1_edge_cases, _t1_judge),
        Check("t2", "t2 contiguity of common layouts", _t2_cases, _t2_judge),
        Check("t2", "t2 size-1 dims and empty tensors", _t2_edge_cases, _t2_judge),
        Check("t3", "t3 windows of a fresh 1-D tensor", _t3_cases, _t3_judge),
        Check("t3", "t3 windows of a view (its own stride and offset)", _t3_view_cases, _t3_judge),
        Check("t4", "t4 patches of a fresh (C, H, W) tensor", _t4_cases, _t4_judge),
        Check("t4", "t4 patches of a view (transposed, with an offset)", _t4_view_cases, _t4_judge),
        Check("t5", "t5 diagonal of a fresh square matrix", _t5_cases, _t5_judge),
        Check("t5", "t5 diagonal of a view (strides other than n + 1, an offset)", _t5_view_cases, _t5_judge),
    ],
)
