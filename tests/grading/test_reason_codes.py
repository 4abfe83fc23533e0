"""Grading speaks in codes: with every human message of the grader replaced by nonsense, the scores do not move.

The grader decides with ``reasons.Reason`` codes and renders ``reasons.TEXT`` last, so no branch can depend
on wording. This grades a few adversarial submissions (one per kind of reason: not implemented, wrong answer,
tampering, timeout, a dead kernel, a missing and a renamed function) with the table scrambled, and asserts
the exact scores the adversarial suite asserts with the real wording.
"""

from __future__ import annotations

import string
from pathlib import Path

import nbformat
import pytest

from submissions.adversarial import CELL_TIMEOUT, LAB, MEM_MB, cases
from torchcontracts.grading import reasons
from torchcontracts.grading.reasons import Reason
from torchcontracts.grading.run import GradeOptions, grade_file

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser

ROOT = Path(__file__).resolve().parents[2]
PICKED = ["correct", "blank", "partial", "tamper_equal", "infinite_loop", "os_exit", "renamed_and_deleted"]
NONSENSE = {code: f"~{code.value[::-1]}~ zorp" for code in Reason}  # no field: parameters are dropped


def test_every_reason_has_wording_and_every_template_renders():
    assert set(reasons.TEXT) == set(Reason)
    for code, template in reasons.TEXT.items():
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f}
        params = {f: 1.5 if f in ("limit", "seconds") else f"<{f}>" for f in fields}
        assert reasons.Why.of(code, **params).text(), code


def test_no_grading_module_compares_the_wording_of_a_reason():
    grading = ROOT / "helpers" / "torchcontracts" / "grading"
    for path in grading.glob("*.py"):
        if path.name == "reasons.py":
            continue
        text = path.read_text(encoding="utf-8")
        for phrase in ("not graded:", "tampering detected", "timed out after", 'NotImplementedError" not in'):
            assert f'startswith("{phrase}' not in text and f'"{phrase}" in' not in text, (path.name, phrase)


@pytest.mark.parametrize("name", PICKED)
def test_scrambled_wording_gives_exactly_the_same_scores(name, tmp_path, monkeypatch):
    monkeypatch.setattr(reasons, "TEXT", NONSENSE)
    nb, expect = cases()[name]
    expect = expect.in_mode("none")
    path = tmp_path / f"{name}.ipynb"
    path.write_text(nbformat.writes(nb) if not isinstance(nb, str) else nb, encoding="utf-8")
    opts = GradeOptions(course=ROOT, lab=LAB, cell_timeout=CELL_TIMEOUT, mem_mb=MEM_MB, seed=4242, sandbox="none")
    got = grade_file(path, opts)
    scores = {t.id: t.score for t in got.tasks}
    assert scores == {t: s for t, (s, _) in expect.tasks.items()}, [(t.id, t.score, t.reason) for t in got.tasks]
    assert got.score == pytest.approx(expect.total) and got.graded
    shown = [t.reason for t in got.tasks] + [c.reason for t in got.tasks for c in t.checks]
    assert all("zorp" in t.reason for t in got.tasks), shown  # every task's reason came from the scrambled table
    if name == "blank":
        assert {t.reason for t in got.tasks} == {NONSENSE[Reason.NOT_IMPLEMENTED]}
