"""The contract every lab keeps (every ``solutions/lab*.ipynb``), so a new lab cannot skip it.

* the reference solution gets full marks from the grader, and the blank student lab gets 0;
* every task has public and hidden checks, and the hidden ones never reach the student lab;
* no judge crashes on a wrong answer, and no check crashes on a function that raises or returns junk;
* the student lab runs up to its TODOs (only NotImplementedError, only in graded cells) and prints
  no expected value of a public case: a learner sees an answer only when a check fails *their* answer.

Each lab's own wrong answers live in ``test_labNN_checks.py``.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from typing import Any, Callable

import pytest
import torch
from nbclient import NotebookClient

from conftest import ROOT, read, solution_functions
from torchcontracts.check import Check, LabSpec
from torchcontracts.labformat import cell_meta
from torchcontracts.ledger import this_python_kernel

LABS = sorted(p.stem for p in (ROOT / "solutions").glob("lab*.ipynb"))
NAN = float("nan")


@pytest.fixture(scope="module", params=LABS)
def lab(request) -> str:
    return request.param


def _spec(lab: str) -> LabSpec:
    """Public and hidden checks, loaded the way the grader loads them."""
    from torchcontracts.grading.plan import lab_spec

    return lab_spec(ROOT, lab)


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
                assert len(case.label) < 16 or case.label not in lab_text, f"labs/{lab}.ipynb shows the hidden case {case.label!r}"


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

GENERIC_WRONG = [None, "a string", torch.zeros(7, 3, 2), torch.zeros(3, dtype=torch.complex64),
                 torch.full((3,), NAN), (), 10**30, {"a": 1}]


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


def _reference_outputs(lab: str, checks: list[Check]) -> dict[tuple[str, int], Any]:
    """(check name, case index) -> what the reference returns through the check's driver."""
    ref = solution_functions(lab)
    outs = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for c in checks:
            for n, case in enumerate(c.cases(0)):
                outs[(c.name, n)] = c.invoke(ref[c.target], case)
    return outs


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
                    pytest.fail(f"{lab} {c.name!r} / {case.label}: judge raised {type(err).__name__}: {err} "
                                f"on {type(wrong).__name__} {str(wrong)[:60]}")
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


# --- the student lab runs to its TODOs and prints no expected value ------------------------------------

def _number_needle(v: float) -> str | None:
    if isinstance(v, int):
        return str(v) if abs(v) > 9 else None
    if not math.isfinite(v):
        return None
    text = f"{v:.4f}"
    return text if len(text.lstrip("-0.").replace(".", "").rstrip("0")) >= 3 else None  # 4 digits of noise, not 0.5


def needles(x: Any) -> set[str]:
    """Text forms in which an expected value could appear in a notebook's output."""
    found: set[str] = set()
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return found
    if isinstance(x, (int, float)):
        needle = _number_needle(x)
        return {needle} if needle else found
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.dtype == torch.bool or t.is_complex() or t.numel() == 0:
            return found
        if t.numel() == 1:
            return needles(t.item())
        return {str(t.tolist()), str(t)} if len(t.unique()) > 1 else found  # [0, 0] is no secret
    if isinstance(x, dict):
        return set().union(*(needles(v) for v in x.values())) if x else found
    if isinstance(x, (tuple, list)):
        if len(set(map(str, x))) > 1 and all(isinstance(v, (int, float, tuple, list)) for v in x):
            found.add(str(x))
        for v in x:  # a small int inside a tuple is too common to look for on its own
            if not isinstance(v, int) or abs(v) >= 1000:
                found |= needles(v)
    return found


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _leaks(needle: str, text: str, squashed: str) -> bool:
    if re.fullmatch(r"-?[\d.]+", needle):  # a bare number: whole numbers only, also written 1,234,567
        grouped = f"{int(needle):,}" if needle.lstrip("-").isdigit() else needle
        return any(re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", text) for n in {needle, grouped})
    return _squash(needle) in squashed


def _outputs_text(cell: Any) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            parts.append(o.text)
        elif o.output_type in ("execute_result", "display_data"):
            parts += [str(o.data.get(k, "")) for k in ("text/plain", "text/html", "text/markdown")]
        elif o.output_type == "error":
            parts.append(f"{o.ename}: {o.evalue}")  # the traceback only repeats the cell's own code
    return "\n".join(parts)


@pytest.fixture(scope="module")
def executed(lab, tmp_path_factory) -> Any:
    from jupyter_core.utils import run_sync

    nb = read(ROOT / "labs" / f"{lab}.ipynb")
    km = this_python_kernel()
    try:
        NotebookClient(nb, timeout=300, km=km, allow_errors=True,
                       resources={"metadata": {"path": str(tmp_path_factory.mktemp(lab))}}).execute()
    finally:  # nbclient stops only a kernel manager it made itself
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    return nb


def test_student_lab_runs_to_its_todos_only(lab, executed):
    graded = 0
    for n, cell in enumerate(executed.cells):
        if cell.cell_type != "code":
            continue
        errors = [o.ename for o in cell.outputs if o.output_type == "error"]
        if cell_meta(cell).get("role") == "solution":
            graded += 1
            assert errors == ["NotImplementedError"], f"{lab} cell {n}: a TODO cell must raise NotImplementedError"
        else:
            assert not errors, f"{lab} cell {n} failed: {errors}"
    assert graded >= 3, f"{lab}: a lab needs at least 3 graded cells, found {graded}"


def test_student_lab_prints_no_expected_value(lab, executed):
    spec = _spec(lab)
    public = [c for c in spec.checks if not c.hidden]
    refs = _reference_outputs(lab, public)
    source = _squash("\n".join(c.source for c in executed.cells))
    secrets: dict[str, str] = {}
    for c in public:
        for n, case in enumerate(c.cases(0)):
            given = needles(case.args) | {case.label}  # what the case itself shows is no secret
            for needle in needles(refs[(c.name, n)]) - given:
                if _squash(needle) not in source:  # nor is what the lab's own text says
                    secrets[needle] = f"{c.name} / {case.label}"
    assert secrets, f"{lab}: no expected values to look for; the needle maker misses this lab's answers"
    for n, cell in enumerate(executed.cells):
        text = _outputs_text(cell)
        squashed = _squash(text)
        leaked = [(needle[:60], where) for needle, where in secrets.items() if _leaks(needle, text, squashed)]
        assert not leaked, f"labs/{lab}.ipynb cell {n} prints expected values: {leaked}"
