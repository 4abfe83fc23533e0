"""Read a submission safely, tell which lab it is, and rebuild the graded run from the course's own cells.

Only the learner's solution cells (matched by their stable metadata id) come from the submission;
every other cell comes from ``labs/<lab>.ipynb``, and hidden checks come from ``solutions/`` only.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import importlib
import json
import re
from pathlib import Path

import nbformat

from .check import Check, LabSpec
from .labbuild import META, build_lab, hidden_check_sources

__all__ = ["GradeSetupError", "Plan", "Step", "SubmissionError", "course_labs", "identify_lab",
           "lab_spec", "plan_run", "read_submission"]

MAX_BYTES = 50 * 2**20  # a notebook bigger than this is not a lab submission


class SubmissionError(ValueError):
    """This submission cannot be graded; the message is the one-line reason for the gradebook."""


class GradeSetupError(RuntimeError):
    """The course itself is not ready for grading (missing lab, stale labs/, no solutions/)."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One cell of the graded run: course code, a learner cell, or the driver of a task's checks."""

    kind: str  # "course" | "student" | "driver"
    source: str
    task: str = ""


@dataclasses.dataclass(frozen=True)
class Plan:
    """The graded run of one submission: its cells in order, and the tasks whose cells are missing."""

    lab: str
    steps: tuple[Step, ...]
    missing: frozenset[str]


def read_submission(path: Path) -> nbformat.NotebookNode:
    """Load a notebook without trusting it; raise ``SubmissionError`` with a one-line reason."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise SubmissionError(f"cannot read the file: {err.strerror or err}") from None
    if not raw.strip():
        raise SubmissionError("empty file: the submission has no content; download the notebook again from Jupyter")
    if len(raw) > MAX_BYTES:
        raise SubmissionError(f"file too large ({len(raw) / 2**20:.0f} MB): clear the outputs and submit again")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        where = f" (line {err.lineno}, column {err.colno})" if isinstance(err, json.JSONDecodeError) else ""
        raise SubmissionError(f"not a notebook: the file is not valid JSON{where}; "
                              "download the .ipynb again from Jupyter") from None
    if not isinstance(data, dict) or "cells" not in data and "worksheets" not in data:
        raise SubmissionError("not a notebook: the JSON has no cells; submit the .ipynb file Jupyter saved")
    if data.get("nbformat") != 4:
        raise SubmissionError(f"unsupported notebook format nbformat {data.get('nbformat')!r}: "
                              "open it in Jupyter 4+ and save it again (nbformat 4)")
    if not isinstance(data.get("cells"), list) or not data["cells"]:
        raise SubmissionError("empty notebook: it has no cells; submit the lab notebook you worked in")
    try:
        return nbformat.from_dict(data)
    except Exception as err:  # noqa: BLE001 - any odd structure gets one line
        raise SubmissionError(f"not a notebook: {type(err).__name__}") from None


def course_labs(root: Path) -> list[str]:
    """The labs this course can grade: one per ``labs/<lab>.ipynb``."""
    return sorted(p.stem for p in (root / "labs").glob("lab*.ipynb"))


def _cell_meta(cell: dict) -> dict:
    meta = cell.get("metadata", {}).get(META, {})
    return meta if isinstance(meta, dict) else {}


def identify_lab(nb: nbformat.NotebookNode, path: Path, root: Path, expected: str | None = None) -> tuple[str, str]:
    """Return (lab id, note); the note says how the lab was guessed when the metadata lacks it."""
    labs = course_labs(root)
    here = ", ".join(labs) or "none (labs/ is empty)"
    meta = nb.metadata.get(META, {}) if isinstance(nb.metadata.get(META, {}), dict) else {}
    lab, note = meta.get("lab"), ""
    if not isinstance(lab, str) or not lab:
        ids = {str(_cell_meta(c).get("id", "")).split("/")[0] for c in nb.cells} - {""}
        by_name = [x for x in labs if x in path.name or x.split("_")[0] == path.name.split("_")[0]]
        if len(ids) == 1:
            lab, note = ids.pop(), "lab identified from its cell ids (notebook metadata lacks torchcontracts.lab)"
        elif len(by_name) == 1:
            lab, note = by_name[0], "lab guessed from the file name (notebook metadata lacks torchcontracts.lab)"
        else:
            raise SubmissionError("cannot tell which lab this is: no torchcontracts.lab in its metadata and no "
                                  f"lab cells; labs here: {here}")
    if expected and lab != expected:
        raise SubmissionError(f"wrong lab: this is the notebook of {lab}, expected {expected}")
    if lab not in labs:
        raise SubmissionError(f"unknown lab {lab!r}: this course has {here}")
    return lab, note


@functools.lru_cache(maxsize=None)
def _course_lab(root: Path, lab: str) -> nbformat.NotebookNode:
    path = root / "labs" / f"{lab}.ipynb"
    nb = nbformat.read(path, as_version=4)
    solution = root / "solutions" / f"{lab}.ipynb"
    if solution.exists():
        want = build_lab(nbformat.read(solution, as_version=4), solution.name)
        if nbformat.writes(want) != nbformat.writes(nb):
            raise GradeSetupError(f"labs/{lab}.ipynb is stale: run `torchcontracts labs build` before grading")
    return nb


@functools.lru_cache(maxsize=None)
def _hidden_sources(root: Path, lab: str) -> tuple[str, ...]:
    path = root / "solutions" / f"{lab}.ipynb"
    if not path.exists():
        return ()
    return tuple(hidden_check_sources(nbformat.read(path, as_version=4)))


def lab_spec(root: Path, lab: str, *, public_only: bool = False) -> LabSpec:
    """A fresh copy of the lab's checks, with the hidden ones registered from ``solutions/``."""
    try:
        module = importlib.import_module(f"torchcontracts.labchecks.{lab}")
        base: LabSpec = module.lab
    except (ImportError, AttributeError) as err:
        raise GradeSetupError(f"no checks for {lab}: torchcontracts.labchecks.{lab} with `lab = LabSpec(...)` "
                              f"could not be loaded ({type(err).__name__}: {err})") from None
    spec = copy.copy(base)
    # Hidden checks come from solutions/ only, never from whatever the module object holds now.
    spec.tasks, spec.checks = dict(base.tasks), [c for c in base.checks if not c.hidden]
    if not public_only:
        sources = _hidden_sources(root, lab)
        if not (root / "solutions" / f"{lab}.ipynb").exists():
            raise GradeSetupError(f"hidden checks unavailable: grading needs solutions/{lab}.ipynb "
                                  "(or pass --public-only to grade the public checks only)")
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
            raise GradeSetupError(f"solutions/{lab}.ipynb: hidden-check cell {n + 1} failed: "
                                  f"{type(err).__name__}: {err}") from None


def _validate(check: Check, module_name: str, module: object) -> None:
    if check.call is not None and getattr(module, getattr(check.call, "__name__", ""), None) is not check.call:
        raise GradeSetupError(f"check {check.name!r}: `call` must be a module-level function of {module_name} "
                              "(the grader imports it by name in the learner's kernel)")


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
        meta = _cell_meta(cell)
        if cell.get("cell_type") == "code" and meta.get("role") == "solution" and isinstance(meta.get("id"), str):
            src = cell.get("source", "")
            mine.setdefault(meta["id"], []).append("".join(src) if isinstance(src, list) else str(src))
    steps: list[Step] = []
    last: dict[str, int] = {}
    present: set[str] = set()
    for cell in course.cells:
        if cell.cell_type != "code":
            continue
        meta = _cell_meta(cell)
        if meta.get("role") == "solution":
            task = meta.get("task", "")
            for src in mine.get(meta.get("id"), []):
                steps.append(Step("student", src, task))
                present.add(task)
            last[task] = len(steps)
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
