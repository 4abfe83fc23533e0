"""Generate the student labs in ``labs/`` from the reference notebooks in ``solutions/``.

The format is defined in ``labformat``; here, solution code becomes a ``raise NotImplementedError(...)``
naming the task, hidden-check cells are removed, outputs and execution counts are stripped, and the
JSON is written deterministically, so ``labs check`` can compare bytes.

Each hidden-check cell is run once here (as the grader runs it, with ``__grading__`` set) to check
that it registers checks for the task its metadata names and no other: the grader scores checks by
task, so a cell that strays would move points silently.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from torchcontracts.core.nbio import nbformat

from torchcontracts.checks import LabSpec
from torchcontracts.course import lab_ids
from torchcontracts.labs.load import load
from torchcontracts.labs.format import (
    BEGIN_HIDDEN,
    BEGIN_SOLUTION,
    END_HIDDEN,
    END_SOLUTION,
    IMPORTS_LAB,
    META,
    ROLE_HIDDEN,
    ROLE_SOLUTION,
    LabCell,
    LabFormatError,
    cell_meta,
    find_root,
    graded_cells,
    hidden_check_sources,
)

__all__ = [
    "LabCell",
    "LabFormatError",
    "build_lab",
    "build_all",
    "check_all",
    "graded_cells",
    "hidden_check_sources",
    "find_root",
    "reference_submission",
]  # LabCell, LabFormatError, graded_cells, hidden_check_sources, find_root: from labs.format


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


def _spec_of(lab_id: str) -> LabSpec | None:
    """A private copy of the lab's public spec (hidden checks registered here never reach the module's)."""
    try:
        base = load(lab_id)
    except (ImportError, AttributeError, KeyError):
        return None
    spec = copy.copy(base)
    spec.tasks, spec.checks = dict(base.tasks), [c for c in base.checks if not c.hidden]
    return spec


def _target_of(spec: LabSpec | None, task: str) -> str:
    return spec.tasks[task].target if spec is not None and task in spec.tasks else "the function"


class _Registrar:
    """Stands in for ``lab`` while a hidden-check cell runs here: it records the tasks the cell registers."""

    def __init__(self, spec: LabSpec | None) -> None:
        self._spec = spec
        self.tasks: list[str] = []

    def add_hidden(self, *checks: Any) -> None:
        self.tasks += [str(getattr(c, "task", "")) for c in checks]
        if self._spec is not None:
            self._spec.add_hidden(*checks)  # unknown task, disagreeing target: ValueError

    def verify_hidden(self, namespace: Any) -> None:
        """The reference is not defined here; the solution notebook verifies it when it runs."""

    def __getattr__(self, name: str) -> Any:
        if self._spec is None:
            raise AttributeError(name)
        return getattr(self._spec, name)


def _check_hidden_cell(src: str, task: Any, spec: LabSpec | None, where: str) -> None:
    """A hidden-check cell names its task in its metadata and registers checks for that task only."""
    if not isinstance(task, str) or not task:
        raise LabFormatError(f"{where}: a hidden-check cell needs metadata task (the task whose checks it registers)")
    if spec is not None and task not in spec.tasks:
        raise LabFormatError(f"{where}: hidden-check cell for unknown task {task!r} (tasks: {', '.join(spec.tasks)})")
    registrar = _Registrar(spec)
    try:
        exec(
            compile(src, f"<{where}>", "exec"),
            {
                "lab": registrar,
                "__grading__": True,  # noqa: S102
                "__name__": "hidden_check_cell",
            },
        )
    except Exception as err:  # noqa: BLE001 - a broken course cell, said in one line
        raise LabFormatError(f"{where}: the hidden-check cell fails: {type(err).__name__}: {err}") from None
    strays = sorted(set(registrar.tasks) - {task})
    if strays:
        raise LabFormatError(
            f"{where}: a hidden-check cell for {task} registers checks for {', '.join(strays)}: "
            "one cell per task, with that task in its metadata"
        )


def build_lab(solution: nbformat.NotebookNode, source_name: str) -> nbformat.NotebookNode:
    """Return the student notebook for one solution notebook."""
    lab_id = solution.metadata.get(META, {}).get("lab")
    if not lab_id:
        raise LabFormatError(f"{source_name}: notebook metadata lacks torchcontracts.lab")
    nb = copy.deepcopy(solution)
    spec = _spec_of(lab_id)
    kept = []
    seen: set[str] = set()
    for n, cell in enumerate(nb.cells):
        meta = cell_meta(cell)
        role = meta.get("role")
        where = f"{source_name} cell {n}"
        src = cell.source
        has_hidden = BEGIN_HIDDEN in src
        if has_hidden != (role == ROLE_HIDDEN):
            raise LabFormatError(f"{where}: hidden markers and role 'hidden-check' must go together")
        if has_hidden:
            if END_HIDDEN not in src:
                raise LabFormatError(f"{where}: {BEGIN_HIDDEN} is never closed")
            if IMPORTS_LAB.search(src):
                raise LabFormatError(f"{where}: a hidden-check cell must use the `lab` it is given, not import it")
            _check_hidden_cell(src, meta.get("task"), spec, where)
            continue
        if role == ROLE_SOLUTION:
            task, cid = meta.get("task"), meta.get("id")
            if not task or not cid:
                raise LabFormatError(f"{where}: a solution cell needs metadata id and task")
            if cid in seen:
                raise LabFormatError(f"{where}: duplicate graded cell id {cid}")
            seen.add(cid)
            if BEGIN_SOLUTION not in src:
                raise LabFormatError(f"{where}: solution cell {cid} has no {BEGIN_SOLUTION}")
            target = _target_of(spec, task)
            msg = f"Task {task}: write `{target}` here, then run the check cell below it"
            cell.source = _stub(src, msg, where)
        elif BEGIN_SOLUTION in src:
            raise LabFormatError(f"{where}: solution markers in a cell without role 'solution'")
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        kept.append(cell)
    nb.cells = kept
    nb.metadata[META] = {
        **nb.metadata.get(META, {}),
        "generated_from": f"solutions/{source_name}",
        "note": "generated by `torchcontracts labs build`; do not edit by hand",
    }
    return nb


def _dump(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb, version=4) + "\n"


def _pairs(root: Path) -> list[tuple[Path, Path]]:
    """(solution, student lab) for every lab of the course manifest."""
    return [(root / "solutions" / f"{lab}.ipynb", root / "labs" / f"{lab}.ipynb") for lab in lab_ids()]


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
    for src, dst in _pairs(root):
        if not src.exists():
            problems.append(f"solutions/{src.name} is missing (the course manifest lists {src.stem})")
            continue
        want = _dump(build_lab(nbformat.read(src, as_version=4), src.name))
        if not dst.exists():
            problems.append(f"labs/{dst.name} is missing")
        elif dst.read_text(encoding="utf-8") != want:
            problems.append(f"labs/{dst.name} is stale")
    return problems


def reference_submission(root: Path, lab: str) -> nbformat.NotebookNode:
    """The student lab with the reference answers in its solution cells: what a perfect learner submits.

    Tests, benchmarks and instructors grade this instead of ``solutions/`` itself (which also holds the
    hidden checks a learner never has).
    """
    answers = {
        cell.id: cell.source
        for cell in graded_cells(nbformat.read(root / "solutions" / f"{lab}.ipynb", as_version=4)).values()
    }
    nb = nbformat.read(root / "labs" / f"{lab}.ipynb", as_version=4)
    for cell in nb.cells:
        cid = cell_meta(cell).get("id")
        if cid in answers:
            cell.source = answers[cid]
    return nb
