"""Lab 03's t3 judge (``predict_memory()``): the allocator model's answer, and the rows that compare with it.

Grader-only: ``model_answer`` replays the three traces of ``lab03_memory.TRACES`` on the allocator model
(``alloc_viz.replay``) and so returns t3's answer itself; a graded kernel that could import it could return
it. The judges run in the grader's own process on what ``predict_memory()`` returns; ``lab03_memory``
imports them only to register its checks (and re-exports them for the solution's hidden-check cell). No
kernel-side code calls anything here. A judge never raises on an odd answer: it returns a failing row.
"""

from __future__ import annotations

from typing import Any

from torchcontracts.checks import Case, Comparison
from torchcontracts.lessons.l03_memory.alloc_viz import replay

__all__ = ["allocator_rows", "judge_traces", "model_answer"]


def _traces() -> dict[str, str]:
    # lab03_memory imports this module at its top, so TRACES (the task's input, kept there) is read when called
    from torchcontracts.lessons.l03_memory.lab03_memory import TRACES

    return TRACES


def model_answer() -> tuple[tuple[int, int], ...]:
    """(reserved, allocated) after each trace of TRACES, from the allocator model."""
    return tuple((replay(t)[-1].reserved, replay(t)[-1].allocated) for t in _traces().values())


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def allocator_rows(out: Any, which: int) -> list[Comparison]:
    """t3: one row per trace for reserved (``which=0``) or allocated (``which=1``) bytes."""
    want = model_answer()
    if not isinstance(out, (tuple, list)) or len(out) != len(want):
        return [Comparison.plain("answer", False, "return a tuple of 3 (reserved, allocated) pairs of ints", got=out)]
    rows = []
    for name, got, exp in zip(_traces(), out, want):
        label = f"trace {name} {'reserved' if which == 0 else 'allocated'}"
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not all(_int(v) for v in got):
            rows.append(Comparison.plain(label, False, "each answer is a pair of Python ints (bytes)", got=got))
            continue
        ok = got[which] == exp[which]
        rows.append(
            Comparison.plain(
                label,
                ok,
                "exact" if ok else "values differ",
                strides=str(got[which]),
                diff=float(abs(got[which] - exp[which])),
                expected=None if ok else f"{exp[which]} B ({exp[which] / 2**20:.4g} MiB)",
                got=None if ok else f"{got[which]} B",
            )
        )
    return rows


def judge_traces(case: Case, out: Any) -> list[Comparison]:
    """t3's public check: the reserved bytes after each trace (the hidden check adds the allocated bytes)."""
    return allocator_rows(out, 0)
