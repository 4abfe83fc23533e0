"""labs/ is generated from solutions/: stubs replace answers, hidden checks vanish, stale labs are caught."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from torchcontracts.labs.build import (
    LabFormatError,
    build_all,
    build_lab,
    check_all,
    graded_cells,
    hidden_check_sources,
)

from conftest import ROOT


def _solution() -> nbformat.NotebookNode:
    graded = new_code_cell(
        "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n\nprint(double(3))",
        metadata={"torchcontracts": {"id": "labXX_demo/t1", "role": "solution", "task": "t1"}},
    )
    hidden = new_code_cell(
        "### BEGIN HIDDEN CHECKS\nSECRET_CASES = [7]\n### END HIDDEN CHECKS",
        metadata={"torchcontracts": {"role": "hidden-check", "task": "t1"}},
    )
    return new_notebook(
        cells=[new_markdown_cell("# demo"), graded, new_code_cell("lab.check(double)"), hidden],
        metadata={"torchcontracts": {"lab": "labXX_demo"}},
    )


def test_build_replaces_the_answer_with_a_stub_naming_the_task():
    lab = build_lab(_solution(), "labXX_demo.ipynb")
    src = graded_cells(lab)["labXX_demo/t1"].source
    assert "return 2 * x" not in src and "raise NotImplementedError('Task t1:" in src
    assert src.rstrip().endswith("print(double(3))"), "the demo call after the markers stays"
    with pytest.raises(NotImplementedError):
        exec(src, {})


def test_build_removes_hidden_checks_and_keeps_them_for_the_grader():
    sol = _solution()
    lab = build_lab(sol, "labXX_demo.ipynb")
    assert "SECRET_CASES" not in nbformat.writes(lab)
    assert hidden_check_sources(sol) == ["### BEGIN HIDDEN CHECKS\nSECRET_CASES = [7]\n### END HIDDEN CHECKS"]


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda nb: nb.cells[1].source.replace("### END SOLUTION", ""), "never closed"),
        (lambda nb: nb.cells[1].source.replace("### BEGIN SOLUTION", ""), "BEGIN SOLUTION"),
    ],
)
def test_build_rejects_broken_markers_with_the_cell_named(breakage, message):
    sol = _solution()
    sol.cells[1].source = breakage(sol)
    with pytest.raises(LabFormatError, match=message):
        build_lab(sol, "labXX_demo.ipynb")


def test_build_rejects_hidden_markers_without_the_hidden_role():
    sol = _solution()
    sol.cells[3].metadata = {}
    with pytest.raises(LabFormatError, match="hidden"):
        build_lab(sol, "labXX_demo.ipynb")


def _copy_course(tmp_path: Path) -> Path:
    course = tmp_path / "course"
    for sub in ("solutions", "labs"):
        shutil.copytree(ROOT / sub, course / sub)
    return course


def test_repo_labs_are_in_step_with_solutions():
    assert check_all(ROOT) == [], "run `torchcontracts labs build` and commit labs/"


def test_editing_a_solution_without_rebuilding_makes_labs_check_fail(tmp_path):
    course = _copy_course(tmp_path)
    assert check_all(course) == []
    sol_path = course / "solutions" / "lab01_strides.ipynb"  # a lab of the course manifest
    nb = nbformat.read(sol_path, as_version=4)
    nb.cells[0].source += "\nA new sentence in the solution."
    nbformat.write(nb, sol_path)
    proc = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "labs", "check"],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "labs/lab01_strides.ipynb is stale" in proc.stdout
    build_all(course)
    assert check_all(course) == []


def test_a_manifest_lab_without_its_solution_is_named(tmp_path):
    course = _copy_course(tmp_path)
    (course / "solutions" / "lab07_ddp.ipynb").unlink()
    assert check_all(course) == ["solutions/lab07_ddp.ipynb is missing (the course manifest lists lab07_ddp)"]


def test_labs_check_passes_for_a_student_copy_without_solutions(tmp_path):
    course = _copy_course(tmp_path)
    shutil.rmtree(course / "solutions")
    assert check_all(course) == []


@pytest.mark.parametrize(
    "line",
    [
        "from torchcontracts.labchecks.labXX_demo import lab",  # an old path (the shims still import it)
        "from torchcontracts.lessons.l99_demo.labXX_demo import (helper,\n    lab)",
        "L.lab.add_hidden(check)",
    ],
)
def test_build_rejects_hidden_cells_that_import_lab_instead_of_using_the_one_given(line):
    """Such a cell registers on the module's object, so the grader (which passes its own copy) would miss it."""
    sol = _solution()
    sol.cells[3].source = sol.cells[3].source.replace("SECRET_CASES = [7]", line)
    with pytest.raises(LabFormatError, match="must use the `lab` it is given"):
        build_lab(sol, "labXX_demo.ipynb")


STRAY = (
    "from torchcontracts.checks import Check\n"
    "lab.add_hidden(Check('t2', 't2 stray', lambda seed: [], lambda case, out: [], hidden=True))"
)


@pytest.mark.parametrize(
    "meta, line, message",
    [
        ({"role": "hidden-check"}, "SECRET_CASES = [7]", "needs metadata task"),
        ({"role": "hidden-check", "task": ""}, "SECRET_CASES = [7]", "needs metadata task"),
        ({"role": "hidden-check", "task": "t1"}, STRAY, "for t1 registers checks for t2"),
        ({"role": "hidden-check", "task": "t1"}, "1 / 0", "fails: ZeroDivisionError"),
    ],
    ids=["no-task", "empty-task", "other-task", "broken-cell"],
)
def test_build_rejects_hidden_cells_without_their_task_or_registering_another(meta, line, message):
    """The grader scores hidden checks by task: a cell must say which task it serves, and serve only that one."""
    sol = _solution()
    sol.cells[3].metadata = {"torchcontracts": meta}
    sol.cells[3].source = sol.cells[3].source.replace("SECRET_CASES = [7]", line)
    with pytest.raises(LabFormatError, match=message):
        build_lab(sol, "labXX_demo.ipynb")


def test_build_checks_hidden_cells_of_a_real_lab_against_its_tasks():
    sol = nbformat.read(ROOT / "solutions" / "lab01_strides.ipynb", as_version=4)
    hidden = [c for c in sol.cells if c.metadata.get("torchcontracts", {}).get("role") == "hidden-check"]
    assert [c.metadata["torchcontracts"]["task"] for c in hidden] == ["t1", "t2", "t3", "t4", "t5"]
    hidden[0].metadata["torchcontracts"]["task"] = "t2"
    with pytest.raises(LabFormatError, match="for t2 registers checks for t1"):
        build_lab(sol, "lab01_strides.ipynb")
    hidden[0].metadata["torchcontracts"]["task"] = "t9"
    with pytest.raises(LabFormatError, match="unknown task 't9'"):
        build_lab(sol, "lab01_strides.ipynb")
