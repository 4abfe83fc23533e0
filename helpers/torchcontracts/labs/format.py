"""The lab format, shared by the lab builder (``labbuild``) and the grader (``grading``).

* notebook metadata ``torchcontracts.lab`` names the lab (``lab01_strides``), whose public
  checks live in ``torchcontracts.lessons.<lesson>.<lab>`` (``torchcontracts.labs.load``);
* a graded cell has metadata ``torchcontracts = {"id": "<lab>/t1", "role": "solution", "task": "t1"}``
  and code between ``### BEGIN SOLUTION`` and ``### END SOLUTION``;
* a hidden-check cell (role ``hidden-check``, metadata ``task``) holds ``### BEGIN HIDDEN CHECKS`` /
  ``### END HIDDEN CHECKS``; it only registers hidden checks with ``lab.add_hidden``, and it is
  removed from the student lab.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "BEGIN_HIDDEN",
    "BEGIN_SOLUTION",
    "END_HIDDEN",
    "END_SOLUTION",
    "META",
    "ROLE_HIDDEN",
    "ROLE_SOLUTION",
    "CourseCell",
    "LabCell",
    "LabFormatError",
    "cell_meta",
    "course_cells",
    "find_root",
    "graded_cells",
    "hidden_check_cells",
    "hidden_check_sources",
    "notebook_lab",
]

META = "torchcontracts"  # the metadata key of notebooks and cells
ROLE_SOLUTION, ROLE_HIDDEN = "solution", "hidden-check"
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN CHECKS", "### END HIDDEN CHECKS"
# A hidden cell that imports `lab` would register its checks on the module's object, which the
# grader never reads: it must use the `lab` it is given (the notebook's, or the grader's copy).
IMPORTS_LAB = re.compile(
    r"from\s+torchcontracts\.(?:labchecks|lessons)\S*\s+import\s*(?:\([^)]*|[^\n(]*)\blab\b(?!\w)"
    r"|\w+\.lab\.add_hidden"
)


class LabFormatError(ValueError):
    """A solution notebook breaks the lab source format; the message says where."""


@dataclasses.dataclass(frozen=True)
class LabCell:
    """A graded cell: its stable id, task and the source as it stands in a notebook."""

    id: str
    task: str
    source: str


def cell_meta(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's ``torchcontracts`` metadata; {} when absent or not a dict (a hostile notebook)."""
    meta = cell.get("metadata", {})
    meta = meta.get(META, {}) if isinstance(meta, dict) else {}
    return meta if isinstance(meta, dict) else {}


def notebook_lab(nb: Mapping[str, Any]) -> str | None:
    """The lab a notebook's metadata names, or None."""
    meta = nb.get("metadata", {})
    meta = meta.get(META, {}) if isinstance(meta, dict) else {}
    lab = meta.get("lab") if isinstance(meta, dict) else None
    return lab if isinstance(lab, str) and lab else None


def find_root(start: Path | None = None) -> Path:
    """The course root: the nearest folder upwards that holds ``solutions/`` or ``labs/``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "labs").is_dir() or (folder / "solutions").is_dir():
            return folder
    raise FileNotFoundError(
        "no course folder found here: run this from the course root (it holds labs/ and solutions/)"
    )


def graded_cells(nb: Any) -> dict[str, LabCell]:
    """The graded cells of a lab or solution notebook, by stable id."""
    cells = {}
    for cell in nb.cells:
        meta = cell_meta(cell)
        if meta.get("role") == ROLE_SOLUTION and meta.get("id"):
            cells[meta["id"]] = LabCell(meta["id"], meta.get("task", ""), cell.source)
    return cells


def hidden_check_cells(nb: Any) -> list[tuple[str, str]]:
    """(task, source) of each hidden-check cell of a solution notebook (for the grader)."""
    return [(str(cell_meta(c).get("task", "")), c.source) for c in nb.cells if cell_meta(c).get("role") == ROLE_HIDDEN]


def hidden_check_sources(nb: Any) -> list[str]:
    """Sources of the hidden-check cells of a solution notebook."""
    return [src for _, src in hidden_check_cells(nb)]


@dataclasses.dataclass(frozen=True)
class CourseCell:
    """A code cell as the grader runs it: a solution cell by id and task (its code is the learner's), else code."""

    role: str  # ROLE_SOLUTION, or "" for course code
    id: str = ""
    task: str = ""
    source: str = ""


def course_cells(nb: Any) -> tuple[CourseCell, ...]:
    """The code cells of a lab or solution notebook in order, as a graded run uses them.

    Hidden-check cells are left out and a solution cell keeps only its id and task, so a student lab built
    from a solution notebook has the same course cells as the solution: the grader compares the two to
    tell a stale ``labs/`` without building the lab (``labs.build`` is the course builder's, not the grader's).
    """
    cells = []
    for cell in nb.cells:
        meta = cell_meta(cell)
        if cell.get("cell_type") != "code" or meta.get("role") == ROLE_HIDDEN:
            continue
        if meta.get("role") == ROLE_SOLUTION:
            cells.append(CourseCell(ROLE_SOLUTION, str(meta.get("id", "")), str(meta.get("task", ""))))
        else:
            cells.append(CourseCell("", source=cell.source))
    return tuple(cells)
