"""Lab 04's roofline judges: t2 ``intensity`` and t3 ``place`` (no driver needed). Grader-side only.

t2 is judged against ``FlopCounterMode`` on meta tensors (``expected_intensity``: the only place the
course computes t2's answer); t3 against ``expected_placement``, a roofline with several memory levels
(each level's bandwidth over the bytes the kernel moved there; the lowest roof binds), which the
lesson's ``roofline`` module does not compute. The learner's functions are called as
``fn(*case.args)``; the cases live in ``lab04_timing``, which registers these judges. No kernel-side
code calls anything here.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from torchcontracts.checks import Case, Comparison
from torchcontracts.lessons.l04_async.lab04_judges import _row
from torchcontracts.lessons.l04_async.workloads import _num

__all__ = ["expected_intensity", "expected_placement", "judge_intensity", "judge_place"]


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


# --- t3 place(kernels, ceilings) ------------------------------------------------------------------


def expected_placement(kernel: dict[str, Any], ceilings: dict[str, Any]) -> dict[str, Any]:
    """One kernel on a roofline with memory levels: per-level intensity, the lowest roof, % of it, what binds
    ("compute" when the peak is the lowest roof, ties included; else the set of levels whose roof is lowest)."""
    peak, bandwidth = float(ceilings["peak"]), ceilings["bandwidth"]
    flops = float(kernel["flops"])
    intensity = {level: flops / float(kernel["bytes"][level]) for level in bandwidth}
    roofs = {level: float(bw) * intensity[level] for level, bw in bandwidth.items()}
    lowest = min(roofs.values())
    attainable = min(peak, lowest)
    binds = {"compute"} if peak <= lowest else {lv for lv, r in roofs.items() if math.isclose(r, lowest, rel_tol=1e-9)}
    return {
        "intensity": intensity,
        "attainable": attainable,
        "percent": 100 * flops / float(kernel["seconds"]) / attainable,
        "bound": binds,
        "roofs": roofs,
    }


_HINTS = {
    "attainable": "the FLOP/s that no roof forbids: every memory level's roof and the compute roof hold at once",
    "percent": "100 x (flops / seconds) / attainable",
}


def judge_place(case: Case, out: Any) -> list[Comparison]:
    """t3: each kernel's per-level intensity, attainable FLOP/s and % of it (rel 1e-6), and what binds it."""
    kernels, ceilings = case.args
    levels = list(ceilings["bandwidth"])
    if not isinstance(out, (list, tuple)) or len(out) != len(kernels):
        return [
            Comparison.plain(
                "answer", False, f"return a list of {len(kernels)} dicts, one per kernel, in order", got=_kind(out)
            )
        ]
    rows = []
    for k, got in zip(kernels, out):
        want = expected_placement(k, ceilings)
        if not isinstance(got, dict):
            rows.append(
                Comparison.plain(
                    k["name"], False, "each item is a dict with intensity, attainable, percent, bound", got=_kind(got)
                )
            )
            continue
        its = got.get("intensity")
        ok = isinstance(its, dict) and set(its) == set(levels)
        ok = ok and all(math.isclose(_num(its[lv]), want["intensity"][lv], rel_tol=1e-6) for lv in levels)
        rows.append(
            _row(
                f"{k['name']}: intensity",
                ok,
                "right",
                f"a dict {{level: FLOPs per byte moved at that level}} for the levels {levels}",
                expected=", ".join(f"{lv} {want['intensity'][lv]:.6g}" for lv in levels),
                got=_kind(its) if not isinstance(its, dict) else f"{len(its)} entries",
            )
        )
        for key, hint in _HINTS.items():
            g = _num(got.get(key))
            ok = math.isfinite(g) and math.isclose(g, want[key], rel_tol=1e-6)
            if key == "attainable" and not ok and math.isfinite(g):
                if math.isclose(g, max(ceilings["peak"], *want["roofs"].values()), rel_tol=1e-6):
                    hint = "that is the highest roof: a kernel gets the lowest of its roofs"
                elif any(math.isclose(g, min(ceilings["peak"], r), rel_tol=1e-6) for r in want["roofs"].values()):
                    hint = "that is one memory level's roof, not the lowest one: every level's roof holds"
            rows.append(_row(f"{k['name']}: {key}", ok, "right", hint, expected=f"{want[key]:.6g}", got=f"{g:.6g}"))
        b = got.get("bound")
        ok = isinstance(b, str) and b in want["bound"]
        rows.append(
            _row(
                f"{k['name']}: bound",
                ok,
                "right",
                "the name of the level whose roof is lowest, or 'compute' when no memory roof is below the peak "
                "(a tie with the peak is 'compute', as at the ridge point)",
                expected=" or ".join(sorted(want["bound"])),
                got=b if isinstance(b, str) and b in {*levels, "compute", "memory"} else _kind(b),
            )
        )
    return rows


def _kind(value: Any) -> str:
    """What a value is, without echoing a learner's text: its type (and length for a sequence)."""
    if isinstance(value, (list, tuple, dict)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__
