"""What both halves of the lab contract test use: a lab's checks as the grader loads them, and the
reference's outputs on each public case. (A support module, not a test file: no test imports another.)"""

from __future__ import annotations

import contextlib
import io
from typing import Any

from conftest import ROOT, solution_functions
from torchcontracts.checks import Check, LabSpec


def _spec(lab: str) -> LabSpec:
    """Public and hidden checks, loaded the way the grader loads them."""
    from torchcontracts.grading.plan import lab_spec

    return lab_spec(ROOT, lab)


def _reference_outputs(lab: str, checks: list[Check]) -> dict[tuple[str, int], Any]:
    """(check name, case index) -> what the reference returns through the check's driver."""
    ref = solution_functions(lab)
    outs = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for c in checks:
            for n, case in enumerate(c.cases(0)):
                outs[(c.name, n)] = c.invoke(ref[c.target], case)
    return outs
