"""Show check outcomes in a notebook: one line per check, then a table of what differs."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

from torchcontracts.checks.comparison import Comparison

if TYPE_CHECKING:  # spec imports this module when a check is shown
    from torchcontracts.checks.spec import CheckOutcome, Task

__all__ = ["show_outcomes"]


def show_outcomes(task: Task, outcomes: Sequence[CheckOutcome]) -> None:
    """Print one line per check and, in a notebook, a compact table of the compared values."""
    passed = sum(o.ok for o in outcomes)
    head = f"{task.id} {task.title} [{task.points:g} pts]: {passed}/{len(outcomes)} public checks pass"
    print(head)
    for o in outcomes:
        print(f"  {'PASS' if o.ok else 'FAIL'} {o.check}: {o.reason}")
    rows = [r for o in outcomes for r in o.rows]
    if rows:
        _display_rows(rows)
    if outcomes and passed == len(outcomes):
        print("  Public checks pass. Hidden checks try other shapes and edge cases when you submit.")


def _display_rows(rows: Sequence[Comparison]) -> None:
    try:
        import pandas as pd
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - plain Python without IPython
        get_ipython = None  # type: ignore[assignment]
    if get_ipython is not None and get_ipython() is not None:
        frame = pd.DataFrame([dataclasses.asdict(r) for r in rows]).rename(columns={"max_abs_diff": "max|diff|"})
        display(
            frame.style.apply(
                lambda row: ["background-color: #fdd" if not row["ok"] else "" for _ in row], axis=1
            ).hide(axis="index")
        )
    else:
        for r in rows:
            print("    " + r.line())
