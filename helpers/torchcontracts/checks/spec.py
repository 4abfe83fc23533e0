"""Instant feedback for labs: one definition per check, run here in the notebook or by the grader.

A lab's checks are plain data (``Check``): a deterministic input generator and a judge.
The notebook runs them in-process for instant feedback (``LabSpec.check``); the grader
runs the *same* objects, but calls the student's function in the student's kernel and
judges the saved outputs in its own, untouched process.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence


from torchcontracts.checks.comparison import Comparison, compare, shares_storage, short

__all__ = ["Case", "Check", "CheckOutcome", "Comparison", "LabSpec", "Task", "compare", "shares_storage", "short"]

Args = tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class Case:
    """One call of the learner's function: ``fn(*args)``. ``label`` says what is special."""

    label: str
    args: Args


@dataclasses.dataclass(frozen=True)
class CheckOutcome:
    """The result of one check: pass/fail, a one-line reason, and the feedback rows."""

    check: str
    task: str
    ok: bool
    reason: str
    rows: tuple[Comparison, ...] = ()


Judge = Callable[[Case, Any], Sequence[Comparison]]


_CHECK_ARGS = ("cases", "judge", "hidden", "call", "fresh_kernel", "then")


@dataclasses.dataclass(frozen=True, init=False)
class Check:
    """A check of one learner function on generated inputs.

    ``cases(seed)`` must be deterministic for a seed, build inputs with plain torch,
    and return only tensors, numbers, tuples, lists, dicts and strings, so the grader
    can ship them with ``torch.save`` and load them with ``weights_only=True``.
    ``judge(case, output)`` compares one output and returns feedback rows; it runs in
    the grader's own process, so it must not call the learner's code.

    ``call(fn, case)`` says how to call the learner's function when ``fn(*case.args)`` is
    not enough (e.g. run backward and return the gradients too). It runs next to the
    learner's code, so it must be a module-level function of the lab's ``labchecks``
    module: the grader imports it by name in the learner's kernel. ``fresh_kernel=True``
    marks checks that measure inside a process (memory, time): the grader runs them in a
    new kernel that imports the labchecks module before any learner code runs.

    ``then(case, answers)`` makes a check of several calls, each in a process that never ran the
    others (say, a run that writes a checkpoint, then its resume): given the original case and the
    answers so far, it returns the case of the next call, or None when there is none. The grader
    runs each next call in a new kernel of a new sandbox, so only what the answers carry (plain
    data, sealed as bytes) reaches it; here in the notebook they all run in this process. The judge
    then gets the original case and the list of answers.

    ``target`` (the function's name) comes from the task: ``LabSpec`` fills it in when it
    registers the check, so a check cannot name one task and call another task's function.
    Write ``Check(task, name, cases, judge, ...)``; the older ``Check(task, name, target,
    cases, judge, ...)`` is still accepted, and ``LabSpec`` rejects a target its task disowns.
    """

    task: str
    name: str
    cases: Callable[[int], list[Case]]
    judge: Judge
    hidden: bool = False
    call: Callable[[Callable[..., Any], Case], Any] | None = None
    fresh_kernel: bool = False
    then: Callable[[Case, list[Any]], Case | None] | None = None
    target: str = ""  # filled in from the task by LabSpec

    def __init__(self, task: str, name: str, *args: Any, target: str = "", **fields: Any) -> None:
        if args and isinstance(args[0], str):  # the older spelling: Check(task, name, target, cases, judge, ...)
            target, args = args[0], args[1:]
        positional = dict(zip(_CHECK_ARGS, args))
        bad = (set(fields) - set(_CHECK_ARGS)) | (set(positional) & set(fields))
        if len(args) > len(_CHECK_ARGS) or bad:
            raise TypeError(f"Check {name!r}: unexpected or repeated arguments {sorted(bad) or args}")
        values = {"hidden": False, "call": None, "fresh_kernel": False, "then": None, **positional, **fields}
        if not (callable(values.get("cases")) and callable(values.get("judge"))):
            raise TypeError(f"Check {name!r}: cases and judge must be functions")
        for key, value in {"task": task, "name": name, **values, "target": target}.items():
            object.__setattr__(self, key, value)

    def invoke(self, fn: Callable[..., Any], case: Case) -> Any:
        """Call the learner's function on one case, the way this check needs."""
        return self.call(fn, case) if self.call is not None else fn(*case.args)

    def invoke_all(self, fn: Callable[..., Any], case: Case) -> Any:
        """``invoke``, and with ``then`` every later call too, here in this process: the list of answers."""
        out = self.invoke(fn, case)
        if self.then is None:
            return out
        outs = [out]
        while (follow := self.then(case, list(outs))) is not None:
            outs.append(self.invoke(fn, follow))
        return outs

    def run_local(self, fn: Callable[..., Any], seed: int = 0) -> CheckOutcome:
        """Call ``fn`` here and judge it: the notebook's instant feedback."""
        rows: list[Comparison] = []
        target = self.target or "your function"
        for case in self.cases(seed):
            try:
                out = self.invoke_all(fn, case)
            except NotImplementedError:
                return CheckOutcome(
                    self.name,
                    self.task,
                    False,
                    f"`{target}` is not implemented yet: replace the `raise NotImplementedError`",
                )
            except Exception as err:  # the learner's bug, reported in one line
                return CheckOutcome(
                    self.name,
                    self.task,
                    False,
                    f"`{target}` raised {type(err).__name__}: {str(err)[:160]} (case: {case.label})",
                )
            rows.extend(_safe_judge(self.judge, case, out))
        return outcome_from_rows(self, rows)


def _safe_judge(judge: Judge, case: Case, out: Any) -> list[Comparison]:
    try:
        rows = list(judge(case, out))
    except Exception as err:  # a judge must never crash on an odd answer
        rows = [
            Comparison.plain(case.label, False, f"answer could not be judged: {type(err).__name__}: {str(err)[:120]}")
        ]
    return [dataclasses.replace(r, name=f"{case.label}: {r.name}" if r.name else case.label) for r in rows]


def outcome_from_rows(check: Check, rows: Sequence[Comparison]) -> CheckOutcome:
    """Fold feedback rows into one outcome whose reason names the first failure."""
    bad = [r for r in rows if not r.ok]
    if not rows:
        return CheckOutcome(check.name, check.task, False, "no output was judged", ())
    if not bad:
        reason = "all cases pass"
    else:
        detail = bad[0].detail()
        reason = f"{bad[0].name}: {bad[0].status}" + (f": {detail}" if detail else "")
    return CheckOutcome(check.name, check.task, not bad, reason, tuple(rows))


@dataclasses.dataclass(frozen=True)
class Task:
    """A graded task of a lab: its id (``t1``), title, points and the function it asks for."""

    id: str
    title: str
    points: float
    target: str


class LabSpec:
    """The tasks and public checks of one lab; hidden checks are added from the solutions.

    Every check is bound to its task here: its ``target`` is the task's, and a check that
    names an unknown task, or a target its task does not ask for, is a ``ValueError``.
    """

    def __init__(self, lab_id: str, title: str, tasks: Sequence[Task], checks: Sequence[Check]):
        self.lab_id = lab_id
        self.title = title
        self.tasks: dict[str, Task] = {t.id: t for t in tasks}
        if len(self.tasks) != len(tasks):
            raise ValueError(f"{lab_id}: two tasks share an id")
        self.checks: list[Check] = [self.bind(c) for c in checks]

    def bind(self, check: Check) -> Check:
        """``check`` with its target taken from its task; ValueError when the pair disagrees."""
        task = self.tasks.get(check.task)
        if task is None:
            raise ValueError(
                f"{self.lab_id}: check {check.name!r} names unknown task {check.task!r} "
                f"(tasks: {', '.join(self.tasks) or 'none'})"
            )
        if check.target and check.target != task.target:
            raise ValueError(
                f"{self.lab_id}: check {check.name!r} targets `{check.target}`, but task "
                f"{task.id} asks for `{task.target}`: drop target, the task gives it"
            )
        return check if check.target == task.target else dataclasses.replace(check, target=task.target)

    @property
    def total_points(self) -> float:
        return sum(t.points for t in self.tasks.values())

    def checks_for(self, task: str, *, hidden: bool | None = None) -> list[Check]:
        """The checks of one task (public, hidden or both), in registration order."""
        return [c for c in self.checks if c.task == task and (hidden is None or c.hidden == hidden)]

    def task_for(self, fn_or_name: Callable[..., Any] | str) -> Task:
        name = fn_or_name if isinstance(fn_or_name, str) else getattr(fn_or_name, "__name__", "")
        for task in self.tasks.values():
            if task.target == name or task.id == name:
                return task
        raise KeyError(
            f"{self.lab_id} has no task for `{name}`; tasks ask for: "
            + ", ".join(t.target for t in self.tasks.values())
        )

    def add_hidden(self, *checks: Check) -> None:
        """Register hidden checks (called from the solution notebook's hidden cells)."""
        for c in checks:
            if not c.hidden:
                raise ValueError(f"{c.name}: a check added with add_hidden must have hidden=True")
            c = self.bind(c)
            self.checks = [old for old in self.checks if old.name != c.name] + [c]

    def run(self, fn: Callable[..., Any], *, hidden: bool = False, seed: int = 0) -> list[CheckOutcome]:
        """Run the public (or, with ``hidden=True``, the hidden) checks of ``fn``'s task."""
        task = self.task_for(fn)
        return [c.run_local(fn, seed) for c in self.checks_for(task.id, hidden=hidden)]

    def check(self, fn: Callable[..., Any], *, seed: int = 0) -> bool:
        """Instant feedback: run the public checks of ``fn``'s task and show a diff table."""
        try:
            task = self.task_for(fn)
        except KeyError as err:
            print(f"check: {err.args[0]}")
            return False
        outcomes = self.run(fn, seed=seed)
        from torchcontracts.checks.display import show_outcomes

        show_outcomes(task, outcomes)
        return all(o.ok for o in outcomes)

    def verify_hidden(self, namespace: Mapping[str, Any]) -> None:
        """Assert that the reference solution passes every hidden check (solutions only).

        The grader execs hidden-check cells with ``__grading__ = True``; then this does nothing.
        """
        if namespace.get("__grading__"):
            return
        failures = []
        for task in self.tasks.values():
            fn = namespace.get(task.target)
            for c in self.checks_for(task.id, hidden=True):
                o = c.run_local(fn, seed=12345) if fn else None
                if o is None or not o.ok:
                    failures.append(f"{c.name}: {o.reason if o else 'function missing'}")
        assert not failures, "hidden checks fail on the reference: " + "; ".join(failures)
