"""The run plan: rebuild the graded run of a submission from the course's own cells, and load the lab's checks.

Only the learner's solution cells (matched by their stable metadata id) come from the submission;
every other cell comes from ``labs/<lab>.ipynb``, and hidden checks come from ``solutions/`` only.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import importlib
import re
from pathlib import Path

from torchcontracts.core.nbio import nbformat

from torchcontracts.checks import Check, LabSpec
from torchcontracts.labs.format import ROLE_SOLUTION, CourseCell, cell_meta, course_cells, hidden_check_sources
from torchcontracts.labs.load import module_name
from torchcontracts.grading.submission import GradeSetupError

__all__ = ["Plan", "Step", "lab_spec", "plan_run"]


@dataclasses.dataclass(frozen=True)
class Step:
    """One cell of the graded run: course code, a learner cell, or the driver of a task's checks."""

    kind: str  # "course" | "student" | "driver" (and "hidden": the hidden checks' driver, which steps adds last)
    source: str
    task: str = ""


@dataclasses.dataclass(frozen=True)
class Plan:
    """The graded run of one submission: its cells in order, and the tasks whose cells are missing."""

    lab: str
    steps: tuple[Step, ...]
    missing: frozenset[str]


@functools.lru_cache(maxsize=None)
def _course_lab(root: Path, lab: str) -> tuple[CourseCell, ...]:
    """The course cells of ``labs/<lab>.ipynb``; refused when they are not those of ``solutions/`` (stale)."""
    cells = course_cells(nbformat.read(root / "labs" / f"{lab}.ipynb", as_version=4))
    solution = root / "solutions" / f"{lab}.ipynb"
    if solution.exists() and course_cells(nbformat.read(solution, as_version=4)) != cells:
        raise GradeSetupError(f"labs/{lab}.ipynb is stale: run `torchcontracts labs build` before grading")
    return cells


@functools.lru_cache(maxsize=None)
def _hidden_sources(root: Path, lab: str) -> tuple[str, ...]:
    path = root / "solutions" / f"{lab}.ipynb"
    if not path.exists():
        return ()
    return tuple(hidden_check_sources(nbformat.read(path, as_version=4)))


def lab_spec(root: Path, lab: str, *, public_only: bool = False) -> LabSpec:
    """A fresh copy of the lab's checks, with the hidden ones registered from ``solutions/``."""
    try:
        module = importlib.import_module(module_name(lab))
        base: LabSpec = module.lab
    except KeyError as err:
        raise GradeSetupError(f"no checks for {lab}: {err.args[0]}") from None
    except (ImportError, AttributeError) as err:
        raise GradeSetupError(
            f"no checks for {lab}: {module_name(lab)} with `lab = LabSpec(...)` "
            f"could not be loaded ({type(err).__name__}: {err})"
        ) from None
    spec = copy.copy(base)
    # Hidden checks come from solutions/ only, never from whatever the module object holds now.
    spec.tasks, spec.checks = dict(base.tasks), [c for c in base.checks if not c.hidden]
    if not public_only:
        sources = _hidden_sources(root, lab)
        if not (root / "solutions" / f"{lab}.ipynb").exists():
            raise GradeSetupError(
                f"hidden checks unavailable: grading needs solutions/{lab}.ipynb "
                "(or pass --public-only to grade the public checks only)"
            )
        _register_hidden(spec, sources, lab)
    for check in spec.checks:
        _validate(check, module.__name__, module)
    return spec


def _register_hidden(spec: LabSpec, sources: tuple[str, ...], lab: str) -> None:
    """Exec the hidden-check cells with ``lab`` bound to this grading's copy (never the module's)."""
    for n, src in enumerate(sources):
        namespace = {"lab": spec, "__grading__": True, "__name__": f"hidden_{lab}_{n}"}
        try:
            exec(compile(src, f"<hidden checks {n + 1} of {lab}>", "exec"), namespace)  # noqa: S102
        except Exception as err:  # noqa: BLE001 - a broken course cell, said in one line
            raise GradeSetupError(
                f"solutions/{lab}.ipynb: hidden-check cell {n + 1} failed: {type(err).__name__}: {err}"
            ) from None


def _validate(check: Check, module_name: str, module: object) -> None:
    if check.call is not None and getattr(module, getattr(check.call, "__name__", ""), None) is not check.call:
        raise GradeSetupError(
            f"check {check.name!r}: `call` must be a module-level function of {module_name} "
            "(the grader imports it by name in the learner's kernel)"
        )


def _is_check_cell(source: str) -> bool:
    return bool(re.search(r"\blab\.(check|run)\(", source))


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds at top level, names it reads anywhere); unparsable code reads everything."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(), {"*"}
    binds: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        sub = todo.pop()
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(sub.name)
            continue  # names inside a def or class are not the cell's
        if isinstance(sub, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)):
            continue
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            binds.add(sub.id)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            binds.update((a.asname or a.name).split(".")[0] for a in sub.names)
        todo.extend(ast.iter_child_nodes(sub))
    reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    reads |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return binds, reads


def _needed(steps: list[Step]) -> list[Step]:
    """Drop course cells nothing needs: keep the first, and those that bind a name learner cells
    (or other kept cells) read. Demo and plot cells bind nothing the learner uses, so they are skipped."""
    info = [_names(s.source) for s in steps]
    need: set[str] = set()
    keep = [s.kind != "course" for s in steps]
    first = next((i for i, s in enumerate(steps) if s.kind == "course"), None)
    if first is not None:
        keep[first] = True
    for i, k in enumerate(keep):
        if k:
            need |= info[i][1]
    changed = True
    while changed:
        changed = False
        for i, (binds, reads) in enumerate(info):
            if not keep[i] and ("*" in need or binds & need or "*" in binds):
                keep[i], changed = True, True
                need |= reads
    return [s for s, k in zip(steps, keep) if k]


def plan_run(root: Path, lab: str, nb: nbformat.NotebookNode, tasks: list[str]) -> Plan:
    """Course cells in order, learner cells swapped in by id, a driver after each task's last cell."""
    course = _course_lab(root, lab)
    mine: dict[str, list[str]] = {}
    for cell in nb.cells:
        meta = cell_meta(cell)
        if cell.get("cell_type") == "code" and meta.get("role") == "solution" and isinstance(meta.get("id"), str):
            src = cell.get("source", "")
            mine.setdefault(meta["id"], []).append("".join(src) if isinstance(src, list) else str(src))
    steps: list[Step] = []
    last: dict[str, int] = {}
    present: set[str] = set()
    for cell in course:
        if cell.role == ROLE_SOLUTION:
            for src in mine.get(cell.id, []):
                steps.append(Step("student", src, cell.task))
                present.add(cell.task)
            last[cell.task] = len(steps)
        elif not _is_check_cell(cell.source):
            steps.append(Step("course", cell.source))
    ordered: list[Step] = []
    steps = _needed(steps)
    last = {}
    for n, step in enumerate(steps):
        if step.kind == "student":
            last[step.task] = n + 1
    for n, step in enumerate(steps + [Step("course", "")]):
        for task in tasks:
            if last.get(task, len(steps)) == n and task in present:
                ordered.append(Step("driver", "", task))
        if step.source:
            ordered.append(step)
    return Plan(lab, tuple(ordered), frozenset(t for t in tasks if t not in present))
