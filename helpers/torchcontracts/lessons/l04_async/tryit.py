"""Lesson 04's "Try it" exercises: which lines make the host wait for a GPU, and which roof binds a kernel.

04.1's truth table comes from where torch waits: a value read on the host (``.item()``, ``bool()``,
``print``, ``.tolist()``, a blocking copy to the CPU), an output whose size depends on the data
(``nonzero``, boolean masks), or an explicit ``synchronize``; on a GPU lesson 04 shows the same
lines with ``torch.cuda.set_sync_debug_mode``. 04.2's judge asks ``torchcontracts.lessons.l04_async.roofline.Ceilings``,
the object the lesson draws with, for the attainable FLOP/s and the ridge point.
"""

from __future__ import annotations

import math
from typing import Any

from torchcontracts.checks import Case, Check, Comparison
from torchcontracts.lessons.l04_async.roofline import Ceilings, Kernel
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXERCISES", "SYNC_LINES"]


# 04.1: which lines wait for the GPU? -----------------------------------------------------------

# (line run on a CUDA tensor x of 1000 floats, does the host wait for the GPU there?, why)
SYNC_LINES: tuple[tuple[str, bool, str], ...] = (
    ("y = x + 1", False, "queued: the result stays on the GPU"),
    ("s = x.sum()", False, "a 0-dim CUDA tensor: still on the GPU"),
    ("v = x.sum().item()", True, ".item() copies the value to the host and waits for it"),
    ("c = x.cpu()", True, "a blocking device-to-host copy"),
    ("l = x.tolist()", True, "tolist() copies to the host first"),
    ("print(x)", True, "printing reads the values on the host"),
    ("if x.max() > 0: pass", True, "bool() of a CUDA tensor reads it on the host"),
    ("i = x.nonzero()", True, "the output's size depends on the data: the host must wait to allocate it"),
    ("m = x[x > 0]", True, "a boolean mask is a nonzero in disguise"),
    ("t = x.t().contiguous()", False, "no kernel at all: .t() of a 1-D tensor is a view, and already contiguous"),
    (
        "h = x.to('cpu', non_blocking=True)",
        False,
        "an asynchronous copy into pinned memory: no wait (and unsafe to read yet)",
    ),
    ("torch.cuda.synchronize()", True, "the explicit sync point: waits for every queued kernel"),
)


def _sync_cases(seed: int) -> list[Case]:
    return [Case(line, (line,)) for line, _, _ in SYNC_LINES]


def _judge_sync(case: Case, out: Any) -> list[Comparison]:
    (line,) = case.args
    want, why = next((s, w) for text, s, w in SYNC_LINES if text == line)
    if not isinstance(out, bool):
        return [
            Comparison.plain("waits?", False, f"return True or False, got {type(out).__name__}", expected=want, got=out)
        ]
    if out == want:
        return [Comparison.plain("waits?", True, "right")]
    return [Comparison.plain("waits?", False, f"wrong: {why}", expected=want, got=out)]


# 04.2: which roof binds this kernel? -----------------------------------------------------------

_CPU = Ceilings("a 2-core CPU", 2, bandwidth=17e9, flops={"float32": 100e9})  # ridge near 5.9 FLOPs/byte
_GPU = Ceilings("an H200-like GPU", 1, bandwidth=4.3e12, flops={"float32": 790e12})  # ridge near 184


def _bound_cases(seed: int) -> list[Case]:
    rows = [
        ("add of 1M floats on the CPU", 1e6, 12e6, _CPU),
        ("1024^3 matmul on the CPU", 2 * 1024**3, 12 * 1024**2, _CPU),
        ("kernel at the CPU's ridge point", 100e9, 17e9, _CPU),
        ("softmax of 4M floats on the GPU", 20e6, 32e6, _GPU),
        ("4096^3 bf16-sized matmul on the GPU", 2 * 4096**3, 6 * 4096**2, _GPU),
        ("same matmul, read as fp32 on the CPU", 2 * 4096**3, 12 * 4096**2, _CPU),
    ]
    return [Case(label, (flops, nbytes, c.flops["float32"], c.bandwidth)) for label, flops, nbytes, c in rows]


def _judge_bound(case: Case, out: Any) -> list[Comparison]:
    flops, nbytes, peak, bandwidth = case.args
    roof = Ceilings("judge", 1, bandwidth=bandwidth, flops={"float32": peak})
    kernel = Kernel("case", flops, nbytes, 1.0)
    want = (kernel.bound(roof), roof.attainable(kernel.intensity))
    shape_ok = isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[0], str)
    try:
        rate = float(out[1]) if shape_ok else math.nan
    except (TypeError, ValueError):
        rate = math.nan
    if not shape_ok or not math.isfinite(rate):
        return [
            Comparison.plain(
                "answer",
                False,
                'return a pair ("memory" or "compute", attainable FLOP/s)',
                expected=(want[0], f"{want[1]:.4g}"),
                got=out,
            )
        ]
    rows = []
    ok = out[0] == want[0]
    rows.append(
        Comparison.plain(
            "bound",
            ok,
            "right"
            if ok
            else "wrong roof: compare the intensity (FLOPs per byte) with the ridge point peak / bandwidth",
            expected=None if ok else want[0],
            got=None if ok else out[0],
        )
    )
    close = math.isclose(rate, want[1], rel_tol=1e-6)
    hint = (
        "that is the higher roof: a kernel gets the lower of the two"
        if math.isclose(rate, max(peak, bandwidth * kernel.intensity), rel_tol=1e-6)
        else "attainable = min(peak FLOP/s, bandwidth x FLOPs per byte)"
    )
    rows.append(
        Comparison.plain(
            "attainable FLOP/s",
            close,
            "right" if close else hint,
            expected=None if close else f"{want[1]:.4g}",
            got=None if close else f"{rate:.4g}",
            diff=abs(rate - want[1]),
        )
    )
    return rows


EXERCISES = exercises_by_id(
    [
        Exercise(
            "04.1",
            "does this line make the host wait for the GPU?",
            "waits_for_gpu",
            (Check("04.1", "sync points", _sync_cases, _judge_sync),),
            hint="the host waits when it needs a value (or a size) that only the finished kernel knows",
        ),
        Exercise(
            "04.2",
            "which roof binds this kernel?",
            "bound_by",
            (Check("04.2", "roof and attainable FLOP/s", _bound_cases, _judge_bound),),
            hint="intensity = flops / bytes; the ridge point is peak / bandwidth; left of it memory binds",
        ),
    ]
)
