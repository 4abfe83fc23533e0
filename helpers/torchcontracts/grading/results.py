"""What grading produces: the options of a run and the results of a submission, its tasks and its checks."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

__all__ = ["CheckResult", "GradeOptions", "GradeResult", "TaskResult"]


@dataclasses.dataclass(frozen=True)
class GradeOptions:
    """Limits and choices for one grading run."""

    course: Path
    lab: str | None = None  # expected lab (batch mode); None = whatever the notebook says
    cell_timeout: float = 30.0
    total_timeout: float = 300.0
    mem_mb: int = 4096
    threads: int = 1
    seed: int | None = None
    public_only: bool = False
    fork_server: bool = True  # fork kernels from one process that imported torch (Linux); False: launch each
    sandbox: str = "none"  # "bwrap" or "none", resolved from --sandbox by the command line


@dataclasses.dataclass
class CheckResult:
    """One check's verdict as shown to the learner (hidden checks carry generic names)."""

    task: str
    name: str
    hidden: bool
    ok: bool
    reason: str
    score: float
    max_score: float


@dataclasses.dataclass
class TaskResult:
    """One task: points earned, the one-line reason, and its checks."""

    id: str
    title: str
    score: float
    max_score: float
    reason: str
    checks: list[CheckResult]


@dataclasses.dataclass
class GradeResult:
    """Everything the reports need about one graded submission."""

    submission: str
    lab: str | None
    score: float
    max_score: float
    tasks: list[TaskResult]
    problems: list[str]
    seed: int
    seconds: float
    sandbox: str = "none"
    graded: bool = True  # False: refused (not a notebook, another lab) or no kernel could start

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
