"""Lesson 01's "Try it" exercises: read a header, free a storage, predict a memory format's strides.

Each judge derives the expected answer from torch itself on the case at hand (a pointer difference,
a storage size, the strides of a freshly allocated tensor), so the checker states what torch does
rather than a second hand-written formula. The reference answers live only in the tests.
"""

from __future__ import annotations

from typing import Any

import torch

from torchcontracts.checks import Case, Check, Comparison, compare
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXERCISES"]


# 01.1: where does t[index] live in its storage? -------------------------------------------------


def _offset_cases(seed: int) -> list[Case]:
    # Values (100, 101, ...) differ from storage offsets, so returning t[index] itself is caught.
    x = torch.arange(100.0, 124.0).reshape(4, 6)
    cube = torch.arange(100.0, 124.0).reshape(2, 3, 4)
    return [
        Case("x (contiguous 4x6)", (x, (2, 3))),
        Case("x.t() (transposed)", (x.t(), (5, 1))),
        Case("x[1:, 2:5] (offset slice)", (x[1:, 2:5], (2, 1))),
        Case("x[:, ::2] (step 2)", (x[:, ::2], (3, 2))),
        Case("x[1].expand(3, 6) (stride 0)", (x[1].expand(3, 6), (2, 4))),
        Case("cube.permute(2, 0, 1)[1:] (3-D)", (cube.permute(2, 0, 1)[1:], (1, 1, 2))),
    ]


def _offset_expected(case: Case) -> int:
    t, index = case.args
    return (t[index].data_ptr() - t.untyped_storage().data_ptr()) // t.element_size()


def _judge_offset(case: Case, out: Any) -> list[Comparison]:
    want = _offset_expected(case)
    if isinstance(out, torch.Tensor) and out.numel() == 1 and not out.is_floating_point():
        out = int(out)  # a 0-dim integer tensor is an acceptable spelling of an int
    if isinstance(out, bool) or not isinstance(out, int):
        return [
            Comparison.plain(
                "offset",
                False,
                f"return an int (elements from the storage start), got {type(out).__name__}",
                expected=want,
                got=out,
            )
        ]
    status = "right" if out == want else "wrong offset: start at storage_offset() and walk the strides"
    return [Comparison.plain("offset", out == want, status, expected=want, got=out)]


# 01.2: keep the values, drop the big storage ----------------------------------------------------


def _small_cases(seed: int) -> list[Case]:
    big = torch.arange(1_000_000, dtype=torch.float32)
    return [
        Case("big[:10] (contiguous slice)", (big[:10],)),
        Case("big[500:510] (offset slice)", (big[500:510],)),
        Case("big.view(1000, 1000)[:4, :3] (strided)", (big.view(1000, 1000)[:4, :3],)),
        Case("torch.arange(5.0) (already compact)", (torch.arange(5.0),)),
    ]


def _judge_small(case: Case, out: Any) -> list[Comparison]:
    (t,) = case.args
    values = compare("values", out, t)
    if not values.ok:
        return [values]
    need = out.numel() * out.element_size()
    held = out.untyped_storage().nbytes()
    ok = held <= need
    status = "holds only its own bytes" if ok else f"still holds a {held:,}-byte storage for {need} bytes of values"
    return [values, Comparison.plain("storage bytes held", ok, status, expected=f"<= {need}", got=held)]


# 01.3: channels_last strides, predicted ---------------------------------------------------------


def _shape_cases(seed: int) -> list[Case]:
    return [
        Case("(2, 3, 4, 5)", ((2, 3, 4, 5),)),
        Case("(10, 3, 32, 32)", ((10, 3, 32, 32),)),
        Case("(1, 16, 7, 9)", ((1, 16, 7, 9),)),
        Case("(4, 8, 1, 6)", ((4, 8, 1, 6),)),
    ]


def _judge_strides(case: Case, out: Any) -> list[Comparison]:
    (shape,) = case.args
    want = tuple(torch.empty(shape, memory_format=torch.channels_last).stride())
    try:
        got = tuple(int(s) for s in out)
    except (TypeError, ValueError):
        return [
            Comparison.plain(
                "strides", False, "return a tuple of 4 ints (strides for N, C, H, W)", expected=want, got=out
            )
        ]
    if got == want:
        return [Comparison.plain("strides", True, "right")]
    hint = (
        "these are the strides of a contiguous NCHW tensor"
        if got == torch.empty(shape).stride()
        else "these are in N, H, W, C order: give one stride per dim of the (N, C, H, W) shape"
        if len(got) == 4 and got == (want[0], want[2], want[3], want[1])
        else "wrong strides"
    )
    return [Comparison.plain("strides", False, hint, expected=want, got=got)]


EXERCISES = exercises_by_id(
    [
        Exercise(
            "01.1",
            "where does t[index] live in the storage?",
            "element_offset",
            (Check("01.1", "offset from the header alone", _offset_cases, _judge_offset),),
            hint="the header holds all you need: t.storage_offset() and t.stride(); no pointers required",
        ),
        Exercise(
            "01.2",
            "keep the values, drop the big storage",
            "keep_small",
            (Check("01.2", "same values, only their own bytes", _small_cases, _judge_small),),
            hint="some calls return their input unchanged when they can and some always allocate: "
            "you need one that always allocates just enough",
        ),
        Exercise(
            "01.3",
            "predict channels_last strides",
            "channels_last_strides",
            (Check("01.3", "strides match torch.channels_last", _shape_cases, _judge_strides),),
            hint="channels_last stores an image pixel by pixel (all channels of one pixel side by side): "
            "which dim gets stride 1? Return the strides in the shape's order N, C, H, W",
        ),
    ]
)
