"""Lab 07, graded end to end: the no-accumulation shortcut of t3 (one forward and backward of the concatenated
micro-batches: one all-reduce, the right gradient) scores 0 on t3, and t1's shard swap (the ranks share a folder:
they swap shards through files and compute the whole batch everywhere, every gradient right) scores 0 on t1, each
nothing less elsewhere; the reference keeps full marks.

The whole submission goes through ``torchcontracts grade --sandbox bwrap`` (the learner's kernel, the forked gloo
ranks inside it, the sealer, the hidden checks from ``solutions/``), so the exact scores cover what the unit tests of
``test_lab07_checks.py`` cannot: that the grader's own run of the hidden t3 cases fails the shortcut too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from torchcontracts.grading.sandbox import bwrap_path
from submissions.graded import grade_bwrap
from submissions.lab07_shortcuts import SWAP_SOURCE

from torchcontracts.labs.build import reference_submission

pytestmark = [
    pytest.mark.slow,  # executes notebooks, grades whole submissions or drives a browser
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or bwrap_path() is None, reason="bubblewrap is not installed"
    ),
]

ROOT = Path(__file__).resolve().parents[3]
LAB = "lab07_ddp"
SHORTCUT = """
def accumulate(rank, world_size, ddp_model, micro_batches):
    x = torch.cat([x for x, _ in micro_batches])  # no accumulation: the whole batch at once, one all-reduce
    y = torch.cat([y for _, y in micro_batches])
    F.mse_loss(ddp_model(x), y).backward()
"""


def _swapping() -> nbformat.NotebookNode:
    nb = reference_submission(ROOT, LAB)
    (cell,) = [c for c in nb.cells if c.get("metadata", {}).get("torchcontracts", {}).get("task") == "t1"]
    cell.source = SWAP_SOURCE
    return nb


def test_the_shard_swap_through_files_scores_nothing_on_t1(tmp_path):
    got = grade_bwrap(tmp_path, _swapping(), LAB, "submission.ipynb")
    scored = {t["id"]: (t["score"], t["reason"]) for t in got["tasks"]}
    assert {t: s for t, (s, _) in scored.items()} == {"t1": 0.0, "t2": 3.0, "t3": 3.0}, scored
    (t1,) = [t for t in got["tasks"] if t["id"] == "t1"]
    assert [(c["hidden"], c["ok"]) for c in t1["checks"]] == [(False, False), (True, False)], t1["checks"]
    assert "not a gradient of its own shard" in scored["t1"][1] and "\n" not in scored["t1"][1], scored["t1"]


def _submission(shortcut: bool) -> nbformat.NotebookNode:
    """The reference answers; with ``shortcut``, t3 concatenates its micro-batches instead of accumulating."""
    nb = reference_submission(ROOT, LAB)
    if shortcut:
        (cell,) = [c for c in nb.cells if c.get("metadata", {}).get("torchcontracts", {}).get("task") == "t3"]
        assert "no_sync()" in cell.source
        cell.source = SHORTCUT
    return nb


def _grade(tmp_path: Path, nb: nbformat.NotebookNode) -> dict:
    return grade_bwrap(tmp_path, nb, LAB, "submission.ipynb")


def test_the_concatenation_shortcut_scores_nothing_on_t3(tmp_path):
    got = _grade(tmp_path, _submission(shortcut=True))
    scored = {t["id"]: (t["score"], t["reason"]) for t in got["tasks"]}
    assert {t: s for t, (s, _) in scored.items()} == {"t1": 4.0, "t2": 3.0, "t3": 0.0}, scored
    (t3,) = [t for t in got["tasks"] if t["id"] == "t3"]
    assert [(c["hidden"], c["ok"], c["score"]) for c in t3["checks"]] == [(False, False, 0.0), (True, False, 0.0)]
    assert "the whole batch does not fit: 16 rows in one forward, at most 4" in scored["t3"][1], scored["t3"]
    assert "\n" not in scored["t3"][1]
    assert got["score"] == pytest.approx(7.0)
    assert got["max_score"] == 10


def test_the_reference_keeps_full_marks(tmp_path):
    got = _grade(tmp_path, _submission(shortcut=False))
    assert {t["id"]: t["score"] for t in got["tasks"]} == {"t1": 4.0, "t2": 3.0, "t3": 3.0}, got["tasks"]
    assert got["score"] == pytest.approx(10.0)
