"""Generate the student labs in ``labs/`` from the reference notebooks in ``solutions/``.

Lab source format (the grader relies on it):

* notebook metadata ``torchcontracts.lab`` names the lab (``lab01_strides``), whose public
  checks live in ``torchcontracts.labchecks.<lab>``;
* a graded cell has metadata ``torchcontracts = {"id": "<lab>/t1", "role": "solution", "task": "t1"}``
  and code between ``### BEGIN SOLUTION`` and ``### END SOLUTION``, which becomes a
  ``raise NotImplementedError(...)`` naming the task;
* a cell holding ``### BEGIN HIDDEN CHECKS`` / ``### END HIDDEN CHECKS`` (role ``hidden-check``)
  is removed from the lab; it only registers hidden checks with ``lab.add_hidden``;
* outputs and execution counts are stripped, and the JSON is written deterministically,
  so ``labs check`` can compare bytes.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import re
from pathlib import Path

import nbformat

__all__ = ["LabCell", "build_lab", "build_all", "check_all", "graded_cells", "hidden_check_sources", "find_root"]

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN CHECKS", "### END HIDDEN CHECKS"
# A hidden cell that imports `lab` would register its checks on the module's object, which the
# grader never reads: it must use the `lab` it is given (the notebook's, or the grader's copy).
_IMPORTS_LAB = re.compile(r"from\s+torchcontracts\.labchecks\S*\s+import\s*(?:\([^)]*|[^\n(]*)\blab\b(?!\w)"
                          r"|\w+\.lab\.add_hidden")
META = "torchcontracts"


class LabFormatError(ValueError):
    """A solution notebook breaks the lab source format; the message says where."""


@dataclasses.dataclass(frozen=True)
class LabCell:
    """A graded cell: its stable id, task and the source as it stands in a notebook."""

    id: str
    task: str
    source: str


def find_root(start: Path | None = None) -> Path:
    """The course root: the nearest folder upwards that holds ``solutions/`` or ``labs/``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "labs").is_dir() or (folder / "solutions").is_dir():
            return folder
    raise FileNotFoundError("no course folder found here: run this from the course root (it holds labs/ and solutions/)")


def _meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get(META, {})


def _stub(source: str, message: str, where: str) -> str:
    lines = source.split("\n")
    out: list[str] = []
    inside = False
    for line in lines:
        stripped = line.strip()
        if stripped == BEGIN_SOLUTION:
            if inside:
                raise LabFormatError(f"{where}: nested {BEGIN_SOLUTION}")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# YOUR CODE HERE")
            out.append(f"{indent}raise NotImplementedError({message!r})")
        elif stripped == END_SOLUTION:
            if not inside:
                raise LabFormatError(f"{where}: {END_SOLUTION} without {BEGIN_SOLUTION}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise LabFormatError(f"{where}: {BEGIN_SOLUTION} is never closed")
    return "\n".join(out)


def _target_of(lab_id: str, task: str) -> str:
    try:
        spec = importlib.import_module(f"torchcontracts.labchecks.{lab_id}").lab
        return spec.tasks[task].target
    except (ImportError, AttributeError, KeyError):
        return "the function"


def build_lab(solution: nbformat.NotebookNode, source_name: str) -> nbformat.NotebookNode:
    """Return the student notebook for one solution notebook."""
    lab_id = solution.metadata.get(META, {}).get("lab")
    if not lab_id:
        raise LabFormatError(f"{source_name}: notebook metadata lacks torchcontracts.lab")
    nb = copy.deepcopy(solution)
    kept = []
    seen: set[str] = set()
    for n, cell in enumerate(nb.cells):
        meta = _meta(cell)
        role = meta.get("role")
        where = f"{source_name} cell {n}"
        src = cell.source
        has_hidden = BEGIN_HIDDEN in src
        if has_hidden != (role == "hidden-check"):
            raise LabFormatError(f"{where}: hidden markers and role 'hidden-check' must go together")
        if has_hidden:
            if END_HIDDEN not in src:
                raise LabFormatError(f"{where}: {BEGIN_HIDDEN} is never closed")
            if _IMPORTS_LAB.search(src):
                raise LabFormatError(f"{where}: a hidden-check cell must use the `lab` it is given, not import it")
            continue
        if role == "solution":
            task, cid = meta.get("task"), meta.get("id")
            if not task or not cid:
                raise LabFormatError(f"{where}: a solution cell needs metadata id and task")
            if cid in seen:
                raise LabFormatError(f"{where}: duplicate graded cell id {cid}")
            seen.add(cid)
            if BEGIN_SOLUTION not in src:
                raise LabFormatError(f"{where}: solution cell {cid} has no {BEGIN_SOLUTION}")
            target = _target_of(lab_id, task)
            msg = f"Task {task}: write `{target}` here, then run the check cell below it"
            cell.source = _stub(src, msg, where)
        elif BEGIN_SOLUTION in src:
            raise LabFormatError(f"{where}: solution markers in a cell without role 'solution'")
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        kept.append(cell)
    nb.cells = kept
    nb.metadata[META] = {**nb.metadata.get(META, {}), "generated_from": f"solutions/{source_name}",
                         "note": "generated by `torchcontracts labs build`; do not edit by hand"}
    return nb


def graded_cells(nb: nbformat.NotebookNode) -> dict[str, LabCell]:
    """The graded cells of a lab or solution notebook, by stable id."""
    cells = {}
    for cell in nb.cells:
        meta = _meta(cell)
        if meta.get("role") == "solution" and meta.get("id"):
            cells[meta["id"]] = LabCell(meta["id"], meta.get("task", ""), cell.source)
    return cells


def hidden_check_sources(nb: nbformat.NotebookNode) -> list[str]:
    """Sources of the hidden-check cells of a solution notebook (for the grader)."""
    return [c.source for c in nb.cells if _meta(c).get("role") == "hidden-check"]


def _dump(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb, version=4) + "\n"


def _pairs(root: Path) -> list[tuple[Path, Path]]:
    return [(p, root / "labs" / p.name) for p in sorted((root / "solutions").glob("lab*.ipynb"))]


def build_all(root: Path) -> list[Path]:
    """Write every ``labs/<lab>.ipynb``; return the paths written."""
    written = []
    (root / "labs").mkdir(exist_ok=True)
    for src, dst in _pairs(root):
        text = _dump(build_lab(nbformat.read(src, as_version=4), src.name))
        if not dst.exists() or dst.read_text(encoding="utf-8") != text:
            dst.write_text(text, encoding="utf-8")
            written.append(dst)
    return written


def check_all(root: Path) -> list[str]:
    """Problems that make ``labs/`` out of step with ``solutions/`` (empty when in sync)."""
    if not (root / "solutions").is_dir():
        return []  # a student copy of the course: there is nothing to build labs from
    problems = []
    pairs = _pairs(root)
    expected = {dst.name for _, dst in pairs}
    for src, dst in pairs:
        want = _dump(build_lab(nbformat.read(src, as_version=4), src.name))
        if not dst.exists():
            problems.append(f"labs/{dst.name} is missing")
        elif dst.read_text(encoding="utf-8") != want:
            problems.append(f"labs/{dst.name} is stale")
    for extra in sorted((root / "labs").glob("lab*.ipynb")):
        if extra.name not in expected:
            problems.append(f"labs/{extra.name} has no solution in solutions/")
    return problems

