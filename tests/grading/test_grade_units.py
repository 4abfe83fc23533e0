"""Grader pieces without a kernel: the rebuild ignores everything but solution cells, outputs load safely,
hidden checks stay in solutions/; plus a few in-process gradings (fresh kernel, driver tampering, total time)."""

from __future__ import annotations

import math
import os
import pickle
import shutil
from pathlib import Path

import nbformat
import pytest
import torch

from submissions.adversarial import LAB, TASKS, notebook
from torchcontracts.checks import Case, Check, compare
from torchcontracts.grading.run import GradeOptions, grade_file
from torchcontracts.grading.judge import judge_check, same_inputs
from torchcontracts.grading.plan import lab_spec, plan_run
from torchcontracts.grading.submission import identify_lab

from conftest import lab_paths

ROOT = Path(__file__).resolve().parents[2]


def test_same_inputs_sees_values_layout_and_nan():
    x = torch.tensor([1.0, math.nan, 3.0])
    assert same_inputs([x, 2, "a"], [x.clone(), 2, "a"])
    assert not same_inputs([x], [torch.tensor([1.0, math.nan, 4.0])])
    base = torch.arange(12.0)
    assert not same_inputs([base[2:6]], [base[2:6].clone()])  # offset differs
    assert not same_inputs([base.reshape(3, 4).t()], [base.reshape(3, 4).t().contiguous()])  # strides differ
    assert not same_inputs([(2, 3)], [(2, 4)]) and not same_inputs([1], [1.0])


def _plan(nb):
    return plan_run(ROOT, LAB, nb, TASKS)


def test_edited_moved_and_deleted_check_cells_make_no_difference_to_the_run():
    reference = _plan(notebook())

    def scramble(nb):
        code = [c for c in nb.cells if c.cell_type == "code"]
        for c in code:
            if "lab.check(" in c.source:
                c.source = "print('all checks pass')"
        nb.cells = list(reversed(nb.cells))  # every cell moved, solution cells included
        nb.cells.insert(0, nbformat.v4.new_code_cell("lab.checks.clear()\nimport torch\ntorch.equal = None"))

    def delete(nb):
        nb.cells = [c for c in nb.cells if c.get("metadata", {}).get("torchcontracts", {}).get("role") == "solution"]

    assert _plan(notebook(edit=scramble)) == reference
    assert _plan(notebook(edit=delete)) == reference
    assert all(step.kind != "course" or "lab.check(" not in step.source for step in reference.steps)


def test_a_deleted_solution_cell_marks_its_task_missing_and_runs_no_driver():
    plan = _plan(notebook({"t3": None}))
    assert plan.missing == {"t3"}
    assert [s.task for s in plan.steps if s.kind == "driver"] == ["t1", "t2", "t4", "t5"]


def test_lab_is_guessed_from_the_file_name_when_metadata_and_ids_are_gone(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    path = tmp_path / f"{LAB}_alice.ipynb"
    assert identify_lab(nb, path, ROOT) == (
        LAB,
        "lab guessed from the file name (notebook metadata lacks torchcontracts.lab)",
    )


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/tc-grade-pwned",))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _check() -> Check:
    return Check(
        "t5",
        "t5 demo",
        "diagonal_view",
        lambda seed: [Case("4x4", (torch.arange(16.0).reshape(4, 4),))],
        lambda case, out: [compare("diagonal", out, torch.diagonal(case.args[0]), view_of=case.args[0])],
    )


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_saved_answers_load_with_weights_only_and_never_run_code(tmp_path):
    check = _check()
    cases = check.cases(0)
    x = cases[0].args[0].clone()
    torch.save({"args": (x,), "out": x.diagonal()}, tmp_path / "0-0.pt")
    assert judge_check(check, 0, cases, _files(tmp_path), 2048).ok
    torch.save({"args": (x,), "out": x.diagonal().clone()}, tmp_path / "0-0.pt")
    assert judge_check(check, 0, cases, _files(tmp_path), 2048).reason.endswith(
        "values right, but it is a copy: return a view of the input"
    )
    Path("/tmp/tc-grade-pwned").unlink(missing_ok=True)
    with open(tmp_path / "0-0.pt", "wb") as fh:
        pickle.dump({"args": (x,), "out": Evil()}, fh)
    got = judge_check(check, 0, cases, _files(tmp_path), 2048)
    assert not got.ok and got.reason == (
        "4x4: the answer cannot be loaded safely: return tensors, numbers, tuples, lists, dicts or strings"
    )
    assert not Path("/tmp/tc-grade-pwned").exists()


def test_hidden_checks_live_only_in_solutions(tmp_path):
    spec = lab_spec(ROOT, LAB)
    hidden = [c for c in spec.checks if c.hidden]
    assert hidden
    words = {c.name for c in hidden} | {c.cases.__name__ for c in hidden} | {c.judge.__name__ for c in hidden}
    lab_text = "\n".join(p.read_text() for p in lab_paths())
    assert "BEGIN HIDDEN" not in lab_text
    package = Path(__import__("torchcontracts").__file__).parent
    for path in package.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".csv", ".json", ".txt"):
            text = path.read_text(errors="ignore")
            if (
                path.relative_to(package).as_posix() != "labs/format.py"
            ):  # the lab format defines the marker the builder strips
                assert "BEGIN HIDDEN" not in text, path
            for word in words:
                assert word not in text and word not in lab_text, (word, path)
    public = lab_spec(ROOT, LAB, public_only=True)
    assert not any(c.hidden for c in public.checks)
    assert not any(c.hidden for c in __import__("torchcontracts.labs.load", fromlist=["load"]).load(LAB).checks)


def _opts(root: Path = ROOT, **kw) -> GradeOptions:
    return GradeOptions(course=root, cell_timeout=kw.pop("cell_timeout", 10.0), mem_mb=2048, seed=7, **kw)


def _write(tmp_path: Path, nb, name: str = "sub.ipynb") -> Path:
    path = tmp_path / name
    path.write_text(nbformat.writes(nb))
    return path


FRESH_CELL = """### BEGIN HIDDEN CHECKS
import torch
from torchcontracts.checks import Case, Check
from torchcontracts.lessons.l01_tensors.lab01_strides import compare_value


def fresh_cases(seed):
    return [Case("shape (3, 5)", ((3, 5),))]


def fresh_judge(case, out):
    return [compare_value("strides", out, tuple(torch.empty(case.args[0]).stride()))]


lab.add_hidden(Check("t1", "t1 fresh-kernel probe", "contiguous_strides", fresh_cases, fresh_judge,
                     hidden=True, fresh_kernel=True))
lab.verify_hidden(globals())
### END HIDDEN CHECKS"""


def test_fresh_kernel_checks_run_in_their_own_kernel_after_the_labchecks_import(tmp_path, monkeypatch):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "labs", course / "labs")
    (course / "solutions").mkdir()
    sol = nbformat.read(ROOT / "solutions" / f"{LAB}.ipynb", as_version=4)
    cell = nbformat.v4.new_code_cell(FRESH_CELL, metadata={"torchcontracts": {"role": "hidden-check", "task": "t1"}})
    sol.cells.append(cell)
    nbformat.write(sol, course / "solutions" / f"{LAB}.ipynb")
    import torchcontracts.grading.steps as core

    runs: list[list[str]] = []
    real = core.GradingKernel

    class Recorder(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            runs.append([])

        def run(self, code, timeout, seal=None):
            runs[-1].append(code)
            return super().run(code, timeout, seal)

    monkeypatch.setattr(core, "GradingKernel", Recorder)
    result = grade_file(_write(tmp_path, notebook()), _opts(course))
    assert (result.score, result.problems) == (12, [])  # 3 checks of 2 points: no rounding drift
    t1 = next(t for t in result.tasks if t.id == "t1")
    assert [c.name for c in t1.checks][-2:] == ["hidden check 1 of t1", "hidden check 2 of t1"]
    assert all(c.ok for c in t1.checks) and t1.reason == f"all {len(t1.checks)} checks pass"
    assert len(runs) == 2
    fresh = runs[1]
    assert "grading.driver', fromlist=['_']).start(" in fresh[0] and "lab01_strides" in fresh[0]
    assert sum(").drive(" in code for code in fresh) == 1  # only the fresh check's task


@pytest.mark.parametrize(
    "patch, reason",
    [
        (
            "import torchcontracts.grading.driver as g\ng.drive = lambda spec: None",
            "tampering detected: the grader's sealed answers were disturbed",
        ),
        (
            "import sys, types\nsys.modules['torchcontracts.checks'] = types.ModuleType('torchcontracts.checks')",
            "tampering detected: torchcontracts.checks module replaced",
        ),
    ],
    ids=["driver", "sys.modules"],
)
def test_replacing_the_grader_driver_or_a_course_module_is_tampering(tmp_path, patch, reason):
    src = notebook().cells
    sol = next(c.source for c in src if c.get("metadata", {}).get("torchcontracts", {}).get("task") == "t1")
    result = grade_file(_write(tmp_path, notebook({"t1": sol + "\n" + patch})), _opts())
    assert result.score == 0
    assert {t.reason for t in result.tasks} == {reason}


def test_total_time_limit_stops_the_run_with_a_reason(tmp_path):
    loop = "def contiguous_strides(shape):\n    while True:\n        pass\n\ncontiguous_strides((2, 3))"
    result = grade_file(_write(tmp_path, notebook({"t1": loop})), _opts(total_timeout=4.0, cell_timeout=30.0))
    assert result.score == 0
    assert {t.reason for t in result.tasks} == {"not graded: the total time limit of 4 s ran out"}


def test_a_learner_raising_keyboardinterrupt_fails_its_task_only(tmp_path):
    bad = "def contiguous_strides(shape):\n    raise KeyboardInterrupt\n"
    result = grade_file(_write(tmp_path, notebook({"t1": bad})), _opts())
    assert result.problems == [] and result.score == 10
    t1 = result.tasks[0]
    assert (t1.score, t1.reason) == (0, "`contiguous_strides` raised KeyboardInterrupt (case: shape (2, 3, 4))")
    assert t1.checks[-1].reason == "failed (raised KeyboardInterrupt)"  # hidden: the type, never the text


def test_without_the_fork_server_kernels_launch_plainly_and_deaths_are_still_named(tmp_path):
    segv = notebook()
    for cell in segv.cells:
        if cell.get("metadata", {}).get("torchcontracts", {}).get("task") == "t5":
            cell.source += "\nimport ctypes\nctypes.string_at(0)"
    result = grade_file(_write(tmp_path, segv), _opts(fork_server=False))
    died = "not graded: the kernel died (segmentation fault, SIGSEGV) in the t5 cell"
    assert [(t.id, t.score, t.reason) for t in result.tasks][3:] == [
        ("t4", 3, f"all {len(result.tasks[3].checks)} checks pass"),
        ("t5", 0, died),
    ]
    assert result.score == 10 and result.problems == [died]


def test_a_pathologically_nested_file_is_just_not_a_notebook(tmp_path):
    from torchcontracts.grading.submission import SubmissionError, read_submission

    path = tmp_path / "deep.ipynb"
    path.write_text("[" * 200_000)
    with pytest.raises(SubmissionError, match=r"^not a notebook: the file is not valid JSON"):
        read_submission(path)
