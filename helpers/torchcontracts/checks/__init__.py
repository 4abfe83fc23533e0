"""Checks shared by labs, Try-it exercises and the grader: one definition per check, run in the notebook or by the grader.

The public names live in ``spec`` (``Case``, ``Check``, ``Task``, ``LabSpec``, ``compare``...) and are re-exported
here, so lab and hidden-check cells write ``from torchcontracts.checks import Case, Check, compare``.
"""

from torchcontracts.checks.spec import (
    Case,
    Check,
    CheckOutcome,
    Comparison,
    LabSpec,
    Task,
    compare,
    shares_storage,
    short,
)

__all__ = ["Case", "Check", "CheckOutcome", "Comparison", "LabSpec", "Task", "compare", "shares_storage", "short"]
