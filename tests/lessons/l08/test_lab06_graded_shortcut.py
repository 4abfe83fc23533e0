"""Lab 06, graded end to end in bwrap: the reference keeps full marks, and a solution that swaps the export API the
call drivers use (``torch.export``, now on the kernel's watch list) scores 0 on that task, whatever it returns.

The drivers export and save the learner's model inside the learner's kernel; before the watch list held
``torch.export``, a solution cell could replace ``torch.export.export`` or ``ExportedProgram.module`` there and
the driver would run the learner's stand-in. The judging inputs and the artefact runner are covered by
``tests/grading/test_grade_artefacts.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from submissions.graded import grade_bwrap
from torchcontracts.grading.sandbox import bwrap_path
from torchcontracts.labs.build import reference_submission

pytestmark = [
    pytest.mark.slow,  # grades whole submissions
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or bwrap_path() is None, reason="bubblewrap is not installed"
    ),
]

ROOT = Path(__file__).resolve().parents[3]
LAB = "lab06_deployment"
FULL = {"t1": 4.0, "t2": 3.0, "t3": 4.0, "t4": 3.0}

# t1's answer, reached through a replaced torch.export.export: the stand-in exports the honest rewrite, so the only
# thing wrong is the swap itself (a stand-in could as well have exported another model, or none)
SWAP_EXPORT = """
_real_export = torch.export.export


def _export(model, args, *rest, **kw):
    return _real_export(model, args, *rest, **kw)


torch.export.export = _export
"""
# t2's answer with ExportedProgram.module swapped: the driver's "your program on the example" row would run eager code
SWAP_MODULE = """
_eager = {}
torch.export.ExportedProgram.module = lambda self: _eager["model"]
"""


def _submission(task: str | None = None, prefix: str = "") -> nbformat.NotebookNode:
    nb = reference_submission(ROOT, LAB)
    if task:
        (cell,) = [c for c in nb.cells if c.get("metadata", {}).get("torchcontracts", {}).get("task") == task]
        cell.source = prefix + cell.source
    return nb


def _scores(got: dict) -> dict[str, float]:
    return {t["id"]: t["score"] for t in got["tasks"]}


def test_the_reference_keeps_full_marks(tmp_path):
    got = grade_bwrap(tmp_path, _submission(), LAB)
    assert _scores(got) == FULL, got["tasks"]
    assert got["score"] == pytest.approx(14.0)


@pytest.mark.parametrize("task, swap", [("t1", SWAP_EXPORT), ("t2", SWAP_MODULE)])
def test_a_solution_that_swaps_the_export_api_scores_0_on_its_task(tmp_path, task, swap):
    got = grade_bwrap(tmp_path, _submission(task, swap), LAB)
    scores = _scores(got)
    assert scores[task] == 0.0, got["tasks"]
    (row,) = [t for t in got["tasks"] if t["id"] == task]
    assert "tamper" in row["reason"] and "torch.export" in row["reason"], row["reason"]
