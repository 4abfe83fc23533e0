"""The contract every lab keeps (every ``solutions/lab*.ipynb``), so a new lab cannot skip it.

* the reference solution gets full marks from the grader, and the blank student lab gets 0;
* every task has public and hidden checks, and the hidden ones never reach the student lab;
* no judge crashes on a wrong answer, and no check crashes on a function that raises or returns junk;
* the student lab runs up to its TODOs and prints no expected value (``test_lab_contract_student.py``, a file
  of its own so that the suite's workers can run it beside this one).

Each lab's own wrong answers live in ``test_labNN_checks.py``.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Callable

import pytest
import torch

from conftest import ROOT
from lab_support import _reference_outputs, _spec
from torchcontracts.course import lab_ids

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser

LABS = lab_ids()
NAN = float("nan")


@pytest.fixture(scope="module", params=LABS)
def lab(request) -> str:
    return request.param


# --- grading: the reference gets full marks, the blank lab 0 ----------------------------------------


@pytest.mark.parametrize("which", ["solutions", "labs"])
def test_reference_gets_full_marks_and_the_blank_lab_zero(lab, which):
    from torchcontracts.grading.run import GradeOptions, grade_file

    result = grade_file(ROOT / which / f"{lab}.ipynb", GradeOptions(course=ROOT, lab=lab, cell_timeout=60))
    spec = _spec(lab)
    assert result.max_score == pytest.approx(spec.total_points)
    if which == "solutions":
        assert result.score == pytest.approx(result.max_score), [(t.id, t.reason) for t in result.tasks]
    else:
        assert result.score == 0, [(t.id, t.reason) for t in result.tasks]
        assert all("not implemented" in t.reason for t in result.tasks), [t.reason for t in result.tasks]


def test_every_task_has_public_and_hidden_checks_and_hidden_ones_stay_hidden(lab):
    spec = _spec(lab)
    lab_text = (ROOT / "labs" / f"{lab}.ipynb").read_text(encoding="utf-8")
    for task in spec.tasks:
        checks = spec.checks_for(task)
        assert any(not c.hidden for c in checks), f"{lab} {task} has no public check"
        assert any(c.hidden for c in checks), f"{lab} {task} has no hidden check"
    for c in spec.checks:
        assert c.target == spec.tasks[c.task].target
        if c.hidden:
            assert c.name not in lab_text, f"labs/{lab}.ipynb shows the hidden check {c.name!r}"
            for case in c.cases(0):  # short labels ("k = 1") may be announced by the task text
                assert len(case.label) < 16 or case.label not in lab_text, (
                    f"labs/{lab}.ipynb shows the hidden case {case.label!r}"
                )


def test_cases_are_deterministic_for_a_seed(lab):
    for c in _spec(lab).checks:
        a, b = c.cases(3), c.cases(3)
        assert [x.label for x in a] == [y.label for y in b], c.name
        assert all(_same(x.args, y.args) for x, y in zip(a, b)), c.name


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (tuple, list, dict)):
        if type(a) is not type(b) or len(a) != len(b):
            return False
        pairs = zip(a.values(), b.values()) if isinstance(a, dict) else zip(a, b)
        return (not isinstance(a, dict) or a.keys() == b.keys()) and all(_same(x, y) for x, y in pairs)
    return type(a) is type(b) and a == b


# --- wrong answers never crash a judge or a check ----------------------------------------------------

GENERIC_WRONG = [
    None,
    "a string",
    torch.zeros(7, 3, 2),
    torch.zeros(3, dtype=torch.complex64),
    torch.full((3,), NAN),
    (),
    10**30,
    {"a": 1},
]


def _junk_like(x: Any) -> Any:
    """``x`` with every value made wrong (NaN, or None) but its structure kept: a forged driver result."""
    if isinstance(x, torch.Tensor):
        return torch.full(x.shape, NAN) if x.numel() else torch.zeros(3)
    if isinstance(x, dict):
        return {k: _junk_like(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_junk_like(v) for v in x) if x else (None,)
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return NAN
    return None


def _derived_wrong(ref_out: Any) -> list[Any]:
    out = [_junk_like(ref_out)]
    if isinstance(ref_out, torch.Tensor) and ref_out.numel() > 1:
        out += [ref_out.reshape(-1)[:-1], ref_out.to(torch.complex64)]
    if isinstance(ref_out, dict):
        out += [{k: None for k in ref_out}, {k: "garbage" for k in ref_out}]
    return out


def test_judges_return_failing_rows_on_wrong_outputs_never_raise(lab):
    spec = _spec(lab)
    refs = _reference_outputs(lab, spec.checks)
    for c in spec.checks:
        for n, case in enumerate(c.cases(0)):
            ref_out = refs[(c.name, n)]
            for wrong in GENERIC_WRONG + _derived_wrong(ref_out):
                if _same(wrong, ref_out):
                    continue  # () is the right answer for a 0-dim shape
                try:
                    rows = list(c.judge(case, wrong))
                except Exception as err:  # noqa: BLE001 - the point of the test
                    pytest.fail(
                        f"{lab} {c.name!r} / {case.label}: judge raised {type(err).__name__}: {err} "
                        f"on {type(wrong).__name__} {str(wrong)[:60]}"
                    )
                assert rows and not all(r.ok for r in rows), f"{c.name} / {case.label} passes {str(wrong)[:60]}"


def _raises(*args: Any) -> Any:
    raise RuntimeError("boom")


BROKEN: dict[str, Callable[..., Any]] = {
    "raises": _raises,
    "returns None": lambda *a: None,
    "returns a string": lambda *a: "garbage",
    "returns a NaN tensor": lambda *a: torch.full((2,), NAN, requires_grad=True) * 1,
    "returns a dict": lambda *a: {"x": 1},
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_checks_fail_broken_functions_in_one_line_never_crash(lab, name):
    """Each task fails; a property check alone (gradcheck of a constant) may pass, but nothing crashes."""
    spec = _spec(lab)
    for task in spec.tasks:
        outcomes = []
        for c in spec.checks_for(task):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                outcome = c.run_local(BROKEN[name])
            assert "\n" not in outcome.reason and len(outcome.reason) < 400, outcome.reason
            assert not any("could not be judged" in r.status for r in outcome.rows), (c.name, outcome.reason)
            outcomes.append(outcome)
        assert not all(o.ok for o in outcomes), f"{lab} {task} passes a function that {name}"
