"""The lab contract, student side: every ``labs/lab*.ipynb`` runs up to its TODOs (only NotImplementedError, only
in graded cells) and prints no expected value of a public case: a learner sees an answer only when a check fails
*their* answer. The grading side of the contract is in ``test_lab_contract.py``.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
from nbclient import NotebookClient

from conftest import ROOT, read
from lab_support import _reference_outputs, _spec
from torchcontracts.course import lab_ids
from torchcontracts.labs.format import cell_meta
from torchcontracts.publish.ledger import this_python_kernel

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser


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


@pytest.fixture(scope="module", params=lab_ids())
def lab(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def executed(lab, tmp_path_factory) -> Any:
    from jupyter_core.utils import run_sync

    nb = read(ROOT / "labs" / f"{lab}.ipynb")
    km = this_python_kernel()
    try:
        NotebookClient(
            nb,
            timeout=300,
            km=km,
            allow_errors=True,
            resources={"metadata": {"path": str(tmp_path_factory.mktemp(lab))}},
        ).execute()
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
