"""Ungraded "Try it" exercises at the end of a lesson, with instant feedback from the labs' check machinery.

An exercise is a ``Task`` worth no points plus one or more public ``Check`` objects, exactly the
objects a lab uses, so the FAIL lines read the same ("expected X, got Y"). Nothing here is graded
and nothing is sent anywhere: ``Exercise.check(fn)`` runs the checks in the notebook and prints
one line per check. A stub that still raises ``NotImplementedError`` gets a one-line nudge, never a
traceback, so a lesson runs top to bottom before the learner has tried anything.

Each lesson's exercises live in ``torchcontracts.lessons.lNN_slug.tryit``; their checkers are tested
against a reference answer and against the common wrong answers in ``tests/test_tryit.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from torchcontracts.checks import Check, CheckOutcome, LabSpec, Task

__all__ = ["Exercise", "run_exercise"]


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One "Try it": an id like ``"01.2"``, what to write, the function name, and its public checks.

    ``checks`` are ``Check(task=<this id>, name, cases, judge)``; their ``task`` must equal ``id``.
    """

    id: str
    title: str
    target: str
    checks: tuple[Check, ...]
    hint: str = ""

    def spec(self) -> LabSpec:
        """The exercise as a one-task ``LabSpec`` (0 points), so it reuses the labs' binding rules."""
        return LabSpec(f"try-{self.id}", self.title, [Task(self.id, self.title, 0, self.target)], list(self.checks))

    def run(self, fn: Callable[..., Any], seed: int = 0) -> list[CheckOutcome]:
        """The outcomes of every check on ``fn``, without printing (what the tests call)."""
        spec = self.spec()
        return [c.run_local(fn, seed) for c in spec.checks_for(self.id)]

    def check(self, fn: Callable[..., Any], seed: int = 0) -> bool:
        """Instant feedback in the notebook: one PASS/FAIL line per check; returns True when all pass."""
        return run_exercise(self, fn, seed)


def run_exercise(ex: Exercise, fn: Callable[..., Any], seed: int = 0) -> bool:
    """Print ``Try it <id>: k/n checks pass`` and a line per check; never raises on a learner's bug."""
    if not callable(fn):
        print(f"Try it {ex.id}: pass your function itself (e.g. `{ex.target}`), not {type(fn).__name__}")
        return False
    outcomes = ex.run(fn, seed)
    passed = sum(o.ok for o in outcomes)
    print(f"Try it {ex.id} ({ex.title}): {passed}/{len(outcomes)} checks pass")
    for o in outcomes:
        print(f"  {'PASS' if o.ok else 'FAIL'} {o.check}: {o.reason}")
    if outcomes and passed == len(outcomes):
        print("  Done: this exercise is not graded, so nothing else happens.")
    elif ex.hint and any("not implemented" in o.reason for o in outcomes):
        print(f"  Hint: {ex.hint}")
    return bool(outcomes) and passed == len(outcomes)


def exercises_by_id(items: Sequence[Exercise]) -> dict[str, Exercise]:
    """A lesson module's exercises keyed by id; ValueError when a check names another exercise."""
    found: dict[str, Exercise] = {}
    for ex in items:
        for c in ex.checks:
            if c.task != ex.id:
                raise ValueError(f"exercise {ex.id}: check {c.name!r} names task {c.task!r}")
        if ex.id in found:
            raise ValueError(f"two exercises share the id {ex.id}")
        found[ex.id] = ex
    return found
