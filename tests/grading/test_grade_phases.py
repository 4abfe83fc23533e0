"""Checks of several calls (``Check.then``): the grader runs each later call in a new kernel of a new sandbox.

A hidden check is added to lab 01's t1: ``contiguous_strides`` on (7, 11), then on (2, 13) as a second call.
The submission answers the second call right only where the first call left a trace (a module-level set, a file
in /tmp or in the working folder): a control check with both shapes as two cases of one call passes (one
kernel), the two-call check fails, because its second call finds none of those traces.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from submissions.adversarial import LAB, notebook
from torchcontracts.checks import Case, Check
from torchcontracts.grading.run import GradeOptions, grade_file
from torchcontracts.grading.sandbox import bwrap_path

pytestmark = [
    pytest.mark.slow,  # grades whole submissions
    pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]

PHASED_CELL = """### BEGIN HIDDEN CHECKS
import torch
from torchcontracts.checks import Case, Check


def _one_case(seed):
    return [Case("(7, 11), then (2, 13)", ((7, 11),))]


def _both_cases(seed):
    return [Case("(7, 11)", ((7, 11),)), Case("(2, 13)", ((2, 13),))]


def _then(case, answers):
    return Case(case.label, ((2, 13),)) if len(answers) == 1 else None


def _strides(shape):
    return tuple(torch.empty(shape).stride())


def _judge_calls(case, out):
    ok = isinstance(out, list) and [tuple(a) for a in out] == [_strides((7, 11)), _strides((2, 13))]
    return [Comparison.plain("both calls", ok, "right" if ok else "wrong", got=str(out)[:80])]


def _judge_one(case, out):
    ok = tuple(out) == _strides(case.args[0])
    return [Comparison.plain("strides", ok, "right" if ok else "wrong")]


from torchcontracts.checks import Comparison

lab.add_hidden(Check("t1", "t1 control: both shapes in one kernel", _both_cases, _judge_one, hidden=True))
lab.add_hidden(Check("t1", "t1 two calls", _one_case, _judge_calls, hidden=True, then=_then))
### END HIDDEN CHECKS"""

TRACE_KEEPER = '''import os

_SEEN = set()


def contiguous_strides(shape):
    """Right, except that (2, 13) is answered right only where a call on (7, 11) left a trace."""
    shape = tuple(shape)
    traces = [os.path.join(d, "tc-phases-seen") for d in ("/tmp", os.getcwd())]
    if shape == (7, 11):
        _SEEN.add(shape)
        for path in traces:
            open(path, "w").close()
            os.chmod(path, 0o666)
    if shape == (2, 13) and not (_SEEN or any(os.path.exists(p) for p in traces)):
        return (0, 0)
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))
'''


def _course(tmp_path: Path) -> Path:
    course = tmp_path / "course"
    shutil.copytree(ROOT / "labs", course / "labs")
    (course / "solutions").mkdir()
    sol = nbformat.read(ROOT / "solutions" / f"{LAB}.ipynb", as_version=4)
    cell = nbformat.v4.new_code_cell(PHASED_CELL, metadata={"torchcontracts": {"role": "hidden-check", "task": "t1"}})
    sol.cells.append(cell)
    nbformat.write(sol, course / "solutions" / f"{LAB}.ipynb")
    return course


def test_a_later_call_runs_in_a_new_sandbox_that_the_first_call_left_nothing_in(tmp_path, monkeypatch):
    import torchcontracts.grading.steps as steps

    kernels: list[tuple[str, bool]] = []  # (kernel folder, fresh_sandbox) of each kernel started
    real = steps.GradingKernel

    class Recorder(real):  # type: ignore[misc, valid-type]
        def __init__(self, workdir, **k):
            kernels.append((workdir.name, bool(k.get("fresh_sandbox"))))
            super().__init__(workdir, **k)

    monkeypatch.setattr(steps, "GradingKernel", Recorder)
    course = _course(tmp_path)
    sub = tmp_path / "sub.ipynb"
    sub.write_text(nbformat.writes(notebook({"t1": TRACE_KEEPER})))
    opts = GradeOptions(course=course, cell_timeout=30.0, mem_mb=2048, seed=7, sandbox="bwrap")
    result = grade_file(sub, opts)
    t1 = next(t for t in result.tasks if t.id == "t1")
    hidden = [(c.name, c.ok) for c in t1.checks if c.hidden]
    assert hidden[-2:] == [(hidden[-2][0], True), (hidden[-1][0], False)], t1.checks  # control passes; two calls fail
    assert all(c.ok for c in t1.checks if not c.hidden), t1.checks
    assert result.problems == [], result.problems
    assert kernels == [("k-main", False), ("k-main-round2", True)], kernels


def test_the_later_calls_answers_reach_the_judge_as_a_list(tmp_path):
    """The reference answer passes the two-call check: the judge gets [first answer, second answer]."""
    course = _course(tmp_path)
    sub = tmp_path / "sub.ipynb"
    sub.write_text(nbformat.writes(notebook()))
    opts = GradeOptions(course=course, cell_timeout=30.0, mem_mb=2048, seed=7, sandbox="bwrap")
    result = grade_file(sub, opts)
    t1 = next(t for t in result.tasks if t.id == "t1")
    assert all(c.ok for c in t1.checks), [(c.name, c.reason) for c in t1.checks if not c.ok]


def test_then_runs_every_call_here_in_the_notebook():
    """``run_local`` chains the calls in this process and judges the list of answers."""
    calls: list[tuple[int, ...]] = []

    def fn(shape):
        calls.append(shape)
        return shape

    check = Check(
        "t1",
        "two calls",
        lambda seed: [Case("c", ((1, 2),))],
        lambda case, out: [__import__("torchcontracts").checks.Comparison.plain("n", out == [(1, 2), (3,)], "")],
        then=lambda case, answers: Case("c", ((3,),)) if len(answers) == 1 else None,
    )
    assert check.run_local(fn).ok and calls == [(1, 2), (3,)]
