"""Lab 04's roofline tasks: t2 ``intensity`` and t3 ``place``, their public cases and judges (no driver needed).

t2 is judged against ``FlopCounterMode`` on meta tensors (``expected_intensity``), t3 against
``torchcontracts.lessons.l04_async.roofline``; the learner's functions are called as ``fn(*case.args)``.
``lab04_timing`` registers these checks and re-exports every public name here.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from torchcontracts.checks import Case, Comparison
from torchcontracts.lessons.l04_async.lab04_judges import _num, _row
from torchcontracts.lessons.l04_async.roofline import Ceilings, Kernel

__all__ = ["expected_intensity", "intensity_cases", "judge_intensity", "judge_place", "place_cases"]


# --- t2 intensity(op, shapes, dtype, stride, padding) ---------------------------------------------


def expected_intensity(
    op: str, shapes: Sequence[Sequence[int]], dtype: str = "float32", stride: int = 1, padding: int = 0
) -> tuple[int, int]:
    """(FLOPs, bytes) as torch counts them: FlopCounterMode on meta tensors (matmul, conv), 1 FLOP per output
    element for an add and per input element for a sum; bytes = every input read once + the output written once."""
    dt = getattr(torch, dtype)
    ts = [torch.empty(tuple(s), dtype=dt, device="meta") for s in shapes]
    fns: dict[str, Callable[..., torch.Tensor]] = {
        "matmul": torch.matmul,
        "add": torch.add,
        "sum": lambda t: t.sum(-1),
        "conv2d": lambda x, w: F.conv2d(x, w, stride=stride, padding=padding),
    }
    with FlopCounterMode(display=False) as counter:
        out = fns[op](*ts)
    flops = counter.get_total_flops() + {"add": out.numel(), "sum": ts[0].numel()}.get(op, 0)
    return int(flops), int(sum(t.numel() * t.element_size() for t in (*ts, out)))


def judge_intensity(case: Case, out: Any) -> list[Comparison]:
    """t2: FLOPs and bytes exactly, intensity to 1e-6."""
    op, shapes, dtype, stride, padding = case.args
    flops, nbytes = expected_intensity(op, shapes, dtype, stride, padding)
    if not isinstance(out, dict) or not all(k in out for k in ("flops", "bytes", "intensity")):
        return [Comparison.plain("answer", False, "return {'flops': int, 'bytes': int, 'intensity': float}", got=out)]
    got_f, got_b, got_i = _num(out["flops"]), _num(out["bytes"]), _num(out["intensity"])
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    if got_f == flops:
        hint_f = "right"
    elif got_f * 2 == flops:
        hint_f = "half: a multiply-add is 2 FLOPs"
    else:
        hint_f = "FLOPs differ (matmul 2mkn; conv 2 x output elements x C_in x kh x kw; add/sum 1 per element)"
    out_bytes = nbytes - sum(math.prod(s) for s in shapes) * size
    if got_b == nbytes:
        hint_b = "right"
    elif got_b * size == nbytes:
        hint_b = "these are elements: multiply by the dtype's size in bytes"
    elif got_b == nbytes - out_bytes:
        hint_b = "count the output written as well as the inputs read"
    else:
        hint_b = (
            "bytes differ: read each input once at its own size (a broadcast input is small), write the output once"
        )
    ok_i = math.isfinite(got_i) and math.isclose(got_i, flops / nbytes, rel_tol=1e-6)
    return [
        _row("flops", got_f == flops, hint_f, hint_f, expected=None if got_f == flops else flops, got=out["flops"]),
        _row("bytes", got_b == nbytes, hint_b, hint_b, expected=None if got_b == nbytes else nbytes, got=out["bytes"]),
        _row(
            "intensity",
            ok_i,
            "right",
            "intensity = flops / bytes",
            expected=f"{flops / nbytes:.6g}",
            got=out["intensity"],
        ),
    ]


def intensity_cases(seed: int) -> list[Case]:
    return [
        Case("matmul (64, 128) @ (128, 32)", ("matmul", [[64, 128], [128, 32]], "float32", 1, 0)),
        Case("add of two (1000, 1000) bf16", ("add", [[1000, 1000], [1000, 1000]], "bfloat16", 1, 0)),
        Case("sum over the last dim of (256, 1024)", ("sum", [[256, 1024]], "float32", 1, 0)),
        Case("conv2d 3x3, padding 1", ("conv2d", [[8, 3, 32, 32], [16, 3, 3, 3]], "float32", 1, 1)),
    ]


# --- t3 place(kernels, ceilings) ------------------------------------------------------------------


def judge_place(case: Case, out: Any) -> list[Comparison]:
    """t3: each kernel's intensity, attainable FLOP/s, % of ceiling (rel 1e-6) and bound."""
    kernels, ceilings = case.args
    roof = Ceilings("judge", 1, bandwidth=ceilings["bandwidth"], flops={"float32": ceilings["peak"]})
    if not isinstance(out, (list, tuple)) or len(out) != len(kernels):
        return [
            Comparison.plain(
                "answer", False, f"return a list of {len(kernels)} dicts, one per kernel, in order", got=out
            )
        ]
    rows = []
    for k, got in zip(kernels, out):
        want = Kernel(k["name"], k["flops"], k["bytes"], k["seconds"])
        expect = {
            "intensity": want.intensity,
            "attainable": roof.attainable(want.intensity),
            "percent": want.percent_of_ceiling(roof),
        }
        if not isinstance(got, dict):
            rows.append(
                Comparison.plain(
                    k["name"], False, "each item is a dict with intensity, attainable, percent, bound", got=got
                )
            )
            continue
        for key, value in expect.items():
            g = _num(got.get(key))
            ok = math.isfinite(g) and math.isclose(g, value, rel_tol=1e-6)
            hint = {
                "intensity": "FLOPs / bytes",
                "attainable": "min(peak, bandwidth x intensity)",
                "percent": "100 x (flops / seconds) / attainable",
            }[key]
            rows.append(_row(f"{k['name']}: {key}", ok, "right", hint, expected=f"{value:.6g}", got=got.get(key)))
        b = got.get("bound")
        rows.append(
            _row(
                f"{k['name']}: bound",
                b == want.bound(roof),
                "right",
                "memory left of the ridge point (peak / bandwidth), compute at or right of it",
                expected=want.bound(roof),
                got=b,
            )
        )
    return rows


def _kernel(name: str, flops: float, nbytes: float, seconds: float) -> dict[str, Any]:
    return {"name": name, "flops": float(flops), "bytes": float(nbytes), "seconds": float(seconds)}


def place_cases(seed: int) -> list[Case]:
    cpu = {"bandwidth": 16e9, "peak": 100e9}
    return [
        Case(
            "three kernels on a 2-core CPU's roofline",
            (
                [
                    _kernel("add 4M", 4e6, 48e6, 4.1e-3),
                    _kernel("softmax 1024x1024", 5 * 2**20, 8 * 2**20, 1.3e-3),
                    _kernel("matmul 1024^3", 2 * 1024**3, 12 * 2**20, 0.031),
                ],
                cpu,
            ),
        )
    ]
