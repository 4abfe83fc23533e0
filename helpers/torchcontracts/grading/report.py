"""Show grades: a terminal summary, JSON, Gradescope's results.json, and gradebook rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchcontracts.grading.results import GradeResult

__all__ = ["gradebook_row", "gradescope", "render", "to_json"]


def _pts(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def render(result: GradeResult) -> str:
    """A few lines for the terminal: the total, one line per task, the problems."""
    name = Path(result.submission).name
    lines = [
        f"{name}: {result.lab or 'unknown lab'}: {_pts(result.score)}/{_pts(result.max_score)} points"
        f"  (seed {result.seed}, {result.seconds:.1f} s, sandbox {result.sandbox})"
    ]
    for task in result.tasks:
        lines.append(f"  {task.id} {_pts(task.score):>5}/{_pts(task.max_score):<3} {task.title}: {task.reason}")
        for check in task.checks:
            lines.append(f"      {'PASS' if check.ok else 'FAIL'} {check.name}: {check.reason}")
    for problem in result.problems:
        lines.append(f"  problem: {problem}")
    if result.sandbox == "none":
        lines.append(
            "  note: graded without an OS sandbox (--sandbox none): learner code could read what this user "
            "can read and reach the network; README, 'The sandbox', lists what that leaves open"
        )
    return "\n".join(lines)


def to_json(result: GradeResult) -> str:
    return json.dumps(result.to_dict(), indent=2)


def gradescope(result: GradeResult) -> dict[str, Any]:
    """Gradescope's results format: one test per check; hidden checks show after grades are published."""
    tests = []
    for task in result.tasks:
        if not task.checks:
            tests.append(
                {
                    "name": f"{task.id} {task.title}",
                    "score": task.score,
                    "max_score": task.max_score,
                    "visibility": "visible",
                    "output": task.reason,
                }
            )
        for check in task.checks:
            tests.append(
                {
                    "name": f"{task.id} {task.title}: {check.name}",
                    "score": check.score,
                    "max_score": check.max_score,
                    "visibility": "after_published" if check.hidden else "visible",
                    "output": check.reason,
                }
            )
    out = (
        "\n".join([*result.problems, f"sandbox: {result.sandbox}"])
        if result.problems
        else f"graded (sandbox: {result.sandbox})"
    )
    return {"score": result.score, "execution_time": round(result.seconds, 2), "output": out, "tests": tests}


def gradebook_row(result: GradeResult, task_ids: list[str]) -> dict[str, Any]:
    """One gradebook row: a column per task, the total and the problems."""
    row: dict[str, Any] = {"submission": Path(result.submission).name, "lab": result.lab}
    scores = {t.id: t.score for t in result.tasks}
    for tid in task_ids:
        row[tid] = scores.get(tid, 0.0)
    row["total"] = result.score
    row["max_total"] = result.max_score
    row["problems"] = "; ".join(result.problems)
    row["sandbox"] = result.sandbox
    row["seed"] = result.seed
    row["seconds"] = round(result.seconds, 2)
    return row
