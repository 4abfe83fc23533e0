"""The grading package's public face for lab checks: the only grader names a lab's judges may import.

A lab module (``torchcontracts.lessons.*``) judges some answers with the grader's own tools, such as running
an exported artefact in the grading sandbox. It imports them from here, never from a grading module, so the
grader's internals can move without breaking a lab, and a lab cannot reach what is not meant for it.
"""

from __future__ import annotations

from torchcontracts.grading.artefacts import Evaluation, evaluate
from torchcontracts.grading.judge import scrub

__all__ = ["Evaluation", "evaluate", "scrub"]
