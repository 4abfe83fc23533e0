"""Lab 01 (strides): every trap the lab's text names fails a PUBLIC check, with a reason that says why.

What every lab must satisfy (reference full marks, judges that never crash, no leaked answers)
is in ``test_lab_contract.py``; here are only lab 01's wrong answers. The traps, from the text
of ``solutions/lab01_strides.ipynb``: a 0-dim shape and a size-0 dim, a list (or NumPy ints)
instead of a tuple of Python ints, strides in bytes, size-1 dims and empty tensors when judging
contiguity, a tensor instead of a Python bool, inputs with their own strides and storage offset,
a diagonal stride of ``n + 1``, and a copy where a view is asked for.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest
import torch

from torchcontracts.lessons.l01_tensors.lab01_strides import lab


def _public_failures(task: str, fn: Callable[..., Any]) -> list[str]:
    return [o.reason for o in (c.run_local(fn) for c in lab.checks_for(task, hidden=False)) if not o.ok]


# --- t1 contiguous_strides -------------------------------------------------------------------


def _t1_left_to_right(shape):
    return tuple(math.prod(shape[:i]) for i in range(len(shape)))


def _t1_bytes(shape):
    out, step = [], 4
    for n in reversed(shape):
        out.insert(0, step)
        step *= max(n, 1)
    return tuple(out)


def _t1_zero_size_product(shape):  # a size-0 dim zeroes every stride to its left
    return tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))


def _t1_scalar_has_a_stride(shape):
    return tuple(torch.empty(shape).stride()) or (1,)


def _t1_list(shape):
    return list(torch.empty(shape).stride())


def _t1_numpy_ints(shape):
    return tuple(np.cumprod((1,) + tuple(max(n, 1) for n in reversed(shape[1:])))[::-1])


# --- t2 is_contiguous -----------------------------------------------------------------------


def _t2_equals_fresh(shape, strides):  # forgets that a size-1 dim's stride is free
    return tuple(strides) == tuple(torch.empty(shape).stride())


def _t2_forgets_empty(shape, strides):
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n if n != 1 else 1
    return True


def _t2_non_increasing(shape, strides):
    return all(a >= b for a, b in zip(strides, strides[1:])) and (not strides or strides[-1] == 1)


def _t2_tensor(shape, strides):
    return torch.tensor(_t2_equals_fresh(shape, strides))


# --- t3 sliding_windows, t4 im2col, t5 diagonal_view ------------------------------------------


def _n(x, size, step):
    return (x.shape[0] - size) // step + 1


def _t4_assumes_contiguous(x, k):
    C, H, W = x.shape
    return x.as_strided((C, H - k + 1, W - k + 1, k, k), (H * W, W, 1, W, 1))


def _t4_swapped_patch_axes(x, k):
    C, H, W = x.shape
    sc, sh, sw = x.stride()
    return x.as_strided((C, H - k + 1, W - k + 1, k, k), (sc, sh, sw, sw, sh), x.storage_offset())


def _t4_no_offset(x, k):
    C, H, W = x.shape
    return x.as_strided((C, H - k + 1, W - k + 1, k, k), (*x.stride(), x.stride(1), x.stride(2)), 0)


WRONG: dict[str, dict[str, tuple[Callable[..., Any], str]]] = {
    "t1": {
        "left-to-right products": (_t1_left_to_right, "values differ: expected (12, 4, 1), got (1, 2, 6)"),
        "strides in bytes": (_t1_bytes, "values differ: expected (12, 4, 1), got (48, 16, 4)"),
        "size-0 dim zeroes the strides": (_t1_zero_size_product, "values differ: expected (3, 3, 1), got (0, 3, 1)"),
        "0-dim gets a stride": (_t1_scalar_has_a_stride, "wrong length: one stride per dim: expected (), got (1,)"),
        "a list instead of a tuple": (_t1_list, "expected a tuple of ints, got a list: return tuple(...)"),
        "NumPy ints": (_t1_numpy_ints, "expected Python ints, got a int64"),
    },
    "t2": {
        "size-1 dims compared like others": (_t2_equals_fresh, "wrong answer: expected True, got False"),
        "forgets empty tensors": (_t2_forgets_empty, "(2, 0, 3) strides (1, 1, 1): is_contiguous: wrong answer"),
        "strides merely decrease": (_t2_non_increasing, "wrong answer: expected False, got True"),
        "a tensor instead of a bool": (_t2_tensor, "expected a Python bool, got Tensor"),
    },
    "t3": {
        "assumes stride 1": (
            lambda x, size, step: x.as_strided((_n(x, size, step), size), (step, 1)),
            "(stride 2, offset 3), size 3, step 2: windows: values differ",
        ),
        "ignores the storage offset": (
            lambda x, size, step: x.as_strided((_n(x, size, step), size), (step * x.stride(0), x.stride(0)), 0),
            "offset 3), size 3, step 2: windows: values differ",
        ),
        "a copy": (lambda x, size, step: x.unfold(0, size, step).clone(), "it is a copy"),
        "stacked slices": (
            lambda x, size, step: torch.stack([x[i * step : i * step + size] for i in range(_n(x, size, step))]),
            "it is a copy",
        ),
        "one window short": (lambda x, size, step: x.unfold(0, size, step)[:-1], "wrong shape"),
    },
    "t4": {
        "assumes a contiguous input": (
            _t4_assumes_contiguous,
            "transpose(1, 2) (offset 20), k 2: patches: values differ",
        ),
        "patch axes swapped": (_t4_swapped_patch_axes, "values differ"),
        "ignores the storage offset": (_t4_no_offset, "(offset 20), k 2: patches: values differ"),
        "a copy": (lambda x, k: x.unfold(1, k, 1).unfold(2, k, 1).contiguous(), "it is a copy"),
        "returns None": (lambda x, k: None, "expected a torch.Tensor"),
    },
    "t5": {
        "stride n + 1": (
            lambda x: x.as_strided((x.shape[0],), (x.shape[0] + 1,)),
            "[::2, ::2] (strides (12, 2)): diagonal: values differ: expected [0, 14, 28], got [0, 4, 8]",
        ),
        "stride(0) + 1": (lambda x: x.as_strided((x.shape[0],), (x.stride(0) + 1,)), "values differ"),
        "ignores the storage offset": (
            lambda x: x.as_strided((x.shape[0],), (x.stride(0) + x.stride(1),), 0),
            "(offset 6): diagonal: values differ: expected [6, 12, 18], got [0, 6, 12]",
        ),
        "torch.diag copies": (lambda x: torch.diag(x), "it is a copy"),
        "a list": (lambda x: torch.diagonal(x).tolist(), "expected a torch.Tensor"),
    },
}


@pytest.mark.parametrize(
    "task,name", [(t, n) for t, ws in WRONG.items() for n in ws], ids=lambda v: str(v).replace(" ", "-")
)
def test_each_trap_fails_a_public_check_with_its_reason(task, name):
    fn, reason = WRONG[task][name]
    fails = _public_failures(task, fn)
    assert fails, f"{task}: the wrong answer '{name}' passes every public check"
    assert any(reason in f for f in fails), f"{task} '{name}': expected {reason!r} in {fails}"
