"""Compare a learner's answer with the expected one: one ``Comparison`` row per value, readable in one line.

Judges of labs and Try-it exercises build their rows with ``compare``; the notebook shows them as a table
(``torchcontracts.checks.display``) and the grader keeps them as feedback.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import torch

__all__ = ["Comparison", "compare", "not_a_result", "shares_storage", "short"]


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One row of feedback, in the spirit of Karpathy's ``cmp``: what differs, on one line.

    ``expected`` and ``got`` are short summaries (a shape, a dtype, a few values) filled in for
    failing rows, so a FAIL line says what the answer should have been, not only that it is wrong.
    """

    name: str
    ok: bool
    shape: str
    dtype: str
    strides: str
    max_abs_diff: float
    status: str  # "exact", "close", or what is wrong
    expected: str = ""
    got: str = ""

    @classmethod
    def plain(
        cls,
        name: str,
        ok: bool,
        status: str,
        *,
        shape: str = "-",
        dtype: str = "-",
        strides: str = "-",
        diff: float = math.nan,
        expected: Any = None,
        got: Any = None,
    ) -> "Comparison":
        """A row for an answer that is not a tensor (a bool, a count, a dict) or for a failure with no values."""
        return cls(
            name,
            ok,
            shape,
            dtype,
            strides,
            diff,
            status,
            "" if expected is None else short(expected),
            "" if got is None else short(got),
        )

    def detail(self) -> str:
        """``"expected X, got Y"`` when the row knows them, else ``""``."""
        if not (self.expected or self.got):
            return ""
        return f"expected {self.expected or '?'}, got {self.got or '?'}"

    def line(self) -> str:
        mark = "PASS" if self.ok else "FAIL"
        diff = "-" if math.isnan(self.max_abs_diff) else f"{self.max_abs_diff:.3g}"
        detail = f": {self.detail()}" if self.detail() else ""
        return (
            f"{mark} {self.name}: {self.status}{detail} | shape {self.shape} | dtype {self.dtype}"
            f" | strides {self.strides} | max|diff| {diff}"
        )


MAX_SHOWN = 60  # characters of one expected/got summary: a FAIL line stays one readable line


def short(x: Any, limit: int = MAX_SHOWN) -> str:
    """A one-line summary of an answer, cut to ``limit`` characters (tensors: their first values)."""
    if isinstance(x, torch.Tensor):
        text = _values(x)
    elif isinstance(x, torch.Size):
        text = str(tuple(x))
    else:
        try:
            text = str(x)
        except Exception:  # a learner's object with a broken __str__
            text = f"<{type(x).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _values(t: torch.Tensor, start: int = 0, n: int = 6) -> str:
    """``[v0, v1, ...]`` of a tensor's values from flat index ``start``, 4 significant digits."""
    try:
        flat = t.detach().reshape(-1)[start : start + n].cpu().tolist()
    except Exception:  # a meta, sparse or otherwise unreadable tensor
        return f"a {str(t.dtype).replace('torch.', '')} tensor of shape {tuple(t.shape)}"
    if t.dim() == 0:
        return _num(flat[0])
    body = ", ".join(_num(v) for v in flat)
    return f"[{'..., ' if start else ''}{body}{', ...' if t.numel() > start + n else ''}]"


def _first_mismatch(a: torch.Tensor, e: torch.Tensor, atol: float, rtol: float) -> int:
    """Flat index of the first wrong value, so a summary shows where they differ (0 when unknown)."""
    bad = ~torch.isclose(a.reshape(-1).to(torch.float64), e.reshape(-1).to(torch.float64), atol=atol, rtol=rtol)
    where = bad.nonzero()
    return max(int(where[0]) - 1, 0) if len(where) else 0


def _short_at(t: torch.Tensor, start: int) -> str:
    return short(_values(t, start))


def _num(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when both tensors look into the same storage (a zero-copy view)."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _fmt(x: Any) -> str:
    return str(tuple(x)) if isinstance(x, (torch.Size, tuple, list)) else str(x)


def compare(
    name: str,
    actual: Any,
    expected: torch.Tensor,
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
    check_dtype: bool = True,
    check_strides: bool = False,
    view_of: torch.Tensor | None = None,
) -> Comparison:
    """Compare a learner's tensor with the expected one, never raising on odd input.

    ``view_of`` demands a zero-copy answer: ``actual`` must share storage with it.
    """
    if not isinstance(actual, torch.Tensor):
        return Comparison.plain(name, False, f"expected a torch.Tensor, got {type(actual).__name__}")
    shape = _fmt(actual.shape) if actual.shape == expected.shape else f"{_fmt(actual.shape)} != {_fmt(expected.shape)}"
    dtype = str(actual.dtype).replace("torch.", "")
    if actual.dtype != expected.dtype:
        dtype += f" != {str(expected.dtype).replace('torch.', '')}"
    strides = _fmt(actual.stride())
    if actual.shape != expected.shape:
        return Comparison(
            name,
            False,
            shape,
            dtype,
            strides,
            math.nan,
            "wrong shape",
            f"shape {_fmt(expected.shape)}",
            f"shape {_fmt(actual.shape)}",
        )
    if check_dtype and actual.dtype != expected.dtype:
        return Comparison(
            name,
            False,
            shape,
            dtype,
            strides,
            math.nan,
            "wrong dtype",
            str(expected.dtype).replace("torch.", ""),
            str(actual.dtype).replace("torch.", ""),
        )
    if check_strides and actual.stride() != expected.stride():
        strides += f" != {_fmt(expected.stride())}"
        return Comparison(
            name,
            False,
            shape,
            dtype,
            strides,
            math.nan,
            "wrong strides",
            f"strides {_fmt(expected.stride())}",
            f"strides {_fmt(actual.stride())}",
        )
    if actual.device != expected.device:
        actual = actual.to(expected.device)
    try:
        a = actual.detach().to(torch.float64) if actual.dtype != torch.bool else actual.detach()
        e = expected.detach().to(a.dtype)
        diff = float((a.to(torch.float64) - e.to(torch.float64)).abs().max()) if a.numel() else 0.0
        exact = bool(torch.equal(a, e))
    except RuntimeError as err:  # e.g. a meta tensor or a sparse layout
        return Comparison(name, False, shape, dtype, strides, math.nan, f"cannot compare: {err}"[:120])
    if math.isnan(diff) and not exact:
        status, ok = "contains NaN", False
    elif exact:
        status, ok = "exact", True
    elif torch.allclose(a.to(torch.float64), e.to(torch.float64), atol=atol, rtol=rtol) and (atol or rtol):
        status, ok = "close", True
    else:
        status, ok = "values differ", False
    if ok and view_of is not None and not shares_storage(actual, view_of):
        status, ok = "values right, but it is a copy: return a view of the input", False
    if not ok and status != "values right, but it is a copy: return a view of the input":
        at = _first_mismatch(a, e, atol, rtol) if a.numel() else 0
        return Comparison(name, ok, shape, dtype, strides, diff, status, _short_at(expected, at), _short_at(actual, at))
    return Comparison(name, ok, shape, dtype, strides, diff, status)


def not_a_result(out: Any, keys: Sequence[str]) -> list[Comparison]:
    """A failing row when ``out`` is not a check driver's dict of measurements (a disturbed kernel or a forged
    answer), else []: the judges of labs whose drivers measure share it."""
    if isinstance(out, dict) and all(k in out for k in keys):
        return []
    got = type(out).__name__ if not isinstance(out, dict) else f"a dict with keys {sorted(map(str, out))}"
    return [
        Comparison.plain(
            "result",
            False,
            "the check's driver did not return its measurements: rerun the cell",
            expected=f"a dict with keys {list(keys)}",
            got=got,
        )
    ]
